"""Questions answered from rules that associate the task's names (MAGMA's laundry: "Hello, please
remember that blue_jeans use detergent_ARIEL, cotton_socks, t_shirt, and linen_blouse use
detergent_TIDE.").

`procedures.groups` reads such rules: each known value closes a group of the names said since the
last one, and a later rule wins for a name it groups again. The questions MAGMA asks of them ("What
detergents can wash chino_pants and gym_shorts?", "Which clothes use 'detergent_TIDE'?") have one
right answer, and a small model mixes the groups up: it is read here, not guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .goals import listed
from .procedures import groups
from .task_state import mentioned, vocabulary

# "What detergents can wash X and Y?", "Which detergent should I use for X?"
_WHICH_VALUE = re.compile(r"^\s*(?:what|which)\s+(?P<noun>[a-z]+?)s?\s+(?:can|could|should|do|does|must|to)\b"
                          r"(?:\s+(?:i|you|we)\b)?\s+(?P<verb>[a-z]+)\b", re.IGNORECASE)
# "Which clothes use 'detergent_TIDE'?"
_WHICH_MEMBERS = re.compile(r"^\s*(?:what|which)\s+(?P<noun>[a-z]+)\s+(?:use|uses|go with|goes with|need|needs)\b",
                            re.IGNORECASE)


def associated(rules: Sequence[str], names: Mapping[str, str]) -> dict[str, str]:
    """Each task name the rules group, with the value of the latest group naming it."""
    return {member: group.value for group in groups(rules, names) for member in group.members if member in names}


def _participle(verb: str) -> str:
    verb = verb.lower()
    return verb if verb.endswith("ed") else f"{verb}d" if verb.endswith("e") else f"{verb}ed"


def association_answer(question: str, rules: Sequence[str], attributes: Mapping[str, Any]) -> str | None:
    """The rules' answer to "which value goes with these names" or "which names go with this value";
    None for other questions, or when no rule associates the names asked about."""
    names = vocabulary(attributes)
    paired = associated(rules, names)
    if not paired:
        return None
    asked = list(dict.fromkeys(mentioned(question, names)))
    members = [n for n in asked if names[n] in {names[m] for m in paired}]
    values = [n for n in asked if names[n] in {names[v] for v in paired.values()}]
    if ((which := _WHICH_VALUE.match(question)) and members and not values
            and question[which.end():].lstrip(" '\"").lower().startswith(members[0].lower())):
        noun = which["noun"].lower()
        if not any(names[v].lower().startswith(noun) for v in paired.values()):
            return None  # asks about something else than the associated values
        grouped: dict[str, list[str]] = {}
        for member in members:
            grouped.setdefault(paired.get(member, ""), []).append(member)
        unknown = grouped.pop("", [])
        if not grouped:
            return f"No {noun} is associated with {listed(unknown)}."
        done = _participle(which["verb"])
        parts = [f"{listed(group)} can be {done} with {value}" for value, group in grouped.items()]
        if unknown:
            parts.append(f"no {noun} is associated with {listed(unknown)}")
        return ", ".join(parts) + "."  # the names as the task spells them, never capitalized
    if (which := _WHICH_MEMBERS.match(question)) and len(values) == 1 and not members:
        kind = next(names[m] for m in paired)
        if not kind.lower().startswith(which["noun"].lower().rstrip("s")):
            return None
        value = values[0]
        group = [m for m, v in paired.items() if v == value]
        noun = kind.replace("_", " ")
        if not group:
            return f"No {noun} use {value}."
        return f"{noun[0].upper()}{noun[1:]} using '{value}' are: {', '.join(group)}."
    return None


__all__ = ["associated", "association_answer"]
