"""The full-history policy: the reference agents' approach, done right.

The whole history goes to the model (as the reference agents do), but the answer is constrained
to the input's tools and robots where the backend allows it, read by a tolerant parser, checked
by the validator, and repaired once with the validator's own words before it becomes an
`invalid_output` error candidate.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from ..backends.base import Completion, GenerationRequest, Message
from ..errors import CandidateError, InvalidOutput
from ..memory import append_turn
from ..parsing import ParsedDecision
from ..prompts import render
from ..situation import Situation
from .base import CandidateResult, Policy, model_step, read_decision
from .messages import commander_messages

COMPONENT = "commander"


class FullHistoryPolicy(Policy):
    name = "full_history"

    def request(self, situation: Situation, messages: tuple[Message, ...], n: int) -> GenerationRequest:
        return GenerationRequest(
            messages=messages,
            n=n,
            greedy=situation.greedy,
            temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens,
            seed=self.settings.seed,
            json_schema=situation.toolbox.decision_schema(),
            situation=situation,
            component=COMPONENT,
        )

    def input_elements(self, situation: Situation) -> dict[str, Any]:
        return {
            "instruction": situation.instruction.model_dump(),
            "history_turns": len(situation.memory.history),
            "rules": list(situation.memory.memory_list),
        }

    async def decide(self, situation: Situation, memories: list[dict[str, Any]]) -> list[CandidateResult]:
        request = self.request(situation, commander_messages(situation), situation.n)
        completions = await self.backend.generate(request)
        if len(completions) != situation.n:
            raise InvalidOutput(
                f"the backend returned {len(completions)} answers for {situation.n} candidates", component=COMPONENT
            )
        return list(
            await asyncio.gather(
                *(self.finish(situation, request, c, k, memories[k]) for k, c in enumerate(completions))
            )
        )

    async def finish(
        self,
        situation: Situation,
        request: GenerationRequest,
        completion: Completion,
        candidate: int,
        memory: dict[str, Any],
    ) -> CandidateResult:
        elements = self.input_elements(situation)
        parsed = read_decision(completion, situation.toolbox)
        steps = [model_step(0, request, completion, input_elements=elements, parsed=parsed)]
        usage = completion.usage
        for attempt in range(self.settings.repair_attempts):
            if parsed.ok:
                break
            try:
                repair, repaired, parsed = await self.repair(
                    situation, request, completion, parsed, candidate, attempt
                )
            except CandidateError as error:
                return CandidateResult.failed(error, steps, usage)
            steps.append(model_step(len(steps), repair, repaired, input_elements=elements, parsed=parsed))
            usage = usage + repaired.usage
            completion = repaired
        if not parsed.ok or parsed.decision is None:
            message = "; ".join(parsed.problems) or "the model gave no decision"
            return CandidateResult.failed(InvalidOutput(message, component=COMPONENT), steps, usage)
        append_turn(memory, situation.instruction, parsed.decision)
        return CandidateResult(decision=parsed.decision, memory=memory, steps=steps, usage=usage)

    async def repair(
        self,
        situation: Situation,
        request: GenerationRequest,
        completion: Completion,
        parsed: ParsedDecision,
        candidate: int,
        attempt: int,
    ) -> tuple[GenerationRequest, Completion, ParsedDecision]:
        """Ask once more, quoting the validator; the model sees its own answer and what was wrong."""
        messages = (
            *request.messages,
            Message("assistant", completion.text),
            Message("user", render("repair.j2", problems="; ".join(parsed.problems))),
        )
        seed = None if request.seed is None else request.seed + 1000 * (attempt + 1) + candidate
        repair = replace(request, messages=messages, n=1, seed=seed, component=f"{COMPONENT}.repair")
        started = time.perf_counter()
        (repaired,) = await self.backend.generate(repair)
        if not repaired.duration_s:
            repaired = replace(repaired, duration_s=time.perf_counter() - started)
        return repair, repaired, read_decision(repaired, situation.toolbox)


__all__ = ["FullHistoryPolicy"]
