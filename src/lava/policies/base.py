"""What every policy shares: the result type, trace records, and turning model text into a decision.

A policy decides all candidates of one input at once (so they can share prompt evaluation and a
summary) but returns one independent `CandidateResult` per candidate. Policies raise
`CandidateError` for failures that hit the whole input; per-candidate failures are results.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import Backend, Completion, GenerationRequest, Usage
from ..errors import CandidateError, InvalidOutput
from ..memory import clone_json
from ..parsing import ParsedDecision, parse_decision
from ..protocol import AgentDecision, ToolCall
from ..settings import Settings
from ..situation import Situation
from ..tools import ToolBox, coerce_arguments


@dataclass(slots=True)
class CandidateResult:
    decision: AgentDecision | None = None
    memory: dict[str, Any] | None = None  # None on error: the engine returns the input memory
    steps: list[dict[str, Any]] = field(default_factory=list)
    error: CandidateError | None = None
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def failed(cls, error: CandidateError, steps: Sequence[dict[str, Any]] = (), usage: Usage | None = None):
        return cls(error=error, steps=list(steps), usage=usage or Usage())


def model_step(
    index: int,
    request: GenerationRequest,
    completion: Completion | None,
    *,
    input_elements: dict[str, Any],
    origin: str = "model",
    error: str | None = None,
    parsed: ParsedDecision | None = None,
    prompt_text: str | None = None,
) -> dict[str, Any]:
    """One `internal_steps` record: the faithful prompt and raw output of one model call.
    `prompt_text`: `request.prompt_text()` when the caller has it already (n candidates, one prompt)."""
    if completion and completion.prompt:
        prompt_text = completion.prompt
    step: dict[str, Any] = {
        "id": f"step-{index}",
        "component": request.component,
        "origin": origin,
        "full_prompt": prompt_text if prompt_text is not None else request.prompt_text(),
        "input_elements": input_elements,
        "output_raw": completion.text if completion else "",
    }
    if completion is not None:
        step.update(
            total_input_tokens=completion.usage.input_tokens,
            total_output_tokens=completion.usage.output_tokens,
            total_cached_tokens=completion.usage.cached_tokens,
            duration_s=round(completion.duration_s, 4),
            retries=completion.retries,
        )
    if parsed is not None:
        if parsed.decision is not None:
            step["output_formatted"] = decision_json(parsed.decision)
        if parsed.assumptions:
            step["assumptions"] = list(parsed.assumptions)
        if parsed.problems:
            step["problems"] = list(parsed.problems)
    if error:
        step["error"] = error
    return step


def decision_json(decision: AgentDecision) -> dict[str, Any]:
    """`decision.model_dump(mode="json")` for a validated decision, built directly: its fields are
    JSON already (validation saw to that), so the dump is a copy in field order; pydantic's
    serializer costs about twice as much, once per model step (tests/test_fast_paths.py)."""
    return {"say": decision.say, "tool_calls": [
        {"name": call.name, "arguments": clone_json(call.arguments), "target_robot_name": call.target_robot_name}
        for call in decision.tool_calls]}


_TEXT_REPLACEMENTS = str.maketrans({"{": "(", "}": ")", "<": "(", ">": ")"})


def read_decision(completion: Completion, toolbox: ToolBox) -> ParsedDecision:
    """Parse, apply lossless normalizations, then validate. `parsed.problems` empty means usable."""
    parsed = parse_decision(
        completion.text, robots=toolbox.robots, native_calls=completion.native_calls
    )
    decision = parsed.decision
    if decision is None:
        return parsed
    say, calls = decision.say, list(decision.tool_calls)
    if say and calls:
        # MAGMA-BENCH executes the calls of such an answer and drops the text; do the same, openly.
        parsed.assumptions.append("text dropped: an answer with tool calls carries no text")
        say = ""
    if say and any(ch in say for ch in "{}<>"):
        parsed.assumptions.append("braces and angle brackets in the text replaced by parentheses")
        say = say.translate(_TEXT_REPLACEMENTS)
    first_per_robot: dict[str, ToolCall] = {}
    for call in calls:
        first_per_robot.setdefault(call.target_robot_name, call)
    if len(first_per_robot) < len(calls):
        # A robot runs one call per decision; its later calls are the plan's next steps, asked again next turn.
        parsed.assumptions.append("only the first call of each robot kept (one call per robot per decision)")
        calls = list(first_per_robot.values())
    wire_calls = []  # straight to the wire shape the validator reads: no intermediate models
    for call in calls:
        tool = toolbox.get(call.name)
        arguments = coerce_arguments(tool, call.arguments) if tool else call.arguments
        wire_calls.append({"name": call.name, "arguments": arguments, "target_robot_name": call.target_robot_name})
    try:
        parsed.decision = AgentDecision.model_validate({"say": say, "tool_calls": wire_calls})
    except ValueError as exc:  # empty names, non-finite numbers: not a decision the wire accepts
        parsed.problems.append(f"the answer is not a valid decision: {exc}")
        parsed.decision = None
        return parsed
    parsed.problems.extend(toolbox.check(parsed.decision).problems)
    return parsed


class Policy(abc.ABC):
    name: str = "policy"

    def __init__(self, backend: Backend, settings: Settings) -> None:
        self.backend = backend
        self.settings = settings

    @abc.abstractmethod
    async def decide(self, situation: Situation, memories: list[dict[str, Any]]) -> list[CandidateResult]:
        """One result per candidate; `memories[k]` is candidate k's own copy to update and return."""


def elapsed(start: float) -> float:
    return time.perf_counter() - start


__all__ = ["CandidateResult", "InvalidOutput", "Policy", "elapsed", "model_step", "read_decision"]
