"""MagmaPolicy played through color_sorting episodes that MAGMA's own generator compiled
(SortingDefinition, many seeds; fixtures/extract_magma_stages.py says how they were made): the
generator is the ground truth for every sort, exact sequence of moves, and rule.

Each episode starts from its skeleton's cubes, with MAGMA's instance tools (get_object_state, take a
cube by its name, put it on the table or in a tray) and their messages. Every SortByColorStage must
get one more cube where MAGMA's assignment wants it (its CountCubes goal), within MAGMA's budget (its
max_tool_calls, four); every rule and completion gets words, and the model is never asked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from episodes import CANCEL, Stage, episode, tool

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "color_episodes.json").read_text())


class CubeInstances:
    """MAGMA's InstanceColorTools: cubes by name (yellow_cube_2), counted per place by color."""

    def __init__(self, cubes: dict[str, dict[str, int]], colors: list[str]) -> None:
        self.places: dict[str, list[str]] = {place: [] for place in cubes}
        number: dict[str, int] = {}
        for place, counts in cubes.items():
            for color, count in counts.items():
                for _ in range(count):
                    number[color] = number.get(color, 0) + 1
                    self.places[place].append(f"{color}_cube_{number[color]}")
        self.held: str | None = None
        self.calls: list[str] = []
        self.tools = [CANCEL, tool("get_object_state", "List cube instances on the table and in each tray."),
                      tool("take", "Take a specific cube instance.", name="The exact name of the cube to take."),
                      tool("put", "Put the held cube on the table or in a color tray.",
                           target="Use table or a tray name such as white_tray.")]
        self.attributes = {"known_tray_color": colors, "known_robots": ["panda"]}

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        value = next(iter(arguments.values()), "")
        self.calls.append(f"{name}({value})")
        if name == "get_object_state":
            return True, ". ".join(f"{place} contains {', '.join(cubes)}" if cubes else f"{place} contains no cube"
                                   for place, cubes in self.places.items()) + "."
        if name == "take":
            where = next((place for place, cubes in self.places.items() if value in cubes), None)
            if where is None:
                return False, f"There is no cube instance named {value}."
            if self.held is not None:
                return False, f"Failed to grasp {value} due to a planning error."
            self.places[where].remove(value)
            self.held = value
            return True, f"You have {value} in your gripper."
        if name == "put":
            if value not in self.places:
                return False, f"No {value} in the scene."
            if self.held is None:
                return False, "There is no cube in the gripper."
            self.places[value].append(self.held)
            held, self.held = self.held, None
            return True, f"Successfuly sent {held} to {value}"
        return False, f"unknown tool {name}"

    def placed(self, assignment: dict[str, dict[str, int]]) -> int:
        """MAGMA's CountCubes: cubes where the assignment wants them, up to the number wanted there."""
        return sum(min(sum(1 for cube in self.places[place] if cube.startswith(f"{color}_cube_")), wanted)
                   for place, wanted_here in assignment.items() for color, wanted in wanted_here.items())


def play(spec: dict[str, Any]) -> Stage:
    flags = {"direct": spec["direct"], "reset": False}
    if spec["kind"] == "SortByColorStage":
        assignment, minimum = spec["assignment"], spec["minimum"]
        return Stage(spec["say"], lambda w: w.placed(assignment) >= minimum, budget=spec["budget"], **flags)
    # The completion may look first (get_object_state): MAGMA allows it before the answer.
    return Stage(spec["say"], budget=spec.get("budget", 0), lookups=frozenset(spec.get("lookups", ())), **flags)


# The tool that fails under MAGMA-BENCH's execution_error condition (InstanceColorTools' take declares
# its OneShotToolFailureError).
FAILING = {"take"}


@pytest.mark.parametrize("errors", [False, True], ids=["clean", "execution_error"])
@pytest.mark.parametrize("spec", EPISODES, ids=[e["episode"] for e in EPISODES])
def test_magma_color_episode(spec: dict[str, Any], errors: bool) -> None:
    world = CubeInstances(spec["cubes"], spec["colors"])
    said, asked = episode(world, [play(s) for s in spec["stages"]], spec["memory_list"],
                          fails=FAILING.__contains__ if errors else None)
    assert all(said) and not asked


def test_the_episodes_cover_sorts_moves_and_rules() -> None:
    said = [s["say"] or "" for e in EPISODES for s in e["stages"]]
    for words in ("sort all the cubes by color", "Leave", "in this exact order", "I want you to move",
                  "you must always sort all"):
        assert any(words in text for text in said), words
