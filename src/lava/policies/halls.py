"""The halls skill: robots that walk between halls carrying a tray (MAGMA's hall_sorting shape).

Tools (recognised by names, descriptions and parameter names, since MAGMA-GEN renames them): a
parameterless local detection ("Objects on the current table: book_4, pen_1. The tray is empty.
The robot is near Hall1."), a move with a hall parameter, a load-onto-tray and an unload-from-tray
tool with an object parameter. A detection only shows the hall the robot stands in, so the skill
keeps, in its notes, a partial map: the content of each hall seen so far, where each robot stands
and what its tray holds, updated by every result.

Goals read from the request and rules:
- quotas: "Each hall must contain one book, one pen, ..." (exact: surplus is moved away);
- deliveries: "deliver 1 book to Hall4", "deliver 2 pens and 1 book to Hall2" (at least);
- assignments: "Place all book objects in Hall1", "book and pen objects belong in Hall4" (rules
  apply when the request speaks of assigned halls);
- transfers: "Take one pen from Hall1 and deliver it to Hall2" (that many of the class, from that
  hall), redirected by "Change of plan: deliver that pen to Hall3 instead." (an amendment: the map stays).
Anything else is None, and the turn goes to the rest of the policy.

Plan, one call per turn, for whichever robot has the most useful next step: detect in a hall not
seen yet, unload a tray item wanted here, load surplus/misplaced items, go where a tray item is
wanted, else to an unexplored hall (reception halls first), else to one with a known misplaced
item; never into a hall another robot occupies. A surprising failure makes the robot look again;
when what it sees is the layout of the start, the world was reset (MAGMA resets some stages) and
the map of the start is restored instead of exploring again.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..protocol import AgentDecision, ToolCall
from ..situation import Situation
from ..tools import CANCEL_TOOL, ToolBox, ToolSpec
from .goals import NUMBER, listed, number
from .task_state import TaskState, cannot_grasp_said, results_with_calls

TRAY_CAPACITY = 4  # until a refusal says otherwise ("The tray is full. It supports only 4 objects.")
HALL_CAPACITY = 4  # tables hold a 2x2 grid; "No free place on Hall3." lowers it for that hall

_NUM = rf"({NUMBER})"

# -- recognising the tools -------------------------------------------------------------------

_MOVE_NAME = re.compile(r"move|navigat|go|travel|change|walk|drive|send|goto", re.I)
_PLACE_PARAM = re.compile(r"hall|room|destination|location|place|area|zone|target", re.I)
_OBJECT_PARAM = re.compile(r"object|item|thing|product|name", re.I)
_UNLOAD = re.compile(r"unload|drop|place|put|release|depos|remove|deliver", re.I)
_LOAD = re.compile(r"(?<!un)load|pick|collect|take|grab|fetch|lift", re.I)
_DETECT = re.compile(r"detect|scan|list|report|inspect|look|observ|see", re.I)
_CARRIER = re.compile(r"tray|basket|cart|carrier|bin|box", re.I)


@dataclass(frozen=True)
class HallTools:
    detect: ToolSpec
    move: ToolSpec
    load: ToolSpec
    unload: ToolSpec


@functools.lru_cache(maxsize=512)  # tool sets repeat across inputs and turns; ToolBox is frozen
def hall_tools(toolbox: ToolBox) -> HallTools | None:
    tools = [t for t in toolbox.tools if t.name != CANCEL_TOOL]
    detect = next((t for t in tools if not t.params and _DETECT.search(f"{t.name} {t.description}")), None)
    one = [t for t in tools if len(t.params) == 1]

    def param_text(t: ToolSpec) -> str:
        return f"{t.params[0].name} {t.params[0].description}"

    move = next((t for t in one if _PLACE_PARAM.search(param_text(t)) and not _OBJECT_PARAM.search(t.params[0].name)
                 and _MOVE_NAME.search(f"{t.name} {t.description}")), None)
    objects = [t for t in one if t is not move and _OBJECT_PARAM.search(param_text(t))
               and _CARRIER.search(f"{t.name} {t.description}")]
    # The name decides first (place_on_table unloads, load_tray loads); the description breaks ties.
    unload = next((t for t in objects if _UNLOAD.search(t.name)), None) or next(
        (t for t in objects if re.search(r"\bfrom\b[^.]*\b(tray|basket|cart|carrier)", t.description, re.I)), None)
    load = next((t for t in objects if t is not unload and _LOAD.search(t.name)), None) or next(
        (t for t in objects if t is not unload), None)
    if detect is None or move is None or load is None or unload is None:
        return None
    return HallTools(detect, move, load, unload)


# -- reading the attributes and texts --------------------------------------------------------


def _lists(attributes: Mapping[str, Any]) -> dict[str, list[str]]:
    return {k: [v for v in vs if isinstance(v, str)] for k, vs in attributes.items()
            if k not in ("known_robots", "robot_statuses") and isinstance(vs, list)}


def hall_names(attributes: Mapping[str, Any], move: ToolSpec) -> list[str]:
    """The halls: the attribute list the move parameter's description names values of, else the one
    whose key shares a word with it ("halls"), else the longest list that holds reception halls."""
    lists = _lists(attributes)
    text = f"{move.params[0].name} {move.params[0].description} {move.description}".lower()
    named = [vs for vs in lists.values() if sum(v.lower() in text for v in vs) >= 2]
    if named:
        return max(named, key=len)
    for key, vs in lists.items():
        if key.rstrip("s").lower() in text or key.lower().rstrip("s") in ("hall", "room", "location"):
            return vs
    return []


def reception_halls(attributes: Mapping[str, Any], halls: Sequence[str]) -> list[str]:
    for key, vs in _lists(attributes).items():
        if re.search(r"recept|arriv|incoming|deliver|source|input", key, re.I) and set(vs) <= set(halls):
            return vs
    return []


def class_names(attributes: Mapping[str, Any], halls: Sequence[str]) -> list[str]:
    lists = [(k, vs) for k, vs in _lists(attributes).items() if not set(vs) & set(halls)]
    for key, vs in lists:
        if re.search(r"class|type|categor|kind", key, re.I):
            return vs
    return max((vs for _, vs in lists), key=len, default=[])


def class_of(obj: str, classes: Sequence[str]) -> str:
    for c in sorted(classes, key=len, reverse=True):
        if obj.lower() == c.lower() or obj.lower().startswith(c.lower() + "_") or obj.lower().startswith(c.lower()):
            return c
    return obj.rpartition("_")[0] or obj


def _classes_in(text: str, classes: Sequence[str], *, as_written: bool = False) -> list[str]:
    """The classes the text names, in the classes' order or (`as_written`) in the text's."""
    found = [(m.start(), c) for c in classes if (m := re.search(rf"\b{re.escape(c)}(?:s|es)?\b", text, re.I))]
    return [c for _, c in (sorted(found) if as_written else found)]


def _hall_in(text: str, halls: Sequence[str]) -> str | None:
    found = [h for h in halls if re.search(rf"(?<![\w-]){re.escape(h)}(?![\w-])", text, re.I)]
    return found[0] if len(found) == 1 else None


def _counted(text: str, classes: Sequence[str]) -> dict[str, int]:
    """"one book, one pen, and 2 packages" -> {book: 1, pen: 1, package: 2}."""
    out: dict[str, int] = {}
    for c in classes:
        m = re.search(rf"\b{_NUM}\s+{re.escape(c)}(?:s|es)?\b", text, re.I)
        if m:
            out[c] = number(m.group(1))
    return out


@dataclass
class Goal:
    exact: dict[tuple[str, str], int] = field(default_factory=dict)  # (hall, class) -> count, surplus moves away
    atleast: dict[tuple[str, str], int] = field(default_factory=dict)  # (hall, class) -> at least this many
    assign: dict[str, str] = field(default_factory=dict)  # class -> the hall all of them belong in
    sources: dict[str, str] = field(default_factory=dict)  # hall -> the hall everything found in it goes to
    # (source hall, class, count, target hall): that many of the class taken from the source, brought there.
    transfers: list[tuple[str, str, int, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.exact or self.atleast or self.assign or self.sources or self.transfers)


_EACH = re.compile(r"\beach\s+(\w+)\s+(?:must|should|has to|needs to)\s+(?:contain|have|hold|get)\s+([^.]+)",
                   re.I)
_DELIVER = re.compile(r"\b(?:deliver|bring|send|move|carry)\s+([^.]*?)\s+(?:to|into)\s+(?:the\s+)?"
                      r"(\S+?)[.,;!]?(?=\s|$)", re.I)
_ALL_TO = re.compile(r"\b(?:place|put|move|store|sort|send|bring|keep)\s+all\s+(?:the\s+)?([^.;]*?)\s+"
                     r"(?:in|into|to|at)\s+(?:the\s+)?(\S+?)[.,;!]?(?=\s|$)", re.I)
_BELONG = re.compile(r"([\w\s,]+?)\s+(?:belongs?|goe?s?|are assigned|is assigned|are stored|is stored)\s+"
                     r"(?:in|into|to|at)\s+(?:the\s+)?(\S+?)[.,;!]?(?=\s|$)", re.I)
_ASSIGNED = re.compile(r"\bassigned\s+(?:storage\s+)?halls?\b|\bwhere\s+(?:it|they)\s+belongs?\b|\bstorage rules\b(?!.*"
                       r"\bexception\b)", re.I)
# "A delivery has arrived in Hall3. Send all its objects to Hall4." / "There is another delivery in
# Hall1 too. Send all of those objects to Hall4 as well." / "Send all objects from Hall1 to Hall2."
_ALL_FROM = re.compile(r"\b(?:send|move|bring|carry|deliver|take|transfer)\s+all\s+(?:of\s+)?(?:the\s+)?"
                       r"(?:(?P<pronoun>its|their|those|these|them)\s+)?(?:objects?|items?|products?)?\s*"
                       r"(?:from\s+(?:the\s+)?(?P<source>[\w-]+)\s+)?(?:to|into)\s+(?:the\s+)?(?P<target>[\w-]+)", re.I)
_ARRIVED = re.compile(r"\b(?:delivery|shipment|order|objects?|products?)\b[^.]*?\b(?:in|at)\s+(?:the\s+)?"
                      r"(?P<hall>[\w-]+)", re.I)
# "Take one pen from Hall1 and deliver it to Hall2.", then "Change of plan: deliver that pen to Hall3 instead."
_TAKE_FROM = re.compile(rf"\b(?:take|pick|get|grab|fetch|collect)\s+{_NUM}\s+(?P<what>[\w-]+)\s+(?:objects?\s+)?"
                        r"from\s+(?:the\s+)?(?P<source>[\w-]+)\s+and\s+(?:deliver|bring|send|move|carry|take|put)\s+"
                        r"(?:it|them)\s+(?:to|into|in)\s+(?:the\s+)?(?P<target>[\w-]+)", re.I)
_REDIRECT = re.compile(r"\b(?:deliver|bring|send|move|carry|take|put)\s+(?:that|this|the|it|them|those)\b[^.]*?\s+"
                       r"(?:to|into|in)\s+(?:the\s+)?(?P<target>[\w-]+)\s+instead\b", re.I)
_UNSURE = re.compile(r"\b(instead|change of plan|except|do not|don't|never|leave|first|priority)\b", re.I)


def read_goal(request: str, rules: Sequence[str], halls: Sequence[str], classes: Sequence[str]) -> Goal | None:
    goal = Goal()
    if (m := _EACH.search(request)):
        for c, n in _counted(m.group(2), classes).items():
            for h in halls:
                goal.exact[(h, c)] = n
    for m in _ALL_TO.finditer(request):
        hall = _hall_in(m.group(2), halls)
        for c in _classes_in(m.group(1), classes) if hall else []:
            goal.assign[c] = hall
    for m in _BELONG.finditer(request):
        hall = _hall_in(m.group(2), halls)
        for c in _classes_in(m.group(1), classes) if hall else []:
            goal.assign[c] = hall
    if not goal.assign:
        for m in _DELIVER.finditer(request):
            hall = _hall_in(m.group(2), halls)
            for c, n in (_counted(m.group(1), classes) if hall else {}).items():
                goal.atleast[(hall, c)] = n
    sentences = re.split(r"(?<=[.!?;])\s+", request)
    for index, sentence in enumerate(sentences):
        for m in _ALL_FROM.finditer(sentence):
            target = _hall_in(m["target"], halls)
            named = _hall_in(m["source"], halls) if m["source"] else None
            previous = sentences[index - 1] if index else ""
            before = [_hall_in(a["hall"], halls) for a in _ARRIVED.finditer(previous)]
            source = named or (before[-1] if m["pronoun"] and before else None)
            if target and source and source != target and not _classes_in(sentence, classes):
                goal.sources[source] = target
    for m in _TAKE_FROM.finditer(request):
        source, target = _hall_in(m["source"], halls), _hall_in(m["target"], halls)
        named = _classes_in(m["what"], classes)
        if source and target and len(named) == 1:
            goal.transfers.append((source, named[0], number(m.group(1)), target))
    redirected = request
    if goal.transfers:
        for m in _REDIRECT.finditer(request):
            if (target := _hall_in(m["target"], halls)) is not None:
                goal.transfers[-1] = (*goal.transfers[-1][:3], target)
                # Understood: the change of plan is no twist left to the model.
                redirected = re.sub(r"\bchange of plan\b|\binstead\b", "", redirected, flags=re.I)
    if not goal and _ASSIGNED.search(request):
        # "Sort all book objects into their assigned hall": the halls come from the rules.
        # "Sort 1 backpack object into its assigned hall": that many, not every backpack there is.
        # The rules as they stand, a later one winning: "Modification of the existing rule: package
        # objects belong in Hall4" moves packages out of the hall an older rule gave them.
        wanted = _classes_in(request, classes) or list(classes)
        counts = _counted(request, classes)
        for c, hall in assignments(rules, halls, classes).items():
            if c in counts:
                goal.atleast[(hall, c)] = counts[c]
            elif c in wanted:
                goal.assign[c] = hall
    if not goal:
        return None
    if _UNSURE.search(re.sub(r"\b(?:temporary exception|as an exception)\b", "", redirected, flags=re.I)):
        return None  # a twist lava does not model: the model decides
    return goal


# -- reading results -------------------------------------------------------------------------

_TABLE = re.compile(r"Objects? (?:on|near|at) the (?:current )?(?:table|hall)[^:]*:\s*(?P<table>[^.]*)\.|"
                    r"No objects? (?:detected|found|on)[^.]*\.", re.I)
_TRAY = re.compile(r"The (?:tray|basket|cart)\s+(?:is empty|contains:?\s*(?P<tray>[^.]*))\.", re.I)
_NEAR = re.compile(r"\b(?:near|in|at)\s+(?P<hall>[\w-]+)\s*\.?\s*$", re.I)


def _split(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def read_detection(message: str) -> tuple[str, list[str], list[str]] | None:
    table, tray, near = _TABLE.search(message), _TRAY.search(message), _NEAR.search(message)
    if table is None or near is None:
        return None
    return near["hall"], _split(table.group("table")), _split(tray.group("tray") if tray else "")


# -- the skill -------------------------------------------------------------------------------


def _empty_notes() -> dict[str, Any]:
    return {"request": "", "halls": {}, "at": {}, "tray": {}, "cap": {}, "tray_cap": TRAY_CAPACITY,
            "initial": {"halls": {}, "at": {}}, "touched": [], "moved": [], "look": [], "dropped": {},
            "unreachable": []}


class HallsSkill:
    name = "halls"

    # -- observe: fold each result into the map -------------------------------------------

    def observe(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> None:
        tools = hall_tools(situation.toolbox)
        if tools is None:
            return
        for key, value in _empty_notes().items():
            notes.setdefault(key, value)  # notes from an older version may lack a key
        if (situation.instruction.type == "user" and state.intent == "act" and notes["request"]
                and state.request.startswith(notes["request"]) and state.request != notes["request"]):
            notes["request"] = state.request  # the running request amended ("Change of plan: ..."): same world
            return
        if situation.instruction.type == "user" and state.intent == "act":
            # A new request (even in the same words): a delivery may have laid the objects out afresh;
            # robots stay where they are.
            at = dict(notes.get("at") or {})
            notes.clear()
            notes.update(_empty_notes())
            notes["at"] = at
            notes["initial"]["at"] = dict(at)
            notes["request"] = state.request
            return
        feedback = situation.feedback
        if feedback is None:
            return
        for result, call in results_with_calls(feedback, state):
            value = next(iter((call.get("arguments") or {}).values()), None)
            if result.ungraspable and call["name"] == tools.load.name and isinstance(value, str):
                # The map is right; this one object cannot be taken now: another of its kind can.
                notes["unreachable"] = sorted({*notes["unreachable"], value})
                continue
            self.fold(notes, tools, situation, result.robot, call["name"], value, result.ok, result.message)

    def fold(self, notes: dict[str, Any], tools: HallTools, situation: Situation, robot: str, name: str,
             value: Any, ok: bool, message: str) -> None:
        halls, at, tray = notes["halls"], notes["at"], notes["tray"]
        here = at.get(robot)
        known_halls = hall_names(situation.attributes, tools.move)
        if name == tools.detect.name and ok:
            seen = read_detection(message)
            if seen is not None:
                self.seen(notes, robot, *seen)
            return
        if name == tools.move.name:
            if ok:
                at[robot] = value
                notes["moved"] = sorted({*notes["moved"], robot})
                return
            if (m := re.search(r"already occupied by ([\w-]+)", message)) and isinstance(value, str):
                other = m.group(1)
                if at.get(other) not in (None, value):
                    self.surprise(notes, other)
                at[other] = value
                if other not in notes["moved"]:
                    notes["initial"]["at"].setdefault(other, value)
                return
            if (m := re.search(r"already (?:in|at|near) ([\w-]+)", message)):
                if here is not None and here != m.group(1):
                    self.reset_or_forget(notes, robot, m.group(1))
                at[robot] = m.group(1)
                return
            self.surprise(notes, robot)
            return
        if not isinstance(value, str):
            return
        if name == tools.load.name:
            if ok:
                if here in halls and value in halls[here]:
                    halls[here].remove(value)
                tray[robot] = [*tray.get(robot, []), value]
                notes["touched"] = sorted({*notes["touched"], here}) if here else notes["touched"]
                return
            if (m := re.search(r"supports only (\d+)", message)) or re.search(r"\bfull\b", message, re.I):
                notes["tray_cap"] = int(m.group(1)) if m else len(tray.get(robot, []))
                if len(tray.get(robot, [])) < notes["tray_cap"]:
                    self.surprise(notes, robot)
                return
            self.surprise(notes, robot)
            return
        if name == tools.unload.name:
            if ok:
                notes["unreachable"] = []  # MAGMA draws grasp failures anew at each stage: worth a new try
                hall = next((h for h in known_halls if h in message), here)
                if value in tray.get(robot, []):
                    tray[robot].remove(value)
                if hall is not None:
                    if hall in halls:
                        halls[hall].append(value)
                    else:  # a hall never seen: what lava put there is all it knows of it
                        notes["dropped"][hall] = [*notes["dropped"].get(hall, []), value]
                    at[robot] = hall
                    notes["touched"] = sorted({*notes["touched"], hall})
                return
            if (m := re.search(r"no free \w+ (?:on|in|at) ([\w-]+)", message, re.I)):
                notes["cap"][m.group(1)] = len(halls.get(m.group(1), [])) or HALL_CAPACITY
                if m.group(1) not in halls:
                    notes["look"] = sorted({*notes["look"], robot})
                return
            self.surprise(notes, robot)

    def seen(self, notes: dict[str, Any], robot: str, hall: str, table: list[str], tray: list[str]) -> None:
        halls, at = notes["halls"], notes["at"]
        changed = (at.get(robot) not in (None, hall) or (hall in halls and sorted(halls[hall]) != sorted(table))
                   or (robot in notes["tray"] and sorted(notes["tray"][robot]) != sorted(tray)))
        if changed:
            self.reset_or_forget(notes, robot, hall, table, tray)
        halls[hall] = list(table)
        notes["dropped"].pop(hall, None)
        at[robot] = hall
        notes["tray"][robot] = list(tray)
        notes["look"] = [r for r in notes["look"] if r != robot]
        if hall not in notes["touched"]:
            notes["initial"]["halls"].setdefault(hall, list(table))
        if robot not in notes["moved"]:
            notes["initial"]["at"].setdefault(robot, hall)

    def reset_or_forget(self, notes: dict[str, Any], robot: str, hall: str, table: list[str] | None = None,
                        tray: list[str] | None = None) -> None:
        """The world is not what the map says. When the robot stands where it started (and sees what
        was there at the start), the stage reset the world: the map of the start is true again.
        Otherwise nothing beyond this hall can be trusted."""
        initial = notes["initial"]
        start = initial["at"].get(robot) == hall and (table is None or sorted(initial["halls"].get(hall, [])) ==
                                                      sorted(table)) and not tray
        if start and initial["halls"]:
            notes["halls"] = {h: list(v) for h, v in initial["halls"].items()}
            notes["at"] = dict(initial["at"])
            notes["tray"] = {r: [] for r in notes["tray"]}
            notes["touched"], notes["moved"], notes["dropped"] = [], [], {}
            return
        notes["halls"] = {}
        notes["at"] = {robot: hall}
        notes["tray"] = {}
        notes["look"] = []
        notes["dropped"] = {}

    def surprise(self, notes: dict[str, Any], robot: str) -> None:
        """A refusal the map did not predict: this robot looks before anything else."""
        here = notes["at"].get(robot)
        if here is not None:
            notes["halls"].pop(here, None)
        notes["tray"].pop(robot, None)
        notes["look"] = sorted({*notes["look"], robot})

    # -- next: the most useful call ---------------------------------------------------------

    def next(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> AgentDecision | None:
        tools = hall_tools(situation.toolbox)
        if tools is None or not notes:
            return None
        halls = hall_names(situation.attributes, tools.move)
        classes = class_names(situation.attributes, halls)
        if not halls or not classes:
            return None
        rules = [*situation.memory.memory_list, *state.rules]
        goal = read_goal(state.request, rules, halls, classes)
        if goal is None:
            return None
        plan = Planner(notes, goal, halls, reception_halls(situation.attributes, halls), classes,
                       list(situation.toolbox.robots or ()))
        step = plan.best()
        if step is None:
            if plan.satisfied():
                return AgentDecision(say=plan.summary())
            if (stuck := plan.held_back()) is not None:
                # Nothing lava can do makes room: the model would only guess (and spend the stage).
                robot, hall, things = stuck
                return AgentDecision(say=f"Sorry, I cannot finish: {hall} is full, so {listed(things)} "
                                         f"stay on {robot}'s tray.")
            if (left := [o for h in plan.known for o in plan.movable(h) if o in plan.unreachable]):
                return AgentDecision(say=cannot_grasp_said(left))
            return None
        robot, action, value = step
        tool = {"detect": tools.detect, "move": tools.move, "load": tools.load, "unload": tools.unload}[action]
        arguments = {tool.params[0].name: value} if tool.params else {}
        return AgentDecision(tool_calls=[ToolCall(name=tool.name, arguments=arguments, target_robot_name=robot)])


class Planner:
    """One turn's view of the map and the goal."""

    def __init__(self, notes: Mapping[str, Any], goal: Goal, halls: list[str], reception: list[str],
                 classes: list[str], robots: list[str]) -> None:
        self.notes, self.goal, self.halls, self.reception, self.classes = notes, goal, halls, reception, classes
        self.robots = robots or sorted(notes["at"])
        self.known: dict[str, list[str]] = {h: list(v) for h, v in notes["halls"].items()}
        if reception:
            # Deliveries arrive in reception halls: a storage hall not seen yet is taken as empty.
            for h in halls:
                if h not in reception and h not in self.known:
                    self.known[h] = list(notes["dropped"].get(h, []))
        self.at: dict[str, str] = dict(notes["at"])
        self.unreachable: set[str] = set(notes.get("unreachable") or ())
        self.tray: dict[str, list[str]] = {r: list(notes["tray"].get(r, [])) for r in self.robots}

    def cls(self, obj: str) -> str:
        return class_of(obj, self.classes)

    def count(self, hall: str, c: str) -> int:
        return sum(1 for o in self.known.get(hall, []) if self.cls(o) == c)

    def carried(self, c: str) -> int:
        return sum(1 for items in self.tray.values() for o in items if self.cls(o) == c)

    def sent_to(self, obj: str) -> str | None:
        """The hall a source goal sends obj to: where everything found in its first hall goes; an
        object on a tray whose first hall lava no longer knows goes where every source sends."""
        if not self.goal.sources:
            return None
        first = next((h for h, objs in self.notes["initial"]["halls"].items() if obj in objs), None)
        if first is not None:
            return self.goal.sources.get(first)
        targets = set(self.goal.sources.values())
        carried = any(obj in items for items in self.tray.values())
        return targets.pop() if carried and len(targets) == 1 else None

    def first_hall(self, obj: str) -> str | None:
        return next((h for h, objs in self.notes["initial"]["halls"].items() if obj in objs), None)

    def transfer(self, obj: str) -> tuple[str, str, int, str] | None:
        """The transfer an object serves: one of its class from its source hall (one on a tray whose
        first hall lava no longer knows is taken to be)."""
        c, first = self.cls(obj), self.first_hall(obj)
        carried = any(obj in items for items in self.tray.values())
        return next((t for t in self.goal.transfers
                     if t[1] == c and (first == t[0] or (first is None and carried))), None)

    def transferred(self, transfer: tuple[str, str, int, str]) -> int:
        """Objects of the transfer brought to its target, or on their way there on a tray."""
        source, c, _, target = transfer
        there = [o for o in self.known.get(target, []) if self.cls(o) == c and self.first_hall(o) == source]
        return len(there) + sum(1 for items in self.tray.values() for o in items if self.transfer(o) == transfer)

    def wanted_at(self, obj: str, hall: str) -> bool:
        """Whether unloading obj in hall serves the goal (the hall must have been seen)."""
        if (transfer := self.transfer(obj)) is not None and obj not in self.known.get(transfer[0], []):
            return transfer[3] == hall
        if (target := self.sent_to(obj)) is not None:
            return target == hall
        c = self.cls(obj)
        if c in self.goal.assign:
            return self.goal.assign[c] == hall
        if hall not in self.known:
            return False
        if (hall, c) in self.goal.exact:
            return self.count(hall, c) < self.goal.exact[(hall, c)]
        if (hall, c) in self.goal.atleast:
            return self.count(hall, c) < self.goal.atleast[(hall, c)]
        return False

    def movable(self, hall: str) -> list[str]:
        """Objects in this hall the goal wants elsewhere; of several that would do, one that can be
        grasped (see `loadable`)."""
        out = []
        # Stable: the hall's order, with what cannot be grasped now after what can.
        here = sorted(self.known.get(hall, []), key=lambda o: o in self.unreachable)
        for transfer in self.goal.transfers:
            if transfer[0] == hall:
                wanted = transfer[2] - self.transferred(transfer)
                out += [o for o in here if self.cls(o) == transfer[1]][:max(wanted, 0)]
        for o in here:
            if o in out or any(t[0] == hall and t[1] == self.cls(o) for t in self.goal.transfers):
                continue
            if (target := self.sent_to(o)) is not None:
                if target != hall:
                    out.append(o)
                continue
            c = self.cls(o)
            if c in self.goal.assign:
                if self.goal.assign[c] != hall:
                    out.append(o)
            elif (hall, c) in self.goal.exact:
                surplus = self.count(hall, c) - self.goal.exact[(hall, c)]
                if surplus > sum(1 for x in out if self.cls(x) == c) and self.somewhere_short(c, hall):
                    out.append(o)
            else:
                short = [h for (h, k), n in self.goal.atleast.items() if k == c and h != hall
                         and (self.count(h, c) if h in self.known else 0) < n]
                need = sum(self.goal.atleast[(h, c)] - (self.count(h, c) if h in self.known else 0) for h in short)
                if short and need - self.carried(c) > sum(1 for x in out if self.cls(x) == c):
                    out.append(o)
        return out

    def loadable(self, hall: str) -> list[str]:
        return [o for o in self.movable(hall) if o not in self.unreachable]

    def somewhere_short(self, c: str, but: str) -> bool:
        return any(h != but and (h not in self.known or self.count(h, c) < n)
                   for (h, k), n in self.goal.exact.items() if k == c)

    def capacity(self, hall: str) -> int:
        return int(self.notes["cap"].get(hall, HALL_CAPACITY))

    def occupied(self, robot: str) -> set[str]:
        return {h for r, h in self.at.items() if r != robot and h}

    def unexplored(self) -> list[str]:
        halls = [h for h in self.halls if h not in self.known]
        from_here = {*self.goal.sources, *(t[0] for t in self.goal.transfers)}
        return sorted(halls, key=lambda h: (h not in from_here, h not in self.reception, self.halls.index(h)))

    def satisfied(self) -> bool:
        if any(self.tray.get(r) for r in self.robots) or any(r not in self.at for r in self.robots):
            return False
        for (h, c), n in self.goal.exact.items():
            if h not in self.known or self.count(h, c) != n:
                return False
        for (h, c), n in self.goal.atleast.items():
            if self.count(h, c) < n:
                return False
        if any(self.transferred(t) < t[2] for t in self.goal.transfers):
            return False
        if self.goal.sources and (any(h not in self.known for h in self.goal.sources)
                                  or any(self.movable(h) for h in self.known)):
            return False
        return not (self.goal.assign and (self.unexplored() or any(self.movable(h) for h in self.known)))

    def options(self, robot: str) -> tuple[int, str, str | None] | None:
        """(rank, action, value): the lower the rank, the more a call now moves the goal forward."""
        here = self.at.get(robot)
        if here is None or robot in self.notes["look"] or (here not in self.known):
            return 0, "detect", None
        tray = self.tray.get(robot, [])
        room = len(tray) < int(self.notes["tray_cap"])
        cap = self.capacity(here)
        drops = [o for o in tray if self.wanted_at(o, here)]
        movable = self.loadable(here)
        if drops:
            if len(self.known[here]) < cap:
                return 1, "unload", drops[0]
            if movable and room:
                return 1, "load", movable[0]  # the table is full: make room first
        if movable and room:
            return 2, "load", movable[0]
        blocked = self.occupied(robot)
        targets = [h for h in self.halls if h != here and h not in blocked and h in self.known
                   and any(self.wanted_at(o, h) for o in tray)]
        if not targets and tray:
            # Assigned halls need no look before unloading; exact quotas do (the count decides).
            targets = [h for h in self.halls if h != here and h not in blocked
                       and any(self.goal.assign.get(self.cls(o)) == h or self.sent_to(o) == h for o in tray)]
        if targets:
            return 3, "move", max(targets, key=lambda h: sum(self.wanted_at(o, h) or
                                                             self.goal.assign.get(self.cls(o)) == h for o in tray))
        if self.satisfied():
            return None
        unexplored = [h for h in self.unexplored() if h not in blocked]
        if unexplored:
            return 4, "move", unexplored[0]
        if room:
            sources = [h for h in self.halls if h != here and h not in blocked and self.loadable(h)]
            if sources:
                return 5, "move", sources[0]
        return None

    def held_back(self) -> tuple[str, str, list[str]] | None:
        """(robot, hall, what it carries for that hall) when the hall it stands in is full of what the
        goal wants there: nothing can be unloaded and nothing moved away."""
        for robot in self.robots:
            here = self.at.get(robot)
            if here is None or here not in self.known or self.movable(here):
                continue
            drops = [o for o in self.tray.get(robot, []) if self.wanted_at(o, here)]
            if drops and len(self.known[here]) >= self.capacity(here):
                return robot, here, drops
        return None

    def wanted_but_blocked(self) -> set[str]:
        """Halls a loaded robot would unload in, where another robot stands."""
        out = set()
        for robot in self.robots:
            for h in self.occupied(robot) - {self.at.get(robot)}:
                if any(self.wanted_at(o, h) or self.goal.assign.get(self.cls(o)) == h or self.sent_to(o) == h
                       for o in self.tray.get(robot, [])):
                    out.add(h)
        return out

    def make_way(self, robot: str) -> tuple[int, str, str | None] | None:
        """A robot with nothing better to do, standing where another must unload: it moves aside
        (one robot per hall), to a hall nobody stands in or is coming to. A hall the goal still has
        to look into comes first, so the step aside is also the look, made before the unloading
        that may end MAGMA's stage (after it, its completion stage allows no move); else a known
        one (no look needed there)."""
        blocked = self.wanted_but_blocked()
        if self.at.get(robot) not in blocked:
            return None
        taken = {h for h in self.at.values() if h} | blocked
        free = [h for h in self.halls if h not in taken]
        to_look = self.unexplored() if self.goal.assign or self.goal.sources else []
        free.sort(key=lambda h: (h not in to_look, h not in self.known, self.halls.index(h)))
        return (3, "move", free[0]) if free else None

    def best(self) -> tuple[str, str, str | None] | None:
        ranked = []
        for index, robot in enumerate(self.robots):
            option = self.options(robot)
            if option is None or option[0] > 3:
                option = self.make_way(robot) or option
            if option is not None:
                ranked.append((option[0], -len(self.tray.get(robot, [])), index, robot, option[1], option[2]))
        if not ranked:
            return None
        _, _, _, robot, action, value = min(ranked)
        return robot, action, value

    def summary(self) -> str:
        parts = [f"{h}: {', '.join(self.known[h])}" for h in self.halls if self.known.get(h)]
        return "Done. The halls now hold " + "; ".join(parts) + "." if parts else "Done."


# -- questions about the rules -----------------------------------------------------------------

_ASK_HALLS_OF = re.compile(r"^\s*which\s+(?:storage\s+)?halls?\s+(?:are|is)\s+assigned\s+to\s+(?P<what>[^?]+)", re.I)
_ASK_TYPES_IN = re.compile(r"^\s*(?:which|what)\s+(?:object\s+)?(?:types?|classes|kinds?|objects?)\s+(?:are|is)\s+"
                           r"assigned\s+to\s+(?:the\s+)?(?P<hall>[\w-]+)", re.I)
_ASK_PRIORITY = re.compile(r"^\s*which\s+(?:storage\s+)?hall\s+(?:currently\s+)?has\s+(?:the\s+)?priority", re.I)
_PRIORITY_ON = re.compile(r"\bcomplete\s+(?:the\s+)?(?P<hall>[\w-]+)\s+first\b", re.I)
_PRIORITY_OFF = re.compile(r"\b(?P<hall>[\w-]+)\s+no\s+longer\s+has\s+priority\b|\bforget\b[^.]*\bpriority\b", re.I)


def assignments(rules: Sequence[str], halls: Sequence[str], classes: Sequence[str]) -> dict[str, str]:
    """Class -> hall from the rules ("backpack and book objects belong in Hall2"); a later rule wins.
    The classes come in the order the rules first named them, as MAGMA's type_hall relation keeps
    them (its answers list a hall's types so: "pen and book are assigned to Hall1")."""
    assigned: dict[str, str] = {}
    for rule in rules:
        for m in _BELONG.finditer(rule):
            hall = _hall_in(m.group(2), halls)
            for c in _classes_in(m.group(1), classes, as_written=True) if hall else []:
                assigned[c] = hall
    return assigned


def priority_hall(rules: Sequence[str], halls: Sequence[str]) -> str | None:
    """The hall a rule says to complete first ("For future deliveries, complete Hall3 first."), unless
    a later one withdrew it ("Hall3 no longer has priority.", "Forget the current Hall3 priority rule.")."""
    current = None
    for rule in rules:
        if _PRIORITY_OFF.search(rule):
            current = None
        elif (m := _PRIORITY_ON.search(rule)) and (hall := _hall_in(m["hall"], halls)):
            current = hall
    return current


def hall_answer(situation: Situation, state: TaskState) -> str | None:
    """The rules' answer to MAGMA's hall questions ("Which storage halls are assigned to book and pen?",
    "Which object types are assigned to Hall3?", "Which storage hall currently has priority?"); None
    for other questions."""
    tools = hall_tools(situation.toolbox)
    if tools is None:
        return None
    halls = hall_names(situation.attributes, tools.move)
    classes = class_names(situation.attributes, halls)
    rules = [*situation.memory.memory_list, *state.rules]
    question = state.request
    if _ASK_PRIORITY.match(question):
        hall = priority_hall(rules, halls)
        return f"{hall} currently has priority and must be completed first." if hall else \
            "No storage hall currently has priority."
    assigned = assignments(rules, halls, classes)
    if (m := _ASK_HALLS_OF.match(question)) and (asked := _classes_in(m["what"], classes, as_written=True)):
        grouped: dict[str, list[str]] = {}
        for c in asked:
            if c in assigned:
                grouped.setdefault(assigned[c], []).append(c)
        if not grouped:
            return f"No storage hall is assigned to {listed(asked)}."
        return ", ".join(f"{listed(cs)} {'is' if len(cs) == 1 else 'are'} assigned to {hall}"
                         for hall, cs in grouped.items()) + "."
    if (m := _ASK_TYPES_IN.match(question)) and (hall := _hall_in(m["hall"], halls)):
        there = [c for c, assigned_to in assigned.items() if assigned_to == hall]
        if not there:
            return f"No object types are assigned to {hall}."
        return f"{listed(there)} {'is' if len(there) == 1 else 'are'} assigned to {hall}."
    return None


__all__ = ["Goal", "HallTools", "HallsSkill", "Planner", "assignments", "class_of", "hall_answer", "hall_tools",
           "priority_hall", "read_detection", "read_goal"]
