"""MagmaPolicy played through press_button episodes that MAGMA's own generator compiled (Definition,
many seeds; fixtures/extract_magma_stages.py says how they were made): the generator is the ground
truth for what each order rule means (a group before another, even before odd, a prefix, forgetting
them) and for the order of every request.

Each PressButton stage wants one button pressed, as the stage's last press and within its budget
(its max_tool_calls, one or two): MAGMA fails a stage at the first press of another button. Every rule
and completion gets words, and the model is never asked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from episodes import Stage, episode
from test_sequences import Buttons

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "button_episodes.json").read_text())


class Pressed:
    """MAGMA's Pressed goal with its log check: the first press of this stage must be the button."""

    def __init__(self, button: str) -> None:
        self.button, self.before = button, None

    def __call__(self, world: Buttons) -> bool:
        if self.before is None:
            self.before = len(world.pressed)
        pressed = world.pressed[self.before:]
        assert pressed in ([], [self.button]), f"{self.button} wanted, {pressed} pressed"
        return pressed == [self.button]


def play(spec: dict[str, Any]) -> Stage:
    flags = {"direct": spec["direct"], "reset": False}  # pressing leaves nothing to put back
    if spec["kind"] == "PressButton":
        return Stage(spec["say"], Pressed(spec["button"]), budget=spec["budget"], **flags)
    return Stage(spec["say"], **flags)


# The tool that fails under MAGMA-BENCH's execution_error condition (press_button declares its
# OneShotToolFailureError), in this world's name.
FAILING = {"toggle_button"}


@pytest.mark.parametrize("errors", [False, True], ids=["clean", "execution_error"])
@pytest.mark.parametrize("spec", EPISODES, ids=[e["episode"] for e in EPISODES])
def test_magma_button_episode(spec: dict[str, Any], errors: bool) -> None:
    world = Buttons()
    said, asked = episode(world, [play(s) for s in spec["stages"]], [], fails=FAILING.__contains__ if errors else None)
    assert all(said) and not asked


def test_the_episodes_cover_every_kind_of_rule_and_interruptions() -> None:
    said = [s["say"] or "" for e in EPISODES for s in e["stages"]]
    for words in ("before the sequence of buttons", "whenever they are both requested", "press all odd buttons",
                  "press all even buttons", "Forget all prefix rules", "Forget all the permanent",
                  "in this exact order", "now before resuming your current sequence"):
        assert any(words in text for text in said), words
