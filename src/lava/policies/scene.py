"""Where things are: the last observation, kept up to date with the moves made since.

Pick-and-place scenes are reported as sentences like "table contains white_cube_1, red_cube_1.
white_tray contains white_cube_2. red_tray contains no cube." A small model re-reading that text
after three moves no longer knows where anything is, and observing again costs a tool call the
stage budget may not have. So lava parses the report once and moves objects itself when a take
or put call succeeds. A scene is plain JSON ({place: [objects]}) kept in the task state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

Scene = dict[str, list[str]]

_PLACE = re.compile(r"(?:^|[.;:]\s*|\band\s+)(?:the\s+)?(?P<place>[A-Za-z][A-Za-z0-9_\-]*)\s+"
                    r"contains?\s+(?P<things>[^.;\n]*)", re.IGNORECASE)
_EMPTY = re.compile(r"(?:,\s*)?(?:\band\s+)?(?:the\s+)?\b(?P<place>[A-Za-z][A-Za-z0-9_\-]*)\s+(?:is|are)\s+empty\b",
                    re.IGNORECASE)
_NOTHING = re.compile(r"^\s*(?:no|nothing|none|empty)\b", re.IGNORECASE)
_ITEM = re.compile(r"^(?:the\s+|an?\s+)?([A-Za-z][A-Za-z0-9_\-]*)$", re.IGNORECASE)


def read_scene(text: str) -> Scene | None:
    """The places and their objects in an observation, or None when it is not such a report."""
    scene: Scene = {}
    empty = [m["place"] for m in _EMPTY.finditer(text)]
    text = _EMPTY.sub(".", text)  # "..., pasta, and the tray is empty": two statements
    for match in _PLACE.finditer(text):
        things = match["things"]
        if _NOTHING.match(things):
            scene[match["place"]] = []
            continue
        items = [item.strip() for item in re.split(r",|\band\b", things) if item.strip()]
        names = [m.group(1) for item in items if (m := _ITEM.match(item))]
        if len(names) != len(items):
            return None  # counts ("2 white cubes") or descriptions: not a list of names
        scene[match["place"]] = names
    if not scene or not any(scene.values()):
        return None
    for place in empty:
        scene.setdefault(place, [])
    return scene


def where(scene: Mapping[str, Sequence[str]], thing: str) -> str | None:
    return next((place for place, things in scene.items() if thing in things), None)


def taken(scene: Mapping[str, Sequence[str]], thing: str) -> Scene:
    """The scene once `thing` is in the gripper."""
    return {place: [t for t in things if t != thing] for place, things in scene.items()}


def put(scene: Mapping[str, Sequence[str]], thing: str, place: str) -> Scene:
    """The scene once `thing` has been put at `place` (a place not reported before is added)."""
    moved = taken(scene, thing)
    moved[place] = [*moved.get(place, []), thing]
    return moved


def render_scene(scene: Mapping[str, Sequence[str]], held: str | None) -> list[str]:
    lines = [f"{place}: {', '.join(things) if things else 'nothing'}" for place, things in scene.items()]
    if held:
        lines.append(f"in the gripper: {held}")
    return lines


__all__ = ["Scene", "put", "read_scene", "render_scene", "taken", "where"]
