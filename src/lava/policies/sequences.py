"""The order of a one-dimensional request ("Please press sw3 and sw0") under standing order rules,
read without the model when every rule that speaks of order is one of the forms MAGMA states them in:

- a prefix: "From now on, press sw0 before the sequence of buttons that I ask you to press", "Each
  time you are asked to press a button, press sw1 first";
- a precedence: "press sw1 and sw2 before sw0 whenever they are both requested", "press all even
  buttons before the odd ones";
- forgetting: "Forget all prefix rules", "Forget to press sw1 before others", "Forget all the
  permanent button-order rules".

The request's own order holds where no rule speaks; "in this exact order" keeps only the prefix
(press_button's resolve_prefix_only_order). A 0.5B model given these rules copied its prompt's
example instead ("sw0, sw3, sw0" for "press sw3" after a prefix rule).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# Any of these in a rule means it may order things: one not read below sends the plan to the model.
_ORDER_WORDS = re.compile(r"\b(?:before|after|first|last|order|sequence|even|odd|prefix|then)\b", re.IGNORECASE)
_FORGET = re.compile(r"\b(?:forget|ignore|drop|discard|cancel)\b", re.IGNORECASE)
_PREFIX = re.compile(r"\bbefore\s+(?:the|any|every|each)\s+(?:sequences?|buttons?|others?|requests?)\b|"
                     r"\bfirst\s*[.!]?\s*$|\bbefore\s+others\b", re.IGNORECASE)
_WHENEVER = re.compile(r"\bbefore\b(?P<second>.*?)(?:\bwhenever\b|\bwhen\b|$)", re.IGNORECASE)
_PARITY = re.compile(r"\b(?P<first>even|odd)\b[\w\s]*?\bbefore\s+(?:the\s+|all\s+)?(?P<second>even|odd)\b",
                     re.IGNORECASE)
_EXACT = re.compile(r"\bexact(?:ly)?\s+(?:this\s+)?order\b|\bin this order\b", re.IGNORECASE)


def _named(text: str, values: Sequence[str]) -> list[str]:
    found = [(m.start(), v) for v in values for m in re.finditer(rf"(?<![\w-]){re.escape(v)}(?![\w-])", text)]
    return list(dict.fromkeys(v for _, v in sorted(found)))


def _number(value: str) -> int | None:
    match = re.search(r"(\d+)$", value)
    return int(match.group(1)) if match else None


def read_rules(rules: Sequence[str], values: Sequence[str]
               ) -> tuple[str | None, list[tuple[str, str]], list[str]] | None:
    """(prefix, precedence edges, parity order as ["even", "odd"] or []) the rules leave standing;
    None when a rule speaks of order in words not read here."""
    prefix: str | None = None
    edges: list[tuple[str, str]] = []
    parity: list[str] = []
    for rule in rules:
        named = _named(rule, values)
        if _FORGET.search(rule):
            if re.search(r"\bprefix", rule, re.IGNORECASE):
                prefix = None
            elif named:  # "Forget to press sw1 before others": its precedences and its prefix
                edges = [(a, b) for a, b in edges if a not in named]
                prefix = None if prefix in named else prefix
            else:
                prefix, edges, parity = None, [], []
            continue
        if not _ORDER_WORDS.search(rule):
            if named:
                return None  # about a value, in other words ("Never press sw0"): the model weighs it
            continue  # about something else ("Launching a cycle means ...")
        if (match := _PARITY.search(rule)) is not None and not named:
            first, second = match["first"].lower(), match["second"].lower()
            if first == second:
                return None
            parity = [first, second]
        elif len(named) == 1 and _PREFIX.search(rule):
            prefix = named[0]
        elif len(named) >= 2 and (match := _WHENEVER.search(rule)) is not None:
            later = _named(match["second"], named)
            earlier = [v for v in named if v not in later]
            if not later or not earlier:
                return None
            edges += [(a, b) for a in earlier for b in later]
        else:
            return None
    return prefix, edges, parity


def ordered(request: str, wanted: Sequence[str], rules: Sequence[str], values: Sequence[str]) -> list[str] | None:
    """The values to use, in order: the request's, sorted by the rules' precedences (stable: the
    request's order breaks ties), then the prefix first. None when the rules need the model."""
    if len(set(wanted)) != len(wanted):
        return None  # "press two times sw0": counts are the model's (or the plain request's) to read
    read = read_rules(rules, values)
    if read is None:
        return None
    prefix, edges, parity = read
    exact = _EXACT.search(request) is not None
    order = list(wanted)
    if not exact:
        if parity:  # every requested value of the first parity before every one of the other
            first = 0 if parity[0] == "even" else 1
            numbers = {v: n for v in order if (n := _number(v)) is not None}
            edges = [*edges, *((a, b) for a in numbers for b in numbers
                               if numbers[a] % 2 == first and numbers[b] % 2 != first)]
        sorted_ = _topological(order, edges)
        if sorted_ is None:
            return None
        order = sorted_
    if prefix is not None:
        order = [prefix, *(v for v in order if v != prefix)]
    return order


def _topological(order: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[str] | None:
    """`order` with every edge (a before b) between its values honoured, ties kept in its order."""
    inside = set(order)
    after: Mapping[str, list[str]] = {v: [b for a, b in edges if a == v and b in inside] for v in order}
    waiting = {v: sum(1 for a, b in edges if b == v and a in inside) for v in order}
    out: list[str] = []
    ready = [v for v in order if waiting[v] == 0]
    while ready:
        value = min(ready, key=order.index)
        ready.remove(value)
        out.append(value)
        for nxt in after[value]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                ready.append(nxt)
    return out if len(out) == len(order) else None


__all__ = ["ordered", "read_rules"]
