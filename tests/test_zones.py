"""Two robots sharing zones (MAGMA's bi_robot_sorting), solved by the zones skill without the model.

The world below answers with the exact messages of MAGMA's brs_tools.py, checks every call of a
decision against the world as it was before the decision (as MAGMA does), and counts calls per
stage the way RecipeObjectsStage does: each stage wants one more object placed correctly (typed
counts, intact and damaged apart) and allows 8 robot calls.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from conftest import user_input
from lava.backends.base import GenerationRequest
from lava.backends.scripted import FunctionBackend
from lava.engine import Engine
from lava.policies.magma import MagmaPolicy
from lava.policies.zones import Reach, desired, plan_turn, read_goal, read_reach, read_report
from lava.protocol import AgentRequest
from lava.settings import Settings

ZONES = ["left_zone", "mutual_zone", "right_zone"]
KINDS = ["banana", "apple", "orange"]
ROBOTS = ["arm1", "arm2"]
CANCEL = {"name": "cancel_current_action", "description": "Cancel the current action running on the targeted robot.",
          "arguments": {}}
TOOLS = [
    CANCEL,
    {"name": "get_objects_state", "arguments": {},
     "description": "Return all known objects grouped by area and indicate which objects are damaged."},
    {"name": "deplace", "description": "Make the robot take the object and send it to area. The area and the object "
                                       "must be in the range of the robot or it will raise an error.",
     "arguments": {"object": {"description": "The name of the object to take", "type": "str"},
                   "target_area": {"description": "The target area where to depose the object.", "type": "str"}}},
]
# One MAGMA-GEN renaming (config.yaml of the scenario): other tool, parameter names and descriptions.
RENAMED = [
    CANCEL,
    {"name": "inspect_sorting_areas", "description": "Inspect every sorting zone and report damaged items.",
     "arguments": {}},
    {"name": "transfer_item", "description": "Transfer a specified object into the requested sorting zone.",
     "arguments": {"item": {"description": "Identifier of the item to transfer.", "type": "str"},
                   "destination": {"description": "Destination zone for the selected item.", "type": "str"}}},
]
ACCESS = ("Robot 1 has access to left area and mutual area. Robot 2 has access to right area and mutual area. "
          "Both robots can use the mutual area to transfer objects.")
DEFINITION_MEMORY = ["arm1 operates in left_zone, while arm2 operates in right_zone.",
                     "Objects transferred between left_zone and right_zone must pass through mutual_zone.",
                     "Only arm1 can inspect the sorting areas with get_objects_state."]
REPORT = ("This is the position of existing objects: banana_2, apple_1, apple_0 are in the right area. apple_2, "
          "orange_2 are in the left area. banana_0, banana_1, orange_1, orange_0 are in the mutual zone. "
          "Damaged objects: banana_2, apple_1, banana_0. ")


class BiWorld:
    """brs_tools.py's messages and checks; arm1 reaches left and mutual, arm2 right and mutual."""

    OUT = frozenset({("arm1", "right_zone"), ("arm2", "left_zone")})
    LABELS = (("right_zone", "are in the right area. "), ("left_zone", "are in the left area. "),
              ("mutual_zone", "are in the mutual zone. "))

    def __init__(self, zones: dict[str, list[str]], damaged: list[str], names: dict[str, str] | None = None) -> None:
        self.where = {thing: zone for zone, things in zones.items() for thing in things}
        self.damaged = list(damaged)
        self.names = names or {"observe": "get_objects_state", "move": "deplace", "object": "object",
                               "area": "target_area"}
        self.calls: list[str] = []

    def check(self, robot: str, name: str, arguments: dict) -> tuple[bool, str]:
        if name == self.names["observe"]:
            if robot != "arm1":
                return False, f"{robot} cannot inspect objects. Only arm1 has the object inspection skill."
            text = "This is the position of existing objects: "
            for zone, label in self.LABELS:
                things = [t for t, w in self.where.items() if w == zone]
                if things:
                    text += ", ".join(things) + " " + label
            if self.damaged:
                text += "Damaged objects: " + ", ".join(self.damaged) + ". "
            return True, text
        thing, area = arguments[self.names["object"]], arguments[self.names["area"]]
        if area not in ZONES:
            return False, f"You used an unknow area : {area}."
        if thing not in self.where:
            return False, f"You used an unknow object name : {thing}."
        if (robot, area) in self.OUT:
            return False, f"The area {area} is out of range for robot {robot}."
        if self.where[thing] == area:
            return False, f"{thing} is already in {area}."
        if (robot, self.where[thing]) in self.OUT:
            return False, f"Object {thing} is out of range for robot {robot}"
        return True, f"Successfully depose {thing} to {area}"

    def run(self, calls: list[dict]) -> str:
        """One decision: every call is checked against the world before any of them runs."""
        results = [(call, *self.check(call["target_robot_name"], call["name"], call["arguments"])) for call in calls]
        lines = []
        for call, ok, message in results:
            self.calls.append(f"{call['target_robot_name']}.{call['name']}({', '.join(call['arguments'].values())})"
                              + ("" if ok else " FAILED"))
            if ok and call["name"] == self.names["move"]:
                self.where[call["arguments"][self.names["object"]]] = call["arguments"][self.names["area"]]
            lines.append(f"{call['target_robot_name']}: {call['name']} {'succeed' if ok else 'failed'} with message: "
                         f"{message}")
        return json.dumps({"infos": "\n".join(lines), "previous_tool_call": {
            c["target_robot_name"]: {"name": c["name"], "arguments": c["arguments"]} for c in calls}})

    def typed(self, layout: dict[str, str] | None = None) -> Counter:
        """(zone, kind, damaged) -> count: what MAGMA's TypedPlacementGoal compares."""
        layout = layout if layout is not None else self.where
        return Counter((zone, thing.rsplit("_", 1)[0], thing in self.damaged) for thing, zone in layout.items())

    def correct(self, target: Counter) -> int:
        current = self.typed()
        return sum(min(current[key], count) for key, count in target.items())


def answer_questions(req: GenerationRequest):
    """The model only answers questions here; any other call fails the test."""
    if req.component == "commander" and '"say"' in json.dumps(req.json_schema) and "tool_calls" not in json.dumps(
            req.json_schema):
        return ['{"say": "I will check the areas."}'] * req.n
    raise AssertionError(f"the model was asked ({req.component}): {req.messages[-1].content[:300]}")


class Episode:
    def __init__(self, world: BiWorld, memory_list: list[str] | None = None, tools: list[dict] | None = None,
                 robots: list[str] | None = None) -> None:
        self.world = world
        self.robots = robots or ROBOTS
        self.tools = tools or TOOLS
        self.engine = Engine(MagmaPolicy(FunctionBackend(answer_questions), Settings(backend="scripted")))
        self.memory: dict = {"memory_list": memory_list or [], "history": []}

    def turn(self, instruction: dict) -> dict:
        entry = user_input(instruction["content"], memory=self.memory, tools=self.tools,
                           attributes={"known_robots": self.robots, "locations": ZONES, "object_classes": KINDS,
                                       "robot_statuses": {r: "FREE" for r in self.robots}})
        entry["instruction"] = instruction
        (out,) = asyncio.run(self.engine.respond(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})))
        assert out["status"] == "completed", out
        self.memory = out["memory"]
        return out["output"]

    def say(self, text: str) -> str:
        decision = self.turn({"type": "user", "content": text})
        assert not decision["tool_calls"], decision
        return decision["say"]

    def act(self, request: str, target: dict[str, str], *, budget: int = 8, max_turns: int = 20) -> list[int]:
        """Run one request to its text answer, counting calls per stage; returns the calls of each stage."""
        goal = self.world.typed(target)
        stage_n = self.world.correct(goal) + 1
        total = sum(goal.values())
        per_stage, calls = [], 0
        decision = self.turn({"type": "user", "content": request})
        for _ in range(max_turns):
            if not decision["tool_calls"]:
                assert stage_n > total, f"answered before the goal held: {decision['say']} {self.world.calls}"
                assert decision["say"].startswith("Done."), decision
                return per_stage
            robots = [c["target_robot_name"] for c in decision["tool_calls"]]
            assert len(robots) == len(set(robots)), decision  # one call per robot and decision
            feedback = self.world.run(decision["tool_calls"])
            calls += len(robots)
            while stage_n <= total and self.world.correct(goal) >= stage_n:
                per_stage.append(calls)
                stage_n, calls = stage_n + 1, 0
            assert calls <= budget, f"stage budget exceeded: {self.world.calls}"
            decision = self.turn({"type": "env", "content": feedback})
        raise AssertionError(f"no answer after {max_turns} turns: {self.world.calls}")


# -- the three episodes of the real benchmark ------------------------------------------------


def test_prepare_recipe_episode() -> None:
    # bi_robot_sorting-000: 0/3 before (the model tried apple_1 with arm1, then arm2 to the left zone).
    world = BiWorld({"left_zone": ["apple_2", "orange_2"],
                     "mutual_zone": ["banana_0", "banana_1", "orange_1", "orange_0"],
                     "right_zone": ["banana_2", "apple_1", "apple_0"]}, ["banana_2", "apple_1", "banana_0"])
    run = Episode(world)
    assert run.say(ACCESS).startswith("Understood")
    run.say("Which objects are damaged, and where are they located?")
    target = {"apple_2": "left_zone", "orange_2": "left_zone", "banana_1": "mutual_zone", "apple_0": "mutual_zone",
              "orange_1": "mutual_zone", "orange_0": "mutual_zone", "banana_2": "right_zone", "apple_1": "right_zone",
              "banana_0": "right_zone"}
    stages = run.act("Prepare the recipe in left_zone. The recipe must contain: 1 apple, 1 orange. Damaged objects "
                     "must be placed in right_zone. All remaining objects must be placed in mutual_zone.", target)
    assert world.calls == ["arm1.get_objects_state()", "arm2.deplace(apple_0, mutual_zone)",
                           "arm2.deplace(banana_0, right_zone)"]
    assert len(stages) == 2


def test_sort_by_type_episode_relays_through_the_mutual_zone() -> None:
    # bi_robot_sorting-001: the model tried deplace(object="banana") four times.
    world = BiWorld({"left_zone": ["banana_2", "banana_1", "banana_0", "apple_2", "orange_2"],
                     "mutual_zone": ["orange_1", "orange_0"], "right_zone": ["apple_1", "apple_0"]}, [])
    run = Episode(world)
    run.say(ACCESS)
    target = {**{f"banana_{i}": "left_zone" for i in range(3)}, **{f"apple_{i}": "right_zone" for i in range(3)},
              **{f"orange_{i}": "mutual_zone" for i in range(3)}}
    stages = run.act("Sort the fruits by type. Place all banana objects in left_zone. Place all apple objects in "
                     "right_zone. Place all orange objects in mutual_zone.", target)
    assert world.where == target
    assert world.calls[0] == "arm1.get_objects_state()" and len(world.calls) == 4  # look, 2 hops, 1 direct
    assert not any("FAILED" in c for c in world.calls)
    assert len(stages) == 2


def test_small_move_set_episode_with_a_priority_rule() -> None:
    # bi_robot_sorting-002 (SmallMoveSetDefinition seed 0): no access rule but the definition's memory.
    world = BiWorld({"left_zone": ["apple_0", "banana_2", "orange_2", "orange_0"],
                     "mutual_zone": ["orange_1", "apple_2", "banana_0"], "right_zone": ["banana_1", "apple_1"]},
                    ["orange_0", "banana_1"])
    run = Episode(world, memory_list=DEFINITION_MEMORY)
    first = dict(world.where, apple_1="mutual_zone")
    run.act("Perform the following fruit movements in any order: move 1 apple object from the right tray to the "
            "mutual tray. Only move intact objects.", first)
    assert world.calls == ["arm1.get_objects_state()", "arm2.deplace(apple_1, mutual_zone)"]
    run.say("Which objects are damaged?")
    run.say("Each time I ask you to sort fruits, always sort all apple objects first.")
    second = dict(world.where, apple_1="right_zone", banana_0="left_zone")
    run.act("Perform the following fruit movements in any order: move 1 apple object from the mutual tray to the "
            "right tray and move 1 banana object from the mutual tray to the left tray. Only move intact objects.",
            second)
    # No second look (lava tracked every move); the priority kind first, banana after.
    assert world.calls[2:] == ["arm2.deplace(apple_1, right_zone)", "arm1.deplace(banana_0, left_zone)"]


def test_scene_questions_are_answered_from_a_look_and_the_moves_since() -> None:
    # Held-out bi_robot_sorting (BiRobotSorting@12/@13/@18, SmallMoveSet@15/@16/@19): 5 of 7 questions
    # about the trays went to the model, which said "There are no objects currently in the left tray.",
    # "The banana and the orange are damaged." or the question back. MAGMA's question stages allow the
    # inspection tool before the answer (arm1 only); moves lava made since are tracked, not looked at.
    world = BiWorld({"left_zone": ["apple_0", "orange_1", "banana_1", "orange_0"],
                     "mutual_zone": ["apple_2", "apple_1"], "right_zone": ["banana_0", "banana_2", "orange_2"]},
                    ["apple_0", "banana_2"])
    run = Episode(world, memory_list=DEFINITION_MEMORY)

    def ask(question: str) -> str:
        decision = run.turn({"type": "user", "content": question})
        while decision["tool_calls"]:
            decision = run.turn({"type": "env", "content": world.run(decision["tool_calls"])})
        return decision["say"]

    # in the order of the task's object_classes, as MAGMA words it
    assert ask("What objects are currently in the left tray?") == \
        "The left tray contains 1 banana object, 1 apple object, and 2 orange objects."
    assert world.calls == ["arm1.get_objects_state()"]
    assert ask("Which objects are damaged?") == "The damaged objects are apple_0, banana_2."
    assert ask("In which tray are all apple objects located?") == \
        "The apple objects are not all in one tray: 1 in the left tray and 2 in the mutual tray."
    run.act("Perform the following fruit movements in any order: move 1 banana object from the left tray to the "
            "mutual tray. Only move intact objects.", dict(world.where, banana_1="mutual_zone"))
    assert ask("What objects are currently in the left tray?") == \
        "The left tray contains 1 apple object and 2 orange objects."
    assert ask("In which tray are all orange objects located?") == \
        "The orange objects are not all in one tray: 2 in the left tray and 1 in the right tray."
    run.act("Perform the following fruit movements in any order: move 1 banana object from the mutual tray to the "
            "right tray. Only move intact objects.", dict(world.where, banana_1="right_zone"))
    assert ask("In which tray are all banana objects located?") == "All banana objects are in the right tray."
    assert world.calls.count("arm1.get_objects_state()") == 1


def test_damaged_objects_moved_by_the_robots_the_user_names() -> None:
    # MAGMA's TestSortDamagedObjectsPreset, no rules: the robot sentence sent the request to the
    # model, which moved banana_0 and then tried to move it again until the budget ran out.
    world = BiWorld({"left_zone": ["banana_0", "banana_1", "apple_1", "orange_0"], "mutual_zone": ["orange_2"],
                     "right_zone": ["apple_0", "banana_2", "apple_2", "orange_1"]}, ["banana_0", "apple_0"])
    run = Episode(world)
    target = dict(world.where, banana_0="mutual_zone", apple_0="mutual_zone")
    run.act("Place all damaged objects in the mutual zone. Use arm1 for the damaged object in the left zone and "
            "arm2 for the damaged object in the right zone.", target, budget=6)
    assert world.where == target
    assert world.calls[0] == "arm1.get_objects_state()"
    assert sorted(world.calls[1:]) == ["arm1.deplace(banana_0, mutual_zone)", "arm2.deplace(apple_0, mutual_zone)"]


def test_the_user_naming_a_robot_for_a_zone_decides_who_moves_from_it() -> None:
    # Without rules every robot is first believed to reach every zone: arm1 would be picked for both.
    reach = Reach(ROBOTS, ZONES, {})
    where = {"apple_0": "right_zone", "banana_0": "left_zone"}
    want = {"apple_0": "mutual_zone", "banana_0": "mutual_zone"}
    calls = plan_turn(["apple_0"], where, want, reach, ROBOTS, {"right_zone": "arm2"})
    assert calls == [("arm2", "apple_0", "mutual_zone")]
    assert plan_turn(["apple_0"], where, want, reach, ["arm1"], {"right_zone": "arm2"}) == []  # arm2 is busy


def test_a_renamed_tool_set_and_no_rules_still_solve_the_sort() -> None:
    # MAGMA-GEN renames tools and parameters; without any rule the skill learns reach from refusals.
    names = {"observe": "inspect_sorting_areas", "move": "transfer_item", "object": "item", "area": "destination"}
    world = BiWorld({"left_zone": ["banana_2", "banana_1", "banana_0", "apple_2", "orange_2"],
                     "mutual_zone": ["orange_1", "orange_0"], "right_zone": ["apple_1", "apple_0"]}, [], names)
    run = Episode(world, tools=RENAMED)
    target = {**{f"banana_{i}": "left_zone" for i in range(3)}, **{f"apple_{i}": "right_zone" for i in range(3)},
              **{f"orange_{i}": "mutual_zone" for i in range(3)}}
    run.act("Sort all fruits by type: place all banana objects in the left tray, place all apple objects in the right "
            "tray, and place all orange objects in the mutual tray.", target)
    assert world.where == target
    assert sum("FAILED" in c for c in world.calls) <= 2


def test_a_refused_look_moves_to_the_robot_named_in_the_refusal() -> None:
    # The robots listed the other way round and no rule about looking: arm2 is asked first.
    world = BiWorld({"left_zone": ["banana_0", "apple_0"], "mutual_zone": [], "right_zone": []}, [])
    run = Episode(world, robots=["arm2", "arm1"])
    run.say(ACCESS)
    run.act("Place all apple objects in the mutual tray.", {"banana_0": "left_zone", "apple_0": "mutual_zone"})
    assert world.calls == ["arm2.get_objects_state() FAILED", "arm1.get_objects_state()",
                           "arm1.deplace(apple_0, mutual_zone)"]


def test_unknown_phrasing_goes_to_the_model() -> None:
    asked = []

    def model(req: GenerationRequest):
        asked.append(req.component)
        return ['{"say": "I cannot do that."}'] * req.n

    world = BiWorld({"left_zone": ["apple_0", "apple_1"], "mutual_zone": [], "right_zone": []}, [])
    run = Episode(world)
    run.engine = Engine(MagmaPolicy(FunctionBackend(model), Settings(backend="scripted")))
    decision = run.turn({"type": "user", "content": "Leave 1 apple in the left tray and give the rest away."})
    if decision["tool_calls"]:  # it may look first; after that it is the model's turn
        decision = run.turn({"type": "env", "content": world.run(decision["tool_calls"])})
    assert asked and decision["say"] == "I cannot do that."


# -- the readers and the planner, from the real trace strings --------------------------------


def test_the_area_report_is_read_with_damaged_flags() -> None:
    where, damaged = read_report(REPORT, ZONES)
    assert where == {"banana_2": "right_zone", "apple_1": "right_zone", "apple_0": "right_zone",
                     "apple_2": "left_zone", "orange_2": "left_zone", "banana_0": "mutual_zone",
                     "banana_1": "mutual_zone", "orange_1": "mutual_zone", "orange_0": "mutual_zone"}
    assert damaged == ["banana_2", "apple_1", "banana_0"]
    assert read_report("The action has completed.", ZONES) is None


@pytest.mark.parametrize("rules", [[ACCESS], DEFINITION_MEMORY])
def test_reach_is_read_from_either_rule_wording(rules: list[str]) -> None:
    assert read_reach(rules, ROBOTS, ZONES) == {"arm1": ["left_zone", "mutual_zone"],
                                                "arm2": ["mutual_zone", "right_zone"]}


@pytest.mark.parametrize(("request_text", "expected"), [
    ("Prepare the recipe in left_zone. The recipe must contain: 2 apple, 1 orange. Damaged objects must be placed in "
     "right_zone. All remaining objects must be placed in mutual_zone.",
     {"quotas": [("left_zone", "apple", 2), ("left_zone", "orange", 1)], "damaged_to": "right_zone",
      "rest_to": "mutual_zone"}),
    ("Move 1 apple object from the right tray to the mutual tray, then move 1 banana object from the mutual tray to "
     "the left tray. Only move intact objects.",
     {"moves": [(1, "apple", "right_zone", "mutual_zone"), (1, "banana", "mutual_zone", "left_zone")],
      "ordered": True, "intact_only": True}),
    ("Place all damaged objects in the mutual tray.", {"damaged_to": "mutual_zone"}),
    ("Place all damaged objects in the mutual zone. Use arm1 for the damaged object in the left zone and arm2 for "
     "the damaged object in the right zone.",
     {"damaged_to": "mutual_zone", "movers": {"left_zone": "arm1", "right_zone": "arm2"}}),
    ("Place all damaged objects in the mutual zone. Use robot 2 for those in the right area, robot 1 for the ones "
     "on the left tray.", {"damaged_to": "mutual_zone", "movers": {"right_zone": "arm2", "left_zone": "arm1"}}),
    ("Move seven apple objects from the right tray to the mutual tray.",  # counts past six (goals.NUMBER)
     {"moves": [(7, "apple", "right_zone", "mutual_zone")]}),
    ("Sort all fruits by type: place all banana objects in the left tray, place all apple objects in the mutual "
     "tray, and place all orange objects in the right tray.",
     {"assign": {"banana": "left_zone", "apple": "mutual_zone", "orange": "right_zone"}}),
])
def test_request_forms(request_text: str, expected: dict) -> None:
    goal = read_goal(request_text, ZONES, KINDS, ROBOTS)
    assert goal is not None
    for key, value in expected.items():
        assert getattr(goal, key) == value


@pytest.mark.parametrize("request_text", [
    "Leave 1 apple in the left tray and sort the rest.",
    "Put the fruits somewhere nice.",
    "Move 1 pear object from the right tray to the mutual tray.",
    "Place all damaged objects in the mutual zone. Use arm3 for the damaged object in the left zone.",  # no arm3
])
def test_requests_not_understood(request_text: str) -> None:
    assert read_goal(request_text, ZONES, KINDS, ROBOTS) is None


def test_the_recipe_takes_the_objects_already_in_place_and_moves_the_fewest() -> None:
    where, damaged = read_report(REPORT, ZONES)
    reach = Reach(ROBOTS, ZONES, {"reach": read_reach([ACCESS], ROBOTS, ZONES)})
    goal = read_goal("Prepare the recipe in left_zone. The recipe must contain: 1 apple, 1 orange. Damaged objects "
                     "must be placed in right_zone. All remaining objects must be placed in mutual_zone.", ZONES, KINDS)
    want, order = desired(goal, where, damaged, reach)
    moves = {t: z for t, z in want.items() if where[t] != z}
    assert moves == {"apple_0": "mutual_zone", "banana_0": "right_zone"} and order == []


def test_one_turn_moves_in_parallel_and_relays_what_no_robot_reaches() -> None:
    reach = Reach(ROBOTS, ZONES, {"reach": read_reach([ACCESS], ROBOTS, ZONES)})
    where = {"apple_2": "left_zone", "banana_1": "right_zone", "orange_0": "left_zone"}
    want = {"apple_2": "right_zone", "banana_1": "left_zone", "orange_0": "mutual_zone"}
    calls = plan_turn(sorted(want), where, want, reach, ROBOTS)
    assert sorted(calls) == [("arm1", "apple_2", "mutual_zone"), ("arm2", "banana_1", "mutual_zone")]


def test_refusals_teach_reach() -> None:
    reach = Reach(ROBOTS, ZONES, {"unreachable": {"arm1": ["right_zone"], "arm2": ["left_zone"]}})
    assert reach.cost("left_zone", "right_zone") == 2
    assert reach.options("arm1", "left_zone", "right_zone") == "mutual_zone"
    assert reach.options("arm2", "left_zone", "right_zone") is None


def test_ordered_moves_are_made_one_after_the_other_relaying_when_needed() -> None:
    # MoveFruitSequence: each stage wants the moves so far and no other, so nothing runs ahead.
    world = BiWorld({"left_zone": ["apple_0", "banana_2"], "mutual_zone": ["banana_0"], "right_zone": ["apple_1"]},
                    ["banana_2"])
    run = Episode(world, memory_list=DEFINITION_MEMORY)
    run.act("Move 1 apple object from the left tray to the right tray, then move 1 banana object from the mutual "
            "tray to the left tray. Only move intact objects.",
            {"apple_0": "right_zone", "banana_2": "left_zone", "banana_0": "left_zone", "apple_1": "right_zone"})
    assert world.calls == ["arm1.get_objects_state()", "arm1.deplace(apple_0, mutual_zone)",
                           "arm2.deplace(apple_0, right_zone)", "arm1.deplace(banana_0, left_zone)"]


def test_forgetting_a_priority_rule_keeps_what_the_robots_reach() -> None:
    # "Forget the rule ..." empties the task state's rules, the access rule with them; the skill's
    # notes keep the reach, so no call is refused afterwards.
    world = BiWorld({"left_zone": ["apple_0", "banana_0"], "mutual_zone": [], "right_zone": ["banana_1"]}, [])
    run = Episode(world)
    run.say(ACCESS)
    run.say("Each time I ask you to sort fruits, always sort all banana objects first.")
    run.act("Place all damaged objects in the mutual tray. Place all banana objects in the right tray.",
            {"apple_0": "left_zone", "banana_0": "right_zone", "banana_1": "right_zone"})
    run.say("Forget the rule requiring all banana objects to be sorted first.")
    run.act("Place all apple objects in the right tray.",
            {"apple_0": "right_zone", "banana_0": "right_zone", "banana_1": "right_zone"})
    assert not any("FAILED" in c for c in world.calls)
    assert world.calls[-2:] == ["arm1.deplace(apple_0, mutual_zone)", "arm2.deplace(apple_0, right_zone)"]


class FlakyBiWorld(BiWorld):
    """Calls fail before they run while `to_fail` lasts, as MAGMA's OneShotToolFailureError makes them in
    the benchmark's execution_error episodes (one failure per stage; a stage may meet several)."""

    def __init__(self, *args, to_fail: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.to_fail = list(to_fail)

    def check(self, robot: str, name: str, arguments: dict) -> tuple[bool, str]:
        if name in self.to_fail:
            self.to_fail.remove(name)
            return False, "The requested action failed due to a temporary execution error. Please retry."
        return super().check(robot, name, arguments)


def test_calls_magma_asks_to_retry_are_made_again_and_teach_nothing() -> None:
    # A look asked to be retried is no refusal to look, and moves asked to be retried are no refusal
    # lava cannot explain: none of them hands the sort to the model.
    world = FlakyBiWorld({"left_zone": ["banana_0", "apple_0"], "mutual_zone": [], "right_zone": []}, [],
                         to_fail=["get_objects_state", "deplace", "deplace", "deplace"])
    run = Episode(world)
    run.say(ACCESS)
    run.act("Place all apple objects in the mutual tray.", {"banana_0": "left_zone", "apple_0": "mutual_zone"})
    assert world.calls == ["arm1.get_objects_state() FAILED", "arm1.get_objects_state()",
                           *["arm1.deplace(apple_0, mutual_zone) FAILED"] * 3, "arm1.deplace(apple_0, mutual_zone)"]


class GraspFailureBiWorld(BiWorld):
    """A damaged object that cannot be grasped for a while: MAGMA's RequestedObjectGraspFailureError on
    the damaged-objects stages (every damaged object but one, the first named among them; each stage
    draws anew)."""

    def __init__(self, *args, inaccessible: dict[str, int], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.inaccessible = dict(inaccessible)  # object -> refusals left

    def check(self, robot: str, name: str, arguments: dict) -> tuple[bool, str]:
        thing = arguments.get(self.names["object"])
        if name == self.names["move"] and self.inaccessible.get(thing, 0) > 0:
            self.inaccessible[thing] -= 1
            return False, f"Failed to grasp: {thing}. The object is unreachable right now."
        return super().check(robot, name, arguments)


def test_a_damaged_object_that_cannot_be_grasped_waits_while_another_is_moved() -> None:
    world = GraspFailureBiWorld({"left_zone": ["apple_0", "banana_0", "orange_0"], "mutual_zone": [],
                                 "right_zone": ["banana_1"]}, ["apple_0", "banana_0"], inaccessible={"apple_0": 1})
    run = Episode(world)
    run.say(ACCESS)
    target = dict(world.where, apple_0="mutual_zone", banana_0="mutual_zone")
    run.act("Place all damaged objects in the mutual zone.", target, budget=6)
    assert world.calls == ["arm1.get_objects_state()", "arm1.deplace(apple_0, mutual_zone) FAILED",
                           "arm1.deplace(banana_0, mutual_zone)", "arm1.deplace(apple_0, mutual_zone)"]
