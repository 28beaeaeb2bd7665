"""The coaching model's prompt: the agent's own view of the turn, its rejected answer, and the review.

Starting from exactly what the commander saw (system message, history, current turn) keeps the
coach's answer in lava's answer format and its decision grounded in the same state; the review
then says what GEN found wrong, with privileged facts the agent could not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..backends.base import Message
from ..parsing import render_decision
from ..policies.messages import commander_messages
from ..situation import Situation
from .models import CoachingStep, SpecializedCoachingRequest

_PROBLEM = {
    "failure": "That answer led to the failure of the current goal.",
    "suboptimal": "That answer works, but it is not the most direct way to reach the current goal.",
    "format": "That answer could not be used at all.",
}


def rejected_answer(step: CoachingStep) -> str | None:
    """What the agent answered at the target step: its decision, else its latest raw model output."""
    if step.output is not None:
        return render_decision(step.output)
    for record in reversed(step.internal_steps):
        raw = record.get("output_raw")
        if isinstance(raw, str) and raw.strip():
            return raw
    return None


def review(request: SpecializedCoachingRequest) -> str:
    target = request.target
    lines = [_PROBLEM[request.kind]]
    if target.error is not None:
        lines.append(f"It was refused because: {target.error.message}")
    results = _execution_results(target.execution)
    if results:
        lines += ["What the robots reported:", *results]
    if request.diagnosis is not None:
        lines.append(f"Reviewer's diagnosis: {request.diagnosis.explanation.strip()}")
        if request.diagnosis.expected_decision:
            lines.append(f"What the reviewer expected instead: {request.diagnosis.expected_decision.strip()}")
    lines.append(f"Goal of the current stage: {request.stage.goal.strip()}")
    if request.stage.hint:
        lines.append(f"Hint: {request.stage.hint.strip()}")
    if request.active_errors:
        lines.append("Problems in the environment you could not know about:")
        lines += [f"- {error.description.strip()}" for error in request.active_errors]
    lines.append("Answer again for the same turn with the corrected decision, as exactly one JSON object: "
                 '{"tool_calls": [...]} using only the listed robots, tools and arguments, or {"say": "..."}.')
    return "\n".join(lines)


def _execution_results(execution: Mapping[str, Any]) -> list[str]:
    results = execution.get("execution_results")
    if not isinstance(results, list):
        return []
    lines = []
    for result in results:
        if not isinstance(result, Mapping):
            continue
        outcome = "succeeded" if result.get("result") else "failed"
        flag = result.get("error_flag")
        detail = f" ({flag})" if isinstance(flag, str) and flag not in ("", "none") else ""
        lines.append(f"- {result.get('robot')}: {result.get('tool')} {outcome}{detail}: {result.get('message', '')}")
    return lines


def correction_messages(request: SpecializedCoachingRequest, situation: Situation) -> tuple[Message, ...]:
    messages = list(commander_messages(situation))
    rejected = rejected_answer(request.target)
    if rejected is not None:
        messages.append(Message("assistant", rejected))
    messages.append(Message("user", review(request)))
    return tuple(messages)


__all__ = ["correction_messages", "rejected_answer", "review"]
