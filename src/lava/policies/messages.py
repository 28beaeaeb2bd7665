"""Chat messages for the commander, laid out for prefix caches.

Order, most stable first: the system message (instructions, robots, tools, permanent rules,
summary), then older turns, then the current turn with the task state. Two inputs with the same
tools and rules therefore share a byte-identical prefix, and turn t+1 of an episode extends the
prompt of turn t, which is what lets llama.cpp and vLLM reuse their caches.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..backends.base import Message
from ..memory import Turn
from ..parsing import parse_decision, render_decision
from ..prompts import render
from ..situation import Feedback, Situation


def format_value(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(format_value(item) for item in value) if value else "(none)"
    if isinstance(value, Mapping):
        return "; ".join(f"{key}: {format_value(item)}" for key, item in value.items()) if value else "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def task_state(attributes: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Attributes as `key: value` lines; known_robots already sits in the stable system part."""
    return [(key, format_value(value)) for key, value in attributes.items() if key != "known_robots"]


def system_message(situation: Situation) -> Message:
    return Message(
        "system",
        render(
            "commander_system.j2",
            robots=situation.toolbox.robots,
            tools=situation.toolbox.tools,
            rules=situation.memory.memory_list,
            summary=situation.memory.summary,
        ),
    )


def turn_text(kind: str, content: str, state: list[tuple[str, str]] | None = None) -> str:
    if kind != "user":
        content = Feedback.parse(content).render()
    return render("commander_turn.j2", kind=kind, content=content, state=state or [])


def model_text(record: str) -> str:
    """A MODEL history entry (reference encoding) shown to the model in lava's own format."""
    parsed = parse_decision(record)
    return render_decision(parsed.decision) if parsed.decision is not None else record


def history_messages(turns: Iterable[Turn]) -> list[Message]:
    messages = []
    for turn in turns:
        if turn.author == "MODEL":
            messages.append(Message("assistant", model_text(turn.content)))
        else:
            messages.append(Message("user", turn_text("user" if turn.author == "USER" else "env", turn.content)))
    return messages


def current_message(situation: Situation) -> Message:
    instruction = situation.instruction
    return Message("user", turn_text(instruction.type, instruction.content, task_state(situation.attributes)))


def commander_messages(situation: Situation, turns: Iterable[Turn] | None = None) -> tuple[Message, ...]:
    history = situation.memory.history if turns is None else turns
    return (system_message(situation), *history_messages(history), current_message(situation))


__all__ = ["commander_messages", "current_message", "format_value", "history_messages", "system_message",
           "task_state"]
