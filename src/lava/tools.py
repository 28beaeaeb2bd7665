"""MAGMA tool descriptors, their JSON Schema, and the validator every decision passes.

MAGMA sends tools as `{"name", "description", "arguments": {param: {"description", "type"}}}`
with Python type names (`str`, `int`, `float`, `bool`, `list`, `dict`); the docs' example uses
`parameters` instead of `arguments`, and OpenAI-style callers send a JSON-Schema object. All
three are read here into one `ToolSpec`, so nothing downstream cares which shape arrived.

The validator encodes what the consumers enforce after the protocol (protocol.md §8): a known
tool, exactly the declared arguments with the right JSON types, a robot from `known_robots`, at
most one call per robot, text xor calls, and user-facing text free of `{` and `<`. Its messages
are written to be read by a model, because the repair prompt quotes them verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from .errors import InvalidInput
from .protocol import AgentDecision, ToolCall

CANCEL_TOOL = "cancel_current_action"
TOOLS_CACHE_SIZE = 256

# Python type names as MAGMA writes them, plus the JSON-Schema names for callers that send those.
_JSON_TYPES: dict[str, str] = {
    "str": "string",
    "string": "string",
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
    "array": "array",
    "tuple": "array",
    "dict": "object",
    "object": "object",
}

FORBIDDEN_TEXT_CHARACTERS = ("{", "<")
SAY_PATTERN = r'^[^{}<>"\\\n]+$'


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    json_type: str | None  # None: the descriptor named a type we do not know; accept any JSON value
    description: str = ""

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": self.json_type} if self.json_type else {}
        if self.description:
            schema["description"] = self.description
        return schema


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str = ""
    params: tuple[Param, ...] = ()
    # Hashed once: tool sets key the prompt and schema caches, looked up for every input.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.name, self.description, self.params)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def arguments_schema(self, enums: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
        """`enums` narrows string parameters to the listed values (names known to exist)."""
        properties = {}
        for p in self.params:
            schema = p.schema()
            values = (enums or {}).get(p.name)
            if values and p.json_type == "string":
                schema = {**schema, "enum": list(values)}
                schema.pop("type", None)
            properties[p.name] = schema
        return {
            "type": "object",
            "properties": properties,
            "required": list(self.param_names),
            "additionalProperties": False,
        }

    def function_schema(self) -> dict[str, Any]:
        """The OpenAI `function` object for native tool calling."""
        return {"name": self.name, "description": self.description, "parameters": self.arguments_schema()}

    def signature(self) -> str:
        """`press_button(id: str)`: the compact form prompts and traces use."""
        inner = ", ".join(f"{p.name}: {p.json_type or 'any'}" for p in self.params)
        return f"{self.name}({inner})"


def _read_param(name: str, spec: Any, loc: tuple[str | int, ...]) -> Param:
    if isinstance(spec, str):  # `{"id": "str"}`: a bare type name
        return Param(name, _JSON_TYPES.get(spec.strip().lower()))
    if not isinstance(spec, Mapping):
        raise InvalidInput(loc, "a parameter must be described by an object with a 'type'")
    raw_type = spec.get("type")
    json_type = _JSON_TYPES.get(raw_type.strip().lower()) if isinstance(raw_type, str) else None
    description = spec.get("description")
    return Param(name, json_type, description if isinstance(description, str) else "")


def parse_tool(descriptor: Mapping[str, Any], loc: tuple[str | int, ...] = ()) -> ToolSpec:
    name = descriptor.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput((*loc, "name"), "a tool needs a non-empty string 'name'")
    description = descriptor.get("description")
    key = "arguments" if "arguments" in descriptor else "parameters"
    raw_params = descriptor.get(key)
    if raw_params is None:
        raw_params = {}
    if not isinstance(raw_params, Mapping):
        raise InvalidInput((*loc, key), "tool parameters must be an object mapping names to specs")
    if raw_params.get("type") == "object" and isinstance(raw_params.get("properties"), Mapping):
        raw_params = raw_params["properties"]  # a JSON-Schema object, OpenAI style
    params = tuple(_read_param(str(p), spec, (*loc, key, str(p))) for p, spec in raw_params.items())
    return ToolSpec(name, description if isinstance(description, str) else "", params)


def parse_tools(descriptors: Sequence[Mapping[str, Any]]) -> tuple[ToolSpec, ...]:
    """The tools of one input. Every input of a MAGMA batch, and every turn of an episode, lists the
    same tools: they are read once and then served, immutable, from a cache keyed by their JSON."""
    try:
        key = orjson.dumps(descriptors)
    except (orjson.JSONEncodeError, TypeError):  # not plain JSON data: read them as they are
        return _parse_tools(descriptors)
    return _parse_encoded_tools(key)


@lru_cache(maxsize=TOOLS_CACHE_SIZE)
def _parse_encoded_tools(encoded: bytes) -> tuple[ToolSpec, ...]:
    # Refusals (InvalidInput) are raised, never cached.
    return _parse_tools(orjson.loads(encoded))


def _parse_tools(descriptors: Sequence[Mapping[str, Any]]) -> tuple[ToolSpec, ...]:
    tools: list[ToolSpec] = []
    seen: set[str] = set()
    for index, descriptor in enumerate(descriptors):
        tool = parse_tool(descriptor, ("tools", index))
        if tool.name in seen:
            raise InvalidInput(("tools", index, "name"), f"tool {tool.name!r} is listed twice")
        seen.add(tool.name)
        tools.append(tool)
    return tuple(tools)


def known_robots(attributes: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The robots calls may target; None when the consumer sent no list (then any name passes)."""
    robots = attributes.get("known_robots")
    if robots is None:
        return None
    if not isinstance(robots, list) or not all(isinstance(r, str) and r for r in robots):
        raise InvalidInput(("attributes", "known_robots"), "known_robots must be a list of robot names")
    return tuple(robots)


def robot_statuses(attributes: Mapping[str, Any]) -> dict[str, str]:
    statuses = attributes.get("robot_statuses")
    if not isinstance(statuses, Mapping):
        return {}
    return {str(robot): status for robot, status in statuses.items() if isinstance(status, str)}


def busy_robots(attributes: Mapping[str, Any]) -> tuple[str, ...]:
    """Robots with held or running work: the only case where an empty decision is meaningful."""
    return tuple(r for r, s in robot_statuses(attributes).items() if s.strip().upper().startswith("RUNNING"))


# -- validation -------------------------------------------------------------------------------


def _type_matches(value: Any, json_type: str | None) -> bool:
    if json_type is None:
        return True
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "array":
        return isinstance(value, list)
    if json_type == "object":
        return isinstance(value, dict)
    return True


_TYPE_NAMES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list",
               "object": "dict"}


def _python_type_name(value: Any) -> str:
    return type(value).__name__ if value is not None else "null"


@dataclass(slots=True)
class DecisionCheck:
    """The validator's verdict: problems a model can act on, empty when the decision is valid."""

    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        return "; ".join(self.problems)


@dataclass(frozen=True, slots=True)
class ToolBox:
    """The tools and robots of one input: everything a decision is checked against."""

    tools: tuple[ToolSpec, ...]
    robots: tuple[str, ...] | None
    busy: tuple[str, ...] = ()
    # Hashed once: a decision looks its tool set up in a dozen caches (roles, prompts, tables), and
    # the generated hash would re-hash every tool each time.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.tools, self.robots, self.busy)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def from_input(cls, tools: Sequence[Mapping[str, Any]], attributes: Mapping[str, Any]) -> ToolBox:
        return cls(parse_tools(tools), known_robots(attributes), busy_robots(attributes))

    def get(self, name: str) -> ToolSpec | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)

    def call_schema(self, tool: ToolSpec, enums: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
        robot: dict[str, Any] = {"type": "string", "enum": list(self.robots)} if self.robots else {"type": "string"}
        return {
            "type": "object",
            "properties": {"robot": robot, "name": {"const": tool.name},
                           "arguments": tool.arguments_schema(enums)},
            "required": ["robot", "name", "arguments"],
            "additionalProperties": False,
        }

    def decision_schema(self, *, say: bool = True, calls: bool = True, exclude: tuple[str, ...] = (),
                        enums: Mapping[str, Mapping[str, Sequence[str]]] | None = None) -> dict[str, Any]:
        """JSON Schema of lava's answer format for this input: text xor calls, names as enums.

        `say=False` or `calls=False` keeps one branch only, for turns that must act or must talk;
        `exclude` leaves tools out for this turn (never all of them); `enums` maps a tool to the
        values its string parameters may take.

        Constrained decoding with it makes unknown tools, unknown robots, missing or extra
        arguments and wrongly typed values impossible, whatever the model.
        """
        say_branch = {
            "type": "object",
            # The pattern also keeps quotes, backslashes and newlines out: grammar engines that
            # apply it to raw characters (llama.cpp) would otherwise let a string run past its end.
            "properties": {"say": {"type": "string", "minLength": 1, "pattern": SAY_PATTERN}},
            "required": ["say"],
            "additionalProperties": False,
        }
        offered = [t for t in self.tools if t.name not in exclude]
        if not self.tools or not calls or (not offered and say):
            return say_branch
        offered = offered or list(self.tools)
        calls_schema: dict[str, Any] = {
            "type": "array",
            "items": {"anyOf": [self.call_schema(t, (enums or {}).get(t.name)) for t in offered]},
            "minItems": 1,
        }
        if self.robots:
            calls_schema["maxItems"] = len(self.robots)
        act = {
            "type": "object",
            "properties": {"tool_calls": calls_schema},
            "required": ["tool_calls"],
            "additionalProperties": False,
        }
        return {"anyOf": [act, say_branch]} if say else act

    def check_call(self, call: ToolCall) -> list[str]:
        problems: list[str] = []
        tool = self.get(call.name)
        if tool is None:
            known = ", ".join(self.tool_names) or "none"
            problems.append(f"{call.name!r} is not a known tool (known tools: {known})")
        if self.robots is not None and call.target_robot_name not in self.robots:
            problems.append(
                f"{call.target_robot_name!r} is not a known robot (known robots: {', '.join(self.robots)})"
            )
        if tool is None:
            return problems
        declared = set(tool.param_names)
        given = set(call.arguments)
        if extra := sorted(given - declared):
            problems.append(f"{tool.name} got unknown arguments: {', '.join(extra)}")
        if missing := [p for p in tool.param_names if p not in given]:
            problems.append(f"{tool.name} is missing arguments: {', '.join(missing)}")
        for param in tool.params:
            if param.name in call.arguments and not _type_matches(call.arguments[param.name], param.json_type):
                expected = _TYPE_NAMES.get(param.json_type or "", param.json_type)
                problems.append(
                    f"argument {param.name!r} of {tool.name} must be of type {expected}, "
                    f"got {_python_type_name(call.arguments[param.name])}"
                )
        return problems

    def check(self, decision: AgentDecision) -> DecisionCheck:
        check = DecisionCheck()
        say, calls = decision.say, decision.tool_calls
        if say and calls:
            check.problems.append("answer either with text or with tool calls, never both")
        if not say and not calls and not self.busy:
            check.problems.append("the answer is empty: give a text answer or at least one tool call")
        if say and any(ch in say for ch in FORBIDDEN_TEXT_CHARACTERS):
            check.problems.append("text for the user must not contain '{' or '<'")
        if say and not say.strip():
            check.problems.append("the text answer is blank")
        seen: set[str] = set()
        for call in calls:
            if call.target_robot_name in seen:
                check.problems.append(f"robot {call.target_robot_name!r} got more than one call; one per robot")
            seen.add(call.target_robot_name)
            check.problems.extend(self.check_call(call))
        return check


def shared_decision_schema(toolbox: ToolBox) -> Mapping[str, Any]:
    """`toolbox.decision_schema()`, built once per tool set and robots: every input of a MAGMA batch
    and every turn of an episode asks for the same one. Shared, hence read-only (backends that
    adapt a schema copy it first)."""
    return _decision_schema(toolbox.tools, toolbox.robots)


@lru_cache(maxsize=TOOLS_CACHE_SIZE)
def _decision_schema(tools: tuple[ToolSpec, ...], robots: tuple[str, ...] | None) -> Mapping[str, Any]:
    return ToolBox(tools, robots).decision_schema()


def coerce_arguments(tool: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
    """Lossless fixes only: an integral number for a float parameter becomes a float."""
    fixed = dict(arguments)
    for param in tool.params:
        value = fixed.get(param.name)
        if param.json_type == "number" and isinstance(value, int) and not isinstance(value, bool):
            fixed[param.name] = float(value)
    return fixed


__all__ = [
    "CANCEL_TOOL",
    "DecisionCheck",
    "Param",
    "ToolBox",
    "ToolSpec",
    "busy_robots",
    "coerce_arguments",
    "known_robots",
    "parse_tool",
    "parse_tools",
    "robot_statuses",
    "shared_decision_schema",
]
