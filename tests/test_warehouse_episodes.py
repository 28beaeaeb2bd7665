"""MagmaPolicy played through warehouse_sorting episodes that MAGMA's own generator compiled (three
definitions, many seeds; fixtures/extract_magma_stages.py says how they were made): the generator
is the ground truth for what each rule means. Every cycle stage must end with MAGMA's assignment
within its budget, every area change with the area changed, every question or refusal MAGMA
wants in words (its own answer to each of its questions), and no model call anywhere: all of it
is read from the rules.

The world is the tests' warehouse (one robot, three objects, five areas); the simulator, the
injected failures and the 4 s polling of a real run are not here, `lava eval` has them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from episodes import Stage, episode, same_answer
from test_tables_and_warehouse import WAREHOUSE_RULES, KnownAreas, sorted_into

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "warehouse_episodes.json").read_text())
QUESTION = {"MissingInformationStage"}  # MAGMA wants lava to ask where objects go
REFUSAL = {"ForbiddenElemStage"}  # MAGMA wants lava to say an object may not be sorted


def play(spec: dict[str, Any]) -> Stage:
    say, kind = spec["say"], spec["kind"]
    flags = {"direct": spec["direct"], "reset": spec["reset"]}
    if kind == "ObjectToZone":
        return Stage(say, sorted_into(spec["assignment"], spec["minimum"]), budget=spec["budget"], **flags)
    if kind == "ModifAttributesBaseStage":
        area, remove = spec["area"], spec["remove"]
        return Stage(say, lambda w: (area not in w.areas) if remove else (area in w.areas), budget=spec["budget"],
                     **flags)
    return Stage(say, answer=kind == "CompletionAnswerStage", **flags)


# The tools that fail under MAGMA-BENCH's execution_error condition (take_obj and depose declare its
# OneShotToolFailureError), in this world's names.
FAILING = {"grab_object", "place_object_in_area"}


@pytest.mark.parametrize("errors", [False, True], ids=["clean", "execution_error"])
@pytest.mark.parametrize("spec", EPISODES, ids=[e["episode"] for e in EPISODES])
def test_magma_warehouse_episode(spec: dict[str, Any], errors: bool) -> None:
    stages = [play(s) for s in spec["stages"]]
    world = KnownAreas(5)
    said, asked = episode(world, stages, WAREHOUSE_RULES, fails=FAILING.__contains__ if errors else None)
    in_words = [s for s, stage in zip(spec["stages"], stages, strict=True) if not stage.acts or stage.answer]
    for wanted, words in zip(in_words, said, strict=True):
        kind = wanted["kind"]
        if "answer" in wanted:  # MAGMA's own answer to its question
            assert same_answer(words, wanted["answer"]), words
        if kind in QUESTION:
            assert "?" in words, f"{kind} wants a question: {words!r}"
        if kind in REFUSAL:
            assert any(w in words.lower() for w in ("forbidden", "cannot", "can't", "not allowed")), words
    assert not asked


def test_the_episodes_cover_each_definition_and_every_kind_of_stage() -> None:
    definitions = {e["episode"].split("@")[0] for e in EPISODES}
    kinds = {s["kind"] for e in EPISODES for s in e["stages"]}
    assert definitions == {"SimpleSortingDefinition", "SortingWithInterdictionsDefinition", "SortingCategoryDefinition"}
    assert {"ObjectToZone", "ModifAttributesBaseStage", "MissingInformationStage", "ForbiddenElemStage"} <= kinds
