"""The commander: ask the model for n decisions, read them, repair once, and trace every call.

Shared by every policy: policies decide *what* to ask (messages, schema); the commander owns
*how* (one prompt evaluation for all candidates, the tolerant parser, the validator, one bounded
repair with the validator's own words, an `internal_steps` record per model call).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..backends.base import Backend, Completion, GenerationRequest, Message, Usage
from ..errors import CandidateError, InvalidOutput
from ..parsing import ParsedDecision
from ..prompts import render
from ..protocol import AgentDecision
from ..settings import Settings
from ..situation import Situation
from .base import model_step, read_decision


@dataclass(slots=True)
class Proposal:
    """One candidate's outcome of a commander call."""

    decision: AgentDecision | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    error: CandidateError | None = None
    raw: str = ""


def _read_once(completion: Completion, situation: Situation, read: dict[str, ParsedDecision]) -> ParsedDecision:
    """`read_decision`, once per distinct answer text of one call: greedy decoding and deterministic
    backends give every candidate the same text. Candidates then share the decision, which nothing
    mutates (outputs, steps and memories are made from it, never into it), but each gets its own
    lists of problems and assumptions."""
    if completion.native_calls:
        return read_decision(completion, situation.toolbox)
    first = read.get(completion.text)
    if first is None:
        first = read[completion.text] = read_decision(completion, situation.toolbox)
        return first
    return ParsedDecision(first.raw, first.decision, list(first.problems), list(first.assumptions))


class Commander:
    def __init__(self, backend: Backend, settings: Settings, component: str = "commander") -> None:
        self.backend = backend
        self.settings = settings
        self.component = component

    def request(self, situation: Situation, messages: Sequence[Message], n: int,
                schema: Mapping[str, Any] | None, *, max_tokens: int | None = None,
                sample: bool = False) -> GenerationRequest:
        return GenerationRequest(
            messages=tuple(messages),
            n=n,
            greedy=situation.greedy and not sample,
            temperature=self.settings.temperature,
            max_tokens=max_tokens or self.settings.max_tokens,
            seed=self.settings.seed,
            json_schema=schema,
            situation=situation,
            component=self.component,
        )

    async def propose(
        self,
        situation: Situation,
        messages: Sequence[Message],
        n: int,
        *,
        schema: Mapping[str, Any] | None,
        input_elements: dict[str, Any],
        first_step: int = 0,
        seed_offset: int = 0,
        sample: bool = False,
    ) -> list[Proposal]:
        request = self.request(situation, messages, n, schema, sample=sample)
        if seed_offset and request.seed is not None:
            request = replace(request, seed=request.seed + seed_offset)
        started = time.perf_counter()
        completions = await self.backend.generate(request)
        if len(completions) != n:
            raise InvalidOutput(f"the backend returned {len(completions)} answers for {n} candidates",
                                component=self.component)
        took = time.perf_counter() - started
        # Backends that do not time themselves (scripted, remote ones without server timings)
        # still get the call's wall time, so traces and the model-call histogram never read 0 s.
        completions = [c if c.duration_s else replace(c, duration_s=took) for c in completions]
        proposals: list[Proposal | None] = []
        repairs = []
        read: dict[str, ParsedDecision] = {}
        prompt_text: str | None = None  # joined once for every candidate's step
        for k, completion in enumerate(completions):
            parsed = _read_once(completion, situation, read)
            if parsed.ok and parsed.decision is not None:
                if prompt_text is None and not completion.prompt:
                    prompt_text = request.prompt_text()
                step = model_step(first_step, request, completion, input_elements=input_elements, parsed=parsed,
                                  prompt_text=prompt_text)
                proposals.append(Proposal(parsed.decision, [step], completion.usage, None, completion.text))
            else:  # only answers that need a repair call wait on the model again
                proposals.append(None)
                repairs.append((k, self._finish(situation, request, completion, parsed, k, input_elements,
                                                first_step)))
        if repairs:
            repaired = await asyncio.gather(*(repair for _, repair in repairs))
            for (k, _), proposal in zip(repairs, repaired, strict=True):
                proposals[k] = proposal
        return [proposal for proposal in proposals if proposal is not None]

    async def _finish(self, situation: Situation, request: GenerationRequest, completion: Completion,
                      parsed: ParsedDecision, candidate: int, elements: dict[str, Any], first_step: int
                      ) -> Proposal:
        steps = [model_step(first_step, request, completion, input_elements=elements, parsed=parsed)]
        usage = completion.usage
        for attempt in range(self.settings.repair_attempts):
            if parsed.ok:
                break
            try:
                repair, completion, parsed = await self._repair(situation, request, completion, parsed,
                                                                candidate, attempt)
            except CandidateError as error:
                return Proposal(None, steps, usage, error, completion.text)
            steps.append(model_step(first_step + len(steps), repair, completion, input_elements=elements,
                                    parsed=parsed))
            usage = usage + completion.usage
        if not parsed.ok or parsed.decision is None:
            message = "; ".join(parsed.problems) or "the model gave no decision"
            return Proposal(None, steps, usage, InvalidOutput(message, component=self.component), completion.text)
        return Proposal(parsed.decision, steps, usage, None, completion.text)

    async def _repair(self, situation: Situation, request: GenerationRequest, completion: Completion,
                      parsed: ParsedDecision, candidate: int, attempt: int
                      ) -> tuple[GenerationRequest, Completion, ParsedDecision]:
        """Ask once more, quoting the validator: the model sees its own answer and what was wrong."""
        messages = (
            *request.messages,
            Message("assistant", completion.text),
            Message("user", render("repair.j2", problems="; ".join(parsed.problems))),
        )
        seed = None if request.seed is None else request.seed + 1000 * (attempt + 1) + candidate
        repair = replace(request, messages=messages, n=1, seed=seed, component=f"{self.component}.repair")
        started = time.perf_counter()
        (repaired,) = await self.backend.generate(repair)
        if not repaired.duration_s:
            repaired = replace(repaired, duration_s=time.perf_counter() - started)
        return repair, repaired, read_decision(repaired, situation.toolbox)


__all__ = ["Commander", "Proposal"]
