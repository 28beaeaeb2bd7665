"""Task state: mentions, progress and feedback folding, as pure functions."""

from __future__ import annotations

import json

import pytest

from lava.policies.task_state import (
    Result,
    TaskState,
    call_text,
    mentioned,
    numbers_as_names,
    one_dimensional,
    remaining,
    vocabulary,
)
from lava.situation import Feedback
from lava.tools import ToolBox

NAMES = ["sw0", "sw1", "sw2", "sw3", "sw4", "sw10"]


def test_mentions_keep_order_and_repetitions() -> None:
    assert mentioned("Please press two times sw0 then sw4?", NAMES) == ["sw0", "sw0", "sw4"]
    assert mentioned("press sw1 twice and sw10", NAMES) == ["sw1", "sw1", "sw10"]
    assert mentioned("Ok press sw2, then sw1", NAMES) == ["sw2", "sw1"]
    assert mentioned("press SW3 three times", NAMES) == ["sw3", "sw3", "sw3"]
    assert mentioned("nothing here", NAMES) == []


def test_numbered_references_read_as_the_names_they_number() -> None:
    # MAGMA's ButtonPressNoOrdering asks in words, not names.
    def named(text: str, names: list[str] = NAMES) -> list[str]:
        return mentioned(numbers_as_names(text, names, ["button"]), names)

    assert named("Can you press the button 2 and button one") == ["sw2", "sw1"]
    assert named("Press buttons 0, 3 and 4") == ["sw0", "sw3", "sw4"]
    assert named("press button number 10 twice") == ["sw10", "sw10"]
    assert named("press SW 3") == ["sw3"]  # the family's own prefix numbers it too
    assert named("press the button 3 two times") == ["sw3", "sw3"]
    # Counts are not references, and a number no name carries stays as written.
    assert named("Please press two times sw0 then sw4?") == ["sw0", "sw0", "sw4"]
    assert named("press 2 buttons") == []
    assert named("press button 7") == []
    assert numbers_as_names("press button 7 and button 1", NAMES, ["button"]) == "press button 7 and sw1"
    # Only a family of names that differ by their number alone: orange_1 and mug_2 are two kinds.
    assert numbers_as_names("Set 1 orange and mug 2", ["orange_1", "mug_2"], ["mug"]) == "Set 1 orange and mug 2"
    assert numbers_as_names("button 1", ["sw1", "sw1b"], ["button"]) == "button 1"


def test_remaining_is_a_multiset_difference() -> None:
    calls = [{"arguments": {"id": "sw0"}}]
    assert remaining(["sw0", "sw0", "sw4"], calls) == ["sw0", "sw4"]
    assert remaining(["sw0"], [*calls, {"arguments": {"id": "sw9"}}]) == []


def test_vocabulary_skips_robots_and_statuses() -> None:
    names = vocabulary({"objects": ["sw0"], "known_robots": ["panda"], "robot_statuses": {"panda": "FREE"},
                        "teams": {"a": "DISCO"}})
    assert names == {"sw0": "objects", "DISCO": "teams"}


def test_feedback_folds_successes_and_failures() -> None:
    toolbox = ToolBox.from_input([{"name": "take", "arguments": {"name": {"type": "str"}}},
                                  {"name": "detect", "arguments": {}}], {"known_robots": ["panda"]})
    state = TaskState()
    state.start("act", "Sort all cubes")
    state.pending = [{"robot": "panda", "name": "detect", "arguments": {}}]
    detected = {"infos": "panda: detect succeed with message: table contains red_cube_1"}
    state.observe(Feedback.parse(json.dumps(detected)), toolbox)
    assert state.done == ["panda.detect()"]
    assert state.observations == ["detect: table contains red_cube_1"]
    state.pending = [{"robot": "panda", "name": "take", "arguments": {"name": "blue"}}]
    state.observe(Feedback.parse(json.dumps({"infos": "panda: take failed with message: No objects named blue."})),
                  toolbox)
    assert state.done == ["panda.detect()"] and state.last_failed and state.failures_in_row == 1
    assert "failed" in state.last_feedback


def test_previous_tool_call_is_used_when_pending_is_unknown() -> None:
    toolbox = ToolBox.from_input([{"name": "press", "arguments": {"id": {"type": "str"}}}], {})
    state = TaskState()
    content = {"infos": "panda: press succeed with message: ok",
               "previous_tool_call": {"panda": {"name": "press", "arguments": {"id": "sw1"}}}}
    state.observe(Feedback.parse(json.dumps(content)), toolbox)
    assert state.done == ["panda.press(id=sw1)"]


def test_rules_are_kept_and_forgotten() -> None:
    state = TaskState()
    state.remember_rule("Always press sw3 first")
    state.remember_rule("Always press sw3 first")
    assert state.rules == ["Always press sw3 first"]
    state.remember_rule("Forget all the permanent button-order rules I gave you before.")
    assert state.rules == []


def test_state_round_trips_through_json_and_tolerates_old_memories() -> None:
    state = TaskState(intent="act", request="r", done=["a.b()"], plan=["sw1"])
    assert TaskState.load(json.loads(json.dumps({"task": state.dump()}))) == state
    assert TaskState.load({"task": {"unknown": 1, "request": "x"}}).request == "x"
    assert TaskState.load({"task": "garbage"}) == TaskState()


def test_call_text_and_dimensions() -> None:
    assert call_text({"robot": "panda", "name": "put", "arguments": {"target": "tray", "n": 2}}) == \
        "panda.put(target=tray, n=2)"
    one = ToolBox.from_input([{"name": "cancel_current_action", "arguments": {}},
                              {"name": "press", "arguments": {"id": {"type": "str"}}}], {})
    two = ToolBox.from_input([{"name": "take", "arguments": {"a": {"type": "str"}}},
                              {"name": "put", "arguments": {"b": {"type": "str"}}}], {})
    assert one_dimensional(one) and not one_dimensional(two)


def test_an_interrupted_request_is_digested_once_when_it_is_left_for_good() -> None:
    state = TaskState()
    state.start("act", "press sw1 and sw2")
    state.succeeded({"robot": "r1", "name": "press", "arguments": {"b": "sw1"}})
    state.suspend(question=True)
    state.start("answer", "Which button did you press?")
    assert state.earlier == ["press sw1 and sw2 -> r1.press(b=sw1)"]  # the answer can see the running request
    state.resume()
    assert state.earlier == []  # it runs again: no stale digest beside it
    state.succeeded({"robot": "r1", "name": "press", "arguments": {"b": "sw2"}})
    state.start("act", "press sw3")
    assert state.earlier == ["press sw1 and sw2 -> r1.press(b=sw1), r1.press(b=sw2)"]

    # An urgent request's own work is digested when the interrupted one resumes.
    state.suspend()
    state.start("act", "press sw0 first")
    state.succeeded({"robot": "r1", "name": "press", "arguments": {"b": "sw0"}})
    state.resume()
    assert state.request == "press sw3"
    assert state.earlier == ["press sw1 and sw2 -> r1.press(b=sw1), r1.press(b=sw2)",
                             "press sw0 first -> r1.press(b=sw0)"]


@pytest.mark.parametrize(("message", "retry"), [
    ("The requested action failed due to a temporary execution error. Please retry.", True),  # injected
    ("Failed to press the sw1 button. You can retry.", True),  # MAGMA's tools, on their own
    ("you failed to take the object book_1. you can retry", True),
    ("ref_obj_1 is not in area2, you can retry", True),
    ("The object is still in the gripper", True),  # a put that did not let go: the same put again
    ("snacks_3 is still in the gripper.", True),
    ("snacks_3 is not in trashcan.", False),  # it let go, beside the target
    ("Failed to grasp: mango_1. The object is unreachable right now.", False),  # try another one
    ("priority_bay_1 is not accessible to reception_robot.", False),
])
def test_a_failure_that_asks_for_the_same_call_again_is_not_a_refusal(message: str, retry: bool) -> None:
    assert Result("panda", "take", False, message).retryable is retry
    state = TaskState(intent="act", pending=[{"robot": "panda", "name": "take", "arguments": {"name": "x"}}])
    feedback = Feedback.parse(json.dumps({"infos": f"panda: take failed with message: {message}"}))
    state.observe(feedback, ToolBox.from_input([{"name": "take", "arguments": {"name": {"type": "str"}}}],
                                               {"known_robots": ["panda"]}))
    assert state.pending_failed == [{"robot": "panda", "name": "take", "arguments": {"name": "x"}}]
    assert state.retry_asked is retry and bool(state.failed) is not retry


def test_a_retry_is_asked_only_when_every_failure_asks_for_one() -> None:
    toolbox = ToolBox.from_input([{"name": "take", "arguments": {"name": {"type": "str"}}}],
                                 {"known_robots": ["arm1", "arm2"]})
    state = TaskState(intent="act", pending=[{"robot": "arm1", "name": "take", "arguments": {"name": "x"}},
                                             {"robot": "arm2", "name": "take", "arguments": {"name": "y"}}])
    state.observe(Feedback.parse(json.dumps({"infos": "arm1: take failed with message: Please retry.\n"
                                                      "arm2: take failed with message: y is out of reach."})), toolbox)
    assert len(state.pending_failed) == 2 and not state.retry_asked
    assert [c["robot"] for c in state.failed] == ["arm2"]  # the retryable one is not refused


def test_an_object_that_could_not_be_grasped_is_remembered_until_something_is_put_down() -> None:
    toolbox = ToolBox.from_input([{"name": "take", "arguments": {"name": {"type": "str"}}},
                                  {"name": "put", "arguments": {"target": {"type": "str"}}}],
                                 {"known_robots": ["panda"]})
    state = TaskState(intent="act", pending=[{"robot": "panda", "name": "take", "arguments": {"name": "fish"}}])
    state.observe(Feedback.parse(json.dumps({"infos": "panda: take failed with message: Failed to grasp: fish. "
                                                      "The object is unreachable right now."})), toolbox)
    assert state.ungraspable == ["fish"] and state.failed  # a refusal all the same
    assert not Result("panda", "take", False, "fish is not detected").ungraspable
    state.pending = [{"robot": "panda", "name": "take", "arguments": {"name": "juice"}}]
    state.observe(Feedback.parse(json.dumps({"infos": "panda: take succeed with message: ok"})), toolbox)
    assert state.ungraspable == ["fish"]  # taking another changes nothing for the fish
    state.pending = [{"robot": "panda", "name": "put", "arguments": {"target": "tray"}}]
    state.observe(Feedback.parse(json.dumps({"infos": "panda: put succeed with message: ok"})), toolbox)
    assert state.ungraspable == []
