"""MagmaPolicy played through make_coffee episodes that MAGMA's own generator compiled (SimpleDefinition
and TeamDefinition, many seeds; fixtures/extract_magma_stages.py says how they were made): the
generator is the ground truth for every coffee, preference, team registry and question.

Each episode starts from its skeleton's rules and team registry, with the tools of its semantic
variation (MAGMA-GEN renames them and their parameters; each carries its MAGMA name) and MAGMA's
MakingCoffeeTool messages. Every MakeOneCoffeStage must end with the button pressed on the mug and
exactly the requested capsule (its verif_log_completion; any other press fails the episode), within
MAGMA's budget. A question stage may look the registry up first with the tools it allows, stopping
short of its max_tool_calls, and then must answer what MAGMA's verification prompt says; the model is
never asked.

MAGMA-BENCH runs with --skip-judge in `lava eval`, so these answers are checked nowhere else.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from episodes import MagmaNames, Stage, episode

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "coffee_episodes.json").read_text())


class TeamCoffeeMachine(MagmaNames):
    """MAGMA's MakingCoffeeTool for one episode: a mug, capsules, the button, and the team registry,
    reached through the episode's own tool and parameter names."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.attributes = {**spec["attributes"], "known_robots": ["panda"]}
        self.teams: dict[str, list[str]] = spec["teams"]
        self.mug, self.pods = False, []
        self.coffees: list[str | None] = []  # per press: the capsule of a well made coffee, None otherwise

    def answer(self, name: str, a: dict) -> tuple[bool, str]:
        if name == "place_mug":
            self.mug = True
            return True, "You have placed the mug."
        if name == "load_capsule":
            pod = a.get("name")
            if pod not in self.attributes["coffee_pod"]:
                return False, f"No coffee_pod named {pod}. Use only known pods."
            self.pods.append(pod)
            return True, f"You have loaded a {pod} capsule."
        if name == "press_button":
            self.coffees.append(self.pods[0] if self.mug and len(self.pods) == 1 else None)
            self.mug, self.pods = False, []
            return True, "Coffee given to the user! The machine is ready for the next coffee."
        if name == "people_from_team":  # an unknown team is no failure: MAGMA answers None
            return True, f"people in {a.get('team')} : {self.teams.get(a.get('team'))}"
        person = a.get("person")
        team = next((t for t, members in self.teams.items() if person in members), None)
        if team is None:
            return False, f"Person named {person} doesn't exist in the registry"
        return True, f"{person} in team {team}"

    def reset(self) -> None:  # MAGMA's reset_at_end: the mug and capsules back where they were
        self.mug, self.pods = False, []


def served(capsule: str) -> Any:
    """MakeOneCoffeStage's verif_log_completion: one press, on the mug and exactly `capsule`."""
    start: int | None = None

    def goal(world: TeamCoffeeMachine) -> bool:
        nonlocal start
        start = len(world.coffees) if start is None else start
        made = world.coffees[start:]
        assert made in ([], [capsule]), f"wanted one {capsule} coffee, made {made}: {world.calls}"
        return bool(made)
    return goal


def play(spec: dict[str, Any], world: TeamCoffeeMachine) -> Stage:
    flags = {"direct": spec["direct"], "reset": spec["reset"]}
    if spec["kind"] == "MakeOneCoffeStage":
        return Stage(spec["say"], served(spec["capsule"]), budget=spec["budget"], **flags)
    lookups = frozenset(world.named(name) for name in spec.get("lookups", ()))
    return Stage(spec["say"], budget=spec.get("budget", 0), lookups=lookups, **flags)


def plain(text: str) -> str:
    """For comparing answers: case, a closing full stop and the serial comma aside."""
    return re.sub(r",? and ", " and ", text.strip().rstrip(".").lower())


def names(text: str) -> set[str]:
    return set(re.findall(r"\b[A-Z][a-z]+\b", text))


def judged(said: str, stage: dict[str, Any]) -> bool:
    """What MAGMA's judge is told to look for, read the way it is worded:
    - "must inform that Marta does not have any coffee preference OR ask for their coffee preference";
    - "must refuse and inform that Arthur cannot be served because white coffee is unavailable";
    - "must refuse because milky coffee is unavailable" (a coffee asked for no one)."""
    prompt = stage["judged"]
    people = names(prompt.split(" that ", 1)[1]) - {"The", "OR"} if " that " in prompt else set()
    if "unavailable" in prompt:
        coffee = re.search(r"because (\w+) coffee", prompt).group(1)
        return people <= names(said) and coffee in said.lower() and bool(re.search(r"\b(?:cannot|can't|not)\b", said))
    return people <= names(said) and ("?" in said or "preference" in said.lower())


# The tools that fail under MAGMA-BENCH's execution_error condition (those declaring its
# OneShotToolFailureError), in MAGMA's own names.
FAILING = {"press_button", "place_mug"}


@pytest.mark.parametrize("errors", [False, True], ids=["clean", "execution_error"])
@pytest.mark.parametrize("spec", EPISODES, ids=[e["episode"] for e in EPISODES])
def test_magma_coffee_episode(spec: dict[str, Any], errors: bool) -> None:
    world = TeamCoffeeMachine(spec)
    said, asked = episode(world, [play(s, world) for s in spec["stages"]], spec["memory_list"],
                          fails=world.fails(FAILING) if errors else None)
    assert not asked
    texts = iter(said)
    for number, stage in enumerate(spec["stages"]):
        if stage["kind"] == "MakeOneCoffeStage":
            continue
        words = next(texts)
        if "answer" in stage:
            assert plain(words) == plain(stage["answer"]), (number, words, stage["answer"], world.calls)
        if "judged" in stage:
            assert judged(words, stage), (number, words, stage["judged"], world.calls)


def test_the_episodes_cover_both_definitions_coffees_lookups_and_questions() -> None:
    assert {e["episode"].split("@")[0] for e in EPISODES} == {"SimpleDefinition", "TeamDefinition"}
    kinds = {s["kind"] for e in EPISODES for s in e["stages"]}
    assert {"MakeOneCoffeStage", "LookupTeamThenAnswerStage", "AskPeopleInTeamStage", "AskTeamsForPeopleStage",
            "AskCoffeePreferenceForUserStage", "MissingInformationStage", "ForbiddenElemStage"} <= kinds
    assert any(len(e["teams"]) > 1 for e in EPISODES)
