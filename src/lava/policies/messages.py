"""Chat messages for the commander, laid out for prefix caches.

Order, most stable first: the system message (instructions, robots, tools, permanent rules,
summary), then older turns, then the current turn with the task state. Two inputs with the same
tools and rules therefore share a byte-identical prefix, and turn t+1 of an episode extends the
prompt of turn t, which is what lets llama.cpp and vLLM reuse their caches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from ..backends.base import Message
from ..jsontext import json_text
from ..memory import Turn
from ..parsing import parse_decision, render_decision
from ..prompts import render
from ..situation import Feedback, Situation
from ..tools import ToolSpec

HISTORY_CACHE_SIZE = 8192


def format_value(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(format_value(item) for item in value) if value else "(none)"
    if isinstance(value, Mapping):
        return "; ".join(f"{key}: {format_value(item)}" for key, item in value.items()) if value else "(none)"
    if isinstance(value, str):
        return value
    return json_text(value)


def task_state(attributes: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Attributes as `key: value` lines; known_robots already sits in the stable system part."""
    return [(key, format_value(value)) for key, value in attributes.items() if key != "known_robots"]


def system_message(situation: Situation) -> Message:
    toolbox, memory = situation.toolbox, situation.memory
    return _system_message(toolbox.robots, toolbox.tools, memory.memory_list, memory.summary)


@lru_cache(maxsize=256)
def _system_message(robots: tuple[str, ...] | None, tools: tuple[ToolSpec, ...], rules: tuple[str, ...],
                    summary: str) -> Message:
    # The same for every input of a batch and every turn of an episode: rendered once.
    return Message("system", render("commander_system.j2", robots=robots, tools=tools, rules=rules, summary=summary))


def turn_text(kind: str, content: str, state: list[tuple[str, str]] | None = None,
              feedback: Feedback | None = None) -> str:
    """`feedback`: the content already parsed (the situation holds it), so it is not parsed again."""
    if kind != "user":
        content = (feedback or Feedback.parse(content)).render()
    return render("commander_turn.j2", kind=kind, content=content, state=state or [])


def model_text(record: str) -> str:
    """A MODEL history entry (reference encoding) shown to the model in lava's own format."""
    parsed = parse_decision(record)
    return render_decision(parsed.decision) if parsed.decision is not None else record


@lru_cache(maxsize=HISTORY_CACHE_SIZE)
def history_message(author: str, content: str) -> Message:
    """One history entry as the model sees it. Every turn of an episode sends the whole history
    again, so entries are rendered once and then served from this (pure, bounded) cache."""
    if author == "MODEL":
        return Message("assistant", model_text(content))
    return Message("user", turn_text("user" if author == "USER" else "env", content))


def history_messages(turns: Iterable[Turn]) -> list[Message]:
    return [history_message(turn.author, turn.content) for turn in turns]


def current_message(situation: Situation) -> Message:
    instruction = situation.instruction
    return Message("user", turn_text(instruction.type, instruction.content, task_state(situation.attributes),
                                     situation.feedback))


def commander_messages(situation: Situation, turns: Iterable[Turn] | None = None) -> tuple[Message, ...]:
    history = situation.memory.history if turns is None else turns
    return (system_message(situation), *history_messages(history), current_message(situation))


__all__ = ["commander_messages", "current_message", "format_value", "history_messages", "system_message",
           "task_state"]
