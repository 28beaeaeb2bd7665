"""Zones: several robots move named objects between shared areas, each robot reaching only some.

MAGMA's bi_robot_sorting is the model case: one tool `deplace(object, target_area)`, an inspection
tool only arm1 may call, arm1 reaching the left and mutual areas and arm2 the right and mutual
ones. A small model guesses object names ("banana"), sends robots out of their reach and spends
the stage budget (8 calls, every robot call counted) on refusals. The task is a small planning
problem, so this skill solves it:

1. recognise the shape, not the scenario: a tool with an object-like and a location-like
   parameter (by names and descriptions, which MAGMA-GEN renames), several robots, a
   parameterless observation tool, and places known from the attributes;
2. look once, on a robot that may (rules such as "Only arm1 can inspect ..." and refusals teach
   which), and read the area report ("a, b are in the right area. ... Damaged objects: a.");
3. read the goal from the request: type-to-area assignments, recipe quotas, where damaged and
   remaining objects go, counted moves ("move 1 apple object from the right tray to the mutual
   tray", in order when joined by "then"), "only intact", and a priority rule ("always sort all
   apple objects first"); anything else is not understood and the turn goes back to the model;
4. fix, once per request, the area each object must end in, choosing among equivalent objects the
   cheapest to move (a robot reaching both areas: 1 call; a relay through an area both reach: 2);
5. each turn, at most one call per free robot, in parallel where robots and objects allow, and
   "Done. ..." once every object is where it must be.

Reach comes from rules ("Robot 1 has access to left area and mutual area", "arm1 operates in
left_zone", "... must pass through mutual_zone") and from refusals ("The area right_zone is out
of range for robot arm1."). Everything lives in the skill's JSON notes, so any replica continues.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..protocol import AgentDecision, ToolCall
from ..situation import Situation
from ..tools import CANCEL_TOOL, ToolBox, ToolSpec
from .demos import roles
from .goals import NUMBER, NUMBER_WORDS, listed, number, stem, words
from .task_state import TaskState, read_results

_LOCATION = re.compile(r"area|zone|locat|place|destination|target|tray|region|where|shelf|bin\b|container", re.I)
_THING = re.compile(r"object|item|thing|fruit|product|name", re.I)
_PLACE_KEY = re.compile(r"locat|zone|area|place|tray|region", re.I)
_PLACE_NAME = re.compile(r"\b[a-z][a-z0-9]*_(?:zone|area|tray|region)\b", re.I)
GENERIC_PLACE = frozenset({"area", "zone", "tray", "region", "side", "location", "place"})
GENERIC_THING = frozenset({"object", "item", "fruit", "product", "thing"})
_NUM = rf"(?P<n>{NUMBER})"
_END = r"(?=\s*(?:[.,;:!]|$|\band\b|\bthen\b))"
_PHRASE = r"[a-z][\w\s-]*?"

# -- the request's forms ---------------------------------------------------------------------
_ALL_TO = re.compile(rf"\b(?:place|put|move|store|sort|bring|send)\s+all\s+(?:the\s+)?(?P<what>{_PHRASE})\s+"
                     rf"(?:in|into|to|on|onto)\s+(?:the\s+)?(?P<place>{_PHRASE}){_END}", re.I)
_MUST_GO = re.compile(rf"\b(?:all\s+)?(?:the\s+)?(?P<what>{_PHRASE})\s+(?:must|should)\s+(?:be\s+)?"
                      rf"(?:placed|put|moved|stored|sent|go)\s+(?:in|into|to|on)\s+(?:the\s+)?(?P<place>{_PHRASE}){_END}",
                      re.I)
_MOVE = re.compile(rf"\b(?:move|bring|transfer|put|place|take|send|deliver)\s+{_NUM}\s+(?P<what>{_PHRASE})\s+"
                   rf"(?:from\s+(?:the\s+)?(?P<source>{_PHRASE})\s+)?(?:to|into|onto|in)\s+(?:the\s+)?"
                   rf"(?P<target>{_PHRASE}){_END}", re.I)
_RECIPE_AT = re.compile(rf"\b(?:recipe|order|set|kit|basket)\s+(?:in|at|on)\s+(?:the\s+)?(?P<place>{_PHRASE}){_END}",
                        re.I)
_CONTAIN = re.compile(r"\bmust\s+(?:contain|include|have|hold)\s*:?\s*(?P<items>[^.]+)", re.I)
_INTACT = re.compile(r"\bonly\s+(?:move|use|take|handle)\s+(?:the\s+)?intact\b", re.I)
_FIRST = re.compile(rf"\b(?:sort|move|handle|place|put|do)\s+(?:all\s+)?(?:the\s+)?(?P<what>{_PHRASE})\s+first\b", re.I)
_FORGET = re.compile(r"\b(forget|ignore|drop|no longer|stop|cancel)\b", re.I)
_ROBOT = r"(?:robot\s*\d+|[a-z][\w-]*\d)"  # "robot 2", "arm1"
# "Use arm1 for the damaged object in the left zone and arm2 for the one in the right zone."
_USE = re.compile(rf"\buse\s+(?P<body>{_ROBOT}\s+for\b[^.;]*)", re.I)
_USE_SPLIT = re.compile(rf"\s*(?:,\s*and|,|\band)\s+(?={_ROBOT}\s+for\b)", re.I)
_USE_PART = re.compile(r"^(?:robot\s*(?P<n>\d+)|(?P<name>[a-z][\w-]*\d))\s+for\s+(?P<what>[\w\s-]*?)\s+"
                       r"(?:in|on|at|from)\s+(?:the\s+)?(?P<place>[\w\s-]+?)\s*$", re.I)
# Phrases that carry no goal of their own: what is left of a request once they and the parsed
# clauses are removed must name no object kind, place or number, or the request is not understood.
_BENIGN = re.compile(r"\bsort\s+(?:all\s+)?(?:the\s+)?\w+\s+by\s+(?:type|kind)\b|\bperform\s+the\s+following\b[^:.]*|"
                     r"\bprepare\s+the\s+(?:recipe|order)\b|\bthe\s+recipe\b|\bin\s+any\s+order\b", re.I)

# -- reports and refusals -------------------------------------------------------------------
_REPORT = re.compile(r"(?P<things>[\w-]+(?:\s*,\s*[\w-]+)*)\s+(?:is|are)\s+(?:in|on|at|inside)\s+(?:the\s+)?"
                     r"(?P<place>[\w\s-]+?)\s*(?:\.|;|$)", re.I)
_DAMAGED = re.compile(r"\bdamaged(?:\s+objects?|\s+items?)?\s*:\s*(?P<things>[\w-]+(?:\s*,\s*[\w-]+)*)", re.I)
_AREA_OUT = re.compile(r"\barea\s+(?P<place>[\w-]+)\s+is\s+out\s+of\s+(?:range|reach)\s+for\s+(?:robot\s+)?"
                       r"(?P<robot>[\w-]+)", re.I)
_OBJECT_OUT = re.compile(r"\bobject\s+(?P<thing>[\w-]+)\s+is\s+out\s+of\s+(?:range|reach)\s+for\s+(?:robot\s+)?"
                         r"(?P<robot>[\w-]+)", re.I)
_ALREADY = re.compile(r"(?P<thing>[\w-]+)\s+is\s+already\s+(?:in|on|at)\s+(?:the\s+)?(?P<place>[\w-]+)", re.I)
_UNKNOWN = re.compile(r"\bunknow\w*\s+(?:object|item|name)", re.I)
_CANNOT_LOOK = re.compile(r"\bcannot\b|\bcan't\b|\bnot allowed\b|\bunable\b|\bonly\b", re.I)
_ONLY = re.compile(r"\bonly\s+(?:robot\s+)?(?P<robot>[\w-]+)\s+(?:can|may|has|is able)", re.I)
_ACCESS = re.compile(r"\b(?:robot\s*(?P<n>\d+)|(?P<name>[a-z][\w-]*\d))\s+(?:has access to|operates in|operates on|"
                     r"can reach|reaches|works in|can access|can use|covers)\s+(?P<where>[^.;]+?)(?=[.;]|,\s*while|$)",
                     re.I)
_SHARED = re.compile(r"\b(?:through|via|use|using)\s+(?:the\s+)?(?P<place>[\w-]+(?:\s+(?:area|zone|tray))?)", re.I)

MAX_RETRIES = 2  # a refusal lava cannot explain (a slipped grasp) is retried this often per object


# -- recognising the task --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shape:
    observe: ToolSpec
    move: ToolSpec
    thing: str  # the move tool's object parameter
    place: str  # its location parameter
    robots: tuple[str, ...]
    places: tuple[str, ...]


def _places(situation: Situation, move: ToolSpec, texts: Iterable[str]) -> tuple[str, ...]:
    """Places from attributes whose key names locations, else `x_zone`-like names in the texts."""
    found: list[str] = []
    for key, value in situation.attributes.items():
        if _PLACE_KEY.search(key) and isinstance(value, list):
            found += [v for v in value if isinstance(v, str) and v.strip()]
    if not found:
        for text in [*texts, *(p.description for p in move.params)]:
            found += [m.group(0) for m in _PLACE_NAME.finditer(text)]
    return tuple(dict.fromkeys(found))


def shape(situation: Situation, texts: Iterable[str] = ()) -> Shape | None:
    toolbox: ToolBox = situation.toolbox
    robots = toolbox.robots or ()
    observe = roles(toolbox)[0]
    if len(robots) < 2 or observe is None:
        return None
    for tool in toolbox.tools:
        if tool.name == CANCEL_TOOL or len(tool.params) != 2:
            continue
        # The location parameter is the one whose name says so ("target_area", "destination",
        # "sorting_zone"); failing that, the one whose description does and whose name is not a thing's.
        located = [p for p in tool.params if _LOCATION.search(p.name)] or \
                  [p for p in tool.params if _LOCATION.search(p.description) and not _THING.search(p.name)]
        if len(located) != 1:
            continue
        place = located[0]
        thing = next(p for p in tool.params if p is not place)
        places = _places(situation, tool, texts)
        if len(places) >= 2:
            return Shape(observe, tool, thing.name, place.name, tuple(robots), places)
    return None


# -- reading texts ---------------------------------------------------------------------------


def place_of(phrase: str, places: Sequence[str]) -> str | None:
    """'the right tray', 'right area', 'left_zone' -> the one place sharing its distinctive words."""
    phrase = phrase.strip()
    if phrase in places:
        return phrase
    said = words(phrase) - GENERIC_PLACE
    if not said:
        return None
    hits = [p for p in places if said <= (words(p) - GENERIC_PLACE)]
    return hits[0] if len(hits) == 1 else None


def kind_of(phrase: str, kinds: Iterable[str]) -> str | None:
    said = words(phrase) - GENERIC_THING
    hits = [k for k in kinds if words(k) and words(k) <= said]
    return hits[0] if len(hits) == 1 else None


def read_report(text: str, places: Sequence[str]) -> tuple[dict[str, str], list[str]] | None:
    """'a, b are in the right area. c is in the mutual zone. Damaged objects: a.' ->
    ({a: right_zone, b: right_zone, c: mutual_zone}, [a]); None when it is no such report or names
    a place lava does not know."""
    where: dict[str, str] = {}
    damaged_match = _DAMAGED.search(text)
    body = text[:damaged_match.start()] if damaged_match else text
    body = body.split(":", 1)[1] if ":" in body else body  # "This is the position of existing objects: ..."
    for match in _REPORT.finditer(body):
        place = place_of(match["place"], places)
        if place is None:
            return None
        for thing in match["things"].split(","):
            where[thing.strip()] = place
    if not where:
        return None
    damaged = [t.strip() for t in damaged_match["things"].split(",")] if damaged_match else []
    return where, damaged


def read_reach(texts: Iterable[str], robots: Sequence[str], places: Sequence[str]) -> dict[str, list[str]]:
    """Areas each robot reaches, from rules: "Robot 1 has access to left area and mutual area",
    "arm1 operates in left_zone", plus an area all robots share ("... must pass through
    mutual_zone", "Both robots can use the mutual area to transfer objects")."""
    reach: dict[str, set[str]] = {}
    shared: set[str] = set()
    for text in texts:
        for match in _ACCESS.finditer(text):
            robot = _robot(match["n"], match["name"], robots)
            if robot is None:
                continue
            found = {p for part in re.split(r",|\band\b|\bor\b", match["where"]) if (p := place_of(part, places))}
            if found:
                reach.setdefault(robot, set()).update(found)
        if re.search(r"\btransfer|\bpass\b|\bshared?\b|\bboth robots\b", text, re.I):
            for match in _SHARED.finditer(text):
                if (p := place_of(match["place"], places)) is not None:
                    shared.add(p)
    if not reach:
        return {}
    return {robot: sorted(found | shared) for robot, found in reach.items()}


def _robot(number: str | None, name: str | None, robots: Sequence[str]) -> str | None:
    if name:
        return next((r for r in robots if r.lower() == name.lower()), None)
    assert number is not None
    ending = [r for r in robots if re.search(rf"(?<!\d){number}$", r)]
    if len(ending) == 1:
        return ending[0]
    index = int(number) - 1
    return robots[index] if 0 <= index < len(robots) else None


def priority(rules: Sequence[str], kinds: Iterable[str]) -> str | None:
    """The kind a rule says to handle first, unless a later rule forgets it."""
    first = None
    kinds = list(kinds)
    for rule in rules:
        match = _FIRST.search(rule)
        if match and _FORGET.search(rule):
            first = None
        elif match and (k := kind_of(match["what"], kinds)) is not None:
            first = k
    return first


@dataclass
class Goal:
    """What the request asks, before it is bound to objects."""
    assign: dict[str, str] = field(default_factory=dict)  # kind -> place, every object of it
    quotas: list[tuple[str, str, int]] = field(default_factory=list)  # (place, kind, count), intact first
    moves: list[tuple[int, str, str | None, str]] = field(default_factory=list)  # (count, kind, source, target)
    ordered: bool = False  # moves joined by "then": one after the other
    damaged_to: str | None = None
    rest_to: str | None = None
    intact_only: bool = False
    movers: dict[str, str] = field(default_factory=dict)  # place -> the robot the user wants to move from it


def read_goal(request: str, places: Sequence[str], kinds: Sequence[str], robots: Sequence[str] = ()) -> Goal | None:
    """The request's goal, or None when some part of it is not understood."""
    goal = Goal()
    spans: list[tuple[int, int]] = []

    def take(match: re.Match[str]) -> None:
        spans.append(match.span())

    for match in _USE.finditer(request):
        for part in _USE_SPLIT.split(match["body"]):
            use = _USE_PART.match(part.strip())
            robot = _robot(use["n"], use["name"], robots) if use else None
            place = place_of(use["place"], places) if use else None
            if robot is None or place is None:
                return None
            goal.movers[place] = robot
        take(match)

    for match in _MOVE.finditer(request):
        k, target = kind_of(match["what"], kinds), place_of(match["target"], places)
        source = place_of(match["source"], places) if match["source"] else None
        if k is None or target is None or (match["source"] and source is None):
            return None
        n = number(match["n"])
        goal.moves.append((n, k, source, target))
        take(match)
    if len(goal.moves) > 1 and re.search(r"\bthen\b|\bafter that\b|\bin this order\b", request, re.I):
        goal.ordered = True
    for pattern in (_ALL_TO, _MUST_GO):
        for match in pattern.finditer(request):
            if any(s <= match.start() < e for s, e in spans):
                continue
            place = place_of(match["place"], places)
            what = words(match["what"])
            if place is None:
                return None
            if "damaged" in what:
                goal.damaged_to = place
            elif what & {"remaining", "other", "rest", "everything", "else"}:
                goal.rest_to = place
            elif (k := kind_of(match["what"], kinds)) is not None:
                goal.assign[k] = place
            else:
                return None
            take(match)
    if (at := _RECIPE_AT.search(request)) and (contain := _CONTAIN.search(request)):
        place = place_of(at["place"], places)
        if place is None:
            return None
        for part in re.split(r",|\band\b", contain["items"]):
            if not part.strip():
                continue
            item = re.match(rf"\s*{_NUM}\s+(?P<what>.+)", part.strip(), re.I)
            k = kind_of(item["what"], kinds) if item else None
            if item is None or k is None:
                return None
            n = number(item["n"])
            goal.quotas.append((place, k, n))
        take(at)
        take(contain)
    if (intact := _INTACT.search(request)) is not None:
        goal.intact_only = True
        take(intact)
    if not (goal.assign or goal.quotas or goal.moves or goal.damaged_to or goal.rest_to):
        return None
    left = request
    for start, end in sorted(spans, reverse=True):
        left = left[:start] + " " + left[end:]
    left = _BENIGN.sub(" ", left)
    # Whatever was not read must not name a kind, a place or a count ("leave 1 apple in ...").
    rest = words(left)
    if re.search(r"\d", left) or rest & NUMBER_WORDS or any(
            words(k) <= rest for k in kinds) or any((words(p) - GENERIC_PLACE) <= rest for p in places) or rest & {
            "not", "never", "except", "leave", "keep", "without", "but"}:
        return None
    return goal


# -- planning --------------------------------------------------------------------------------


class Reach:
    """Which robot reaches which place: rules first, refusals and successes since."""

    def __init__(self, robots: Sequence[str], places: Sequence[str], notes: Mapping[str, Any]) -> None:
        self.robots, self.places = list(robots), list(places)
        known = notes.get("reach") or {}
        banned = notes.get("unreachable") or {}
        self.sets = {r: (set(known[r]) if r in known else set(places)) - set(banned.get(r, [])) for r in robots}

    def direct(self, robot: str, source: str, target: str) -> bool:
        return {source, target} <= self.sets[robot]

    def cost(self, source: str, target: str) -> int:
        if source == target:
            return 0
        if any(self.direct(r, source, target) for r in self.robots):
            return 1
        return 2 if self.hop(source, target) else 99

    def hop(self, source: str, target: str, robot: str | None = None) -> str | None:
        """An area `robot` (any robot) can bring the object to, from which another reaches the target."""
        for r in [robot] if robot else self.robots:
            for place in self.places:
                if place != source and self.direct(r, source, place) and any(
                        q != r and self.direct(q, place, target) for q in self.robots):
                    return place
        return None

    def options(self, robot: str, source: str, target: str) -> str | None:
        """Where `robot` should bring an object now: the target itself, or a relay area."""
        if self.direct(robot, source, target):
            return target
        if any(self.direct(q, source, target) for q in self.robots):
            return None  # another robot does it in one call
        return self.hop(source, target, robot)


def desired(goal: Goal, where: Mapping[str, str], damaged: Iterable[str], reach: Reach
            ) -> tuple[dict[str, str], list[str]] | None:
    """The place each object must end in, and for ordered moves the order to move them in; None
    when the request asks for more than the scene holds (lava's reading of one of them is wrong).
    Among equivalent objects the cheapest to move is chosen."""
    damaged = set(damaged)
    want: dict[str, str] = {}
    order: list[str] = []
    things = sorted(where)
    if goal.damaged_to:
        want.update({t: goal.damaged_to for t in things if t in damaged})
    for k, place in goal.assign.items():
        want.update({t: place for t in things if stem(t) == k and t not in want})

    def fallback(t: str) -> str:
        return goal.rest_to or where[t]

    for place, k, n in goal.quotas:
        candidates = [t for t in things if stem(t) == k and t not in want
                      and (t not in damaged or not goal.damaged_to)]
        # The cost an object adds by serving the quota, against where it would go otherwise.
        candidates.sort(key=lambda t: (t in damaged, reach.cost(where[t], place) - reach.cost(where[t], fallback(t)),
                                       t))
        if len(candidates) < n:
            return None
        want.update({t: place for t in candidates[:n]})
    if goal.rest_to:
        want.update({t: goal.rest_to for t in things if t not in want})
    claimed: set[str] = set()
    for n, k, source, target in goal.moves:
        candidates = [t for t in things if stem(t) == k and t not in claimed and (source is None or where[t] == source)
                      and where[t] != target and not (goal.intact_only and t in damaged)]
        candidates.sort(key=lambda t: (reach.cost(where[t], target), t))
        if len(candidates) < n:
            return None
        for t in candidates[:n]:
            want[t] = target
            claimed.add(t)
            order.append(t)
    return want, order if goal.ordered else []


def plan_turn(todo: Sequence[str], where: Mapping[str, str], want: Mapping[str, str], reach: Reach,
              free: Sequence[str], movers: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(robot, object, place) calls for one turn: as many objects as free robots can move at once,
    earliest in `todo` first. `movers`: the robot the user named for objects in a place."""
    movers = movers or {}
    options = {t: [(r, dest) for r in free if movers.get(where[t], r) == r
                   and (dest := reach.options(r, where[t], want[t])) is not None]
               for t in todo}
    movable = [t for t in todo if options[t]]
    for size in range(min(len(free), len(movable)), 0, -1):
        for chosen in itertools.combinations(movable, size):
            for picks in itertools.product(*(options[t] for t in chosen)):
                robots = [r for r, _ in picks]
                if len(set(robots)) == size:
                    return [(r, t, dest) for t, (r, dest) in zip(chosen, picks, strict=True)]
    return []


# -- the skill -------------------------------------------------------------------------------


class ZonesSkill:
    name = "zones"

    def observe(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> None:
        rules = [*situation.memory.memory_list, *state.rules]
        found = shape(situation, [*rules, state.request])
        if found is None:
            return
        self.learn_rules(found, rules, notes)
        if situation.feedback is None:
            return
        calls = {c["robot"]: c for c in notes.get("sent") or []}
        for robot, call in (situation.feedback.previous_calls or {}).items():
            if isinstance(call, Mapping) and isinstance(call.get("name"), str):
                calls[robot] = {"robot": robot, "name": call["name"], "arguments": call.get("arguments") or {}}
        results = read_results(situation.feedback)
        if not results and not situation.feedback.failed:
            # "The action has completed.": every call succeeded, with no message.
            for call in calls.values():
                self.learn(found, call, True, "", notes)
        for result in results:
            call = calls.get(result.robot)
            if call is not None and call["name"] == result.tool and result.informative:
                self.learn(found, call, result.ok, result.message, notes)
        notes["sent"] = []

    @staticmethod
    def learn_rules(found: Shape, rules: Sequence[str], notes: dict[str, Any]) -> None:
        # Rules are read into the notes as soon as they are seen: a later "forget the rule ..."
        # clears the task state's rules, but never what the robots can reach.
        reach = read_reach(rules, found.robots, found.places)
        if reach:
            notes["reach"] = {**(notes.get("reach") or {}), **reach}
        for rule in rules:
            looking = r"inspect|observ|detect|look|" + re.escape(found.observe.name)
            if (match := _ONLY.search(rule)) and re.search(looking, rule, re.I):
                robot = next((r for r in found.robots if r.lower() == match["robot"].lower()), None)
                if robot:
                    notes["observer"] = robot

    def learn(self, found: Shape, call: Mapping[str, Any], ok: bool, message: str, notes: dict[str, Any]) -> None:
        robot, arguments = call["robot"], call.get("arguments") or {}
        where: dict[str, str] = notes.setdefault("where", {})
        if call["name"] == found.observe.name:
            report = read_report(message, found.places) if ok else None
            if report is not None:
                notes["where"], notes["damaged"] = report
                notes["observer"], notes["stale"] = robot, False
            elif ok:
                notes["unreadable"] = True
            else:
                notes["not_observers"] = sorted({*(notes.get("not_observers") or []), robot})
                if (match := _ONLY.search(message)) and (other := next(
                        (r for r in found.robots if r.lower() == match["robot"].lower()), None)) and other != robot:
                    notes["observer"] = other
            return
        if call["name"] != found.move.name:
            return
        thing, place = arguments.get(found.thing), arguments.get(found.place)
        if not isinstance(thing, str) or not isinstance(place, str):
            return
        source = where.get(thing)
        if ok:
            where[thing] = place
            reach = notes.get("reach")
            if reach and robot in reach:  # it did reach both: believe the world over the rules
                reach[robot] = sorted({*reach[robot], place, *([source] if source else [])})
            notes.setdefault("moved", []).append(f"{thing} to {place}")
            return
        if (match := _ALREADY.search(message)) and match["thing"] == thing:
            where[thing] = match["place"] if match["place"] in found.places else place
        elif (match := _AREA_OUT.search(message)) and match["place"] in found.places:
            self.unreachable(notes, robot, match["place"])
        elif (match := _OBJECT_OUT.search(message)) and source is not None:
            self.unreachable(notes, robot, source)
        elif _UNKNOWN.search(message):
            notes["stale"] = True  # lava's picture of the world is wrong: look again
        else:
            retries = notes.setdefault("retries", {})
            retries[thing] = retries.get(thing, 0) + 1

    @staticmethod
    def unreachable(notes: dict[str, Any], robot: str, place: str) -> None:
        banned = notes.setdefault("unreachable", {})
        banned[robot] = sorted({*banned.get(robot, []), place})

    # -- the next decision -------------------------------------------------------------------

    @staticmethod
    def begin(notes: dict[str, Any], request: str) -> None:
        """A new request starts with no goal, moves or looks of its own; the scene stays."""
        if notes.get("request") != request:
            notes.update(request=request, want=None, order=[], movers={}, moved=[], retries={}, looks=0)

    def next(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> AgentDecision | None:
        rules = [*situation.memory.memory_list, *state.rules]
        found = shape(situation, [*rules, state.request])
        if found is None or notes.get("unreadable"):
            return None
        self.begin(notes, state.request)
        if not notes.get("where") or notes.get("stale"):
            return self.look(found, situation, notes)
        where: dict[str, str] = notes["where"]
        damaged = notes.get("damaged") or []
        kinds = sorted({stem(t) for t in where} | {v for v in situation.attributes.get("object_classes", [])
                                                    if isinstance(v, str)})
        reach = Reach(found.robots, found.places, notes)
        if notes.get("want") is None:
            goal = read_goal(state.request, found.places, kinds, found.robots)
            if goal is None or (bound := desired(goal, where, damaged, reach)) is None:
                return None
            notes["want"], notes["order"] = bound
            notes["movers"] = goal.movers
        want, order = notes["want"], notes.get("order") or []
        todo = [t for t in want if t in where and where[t] != want[t]]
        if not todo:
            moved = notes.get("moved") or []
            return AgentDecision(say="Done. " + (f"I moved {'; '.join(moved[-8:])}." if moved else
                                                 "Everything was already in place."))
        retries = notes.get("retries") or {}
        if any(retries.get(t, 0) > MAX_RETRIES for t in todo):
            return None  # something lava does not understand keeps failing: the model decides
        first = priority(rules, kinds)
        rank = {t: i for i, t in enumerate(order)}
        # Of moves in any order, the least refused first: an object that could not be grasped ("Failed
        # to grasp: apple_0. The object is unreachable right now.") waits while another is moved.
        todo.sort(key=lambda t: (first is not None and stem(t) != first, rank.get(t, len(rank)), retries.get(t, 0), t))
        if order:
            todo = todo[:1]  # ordered moves: each one done before the next is started
        elif first is not None and stem(todo[0]) == first:
            todo = [t for t in todo if stem(t) == first]  # the priority kind before anything else
        free = [r for r in found.robots if r not in situation.toolbox.busy]
        planned = plan_turn(todo, where, want, reach, free, notes.get("movers"))
        if not planned:
            return None
        calls = [ToolCall(name=found.move.name, arguments={found.thing: t, found.place: dest}, target_robot_name=r)
                 for r, t, dest in planned]
        notes["sent"] = [{"robot": c.target_robot_name, "name": c.name, "arguments": c.arguments} for c in calls]
        return AgentDecision(tool_calls=calls)

    @staticmethod
    def look(found: Shape, situation: Situation, notes: dict[str, Any]) -> AgentDecision | None:
        """One observation, on the robot known to be allowed, else the first not known to be refused."""
        if notes.get("looks", 0) >= 3:
            return None
        refused = set(notes.get("not_observers") or [])
        observer = notes.get("observer")
        candidates = [observer] if observer in found.robots and observer not in refused else \
            [r for r in found.robots if r not in refused]
        free = [r for r in candidates if r not in situation.toolbox.busy] or candidates
        if not free:
            return None
        notes["looks"] = notes.get("looks", 0) + 1
        call = ToolCall(name=found.observe.name, arguments={}, target_robot_name=free[0])
        notes["sent"] = [{"robot": call.target_robot_name, "name": call.name, "arguments": {}}]
        return AgentDecision(tool_calls=[call])


# -- questions about the scene --------------------------------------------------------------

_ASK_DAMAGED = re.compile(r"^\s*(?:which|what)\s+(?:objects?|items?|fruits?|things?)\s+(?:are|is)\s+damaged\s*\?",
                          re.IGNORECASE)
_ASK_CONTENTS = re.compile(r"^\s*what\s+(?:objects?|items?|fruits?|things?)\s+(?:are|is)\s+(?:currently\s+|now\s+)?"
                           r"(?:in|on)\s+(?:the\s+)?(?P<place>[\w\s-]+?)\s*\?", re.IGNORECASE)
_ASK_KIND = re.compile(r"^\s*(?:in|on)\s+which\s+(?P<noun>[a-z]+)\s+(?:are|is)\s+(?:all\s+)?(?:the\s+)?"
                       r"(?P<kind>[a-z]+?)s?\s+(?:objects?\s+)?(?:located|placed|stored)?\s*\?", re.IGNORECASE)


def _counted(things: Sequence[str], classes: Sequence[Any] = ()) -> str:
    """"1 banana object, 1 apple object, and 2 orange objects": the kinds in the order the task's
    classes list them (MAGMA's answers follow it), any other kind after them by name."""
    order = {c: i for i, c in enumerate(classes) if isinstance(c, str)}
    kinds = sorted({stem(t) for t in things}, key=lambda k: (order.get(k, len(order)), k))
    parts = [f"{n} {k} object{'' if n == 1 else 's'}" for k in kinds if (n := sum(stem(t) == k for t in things))]
    return listed(parts)


def scene_answer(situation: Situation, state: TaskState) -> AgentDecision | None:
    """A question about where things are or which are damaged ("What objects are currently in the left
    tray?", "Which objects are damaged?", "In which tray are all banana objects located?"), answered
    from the skill's picture of the scene: one look first when it has none (MAGMA's question stages
    allow the inspection tool before the answer). None for other questions."""
    rules = [*situation.memory.memory_list, *state.rules]
    found = shape(situation, [*rules, state.request])
    if found is None:
        return None
    question = state.request
    contents, kind = _ASK_CONTENTS.match(question), _ASK_KIND.match(question)
    place = place_of(contents["place"], found.places) if contents else None
    if not (_ASK_DAMAGED.match(question) or place is not None or kind is not None):
        return None
    notes = dict(state.notes.get(ZonesSkill.name) or {})
    try:
        ZonesSkill.begin(notes, state.request)
        if not notes.get("where") or notes.get("stale"):
            return ZonesSkill.look(found, situation, notes)
    finally:
        state.notes = {**state.notes, ZonesSkill.name: notes}
    where: dict[str, str] = notes["where"]
    if place is not None:
        there = [t for t, p in where.items() if p == place]
        named = contents["place"].strip() if contents else place
        if not there:
            return AgentDecision(say=f"The {named} is empty.")
        classes = situation.attributes.get("object_classes") or ()
        return AgentDecision(say=f"The {named} contains {_counted(there, classes)}.")
    if kind is not None:
        things = [t for t in where if stem(t).lower() == kind["kind"].lower()]
        if not things:
            return None  # a kind lava does not see: the model answers
        places = [p for p in found.places if any(where[t] == p for t in things)]  # report places are known ones
        noun = kind["noun"].lower()

        def called(p: str) -> str:
            return f"{' '.join(sorted(words(p) - GENERIC_PLACE)) or p} {noun}"

        if len(places) == 1:
            return AgentDecision(say=f"All {kind['kind']} objects are in the {called(places[0])}.")
        spread = [f"{sum(where[t] == p for t in things)} in the {called(p)}" for p in places]
        return AgentDecision(say=f"The {kind['kind']} objects are not all in one {noun}: {listed(spread)}.")
    damaged = sorted(t for t in notes.get("damaged") or [] if t)  # by name, as MAGMA's answer lists them
    return AgentDecision(say=f"The damaged objects are {', '.join(damaged)}." if damaged else
                         "There are no damaged objects.")


__all__ = ["Goal", "Reach", "Shape", "ZonesSkill", "desired", "place_of", "plan_turn", "read_goal",
           "read_reach", "read_report", "scene_answer", "shape"]
