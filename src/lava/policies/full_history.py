"""The full-history policy: the reference agents' approach, done right.

The whole history goes to the model (as the reference agents do), but the answer is constrained
to the input's tools and robots where the backend allows it, read by a tolerant parser, checked
by the validator, and repaired once with the validator's own words before it becomes an
`invalid_output` error candidate.
"""

from __future__ import annotations

from typing import Any

from ..backends.base import Backend
from ..memory import append_turn, decision_record
from ..settings import Settings
from ..situation import Situation
from ..tools import shared_decision_schema
from .base import CandidateResult, Policy
from .commander import Commander
from .messages import commander_messages


class FullHistoryPolicy(Policy):
    name = "full_history"

    def __init__(self, backend: Backend, settings: Settings) -> None:
        super().__init__(backend, settings)
        self.commander = Commander(backend, settings)

    def input_elements(self, situation: Situation) -> dict[str, Any]:
        return {
            "instruction": situation.instruction.model_dump(),
            "history_turns": len(situation.memory.history),
            "rules": list(situation.memory.memory_list),
        }

    async def decide(self, situation: Situation, memories: list[dict[str, Any]]) -> list[CandidateResult]:
        proposals = await self.commander.propose(
            situation, commander_messages(situation), situation.n,
            schema=shared_decision_schema(situation.toolbox), input_elements=self.input_elements(situation),
        )
        results = []
        records: dict[int, str] = {}  # candidates often share one decision: encoded once
        for proposal, memory in zip(proposals, memories, strict=True):
            if proposal.decision is None:
                results.append(CandidateResult.failed(proposal.error, proposal.steps, proposal.usage))
                continue
            record = records.get(id(proposal.decision))
            if record is None:
                record = records[id(proposal.decision)] = decision_record(proposal.decision)
            append_turn(memory, situation.instruction, proposal.decision, record)
            results.append(CandidateResult(decision=proposal.decision, memory=memory, steps=proposal.steps,
                                           usage=proposal.usage))
        return results


__all__ = ["FullHistoryPolicy"]
