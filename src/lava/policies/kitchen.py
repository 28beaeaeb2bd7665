"""Kitchen: two robots share a table, one of them washes dishware at a sink (MAGMA's two-robot
table_cleaning, AdvancedCleanTable). A small model takes "the sink" for an object, sends the
washer to storage it cannot reach and loses the stage budget; the task is a small scheduling
problem, so this skill plans it.

1. Recognise the shape, not the scenario: two robots, a parameterless scan, a take and a put tool
   (demos.roles), a tool that cleans one named object, and places whose names say sink, drying,
   trash, food storage, dish storage and table.
2. The washer is the robot the rules name with the sink (else the one whose name says dish or
   wash); the other robot stores. Refusals do not teach more: they make lava look
   again, and the second refusal of one object leaves the turn to the model.
3. Scan once, then keep the scene in the skill's notes: where each object is, which are dirty,
   what each robot holds.
4. Goals read from the request: wash the dirty dishware ("Clean all dirty dishes in the sink");
   put every object where it belongs ("Store the clean dishware and clear the table", "Clean and
   store every object correctly"): dirty food to the trash, clean food to the food storage,
   dishware, washed first when dirty, to the dish storage; wipe the table (take the sponge, wipe,
   put it back on the table). Anything else goes to the model.
5. Each turn, at most one call per robot, and at most one call per busy spot (the table, the drying
   zone), since MAGMA serialises robots reaching the same place; "Done." once the goal holds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..protocol import AgentDecision, ToolCall
from ..situation import Situation
from ..tools import CANCEL_TOOL, ToolSpec
from .demos import roles
from .goals import NUMBER, number, stem
from .names import location_values
from .scene import read_scene
from .task_state import TaskState, cannot_grasp, results_with_calls

# World knowledge, not MAGMA's lists: the dishware and cleaning things of a kitchen table. Any
# other kind on the table is taken for food, and a refusal ("can only take dishware") corrects it.
DISHWARE = frozenset({"plate", "glass", "cup", "mug", "bowl", "goblet", "dish", "saucer", "fork", "knife", "spoon",
                      "pan", "pot", "teapot", "kettle", "jug", "pitcher", "tumbler", "wineglass", "ladle"})
CLEANING = frozenset({"sponge", "cloth", "towel", "brush", "rag", "scrubber", "wipe"})
MAX_RETRIES = 1  # a second refusal for the same object: lava's picture is wrong, the model decides

_CLEAN_TOOL = re.compile(r"\b(?:clean|wash|scrub|rinse)", re.I)
_WIPE_TOOL = re.compile(r"\bwipe", re.I)
_DIRTY = re.compile(r"\bdirty\s+objects?\s+(?:is|are)\s*:?\s*(?P<things>[\w-]+(?:\s*,\s*[\w-]+)*)", re.I)
_NOT_DISHWARE = re.compile(r"can only (?:take|handle|clean) dishware", re.I)

_WASH = re.compile(r"\b(?:clean|wash)\w*\s+(?:all\s+)?(?:the\s+)?dirty\s+(?:dish|plate|dishware)", re.I)
_STORE = re.compile(r"\b(?:store|clear|put every|put all|tidy|clean and store|where it belongs|correct location)", re.I)
_WIPE_REQUEST = re.compile(r"\bwipe\b", re.I)
_SET = re.compile(r"\bset\s+the\s+table\s+with\s+(?P<items>[^.;!?]+)", re.I)
_ITEM = re.compile(rf"^\s*(?:and\s+)?(?P<n>{NUMBER})\s+(?P<kind>[a-z][\w-]*?)(?:es|s)?\s*$", re.I)
_UNSURE = re.compile(r"\b(?:leave|keep|except|only|instead|not|never|but)\b", re.I)


@dataclass(frozen=True, slots=True)
class Kitchen:
    observe: ToolSpec
    take: ToolSpec
    put: ToolSpec
    clean: ToolSpec
    wipe: ToolSpec | None
    washer: str
    storer: str
    table: str
    sink: str
    drying: str
    trash: str
    food_store: str
    dish_store: str


def _place(places: Sequence[str], *patterns: str) -> str | None:
    found = [p for p in places if all(re.search(pattern, p, re.I) for pattern in patterns)]
    return found[0] if len(found) == 1 else None


def kitchen(situation: Situation, rules: Sequence[str]) -> Kitchen | None:
    toolbox = situation.toolbox
    robots = list(toolbox.robots or ())
    observe, take, put = roles(toolbox)
    if len(robots) != 2 or observe is None or take is None or put is None:
        return None
    clean = next((t for t in toolbox.tools if t.name != CANCEL_TOOL and len(t.params) == 1 and t not in (take, put)
                  and _CLEAN_TOOL.search(f"{t.name.replace('_', ' ')} {t.description}")), None)
    wipe = next((t for t in toolbox.tools if not t.params and t is not observe
                 and _WIPE_TOOL.search(f"{t.name.replace('_', ' ')} {t.description}")), None)
    places = location_values(situation.attributes)
    spots = (_place(places, "table"), _place(places, "sink"), _place(places, "dry"),
             _place(places, "trash|garbage|bin"), _place(places, "food"), _place(places, "dish"))
    if clean is None or any(spot is None for spot in spots):
        return None
    table, sink, drying, trash, food_store, dish_store = spots  # type: ignore[misc]
    # "For dirty dishware, the dish_robot puts it in sink and uses clean": the washer works at the sink.
    named = [r for r in robots if any(re.search(rf"(?<![\w-]){re.escape(r)}(?![\w-])", rule) and sink in rule
                                      for rule in rules)]
    by_name = [r for r in robots if re.search(r"dish|wash|sink", r, re.I)]
    washer = named[0] if len(named) == 1 else by_name[0] if len(by_name) == 1 else None
    if washer is None:
        return None
    storer = next(r for r in robots if r != washer)
    return Kitchen(observe, take, put, clean, wipe, washer, storer, table, sink, drying, trash, food_store,
                   dish_store)


def kind(thing: str, food: Sequence[str] = ()) -> str:
    """'dishware', 'cleaning' or 'food' for an object name (plate_2, sponge, apple_1)."""
    base = stem(thing)
    if base in food:
        return "food"
    if base in DISHWARE or base.rstrip("s") in DISHWARE:
        return "dishware"
    return "cleaning" if base in CLEANING else "food"


def read_goal(request: str) -> str | None:
    """'wash', 'store', 'set' or 'wipe', or None when the request is not one of them."""
    if _UNSURE.search(request):
        return None
    if _SET.search(request):
        return "set" if setting(request) is not None else None
    if _WIPE_REQUEST.search(request) and not _STORE.search(request):
        return "wipe"
    if _STORE.search(request):
        return "store"
    if _WASH.search(request):
        return "wash"
    return None


def setting(request: str) -> dict[str, int] | None:
    """"Set the table with 2 goblets and 1 bowl." -> {goblet: 2, bowl: 1}; None when a part is no count."""
    match = _SET.search(request)
    if match is None:
        return None
    counts: dict[str, int] = {}
    for part in re.split(r",|\band\b", match["items"]):
        if not part.strip():
            continue
        item = _ITEM.match(part)
        if item is None:
            return None
        counts[item["kind"].lower()] = number(item["n"])
    return counts or None


def _kind_named(word: str, kinds: set[str]) -> str | None:
    """The scene's kind a request's word names: "goblet" (from "goblets"), "mango" (from "mangoes")."""
    for candidate in (word, word + "e", word + "s", word.rstrip("e")):
        if candidate in kinds:
            return candidate
    return None


class KitchenSkill:
    name = "kitchen"

    # -- observe: fold each result into the notes -------------------------------------------

    def observe(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> None:
        rules = [*situation.memory.memory_list, *state.rules]
        found = kitchen(situation, rules)
        if found is None or situation.feedback is None:
            return
        for result, call in results_with_calls(situation.feedback, state):
            value = next(iter((call.get("arguments") or {}).values()), None)
            self.fold(found, notes, result.robot, call["name"], value, result.ok, result.message)

    @staticmethod
    def fold(found: Kitchen, notes: dict[str, Any], robot: str, name: str, value: Any, ok: bool,
             message: str) -> None:
        where: dict[str, str] = notes.setdefault("where", {})
        held: dict[str, str] = notes.setdefault("held", {})
        dirty: list[str] = notes.setdefault("dirty", [])
        if name == found.observe.name:
            scene = read_scene(message) if ok else None
            if scene is not None:
                notes["where"] = {t: place for place, things in scene.items() for t in things}
                match = _DIRTY.search(message)
                notes["dirty"] = [t.strip() for t in match["things"].split(",")] if match else []
                notes["stale"] = False
            return
        if not ok:
            if isinstance(value, str):
                if _NOT_DISHWARE.search(message) and stem(value) not in notes.setdefault("food", []):
                    notes["food"].append(stem(value))
                retries = notes.setdefault("retries", {})
                retries[value] = retries.get(value, 0) + 1
                if name == found.take.name and cannot_grasp(message):
                    # Where lava believed, but not to be taken now: another of its kind is, if the
                    # table wants one (the targets are drawn again); no look would show more.
                    notes["ungraspable"] = sorted({*(notes.get("ungraspable") or []), value})
                    notes["targets"] = None
                    return
            notes["stale"] = True  # what lava believed was wrong: look again
            return
        if name == found.take.name and isinstance(value, str):
            where.pop(value, None)
            held[robot] = value
        elif name == found.put.name and isinstance(value, str) and robot in held:
            where[held.pop(robot)] = value
            notes["ungraspable"] = []  # MAGMA draws grasp failures anew at each stage: worth a new try
        elif name == found.clean.name and isinstance(value, str):
            where[value] = found.drying  # MAGMA's clean moves the washed dish to the drying zone
            if value in dirty:
                dirty.remove(value)
        elif found.wipe is not None and name == found.wipe.name:
            notes["wiped"] = True

    # -- next: one call per robot --------------------------------------------------------------

    def next(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> AgentDecision | None:
        rules = [*situation.memory.memory_list, *state.rules]
        found = kitchen(situation, rules)
        if found is None or not state.request:
            return None
        goal = read_goal(state.request)
        if goal is None or (goal == "wipe" and found.wipe is None):
            return None
        if notes.get("request") != state.request:
            notes.update(request=state.request, wiped=False, targets=None)
        if any(n > MAX_RETRIES for n in (notes.get("retries") or {}).values()):
            return None
        busy = set(situation.toolbox.busy)
        if not notes.get("where") or notes.get("stale"):
            if notes.get("looks", 0) >= 3:
                return None
            robot = next((r for r in (found.storer, found.washer) if r not in busy), found.storer)
            notes["looks"] = notes.get("looks", 0) + 1
            return AgentDecision(tool_calls=[ToolCall(name=found.observe.name, arguments={}, target_robot_name=robot)])
        notes["looks"] = 0
        if goal == "set" and notes.get("targets") is None:
            targets = self.set_targets(found, setting(state.request) or {}, notes)
            if targets is None:
                return None
            notes["targets"] = targets
        calls = self.plan(found, goal, notes, busy)
        if calls:
            return AgentDecision(tool_calls=calls)
        if self.done(found, goal, notes):
            lacking = self.shortfall(found, setting(state.request) or {}, notes) if goal == "set" else ""
            return AgentDecision(say=f"{self.summary(goal)} {lacking}".strip())
        return None

    @staticmethod
    def home(found: Kitchen, thing: str, notes: Mapping[str, Any]) -> str | None:
        """Where an object belongs once the table is cleared; None for the cleaning things."""
        sort = kind(thing, notes.get("food") or ())
        if sort == "cleaning":
            return None
        if sort == "dishware":
            return found.dish_store
        return found.trash if thing in (notes.get("dirty") or []) else found.food_store

    def set_targets(self, found: Kitchen, counts: Mapping[str, int], notes: Mapping[str, Any]
                    ) -> dict[str, str] | None:
        """Where each object ends when the table is set: the requested counts on the table, clean ones
        already there first, then dishware to wash, then clean ones from elsewhere; the rest away.
        Dirty food cannot be washed: when too little is clean, what is clean is set (`shortfall` says
        what is missing). None when the scene has no such kind (lava's reading is wrong: the model
        decides)."""
        where, dirty = notes.get("where") or {}, set(notes.get("dirty") or [])
        held = {t: r for r, t in (notes.get("held") or {}).items()}
        things = sorted({*where, *held})
        kinds, food = {stem(t) for t in things}, notes.get("food") or ()
        ungraspable = set(notes.get("ungraspable") or ())
        targets: dict[str, str] = {}
        for word, count in counts.items():
            k = _kind_named(word, kinds)
            if k is None:
                return None
            usable = [t for t in things if stem(t) == k and not (t in dirty and kind(t, food) != "dishware")]
            # What costs no extra call first: a clean one on the table, then dirty dishware (washed and
            # carried from the drying zone anyway, to the table as well as to storage), then a clean
            # one from elsewhere (two calls, and a gap where it was stored).
            # One that could not be grasped comes last.
            usable.sort(key=lambda t: (t in ungraspable, 0 if t not in dirty and where.get(t) == found.table
                                       else 1 if t in dirty else 2, t))
            targets.update({t: found.table for t in usable[:count]})
        for thing in things:
            if thing not in targets and (home := self.home(found, thing, notes)) is not None:
                targets[thing] = home
        return targets

    @staticmethod
    def shortfall(found: Kitchen, counts: Mapping[str, int], notes: Mapping[str, Any]) -> str:
        """What the set table lacks, said to the user ("Only 1 clean mango of the 2 asked for could be
        set: mango_1 is dirty."); empty when nothing is."""
        targets, dirty = notes.get("targets") or {}, notes.get("dirty") or []
        kinds = {stem(t) for t in targets}
        said = []
        for word, count in counts.items():
            k = _kind_named(word, kinds) or word
            placed = sum(1 for t, p in targets.items() if p == found.table and stem(t) == k)
            if placed < count:
                spoiled = [t for t in dirty if stem(t) == k]
                why = f": {', '.join(spoiled)} {'is' if len(spoiled) == 1 else 'are'} dirty" if spoiled else ""
                said.append(f"only {placed} clean {k}{'' if placed == 1 else 's'} of the {count} asked for could be "
                            f"set{why}")
        return " ".join(f"{part[0].upper()}{part[1:]}." for part in said)

    def wanted(self, found: Kitchen, goal: str, notes: Mapping[str, Any]) -> dict[str, str]:
        """Objects not where the goal wants them, with the place each must end in."""
        where, dirty = notes.get("where") or {}, set(notes.get("dirty") or [])
        held = {t: r for r, t in (notes.get("held") or {}).items()}
        things, food = [*where, *held], notes.get("food") or ()
        out: dict[str, str] = {}
        for thing in things:
            sort = kind(thing, food)
            if goal == "wash":
                if sort == "dishware" and thing in dirty:
                    out[thing] = found.drying
            elif goal == "store":
                home = self.home(found, thing, notes)
                if home is not None and (where.get(thing) != home or thing in held):
                    out[thing] = home
            elif goal == "set":
                target = (notes.get("targets") or {}).get(thing)
                clean_enough = thing not in dirty or sort != "dishware"
                if target is not None and (where.get(thing) != target or thing in held or not clean_enough):
                    out[thing] = target
            elif goal == "wipe" and sort == "cleaning" and (thing in held or where.get(thing) != found.table):
                out[thing] = found.table
        return out

    def plan(self, found: Kitchen, goal: str, notes: dict[str, Any], busy: set[str]) -> list[ToolCall]:
        where, dirty, food = notes.get("where") or {}, set(notes.get("dirty") or []), notes.get("food") or ()
        held: dict[str, str] = dict(notes.get("held") or {})
        calls: list[ToolCall] = []
        spots: set[str] = set()  # places a call of this turn already reaches

        def add(robot: str, tool: ToolSpec, value: str | None, spot: str) -> None:
            arguments = {tool.params[0].name: value} if tool.params and value is not None else {}
            calls.append(ToolCall(name=tool.name, arguments=arguments, target_robot_name=robot))
            spots.add(spot)

        if goal == "wipe":
            if found.storer in busy:
                return []
            sponge = next((t for t in [*where, *held.values()] if kind(t) == "cleaning"), None)
            holding = held.get(found.storer)
            if notes.get("wiped"):
                if holding is not None:
                    add(found.storer, found.put, found.table, found.table)
                return calls
            if holding is None and sponge is not None and where.get(sponge) == found.table:
                add(found.storer, found.take, sponge, found.table)
            elif holding is not None and kind(holding) == "cleaning" and found.wipe is not None:
                add(found.storer, found.wipe, None, found.table)
            return calls

        todo = self.wanted(found, goal, notes)
        # The storer's put first: it completes a move (what the stage counts) and frees its hand,
        # where the washer's take at the same spot would only start one.
        storing = found.storer not in busy and goal in ("store", "set")
        stored = held.get(found.storer)
        if storing and stored is not None:
            target = (todo.get(stored) if goal == "set" else self.home(found, stored, notes)) or found.table
            add(found.storer, found.put, target, target)
        # The washer: finish what it holds, else take the next dirty dish to the sink.
        if found.washer not in busy:
            washed = held.get(found.washer)
            if washed is not None:
                target = found.sink if washed in dirty else found.drying
                if target not in spots:
                    add(found.washer, found.put, target, target)
            else:
                in_sink = sorted(t for t, p in where.items() if p == found.sink and t in dirty and t in todo)
                on_table = sorted(t for t, p in where.items() if p in (found.table, found.drying) and t in dirty
                                  and t in todo and kind(t, food) == "dishware")
                if in_sink:
                    add(found.washer, found.clean, in_sink[0], found.drying)
                elif on_table and where[on_table[0]] not in spots:
                    add(found.washer, found.take, on_table[0], where[on_table[0]])
        # The storer, hands free: take the next clean object to store.
        if storing and stored is None:
            reachable = (found.table, found.drying, found.food_store, found.dish_store)
            # Setting the table, what the stage counts goes first: the table's objects and the
            # stored ones; dirty food thrown away counts for nothing there.
            ready = sorted((t for t in todo if where.get(t) in reachable
                            and not (kind(t, food) == "dishware" and t in dirty)),
                           key=lambda t: (goal == "set" and todo[t] == found.trash, where[t] != found.table, t))
            ready = [t for t in ready if where[t] not in spots]
            if ready:
                add(found.storer, found.take, ready[0], where[ready[0]])
        return calls

    def done(self, found: Kitchen, goal: str, notes: Mapping[str, Any]) -> bool:
        if goal == "wipe":
            return bool(notes.get("wiped")) and not (notes.get("held") or {})
        return not self.wanted(found, goal, notes) and not (notes.get("held") or {})

    @staticmethod
    def summary(goal: str) -> str:
        return {"wash": "Done. Every dirty dish is clean and drying.",
                "store": "Done. Every object is clean and in its place.",
                "set": "Done. The table is set, and everything else is clean and in its place.",
                "wipe": "Done. The table is wiped and the sponge is back on it."}[goal]


__all__ = ["DISHWARE", "Kitchen", "KitchenSkill", "kind", "kitchen", "read_goal"]
