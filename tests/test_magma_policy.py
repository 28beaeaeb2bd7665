"""The MAGMA-aware policy through the engine, with the model at the backend seam."""

from __future__ import annotations

import asyncio
import json

from conftest import user_input
from lava.backends.base import GenerationRequest
from lava.backends.scripted import FunctionBackend
from lava.engine import Engine
from lava.policies.magma import MagmaPolicy
from lava.protocol import AgentRequest
from lava.settings import Settings

BUTTONS = {"tools": [{"name": "cancel_current_action", "description": "Cancel.", "arguments": {}},
                     {"name": "toggle_button", "description": "Toggle a button.",
                      "arguments": {"obj_name": {"description": "Button.", "type": "str"}}}],
           "attributes": {"objects": ["sw0", "sw1", "sw2", "sw3", "sw4"], "known_robots": ["panda"],
                          "robot_statuses": {"panda": "FREE"}}}
CUBES = {"tools": [{"name": "get_objects_state", "description": "Detect objects.", "arguments": {}},
                   {"name": "take", "description": "Take an object.", "arguments": {"name": {"type": "str"}}},
                   {"name": "put", "description": "Put the held cube.", "arguments": {"target": {"type": "str"}}}],
         "attributes": {"known_tray_color": ["white", "blue"], "known_robots": ["panda"]}}
# A request the goal reader leaves to the model, over a scene already observed.
OPPOSITE = "Arrange the cubes so each tray holds the opposite color."
SEEN = {"table": ["white_cube_1", "blue_cube_2"], "white_tray": [], "blue_tray": []}


def engine(respond) -> tuple[Engine, FunctionBackend]:
    backend = FunctionBackend(respond)
    return Engine(MagmaPolicy(backend, Settings(backend="scripted"))), backend


def step(eng: Engine, text: str, memory: dict, *, kind: str = "user", scene=BUTTONS, n: int = 1, greedy=True):
    entry = user_input(text, memory=memory, n=n, extra_keys={"inference_mode": greedy}, **scene)
    entry["instruction"] = {"type": kind, "content": text}
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})
    return asyncio.run(eng.respond(request))


def pressed(value: str) -> str:
    return json.dumps({"infos": f"panda: toggle_button succeed with message: You have the {value} button pressed.",
                       "previous_tool_call": {"panda": {"name": "toggle_button", "arguments": {"obj_name": value}}}})


def test_buttons_asked_by_number_are_pressed_once_each_without_the_model() -> None:
    # MAGMA-BENCH's ButtonPressNoOrdering: its first stage wants one of the two, its second both; the
    # 0.5B model, left to read "button one", pressed sw2 twice (toggling it off again).
    eng, backend = engine(lambda req: pytest_fail(req))
    (out,) = step(eng, "Can you press the button 2 and button one", {})
    presses = []
    for _ in range(4):
        calls = out["output"]["tool_calls"]
        if not calls:
            break
        presses.append(calls[0]["arguments"]["obj_name"])
        (out,) = step(eng, pressed(presses[-1]), out["memory"], kind="env")
    assert presses == ["sw2", "sw1"]
    assert out["output"]["say"].startswith("Done.")
    assert backend.requests == []


def test_one_dimensional_request_runs_as_a_plan_from_memory_alone() -> None:
    eng, backend = engine(lambda req: pytest_fail(req))
    memory = {"history": [], "scenario_key": {"kept": True}}
    presses = []
    (out,) = step(eng, "Please press two times sw0 then sw4?", memory)
    for _ in range(5):
        calls = out["output"]["tool_calls"]
        if not calls:
            break
        presses.append(calls[0]["arguments"]["obj_name"])
        # a fresh engine each turn: nothing but the returned memory carries the task
        eng, backend = engine(lambda req: pytest_fail(req))
        (out,) = step(eng, pressed(presses[-1]), out["memory"], kind="env")
    assert presses == ["sw0", "sw0", "sw4"]
    assert out["output"]["say"].startswith("Done.") and "{" not in out["output"]["say"]
    assert out["memory"]["scenario_key"] == {"kept": True}
    assert backend.requests == []  # no rules: the request's own order, no model call needed


def pytest_fail(req: GenerationRequest):
    raise AssertionError(f"unexpected model call: {req.component}")


def test_rules_make_the_planner_order_the_values() -> None:
    # A rule sequences.py does not read: the model orders the values.
    def planner(req: GenerationRequest):
        assert req.component == "planner"
        assert "press sw3 first on Mondays" in req.messages[0].content
        return ['["sw3", "sw1"]']

    eng, _ = engine(planner)
    (ack,) = step(eng, "Each time you are asked to press a button, press sw3 first on Mondays", {"history": []})
    assert ack["output"]["say"].startswith("Understood")
    assert ack["memory"]["lava"]["task"]["rules"] == [
        "Each time you are asked to press a button, press sw3 first on Mondays"]
    (out,) = step(eng, "Please press sw1", {**ack["memory"], "memory_list": ["Stay safe."]})
    assert out["output"]["tool_calls"] and out["output"]["tool_calls"][0]["arguments"] == {"obj_name": "sw3"}, out
    assert out["memory"]["memory_list"] == ["Stay safe."]
    assert out["internal_steps"][0]["component"] == "planner"


def test_a_plan_that_drops_a_requested_value_is_not_taken() -> None:
    eng, _ = engine(lambda req: ['["sw3"]'])
    (ack,) = step(eng, "Always press sw3 first on Mondays", {"history": []})
    (out,) = step(eng, "Please press sw1 and sw2", ack["memory"])
    assert out["memory"]["lava"]["task"]["plan"] == ["sw1", "sw2"]


def test_multi_tool_task_asks_the_commander_for_calls_only_at_the_request() -> None:
    seen = []

    def commander(req: GenerationRequest):
        seen.append(req.json_schema)
        return ['{"tool_calls": [{"robot": "panda", "name": "get_objects_state", "arguments": {}}]}'] * req.n

    eng, _ = engine(commander)
    (out,) = step(eng, OPPOSITE, {"history": [], "lava": {"task": {"scene": SEEN}}}, scene=CUBES)
    assert out["output"]["tool_calls"][0]["name"] == "get_objects_state"
    assert "anyOf" not in seen[0] or all("say" not in json.dumps(b) for b in seen[0]["anyOf"])
    assert "say" not in json.dumps(seen[0])  # calls only: text here would fail an action stage


def test_feedback_turn_shows_the_task_state_and_completes_in_plain_words() -> None:
    prompts = []

    def commander(req: GenerationRequest):
        prompts.append(req.messages[-1].content)
        return ['{"say": "All cubes sorted {yay}"}']

    eng, _ = engine(commander)
    memory = {"history": [], "lava": {"task": {"intent": "act", "request": OPPOSITE, "scene": SEEN,
                                               "pending": [{"robot": "panda", "name": "take",
                                                            "arguments": {"name": "white_cube_1"}}]}}}
    feedback = json.dumps({"infos": "panda: take succeed with message: You have white_cube_1 in your gripper."})
    (out,) = step(eng, feedback, memory, kind="env", scene=CUBES)
    assert f"Request: {OPPOSITE}" in prompts[0]
    assert "1. panda.take(name=white_cube_1)" in prompts[0]
    assert out["output"]["say"] == "Done. I completed: take(name=white_cube_1)."


def test_candidates_are_made_distinct_when_sampling() -> None:
    calls = {"n": 0}

    def sampler(req: GenerationRequest):
        calls["n"] += 1
        if calls["n"] == 1:
            return ['{"tool_calls": [{"robot": "panda", "name": "take", "arguments": {"name": "a"}}]}'] * req.n
        return ['{"tool_calls": [{"robot": "panda", "name": "take", "arguments": {"name": "b"}}]}'] * req.n

    eng, _ = engine(sampler)
    first, second = step(eng, OPPOSITE, {"history": [], "lava": {"task": {"scene": SEEN}}}, scene=CUBES, n=2,
                         greedy=False)
    assert first["output"] != second["output"]
    assert calls["n"] == 2  # one resample round sufficed


def test_prompt_stays_bounded_over_a_long_episode() -> None:
    sizes = []

    def commander(req: GenerationRequest):
        sizes.append(sum(len(m.content) for m in req.messages))
        return ['{"tool_calls": [{"robot": "panda", "name": "get_objects_state", "arguments": {}}]}']

    eng, _ = engine(commander)
    (out,) = step(eng, OPPOSITE, {"history": [], "lava": {"task": {"scene": SEEN}}}, scene=CUBES)
    for _ in range(40):
        feedback = json.dumps({"infos": "panda: get_objects_state succeed with message: table contains "
                                        "white_cube_1, blue_cube_2 and a long description of the scene " * 2})
        (out,) = step(eng, feedback, out["memory"], kind="env", scene=CUBES)
    assert sizes[-1] <= 1.5 * sizes[1]
    assert len(out["memory"]["history"]) <= 12


def test_resampling_stops_when_a_round_brings_nothing_new() -> None:
    calls = {"n": 0}

    def stubborn(req: GenerationRequest):
        calls["n"] += 1
        return ['{"tool_calls": [{"robot": "panda", "name": "take", "arguments": {"name": "a"}}]}'] * req.n

    eng, _ = engine(stubborn)
    first, second = step(eng, OPPOSITE, {"history": [], "lava": {"task": {"scene": SEEN}}}, scene=CUBES, n=2,
                         greedy=False)
    assert first["output"] == second["output"]  # kept: the model had nothing else to offer
    assert calls["n"] == 2  # the first answer and one resample round, not RESAMPLE_ROUNDS of them


def test_a_backend_that_answers_by_rule_is_not_asked_again_for_variety() -> None:
    from lava.backends.scripted import ScriptedBackend

    backend = ScriptedBackend([{"tool_calls": [{"robot": "panda", "name": "take", "arguments": {"name": "a"}}]}])
    eng = Engine(MagmaPolicy(backend, Settings(backend="scripted")))
    step(eng, OPPOSITE, {"history": [], "lava": {"task": {"scene": SEEN}}}, scene=CUBES, n=2, greedy=False)
    assert not backend.capabilities.varies_with_seed
    assert len(backend.requests) == 1  # another seed would only give the same answer back


def test_after_a_question_answered_while_a_call_is_held_the_held_call_goes_on() -> None:
    # Held-out advanced_delivery AdvancedDeliveryDefinition@5: a question came while lava's next call
    # was held; after the answer in words MAGMA-BENCH reports {"error": "The action failed."} (no call
    # of lava's produced a result) with the call still held. lava said "Error: The action failed."
    # where the stage wanted the work to go on: an empty decision resumes the held call.
    def model(req):
        return ['{"say": "I pressed sw1 so far."}'] * req.n

    eng, _ = engine(model)
    (out,) = step(eng, "Please press sw1, sw2 and sw3.", {})
    (out,) = step(eng, pressed("sw1"), out["memory"], kind="env")
    held = out["output"]["tool_calls"][0]
    assert held["arguments"] == {"obj_name": "sw2"}
    busy = {**BUTTONS, "attributes": {**BUTTONS["attributes"], "robot_statuses": {"panda": "RUNNING toggle_button("
                                                                                           "obj_name=sw2)"}}}
    (out,) = step(eng, "Which buttons have you pressed so far?", out["memory"], scene=busy)
    assert out["output"]["say"] and not out["output"]["tool_calls"]
    (out,) = step(eng, json.dumps({"error": "The action failed."}), out["memory"], kind="env", scene=busy)
    assert out["output"] == {"say": "", "tool_calls": []}
    (out,) = step(eng, pressed("sw2"), out["memory"], kind="env")  # the held press ran
    assert out["output"]["tool_calls"] and out["output"]["tool_calls"][0]["arguments"] == {"obj_name": "sw3"}, out


DEPOT = {"tools": [{"name": "move_to", "description": "Move the robot to a slot.",
                    "arguments": {"target": {"description": "Slot to reach.", "type": "str"}}},
                   {"name": "take", "description": "Take a product at the products slot.",
                    "arguments": {"name": {"description": "Product to take.", "type": "str"}}}],
         "attributes": {"objects": ["box_1"], "locations": ["products_slot", "packages_slot"],
                        "known_robots": ["panda"], "robot_statuses": {"panda": "FREE"}}}


def test_calls_that_keep_failing_end_in_words_that_say_what_failed() -> None:
    # Every MAGMA-BENCH episode in which lava's calls failed 5 turns in a row ran out of its budget:
    # the model had cycled through the same refusals. lava stops there and says what failed.
    refusal = "The robot must be at products_slot to take a product."
    eng, _ = engine(lambda req: ['{"tool_calls": [{"robot": "panda", "name": "take", '
                                       '"arguments": {"name": "box_1"}}]}'] * req.n)
    (out,) = step(eng, "Please take box_1.", {}, scene=DEPOT)
    failures = 0
    while out["output"]["tool_calls"]:
        call = out["output"]["tool_calls"][0]
        failures += 1
        assert failures <= 5, out["output"]
        feedback = json.dumps({"infos": f"panda: {call['name']} failed with message: {refusal}",
                               "previous_tool_call": {"panda": {"name": call["name"], "arguments": call["arguments"]}}})
        (out,) = step(eng, feedback, out["memory"], kind="env", scene=DEPOT)
    assert failures == 5
    said = out["output"]["say"]
    assert said.startswith("I stopped: my last 5 attempts failed.") and refusal in said, said
    # The next request starts afresh.
    (out,) = step(eng, "Please move to products_slot.", out["memory"], scene=DEPOT)
    assert out["output"]["tool_calls"], out["output"]
