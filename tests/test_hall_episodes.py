"""MagmaPolicy played through hall_sorting episodes that MAGMA's own generator compiled (MainDefinition
and SmallHallSortingDefinition, many seeds; fixtures/extract_magma_stages.py says how they were made,
and which it leaves out: those the generator made unwinnable).

Each episode starts from its skeleton's halls, attributes and rules; a stage's entry transition
lays its halls out anew, as MAGMA's ResetHallDeliveryTransition does. Every stage that moves objects
must reach MAGMA's goal within MAGMA's budget (twice its target): a count placed, or for a redirection
("Take one book from Hall4 and deliver it to Hall3", then "Change of plan: deliver that book to Hall1
instead.") a book on a tray, then a book in Hall1. Every text stage gets words, every question MAGMA's
own answer, and the model is never asked.

Unlike a real run, the next instruction never arrives while a call is held: MAGMA's delays are
played by the warehouse episodes (episodes.py) and the halls tests, not here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from episodes import EXECUTION_ERROR, agent, feedback, same_answer
from test_halls import TOOLS, HallWorld

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "hall_episodes.json").read_text())


PLACING = {"TypedPlacementStage", "PickObjectStage", "RedirectPickedObjectStage"}


def met(world: HallWorld, stage: dict[str, Any]) -> bool:
    """The goal of a stage that moves objects, as MAGMA verifies it."""
    if stage["kind"] == "PickObjectStage":  # ObjectTypeOnTrayGoal
        return any(thing.rpartition("_")[0] == stage["object_type"] for tray in world.tray.values() for thing in tray)
    if stage["kind"] == "RedirectPickedObjectStage":  # ObjectTypeInHallGoal
        return any(thing.rpartition("_")[0] == stage["object_type"] for thing in world.halls[stage["hall"]])
    quota = {(hall, kind): n for hall, counts in stage["assignment"].items() for kind, n in counts.items()}
    return world.placed(quota) >= stage["minimum"]


# The tools that fail under MAGMA-BENCH's execution_error condition (HallSortingTool's pick_to_tray and
# drop_from_tray declare its OneShotToolFailureError).
FAILING = {"pick_to_tray", "drop_from_tray"}


@pytest.mark.parametrize("errors", [False, True], ids=["clean", "execution_error"])
@pytest.mark.parametrize("spec", EPISODES, ids=[e["episode"] for e in EPISODES])
def test_magma_hall_episode(spec: dict[str, Any], errors: bool) -> None:
    world = HallWorld(spec["halls"])
    attributes = {**spec["attributes"], "robot_statuses": dict.fromkeys(spec["attributes"]["known_robots"], "FREE")}
    decide = agent(TOOLS, attributes, spec["memory_list"])

    result = None  # the feedback of the last call
    for number, stage in enumerate(spec["stages"]):
        if "layout" in stage:
            world.halls = {hall: list(things) for hall, things in stage["layout"].items()}
            world.tray = {robot: [] for robot in world.at}
        instruction = {"type": "user", "content": stage["say"]} if stage["say"] else result
        assert instruction is not None, f"stage {number} has nothing to go on"
        if stage["kind"] not in PLACING:
            decision = decide(instruction)
            assert decision["say"] and not decision["tool_calls"], f"stage {number} wanted words: {decision}"
            if "answer" in stage:
                assert same_answer(decision["say"], stage["answer"]), (decision["say"], stage["answer"])
            continue
        calls, failing = 0, errors
        while not met(world, stage):
            decision = decide(instruction)
            assert decision["tool_calls"], f"stage {number} said {decision['say']!r} before its goal: {world.calls}"
            (call,) = decision["tool_calls"]
            robot = call["target_robot_name"]
            if failing and call["name"] in FAILING:  # before it runs, and forgiven
                ok, message, failing, calls = False, EXECUTION_ERROR, False, calls - 1
            else:
                ok, message = world.run(robot, call["name"], call["arguments"])
            calls += 1
            assert calls <= stage["budget"], f"stage {number} over its budget of {stage['budget']}: {world.calls}"
            instruction = result = feedback(call, ok, message)


def test_the_episodes_cover_both_definitions_deliveries_questions_and_redirections() -> None:
    assert {e["episode"].split("@")[0] for e in EPISODES} == {"MainDefinition", "SmallHallSortingDefinition"}
    kinds = {s["kind"] for e in EPISODES for s in e["stages"]}
    assert {"TypedPlacementStage", "AskTypeHallAssignmentStage", "AskHallTypesStage", "PickObjectStage",
            "RedirectPickedObjectStage"} <= kinds
    assert any("layout" in s for e in EPISODES for s in e["stages"])
