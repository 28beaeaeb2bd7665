"""MagmaPolicy played through bi_robot_sorting episodes that MAGMA's own generator compiled
(BiRobotSortingDefinition and SmallMoveSetDefinition, many seeds; fixtures/extract_magma_stages.py says
how they were made): the generator is the ground truth for every move, recipe, damaged sort and question.

Each episode starts from its skeleton's zones, damaged fruits and rules, with its variation's tools,
two arms (arm1 reaches left and mutual, arm2 right and mutual; only arm1 inspects) and MAGMA's
brs_tools messages (test_zones.BiWorld). A decision may give each arm a call; every call counts. Every
RecipeObjectsStage must get one more fruit where MAGMA's typed assignment wants it (its
TypedPlacementGoal, intact and damaged apart) within 8 calls, every SortDamagedObjectsStage so many
damaged fruits in its zone within 6; a question may inspect first, short of its max_tool_calls, and
gets MAGMA's own answer; the model is never asked.

Unlike a real run, the next instruction never arrives while a call is held, as in the hall replay.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from episodes import CANCEL, EXECUTION_ERROR, agent
from test_zones import BiWorld

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "bi_robot_episodes.json").read_text())
ACTING = {"RecipeObjectsStage", "SortDamagedObjectsStage"}


def placed(world: BiWorld, stage: dict[str, Any]) -> int:
    """MAGMA's count for the stage: TypedPlacementGoal's (each typed quota capped at what it wants,
    intact and damaged fruits apart), or DamagedObjectsGoal's (damaged fruits in the zone)."""
    if stage["kind"] == "SortDamagedObjectsStage":
        return sum(1 for thing in stage["damaged_objects"] if world.where[thing] == stage["zone"])
    damaged = set(stage["damaged_objects"])
    count = 0
    for wanted, is_damaged in ((stage["intact"], False), (stage["damaged"], True)):
        for zone, kinds in wanted.items():
            for kind, n in kinds.items():
                there = sum(1 for thing, where in world.where.items() if where == zone
                            and thing.rsplit("_", 1)[0] == kind and (thing in damaged) == is_damaged)
                count += min(there, n)
    return count


def plain(text: str) -> str:
    return re.sub(r",? and ", " and ", text.strip().rstrip(".").lower())


@pytest.mark.parametrize("errors", [False, True], ids=["clean", "execution_error"])
@pytest.mark.parametrize("spec", EPISODES, ids=[e["episode"] for e in EPISODES])
def test_magma_bi_robot_episode(spec: dict[str, Any], errors: bool) -> None:
    """`errors`: MAGMA-BENCH's execution_error condition. Both tools declare MAGMA's OneShotToolFailureError:
    the first call an action stage runs fails before it runs, and is forgiven."""
    world = BiWorld(spec["zones"], spec["damaged"])
    tools = [CANCEL, *spec["tools"]]
    robots = spec["attributes"]["known_robots"]
    attributes = {**spec["attributes"], "robot_statuses": dict.fromkeys(robots, "FREE")}
    decide = agent(tools, attributes, spec["memory_list"])

    def run(decision: dict, fail_first: bool = False) -> dict:
        calls = decision["tool_calls"]
        robots_called = [c["target_robot_name"] for c in calls]
        assert len(robots_called) == len(set(robots_called)), decision  # one call per robot and decision
        if not fail_first:
            return {"type": "env", "content": world.run(calls)}
        first, rest = calls[0], calls[1:]
        ran = json.loads(world.run(rest)) if rest else {"infos": "", "previous_tool_call": {}}
        infos = f"{first['target_robot_name']}: {first['name']} failed with message: {EXECUTION_ERROR}"
        return {"type": "env", "content": json.dumps({
            "infos": "\n".join(line for line in (infos, ran["infos"]) if line),
            "previous_tool_call": {first["target_robot_name"]: {"name": first["name"], "arguments": first["arguments"]},
                                   **ran["previous_tool_call"]}})}

    result = None  # the feedback of the last decision
    for number, stage in enumerate(spec["stages"]):
        instruction = {"type": "user", "content": stage["say"]} if stage["say"] else result
        assert instruction is not None, f"stage {number} has nothing to go on"
        if stage["kind"] not in ACTING:
            decision, looked = decide(instruction), 0
            while decision["tool_calls"] and stage.get("lookups"):
                assert {c["name"] for c in decision["tool_calls"]} <= set(stage["lookups"]), (number, decision)
                looked += len(decision["tool_calls"])
                assert looked <= stage["budget"], f"stage {number} over its {stage['budget']} lookups: {world.calls}"
                decision = decide(result := run(decision))
            assert decision["say"] and not decision["tool_calls"], f"stage {number} wanted words: {decision}"
            if "answer" in stage:
                assert plain(decision["say"]) == plain(stage["answer"]), (number, decision["say"], stage["answer"])
            continue
        calls, failing = 0, errors
        while placed(world, stage) < stage["minimum"]:
            decision = decide(instruction)
            assert decision["tool_calls"], f"stage {number} said {decision['say']!r} before its goal: {world.calls}"
            instruction = result = run(decision, fail_first=failing)
            calls += len(decision["tool_calls"]) - failing  # the execution error is forgiven
            failing = False
            assert calls <= stage["budget"], f"stage {number} over its budget of {stage['budget']}: {world.calls}"


def test_the_episodes_cover_both_definitions_recipes_damaged_sorts_and_questions() -> None:
    assert {e["episode"].split("@")[0] for e in EPISODES} == {"BiRobotSortingDefinition", "SmallMoveSetDefinition"}
    kinds = {s["kind"] for e in EPISODES for s in e["stages"]}
    assert {"RecipeObjectsStage", "SortDamagedObjectsStage", "AskDamagedObjectNamesStage", "AskTypeZoneStage",
            "AskZoneContentsStage", "ConstraintBaseStage"} <= kinds
    assert any(s["damaged"] for e in EPISODES for s in e["stages"] if s["kind"] == "RecipeObjectsStage")
