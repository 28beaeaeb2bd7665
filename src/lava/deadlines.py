"""The deadline of the work in progress, visible to backends without threading it through every call.

The engine sets it per input; backends read it to size their timeouts and to stop generating
(llama.cpp in a thread cannot be cancelled, but it can be told to stop early).
"""

from __future__ import annotations

import time
from contextvars import ContextVar

_deadline: ContextVar[float | None] = ContextVar("lava_deadline", default=None)


def set_deadline(monotonic_deadline: float | None) -> None:
    _deadline.set(monotonic_deadline)


def deadline() -> float | None:
    """Absolute `time.monotonic()` deadline, or None when unbounded."""
    return _deadline.get()


def remaining(default: float | None = None) -> float | None:
    value = _deadline.get()
    if value is None:
        return default
    return max(0.0, value - time.monotonic())


__all__ = ["deadline", "remaining", "set_deadline"]
