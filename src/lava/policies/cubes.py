"""Cubes counted by color: a detection that reports how many cubes of each color every place holds
("this is the position of existing cubes: table contains 1 white cube. white_tray contains
2 red cubes, 1 white cube."), a take by color and place ("take(obj_color=red, source=table)")
and a put of the held cube ("put(target=white_tray)"). MAGMA renames all three.

The cubes have no names, so lava cannot point at one: it keeps the counts in its notes, moves
them with every take and put that succeeds, and reads them afresh when a move fails. The goal
comes from the request's wording:
- sorting by color ("put each cube in the tray matching its color"): every cube in the tray of
  its color;
- opposite groups ("each tray should contain the same number of cubes from the other tray's
  color ... leave the unmatched extra cubes on the table"): each tray holds as many cubes of the
  other color as the scarcer color has, the rest stays on the table.

Each turn: look when the counts are unknown or a move failed; put a held cube where its color is
missing; otherwise take a cube of a color from where there is too much of it.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol import AgentDecision, ToolCall
from ..situation import Situation
from ..tools import CANCEL_TOOL, Param, ToolBox, ToolSpec
from .demos import roles
from .task_state import TaskState, results_with_calls

Counts = dict[str, dict[str, int]]  # place -> color -> cubes

TABLE = "table"
_TRAY = "_tray"
_PLACE = re.compile(r"(?P<place>[A-Za-z][\w-]*) contains (?P<items>[^.]*)")
_ITEM = re.compile(r"(?P<n>\d+) (?P<color>[A-Za-z][\w-]*) cubes?\b")
_NO_CUBE = re.compile(r"\bno cubes? (?:is )?detected\b", re.I)
_OPPOSITE = re.compile(r"opposite group|other tray'?s colou?r", re.I)
_BY_COLOR = re.compile(r"sort\w* (?:all )?(?:the )?cubes? by colou?r|tray matching its colou?r", re.I)


@dataclass(frozen=True)
class CubeTools:
    look: ToolSpec
    take: ToolSpec
    take_color: str  # the take's parameter naming the color ...
    take_place: str  # ... and the one naming where to take it from
    put: ToolSpec


def _names_color(param: Param) -> bool:
    return "colo" in f"{param.name} {param.description}".lower()


def _text(tool: ToolSpec) -> str:
    return " ".join([tool.name, tool.description, *(f"{p.name} {p.description}" for p in tool.params)]).lower()


@functools.lru_cache(maxsize=512)  # tool sets repeat across inputs and turns; ToolBox is frozen
def cube_tools(toolbox: ToolBox) -> CubeTools | None:
    look = roles(toolbox)[0]
    tools = [t for t in toolbox.tools if t.name != CANCEL_TOOL]
    take = next((t for t in tools if len(t.params) == 2
                 and sum(map(_names_color, t.params)) == 1), None)
    put = next((t for t in tools if len(t.params) == 1 and "tray" in _text(t) and TABLE in _text(t)), None)
    if look is None or take is None or put is None:
        return None
    color = next(p.name for p in take.params if _names_color(p))
    place = next(p.name for p in take.params if p.name != color)
    return CubeTools(look, take, color, place, put)


def read_counts(report: str) -> Counts | None:
    """Cubes per place and color from a detection report; None when the text is no such report."""
    if _NO_CUBE.search(report):
        return {}
    counts: Counts = {}
    for match in _PLACE.finditer(report):
        items = {m["color"].lower(): int(m["n"]) for m in _ITEM.finditer(match["items"])}
        if items or "no cube" in match["items"]:
            counts[match["place"].lower()] = items
    return counts or None


def tray_colors(attributes: Mapping[str, Any], counts: Counts) -> list[str]:
    """The trays' colors: the task's known tray colors, and any tray the detection named (it leaves
    empty places out of its report)."""
    named = [str(v).lower() for key, values in attributes.items() if "tray" in key and "colo" in key
             and isinstance(values, list) for v in values]
    seen = [place[: -len(_TRAY)] for place in counts if place.endswith(_TRAY)]
    return list(dict.fromkeys([*named, *seen]))


def goal_counts(request: str, colors: list[str], totals: Mapping[str, int]) -> Counts | None:
    """Where the request wants the cubes; None when its wording is not one this skill knows."""
    goal: Counts = {TABLE: {}, **{c + _TRAY: {} for c in colors}}
    if _OPPOSITE.search(request) and len(colors) == 2:
        a, b = colors
        even = min(totals.get(a, 0), totals.get(b, 0))
        goal[a + _TRAY][b] = goal[b + _TRAY][a] = even
        goal[TABLE] = {a: totals.get(a, 0) - even, b: totals.get(b, 0) - even}
    elif _BY_COLOR.search(request):
        for color, total in totals.items():
            goal.setdefault(color + _TRAY, {})[color] = total  # a color without a tray: left to the model
    else:
        return None
    return goal


def next_move(counts: Counts, goal: Counts, held: str | None) -> tuple[str, str | None] | None:
    """("put", place) for the held cube, ("take", color@place) for the next one to move, None when
    every cube is where it belongs."""

    def missing(color: str) -> list[str]:
        return [place for place, wanted in goal.items() if counts.get(place, {}).get(color, 0) < wanted.get(color, 0)]

    if held is not None:
        return "put", (missing(held) or [None])[0]
    for place, have in counts.items():
        for color, n in have.items():
            if n > goal.get(place, {}).get(color, 0) and missing(color):
                return "take", f"{color}@{place}"
    return None


class CubesSkill:
    """Moves counted cubes to where the request wants them, one take and put at a time."""

    name = "cubes"

    def observe(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> None:
        tools = cube_tools(situation.toolbox)
        if tools is None:
            return
        if notes and notes.get("request") != state.request:
            notes.clear()  # a new request: look afresh before moving anything
            notes.update(request=state.request, stale=True)
        feedback = situation.feedback
        if feedback is None or not notes:
            return
        for result, call in results_with_calls(feedback, state):
            arguments = call.get("arguments") or {}
            if not result.ok:
                if call.get("name") in (tools.take.name, tools.put.name):
                    notes["stale"] = True  # the counts were wrong somewhere: look again
                continue
            if call.get("name") == tools.look.name and (counts := read_counts(result.message)) is not None:
                if notes.get("held") and counts.get(TABLE, {}).get(notes["held"], 0) > 0:
                    counts[TABLE][notes["held"]] -= 1  # a lifted cube is in no tray: reported on the table
                notes.update(counts=counts, stale=False)
            elif "counts" in notes and call.get("name") == tools.take.name:
                color, place = str(arguments.get(tools.take_color, "")).lower(), str(
                    arguments.get(tools.take_place, "")).lower()
                have = notes["counts"].setdefault(place, {})
                have[color] = max(0, have.get(color, 0) - 1)
                notes["held"] = color
            elif "counts" in notes and call.get("name") == tools.put.name and notes.get("held"):
                place = str(next(iter(arguments.values()), "")).lower()
                have = notes["counts"].setdefault(place, {})
                have[notes["held"]] = have.get(notes["held"], 0) + 1
                notes["held"] = None

    def next(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> AgentDecision | None:
        tools = cube_tools(situation.toolbox)
        robots = situation.toolbox.robots or ("robot",)
        if tools is None or len(robots) > 1 or state.failures_in_row >= 3:
            return None
        if not (_OPPOSITE.search(state.request) or _BY_COLOR.search(state.request)):
            return None
        if notes.get("request") != state.request:
            notes.update(request=state.request, stale=True)
        robot = robots[0]
        if notes.get("stale") or "counts" not in notes:
            return AgentDecision(tool_calls=[ToolCall(name=tools.look.name, arguments={}, target_robot_name=robot)])
        counts: Counts = notes["counts"]
        held = notes.get("held")
        totals: Counter[str] = Counter()
        for have in counts.values():
            totals.update(have)
        if held:
            totals[held] += 1
        colors = tray_colors(situation.attributes, counts)
        goal = goal_counts(state.request, colors, totals)
        if goal is None:
            return None
        move = next_move(counts, goal, held)
        if move is None:
            from .magma import completion_message  # the policy's own wording; imported late (cycle)
            return AgentDecision(say=completion_message(state))
        kind, where = move
        if kind == "put":
            if where is None:
                return None
            call = ToolCall(name=tools.put.name, arguments={tools.put.params[0].name: where}, target_robot_name=robot)
        else:
            color, place = str(where).split("@", 1)
            call = ToolCall(name=tools.take.name, arguments={tools.take_color: color, tools.take_place: place},
                            target_robot_name=robot)
        return AgentDecision(tool_calls=[call])


__all__ = ["CubeTools", "CubesSkill", "cube_tools", "goal_counts", "next_move", "read_counts"]
