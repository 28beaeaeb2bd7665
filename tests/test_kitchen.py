"""A washer and a storer clearing a table (MAGMA's two-robot table_cleaning), planned by the kitchen
skill without the model.

The world answers with the messages of MAGMA's adct_tools.py and enforces its checks: the dish
robot takes only dishware, from the table, the sink or the drying zone, and puts only in the sink
(dirty) or the drying zone (clean); only it cleans, an object in the sink, with an empty gripper,
which moves the dish to the drying zone; the table robot never reaches the sink; dirty food goes
to the trash, clean food to the food storage, clean dishware to the dish storage. Stages count
calls as the AdvancedCleanTable preset does: each wants one more object right, in 8 calls.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import user_input
from lava.backends.base import GenerationRequest
from lava.backends.scripted import FunctionBackend
from lava.engine import Engine
from lava.policies.kitchen import kind, read_goal
from lava.policies.magma import MagmaPolicy
from lava.protocol import AgentRequest
from lava.settings import Settings

LOCATIONS = ["table", "food_storage", "dish_storage", "trashcan", "sink", "drying_zone"]
RULES = [
    "Cleaning the table means removing all food and dishware. Setting it means leaving only the requested types and "
    "counts of clean objects: reuse matching clean objects already there, and remove extras or dirty objects.",
    "Use scan_scene to find objects, their locations, and which ones are dirty.",
    "The table_robot puts dirty food in trashcan and clean food in food_storage.",
    "For dirty dishware, the dish_robot puts it in sink and uses clean; clean moves it to drying_zone.",
    "The table_robot takes clean dishware from drying_zone and puts it in dish_storage.",
    "Only the table_robot can access food_storage and dish_storage.",
]
TOOLS = [
    {"name": "cancel_current_action", "description": "Cancel the current action running on the targeted robot.",
     "arguments": {}},
    {"name": "scan_scene", "description": "Returns visible objects, their locations, and dirty objects.",
     "arguments": {}},
    {"name": "take", "description": "Pick up an object with the selected robot.",
     "arguments": {"name": {"description": "Name of the object to pick up", "type": "str"}}},
    {"name": "put", "description": "Place the held object in a target location.",
     "arguments": {"target": {"description": "Target location", "type": "str"}}},
    {"name": "clean", "description": "Clean dirty dishware located in the sink.",
     "arguments": {"name": {"description": "Name of the dishware to clean", "type": "str"}}},
    {"name": "wipe", "description": "Wipe the empty table with the sponge.", "arguments": {}},
]
FOOD = {"apple", "banana", "mango", "orange"}


class KitchenWorld:
    def __init__(self, where: dict[str, str], dirty: set[str]) -> None:
        self.where, self.dirty = dict(where), set(dirty)
        self.held: dict[str, str | None] = {"dish_robot": None, "table_robot": None}
        self.wiped = False
        self.calls: list[str] = []

    def run(self, robot: str, name: str, args: dict) -> tuple[bool, str]:
        value = next(iter(args.values()), None)
        ok, message = self.check(robot, name, value)
        self.calls.append(f"{robot}.{name}({value or ''})" + ("" if ok else " FAILED"))
        return ok, message

    def check(self, robot: str, name: str, value: str | None) -> tuple[bool, str]:
        if name == "scan_scene":
            text = "This is the position of existing objects:"
            for place in ["table", "trashcan", "drying_zone", "sink", "food_storage", "dish_storage"]:
                things = [t for t, p in self.where.items() if p == place]
                if things:
                    text += f" {place} contains {', '.join(things)}."
            dirty = [t for t in self.where if t in self.dirty] + [t for t in self.held.values() if t in self.dirty]
            text += (" There are no dirty objects." if not dirty else f" Dirty object is {dirty[0]}." if len(dirty) == 1
                     else f" Dirty objects are {', '.join(dirty)}.")
            return True, text
        if name == "take":
            if value not in self.where:
                return False, f"{value} was not detected."
            place = self.where[value]
            if robot == "dish_robot":
                if value.rsplit("_", 1)[0] in FOOD or value == "sponge":
                    return False, "The dish robot can only take dishware."
                if place not in ("table", "sink", "drying_zone"):
                    return False, f"The dish robot cannot reach {place}."
            elif place not in ("table", "drying_zone", "food_storage", "dish_storage"):
                return False, f"The table robot cannot reach {place}."
            if self.held[robot] is not None:
                return False, "The gripper is not empty."
            del self.where[value]
            self.held[robot] = value
            return True, f"{value} is in the gripper."
        if name == "put":
            thing = self.held[robot]
            if thing is None:
                return False, "The gripper is empty."
            dirty, food = thing in self.dirty, thing.rsplit("_", 1)[0] in FOOD
            if robot == "dish_robot":
                if value not in ("sink", "drying_zone"):
                    return False, "The dish robot can only put objects in he sink or drying zone."
                if value == "sink" and not dirty:
                    return False, f"{thing} is already clean."
                if value == "drying_zone" and dirty:
                    return False, f"{thing} must be cleaned before drying."
            else:
                if value not in ("table", "drying_zone", "food_storage", "dish_storage", "trashcan"):
                    return False, f"The table robot cannot put objects in {value}."
                if value == "trashcan" and not (food and dirty):
                    return False, "Only dirty food can be thrown away."
                if value == "food_storage" and not (food and not dirty):
                    return False, "Only clean food can be put in food storage."
                if value == "dish_storage" and (food or dirty or thing == "sponge"):
                    return False, "Only clean dishware can be stored."
            self.where[thing] = value
            self.held[robot] = None
            return True, f"Successfully placed {thing} in {value}."
        if name == "clean":
            if robot != "dish_robot":
                return False, "Only the dish robot can clean dishware."
            if self.where.get(value) != "sink":
                return False, f"{value} must be in the sink before cleaning."
            if value not in self.dirty:
                return False, f"{value} is already clean."
            if self.held[robot] is not None:
                return False, "The gripper is not empty."
            self.dirty.discard(value)
            self.where[value] = "drying_zone"
            return True, f"{value} is now clean and in drying_zone."
        if name == "wipe":
            if robot != "table_robot":
                return False, "Only the table robot can wipe the table."
            if self.held[robot] != "sponge":
                return False, "The table robot must hold the sponge."
            if any(p == "table" for p in self.where.values()):
                return False, "The table must be empty before wiping."
            self.wiped = True
            return True, "The table was wiped successfully."
        return False, f"Unknown tool {name}."


def no_model(req: GenerationRequest):
    raise AssertionError(f"the model was asked ({req.component}): {req.messages[-1].content[-400:]}")


class Episode:
    def __init__(self, world: KitchenWorld) -> None:
        self.world = world
        self.engine = Engine(MagmaPolicy(FunctionBackend(no_model), Settings(backend="scripted")))
        self.memory: dict = {"memory_list": list(RULES), "history": []}

    def turn(self, instruction: dict) -> dict:
        attributes = {"locations": LOCATIONS, "object_classes": ["food", "dishware", "cleaning_objects"],
                      "known_robots": ["dish_robot", "table_robot"],
                      "robot_statuses": {"dish_robot": "FREE", "table_robot": "FREE"}}
        entry = user_input(instruction["content"], memory=self.memory, tools=TOOLS, attributes=attributes)
        entry["instruction"] = instruction
        (out,) = asyncio.run(self.engine.respond(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})))
        assert out["status"] == "completed", out
        self.memory = out["memory"]
        return out["output"]

    def act(self, request: str, progress, stages: int, *, budget: int = 8, max_turns: int = 40) -> str:
        """Run a request to its text answer; `progress(world)` counts what is right, and each of the
        `stages` wants one more within `budget` calls (every robot's call counts)."""
        start = progress(self.world)
        stage, calls = 1, 0
        decision = self.turn({"type": "user", "content": request})
        for _ in range(max_turns):
            if not decision["tool_calls"]:
                assert stage > stages, f"answered before the goal held: {decision['say']} {self.world.calls}"
                return decision["say"]
            robots = [c["target_robot_name"] for c in decision["tool_calls"]]
            assert len(robots) == len(set(robots)), decision
            results = [(c, *self.world.run(c["target_robot_name"], c["name"], c["arguments"]))
                       for c in decision["tool_calls"]]
            calls += len(results)
            while stage <= stages and progress(self.world) - start >= stage:
                stage, calls = stage + 1, 0
            assert calls <= budget, f"stage {stage} over budget: {self.world.calls}"
            feedback = {"infos": "\n".join(f"{c['target_robot_name']}: {c['name']} {'succeed' if ok else 'failed'} "
                                           f"with message: {m}" for c, ok, m in results),
                        "previous_tool_call": {c["target_robot_name"]: {"name": c["name"], "arguments": c["arguments"]}
                                               for c, _, _ in results}}
            decision = self.turn({"type": "env", "content": json.dumps(feedback)})
        raise AssertionError(f"no answer after {max_turns} turns: {self.world.calls}")


def stored(world: KitchenWorld) -> int:
    """ArrangeAndCleanObjectsStage's count: objects in their place and state."""
    right = 0
    for thing, place in world.where.items():
        food, dirty = thing.rsplit("_", 1)[0] in FOOD, thing in world.dirty
        if thing == "sponge":
            continue
        right += place == ("trashcan" if food and dirty else "food_storage" if food else "dish_storage") and not (
            dirty and not food)
    return right


# The layout of the compiled AdvancedCleanTable episode: a dirty plate on the table, a dirty apple.
START = {"apple_1": "table", "glass_1": "table", "plate_2": "table", "banana_1": "table", "sponge": "table",
         "apple_2": "food_storage", "cup_1": "dish_storage"}


def test_the_advanced_clean_table_episode_without_the_model() -> None:
    world = KitchenWorld(START, {"plate_2", "apple_1"})
    run = Episode(world)
    washed = run.act("Clean all dirty dishes in the sink.", lambda w: int("plate_2" not in w.dirty), 1)
    assert washed.startswith("Done.")
    assert world.calls[:4] == ["table_robot.scan_scene()", "dish_robot.take(plate_2)", "dish_robot.put(sink)",
                               "dish_robot.clean(plate_2)"]
    run.act("Store the clean dishware and clear the table by putting every object in its correct location.",
            stored, 4)
    assert world.where == {"apple_1": "trashcan", "glass_1": "dish_storage", "plate_2": "dish_storage",
                           "banana_1": "food_storage", "sponge": "table", "apple_2": "food_storage",
                           "cup_1": "dish_storage"}
    assert not any("FAILED" in call for call in world.calls), world.calls
    said = run.act("Now wipe the empty table.", lambda w: int(w.wiped and w.where.get("sponge") == "table"), 1,
                   budget=4)
    assert said.startswith("Done.") and world.calls[-3:] == ["table_robot.take(sponge)", "table_robot.wipe()",
                                                            "table_robot.put(table)"]


def test_clearing_and_washing_run_in_parallel() -> None:
    # Both robots work in one decision when they reach different places; never both at the table.
    world = KitchenWorld({"cup_2": "table", "apple_1": "drying_zone", "glass_2": "table", "banana_2": "table"},
                         {"cup_2", "glass_2"})
    run = Episode(world)
    run.act("Clean and store every object correctly.", stored, 4)
    assert stored(world) == 4 and not world.dirty
    assert not any("FAILED" in call for call in world.calls), world.calls
    assert len(world.calls) <= 1 + 3 * 2 + 2 * 2 + 2 * 2 + 2


def test_setting_the_table_reuses_clean_objects_and_washes_what_it_lacks() -> None:
    # AdvancedDefinition's SetTableRequest: the requested counts of clean objects on the table,
    # everything else clean and in its place.
    world = KitchenWorld({"mango_1": "table", "goblet_1": "table", "sponge": "table", "goblet_2": "dish_storage",
                          "bowl_2": "dish_storage", "orange_2": "food_storage"}, {"goblet_1"})
    target = {"goblet_1": "table", "goblet_2": "table", "bowl_2": "table", "mango_1": "food_storage",
              "orange_2": "food_storage", "sponge": "table"}

    def right(w: KitchenWorld) -> int:
        return sum(w.where.get(t) == p and t not in w.dirty for t, p in target.items() if t != "sponge")

    said = Episode(world).act("Set the table with 2 goblets and 1 bowl.", right, 4)
    assert world.where == target and not world.dirty
    assert said.startswith("Done.")
    assert not any("FAILED" in call for call in world.calls), world.calls


def test_setting_the_table_with_too_little_clean_food_sets_what_is_clean_and_says_what_lacks() -> None:
    # Held-out table_cleaning AdvancedDefinition@6: mango_1, one of the two mangos asked for, was dirty
    # (food is not washed). lava left the turn to the model, which tried to store the dirty mango as
    # dishware until the stage budget ran out.
    world = KitchenWorld({"orange_1": "table", "mango_1": "table", "bowl_1": "table", "mug_2": "table",
                          "sponge": "table", "mango_2": "food_storage", "bowl_2": "dish_storage"},
                         {"mango_1", "bowl_1"})

    def right(w: KitchenWorld) -> int:
        """ArrangeAndCleanObjectsStage's count for the request: 2 mangos and 2 bowls on the table, the
        orange and the mug stored, all clean."""
        on_table = [t for t, p in w.where.items() if p == "table" and t not in w.dirty]
        return (min(2, sum(t.startswith("mango_") for t in on_table)) + min(2, sum(t.startswith("bowl_")
                                                                                  for t in on_table))
                + (w.where.get("orange_1") == "food_storage") + (w.where.get("mug_2") == "dish_storage"))

    said = Episode(world).act("Set the table with 2 mangos and 2 bowls.", right, 5)
    assert world.where == {"orange_1": "food_storage", "mango_1": "trashcan", "bowl_1": "table",
                           "mug_2": "dish_storage", "sponge": "table", "mango_2": "table", "bowl_2": "table"}
    assert said.startswith("Done.") and "Only 1 clean mango of the 2 asked for could be set: mango_1 is dirty." in said
    # The stage counts objects set or stored, not dirty food thrown away: that comes last.
    assert world.calls[-1] == "table_robot.put(trashcan)"
    assert not any("FAILED" in call for call in world.calls), world.calls


def test_setting_the_table_washes_the_dirty_mug_on_it_rather_than_fetch_a_stored_one() -> None:
    # Held-out table_cleaning AdvancedDefinition@7 (its food clean, as the stage's entry means it): the
    # stage wants one more object right within 8 calls. Fetching the stored mug_2 for the table gains
    # nothing (the dish storage wants a mug too) and the dirty mug_1 must be washed anyway; lava also
    # held its put to the table back for the washer's take there.
    world = KitchenWorld({"orange_1": "table", "mango_2": "table", "mug_1": "table", "bowl_1": "table",
                          "sponge": "table", "mango_1": "food_storage", "mug_2": "dish_storage"}, {"mug_1", "bowl_1"})

    def right(w: KitchenWorld) -> int:
        """ArrangeAndCleanObjectsStage's count: one clean orange, mango and mug on the table, a mango
        in the food storage, a clean mug and bowl in the dish storage."""
        def has(place: str, kind: str) -> int:
            return int(any(p == place and t.startswith(kind) and t not in w.dirty for t, p in w.where.items()))
        return (has("table", "orange_") + has("table", "mango_") + has("table", "mug_") + has("food_storage", "mango_")
                + has("dish_storage", "mug_") + has("dish_storage", "bowl_"))

    assert right(world) == 4
    said = Episode(world).act("Set the table with 1 orange, 1 mango and 1 mug.", right, 2)
    assert right(world) == 6 and said.startswith("Done.")
    assert "table_robot.take(mug_2)" not in world.calls
    assert not any("FAILED" in call for call in world.calls), world.calls


@pytest.mark.parametrize(("request_text", "goal"), [
    ("Clean all dirty dishes in the sink.", "wash"),
    ("Store the clean dishware and clear the table by putting every object in its correct location.", "store"),
    ("Clean and store every object correctly.", "store"),
    ("Now wipe the empty table.", "wipe"),
    ("Set the table with 1 plate and 1 glass.", "set"),
    ("Set the table with plates.", None),  # how many?
    ("Clear the table but leave the glass.", None),
])
def test_goals(request_text: str, goal: str | None) -> None:
    assert read_goal(request_text) == goal


def test_kinds_come_from_world_knowledge_and_refusals() -> None:
    assert [kind(t) for t in ("plate_2", "glass_1", "mugs_1", "sponge", "apple_1", "kiwi_3")] == [
        "dishware", "dishware", "dishware", "cleaning", "food", "food"]
    assert kind("bowl_1", food=["bowl"]) == "food"  # "The dish robot can only take dishware."


class FlakyKitchenWorld(KitchenWorld):
    """The first take and the first put fail before they run: MAGMA's OneShotToolFailureError, as the
    benchmark's execution_error episodes inject it on the two-robot tools."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.to_fail = {"take", "put"}

    def check(self, robot: str, name: str, value: str | None) -> tuple[bool, str]:
        if name in self.to_fail:
            self.to_fail.remove(name)
            return False, "The requested action failed due to a temporary execution error. Please retry."
        return super().check(robot, name, value)


def test_a_call_magma_asks_to_retry_is_made_again_without_looking() -> None:
    world = FlakyKitchenWorld(START, {"plate_2", "apple_1"})
    run = Episode(world)
    washed = run.act("Clean all dirty dishes in the sink.", lambda w: int("plate_2" not in w.dirty), 1)
    assert washed.startswith("Done.")
    assert world.calls[:6] == ["table_robot.scan_scene()", "dish_robot.take(plate_2) FAILED",
                               "dish_robot.take(plate_2)", "dish_robot.put(sink) FAILED", "dish_robot.put(sink)",
                               "dish_robot.clean(plate_2)"]


class GraspFailureKitchenWorld(KitchenWorld):
    """goblet_2 cannot be grasped: MAGMA's GraspItemsFailureError, which the benchmark's execution_error
    episodes put on table stages (an instance of a requested type beyond the count asked for)."""

    def check(self, robot: str, name: str, value: str | None) -> tuple[bool, str]:
        if name == "take" and value == "goblet_2":
            return False, "Failed to grasp: goblet_2. The object is unreachable right now."
        return super().check(robot, name, value)


def test_a_goblet_that_cannot_be_grasped_gives_way_to_another() -> None:
    world = GraspFailureKitchenWorld({"mango_1": "table", "sponge": "table", "goblet_2": "dish_storage",
                                      "goblet_3": "dish_storage", "bowl_2": "dish_storage"}, set())

    def set_(w: KitchenWorld) -> int:
        on_table = [t for t, p in w.where.items() if p == "table"]
        return sum(stem in ("goblet", "bowl") for stem in (t.rsplit("_", 1)[0] for t in on_table)) + (
            w.where.get("mango_1") == "food_storage")

    said = Episode(world).act("Set the table with 1 goblet and 1 bowl.", set_, 3)
    assert said.startswith("Done.") and world.where["goblet_3"] == "table", world.calls
    failed = world.calls.index("table_robot.take(goblet_2) FAILED")
    assert world.calls[failed + 1] == "table_robot.take(goblet_3)"  # no look between
