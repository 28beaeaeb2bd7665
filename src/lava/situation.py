"""One input, read and validated once: what a policy decides from.

The engine builds a `Situation` for every input before any model work starts, so a malformed
field (memory, tools, robots, options) fails the whole request with a 422 naming it, instead of
failing halfway through a batch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidInput
from .jsontext import json_text
from .memory import MemoryView
from .protocol import AgentInput, AgentInstruction
from .tools import ToolBox


@dataclass(frozen=True, slots=True)
class Feedback:
    """Environment feedback, parsed from the JSON string MAGMA sends as an `env` instruction."""

    infos: str = ""
    failure_reason: str = ""
    error: str = ""
    previous_calls: Mapping[str, Any] | None = None
    raw: str = ""

    @classmethod
    def parse(cls, content: str) -> Feedback:
        try:
            data = json.loads(content)
        except ValueError:
            return cls(infos=content, raw=content)
        if not isinstance(data, dict):
            return cls(infos=content, raw=content)

        def text(key: str) -> str:
            value = data.get(key)
            if value is None:
                return ""
            return value if isinstance(value, str) else json_text(value)

        previous = data.get("previous_tool_call")
        return cls(
            infos=text("infos"),
            failure_reason=text("failure_reason"),
            error=text("error"),
            previous_calls=previous if isinstance(previous, dict) else None,
            raw=content,
        )

    def lines(self) -> list[str]:
        return [line for line in self.infos.splitlines() if line.strip()]

    @property
    def failed(self) -> bool:
        return bool(self.error or self.failure_reason) or any(" failed with message" in x for x in self.lines())

    def render(self) -> str:
        """The human-readable part, as the reference agents show it (no `previous_tool_call`)."""
        parts = list(self.lines())
        if self.error:
            parts.append(f"Error: {self.error}")
        if self.failure_reason:
            parts.append(f"Failure reason: {self.failure_reason}")
        return "\n".join(parts) if parts else "The action has completed."


@dataclass(frozen=True, slots=True)
class Situation:
    input: AgentInput
    toolbox: ToolBox
    memory: MemoryView
    greedy: bool
    feedback: Feedback | None

    @property
    def instruction(self) -> AgentInstruction:
        return self.input.instruction

    @property
    def attributes(self) -> Mapping[str, Any]:
        return self.input.attributes

    @property
    def n(self) -> int:
        return self.input.num_outputs

    @property
    def coaching(self) -> Any:
        return self.input.extra_keys.get("coaching")

    @classmethod
    def read(cls, agent_input: AgentInput) -> Situation:
        """Validate lava-specific fields; InvalidInput locations are relative to the input."""
        mode = agent_input.extra_keys.get("inference_mode", False)
        if not isinstance(mode, bool):
            raise InvalidInput(("extra_keys", "inference_mode"), "inference_mode must be a boolean")
        toolbox = ToolBox.from_input(agent_input.tools, agent_input.attributes)
        memory = MemoryView.parse(agent_input.memory)
        instruction = agent_input.instruction
        feedback = Feedback.parse(instruction.content) if instruction.type == "env" else None
        return cls(agent_input, toolbox, memory, mode, feedback)


__all__ = ["Feedback", "Situation"]
