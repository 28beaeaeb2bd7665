"""Corrections reinjected through `/v1/responses` (protocol.md §10.5-10.6), applied from the input alone.

MAGMA-GEN resends the input of a coached turn with `extra_keys.coaching` set to a proposal's
payload. The wrapped policy is then not asked: the payload is the decision. Two kinds apply:

- `{"kind": "replace_say", "text": ...}`: core's `ReplaceSay`, from GEN's own text rewrite;
- `{"kind": "replace_decision", "decision": {"say", "tool_calls"}}`: what lava's coach proposes.

The decision goes through the same normalization and validator as a model's answer, the memory
is updated exactly as the policy records a decision of its own, and the one `internal_steps`
record (`origin: "coaching"`) pairs the prompt the policy would have shown with the corrected
answer in lava's answer format: the training row the dataset export turns it into. A payload
that cannot be applied is an `invalid_coaching` error candidate carrying the input memory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from ..backends.base import Completion, GenerationRequest, Message
from ..errors import InvalidCoaching
from ..memory import append_turn
from ..parsing import render_decision
from ..policies.base import CandidateResult, Policy, read_decision
from ..policies.messages import commander_messages
from ..protocol import AgentDecision
from ..situation import Situation
from ..tools import ToolBox
from .models import ReplaceDecision, ReplaceSay

COACHING_KEY = "coaching"
COMPONENT = "commander"


@runtime_checkable
class CoachablePolicy(Protocol):
    """What a policy may provide so a reinjected decision matches its own records; without it,
    the full-history view applies (the commander's messages, `append_turn`)."""

    def coaching_messages(self, situation: Situation) -> Sequence[Message]:
        """The messages the policy's commander would have been shown for this input."""

    def record_decision(self, situation: Situation, decision: AgentDecision,
                        memory: dict[str, Any]) -> dict[str, Any]:
        """`memory` (the candidate's own copy) updated as if the policy had made `decision`."""


def read_correction(payload: Any, toolbox: ToolBox) -> tuple[AgentDecision, list[str]]:
    """The decision a coaching payload states, normalized and validated; `InvalidCoaching` if none."""
    if not isinstance(payload, dict):
        raise InvalidCoaching(f"extra_keys.coaching must be an object, got {type(payload).__name__}",
                              component=COMPONENT)
    kind = payload.get("kind")
    try:
        if kind == "replace_say":
            decision = AgentDecision(say=ReplaceSay.model_validate(payload).text)
        elif kind == "replace_decision":
            decision = ReplaceDecision.model_validate(payload).decision
        else:
            raise InvalidCoaching(f"unknown coaching payload kind {kind!r}; lava applies replace_say and "
                                  "replace_decision", component=COMPONENT)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'payload'}: {e['msg']}"
                             for e in error.errors(include_url=False))
        raise InvalidCoaching(f"invalid {kind} payload: {problems}", component=COMPONENT) from None
    # A model's answer and a correction are held to one standard, the model's normalizations included.
    parsed = read_decision(Completion(text=render_decision(decision)), toolbox)
    if not parsed.ok or parsed.decision is None:
        raise InvalidCoaching("the corrected decision is not valid for this input: " + "; ".join(parsed.problems),
                              component=COMPONENT)
    return parsed.decision, list(parsed.assumptions)


class CoachingReinjection(Policy):
    """Applies `extra_keys.coaching`; every other input goes to the wrapped policy unchanged."""

    def __init__(self, inner: Policy) -> None:
        super().__init__(inner.backend, inner.settings)
        self.inner = inner
        self.name = inner.name

    async def decide(self, situation: Situation, memories: list[dict[str, Any]]) -> list[CandidateResult]:
        payload = situation.input.extra_keys.get(COACHING_KEY)
        if payload is None:
            return await self.inner.decide(situation, memories)
        prompt = GenerationRequest(messages=tuple(self._messages(situation))).prompt_text()
        elements = {"instruction": situation.instruction.model_dump(), COACHING_KEY: payload}
        try:
            decision, assumptions = read_correction(payload, situation.toolbox)
        except InvalidCoaching as error:
            raw = json.dumps(payload, ensure_ascii=False)
            return [CandidateResult.failed(error, [_step(prompt, raw, dict(elements), error=error.message)])
                    for _ in memories]
        results = []
        for memory in memories:
            step = _step(prompt, render_decision(decision), dict(elements), assumptions=list(assumptions),
                         formatted=decision.model_dump(mode="json"))
            results.append(CandidateResult(decision=decision, memory=self._record(situation, decision, memory),
                                           steps=[step]))
        return results

    def _messages(self, situation: Situation) -> Sequence[Message]:
        if isinstance(self.inner, CoachablePolicy):
            return self.inner.coaching_messages(situation)
        return commander_messages(situation)

    def _record(self, situation: Situation, decision: AgentDecision, memory: dict[str, Any]) -> dict[str, Any]:
        if isinstance(self.inner, CoachablePolicy):
            return self.inner.record_decision(situation, decision, memory)
        return append_turn(memory, situation.instruction, decision)


def _step(prompt: str, output_raw: str, elements: dict[str, Any], *, error: str | None = None,
          assumptions: list[str] | None = None, formatted: dict[str, Any] | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"id": "step-0", "component": COMPONENT, "origin": "coaching", "full_prompt": prompt,
                            "input_elements": elements, "output_raw": output_raw}
    if formatted is not None:
        step["output_formatted"] = formatted
    if assumptions:
        step["assumptions"] = assumptions
    if error:
        step["error"] = error
    return step


def applies_coaching(policy: Policy) -> bool:
    return isinstance(policy, CoachingReinjection)


__all__ = ["COACHING_KEY", "CoachablePolicy", "CoachingReinjection", "applies_coaching", "read_correction"]
