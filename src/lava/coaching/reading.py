"""Corrections that need no model: a decision written out by GEN's diagnosis, or a rejected answer
that the input alone is enough to repair.

Both are only ever taken when the result passes the validator against the input's own tools and
robots; anything less certain is left to the coaching model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..backends.base import Completion
from ..errors import InvalidInput
from ..parsing import parse_decision
from ..policies.base import read_decision
from ..protocol import AgentDecision, ToolCall
from ..tools import ToolBox, ToolSpec

# GEN writes decisions as `CALLS: panda.press_button(id=sw1) | panda.cancel_current_action()` or
# `MESSAGE: text` (magma_core `ValidAgentAnswer.to_string`); its diagnosis model imitates that.
_CALL = re.compile(r"(?P<robot>[A-Za-z_][\w-]*)\.(?P<name>[A-Za-z_]\w*)\((?P<args>[^()]*)\)")
_MESSAGE = re.compile(r"^\s*MESSAGE:\s*(?P<text>\S.*?)\s*$", re.DOTALL)
_PLAIN_TEXT = "plain text read as a text answer"


def decision_in_text(text: str, toolbox: ToolBox) -> AgentDecision | None:
    """A valid decision that `text` states exactly (JSON, GEN's call notation or `MESSAGE:`), else None.

    Prose such as "press the other button" is not a decision: it goes to the coaching model."""
    message = _MESSAGE.match(text)
    if message:
        return _valid(AgentDecision(say=message["text"]), toolbox)
    calls = _calls_in_notation(text, toolbox)
    if calls:
        return _valid(AgentDecision(tool_calls=calls), toolbox)
    parsed = read_decision(Completion(text=text), toolbox)
    if not parsed.ok or _PLAIN_TEXT in parsed.assumptions:
        return None
    return parsed.decision


def _calls_in_notation(text: str, toolbox: ToolBox) -> list[ToolCall]:
    calls = []
    for match in _CALL.finditer(text):
        tool = toolbox.get(match["name"])
        if tool is None or (toolbox.robots is not None and match["robot"] not in toolbox.robots):
            continue
        arguments = _notation_arguments(match["args"], tool)
        if arguments is None:
            return []
        calls.append(ToolCall(name=tool.name, arguments=arguments, target_robot_name=match["robot"]))
    return calls


def _notation_arguments(text: str, tool: ToolSpec) -> dict[str, Any] | None:
    """`id=sw1, count=2` -> {"id": "sw1", "count": 2}, typed by the tool's declared parameters."""
    arguments: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep:
            return None
        arguments[name.strip()] = _typed(value.strip(), next((p.json_type for p in tool.params
                                                               if p.name == name.strip()), None))
    return arguments


def _typed(value: str, json_type: str | None) -> Any:
    unquoted = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value
    if json_type == "string":
        return unquoted
    if json_type == "boolean" and value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return json.loads(value)
    except ValueError:
        return unquoted


def repaired_answer(raw_outputs: Iterable[str], toolbox: ToolBox) -> AgentDecision | None:
    """The latest rejected raw answer made valid with what the input states, or None.

    Repairs: the only known robot for an unknown one, arguments the tool does not declare
    dropped, numbers and booleans written as text read as such. A call to an unknown tool or a
    missing argument is a decision the input cannot make, and is left alone."""
    for raw in reversed([text for text in raw_outputs if text.strip()]):
        parsed = parse_decision(raw, robots=toolbox.robots)
        decision = parsed.decision
        if decision is None:
            continue
        if decision.tool_calls:
            calls = [_repaired_call(call, toolbox) for call in decision.tool_calls]
            if any(call is None for call in calls):
                continue
            candidate = AgentDecision(tool_calls=[call for call in calls if call is not None])
        elif _PLAIN_TEXT in parsed.assumptions:
            continue  # prose instead of the answer format: what it meant is the model's to say
        else:
            candidate = AgentDecision(say=decision.say)
        found = _valid(candidate, toolbox)
        if found is not None:
            return found
    return None


def _repaired_call(call: ToolCall, toolbox: ToolBox) -> ToolCall | None:
    tool = toolbox.get(call.name)
    if tool is None:
        return None
    robot = call.target_robot_name
    if toolbox.robots is not None and robot not in toolbox.robots:
        if len(toolbox.robots) != 1:
            return None
        robot = toolbox.robots[0]
    types = {p.name: p.json_type for p in tool.params}
    arguments = {name: _retyped(value, types[name]) for name, value in call.arguments.items() if name in types}
    return ToolCall(name=tool.name, arguments=arguments, target_robot_name=robot)


def _retyped(value: Any, json_type: str | None) -> Any:
    if not isinstance(value, str) or json_type not in ("integer", "number", "boolean"):
        return value
    if json_type == "boolean":
        return value.strip().lower() == "true" if value.strip().lower() in ("true", "false") else value
    try:
        number = json.loads(value.strip())
    except ValueError:
        return value
    if json_type == "integer" and isinstance(number, int) and not isinstance(number, bool):
        return number
    if json_type == "number" and isinstance(number, (int, float)) and not isinstance(number, bool):
        return float(number)
    return value


def _valid(decision: AgentDecision, toolbox: ToolBox) -> AgentDecision | None:
    return decision if toolbox.check(decision).ok else None


def toolbox_of(tools: list[Mapping[str, Any]], attributes: Mapping[str, Any]) -> ToolBox | None:
    try:
        return ToolBox.from_input(tools, attributes)
    except InvalidInput:
        return None


__all__ = ["decision_in_text", "repaired_answer", "toolbox_of"]
