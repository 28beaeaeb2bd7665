"""A typed view over the memory JSON object, and the one way lava writes it back.

Memory is the whole state of an interaction branch (lava keeps none of its own). The known keys
follow the reference MAGMA agents so memories continue across agents:

- `memory_list`: permanent rules, a list of strings, always returned exactly as received;
- `history`: `[{"author": "USER"|"SYSTEM"|"MODEL", "content": str}, ...]`; user messages and
  environment feedback are stored verbatim, decisions as the reference JSON string
  `{"say": ..., "action": {robot: {"name", "arguments"}}}`;
- `summary`: a running summary of turns no longer kept in `history`;
- `lava`: lava's private state (task state, policy bookkeeping), an object.

Every other key is preserved untouched. A malformed known key is refused with the field's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Any, Literal, NamedTuple

import orjson

from .errors import InvalidInput
from .jsontext import json_text
from .protocol import AgentDecision, AgentInstruction

Author = Literal["USER", "SYSTEM", "MODEL"]
AUTHORS: tuple[str, ...] = ("USER", "SYSTEM", "MODEL")
LAVA_KEY = "lava"


class Turn(NamedTuple):
    """One history entry. A named tuple rather than a frozen dataclass: just as immutable, and made
    in half the time (a frozen dataclass sets each field through object.__setattr__), which counts
    at one Turn per history entry per input, about 200 per GEN batch."""

    author: Author
    content: str


@dataclass(frozen=True, slots=True)
class MemoryView:
    """Read-only, validated view of one input's memory. Never mutated; updates go to copies."""

    raw: Mapping[str, Any]
    memory_list: tuple[str, ...]
    history: tuple[Turn, ...]
    summary: str
    private: Mapping[str, Any]

    @classmethod
    def parse(cls, memory: Mapping[str, Any]) -> MemoryView:
        rules = memory.get("memory_list", [])
        if not isinstance(rules, list) or not all(isinstance(rule, str) for rule in rules):
            raise InvalidInput(("memory", "memory_list"), "memory_list must be a list of strings")
        raw_history = memory.get("history", [])
        if not isinstance(raw_history, list):
            raise InvalidInput(("memory", "history"), "history must be a list of {author, content} objects")
        return cls(memory, tuple(rules), _turns(raw_history), _summary(memory), _private(memory))

    @property
    def model_turns(self) -> int:
        return sum(1 for turn in self.history if turn.author == "MODEL")


_AUTHOR_AND_CONTENT = itemgetter("author", "content")
_as_turn = partial(tuple.__new__, Turn)  # what Turn(author, content) makes, without its Python-level __new__
_is_author = frozenset(AUTHORS).__contains__
_author, _content = itemgetter(0), itemgetter(1)


def _turns(raw_history: list[Any]) -> tuple[Turn, ...]:
    # The usual history is well formed: read in one pass, checked after, all in C (map, itemgetter;
    # it shows at 20 entries x 10 inputs per GEN batch); any doubt and the entry-by-entry reading
    # below names the first bad field.
    try:
        turns = tuple(map(_as_turn, map(_AUTHOR_AND_CONTENT, raw_history)))
        if all(map(_is_author, map(_author, turns))) and all(map(isinstance, map(_content, turns), repeat(str))):
            return turns
    except (TypeError, KeyError):  # not an object, a field missing, an unhashable author
        pass
    checked = []
    for index, entry in enumerate(raw_history):
        if not isinstance(entry, dict):
            raise InvalidInput(("memory", "history", index), "a history entry must be an object")
        author, content = entry.get("author"), entry.get("content")
        if author not in AUTHORS:
            raise InvalidInput(
                ("memory", "history", index, "author"), "author must be one of USER, SYSTEM, MODEL"
            )
        if not isinstance(content, str):
            raise InvalidInput(("memory", "history", index, "content"), "content must be a string")
        checked.append(Turn(author, content))
    return tuple(checked)


def _summary(memory: Mapping[str, Any]) -> str:
    summary = memory.get("summary", "")
    if not isinstance(summary, str):
        raise InvalidInput(("memory", "summary"), "summary must be a string")
    return summary


def _private(memory: Mapping[str, Any]) -> Mapping[str, Any]:
    private = memory.get(LAVA_KEY, {})
    if not isinstance(private, dict):
        raise InvalidInput(("memory", LAVA_KEY), "lava's private memory must be an object")
    return private


def instruction_author(instruction: AgentInstruction) -> Author:
    return "USER" if instruction.type == "user" else "SYSTEM"


def decision_record(decision: AgentDecision) -> str:
    """The reference agents' history encoding of a decision (a list when a robot repeats)."""
    robots = [call.target_robot_name for call in decision.tool_calls]
    action: dict[str, Any] | list[dict[str, Any]]
    if len(set(robots)) == len(robots):
        action = {c.target_robot_name: {"name": c.name, "arguments": c.arguments} for c in decision.tool_calls}
    else:
        action = [{c.target_robot_name: {"name": c.name, "arguments": c.arguments}} for c in decision.tool_calls]
    return json_text({"say": decision.say, "action": action})


def append_turn(memory: dict[str, Any], instruction: AgentInstruction, decision: AgentDecision,
                record: str | None = None) -> dict[str, Any]:
    """Record one answered input in `memory` (the candidate's own copy) and return it.
    `record`: `decision_record(decision)` when the caller has it (candidates sharing a decision)."""
    history = memory.get("history")
    if not isinstance(history, list):
        history = memory["history"] = []
    history.append({"author": instruction_author(instruction), "content": instruction.content})
    history.append({"author": "MODEL", "content": record if record is not None else decision_record(decision)})
    return memory


def clone_json(value: Any) -> Any:
    """Deep copy of a JSON value; several times faster than copy.deepcopy for this shape."""
    if isinstance(value, dict):
        return {key: clone_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clone_json(item) for item in value]
    return value


def json_copies(value: Any, n: int) -> list[Any]:
    """`n` independent deep copies of a JSON value: encoded once, decoded n times (orjson does
    both faster than Python walks the tree). Values orjson refuses (integers beyond 64 bits, lone
    surrogates) are walked instead."""
    try:
        encoded = orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return [clone_json(value) for _ in range(n)]
    return [orjson.loads(encoded) for _ in range(n)]


__all__ = [
    "AUTHORS",
    "LAVA_KEY",
    "MemoryView",
    "Turn",
    "append_turn",
    "clone_json",
    "decision_record",
    "instruction_author",
    "json_copies",
]
