"""The names an argument may take: what the task has shown to exist, never what a model invents.

A value comes from the attributes, from what the robots reported (observations and results),
from the user's request and rules, or from the parameter's own description ("Use table or a tray
name such as white_tray"). Decoding a string parameter is narrowed to these names; with none
known the parameter stays free.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
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


def contents(texts: Sequence[str]) -> set[str]:
    """Names reported as being *in* something ("white_tray contains white_cube_1"): movable things."""
    found: set[str] = set()
    for text in texts:
        for match in _CONTENTS.finditer(text):
            found.update(identifiers(match.group(1)))
    return found


def containers(texts: Sequence[str]) -> list[str]:
    """Names reported as holding things ("white_tray contains ..."): the places of the scene."""
    return list(dict.fromkeys(m.group(1) for text in texts for m in _CONTAINER.finditer(text)
                              if m.group(1).lower() not in _STOP))


def identifiers(text: str) -> list[str]:
    return [m.group(0) for m in _IDENTIFIER.finditer(text)]


def description_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[A-Za-z][A-Za-z0-9_\-]*", text) if len(w) > 2 and w.lower() not in _STOP]


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
        names += identifiers(text)
        names += [m.group(1) for m in _CONTAINER.finditer(text) if m.group(1).lower() not in _STOP]
    for text in user_texts:
        names += identifiers(text)
        names += _CAPITALIZED.findall(text)
    return list(dict.fromkeys(names))


_PLACE_KEY = re.compile(r"(?:^|_)(?:locations?|areas?|zones?|places?|halls?|targets?|destinations?)(?:_|$)", re.I)
_CLASS_KEY = re.compile(r"class|type|kind|categor", re.I)
_OBJECT_KEY = re.compile(r"(?:^|_)(?:objects?|items?|packages?|parts?)(?:_|$)", re.I)


def _values(attributes: Mapping[str, Any], key: re.Pattern[str]) -> list[str]:
    out: list[str] = []
    for name, value in attributes.items():
        if name in ("known_robots", "robot_statuses") or not key.search(name):
            continue
        items = value if isinstance(value, list) else value.values() if isinstance(value, dict) else [value]
        out += [v for v in items if isinstance(v, str) and v.strip()]
    return list(dict.fromkeys(out))


def location_values(attributes: Mapping[str, Any]) -> list[str]:
    """Places the task lists as such ("locations", "target_areas"): valid targets even when empty
    (a detection report leaves empty places out)."""
    return _values(attributes, _PLACE_KEY)


def object_values(attributes: Mapping[str, Any]) -> list[str]:
    """Object names from the attributes (objects, items, ...), not their classes or types."""
    return _values({k: v for k, v in attributes.items() if not _CLASS_KEY.search(k)}, _OBJECT_KEY)


def parameter_enums(toolbox: ToolBox, names: Sequence[str], *, exclude: Mapping[str, set[str]] | None = None
                    ) -> dict[str, dict[str, list[str]]]:
    """Per tool, per string parameter: the known names plus the words of its descriptions."""
    enums: dict[str, dict[str, list[str]]] = {}
    for tool in toolbox.tools:
        for param in tool.params:
            if param.json_type != "string":
                continue
            own = description_words(param.description) + identifiers(tool.description)
            values = [v for v in dict.fromkeys([*names, *own]) if v not in (exclude or {}).get(tool.name, set())]
            if values:
                enums.setdefault(tool.name, {})[param.name] = values
    return enums


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
