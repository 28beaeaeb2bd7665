"""MagmaPolicy played through laundry episodes that MAGMA's own generator compiled (MainDefinition, many
seeds; fixtures/extract_magma_stages.py says how they were made): the generator is the ground truth
for every load, wash, detergent change and question.

Each episode starts from its skeleton's rules, with the tools of its semantic variation and its names
for the clothes and detergents (MAGMA-GEN renames both: cap -> baseball_cap, detergent_PERSIL ->
detergent_ARIEL), and MAGMA's LaunchTool messages. Every LoadClotheStage must get so many of its
clothes into the machine (its AtLeastCountAt goal), and every WashStage must end with a wash of
exactly its clothes with exactly its detergent (its verif_log_completion; any other wash fails the
episode), each within MAGMA's budget; every question gets MAGMA's own answer and the model is never
asked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from episodes import MagmaNames, Stage, episode

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "laundry_episodes.json").read_text())


class LaundryRoom(MagmaNames):
    """MAGMA's laundry tools for one episode: take one thing at a time, drop it in the machine, wash
    what is inside with the detergents inside."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.attributes = {**spec["attributes"], "known_robots": ["panda"]}
        self.detergents = set(spec["attributes"]["detergents"])
        self.things = set(spec["attributes"]["clothes"]) | self.detergents
        self.held: str | None = None
        self.machine: list[str] = []
        self.washes: list[tuple[list[str], list[str]]] = []  # (clothes, detergents): action_wash's log

    def answer(self, name: str, a: dict) -> tuple[bool, str]:
        if name == "take":
            thing = a.get("name")
            if thing not in self.things:
                return False, f"No object with name {thing}"
            if self.held == thing:
                return False, f"The object {thing} is already in the gripper."
            if self.held is not None:
                return False, f"You failed to take the object {thing}. You can retry."
            if thing in self.machine:
                self.machine.remove(thing)
            self.held = thing
            return True, f"You have {thing} in your gripper."
        if name == "drop":
            if self.held is None:
                return False, "No clothes in gripper."
            self.machine.append(self.held)
            dropped, self.held = self.held, None
            return True, f"Successfully put {dropped} in the wash machine"
        if name == "action_wash":
            detergents = [o for o in self.machine if o in self.detergents]
            clothes = [o for o in self.machine if o not in self.detergents]
            if not detergents:
                return False, "No detergent in machine."
            if not clothes:
                return False, "There is no clothes in the machine!"
            self.washes.append((clothes, detergents))
            return True, f"You have washed {','.join(clothes)}"
        return False, f"{name} is not a known tool."

    def reset(self) -> None:  # MAGMA's reset_at_end: everything back out of the machine
        self.held, self.machine = None, []


def loaded(clothes: list[str], n: int) -> Any:
    return lambda room: sum(1 for thing in room.machine if thing in clothes) >= n


def washed(clothes: list[str], detergent: str) -> Any:
    """WashStage's verif_log_completion on the stage's last wash: these clothes, this one detergent."""
    start: int | None = None

    def goal(room: LaundryRoom) -> bool:
        nonlocal start
        start = len(room.washes) if start is None else start
        for done, used in room.washes[start:]:
            assert sorted(done) == sorted(clothes) and used == [detergent], (
                f"washed {done} with {used}, wanted {clothes} with {detergent}: {room.calls}")
        return len(room.washes) > start
    return goal


def play(spec: dict[str, Any]) -> Stage:
    flags = {"direct": spec["direct"], "reset": spec["reset"]}
    if spec["kind"] == "LoadClotheStage":
        return Stage(spec["say"], loaded(spec["clothes"], spec["minimum"]), budget=spec["budget"], **flags)
    if spec["kind"] == "WashStage":
        return Stage(spec["say"], washed(spec["clothes"], spec["detergent"]), budget=spec["budget"], **flags)
    return Stage(spec["say"], **flags)


def plain(text: str) -> str:
    """For comparing answers: case, quotes, a closing full stop and the serial comma aside."""
    return re.sub(r",? and ", " and ", text.strip().rstrip(".").lower().replace("'", ""))


# MAGMA lists the clothes that use a detergent in the order of its own table, which no message shows once
# later rules have reassigned them (MainDefinition@507: "baseball_cap, boxer_briefs, cotton_socks", where
# the rules gave boxer_briefs first): lava lists them in the rules' order, right but for the order.
ORDER_UNSHOWN = {"MainDefinition@507"}


@pytest.mark.parametrize("spec", [
    pytest.param(e, marks=pytest.mark.xfail(strict=True, reason="MAGMA's own order of the clothes")) if e["episode"]
    in ORDER_UNSHOWN else e for e in EPISODES], ids=[e["episode"] for e in EPISODES])
def test_magma_laundry_episode(spec: dict[str, Any]) -> None:
    room = LaundryRoom(spec)
    said, asked = episode(room, [play(s) for s in spec["stages"]], spec["memory_list"])
    assert not asked
    texts = iter(said)
    for number, stage in enumerate(spec["stages"]):
        if stage["kind"] in ("LoadClotheStage", "WashStage"):
            continue
        words = next(texts)
        if "answer" in stage:
            assert plain(words) == plain(stage["answer"]), (number, words, stage["answer"], room.calls)
        if stage.get("judged", "").startswith("The robot must ask"):  # a question, in MAGMA's words or not
            assert words.rstrip().endswith("?"), (number, words, stage["judged"], room.calls)


def test_the_episodes_cover_loads_washes_detergent_changes_and_questions() -> None:
    kinds = {s["kind"] for e in EPISODES for s in e["stages"]}
    assert {"LoadClotheStage", "WashStage", "MissingInformationStage", "AskClothesDetergentStage",
            "AskClothesDetergentStageInverse"} <= kinds
    said = [s["say"] or "" for e in EPISODES for s in e["stages"]]
    assert any("instead of" in text for text in said)
    assert any(s.get("clothes") and s["clothes"][0] not in ("t_shirt", "shirt") for e in EPISODES
               for s in e["stages"])
