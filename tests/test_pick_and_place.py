"""Pick-and-place requests solved from the task state, against a small cube world that answers like
MAGMA's color_sorting tools (messages copied from real MAGMA-BENCH traces).

The model must not be needed for these request forms: a backend that fails the test if called
stands at the seam, except where a test says otherwise.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import user_input
from lava.backends.base import GenerationRequest
from lava.backends.scripted import FunctionBackend
from lava.engine import Engine
from lava.policies.goals import next_step, place_named, read_goal, targets, words
from lava.policies.magma import MagmaPolicy
from lava.policies.scene import read_scene
from lava.protocol import AgentRequest
from lava.settings import Settings

TOOLS = [
    {"name": "put", "description": "Put the held cube on the table or in a color tray.",
     "arguments": {"target": {"description": "Use table or a tray name such as white_tray.", "type": "str"}}},
    {"name": "get_objects_state", "description": "Return the description and position of all detected objects.",
     "arguments": {}},
    {"name": "take", "description": "Take an object by its name.",
     "arguments": {"name": {"description": "The name of the object to take.", "type": "str"}}},
]


class CubeWorld:
    """Trays and a table; take and put one cube at a time, like instance_cs_tool."""

    def __init__(self, places: dict[str, list[str]]) -> None:
        self.places = {k: list(v) for k, v in places.items()}
        self.held: str | None = None
        self.calls: list[str] = []

    def state(self) -> str:
        parts = [f"{place} contains {', '.join(things) if things else 'no cube'}." for place, things in
                 self.places.items()]
        return " ".join(parts)

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        self.calls.append(f"{name}({', '.join(map(str, arguments.values()))})")
        if name == "get_objects_state":
            return True, self.state()
        if name == "take":
            cube = arguments["name"]
            for things in self.places.values():
                if cube in things:
                    things.remove(cube)
                    self.held = cube
                    return True, f"You have {cube} in your gripper."
            return False, f"There is no cube instance named {cube}."
        target = arguments["target"]
        if self.held is None or target not in self.places:
            return False, f"There is no location named {target}."
        self.places[target].append(self.held)
        cube, self.held = self.held, None
        return True, f"Successfuly sent {cube} to {target}"


def no_model(req: GenerationRequest):
    raise AssertionError(f"the model was asked ({req.component}): {req.messages[-1].content[:300]}")


def episode(world: CubeWorld, request: str, *, memory_list: list[str] | None = None, respond=no_model,
            max_turns: int = 30) -> tuple[str, dict]:
    """Run one request to its text answer; returns (the answer, the final memory)."""
    eng = Engine(MagmaPolicy(FunctionBackend(respond), Settings(backend="scripted")))
    memory: dict = {"memory_list": memory_list or [], "history": []}
    instruction = {"type": "user", "content": request}
    for _ in range(max_turns):
        entry = user_input(instruction["content"], memory=memory, tools=TOOLS,
                           attributes={"known_tray_color": ["white", "red"], "known_robots": ["panda"],
                                       "robot_statuses": {"panda": "FREE"}})
        entry["instruction"] = instruction
        (out,) = asyncio.run(eng.respond(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})))
        assert out["status"] == "completed", out
        memory = out["memory"]
        decision = out["output"]
        if not decision["tool_calls"]:
            return decision["say"], memory
        (call,) = decision["tool_calls"]
        ok, message = world.run(call["name"], call["arguments"])
        verb = "succeed" if ok else "failed"
        infos = f"{call['target_robot_name']}: {call['name']} {verb} with message: {message}"
        instruction = {"type": "env", "content": json.dumps({
            "infos": infos, "previous_tool_call": {call["target_robot_name"]: {"name": call["name"],
                                                                   "arguments": call["arguments"]}}})}
    raise AssertionError(f"no answer after {max_turns} turns: {world.calls}")


def mixed() -> CubeWorld:
    # color_sorting-002 of a real run: the 0.5B model moved white_cube_1 into the tray and lost the stage.
    return CubeWorld({"table": ["white_cube_1", "red_cube_1", "red_cube_2"],
                      "white_tray": ["white_cube_2", "white_cube_3", "white_cube_4", "red_cube_3", "red_cube_4"],
                      "red_tray": []})


def test_sorting_looks_once_then_moves_only_misplaced_cubes() -> None:
    world = mixed()
    answer, memory = episode(world, "Sort all cubes by color. Each cube must be placed in the tray matching its "
                                    "color. Use the detection function to obtain information about objects.")
    assert world.places == {"table": [], "white_tray": ["white_cube_2", "white_cube_3", "white_cube_4", "white_cube_1"],
                            "red_tray": ["red_cube_1", "red_cube_2", "red_cube_3", "red_cube_4"]}
    # One look, then exactly two calls per misplaced cube: nothing wasted against a stage budget.
    assert world.calls[0] == "get_objects_state()" and len(world.calls) == 1 + 2 * 5
    assert answer.startswith("Done.")
    assert memory["lava"]["task"]["scene"] == world.places


def test_an_exception_in_the_request_is_kept_with_the_fewest_moves() -> None:
    world = mixed()
    episode(world, "Please sort all the cubes by color: put each cube in the tray matching its color. "
                   "Leave 2 white cubes on the table.")
    assert sorted(world.places["table"]) == ["white_cube_1", "white_cube_2"]
    assert sorted(world.places["red_tray"]) == ["red_cube_1", "red_cube_2", "red_cube_3", "red_cube_4"]
    assert "take(white_cube_1)" not in world.calls  # already where the exception wants it
    assert len(world.calls) == 1 + 2 * 5


def test_a_cube_kept_on_the_table_is_one_that_had_to_move_anyway() -> None:
    # Held-out color_sorting SortingDefinition@10: lava left blue_cube_2 on the table, taking it from the
    # blue tray where it already belonged; the stage's count did not move and its budget ran out.
    world = CubeWorld({"table": ["blue_cube_1"],
                       "blue_tray": ["blue_cube_2", "blue_cube_3", "green_cube_1", "green_cube_2", "green_cube_3"],
                       "green_tray": ["blue_cube_4", "green_cube_4"]})
    episode(world, "Please sort all the cubes by color: put each cube in the tray matching its color. "
                   "Leave 2 blue cubes on the table.")
    assert {place: sorted(cubes) for place, cubes in world.places.items()} == {
        "table": ["blue_cube_1", "blue_cube_4"], "blue_tray": ["blue_cube_2", "blue_cube_3"],
        "green_tray": ["green_cube_1", "green_cube_2", "green_cube_3", "green_cube_4"]}
    assert "take(blue_cube_2)" not in world.calls and len(world.calls) == 1 + 2 * 4


def test_explicit_moves_are_done_in_order_with_real_cube_names() -> None:
    # color_sorting-003 of a real run: the model tried take(name="yellow") and never looked.
    world = CubeWorld({"table": ["blue_cube_1"], "yellow_tray": ["yellow_cube_1", "blue_cube_2", "yellow_cube_2"],
                       "blue_tray": ["blue_cube_3"]})
    answer, _ = episode(world, "Complete these moves in this exact order: First, move one yellow cube from the "
                               "yellow tray to the table. Then, move one blue cube from the table to the blue tray. "
                               "Finally, move one blue cube from the yellow tray to the blue tray.")
    assert world.calls == ["get_objects_state()", "take(yellow_cube_1)", "put(table)", "take(blue_cube_1)",
                           "put(blue_tray)", "take(blue_cube_2)", "put(blue_tray)"]
    assert answer.startswith("Done.")


def test_a_priority_rule_in_memory_orders_the_sort_until_it_is_forgotten() -> None:
    rule = "Each time I ask you to sort cubes, you must always sort all red cubes first."
    world = mixed()
    episode(world, "Sort all cubes by color: put each cube in the tray matching its color.", memory_list=[rule])
    takes = [c for c in world.calls if c.startswith("take")]
    assert takes[:4] == ["take(red_cube_1)", "take(red_cube_2)", "take(red_cube_3)", "take(red_cube_4)"]
    world = mixed()
    episode(world, "Sort all cubes by color: put each cube in the tray matching its color.",
            memory_list=[rule, "Forget about always sorting red cubes first."])
    assert world.calls[1] == "take(white_cube_1)"


def test_a_refused_take_makes_the_agent_look_again_instead_of_repeating_it() -> None:
    world = mixed()
    eng_calls = []
    real_run = world.run

    def run(name: str, arguments: dict) -> tuple[bool, str]:
        eng_calls.append(name)
        if name == "take" and eng_calls.count("take") == 1:
            world.calls.append(f"take({arguments['name']})")
            return False, "The grasp failed."  # the scene did not change; the agent must not assume it did
        return real_run(name, arguments)

    world.run = run  # type: ignore[method-assign]
    episode(world, "Sort all cubes by color: put each cube in the tray matching its color.")
    assert world.calls[:3] == ["get_objects_state()", "take(white_cube_1)", "get_objects_state()"]
    assert world.places["table"] == []


def test_requests_outside_the_known_forms_go_to_the_model() -> None:
    asked = []

    def commander(req: GenerationRequest):
        asked.append(req.component)
        return ['{"say": "I cannot do that."}'] * req.n

    world = mixed()
    answer, _ = episode(world, "Arrange the cubes so each tray holds the cubes of the other tray's color.",
                        respond=commander)
    assert world.calls == ["get_objects_state()"]  # it still looks before anything else
    assert asked and answer == "I cannot do that."


@pytest.mark.parametrize(("phrase", "expected"), [
    ("the yellow tray", "yellow_tray"), ("table", "table"), ("the blue trays", "blue_tray"), ("the shelf", None),
])
def test_place_phrases_resolve_to_reported_places(phrase: str, expected: str | None) -> None:
    assert place_named(phrase, ["table", "yellow_tray", "blue_tray"]) == expected


def test_goal_reading_and_next_steps_are_pure() -> None:
    scene = read_scene("table contains white_cube_1, red_cube_1. white_tray contains red_cube_2. red_tray contains "
                       "no cube.")
    assert scene == {"table": ["white_cube_1", "red_cube_1"], "white_tray": ["red_cube_2"], "red_tray": []}
    assert read_scene("The action has completed.") is None
    goal = read_goal("Sort the cubes by color. Leave 1 red cube on the table.", [], scene)
    assert goal is not None and goal.sort and goal.keep == [(1, frozenset({"red", "cube"}), "table")]
    assert targets(goal, scene, None) == {"white_cube_1": "white_tray", "red_cube_1": "table", "red_cube_2": "red_tray"}
    assert next_step(goal, scene, None, 0, set()).value == "white_cube_1"
    assert next_step(goal, scene, "white_cube_1", 0, set()).value == "white_tray"
    assert read_goal("Swap the cubes between the trays so they are sorted the opposite way.", [], scene) is None
    assert read_goal("Move two red cubes from the garage to the table.", [], scene) is None  # unknown place
    assert words("Boxes of glasses") == {"box", "glass"}


COLOR_TOOLS = [
    {"name": "get_objects_state", "description": "Return the description and position of all detected objects.",
     "arguments": {}},
    {"name": "take", "description": "Take a cube of a given color from a location.",
     "arguments": {"obj_color": {"description": "The color of the cube to take.", "type": "str"},
                   "source": {"description": "The location containing the cube.", "type": "str"}}},
    {"name": "put", "description": "Put the held cube on the table or in a color tray.",
     "arguments": {"target": {"description": "Use table or a tray name such as white_tray.", "type": "str"}}},
]
COLORS = {"known_tray_color": ["white", "green"], "known_robots": ["panda"], "robot_statuses": {"panda": "FREE"}}


def turn_in(eng: Engine, tools: list, instruction: dict, memory: dict, attributes: dict | None = None) -> dict:
    """One greedy decision (as MAGMA-BENCH asks) for one input."""
    entry = user_input(instruction["content"], memory=memory, tools=tools,
                       attributes=attributes or {"known_robots": ["panda"]}, extra_keys={"inference_mode": True})
    entry["instruction"] = instruction
    (out,) = asyncio.run(eng.respond(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})))
    return out


def turn(eng: Engine, instruction: dict, memory: dict) -> dict:
    return turn_in(eng, COLOR_TOOLS, instruction, memory, COLORS)


def feedback(robot: str, name: str, arguments: dict, ok: bool, message: str) -> dict:
    verb = "succeed" if ok else "failed"
    return {"type": "env", "content": json.dumps({
        "infos": f"{robot}: {name} {verb} with message: {message}",
        "previous_tool_call": {robot: {"name": name, "arguments": arguments}}})}


def test_any_failed_call_is_followed_by_a_look_and_locations_take_reported_places() -> None:
    # color_sorting-001 of a real run: take(obj_color=white, source=white) failed three times in a row.
    schemas = []

    def commander(req: GenerationRequest):
        schemas.append(req.json_schema)
        return ['{"tool_calls": [{"robot": "panda", "name": "take", '
                '"arguments": {"obj_color": "white", "source": "white"}}]}'] * req.n

    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    # (The real run's request, opposite groups, is now the cubes skill's; this one is the model's.)
    request = "Move one green cube from the white tray to the table."
    out = turn(eng, {"type": "user", "content": request}, {"history": []})
    assert out["output"]["tool_calls"][0]["name"] == "get_objects_state"  # it looks before guessing names
    out = turn(eng, feedback("panda", "get_objects_state", {}, True,
                             "table contains 1 white cube, 1 green cube. white_tray contains 3 green cubes. "
                             "green_tray contains 2 white cubes, 1 green cube."), out["memory"])
    take = out["output"]["tool_calls"][0]
    assert take["name"] == "take"
    sources = json.dumps(schemas[-1])
    assert '"enum": ["table", "white_tray", "green_tray"]' in sources  # a colour is not a location
    assert '"say"' not in sources  # only looked so far: reporting "done" now would be premature
    out = turn(eng, feedback("panda", "take", take["arguments"], False, "There is no location named white."),
               out["memory"])
    assert out["output"]["tool_calls"][0]["name"] == "get_objects_state"  # look again, do not repeat
    assert len(schemas) == 1


def test_the_call_that_just_failed_is_not_proposed_again() -> None:
    failed = {"robot": "panda", "name": "take", "arguments": {"obj_color": "white", "source": "table"}}

    def commander(req: GenerationRequest):
        return [json.dumps({"tool_calls": [failed]})] * req.n

    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    # Three failures in a row: lava stops forcing looks and lets the model choose, but never the same call.
    memory = {"history": [], "lava": {"task": {"intent": "act", "request": "Move the cubes.", "failures_in_row": 2,
                                               "observations": ["get_objects_state: table contains 1 white cube."],
                                               "pending": [failed]}}}
    out = turn(eng, feedback("panda", "take", failed["arguments"], False, "The grasp failed."), memory)
    assert out["output"]["tool_calls"][0]["name"] == "get_objects_state"


def test_a_refused_call_is_shown_and_redrawn_after_the_look() -> None:
    refused = {"robot": "panda", "name": "take", "arguments": {"obj_color": "white", "source": "white_tray"}}
    better = {"robot": "panda", "name": "take", "arguments": {"obj_color": "white", "source": "green_tray"}}
    requests = []

    def commander(req: GenerationRequest):
        requests.append(req)
        if req.greedy:
            return [json.dumps({"tool_calls": [refused]})] * req.n  # what greedy decoding keeps choosing
        return ([json.dumps({"tool_calls": [refused]}), json.dumps({"tool_calls": [better]})] * req.n)[:req.n]

    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    memory = {"history": [], "lava": {"task": {"intent": "act", "request": "Move the cubes.",
                                               "observations": ["get_objects_state: table contains 1 white cube."],
                                               "pending": [refused]}}}
    out = turn(eng, feedback("panda", "take", refused["arguments"], False,
                             "There is no white cube instance in white_tray."), memory)
    look = out["output"]["tool_calls"][0]
    assert look["name"] == "get_objects_state" and not requests
    out = turn(eng, feedback("panda", "get_objects_state", {}, True,
                             "table contains no cube. green_tray contains 2 white cubes."), out["memory"])
    assert out["output"]["tool_calls"][0] == {"name": "take", "arguments": better["arguments"],
                                              "target_robot_name": "panda"}
    assert "panda.take(obj_color=white, source=white_tray): There is no white cube instance in white_tray." in \
        requests[0].messages[-1].content
    assert [r.greedy for r in requests] == [True, False]


STORAGE_TOOLS = [
    {"name": "detect", "description": "Detect the objects and where they are.", "arguments": {}},
    {"name": "take", "description": "Take an object.", "arguments": {"name": {"type": "str"}}},
    {"name": "put", "description": "Put the held object somewhere.",
     "arguments": {"target": {"description": "The location.", "type": "str"}}},
]


def test_clearing_a_place_takes_what_is_there_and_never_puts_it_back() -> None:
    # table_cleaning of a real run: single-word names ("sponge") and the model put goblet_2 back on the table.
    world = CubeWorld({"table": ["goblet_2", "sponge"], "food_storage": ["mango_1"], "dish_storage": ["mug_2"]})
    schemas = []

    prompts = []

    def commander(req: GenerationRequest):
        schemas.append(req.json_schema)
        prompts.append(req.messages[-1].content)
        return ['{"tool_calls": [{"robot": "panda", "name": "put", "arguments": {"target": "dish_storage"}}]}'] * req.n

    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    memory: dict = {"history": []}
    instruction = {"type": "user", "content": "Remove all objects from the table."}
    for _ in range(8):
        entry = user_input(instruction["content"], memory=memory, tools=STORAGE_TOOLS,
                           attributes={"known_robots": ["panda"]}, extra_keys={"inference_mode": True})
        entry["instruction"] = instruction
        (out,) = asyncio.run(eng.respond(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})))
        memory, decision = out["memory"], out["output"]
        if not decision["tool_calls"]:
            break
        (call,) = decision["tool_calls"]
        name = "get_objects_state" if call["name"] == "detect" else call["name"]
        ok, message = world.run(name, call["arguments"])
        instruction = feedback("panda", call["name"], call["arguments"], ok, message)
    assert world.places["table"] == []
    assert world.calls == ["get_objects_state()", "take(goblet_2)", "put(dish_storage)", "take(sponge)",
                           "put(dish_storage)"]
    put_targets = json.dumps(schemas[0])
    assert '"dish_storage"' in put_targets and '"food_storage"' in put_targets and '"table"' not in put_targets
    assert decision["say"].startswith("Done.")
    # The model sees where things are now, not only the stale observation text.
    assert "- table: sponge\n" in prompts[0] and "- in the gripper: goblet_2" in prompts[0]


def test_scenes_are_lists_of_names_only() -> None:
    assert read_scene("this is the position of existing object : table contain goblet_2, sponge. food_storage "
                      "contain orange_2 and mango_1.") == {"table": ["goblet_2", "sponge"],
                                                           "food_storage": ["orange_2", "mango_1"]}
    assert read_scene("table contains 1 white cube, 1 green cube. white_tray contains 3 green cubes.") is None


COFFEE_TOOLS = [
    {"name": "place_mug", "description": "Place the mug under the machine.", "arguments": {}},
    {"name": "insert_capsule", "description": "Load a capsule.",
     "arguments": {"name": {"description": "Capsule kind: black, white or milky.", "type": "str"}}},
    {"name": "press_start", "description": "Start the coffee machine.", "arguments": {}},
]


def coffee(eng: Engine, instruction: dict, memory: dict) -> dict:
    return turn_in(eng, COFFEE_TOOLS, instruction, memory)


def test_a_request_for_something_the_user_said_is_gone_is_answered_in_words() -> None:
    capsule = '{"tool_calls": [{"robot": "panda", "name": "insert_capsule", "arguments": {"name": "milky"}}]}'
    asked = []

    def commander(req: GenerationRequest):
        asked.append(req.component)
        return [capsule] * req.n

    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    memory = {"history": [], "memory_list": ["There is no black coffee anymore."]}
    out = coffee(eng, {"type": "user", "content": "Hello! Can you make me a black coffee please"}, memory)
    assert out["output"] == {"say": "Sorry, I cannot do that: There is no black coffee anymore.", "tool_calls": []}
    assert not asked
    out = coffee(eng, {"type": "user", "content": "Now make me a milky coffee please."}, out["memory"])
    assert out["output"]["tool_calls"][0]["name"] == "insert_capsule"  # what is not gone is still made


def test_the_call_that_just_succeeded_is_not_repeated_by_greedy_decoding() -> None:
    # make_coffee of a real run: insert_capsule(milky) four times in a row until the budget ran out.
    capsule = '{"tool_calls": [{"robot": "panda", "name": "insert_capsule", "arguments": {"name": "milky"}}]}'
    start = '{"tool_calls": [{"robot": "panda", "name": "press_start", "arguments": {}}]}'

    def commander(req: GenerationRequest):
        return [capsule] * req.n if req.greedy else ([capsule, start] * req.n)[:req.n]

    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    out = coffee(eng, {"type": "user", "content": "Please make a milky coffee."}, {"history": []})
    assert out["output"]["tool_calls"][0]["name"] == "insert_capsule"
    out = coffee(eng, feedback("panda", "insert_capsule", {"name": "milky"}, True, "You have loaded a milky capsule."),
                 out["memory"])
    assert out["output"]["tool_calls"][0]["name"] == "press_start"


WAREHOUSE_TOOLS = [
    {"name": "cancel_current_action", "description": "Cancel the running action.", "arguments": {}},
    {"name": "grab_object", "description": "Grab an object.", "arguments": {"obj": {"type": "str"}}},
    {"name": "place_object_in_area", "description": "Place the held object in an area.",
     "arguments": {"area_name": {"description": "The area.", "type": "str"}}},
]


def warehouse(eng: Engine, instruction: dict, memory: dict, statuses: dict) -> dict:
    return turn_in(eng, WAREHOUSE_TOOLS, instruction, memory, {"known_robots": ["panda"], "robot_statuses": statuses})


def test_cancel_is_offered_only_while_a_robot_is_busy_and_questions_get_words() -> None:
    # warehouse_sorting of real runs: cancel_current_action three times with nothing running, and a
    # grab_object call in answer to "do you know where ref_obj_1 must go?".
    schemas = []

    def commander(req: GenerationRequest):
        schemas.append(json.dumps(req.json_schema))
        return ['{"say": "ref_obj_1 goes to area2."}'] * req.n

    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    memory = {"history": [], "memory_list": []}
    first = warehouse(eng, {"type": "user", "content": "Please launch a cycle."}, memory, {"panda": "FREE"})
    warehouse(eng, feedback("panda", "grab_object", {"obj": "ref_obj_1"}, False, "Another action is running."),
              first["memory"], {"panda": "RUNNING"})
    out = warehouse(eng, {"type": "user", "content": "Hello machine, do you know where ref_obj_1 must go?"}, memory,
                    {"panda": "FREE"})
    assert "cancel_current_action" not in schemas[0] and "grab_object" in schemas[0]
    assert "cancel_current_action" in schemas[1]
    assert "tool_calls" not in schemas[2]  # no observation tool here: a question gets text only
    assert out["output"]["say"] == "ref_obj_1 goes to area2."


def test_pronouns_in_results_are_not_names() -> None:
    from lava.policies.names import containers, known_names
    results = ["panda: grab_object succeed with message: You have a ref_obj_3 object in your gripper"]
    assert "You" not in known_names({}, results, []) and containers(results) == []


def test_what_was_just_taken_is_not_put_back_where_it_was() -> None:
    # packaging of a real run: take(chicken) from the table, put(table), and again for each item.
    schemas = []

    def commander(req: GenerationRequest):
        schemas.append(json.dumps(req.json_schema))
        if len(schemas) == 1:
            return ['{"tool_calls": [{"robot": "panda", "name": "take", "arguments": {"name": "chicken"}}]}'] * req.n
        return ['{"tool_calls": [{"robot": "panda", "name": "put", "arguments": {"target": "tray"}}]}'] * req.n

    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    detected = ("this is the position of existing object : the table contain ananas, apple, chicken, fish, juice, "
                "and the tray is empty")
    assert read_scene(detected) == {"table": ["ananas", "apple", "chicken", "fish", "juice"], "tray": []}
    out = turn_in(eng, STORAGE_TOOLS, {"type": "user", "content": "Put the chicken somewhere else, please."},
                  {"history": []})
    out = turn_in(eng, STORAGE_TOOLS, feedback("panda", "detect", {}, True, detected), out["memory"])
    assert out["output"]["tool_calls"][0]["arguments"] == {"name": "chicken"}
    out = turn_in(eng, STORAGE_TOOLS, feedback("panda", "take", {"name": "chicken"}, True,
                                               "you have chicken in your gripper"), out["memory"])
    assert '"enum": ["tray"]' in schemas[-1]  # the table it came from is not offered
    assert out["output"]["tool_calls"][0]["arguments"] == {"target": "tray"}



def test_a_refused_observation_is_not_forced_again() -> None:
    # delivery_box of a real run: get_object_in_package failed ("no package held") eight times in a row.
    tools = [{"name": "list_objects_in_package", "description": "List the objects in the held package.",
              "arguments": {}},
             {"name": "take_box", "description": "Take an empty package.", "arguments": {"box": {"type": "str"}}}]
    asked = []

    def commander(req: GenerationRequest):
        asked.append(req.component)
        return ['{"tool_calls": [{"robot": "panda", "name": "take_box", "arguments": {"box": "box_1"}}]}'] * req.n

    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    out = turn_in(eng, tools, {"type": "user", "content": "Please take a box and pack one donut."}, {"history": []})
    assert out["output"]["tool_calls"][0]["name"] == "list_objects_in_package" and not asked
    out = turn_in(eng, tools, feedback("panda", "list_objects_in_package", {}, False, "no package held by the robot"),
                  out["memory"])
    assert out["output"]["tool_calls"][0]["name"] == "take_box" and asked


def test_steps_a_rule_names_must_all_be_done_before_saying_done() -> None:
    # make_coffee of a real run: after insert_capsule the model said "Done" without the mug or start.
    tools = [{"name": "place_mug", "description": "Place the mug.", "arguments": {}},
             {"name": "insert_capsule", "description": "Load a capsule.", "arguments": {"name": {"type": "str"}}},
             {"name": "press_start", "description": "Start the machine.", "arguments": {}}]
    schemas = []

    def commander(req: GenerationRequest):
        schemas.append(json.dumps(req.json_schema))
        if '"say"' in schemas[-1]:
            return ['{"say": "Done."}'] * req.n
        return ['{"tool_calls": [{"robot": "panda", "name": "place_mug", "arguments": {}}]}'] * req.n

    rule = "To prepare a coffee you must have placed the mug and loaded the capsule before pressing the start button."
    eng = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    memory = {"history": [], "memory_list": [rule],
              "lava": {"task": {"intent": "act", "request": "Make me a milky coffee.",
                                "pending": [{"robot": "panda", "name": "insert_capsule",
                                             "arguments": {"name": "milky"}}]}}}
    out = turn_in(eng, tools, feedback("panda", "insert_capsule", {"name": "milky"}, True,
                                       "You have loaded a milky capsule."), memory)
    # The rule's steps run in its order (the procedures skill): the mug, then the start button.
    assert out["output"]["tool_calls"][0]["name"] == "place_mug"
    assert not any('"say"' in schema for schema in schemas)
    # Without the rule nothing names the mug or the start button: "done" may be said.
    memory["memory_list"] = []
    out = turn_in(eng, tools, feedback("panda", "insert_capsule", {"name": "milky"}, True,
                                       "You have loaded a milky capsule."), memory)
    assert out["output"]["say"].startswith("Done.")


def grasp_fails_for(world: CubeWorld, *cubes: str) -> None:
    """MAGMA's grasp-failure errors (execution_error episodes): these cubes cannot be taken."""
    real_run = world.run

    def run(name: str, arguments: dict) -> tuple[bool, str]:
        if name == "take" and arguments["name"] in cubes:
            world.calls.append(f"take({arguments['name']}) refused")
            return False, f"Failed to grasp: {arguments['name']}. The object is unreachable right now."
        return real_run(name, arguments)

    world.run = run  # type: ignore[method-assign]


def test_a_cube_that_cannot_be_grasped_gives_way_to_another_of_its_kind() -> None:
    world = CubeWorld({"table": ["blue_cube_1"], "yellow_tray": ["yellow_cube_1", "blue_cube_2", "yellow_cube_2"],
                       "blue_tray": ["blue_cube_3"]})
    grasp_fails_for(world, "yellow_cube_1")
    answer, _ = episode(world, "Complete these moves in this exact order: First, move one yellow cube from the "
                               "yellow tray to the table. Then, move one blue cube from the table to the blue tray.")
    assert world.calls == ["get_objects_state()", "take(yellow_cube_1) refused", "take(yellow_cube_2)", "put(table)",
                           "take(blue_cube_1)", "put(blue_tray)"]
    assert answer.startswith("Done.")
