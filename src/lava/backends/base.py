"""The one interface between lava and a model: `Backend.generate`.

A backend takes a chat prompt and returns `n` completions of it. Everything a policy needs to
know about what the backend can do is in its `Capabilities`, so policies never branch on a
backend's class or name. Keeping the interface this small is what lets one policy run on
llama.cpp in process, vLLM, Ollama, OpenAI or Gemini alike.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..parsing import NativeCall

if TYPE_CHECKING:
    from ..situation import Situation

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do, stated once, so callers pick the best strategy without guessing."""

    # One call returns n samples sharing one prompt evaluation (else the backend fans out itself).
    shares_prompt_across_n: bool = False
    # Output can be constrained to a JSON schema (grammar or structured outputs).
    json_schema: bool = False
    # The server returns native tool calls when given function schemas.
    native_tools: bool = False
    # Greedy decoding is reproducible across calls (same prompt, same answer).
    deterministic_greedy: bool = True
    # Another seed can give another sample (false for a backend that answers by rule): drawing
    # again for variety is only worth a call when it is true.
    varies_with_seed: bool = True
    max_context_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.requests + other.requests,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "requests": self.requests,
        }


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    messages: tuple[Message, ...]
    n: int = 1
    greedy: bool = False
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 256
    seed: int | None = None
    # Constrain the answer to this schema where the backend can; otherwise it is a hint only.
    json_schema: Mapping[str, Any] | None = None
    # OpenAI-style function schemas for backends that call tools natively.
    tools: tuple[Mapping[str, Any], ...] = ()
    # The structured situation behind the prompt. Real models never see it; scripted and
    # function backends decide from it, which is what makes them useful as fakes.
    situation: Situation | None = None
    component: str = "commander"

    def prompt_text(self) -> str:
        """The prompt as one faithful string, for traces and training exports."""
        return "\n\n".join([f"<|{m.role}|>\n{m.content}" for m in self.messages])


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    native_calls: tuple[NativeCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    retries: int = 0
    duration_s: float = 0.0
    # The exact text the model read, when the backend renders the chat template itself.
    prompt: str | None = None


class Backend(abc.ABC):
    """Subclasses set `name` and `capabilities` and implement `generate`."""

    name: str = "backend"
    capabilities: Capabilities = Capabilities()
    model: str = ""

    async def start(self) -> None:  # noqa: B027 (optional hook)
        """Load weights or open clients. Remote backends must not fail here when unreachable."""

    @property
    def ready(self) -> bool:
        return True

    @abc.abstractmethod
    async def generate(self, request: GenerationRequest) -> Sequence[Completion]:
        """Return exactly `request.n` completions, or raise a `BackendError`."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Release what `start` acquired."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model}


__all__ = ["Backend", "Capabilities", "Completion", "GenerationRequest", "Message", "Usage"]
