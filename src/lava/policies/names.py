"""The names an argument may take: what the task has shown to exist, never what a model invents.

A value comes from the attributes, from what the robots reported (observations and results),
from the user's request and rules, or from the parameter's own description ("Use table or a tray
name such as white_tray"). Decoding a string parameter is narrowed to these names; with none
known the parameter stays free.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from itertools import chain
from typing import Any

from ..tools import ToolBox

_IDENTIFIER = re.compile(
    r"\b[A-Za-z][A-Za-z0-9]*(?:[_\-][A-Za-z0-9]+)+\b|\b[A-Za-z]+[0-9]+[A-Za-z0-9]*\b|\b[0-9]{2,}\b"
)
_CONTAINER = re.compile(r"\b([A-Za-z][A-Za-z0-9_\-]*)\s+(?:contains?|has|have|holds?)\b", re.IGNORECASE)
_CAPITALIZED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][A-Za-z0-9]+\b")
_STOP = frozenset("""
a an the and or of to in on at for from with by as is are be been this that these those it its use
used using name names such example any one two all each every which what where when who whom whose
can could should must may might will would object objects item items robot robots target targets
location locations value values given listed list held hold into onto there here then than also only
other some more most not no yes you your i me my we our they them their he she him her
""".split())  # noqa: SIM905 (a word list reads better as text)


_CONTENTS = re.compile(r"\b(?:contains?|has|have|holds?)\s+([^.;\n]*)", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")

# The texts these read (the request, rules, observations, results, tool descriptions) come back
# turn after turn and input after input of a GEN batch, and every decision reads them several
# times: each text is scanned once, then served from a bounded cache. The functions are pure and
# the cached values immutable; callers get fresh lists and sets.
TEXT_CACHE_SIZE = 4096


def contents(texts: Sequence[str]) -> set[str]:
    """Names reported as being *in* something ("white_tray contains white_cube_1"): movable things."""
    found: set[str] = set()
    for text in texts:
        found.update(_contents(text))
    return found


@lru_cache(maxsize=TEXT_CACHE_SIZE)
def _contents(text: str) -> frozenset[str]:
    return frozenset(name for match in _CONTENTS.finditer(text) for name in _identifiers(match.group(1)))


def containers(texts: Sequence[str]) -> list[str]:
    """Names reported as holding things ("white_tray contains ..."): the places of the scene."""
    return list(dict.fromkeys(chain.from_iterable(_containers(text) for text in texts)))


@lru_cache(maxsize=TEXT_CACHE_SIZE)
def _containers(text: str) -> tuple[str, ...]:
    return tuple(m.group(1) for m in _CONTAINER.finditer(text) if m.group(1).lower() not in _STOP)


def identifiers(text: str) -> list[str]:
    return list(_identifiers(text))


@lru_cache(maxsize=TEXT_CACHE_SIZE)
def _identifiers(text: str) -> tuple[str, ...]:
    return tuple(m.group(0) for m in _IDENTIFIER.finditer(text))


def description_words(text: str) -> list[str]:
    return list(_description_words(text))


@lru_cache(maxsize=TEXT_CACHE_SIZE)
def _description_words(text: str) -> tuple[str, ...]:
    return tuple(w for w in _WORD.findall(text) if len(w) > 2 and w.lower() not in _STOP)


def attribute_values(attributes: Mapping[str, Any]) -> list[str]:
    values: list[str] = []
    for key, value in attributes.items():
        if key in ("known_robots", "robot_statuses"):
            continue
        items: Iterable[Any] = value if isinstance(value, list) else value.values() if isinstance(value, dict) else \
            [value]
        values += [v for v in items if isinstance(v, str) and v.strip() and len(v) <= 60]
    return values


def known_names(attributes: Mapping[str, Any], texts: Sequence[str], user_texts: Sequence[str]) -> list[str]:
    """Every name the task has shown: attributes, identifiers and containers in results, and
    identifiers and proper names in what the user wrote."""
    names = attribute_values(attributes)
    for text in texts:
        names += _identifiers(text)
        names += _containers(text)
    for text in user_texts:
        names += _user_names(text)
    return list(dict.fromkeys(names))


_PLACE_KEY = re.compile(r"(?:^|_)(?:locations?|areas?|zones?|places?|halls?|targets?|destinations?)(?:_|$)", re.I)
_CLASS_KEY = re.compile(r"class|type|kind|categor", re.I)
_OBJECT_KEY = re.compile(r"(?:^|_)(?:objects?|items?|packages?|parts?)(?:_|$)", re.I)


def _values(attributes: Mapping[str, Any], key: re.Pattern[str], without: re.Pattern[str] | None = None
            ) -> list[str]:
    """The string values of the attributes whose name matches `key` (and not `without`)."""
    out: list[str] = []
    for name in _keys(tuple(attributes), key, without):
        value = attributes[name]
        items = value if isinstance(value, list) else value.values() if isinstance(value, dict) else [value]
        out += [v for v in items if isinstance(v, str) and v.strip()]
    return list(dict.fromkeys(out))


@lru_cache(maxsize=TEXT_CACHE_SIZE)
def _keys(names: tuple[str, ...], key: re.Pattern[str], without: re.Pattern[str] | None) -> tuple[str, ...]:
    # Every input of a task sends the same attribute names: each is matched once, not every turn.
    return tuple(name for name in names if name not in ("known_robots", "robot_statuses") and key.search(name)
                 and not (without is not None and without.search(name)))


def location_values(attributes: Mapping[str, Any]) -> list[str]:
    """Places the task lists as such ("locations", "target_areas"): valid targets even when empty
    (a detection report leaves empty places out)."""
    return _values(attributes, _PLACE_KEY)


def object_values(attributes: Mapping[str, Any]) -> list[str]:
    """Object names from the attributes (objects, items, ...), not their classes or types."""
    return _values(attributes, _OBJECT_KEY, without=_CLASS_KEY)


@lru_cache(maxsize=TEXT_CACHE_SIZE)
def _user_names(text: str) -> tuple[str, ...]:
    return (*_identifiers(text), *_CAPITALIZED.findall(text))


def parameter_enums(toolbox: ToolBox, names: Sequence[str], *, exclude: Mapping[str, set[str]] | None = None
                    ) -> dict[str, dict[str, list[str]]]:
    """Per tool, per string parameter: the known names plus the words of its descriptions."""
    enums: dict[str, dict[str, list[str]]] = {}
    for tool in toolbox.tools:
        for param in tool.params:
            if param.json_type != "string":
                continue
            own = _own_names(param.description, tool.description)
            values = [v for v in dict.fromkeys([*names, *own]) if v not in (exclude or {}).get(tool.name, set())]
            if values:
                enums.setdefault(tool.name, {})[param.name] = values
    return enums


@lru_cache(maxsize=TEXT_CACHE_SIZE)
def _own_names(param_description: str, tool_description: str) -> tuple[str, ...]:
    """The names a parameter's own descriptions offer: the same for every turn with these tools."""
    return (*_description_words(param_description), *_identifiers(tool_description))


__all__ = [
    "attribute_values",
    "containers",
    "contents",
    "description_words",
    "identifiers",
    "known_names",
    "location_values",
    "object_values",
    "parameter_enums",
]
