"""Coaching wire models, field for field as magma_core 2.0.1 (`protocol/agent_coaching.py`) defines them.

Strict, extra keys forbidden, NaN refused, like every other wire model: MAGMA-GEN validates our
answers with the originals and abandons a coaching request on the first mismatch. Tests compare
these against the real magma_core models. The only addition is `ReplaceDecision`, the payload
lava proposes for reinjection (the reference agents' `replace_decision`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..protocol import AgentDecision, AgentError, AgentInput, ContractModel, JsonObject

CoachingKind = Literal["failure", "suboptimal", "format"]
COACHING_KINDS: tuple[CoachingKind, ...] = ("failure", "suboptimal", "format")


class CoachingBackendConfig(ContractModel):
    type: str
    endpoint: str
    default_model: str
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    timeout: float = Field(default=30, gt=0)
    max_retry: int = Field(default=3, ge=0)


class CoachingSessionConfig(ContractModel):
    backends: dict[str, CoachingBackendConfig] = Field(default_factory=dict)
    capture_logs: bool = True

    @model_validator(mode="after")
    def validate_backends(self) -> CoachingSessionConfig:
        if not self.backends:
            raise ValueError("LLM coaching requires at least one backend")
        return self


class CoachingStage(ContractModel):
    id: int
    goal: str
    hint: str | None = None


class CoachingError(ContractModel):
    code: str
    description: str
    details: JsonObject = Field(default_factory=dict)


class CoachingDiagnosis(ContractModel):
    explanation: str
    expected_decision: str | None = None


class CoachingStep(ContractModel):
    id: int
    input: AgentInput
    output: AgentDecision | None = None
    error: AgentError | None = None
    internal_steps: list[JsonObject] = Field(default_factory=list)
    execution: JsonObject = Field(default_factory=dict)


class ReinjectionPoint(ContractModel):
    id: str
    input_step_id: int | None = None
    input: AgentInput | None = None

    @model_validator(mode="after")
    def exclusive_input(self) -> ReinjectionPoint:
        if (self.input_step_id is None) == (self.input is None):
            raise ValueError("Provide exactly one input or input_step_id")
        return self


class SpecializedCoachingRequest(ContractModel):
    run_id: str = Field(min_length=1)
    request_id: str = Field(min_length=1)
    kind: CoachingKind
    stage: CoachingStage
    active_errors: list[CoachingError] = Field(default_factory=list)
    diagnosis: CoachingDiagnosis | None = None
    target_step_id: int
    trajectory: list[CoachingStep]
    reinjection_points: list[ReinjectionPoint]
    additional_info: JsonObject = Field(default_factory=dict)

    @model_validator(mode="after")
    def validate_references(self) -> SpecializedCoachingRequest:
        ids = [step.id for step in self.trajectory]
        points = [point.id for point in self.reinjection_points]
        if len(ids) != len(set(ids)) or len(points) != len(set(points)):
            raise ValueError("Step and reinjection point ids must be unique")
        if self.target_step_id not in ids:
            raise ValueError("Target step is absent from trajectory")
        if any(point.input_step_id is not None and point.input_step_id not in ids
               for point in self.reinjection_points):
            raise ValueError("Unknown reinjection input reference")
        return self

    def step(self, step_id: int) -> CoachingStep:
        return next(step for step in self.trajectory if step.id == step_id)

    @property
    def target(self) -> CoachingStep:
        return self.step(self.target_step_id)

    def point_input(self, point: ReinjectionPoint) -> AgentInput:
        """The input a proposal for `point` is reinjected with (GEN copies it, adding the payload)."""
        if point.input is not None:
            return point.input
        assert point.input_step_id is not None  # the model validator guarantees one of the two
        return self.step(point.input_step_id).input


class CoachingProposal(ContractModel):
    reinjection_point_id: str
    extra_keys: JsonObject


class CoachingLog(ContractModel):
    coaching_type: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    content: str


class SpecializedCoachingResponse(ContractModel):
    logs: list[CoachingLog] = Field(default_factory=list)
    request_id: str = Field(min_length=1)
    status: Literal["corrected", "abandoned", "error"]
    proposals: list[CoachingProposal] = Field(default_factory=list)
    reason: str | None = None

    @model_validator(mode="after")
    def validate_status(self) -> SpecializedCoachingResponse:
        if self.status == "corrected":
            if not self.proposals:
                raise ValueError("A correction requires proposals")
        elif self.proposals or not self.reason:
            raise ValueError("Abandon/error requires a reason and no proposals")
        return self

    def validate_request(self, request: SpecializedCoachingRequest) -> None:
        if self.request_id != request.request_id:
            raise ValueError("Coaching request id mismatch")
        allowed = {point.id for point in request.reinjection_points}
        if any(proposal.reinjection_point_id not in allowed for proposal in self.proposals):
            raise ValueError("Unknown reinjection point")


class ReplaceSay(ContractModel):
    kind: Literal["replace_say"] = "replace_say"
    text: str = Field(min_length=1)


class ReplaceDecision(ContractModel):
    """lava's own payload: the whole corrected decision (text or calls)."""

    kind: Literal["replace_decision"] = "replace_decision"
    decision: AgentDecision


__all__ = [
    "COACHING_KINDS",
    "CoachingBackendConfig",
    "CoachingDiagnosis",
    "CoachingError",
    "CoachingKind",
    "CoachingLog",
    "CoachingProposal",
    "CoachingSessionConfig",
    "CoachingStage",
    "CoachingStep",
    "ReinjectionPoint",
    "ReplaceDecision",
    "ReplaceSay",
    "SpecializedCoachingRequest",
    "SpecializedCoachingResponse",
]
