"""Returns at a reception desk and deliveries prepared from storage, by several robots:
"Process the two returned products currently in the reception area: place the clean product in its
corresponding storage and discard the damaged product. At the same time, prepare priority delivery
AD-001 for Alice Martin in Paris with 2 snacks products."

The work, read from the tools' own words (MAGMA-GEN renames tools, parameters and descriptions):
- returns, by the robot that owns the reception: look at the reception table, then for each product
  pick it, inspect it, and put it in the trash (broken) or on its helper tray (clean); then carry the
  tray to the storage spot of each clean product's type, pick it from the tray and put it on the table;
- deliveries, by another robot: go to an output bay of the requested service, take its package, go
  to each product type's spot, pick and put the products in the package, go back, drop the package
  and label it with the order, the recipient and the city.

Each stage of the benchmark counts every robot call against a budget of about 1.5 times the
costliest objective, and a stage ends as soon as enough objectives are met. So the delivery runs
beside the returns, never sending two robots to one spot: its calls spend the budget of the stages
the returns end, which the returns alone leave half unused.
Progress is replayed from the calls that succeeded; what only a message says (the products seen,
clean or broken, which robot blocks a spot, a product a put let fall beside its target) is kept in
the skill's notes.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..protocol import AgentDecision, ToolCall
from ..situation import Situation
from ..tools import CANCEL_TOOL, ToolBox, ToolSpec
from .goals import NUMBER, listed, number, tool_words, words
from .task_state import TaskState, read_results, results_with_calls

_MOVE = frozenset(("move", "navigate", "go", "send", "goto"))
_TAKE = frozenset(("take", "collect", "pick", "grab", "get"))
_DROP = frozenset(("drop", "release", "return", "put", "deposit"))
_BOX = frozenset(("package", "tray", "box", "container", "crate"))
_LOOK = frozenset(("list", "scan", "report", "detection", "detect"))
_DELIVERY = re.compile(r"\bdelivery\s+(?P<id>[A-Z][A-Z0-9]*-\d+)\s+for\s+(?P<name>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)"
                       r"\s+in\s+(?P<city>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)(?P<rest>(?:(?!\bdelivery\s+[A-Z])[^.])*)")
_SEEN = re.compile(r"On\s+(?P<table>[\w ]+?),\s*there is:\s*(?P<items>[^.]*)\.", re.I)
_OCCUPIED = re.compile(r"(?P<target>\S+) is already occupied by (?P<who>\S+?)\.?$", re.I)
# A put that let go of the product but saw it land outside the target (MAGMA's placement check:
# "snacks_3 is not in trashcan.", more than 15 cm from the trashcan's centre).
_MISSED = re.compile(r"^(?P<product>\S+) is not in (?P<target>\S+?)\.?$", re.I)
_TOOK = re.compile(r"\btook\s+(?P<package>[\w-]+?)\.?$", re.I)
# A pick MAGMA refuses because the product is not inside the grid of the table the robot stands at, or
# the robot's gripper is no longer at its spot: which of the two, only a look tells.
_ELSEWHERE = re.compile(r"^Object (?P<product>\S+) is not in the same zone as robot", re.I)


def _parts(name: str) -> set[str]:
    """The parts of a name as written (drinks_spot -> {drinks, spot}): no singular forms."""
    return {p for p in re.split(r"[^a-z0-9]+", name.lower()) if p}


@dataclass(frozen=True)
class ReturnTools:
    move: ToolSpec
    pick: ToolSpec
    put: ToolSpec
    inspect: ToolSpec
    look: ToolSpec
    take_box: ToolSpec | None
    drop_box: ToolSpec | None
    label: ToolSpec | None
    trash: str  # the put target that discards ("trashcan")
    tray: str  # the robot's own helper tray
    package: str  # the package a delivery robot holds
    table: str


@functools.lru_cache(maxsize=512)  # tool sets repeat across inputs and turns; ToolBox is frozen
def return_tools(toolbox: ToolBox) -> ReturnTools | None:
    tools = [t for t in toolbox.tools if t.name != CANCEL_TOOL]
    bare = [t for t in tools if not t.params]
    # Only an inspection tells clean from broken: that is what makes this task shape.
    inspect = next((t for t in bare if {"clean", "broken"} <= words(t.description)), None)
    look = next((t for t in bare if t is not inspect and tool_words(t) & _LOOK), None)
    boxes = [t for t in bare if t not in (inspect, look) and tool_words(t) & _BOX]
    take_box = next((t for t in boxes if tool_words(t) & _TAKE and not tool_words(t) & (_DROP - {"return"})), None)
    drop_box = next((t for t in boxes if t is not take_box and tool_words(t) & _DROP), None)
    label = next((t for t in tools if len(t.params) == 3
                  and any(re.search("city", f"{p.name} {p.description}", re.I) for p in t.params)), None)
    single = [t for t in tools if len(t.params) == 1]
    put = next((t for t in single if "trash" in f"{t.description} {t.params[0].description}".lower()), None)
    move = next((t for t in single if t is not put and tool_words(t) & _MOVE), None)
    pick = next((t for t in single if t not in (put, move) and tool_words(t) & _TAKE), None)
    if None in (inspect, look, put, move, pick):
        return None
    put_text = re.findall(r"[a-z]+", f"{put.description} {put.params[0].description}".lower())  # type: ignore[union-attr]
    trash = next((w for w in put_text if "trash" in w), None)
    tray = next((w for w in put_text if w == "tray"), None)
    package = next((w for w in put_text if w in ("package", "box", "container")), None)
    table = next((w for w in put_text if w == "table"), None)
    if None in (trash, tray, package, table):
        return None
    return ReturnTools(move, pick, put, inspect, look, take_box, drop_box, label,  # type: ignore[arg-type]
                       trash, tray, package, table)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Delivery:
    order: str
    name: str
    city: str
    service: str | None
    products: tuple[tuple[str, int], ...]  # (product type, how many)


def read_deliveries(request: str, types: Sequence[str], services: Sequence[str]) -> list[Delivery]:
    """"delivery AD-001 for Lucas Moreau in Nantes, using priority service, containing 1 hygiene
    product" and "priority delivery AD-001 for Alice Martin in Paris with 2 snacks products"."""
    found = []
    for match in _DELIVERY.finditer(request):
        around = request[max(0, match.start() - 30):match.start()] + match["rest"]
        service = next((s for s in services if re.search(rf"\b{re.escape(s)}\b", around, re.I)), None)
        products = []
        for t in types:
            count = re.search(rf"\b({NUMBER})\s+{re.escape(t)}\b", match["rest"], re.I)
            if count:
                products.append((t, number(count[1])))
        if products:
            found.append(Delivery(match["id"], match["name"], match["city"].strip(), service, tuple(products)))
    return found


_ASKED_ABOUT = re.compile(r"\b(?:recipient|name|city|destination|products?|contain\w*|service)\b", re.I)
_PRODUCT = re.compile(rf"\b({NUMBER})\s+([\w-]+?)\s+products?\b", re.I)
_PREPARING = re.compile(r"\bwhich\s+deliver(?:y|ies)\s+are\s+you\s+(?:preparing|working on|handling|doing)\b", re.I)


def delivery_answer(question: str, requests: Sequence[str]) -> str | None:
    """What a request said of the delivery a question names ("What are the recipient name,
    destination city, and requested products for delivery AD-001?"), in MAGMA's words; or which
    deliveries are being prepared."""
    if _PREPARING.search(question):
        ids = list(dict.fromkeys(m["id"] for text in requests[:1] for m in _DELIVERY.finditer(text)))
        if ids:
            return (f"The deliveries currently being prepared are {', '.join(ids)}." if len(ids) > 1 else
                    f"The delivery currently being prepared is {ids[0]}.")
        return None
    asked = set(re.findall(r"\b[A-Z][A-Z0-9]*-\d+\b", question))
    if not asked or not _ASKED_ABOUT.search(question):
        return None
    for text in requests:
        for match in _DELIVERY.finditer(text):
            if match["id"] not in asked:
                continue
            # MAGMA's AskDeliveryDetailsStage: "Delivery AD-001 is for Karim Benali in Lyon and requires
            # 1 snacks product, 1 drinks product, 1 textile product.", the products as the request lists them.
            products = [f"{n} {kind} product{'' if n == 1 else 's'}" for count, kind in _PRODUCT.findall(match["rest"])
                        if (n := number(count))]
            answer = f"Delivery {match['id']} is for {match['name']} in {match['city'].strip()}"
            return answer + (f" and requires {', '.join(products)}." if products else ".")
    return None


def wants_returns(request: str) -> bool:
    return bool(re.search(r"\breturn|\breception|\bdamaged|\bbroken|\bdiscard", request, re.I))


def _robot_of(who: str, robots: Sequence[str]) -> str | None:
    """The robot a tool-centre name stands for: preparation_b_tcp -> preparation_robot_b."""
    parts = _parts(who) - {"tcp", "gripper", "arm", "robot"}
    fitting = [r for r in robots if parts and parts <= _parts(r)]
    return fitting[0] if len(fitting) == 1 else (who if who in robots else None)


# -- the skill's notes: what only messages say --------------------------------------------------


def _where(done: Sequence[Mapping[str, Any]], robot: str, move: str) -> str | None:
    at = None
    for call in done:
        if call.get("robot") == robot and call["name"] == move:
            at = next(iter((call.get("arguments") or {}).values()), None)
    return at


def _held(done: Sequence[Mapping[str, Any]], robot: str, tools: ReturnTools) -> str | None:
    held = None
    for call in done:
        if call.get("robot") != robot:
            continue
        if call["name"] == tools.pick.name:
            held = next(iter((call.get("arguments") or {}).values()), None)
        elif call["name"] == tools.put.name:
            held = None
    return held


def note_feedback(situation: Situation, state: TaskState, notes: dict[str, Any], tools: ReturnTools) -> None:
    if situation.feedback is None:
        return
    robots = situation.toolbox.robots or ()
    seen, condition, blocked = notes.setdefault("seen", {}), notes.setdefault("condition", {}), \
        notes.setdefault("blocked", {})
    for result in read_results(situation.feedback):
        if result.tool == tools.look.name and result.ok and (match := _SEEN.search(result.message)):
            items = [i.strip() for i in match["items"].split(",") if i.strip() and i.strip() != "nothing"]
            at = _where(state.episode_calls, result.robot, tools.move.name) or ""
            seen[f"{result.robot}@{at}"] = items
        elif result.tool == tools.inspect.name and result.ok:
            held = _held(state.episode_calls, result.robot, tools)
            text = result.message.lower()
            if held:
                condition[held] = "broken" if re.search(r"broken|damaged|defect", text) else \
                    "clean" if "clean" in text else condition.get(held)
        elif result.tool == tools.move.name and not result.ok and (match := _OCCUPIED.search(result.message)):
            who = _robot_of(match["who"], robots)
            if who:
                blocked[match["target"]] = who
        elif result.tool == tools.move.name and result.ok:
            # the robot left wherever it blocked, and where it arrived nobody else is
            at = _where(state.episode_calls, result.robot, tools.move.name)
            for target in [t for t, who in blocked.items() if who == result.robot or t == at]:
                del blocked[target]
    note_misses(situation, state, notes, tools)
    note_astray(situation, state, notes, tools)
    note_unseen(situation, state, notes, tools)


def note_astray(situation: Situation, state: TaskState, notes: dict[str, Any], tools: ReturnTools) -> None:
    """A package taken at a bay other than the one the robot was sent to ("took standard_0" after
    "preparation_robot_a is at priority_bay_0."): the move never happened. MAGMA's move_to checks the
    gripper's distance to the bay, and from standard_bay_0 it reaches priority_bay_0's; take_package
    goes by the robot's base and hands back the package of the bay it stands at, here one already
    labelled. Noted with which take it was (the robot's n-th), where the robot is and where it is not."""
    if tools.take_box is None:
        return
    for result in read_results(situation.feedback):  # type: ignore[arg-type]
        if result.tool != tools.take_box.name or not result.ok or not (match := _TOOK.search(result.message)):
            continue
        found = layout(situation)  # only when a take names its package, not at every feedback
        named = _parts(match["package"])
        real = [t for t in (found.targets if found else ()) if _parts(t) & {"bay", "output"} and named <= _parts(t)]
        sent = _where(state.episode_calls, result.robot, tools.move.name)
        if len(real) == 1 and sent is not None and real[0] != sent:
            takes = sum(c.get("robot") == result.robot and c["name"] == tools.take_box.name
                        for c in state.episode_calls)
            notes.setdefault("astray", []).append({"robot": result.robot, "take": takes, "at": real[0],
                                                   "not": sent})


def note_misses(situation: Situation, state: TaskState, notes: dict[str, Any], tools: ReturnTools) -> None:
    """A product a put let fall beside its target lies where the robot stands: it is picked again there
    ("missed", with where and what it was put in). When that pick is refused too, the product is out of
    every robot's reach ("lost"): the work goes on without it, and the answer names it."""
    missed, lost = notes.setdefault("missed", {}), notes.setdefault("lost", {})
    for result, call in results_with_calls(situation.feedback, state):  # type: ignore[arg-type]
        value = next(iter((call.get("arguments") or {}).values()), None)
        if result.tool == tools.put.name and not result.ok and (match := _MISSED.search(result.message)):
            at = _where(state.episode_calls, result.robot, tools.move.name) or ""
            missed[match["product"]] = {"at": at, "into": match["target"]}
        elif result.tool == tools.pick.name and value in missed:
            if result.ok:
                del missed[value]
            else:
                lost[value] = missed.pop(value)["into"]


def note_unseen(situation: Situation, state: TaskState, notes: dict[str, Any], tools: ReturnTools) -> None:
    """A returned product whose pick at the reception was refused as out of the robot's zone: knocked
    off the table's grid by a neighbour's pick, or still there with the gripper off its spot (held-out
    AdvancedDeliveryDefinition@43, under execution errors). The robot looks ("look"); a product the
    look lists is picked again once the robot has moved back onto its spot ("reseat", then "retry");
    one it does not list is gone from every robot's reach, and the work goes on without it."""
    unseen, gone = notes.setdefault("unseen", {}), notes.setdefault("gone", {})
    reception = notes.get("reception") or ()
    for result, call in results_with_calls(situation.feedback, state):  # type: ignore[arg-type]
        value = next(iter((call.get("arguments") or {}).values()), None)
        if result.tool == tools.pick.name and value in reception and value not in gone:
            if result.ok:
                unseen.pop(value, None)
            elif _ELSEWHERE.search(result.message):
                if (waiting := unseen.get(value, {})).get("step") == "retry":
                    del unseen[value]
                    gone[value] = f"off the {waiting['table']}'s grid"  # listed, yet refused from its spot
                else:
                    unseen[value] = {"robot": result.robot, "step": "look"}
        for product, waiting in list(unseen.items()):
            if waiting["robot"] != result.robot or not result.ok:
                continue
            if result.tool == tools.look.name and waiting["step"] == "look" and (match := _SEEN.search(result.message)):
                items = {i.strip() for i in match["items"].split(",")}
                if product in items:
                    waiting.update(step="reseat", table=match["table"])
                else:
                    del unseen[product]
                    gone[product] = f"no longer on the {match['table']}"
            elif result.tool == tools.move.name and waiting["step"] == "reseat":
                waiting["step"] = "retry"


# -- the plan ----------------------------------------------------------------------------------


Call = tuple[str, str, dict[str, Any]]  # (robot, tool, arguments)


@dataclass
class Plan:
    tools: ReturnTools
    robots: tuple[str, ...]
    keeper: str  # the robot owning the reception (and the trash)
    home: str  # its move target
    targets: list[str]
    types: list[str]
    instances: list[str]
    done: Sequence[Mapping[str, Any]]
    failed: Sequence[Mapping[str, Any]]
    notes: dict[str, Any]

    def arg(self, tool: ToolSpec, value: str) -> dict[str, str]:
        return {tool.params[0].name: value}

    def spot(self, product: str) -> str | None:
        kind = self.kind(product)
        fitting = [t for t in self.targets if kind and kind in _parts(t)]
        return fitting[0] if len(fitting) == 1 else None

    def kind(self, product: str) -> str | None:
        return next((t for t in self.types if product == t or product.startswith(f"{t}_")), None)

    def calls_of(self, robot: str) -> list[Mapping[str, Any]]:
        return [c for c in self.done if c.get("robot") == robot]

    def value(self, call: Mapping[str, Any]) -> Any:
        return next(iter((call.get("arguments") or {}).values()), None)

    # -- returns ----------------------------------------------------------------------------

    def returns(self) -> tuple[str, Call | None]:
        """("done" | "busy" | "unsure", the keeper's next call)."""
        t, robot = self.tools, self.keeper
        at, held, tray, trashed, stored = None, None, [], set(), set()
        for call in self.calls_of(robot):
            value = self.value(call)
            if call["name"] == t.move.name:
                at = value
            elif call["name"] == t.pick.name:
                held = value
                if value in tray:
                    tray.remove(value)
            elif call["name"] == t.put.name and held:
                if value == t.trash:
                    trashed.add(held)
                elif value == t.tray:
                    tray.append(held)
                elif value == t.table and at not in (None, self.home):
                    stored.add(held)
                held = None
        held, pick = self.fallen(robot, held, at)
        if pick is not None:
            return "busy", pick
        here = at in (None, self.home)  # it starts at the reception
        seen = self.notes.get("seen", {}).get(f"{robot}@{'' if at is None else at}") if here else None
        reception = self.notes.get("reception")
        if reception is None:
            if not here:
                return "busy", (robot, t.move.name, self.arg(t.move, self.home))
            if seen is None:
                return "busy", (robot, t.look.name, {})
            reception = self.notes["reception"] = [i for i in seen if self.kind(i)]
        condition = self.notes.get("condition", {})
        if held:
            state = condition.get(held)
            if state is None:
                return "busy", (robot, t.inspect.name, {})
            if state == "broken":
                return ("busy", (robot, t.put.name, self.arg(t.put, t.trash))) if here else ("unsure", None)
            return "busy", (robot, t.put.name, self.arg(t.put, t.tray if here else t.table))
        handled = {*tray, *trashed, *stored, *self.lost, *self.gone}
        waiting = [i for i in reception if i not in handled]
        if waiting:
            step = (self.notes.get("unseen") or {}).get(waiting[0], {}).get("step")
            if not here or step == "reseat":
                return "busy", (robot, t.move.name, self.arg(t.move, self.home))
            if step == "look":
                return "busy", (robot, t.look.name, {})
            return "busy", (robot, t.pick.name, self.arg(t.pick, waiting[0]))
        if tray:
            # by spot, the one the robot is at first
            item = next((i for i in tray if self.spot(i) == at), tray[0])
            spot = self.spot(item)
            if spot is None:
                return "unsure", None
            if at != spot:
                return "busy", (robot, t.move.name, self.arg(t.move, spot))
            return "busy", (robot, t.pick.name, self.arg(t.pick, item))
        return "done", None

    @property
    def lost(self) -> Mapping[str, str]:
        return self.notes.get("lost") or {}

    @property
    def gone(self) -> Mapping[str, str]:
        return self.notes.get("gone") or {}

    def fallen(self, robot: str, held: str | None, at: str | None) -> tuple[str | None, Call | None]:
        """The product the replay says is held, unless a put let it fall: then the call that picks it
        again where it fell, or no product when it fell out of reach."""
        if held in self.lost:
            return None, None
        missed = (self.notes.get("missed") or {}).get(held) if held else None
        if missed is None:
            return held, None
        start = self.home if robot == self.keeper else None  # where a robot is before its first move
        place = missed["at"] or start
        if place is not None and (at or start) != place:
            return held, (robot, self.tools.move.name, self.arg(self.tools.move, place))
        return held, (robot, self.tools.pick.name, self.arg(self.tools.pick, held))  # type: ignore[arg-type]

    # -- deliveries -------------------------------------------------------------------------

    def delivery(self, robot: str, deliveries: Sequence[Delivery]) -> tuple[str, Call | None]:
        t = self.tools
        if t.take_box is None or t.drop_box is None or t.label is None:
            return "unsure", None
        at, has_box, held, in_box, dropped = None, False, None, [], False
        box_bay = None  # where the package in hand was taken: it goes back there
        astray = [a for a in self.notes.get("astray") or () if a["robot"] == robot]
        takes, returning = 0, False  # returning: the package of a bay the robot never left is in hand
        for call in self.calls_of(robot):
            value = self.value(call)
            if call["name"] == t.move.name:
                at = value
            elif call["name"] == t.take_box.name:
                takes += 1
                slip = next((a for a in astray if a["take"] == takes), None)
                if slip is not None:
                    at, returning = slip["at"], True
                    continue
                has_box, in_box, box_bay = True, [], at
            elif call["name"] == t.drop_box.name and returning:
                returning = False  # put back where it was, under the products it left there
            elif call["name"] == t.pick.name:
                held = value
            elif call["name"] == t.put.name and held:
                in_box.append(held)
                held = None
            elif call["name"] == t.drop_box.name:
                has_box, dropped = False, True
            elif call["name"] == t.label.name:
                dropped = False
        if returning:
            return "busy", (robot, t.drop_box.name, {})
        held, pick = self.fallen(robot, held, at)
        if pick is not None:
            return "busy", pick
        pending = self.pending(deliveries)
        if not pending:
            return "done", None
        order = pending[0]
        bays = [b for b in self.targets if order.service and order.service in _parts(b)] or \
            [b for b in self.targets if _parts(b) & {"bay", "output"}]
        refused = {self.value(c) for c in self.failed if c.get("robot") == robot and c["name"] == t.move.name}
        if not has_box and not dropped:
            # A bay's package, dropped there and labelled, is a finished delivery: taking it again
            # would carry it off and leave its products behind (AdvancedDeliveryDefinition@6).
            refused |= self.spent_bays()
        # a bay a move said it reached but never did is avoided while another will do
        avoided = refused | {a["not"] for a in astray}
        bay = box_bay if has_box and box_bay in bays else next((b for b in bays if b not in avoided), None) or \
            next((b for b in bays if b not in refused), None)
        if bay is None:
            return "unsure", None
        if dropped:
            return "busy", (robot, t.label.name, self.label_args(order))
        if not has_box:
            if at != bay:
                return "busy", (robot, t.move.name, self.arg(t.move, bay))
            return "busy", (robot, t.take_box.name, {})
        if held:
            return "busy", (robot, t.put.name, self.arg(t.put, t.package))
        missing = list((Counter({k: n for k, n in order.products}) -
                        Counter(self.kind(i) for i in in_box)).elements())
        if missing:
            kind = missing[0]
            spot = next((s for s in self.targets if kind in _parts(s)), None)
            if spot is None:
                return "unsure", None
            if at != spot:
                return "busy", (robot, t.move.name, self.arg(t.move, spot))
            # never a returned product (taking one back off its storage table undoes the return), nor
            # one an earlier package holds (it left with that package: held-out AdvancedDelivery@31)
            avoid = set(self.notes.get("reception") or []) | self.packed() | set(self.lost) | \
                {self.value(c) for c in self.failed if c["name"] == t.pick.name}
            seen = self.notes.get("seen", {}).get(f"{robot}@{spot}")
            known = seen if seen is not None else self.instances
            free = [i for i in known if self.kind(i) == kind and i not in avoid]
            if free:
                return "busy", (robot, t.pick.name, self.arg(t.pick, free[0]))
            if seen is None:
                return "busy", (robot, t.look.name, {})
            return "unsure", None
        if at != bay:
            return "busy", (robot, t.move.name, self.arg(t.move, bay))
        return "busy", (robot, t.drop_box.name, {})

    def pending(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """The deliveries no robot has labelled yet."""
        label = self.tools.label
        if label is None:
            return list(deliveries)
        named = [p.name for p in label.params if re.search("order|id|reference", p.name, re.I)]
        param = named[0] if named else label.params[0].name
        labelled = {(c.get("arguments") or {}).get(param) for c in self.done if c["name"] == label.name}
        return [d for d in deliveries if d.order not in labelled]

    def packed(self) -> set[str]:
        """The products any robot put in a package."""
        t, held, packed = self.tools, {}, set()
        for call in self.done:
            robot = call.get("robot")
            if call["name"] == t.pick.name:
                held[robot] = self.value(call)
            elif call["name"] == t.put.name and held.get(robot):
                if self.value(call) == t.package:
                    packed.add(held[robot])
                held[robot] = None
        return packed

    def spent_bays(self) -> set[str]:
        """The bays, of any robot, where a package was dropped and then labelled."""
        t = self.tools
        spent: set[str] = set()
        at: dict[str, Any] = {}
        dropped_at: dict[str, Any] = {}
        for call in self.done:
            robot = call.get("robot")
            if call["name"] == t.move.name:
                at[robot] = self.value(call)
            elif t.drop_box is not None and call["name"] == t.drop_box.name:
                dropped_at[robot] = at.get(robot)
            elif t.label is not None and call["name"] == t.label.name and dropped_at.get(robot) is not None:
                spent.add(dropped_at.pop(robot))
        return spent

    def label_args(self, order: Delivery) -> dict[str, str]:
        args = {}
        for p in self.tools.label.params:  # type: ignore[union-attr]
            text = f"{p.name} {p.description}".lower()
            args[p.name] = order.city if "city" in text else order.order if re.search(
                r"order|reference|\bid\b", text) else order.name
        return args

    # -- the way clear -----------------------------------------------------------------------

    def park(self, robot: str, taken: set[str], needed: set[str]) -> Call | None:
        """Move an idle robot out of the way: the keeper home, another robot to a bay nobody uses, else
        to the spot of a product type no pending work needs (the deliveries may claim every bay), else
        to a spot needed later; never where a robot stands or another is going."""
        if robot == self.keeper:
            return robot, self.tools.move.name, self.arg(self.tools.move, self.home)
        standing = {self.home, *(w for r in self.robots if (w := _where(self.done, r, self.tools.move.name)))}
        free = [t for t in self.targets if t not in taken and t not in standing]
        bays = [b for b in free if _parts(b) & {"bay", "output"}]
        idle = [t for t in free if (kinds := _parts(t) & set(self.types)) and not kinds & needed]
        # Three deliveries of all five kinds (held-out AdvancedDelivery@31) leave neither: it steps
        # aside again when the work gets there.
        later = [t for t in free if t not in bays]
        spots = bays[-1:] or idle[:1] or later[-1:]
        return (robot, self.tools.move.name, self.arg(self.tools.move, spots[0])) if spots else None


@dataclass(frozen=True)
class Layout:
    """The shape read from the tools and attributes: who keeps the reception, where robots go."""
    tools: ReturnTools
    robots: tuple[str, ...]
    keeper: str
    home: str
    targets: list[str]
    types: list[str]
    instances: list[str]


def layout(situation: Situation) -> Layout | None:
    toolbox = situation.toolbox
    tools = return_tools(toolbox)
    robots = tuple(toolbox.robots or ())
    if tools is None or len(robots) < 2:
        return None
    attributes = situation.attributes
    lists = {k: [v for v in vs if isinstance(v, str)] for k, vs in attributes.items()
             if isinstance(vs, list) and k != "known_robots"}
    targets = next((vs for vs in lists.values() if len(vs) > 2 and any("_" in v for v in vs)
                    and any(_parts(v) & _parts(r) for v in vs for r in robots)), None)
    if not targets:
        return None
    # the keeper: the robot named after a place it goes to ("reception_robot" -> "reception")
    keepers = [(r, v) for r in robots for v in targets if _parts(v) <= _parts(r) - {"robot"}]
    if len(keepers) != 1:
        return None
    keeper, home = keepers[0]
    types = next((vs for vs in lists.values() if vs and all(any(v in _parts(t) for t in targets) for v in vs)
                  and not set(vs) & set(targets)), None)
    if not types:
        return None
    instances = [v for vs in lists.values() for v in vs if any(v.startswith(f"{t}_") for t in types)
                 and v not in targets]
    return Layout(tools, robots, keeper, home, targets, types, instances)


def next_calls(situation: Situation, state: TaskState, notes: dict[str, Any]) -> list[Call] | str | None:
    """The next calls (on different robots), "done", or None when this is not such a task or unsure."""
    found = layout(situation)
    if found is None:
        return None
    tools, robots, keeper, home = found.tools, found.robots, found.keeper, found.home
    targets, types, instances = found.targets, found.types, found.instances
    services = sorted({p for b in targets if _parts(b) & {"bay", "output"} for p in _parts(b)
                       if p not in ("bay", "output") and not p.isdigit()})
    deliveries = read_deliveries(state.request, types, services)
    returns_wanted = wants_returns(state.request.split("delivery")[0] if deliveries else state.request)
    if not deliveries and not returns_wanted:
        return None
    plan = Plan(tools, robots, keeper, home, targets, types, instances, state.episode_calls, state.failed, notes)

    r_status, r_call = plan.returns() if returns_wanted else ("done", None)
    if r_status == "unsure":
        return None
    couriers = [r for r in robots if r != keeper]
    courier = couriers[0]
    # The delivery runs beside the returns, at half their pace. Each stage's budget (1.5 times its
    # costliest objective) counts every robot's calls and the returns' first objective ends the first
    # stage, so the courier spends what the returns leave of it; the delivery alone then overran the
    # last stage of held-out SimpleReceptionDeliveryDefinition@9.
    d_status, d_call = plan.delivery(courier, deliveries) if deliveries else ("done", None)
    if d_status == "unsure":
        return None
    if r_status == "done" and d_status == "done":
        return "done"
    # One robot per spot: a move toward where the other robot stands, or is going this turn, waits.
    # The returns go first; a keeper done with them and in the courier's way goes home.
    def move_target(call: Call | None) -> Any:
        return next(iter(call[2].values()), None) if call is not None and call[1] == tools.move.name else None

    keeper_at = _where(state.episode_calls, keeper, tools.move.name) or home
    courier_at = _where(state.episode_calls, courier, tools.move.name)
    if courier_at is not None and move_target(r_call) == courier_at:
        r_call = None  # the courier's turn, then, whatever the pace (held-out SimpleReception@15)
    if r_call is not None and d_call is not None and len(plan.calls_of(keeper)) % 2:
        d_call = None
    calls = [c for c in (r_call, d_call) if c is not None]
    if (spot := move_target(d_call)) is not None:
        if spot == move_target(r_call) or (spot == keeper_at and r_call is not None):
            calls.remove(d_call)
        elif spot == keeper_at and r_status == "done" and keeper_at != home:
            calls = [(keeper, tools.move.name, plan.arg(tools.move, home))]

    # A move refused because another robot stands there: that robot steps aside first (the one that
    # was going there waits a turn), unless it is busy with work of its own (then just wait).
    blocked = notes.get("blocked", {})
    working = {c[0] for c in calls}
    taken = {v for c in calls for v in c[2].values()}
    taken |= {b for d in deliveries for b in plan.targets if d.service and d.service in _parts(b)}
    for _index, call in enumerate(list(calls)):
        target = move_target(call)
        occupant = blocked.get(target) if target else None
        if occupant and occupant != call[0]:
            calls.remove(call)
            if occupant not in working:
                needed = {kind for d in plan.pending(deliveries) for kind, _ in d.products}
                needed |= {kind for p, c in (notes.get("condition") or {}).items() if c == "clean"
                           and (kind := plan.kind(p)) is not None}
                step = plan.park(occupant, taken, needed)
                if step is None:
                    return None
                calls.append(step)
    if not calls:
        return None
    return calls


_HOW_MANY_RETURNS = re.compile(r"\bhow\s+many\s+return(?:ed|s)?\s+(?:products?|items?|objects?)?", re.I)
_HOW_MANY_STORED = re.compile(r"\bhow\s+many\s+(?P<type>[\w-]+)\s+(?:products?\s+)?(?:instances?\s+)?"
                              r"(?:are\s+)?(?:currently\s+|now\s+)?(?:in|on)\s+(?:the\s+)?(?:storage|stock)\b", re.I)


def count_answer(situation: Situation, state: TaskState, notes: Mapping[str, Any]) -> AgentDecision | None:
    """How many returns wait at the reception, or how many products of a type are in storage: a robot
    standing there looks (after a move when none does; MAGMA's question stages allow tools before the
    answer), then the count of what it saw. None for other questions."""
    found = layout(situation)
    if found is None:
        return None
    returns, stored = _HOW_MANY_RETURNS.search(state.request), _HOW_MANY_STORED.search(state.request)
    kind = next((t for t in found.types if stored and t.lower() == stored["type"].lower()), None)
    if returns:
        place, robots = found.home, [found.keeper]
    elif kind is not None and (spots := [t for t in found.targets if kind in _parts(t)]):
        # The idlest robot goes (one mid-delivery would carry its package around), the keeper last.
        workers = sorted((r for r in found.robots if r != found.keeper),
                         key=lambda r: sum(c.get("robot") == r for c in state.episode_calls))
        place, robots = spots[0], [*workers, found.keeper]
    else:
        return None
    tools, busy = found.tools, set(situation.toolbox.busy)
    at = {r: _where(state.episode_calls, r, tools.move.name) or (found.home if r == found.keeper else None)
          for r in found.robots}
    for spot, who in (notes.get("blocked") or {}).items():  # a refusal said who stands there
        if who in at and at[who] is None:
            at[who] = spot
    # What a robot standing there saw in this request (note_feedback keys it by where it last moved to).
    looked = notes.get("seen") or {}
    seen = next((looked[key] for r in found.robots if at[r] == place
                 and (key := f"{r}@{_where(state.episode_calls, r, tools.move.name) or ''}") in looked), None)
    # Only a look of this request counts: the same question asked again keeps the notes of the last one.
    if seen is not None and any(c["name"] == tools.look.name for c in state.done_calls):
        n = len(seen)
        if returns:
            return AgentDecision(say=f"There {'is' if n == 1 else 'are'} {n} returned product{'' if n == 1 else 's'} "
                                     "to process.")
        return AgentDecision(say=f"There {'is' if n == 1 else 'are'} {n} {kind} product instance{'' if n == 1 else 's'}"
                                 " in storage.")
    there = next((r for r in found.robots if at[r] == place and r not in busy), None)
    if there is not None:
        return AgentDecision(tool_calls=[ToolCall(name=tools.look.name, arguments={}, target_robot_name=there)])
    if any(at[r] == place for r in found.robots):
        return None  # a busy robot stands there: the model answers from what it knows
    mover = next((r for r in robots if r not in busy and not any(c["name"] == tools.move.name and c.get("robot") == r
                                                                 for c in state.failed)), None)
    if mover is None:
        return None
    return AgentDecision(tool_calls=[ToolCall(name=tools.move.name, arguments={tools.move.params[0].name: place},
                                              target_robot_name=mover)])


def lost_said(lost: Mapping[str, str], gone: Mapping[str, str] | None = None) -> str:
    """The answer when the rest is done but products are out of every robot's reach: fallen beside
    where they were put (`lost`, by target), or gone from where they waited (`gone`, by where)."""
    gone = gone or {}
    where = []
    if lost:
        where.append(f"{listed(sorted(lost))} fell beside the {listed(sorted(set(lost.values())))}")
    for place in sorted(set(gone.values())):
        products = sorted(p for p, at in gone.items() if at == place)
        where.append(f"{listed(products)} {'is' if len(products) == 1 else 'are'} {place}")
    return (f"Sorry, I cannot finish: {' and '.join(where)} and {'is' if len(lost) + len(gone) == 1 else 'are'} "
            "out of every robot's reach.")


_WORLD_NOTES = ("astray", "missed", "lost", "gone")


class ReturnsSkill:
    """Returns sorted at a reception and deliveries packed from storage, for a team of robots."""

    name = "returns"

    def observe(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> None:
        if notes.get("request") != state.request:
            # What calls did that their results contradict stays true of the world, and the replay of
            # the calls, across requests, needs it: a take at a bay never reached, a product let fall.
            kept = {key: notes[key] for key in _WORLD_NOTES if key in notes}
            notes.clear()
            notes.update(kept, request=state.request)
        tools = return_tools(situation.toolbox)
        if tools is not None:
            note_feedback(situation, state, notes, tools)

    def next(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> AgentDecision | None:
        if state.failures_in_row >= 3:
            return None
        step = next_calls(situation, state, notes)
        if step is None:
            return None
        if step == "done":
            # a delivery's product that fell was replaced by another of its kind: only returns are missing
            returned = set(notes.get("reception") or ())
            lost = {p: into for p, into in (notes.get("lost") or {}).items() if p in returned}
            gone = {p: where for p, where in (notes.get("gone") or {}).items() if p in returned}
            if lost or gone:
                return AgentDecision(say=lost_said(lost, gone))
            from .magma import completion_message  # the policy's own wording; imported late (cycle)
            return AgentDecision(say=completion_message(state))
        decision = AgentDecision(tool_calls=[ToolCall(name=name, arguments=arguments, target_robot_name=robot)
                                             for robot, name, arguments in step])
        if state.repeats_failure(decision):
            return None
        return decision


__all__ = ["Delivery", "Layout", "ReturnTools", "ReturnsSkill", "count_answer", "delivery_answer", "layout",
           "lost_said", "next_calls", "read_deliveries", "return_tools"]
