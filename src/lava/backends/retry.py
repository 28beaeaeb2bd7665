"""Retries for remote backends: transient failures only, backoff with jitter, bounded by the deadline.

Each backend maps its SDK's exceptions to a `Failure` (is it worth retrying, how long the server
asked us to wait, and the lava error to raise in the end), so this module never looks at
messages or SDK types. The SDKs' own retries are turned off: this is the one layer that owns them,
and it stops at the request's deadline instead of stacking retries past it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from ..deadlines import remaining
from ..errors import BackendError, BackendTimeout

T = TypeVar("T")

MAX_RETRY_AFTER_S = 30.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    call_timeout_s: float = 120.0


class Failure(Exception):
    """A classified backend failure; `error` is what the caller sees if retries run out."""

    def __init__(self, error: BackendError, *, transient: bool, retry_after_s: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.transient = transient
        self.retry_after_s = retry_after_s


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def call_timeout(policy: RetryPolicy) -> float:
    """Seconds one attempt may take: the configured timeout, cut to what the deadline leaves."""
    left = remaining()
    return policy.call_timeout_s if left is None else max(0.05, min(policy.call_timeout_s, left))


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    classify: Callable[[Exception], Failure],
    policy: RetryPolicy,
) -> tuple[T, int]:
    """Run `attempt` until it succeeds or a failure is permanent; returns (result, retries used)."""

    def wait(state: RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome else None
        if state.attempt_number >= policy.attempts:
            # tenacity asks for the wait before it checks `stop`: no retry follows the last attempt, so
            # the deadline must not turn its failure into a timeout.
            return 0.0
        backoff = min(policy.max_delay_s, policy.base_delay_s * 2 ** (state.attempt_number - 1))
        delay = backoff * (0.5 + random.random() / 2)  # jitter: replicas must not retry in lockstep
        if isinstance(failure, Failure) and failure.retry_after_s is not None:
            delay = max(delay, min(failure.retry_after_s, MAX_RETRY_AFTER_S))
        left = remaining()
        if left is not None and delay >= left:
            raise BackendTimeout(
                f"gave up after {state.attempt_number} attempts: the deadline leaves {left:.1f} s, the next "
                f"retry would wait {delay:.1f} s; last error: {failure}",
                component=failure.error.component if isinstance(failure, Failure) else None,
            )
        return delay

    async def classified() -> T:
        try:
            return await attempt()
        except Failure:
            raise
        except Exception as exc:
            raise classify(exc) from exc

    retries = -1
    try:
        async for state in AsyncRetrying(
            stop=stop_after_attempt(policy.attempts),
            wait=wait,
            retry=retry_if_exception(lambda exc: isinstance(exc, Failure) and exc.transient),
            reraise=True,
        ):
            with state:
                retries += 1
                result = await classified()
        return result, retries
    except Failure as failure:
        raise failure.error from failure


__all__ = ["Failure", "RetryPolicy", "call_timeout", "parse_retry_after", "with_retries"]
