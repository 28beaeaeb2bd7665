"""A `/v1/coaching` request in, a correction (or a reasoned refusal) out.

Where the corrected decision comes from, first that applies:
1. GEN's `diagnosis.expected_decision`, when it states a decision exactly (not prose);
2. for `format`, the rejected raw answer repaired with what the input states (the only robot,
   undeclared arguments dropped, numbers written as text);
3. the session's coaching model, shown the agent's own prompt, its rejected answer and GEN's
   review, constrained to the target input's decision schema, and asked once more with the
   validator's words if its answer still fails.

Whatever the source, a decision is proposed only if it passes `ToolBox.check` against each
reinjection point's own input, and differs from the rejected one; otherwise the answer is
`abandoned` with the reason. A backend that cannot be reached makes the answer `error`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..backends.base import Backend, GenerationRequest, Message
from ..errors import BackendError, InvalidInput
from ..policies.base import model_step, read_decision
from ..prompts import render
from ..protocol import AgentDecision
from ..situation import Situation
from .models import (
    CoachingLog,
    CoachingProposal,
    ReplaceDecision,
    SpecializedCoachingRequest,
    SpecializedCoachingResponse,
)
from .prompt import correction_messages
from .reading import decision_in_text, repaired_answer, toolbox_of
from .sessions import CoachingSession

log = logging.getLogger("lava.coaching")

COACH_COMPONENT = "coach"
Status = Literal["corrected", "abandoned", "error"]


@dataclass(slots=True)
class Correction:
    decision: AgentDecision | None
    source: str
    model_steps: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class CoachingService:
    def __init__(self, *, max_tokens: int = 256, seed: int = 0, attempts: int = 2) -> None:
        self.max_tokens = max_tokens
        self.seed = seed
        self.attempts = attempts

    async def process(self, request: SpecializedCoachingRequest, session: CoachingSession
                      ) -> SpecializedCoachingResponse:
        capture = session.config.capture_logs
        try:
            situation = Situation.read(request.target.input)
        except InvalidInput as problem:
            return _answer(request, "abandoned", capture, reason=(
                f"the target step's input is unusable: {problem.field}: {problem.message}"))
        try:
            correction = await self.correct(request, situation, session)
        except BackendError as error:
            return _answer(request, "error", capture, reason=f"the coaching model failed: {error.message}")
        if correction.decision is None:
            reason = "no valid correction: " + ("; ".join(correction.problems) or "the coaching model gave none")
            return _answer(request, "abandoned", capture, reason=reason, correction=correction)
        proposals = proposals_for(request, correction.decision)
        if not proposals:
            return _answer(request, "abandoned", capture, correction=correction,
                           reason="the corrected decision is not valid at any offered reinjection point")
        return _answer(request, "corrected", capture, proposals=proposals, correction=correction)

    async def correct(self, request: SpecializedCoachingRequest, situation: Situation,
                      session: CoachingSession) -> Correction:
        toolbox = situation.toolbox
        rejected = request.target.output
        diagnosis = request.diagnosis
        if diagnosis is not None and diagnosis.expected_decision:
            decision = decision_in_text(diagnosis.expected_decision, toolbox)
            if decision is not None and decision != rejected:
                return Correction(decision, "the diagnosis's expected decision")
        if request.kind == "format":
            raw = [r["output_raw"] for r in request.target.internal_steps if isinstance(r.get("output_raw"), str)]
            decision = repaired_answer(raw, toolbox)
            if decision is not None:
                return Correction(decision, "the rejected answer, repaired from the input")
        name, backend = session.next_backend()
        return await self.ask(backend, f"the coaching model {name!r} ({backend.model})", request, situation)

    async def ask(self, backend: Backend, source: str, request: SpecializedCoachingRequest,
                  situation: Situation) -> Correction:
        generation = GenerationRequest(
            messages=correction_messages(request, situation), n=1, greedy=True, temperature=0.0,
            max_tokens=self.max_tokens, seed=self.seed, json_schema=situation.toolbox.decision_schema(),
            component=COACH_COMPONENT,
        )
        correction = Correction(None, source)
        elements = {"kind": request.kind, "target_step_id": request.target_step_id}
        for attempt in range(self.attempts):
            (completion,) = await backend.generate(generation)
            parsed = read_decision(completion, situation.toolbox)
            problems = list(parsed.problems)
            if parsed.decision is not None and parsed.decision == request.target.output:
                problems.append("this is the answer that was rejected; give a different decision")
            correction.model_steps.append(model_step(len(correction.model_steps), generation, completion,
                                                     input_elements=elements, parsed=parsed))
            correction.problems = problems
            if parsed.decision is not None and not problems:
                correction.decision = parsed.decision
                return correction
            if attempt + 1 < self.attempts:
                generation = replace(generation, messages=(
                    *generation.messages, Message("assistant", completion.text),
                    Message("user", render("repair.j2", problems="; ".join(problems or ["no decision"]))),
                ), component=f"{COACH_COMPONENT}.repair")
        return correction


def proposals_for(request: SpecializedCoachingRequest, decision: AgentDecision) -> list[CoachingProposal]:
    """One proposal per reinjection point whose own input accepts the decision."""
    payload = ReplaceDecision(decision=decision).model_dump(mode="json")
    proposals = []
    for point in request.reinjection_points:
        point_input = request.point_input(point)
        toolbox = toolbox_of(point_input.tools, point_input.attributes)
        if toolbox is not None and toolbox.check(decision).ok:
            proposals.append(CoachingProposal(reinjection_point_id=point.id, extra_keys=payload))
    return proposals


def _answer(request: SpecializedCoachingRequest, status: Status, capture: bool, *, reason: str | None = None,
            proposals: list[CoachingProposal] | None = None, correction: Correction | None = None
            ) -> SpecializedCoachingResponse:
    logs = [CoachingLog(coaching_type=request.kind, content=_report(request, status, reason, correction))] \
        if capture else []
    if status != "corrected":
        log.info("coaching %s for step %s: %s", status, request.target_step_id, reason)
    return SpecializedCoachingResponse(request_id=request.request_id, status=status, proposals=proposals or [],
                                       reason=reason, logs=logs)


def _report(request: SpecializedCoachingRequest, status: Status, reason: str | None,
            correction: Correction | None) -> str:
    """The Markdown GEN files under `_coaching_logs/`: enough to see why without lava's logs."""
    lines = [f"# lava coaching {status} ({request.kind})", "",
             f"- Run: `{request.run_id}`", f"- Request: `{request.request_id}`",
             f"- Target step: `{request.target_step_id}`"]
    if correction is not None:
        lines.append(f"- Source: {correction.source}")
        if correction.decision is not None:
            lines.append(f"- Decision: `{json.dumps(correction.decision.model_dump(mode='json'), ensure_ascii=False)}`")
    if reason:
        lines += ["", reason]
    for step in correction.model_steps if correction is not None else []:
        lines += ["", f"## Model call {step['id']} ({step['component']})", "", "### Prompt", "", "```text",
                  step["full_prompt"], "```", "", "### Raw output", "", "```text", step["output_raw"], "```"]
    return "\n".join(lines) + "\n"


__all__ = ["COACH_COMPONENT", "CoachingService", "Correction", "proposals_for"]
