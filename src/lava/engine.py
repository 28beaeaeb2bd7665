"""The request engine: inputs x candidates fanned out, isolated, ordered, and answered in time.

Guarantees, whatever the policy or backend does:
- one output per (input, candidate), in input order then candidate order;
- every candidate works on its own deep copy of the input memory;
- a failure (exception, timeout, invalid decision) becomes that candidate's error output,
  carrying the input memory unchanged; other candidates and inputs are unaffected;
- every completed decision passed the validator against its input's tools and robots;
- the request finishes before its deadline, with deadline errors for what did not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .deadlines import set_deadline
from .errors import CandidateError, DeadlineExceeded, InvalidInput, InvalidOutput
from .logs import source_id_var
from .memory import json_copies
from .metrics import Metrics
from .policies import CandidateResult, Policy
from .protocol import AgentRequest
from .situation import Situation
from .tools import DecisionCheck

if TYPE_CHECKING:
    from .telemetry import Tracing

log = logging.getLogger("lava.engine")

Output = dict[str, Any]
MAX_ERROR_MESSAGE = 2000


@dataclass(frozen=True, slots=True)
class EngineLimits:
    max_concurrency: int = 16
    deadline_s: float = 300.0
    max_candidates: int = 1024
    max_history_entries: int = 20_000


class RequestDeadline:
    """One timer for a whole request, where an `asyncio.timeout_at` per input would set (and then
    cancel) one each. It acts as those would: once the deadline has passed, every input still
    deciding is cancelled at its next wait, and only those, and `Engine._decide_in_time` turns
    that cancellation into the input's deadline error; inputs that finished are not touched, and
    a cancellation from elsewhere (the client went away, shutdown) still propagates."""

    __slots__ = ("_timer", "cut", "deciding", "expired", "when")

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self.when = when
        self.expired = False
        self.deciding: set[asyncio.Task[Any]] = set()  # each suspended inside its decision
        self.cut: set[asyncio.Task[Any]] = set()  # the ones this deadline cancelled
        self._timer = loop.call_at(when, self._expire)

    def enter(self, task: asyncio.Task[Any]) -> None:
        self.deciding.add(task)
        if self.expired:  # it started after the timer fired: cancelled at its first wait, as a timeout would
            task.get_loop().call_soon(self._cancel, task)

    def leave(self, task: asyncio.Task[Any]) -> None:
        self.deciding.discard(task)

    def _cancel(self, task: asyncio.Task[Any]) -> None:
        if task in self.deciding:
            self.cut.add(task)
            task.cancel()

    def _expire(self) -> None:
        self.expired = True
        self.cut.update(self.deciding)
        for task in self.deciding:
            task.cancel()

    def close(self) -> None:
        self._timer.cancel()


def read_situations(request: AgentRequest, limits: EngineLimits) -> list[Situation]:
    """Validate every input before any work: one bad field fails the request with a 422."""
    total = sum(entry.num_outputs for entry in request.inputs)
    if total > limits.max_candidates:
        raise InvalidInput(
            ("inputs",),
            f"the request asks for {total} candidates in all; this server answers at most "
            f"{limits.max_candidates} per request (setting max_candidates)",
        )
    situations = []
    for index, entry in enumerate(request.inputs):
        history = entry.memory.get("history")
        if isinstance(history, list) and len(history) > limits.max_history_entries:
            raise InvalidInput(
                ("inputs", index, "memory", "history"),
                f"the history has {len(history)} entries; this server reads at most "
                f"{limits.max_history_entries} (setting max_history_entries)",
            )
        try:
            situations.append(Situation.read(entry))
        except InvalidInput as problem:
            raise problem.at("inputs", index) from None
    return situations


class Engine:
    def __init__(self, policy: Policy, limits: EngineLimits | None = None, metrics: Metrics | None = None,
                 tracing: Tracing | None = None) -> None:
        self.policy = policy
        self.limits = limits or EngineLimits()
        self.metrics = metrics
        self.tracing = tracing
        self._slots = asyncio.Semaphore(self.limits.max_concurrency)

    async def respond(self, request: AgentRequest) -> list[Output]:
        situations = read_situations(request, self.limits)
        if not situations:
            return []
        loop = asyncio.get_running_loop()
        # asyncio's clock is time.monotonic(), which the deadline context variable also uses.
        deadline = RequestDeadline(loop, loop.time() + self.limits.deadline_s)
        try:
            answers = await asyncio.gather(*(self._answer(request.request_id, s, deadline) for s in situations))
        finally:
            deadline.close()
        outputs = [output for answer in answers for output in answer]
        if self.metrics is not None:
            self.metrics.observe_candidates(outputs)
        return outputs

    async def _answer(self, request_id: str, situation: Situation, deadline: RequestDeadline) -> list[Output]:
        n = situation.n
        memories = json_copies(situation.input.memory, n)
        started = time.perf_counter()
        # This task's own context: backends size their timeouts from the deadline, and every
        # record logged while deciding this input names it.
        set_deadline(deadline.when)
        source_id_var.set(situation.input.id)
        tracing = self.tracing
        span = tracing.start_decision(request_id, situation, self.policy.name) if tracing is not None else None
        if self.metrics is not None:
            self.metrics.inputs_in_flight += 1
        outputs: list[Output] = []
        try:
            results = await self._decide(situation, deadline, memories)
            # Built here rather than by the caller so the decision's span ends with final statuses.
            checks: dict[int, DecisionCheck] = {}  # candidates often share one decision: validated once
            outputs = [self._output(request_id, situation, index, result, checks)
                       for index, result in enumerate(results)]
            return outputs
        finally:
            if self.metrics is not None:
                self.metrics.inputs_in_flight -= 1
                self.metrics.decision_seconds.observe(time.perf_counter() - started)
            if tracing is not None and span is not None:
                tracing.end_decision(span, outputs)

    async def _decide(self, situation: Situation, deadline: RequestDeadline, memories: list[dict[str, Any]]
                      ) -> Sequence[CandidateResult]:
        n = situation.n
        try:
            results = await self._decide_in_time(situation, deadline, memories)
        except TimeoutError:
            seconds = self.limits.deadline_s
            error: CandidateError = DeadlineExceeded(
                f"no decision within the request deadline of {seconds:g} s", component=self.policy.name
            )
            return [CandidateResult.failed(error) for _ in range(n)]
        except CandidateError as error:
            return [CandidateResult.failed(error) for _ in range(n)]
        except Exception as exc:  # a bug must cost one input, never the request
            log.exception("policy %s failed on input %s", self.policy.name, situation.input.id)
            error = CandidateError(f"internal error: {type(exc).__name__}: {exc}", component=self.policy.name)
            return [CandidateResult.failed(error) for _ in range(n)]
        if len(results) != n:
            error = InvalidOutput(
                f"policy returned {len(results)} results for {n} candidates", component=self.policy.name
            )
            return [CandidateResult.failed(error) for _ in range(n)]
        return results

    async def _decide_in_time(self, situation: Situation, deadline: RequestDeadline, memories: list[dict[str, Any]]
                              ) -> Sequence[CandidateResult]:
        """The policy's decision, or TimeoutError when the request deadline cancelled it: what
        `async with asyncio.timeout_at(deadline.when)` does, on the request's one timer."""
        task = asyncio.current_task()
        assert task is not None  # each input is decided in its own task (respond's gather)
        cancelling = task.cancelling()
        deadline.enter(task)
        try:
            async with self._slots:
                return await self.policy.decide(situation, memories)
        except asyncio.CancelledError:
            # Only the deadline's own cancellation becomes a timeout (asyncio.timeout's rule:
            # when another one is pending too, the task is being cancelled and must end so).
            if task in deadline.cut and task.uncancel() <= cancelling:
                raise TimeoutError from None
            raise
        finally:
            deadline.leave(task)

    def _output(self, request_id: str, situation: Situation, index: int, result: CandidateResult,
                checks: dict[int, DecisionCheck]) -> Output:
        if result.error is None and result.decision is not None and result.memory is not None:
            # Keyed by identity: every result (so every decision) lives until the outputs are made.
            check = checks.get(id(result.decision))
            if check is None:
                check = checks[id(result.decision)] = situation.toolbox.check(result.decision)
            if check.ok:
                return {
                    "request_id": request_id,
                    "source_id": situation.input.id,
                    "candidate_index": index,
                    "status": "completed",
                    "memory": result.memory,
                    "internal_steps": result.steps,
                    "output": result.decision.model_dump(mode="json"),
                    "error": None,
                }
            result.error = InvalidOutput(check.message(), component=self.policy.name)
        error = result.error or InvalidOutput("the policy produced no decision", component=self.policy.name)
        return {
            "request_id": request_id,
            "source_id": situation.input.id,
            "candidate_index": index,
            "status": "error",
            # The input memory, untouched: consumers continue (or coach) from it.
            "memory": situation.input.memory,
            "internal_steps": result.steps,
            "output": None,
            "error": {
                "code": error.code,
                "message": (error.message or error.code)[:MAX_ERROR_MESSAGE],
                "component": error.component,
            },
        }


__all__ = ["Engine", "EngineLimits", "Output", "read_situations"]
