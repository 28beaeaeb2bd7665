"""Order rules read without the model (sequences.py), in the forms MAGMA's press_button states them,
and what happens to the ones it does not read."""

from __future__ import annotations

import pytest

from episodes import CANCEL, Stage, episode, tool
from lava.backends.base import GenerationRequest
from lava.policies.sequences import ordered, read_rules
from test_magma_policy import engine, pressed, step

BUTTONS = ["sw0", "sw1", "sw2", "sw3", "sw4"]
PREFIX = "From now on, press sw0 before the sequence of buttons that I ask you to press."
FIRST = "Each time you are asked to press a button, press sw1 first"
EVEN = "From now on, when both even and odd buttons are requested, press all even buttons before the odd ones."
ODD = "From now on, when both even and odd buttons are requested, press all odd buttons before the even ones."
GROUP = "From now on, press sw1 and sw2 before sw0 whenever they are both requested."


@pytest.mark.parametrize(("request_", "wanted", "rules", "order"), [
    ("Please press sw3.", ["sw3"], [PREFIX], ["sw0", "sw3"]),
    ("Please press sw3 and sw0.", ["sw3", "sw0"], [PREFIX, EVEN], ["sw0", "sw3"]),
    ("Please press sw3, sw2, and sw0.", ["sw3", "sw2", "sw0"], [EVEN], ["sw2", "sw0", "sw3"]),
    ("Please press sw2, sw3 and sw1.", ["sw2", "sw3", "sw1"], [ODD], ["sw3", "sw1", "sw2"]),
    ("Please press sw2", ["sw2"], [FIRST], ["sw1", "sw2"]),
    ("Please press sw0 and sw2", ["sw0", "sw2"], [GROUP], ["sw2", "sw0"]),
    ("Please press sw0 and sw4", ["sw0", "sw4"], [GROUP], ["sw0", "sw4"]),  # the rule's values are not both asked
    # An exact order keeps only the prefix (press_button's resolve_prefix_only_order).
    ("Please press the following buttons in this exact order: sw0 and sw2.", ["sw0", "sw2"], [GROUP, FIRST],
     ["sw1", "sw0", "sw2"]),
    # Forgetting: one button's precedences, the prefix, everything.
    ("Please press sw0 and sw2", ["sw0", "sw2"], [GROUP, "Forget to press sw2 before others."], ["sw0", "sw2"]),
    ("Please press sw0 and sw2", ["sw0", "sw2"], [PREFIX, GROUP, "Forget all prefix rules."], ["sw2", "sw0"]),
    ("Please press sw3 and sw2", ["sw3", "sw2"],
     [FIRST, EVEN, "Forget all the permanent button-order rules I gave you before."], ["sw3", "sw2"]),
    # Rules about something else leave the request's order.
    ("Please press sw3 and sw2", ["sw3", "sw2"], ["Launching a cycle means sending objects to their areas."],
     ["sw3", "sw2"]),
])
def test_the_request_s_order_under_the_rules(request_: str, wanted: list[str], rules: list[str],
                                             order: list[str]) -> None:
    assert ordered(request_, wanted, rules, BUTTONS) == order


@pytest.mark.parametrize("rule", ["Always press sw2 after sw0 unless it rains.", "Press sw3 first on Mondays.",
                                  "Never press sw0.",
                                  "press all even buttons before the even ones"])
def test_rules_about_order_in_other_words_are_the_model_s(rule: str) -> None:
    assert read_rules([rule], BUTTONS) is None
    assert ordered("Please press sw0 and sw2", ["sw0", "sw2"], [rule], BUTTONS) is None


def test_repeated_values_are_not_ordered_here() -> None:
    assert ordered("Please press two times sw0 then sw4", ["sw0", "sw0", "sw4"], [PREFIX], BUTTONS) is None


def test_press_button_definition_2_the_prefix_once_then_done_without_the_model() -> None:
    # Held-out press_button Definition@2: the 0.5B planner answered ["sw0", "sw3", "sw0"] for "press
    # sw3" after the prefix rule, and the third press failed the CompletionAnswerStage.
    def no_model(req: GenerationRequest) -> list[str]:
        raise AssertionError(f"the model was asked ({req.component})")

    eng, _ = engine(no_model)
    (ack,) = step(eng, PREFIX, {"history": []})
    (out,) = step(eng, "Please press sw3.", ack["memory"])
    presses = []
    while out["output"]["tool_calls"] and len(presses) < 4:
        presses.append(out["output"]["tool_calls"][0]["arguments"]["obj_name"])
        (out,) = step(eng, pressed(presses[-1]), out["memory"], kind="env")
    assert presses == ["sw0", "sw3"]
    assert out["output"]["say"].startswith("Done")


def test_forgetting_the_prefix_keeps_the_other_rules_in_the_task_state() -> None:
    from lava.policies.task_state import TaskState

    state = TaskState()
    for rule in (PREFIX, GROUP, "Forget all prefix rules."):
        state.remember_rule(rule)
    assert ordered("Please press sw0 and sw2", ["sw0", "sw2"], state.rules, BUTTONS) == ["sw2", "sw0"]
    state.remember_rule("Forget all the permanent button-order rules I gave you before.")
    assert state.rules == []


class Buttons:
    """press_button's panel as MAGMA's tools answer (toggle_button, the compiled episodes' names)."""

    def __init__(self) -> None:
        self.tools = [CANCEL, tool("toggle_button", "Toggle a button.", obj_name="Name of the object to interact "
                                   "with. It will automatically move the gripper to the object and press it.")]
        self.attributes = {"objects": BUTTONS, "known_robots": ["panda"]}
        self.calls: list[str] = []
        self.pressed: list[str] = []

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        self.calls.append(f"{name}({', '.join(arguments.values())})")
        self.pressed.append(arguments["obj_name"])
        return True, f"You have the {arguments['obj_name']} button pressed."


def presses(*buttons: str):
    return lambda world: world.pressed[-len(buttons):] == list(buttons) if world.pressed else False


def test_a_button_asked_for_now_before_resuming_goes_before_the_held_press() -> None:
    # Held-out press_button Definition@6: "Okay, press sw4 now before resuming your current sequence."
    # arrived while lava's press of sw1 was held; an empty decision let sw1 run, and the stage (press
    # sw4, one call) failed. The held press is cancelled, sw4 pressed, then the sequence goes on.
    world = Buttons()
    said, asked = episode(world, [
        Stage(EVEN),
        Stage("Please press sw1 and sw2.", presses("sw2"), budget=1),
        Stage("Okay, press sw4 now before resuming your current sequence.", presses("sw4"), budget=1),
        Stage(None, presses("sw4", "sw1"), budget=2),
        Stage(None),  # CompletionAnswerStage
    ], [])
    assert world.pressed == ["sw2", "sw4", "sw1"]
    assert said[-1].startswith("Done")
    assert not asked


def test_a_button_asked_for_now_before_resuming_takes_no_prefix() -> None:
    # Held-out press_button Definition@23: after "press sw2 before the sequence of buttons that I ask
    # you to press", "Okay, press sw1 now before resuming your current sequence." pressed sw2 first:
    # MAGMA's interruption stage presses sw1 alone, a step inside the sequence the prefix opened.
    world = Buttons()
    said, asked = episode(world, [
        Stage(PREFIX),
        Stage("Please press the following buttons in this exact order: sw3, sw2, and sw4.", presses("sw0"),
              budget=1),
        Stage(None, presses("sw3"), budget=1),
        Stage("Okay, press sw1 now before resuming your current sequence.", presses("sw1"), budget=1),
        Stage(None, presses("sw2"), budget=1),
        Stage(None, presses("sw4"), budget=1),
        Stage(None),  # CompletionAnswerStage
    ], [])
    assert world.pressed == ["sw0", "sw3", "sw1", "sw2", "sw4"]
    assert said[-1].startswith("Done") and not asked
