"""Model text -> decision. Tolerant of every shape small and large models emit; never loses text.

lava asks models for `{"say": "..."}` or `{"tool_calls": [{"robot", "name", "arguments"}]}`, but
what comes back varies with the model and the server: fenced JSON, `<tool_call>` tags (Qwen,
Hermes), native `tool_calls` from an OpenAI-compatible server, the reference agents'
`{"action": {robot: {...}}}`, a `<think>` block before the answer, or plain prose. `parse_decision`
reads all of them and returns the decision together with the raw text and what it had to assume
or could not read, so callers decide (repair, error candidate) with full information.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from .jsontext import json_text
from .protocol import AgentDecision, ToolCall

Model = TypeVar("Model", bound=BaseModel)
_set_attribute = object.__setattr__

_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_MARKUP = re.compile(r"</?[a-zA-Z_][\w-]*>")

_NAME_KEYS = ("name", "tool", "tool_name", "function")
_ARGUMENT_KEYS = ("arguments", "parameters", "args", "params", "input")
_ROBOT_KEYS = ("robot", "target_robot_name", "target_robot", "robot_name")


@dataclass(frozen=True, slots=True)
class NativeCall:
    """A tool call a server returned in its own field (OpenAI `tool_calls`, Gemini functionCall)."""

    name: str
    arguments: str | Mapping[str, Any]


@dataclass(slots=True)
class ParsedDecision:
    raw: str
    decision: AgentDecision | None = None
    problems: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.decision is not None and not self.problems


def strip_reasoning(text: str) -> str:
    """Drop `<think>` blocks, including a close-only `</think>` from templates that pre-fill the open tag."""
    if "<" not in text:  # no tag at all (the usual answer of a constrained model): nothing to drop
        return text.strip()
    return _strip_think_tags(text)


def _strip_think_tags(text: str) -> str:
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    return text.strip()


def _json_objects(text: str) -> list[Any]:
    """Every top-level JSON value starting with `{` or `[` in `text`, in order."""
    if text[:1] in ("{", "[") and text[-1:] in ("}", "]"):
        try:  # the whole text is one value (the usual answer): read in one call, same result
            return [json.loads(text)]
        except ValueError:
            pass
    return _scan_json_values(text)


def _scan_json_values(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    found: list[Any] = []
    index = 0
    while index < len(text):
        match = re.search(r"[{\[]", text[index:])
        if match is None:
            break
        start = index + match.start()
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            index = start + 1
            continue
        found.append(value)
        index = end
    return found


def _candidates(text: str) -> list[Any]:
    """JSON payloads in preference order: tool-call tags, fenced blocks, then any JSON in the text."""
    if "<" not in text and "```" not in text:  # neither tags nor fences can match: straight to the last step
        return _json_objects(text)
    return _marked_candidates(text)


def _marked_candidates(text: str) -> list[Any]:
    tagged = [m.group(1) for m in _TOOL_CALL_TAG.finditer(text) if m.group(1)]
    if tagged:
        calls: list[Any] = []
        for block in tagged:
            calls.extend(_json_objects(block))
        if calls:
            return [calls] if len(calls) > 1 else calls
    for block in _FENCE.findall(text):
        values = _json_objects(block)
        if values:
            return values
    return _json_objects(text)


def _arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        if not raw.strip():
            return {}, None
        try:
            raw = json.loads(raw)
        except ValueError:
            return None, f"arguments are not valid JSON: {raw[:200]!r}"
    if not isinstance(raw, dict):
        return None, f"arguments must be a JSON object, got {type(raw).__name__}"
    return raw, None


def _unchecked(model: type[Model], fields: dict[str, Any]) -> Model:
    """`model.model_construct(**fields)` for a wire model given every one of its fields, in
    declaration order: the same instance (fields set, no extra, no private state), made without
    model_construct's per-field alias and default lookups, which cost about 2.5 us of the 3 a
    construction takes, and every model answer is read into two or more of them. Validation is
    deliberately deferred (read_decision validates the whole decision); tests/test_fast_paths.py
    checks the result against model_construct's."""
    instance = model.__new__(model)
    _set_attribute(instance, "__dict__", fields)
    _set_attribute(instance, "__pydantic_fields_set__", set(fields))
    _set_attribute(instance, "__pydantic_extra__", None)
    _set_attribute(instance, "__pydantic_private__", None)
    return instance


def _decision(say: str, calls: list[ToolCall]) -> AgentDecision:
    return _unchecked(AgentDecision, {"say": say, "tool_calls": calls})


class _Reader:
    def __init__(self, robots: Sequence[str] | None, result: ParsedDecision) -> None:
        self.robots = robots
        self.result = result

    def default_robot(self) -> str | None:
        if self.robots and len(self.robots) == 1:
            return self.robots[0]
        return None

    def call(self, item: Any, robot: str | None = None) -> ToolCall | None:
        if not isinstance(item, Mapping):
            self.result.problems.append(f"a tool call must be an object, got {type(item).__name__}")
            return None
        item = dict(item)
        function = item.get("function")
        if isinstance(function, Mapping):  # OpenAI wire shape {"type": "function", "function": {...}}
            item = {**item, **function}
        name = next((item[k] for k in _NAME_KEYS if isinstance(item.get(k), str)), None)
        if not name:
            self.result.problems.append("a tool call has no tool name")
            return None
        raw_args = next((item[k] for k in _ARGUMENT_KEYS if k in item), None)
        arguments, problem = _arguments(raw_args)
        if arguments is None:
            self.result.problems.append(f"{name}: {problem}")
            return None
        robot = robot or next((item[k] for k in _ROBOT_KEYS if isinstance(item.get(k), str) and item[k]), None)
        if robot is None:
            # Native tool calling has no slot for the robot; models put it among the arguments.
            for key in _ROBOT_KEYS:
                if isinstance(arguments.get(key), str) and arguments[key]:
                    robot = arguments.pop(key)
                    break
        if robot is None:
            robot = self.default_robot()
            if robot is None:
                self.result.problems.append(f"{name}: the call does not say which robot runs it")
                return None
            self.result.assumptions.append(f"{name}: robot {robot!r} assumed (the only known robot)")
        return _unchecked(ToolCall, {"name": name, "arguments": arguments, "target_robot_name": robot})

    def calls(self, value: Any) -> list[ToolCall]:
        calls: list[ToolCall] = []
        if isinstance(value, Mapping) and not any(k in value for k in _NAME_KEYS):
            # {"panda": {"name": ..., "arguments": ...}}: the reference agents' `action` map
            for robot, item in value.items():
                for entry in item if isinstance(item, list) else [item]:
                    call = self.call(entry, robot=str(robot))
                    if call is not None:
                        calls.append(call)
            return calls
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, Mapping) and len(item) == 1 and not any(k in item for k in _NAME_KEYS):
                calls.extend(self.calls(item))  # [{"panda": {...}}]: the reference list form
                continue
            call = self.call(item)
            if call is not None:
                calls.append(call)
        return calls

    def decision(self, value: Any) -> AgentDecision | None:
        if isinstance(value, list):
            return _decision("", self.calls(value))
        if not isinstance(value, Mapping):
            return None
        if any(k in value for k in _NAME_KEYS) and not any(k in value for k in ("say", "tool_calls", "action")):
            return _decision("", self.calls(value))
        say = value.get("say", value.get("message", value.get("text", "")))
        if not isinstance(say, str):
            self.result.problems.append("'say' must be a string")
            say = ""
        raw_calls = value.get("tool_calls", value.get("calls", value.get("action")))
        calls = self.calls(raw_calls) if raw_calls else []
        if not say and not calls and not raw_calls and not any(k in value for k in ("say", "tool_calls", "action")):
            return None
        return _decision(say.strip(), calls)


def parse_decision(
    text: str,
    *,
    robots: Sequence[str] | None = None,
    native_calls: Sequence[NativeCall] = (),
) -> ParsedDecision:
    """Read a decision from model output. Always returns; `raw` is the untouched text."""
    result = ParsedDecision(raw=text)
    reader = _Reader(robots, result)
    if native_calls:
        calls = [c for n in native_calls if (c := reader.call({"name": n.name, "arguments": n.arguments}))]
        result.decision = _decision("", calls)
        return result
    body = strip_reasoning(text)
    if not body:
        result.problems.append("the model returned no answer")
        return result
    # Read JSON even when no tool was offered: `{"say": ...}` is how lava asks every model to talk.
    for value in _candidates(body):
        decision = reader.decision(value)
        if decision is not None:
            result.decision = decision
            return result
    if "{" in body or _MARKUP.search(body):
        result.problems.append("the answer looks like a tool call or JSON but could not be read as one")
        return result
    # Plain prose is a text answer: that is what the reference format's `say` carries.
    result.assumptions.append("plain text read as a text answer")
    result.decision = _decision(body, [])
    return result


def render_decision(decision: AgentDecision) -> str:
    """lava's own model-facing encoding of a decision (prompts, few-shot examples, scripts)."""
    if decision.tool_calls:
        calls = [
            {"robot": c.target_robot_name, "name": c.name, "arguments": c.arguments} for c in decision.tool_calls
        ]
        return json_text({"tool_calls": calls})
    return json_text({"say": decision.say})


__all__ = ["NativeCall", "ParsedDecision", "parse_decision", "render_decision", "strip_reasoning"]
