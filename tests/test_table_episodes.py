"""MagmaPolicy played through table_cleaning episodes that MAGMA's own generator compiled (SimpleDefinition,
one robot, many seeds; fixtures/extract_magma_stages.py says how they were made): the generator is the
ground truth for every table set, table cleared and table wiped.

Each episode starts from its skeleton's table, storage and dirty objects and its rules, with the tools
and object names of its variation (MAGMA-GEN renames apples to oranges, plates to bowls) and the
messages of MAGMA's one-robot TableCleaningTool (detect, take, inspect, put, wipe, set_light). A
stage's entry transition dirties the objects on the table, or restocks the storage. Every put must go
where MAGMA's _verify_put_destinations wants it (dirty food to the trashcan, dirty dishware to the
washing machine, clean food to the food storage or the table, clean dishware to the dish storage or
the table); any other fails the episode. Every SetTableStage must get one more requested slot on the
table without more objects than requested, every ClearTableStage one object fewer on the table, every
WipeStage a wipe and then the sponge back on the table, each within MAGMA's budget. The model is
asked one thing only, by design: the class of a held object whose renamed type no rule or scene tells
("Which class is a bowl?"); it answers as a model that knows kitchens does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from episodes import MagmaNames, Model, Stage, episode
from lava.backends.base import GenerationRequest

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "table_episodes.json").read_text())
PLACES = ("table", "trashcan", "washing_machine", "food_storage", "dish_storage")  # detect's order


class TableRoom(MagmaNames):
    """MAGMA's one-robot table: objects on the table and in the storages, some dirty, a sponge. A taken
    object stays where it was taken from until it is put (MAGMA's places are areas below the lifted
    gripper: detect and the stage goals still see it there), but the table under it counts as empty."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.attributes = {**spec["attributes"], "known_robots": ["panda"]}
        self.food = set(spec["food"])
        self.where = {**{o: "table" for o in spec["table"]}, "sponge": "table",
                      **{o: "food_storage" if o in self.food else "dish_storage" for o in spec["storage"]}}
        self.dirty = set(spec["dirty"])
        self.start = (dict(self.where), set(self.dirty))
        self.held: str | None = None
        self.done: list[str] = []  # MAGMA's log: the tools that succeeded, in order
        self.puts: list[tuple[str, bool, str]] = []  # (object, dirty, target) of each put

    def answer(self, name: str, a: dict) -> tuple[bool, str]:
        ok, message = self.result(name, a)
        if ok:
            self.done.append(name)
        return ok, message

    def result(self, name: str, a: dict) -> tuple[bool, str]:
        if name == "detect":
            listed = [f" {place} contain {', '.join(things)}." for place in PLACES
                      if (things := [o for o, p in self.where.items() if p == place])]
            return True, "this is the position of existing object :" + "".join(listed) if listed else \
                "there is no object detected"
        if name == "take":
            thing = a.get("name")
            if self.held is not None:
                return False, "The gripper is not empty."
            if thing not in self.where:
                return False, f"{thing} was not detected."
            self.held = thing
            return True, f"{thing} is in the gripper."
        if name == "put":
            target = a.get("target")
            if target not in PLACES:
                return False, f"Unknown target: {target}."
            if self.held is None:
                return False, "The gripper is empty."
            thing, self.held = self.held, None
            self.where[thing] = target
            self.puts.append((thing, thing in self.dirty, target))
            return True, f"Successfully placed {thing} in {target}."
        if name == "inspect":
            if self.held is None:
                return False, "No object in the gripper. Inspection failed"
            return True, f"Object {self.held} is {'dirty' if self.held in self.dirty else 'clean'}"
        if name == "wipe":
            if self.held is not None and self.held != "sponge":
                return False, f"Cannot clean while holding {self.held}"
            if self.held != "sponge":
                return False, "You must take a cleaning object to clean the table."
            if any(place == "table" and thing != self.held for thing, place in self.where.items()):
                return False, "The table is not empty."
            return True, "you cleaned the table successfully"
        if name == "set_light":
            return True, "The ambient setting was acknowledged."
        return False, f"{name} is not a known tool."

    def on_table(self, objects: list[str]) -> list[str]:
        return [o for o in objects if self.where.get(o) == "table"]

    def reset(self) -> None:  # MAGMA's reset_at_end: the episode's starting scene
        self.where, self.dirty = dict(self.start[0]), set(self.start[1])
        self.held = None


def check_puts(room: TableRoom, start: int) -> None:
    """MAGMA's _verify_put_destinations over the stage's puts."""
    for thing, dirty, target in room.puts[start:]:
        food = thing in room.food
        if thing == "sponge":
            continue
        wanted = (("trashcan",) if food else ("washing_machine",)) if dirty else \
            (("food_storage", "table") if food else ("dish_storage", "table"))
        assert target in wanted, f"{'dirty' if dirty else 'clean'} {thing} put in {target}: {room.calls}"


def stage_goal(spec: dict[str, Any]) -> Any:
    """The stage's goal as MAGMA checks it, after its entry transition, once, at the stage's start."""
    mark: dict[str, int] = {}

    def goal(room: TableRoom) -> bool:
        if not mark:
            mark.update(puts=len(room.puts), done=len(room.done))
            for thing in room.on_table(spec.get("dirtied", [])):  # DirtyTableObjectsTransition
                room.dirty.add(thing)
            if spec.get("restocked"):  # RestockStorageTransition
                for thing in spec["active"]:
                    room.where[thing] = "food_storage" if thing in room.food else "dish_storage"
                    room.dirty.discard(thing)
        check_puts(room, mark["puts"])
        if spec["kind"] == "WipeStage":  # a wipe, and the next put is the sponge on the table
            tools = room.done[mark["done"]:]
            if "wipe" not in tools or "put" not in tools[tools.index("wipe"):]:
                return False
            after = room.puts[-1]
            assert after[0] == "sponge" and after[2] == "table", f"after the wipe, {after}: {room.calls}"
            return True
        on_table = room.on_table(spec["active"])
        if spec["kind"] == "ClearTableStage":
            return len(on_table) <= spec["maximum"]
        slots = sum(min(sum(1 for o in on_table if o.rsplit("_", 1)[0] == kind), n)
                    for kind, n in spec["requirements"].items())
        return slots >= spec["minimum"] and len(on_table) <= sum(spec["requirements"].values())
    return goal


def knows_kitchens(food: set[str]) -> Model:
    """The model lava asks the class of a held object: right, as the local model is 98% of the time."""
    def model(req: GenerationRequest) -> list[str]:
        assert req.component == "classes", f"the model was asked ({req.component}): {req.messages[-1].content}"
        kind = re.search(r"Which class is an? (\w+)\?", req.messages[-1].content).group(1)
        return [json.dumps({"class": "food" if kind in food else "dishware"})] * req.n
    return model


def call_or_words(number: int, decision: dict) -> dict | None:
    """The decision made while the next request is on its way ("Clean the table." done, "Now wipe the
    table." coming): its call is held; words ("Done. ...") are kept pending by MAGMA's skill manager and
    replaced by the next non-empty answer, so nothing is held and the next request goes on."""
    return decision["tool_calls"][0] if decision["tool_calls"] else None


def play(spec: dict[str, Any]) -> Stage:
    flags = {"direct": spec["direct"], "reset": spec["reset"]}
    if spec["kind"] in ("SetTableStage", "ClearTableStage", "WipeStage"):
        return Stage(spec["say"], stage_goal(spec), budget=spec["budget"], **flags)
    return Stage(spec["say"], budget=spec.get("budget", 0), lookups=frozenset(spec.get("lookups", ())), **flags)


@pytest.mark.parametrize("spec", EPISODES, ids=[e["episode"] for e in EPISODES])
def test_magma_table_episode(spec: dict[str, Any]) -> None:
    room = TableRoom(spec)
    kinds = {thing.rsplit("_", 1)[0] for thing in spec["food"]}
    said, _ = episode(room, [play(s) for s in spec["stages"]], spec["memory_list"], model=knows_kitchens(kinds),
                      hold=call_or_words)
    assert all(said)


def test_the_episodes_cover_setting_clearing_wiping_and_both_transitions() -> None:
    kinds = {s["kind"] for e in EPISODES for s in e["stages"]}
    assert {"SetTableStage", "ClearTableStage", "WipeStage", "ConstraintBaseStage"} <= kinds
    assert any(s.get("dirtied") for e in EPISODES for s in e["stages"])
    assert any(s.get("restocked") for e in EPISODES for s in e["stages"])
    assert any(o.startswith("mango") for e in EPISODES for o in e["food"])
