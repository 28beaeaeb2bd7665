"""Coaching sessions: the one piece of server state the protocol allows, and configuration only.

A session is keyed by GEN's `run_id` and holds the backends GEN supplied, opened and probed
once. It never holds interaction history: every coaching request carries its whole trajectory,
and every correction travels back through `/v1/responses` inside the input.

Semantics (those of magma_core's reference helper, `workers/coaching_sessions.py`):
- configure: a new run id opens and probes every backend (`BackendsUnreachable` if one does
  not answer, `InvalidInput` naming the field if one cannot be used at all, checked before any
  is contacted); the identical configuration again is a no-op; a different one, or a session
  being closed, is a `SessionConflict`;
- acquire: a request holds the session while it runs; an unknown or closing run id is
  `UnknownSession`;
- close: waits for the requests holding the session, closes its backends, forgets it; an
  unknown run id is fine (DELETE is idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from ..backends.base import Backend
from ..errors import InvalidInput
from .clients import UnreachableBackend, UnusableBackend, open_backend, probe, usable_base_url
from .models import CoachingBackendConfig, CoachingSessionConfig

log = logging.getLogger("lava.coaching")

Connect = Callable[[CoachingBackendConfig], Awaitable[Backend]]


class SessionConflict(Exception):
    """The run id has a session with another configuration, or one being closed."""


class UnknownSession(Exception):
    """No open session has this run id."""


class BackendsUnreachable(Exception):
    """A backend of the configuration did not answer its probe."""


async def connect(config: CoachingBackendConfig) -> Backend:
    backend = open_backend(config)
    try:
        await probe(backend)
    except BaseException:
        await backend.close()
        raise
    return backend


@dataclass
class CoachingSession:
    run_id: str
    config: CoachingSessionConfig
    backends: dict[str, Backend]
    active: int = 0
    closing: bool = False
    _turns: itertools.cycle = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._turns = itertools.cycle(sorted(self.backends))

    def next_backend(self) -> tuple[str, Backend]:
        """Requests take the backends in turn: GEN sends as many at once as there are backends."""
        name = next(self._turns)
        return name, self.backends[name]


class CoachingSessions:
    def __init__(self, connect: Connect = connect) -> None:
        self._connect = connect
        self._sessions: dict[str, CoachingSession] = {}
        self._changed = asyncio.Condition()
        # Opening backends takes network round trips: one configuration at a time, so a
        # repeated PUT for the same run waits for the first instead of opening twice.
        self._configuring = asyncio.Lock()

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._sessions

    async def configure(self, run_id: str, config: CoachingSessionConfig) -> bool:
        """True when a session was opened, False for an identical repeat."""
        async with self._configuring:
            existing = self._sessions.get(run_id)
            if existing is not None:
                if existing.closing or existing.config != config:
                    raise SessionConflict(
                        f"coaching session {run_id!r} already has a different configuration or is closing"
                    )
                return False
            backends = await self._open_all(config)
            async with self._changed:
                self._sessions[run_id] = CoachingSession(run_id, config.model_copy(deep=True), backends)
            log.info("coaching session %s opened with backends %s", run_id, ", ".join(sorted(backends)))
            return True

    async def _open_all(self, config: CoachingSessionConfig) -> dict[str, Backend]:
        for name, backend_config in config.backends.items():
            try:
                usable_base_url(backend_config)
            except UnusableBackend as error:
                raise InvalidInput(("backends", name, error.field), error.message) from None
        opened: dict[str, Backend] = {}
        try:
            for name, backend_config in config.backends.items():
                try:
                    opened[name] = await self._connect(backend_config)
                except UnreachableBackend as error:
                    raise BackendsUnreachable(f"coaching backend {name!r}: {error}") from error
        except BaseException:
            await _close_quietly(opened.values())
            raise
        return opened

    @contextlib.asynccontextmanager
    async def acquire(self, run_id: str) -> AsyncIterator[CoachingSession]:
        async with self._changed:
            session = self._sessions.get(run_id)
            if session is None or session.closing:
                raise UnknownSession(f"no open coaching session {run_id!r}")
            session.active += 1
        try:
            yield session
        finally:
            async with self._changed:
                session.active -= 1
                self._changed.notify_all()

    async def close(self, run_id: str) -> None:
        async with self._changed:
            session = self._sessions.get(run_id)
            if session is None:
                return
            if session.closing:
                await self._changed.wait_for(lambda: self._sessions.get(run_id) is not session)
                return
            session.closing = True
            await self._changed.wait_for(lambda: session.active == 0)
        try:
            await _close_quietly(session.backends.values())
        finally:
            async with self._changed:
                del self._sessions[run_id]
                self._changed.notify_all()
            log.info("coaching session %s closed", run_id)

    async def close_all(self) -> None:
        for run_id in list(self._sessions):
            await self.close(run_id)


async def _close_quietly(backends: Iterable[Backend]) -> None:
    for backend in list(backends):
        try:
            await backend.close()
        except Exception:  # closing is best effort; the session is gone either way
            log.warning("closing a coaching backend failed", exc_info=True)


__all__ = [
    "BackendsUnreachable",
    "CoachingSession",
    "CoachingSessions",
    "SessionConflict",
    "UnknownSession",
    "connect",
]
