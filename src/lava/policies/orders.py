"""Orders packed into containers: "Prepare the following 2 order(s) using different packages:
order 002: 1 donut, 1 brets; order 001: 1 coca, 1 donut, 1 icetea".

The work is a fixed cycle per order, read from the tools' own words (MAGMA renames them):
take an empty container at its station, take each product at its station and put it in the held
container, go back, drop the container, mark it with the order. Progress is read from the calls
that succeeded in the episode, so an interruption that appends an order ("New recipe to prepare
after the current orders: order 003: ...") only adds work, and an urgent order ("Stop the current
order, complete this new order first, then resume the interrupted order") sets the box begun for
the interrupted one aside, which that order takes back afterwards.

A promotion the user gave before a request changes its orders: "For each future order, add one brets
as a free gift." adds a brets to each; "For every future order that initially contains exactly two
units of the same product, add a third unit of that product for free." makes each pair three. The
request states the orders without it, as MAGMA's generator words them; its checks count it.
"Forget the currently active promotion rule." forgets it (TaskState.remember_rule).
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
from .demos import roles
from .goals import tool_words, words
from .task_state import TaskState

_ORDER = re.compile(r"\border\s+(?P<id>[A-Za-z0-9][\w-]*)\s*:\s*(?P<items>(?:(?!\border\b)[^;.])*)", re.I)
_ITEM = re.compile(r"(?P<n>\d+)\s+(?P<what>[A-Za-z][\w-]*)")
_BOX = frozenset(("package", "box", "container", "tray", "crate", "bin"))
_TAKE = frozenset(("take", "collect", "pick", "get", "grab"))
_DROP = frozenset(("drop", "release", "return", "down", "deposit"))
_MOVE = frozenset(("move", "navigate", "go", "goto"))
_MARK = re.compile(r"order|reference|label|mark|assign", re.I)
_GIFT = re.compile(r"\b(?:each|every|all)\b.*\borders?\b.*\badd\s+(?:one|a|an|1)\s+(?P<what>[A-Za-z][\w-]*)\s+"
                   r"(?:as\s+an?\s+)?(?:free\s+)?gift\b", re.I)
_THIRD = re.compile(r"\b(?:each|every|all)\b.*\borders?\b.*\bexactly\s+two\s+units?\b.*\bthird\s+unit\b", re.I)


@dataclass(frozen=True)
class OrderTools:
    move: ToolSpec | None
    take_box: ToolSpec
    drop_box: ToolSpec
    mark: ToolSpec
    take: ToolSpec
    put: ToolSpec


@functools.lru_cache(maxsize=512)  # tool sets repeat across inputs and turns; ToolBox is frozen
def order_tools(toolbox: ToolBox) -> OrderTools | None:
    _, take, put = roles(toolbox)
    tools = [t for t in toolbox.tools if t.name != CANCEL_TOOL]
    take_box = next((t for t in tools if len(t.params) == 1 and t is not take
                     and tool_words(t) & _TAKE and tool_words(t) & _BOX), None)
    drop_box = next((t for t in tools if not t.params and tool_words(t) & _DROP and tool_words(t) & _BOX), None)
    mark = next((t for t in tools if len(t.params) == 2 and any(_MARK.search(f"{p.name} {p.description}")
                                                                 for p in t.params)), None)
    move = next((t for t in tools if len(t.params) == 1 and tool_words(t) & _MOVE
                 and t not in (take, put, take_box)), None)
    if None in (take, put, take_box, drop_box, mark):
        return None
    return OrderTools(move, take_box, drop_box, mark, take, put)  # type: ignore[arg-type]


def read_orders(request: str, products: Sequence[str]) -> list[tuple[str, list[str]]]:
    """[(order id, [product per unit])] in the order the request (and its amendments) gives them."""
    known = {p.lower(): p for p in products}
    orders = []
    for match in _ORDER.finditer(request):
        units = [known[m["what"].lower()] for m in _ITEM.finditer(match["items"]) if m["what"].lower() in known
                 for _ in range(int(m["n"]))]
        if units and match["id"] not in [o for o, _ in orders]:
            orders.append((match["id"], units))
    return orders


def promotion(rules: Sequence[str]) -> str | None:
    """The promotion in force: the latest rule that gives one (only one is active at a time)."""
    return next((rule for rule in reversed(rules) if _GIFT.search(rule) or _THIRD.search(rule)), None)


def promoted(units: list[str], rule: str | None, products: Sequence[str]) -> list[str]:
    """An order's units with the promotion `rule` applied: a gift added, or each pair made three."""
    if rule is None:
        return units
    known = {p.lower(): p for p in products}
    if (gift := _GIFT.search(rule)) and gift["what"].lower() in known:
        return [*units, known[gift["what"].lower()]]
    if _THIRD.search(rule):
        return [*units, *(kind for kind, n in Counter(units).items() if n == 2)]
    return units


def _station(values: Sequence[str], tool: ToolSpec) -> str | None:
    """The move value sharing a word with what a tool handles (take_box -> packages_slot)."""
    nouns = tool_words(tool) - _TAKE - _DROP
    fitting = [v for v in values if words(v) & nouns]
    return fitting[0] if len(fitting) == 1 else None


def next_order_call(toolbox: ToolBox, attributes: Mapping[str, Any], request: str,
                    done: Sequence[Mapping[str, Any]], failed: Sequence[Mapping[str, Any]], robot: str,
                    own: int | None = None, promotion: str | None = None
                    ) -> tuple[str, dict[str, str]] | str | None:
    """The next (tool, arguments), "done" when every order is marked, None when this is not such a task.

    `own`: for an urgent request that interrupted another, how many of the last calls are its own. A box
    the interrupted request began is that request's, even when what it holds would fit the urgent order
    (MAGMA-GEN delivery_box MultiOrderDelivery@116: a brets put for order 001, then 002 wanting brets).
    `promotion`: the promotion rule in force when the request began, applied to its orders."""
    tools = order_tools(toolbox)
    if tools is None:
        return None
    values = {k: [v for v in vs if isinstance(v, str)] for k, vs in attributes.items() if isinstance(vs, list)}
    product_attr = next((k for k, vs in values.items() if read_orders(request, vs)), None)
    if product_attr is None:
        return None
    orders = [(order, promoted(units, promotion, values[product_attr]))
              for order, units in read_orders(request, values[product_attr])]
    box_param, mark_params = tools.take_box.params[0].name, [p.name for p in tools.mark.params]
    box_names = next((vs for k, vs in values.items() if words(k) & _BOX), [])
    # By name first: a package parameter may be described as "Box to associate with the order".
    order_param = next((p.name for p in tools.mark.params if re.search("order|reference", p.name, re.I)), None) or \
        next(p.name for p in tools.mark.params if re.search("order|reference", f"{p.name} {p.description}", re.I))
    package_param = next(p for p in mark_params if p != order_param)
    put_text = f"{tools.put.params[0].description} {tools.put.description}".lower()
    put_word = next((w for w in re.findall(r"[a-z]+", put_text) if w in _BOX), "package")
    move_key = next((k for k, vs in values.items() if any("slot" in v or "station" in v for v in vs)), "")
    move_values = values.get(move_key, [])
    box_station = _station(move_values, tools.take_box) if tools.move else None
    product_station = _station(move_values, tools.take) if tools.move else None

    # Replay what succeeded in the episode: where the robot is, which box it holds, what each box
    # holds, which orders are marked. Across requests: a box set aside for an urgent order still
    # holds what was put in it, and the interrupted order takes it back.
    at: str | None = None
    held_box: str | None = None
    contents: dict[str, Counter[str]] = {}
    taken: set[str] = set()
    marked: set[str] = set()
    others: set[str] = set()  # boxes the interrupted request began
    for index, call in enumerate(done):
        args = call.get("arguments") or {}
        if tools.move and call["name"] == tools.move.name:
            at = args.get(tools.move.params[0].name)
        elif call["name"] == tools.take_box.name:
            held_box = args.get(box_param)
            taken.add(held_box)
        elif call["name"] == tools.put.name and held_box:
            last_take = next((c for c in reversed(done[:index]) if c["name"] == tools.take.name), None)
            if last_take:
                contents.setdefault(held_box, Counter())[next(iter(last_take["arguments"].values()))] += 1
                if own is not None and index < len(done) - own:
                    others.add(held_box)
        elif call["name"] == tools.drop_box.name:
            held_box = None
        elif call["name"] == tools.mark.name:
            marked.add(args.get(order_param))
            contents.pop(args.get(package_param), None)  # marking hands its products over: the box is empty
            others.discard(args.get(package_param))
    refused = {(c.get("arguments") or {}).get(box_param) for c in failed if c["name"] == tools.take_box.name}

    def go(station: str | None) -> tuple[str, dict[str, str]] | None:
        if tools.move and station and at != station:
            return tools.move.name, {tools.move.params[0].name: station}
        return None

    pending = [(o, units) for o, units in orders if o not in marked]
    if not pending:
        return "done"
    order, units = pending[0]
    wanted = Counter(units)

    def fits(box: str | None) -> bool:  # what the box holds is part of this order
        return box is not None and box not in others and not contents.get(box, Counter()) - wanted

    last = done[-1]["name"] if done else None
    if held_box is None:
        complete = [b for b in box_names if contents.get(b) == wanted and b not in others]
        if complete:  # dropped full: marked next
            return tools.mark.name, {package_param: complete[0], order_param: order}
        if (step := go(box_station)) is not None:
            return step
        # The box this order was begun in (set aside for an urgent one), else an empty one never used.
        begun = [b for b in box_names if contents.get(b) and fits(b) and b not in refused]
        empty = [b for b in box_names if not contents.get(b) and b not in refused]
        free = begun or [b for b in empty if b not in taken] or empty
        return (tools.take_box.name, {box_param: free[0]}) if free else None
    if not fits(held_box):  # begun for another order: set aside, at its station
        if last == tools.take.name:
            return tools.put.name, {tools.put.params[0].name: put_word}
        return go(box_station) or (tools.drop_box.name, {})
    missing = list((wanted - contents.get(held_box, Counter())).elements())
    if last == tools.take.name:  # the product is in the gripper: into the box
        return tools.put.name, {tools.put.params[0].name: put_word}
    if missing:
        if (step := go(product_station)) is not None:
            return step
        return tools.take.name, {tools.take.params[0].name: missing[0]}
    if (step := go(box_station)) is not None:
        return step
    return tools.drop_box.name, {}


class OrdersSkill:
    """Packs orders for one robot while nothing keeps failing (then the model takes over)."""

    name = "orders"

    def observe(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> None:
        # Progress is replayed from the calls that succeeded (TaskState.episode_calls). What is noted
        # is the promotion in force when the request began: it holds for "future" orders only.
        if notes.get("request") == state.request or order_tools(situation.toolbox) is None:
            return
        notes.clear()
        notes["request"] = state.request
        if rule := promotion([*situation.memory.memory_list, *state.rules]):
            notes["promotion"] = rule

    def next(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> AgentDecision | None:
        robots = situation.toolbox.robots or ("robot",)
        if len(robots) > 1 or state.failures_in_row >= 3:
            return None
        urgent = state.suspended is not None and not state.suspended.get("question")
        step = next_order_call(situation.toolbox, situation.attributes, state.request, state.episode_calls,
                               state.failed, robots[0], len(state.done_calls) if urgent else None,
                               notes.get("promotion"))
        if step is None:
            return None
        if step == "done":
            from .magma import completion_message  # the policy's own wording; imported late (cycle)
            return AgentDecision(say=completion_message(state))
        name, arguments = step
        return AgentDecision(tool_calls=[ToolCall(name=name, arguments=arguments, target_robot_name=robots[0])])


__all__ = ["OrdersSkill", "next_order_call", "order_tools", "read_orders"]
