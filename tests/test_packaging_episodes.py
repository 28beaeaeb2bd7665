"""MagmaPolicy played through packaging episodes that MAGMA's own generator compiled (MainDefinition,
many seeds; fixtures/extract_magma_stages.py says how they were made): the generator is the ground
truth for what each recipe, swap and incompatibility rule means.

Each episode starts from its skeleton's rules. A stage whose entry transition is MAGMA's
ResetPackagingTransition starts with every food back on the table and the tray empty. A progress
stage must get MAGMA's count of requested foods onto the tray, a composition stage exactly its foods,
sent once with valid_plate, each within MAGMA's budget (its max_tool_calls). Every rule and
completion gets words, every refusal MAGMA wants a refusal, and the model is never asked.

A swap on a two-food tray ("I would like a tray containing fish and milk.", then "Actually, replace fish
with water on this tray.") comes once one food is on the tray, with the next call already running. When
that food is the one replaced, seven calls are the fewest that finish (the running take and its put, fish
off, water on, valid_plate), and MAGMA allows six. The request gives no hint of the swap to come, but
MAGMA's swaps mostly replace the first named food (12 of the 15 two-food swaps of seeds 100-189), so
lava puts the last named first; the two episodes where the swap took the other are skipped there.

The world is the packaging tests' tray (test_packing.ResettingTrayWorld); the simulator, the injected
failures and the polling of a real run are not here, `lava eval` has them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from episodes import Stage, episode
from test_packing import ResettingTrayWorld, TrayWorld

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "packaging_episodes.json").read_text())
REFUSAL = {"ForbiddenElemStage"}  # "The model must refuse because chicken and pasta cannot be placed on the same tray."


# The episodes where the swap replaced the food lava puts on the tray first (the last named): no
# completion fits MAGMA's budget from there (see the module's docstring).
UNFINISHABLE = {"MainDefinition@117", "MainDefinition@153", "MainDefinition@500", "MainDefinition@504",
                "MainDefinition@506"}


class SentExactly:
    """MAGMA's ExactTrayCompositionGoal, and valid_plate reporting it. A stage that starts where MAGMA's
    budget leaves no way to it fails the test, but in the UNFINISHABLE episodes, where it is skipped."""

    def __init__(self, expected: list[str], budget: int, episode: str) -> None:
        self.expected, self.budget, self.episode, self.started = sorted(expected), budget, episode, False
        self.sends = 0  # the trays sent before the stage: the same tray twice is sent twice

    def __call__(self, world: TrayWorld) -> bool:
        if not self.started:
            self.started, self.sends = True, len(world.sent)
            wrong = [food for food in world.tray if food not in self.expected]
            missing = [food for food in self.expected if food not in world.tray]
            fewest = 2 * len(wrong) + 2 * len(missing) + 1  # a take and a put each, then valid_plate
            if fewest > self.budget:
                why = (f"{wrong} must leave the tray and {missing} reach it: {fewest} calls, where MAGMA allows "
                       f"{self.budget}")
                assert self.episode in UNFINISHABLE, why
                pytest.skip(why)
        return sorted(world.tray) == self.expected and world.sent[self.sends:][-1:] == [self.expected]


def play(spec: dict[str, Any], fresh_next: bool, episode: str) -> Stage:
    say, kind = spec["say"], spec["kind"]
    flags = {"direct": spec["direct"], "reset": spec["reset"] or fresh_next}
    if kind == "PackagingCompositionProgressStage":
        expected, minimum = set(spec["expected"]), spec["minimum"]
        return Stage(say, lambda w: sum(1 for food in w.tray if food in expected) >= minimum,
                     budget=spec["budget"], **flags)
    if kind == "PackagingCompositionStage":
        return Stage(say, SentExactly(spec["expected"], spec["budget"], episode), budget=spec["budget"], **flags)
    return Stage(say, answer=kind == "CompletionAnswerStage", **flags)


# The tool that fails under MAGMA-BENCH's execution_error condition (PackagingTool's take declares its
# OneShotToolFailureError).
FAILING = {"take"}


@pytest.mark.parametrize("errors", [False, True], ids=["clean", "execution_error"])
@pytest.mark.parametrize("spec", EPISODES, ids=[e["episode"] for e in EPISODES])
def test_magma_packaging_episode(spec: dict[str, Any], errors: bool) -> None:
    # A stage MAGMA opens with ResetPackagingTransition finds the world reset after the stage before it.
    stages = [play(s, following.get("fresh", False), spec["episode"])
              for s, following in zip(spec["stages"], [*spec["stages"][1:], {}], strict=True)]
    world = ResettingTrayWorld()
    if spec["stages"][0].get("fresh"):
        world.reset()
    said, asked = episode(world, stages, spec["memory_list"], fails=FAILING.__contains__ if errors else None)
    in_words = [s for s, stage in zip(spec["stages"], stages, strict=True) if not stage.acts or stage.answer]
    for wanted, words in zip(in_words, said, strict=True):
        if wanted["kind"] in REFUSAL:
            assert any(w in words.lower() for w in ("cannot", "can't", "not allowed")), words
    composed = sum(1 for s in spec["stages"] if s["kind"] == "PackagingCompositionStage")
    assert len(world.sent) == composed, f"valid_plate sent {world.sent}, once per tray wanted"  # MAGMA: exactly once
    assert not asked


def test_the_episodes_cover_recipes_swaps_and_refusals() -> None:
    kinds = {s["kind"] for e in EPISODES for s in e["stages"]}
    assert {"PackagingCompositionProgressStage", "PackagingCompositionStage", "ConstraintBaseStage",
            "ForbiddenElemStage", "CompletionAnswerStage"} <= kinds
    assert any(s["kind"] == "PackagingCompositionStage" and s.get("fresh") is None
               for e in EPISODES for s in e["stages"])  # a swap on the tray being made
