"""The coaching routes (protocol.md §10.2-10.4) and the `/v1/info` fields that advertise them.

    PUT    /v1/coaching/sessions/{run_id}   204; 409 other config or closing; 503 a backend unreachable;
                                            422 a backend lava cannot use (unknown type, not a chat URL)
    POST   /v1/coaching                     200 SpecializedCoachingResponse; 404 unknown or closing session
    DELETE /v1/coaching/sessions/{run_id}   204, also for an unknown session

Bodies are validated like `/v1/responses` bodies (strict, NaN refused) and a malformed one is a
422 naming the field. A correction that fails is an answer with `status: "error"`, never an
HTTP error: GEN treats any non-2xx as a transport failure and logs it without a reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from ..bodies import openapi_schema, parse_body, read_body
from ..deadlines import set_deadline
from ..policies.base import Policy
from .models import COACHING_KINDS, CoachingSessionConfig, SpecializedCoachingRequest, SpecializedCoachingResponse
from .reinjection import applies_coaching
from .service import CoachingService
from .sessions import BackendsUnreachable, CoachingSession, CoachingSessions, SessionConflict, UnknownSession

log = logging.getLogger("lava.coaching")

Model = TypeVar("Model", bound=BaseModel)

# Bodies are read by hand (lava.bodies), so their schemas go into the document explicitly, with
# definitions that the app publishes under components/schemas.
_DOCUMENTED = {model: openapi_schema(model)
               for model in (CoachingSessionConfig, SpecializedCoachingRequest, SpecializedCoachingResponse)}
SCHEMAS = {model: schema for model, (schema, _) in _DOCUMENTED.items()}
COACHING_DEFINITIONS: dict[str, Any] = {name: schema for _, definitions in _DOCUMENTED.values()
                                        for name, schema in definitions.items()}


def coaching_router(sessions: CoachingSessions | None = None, service: CoachingService | None = None, *,
                    max_body_bytes: int = 32 * 1024 * 1024, deadline_s: float = 300.0) -> APIRouter:
    """The three routes; the router's lifespan closes every session (and its backends) at shutdown."""
    sessions = sessions or CoachingSessions()
    service = service or CoachingService()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await sessions.close_all()

    router = APIRouter(lifespan=lifespan)

    @router.put("/v1/coaching/sessions/{run_id:path}", status_code=204, openapi_extra=_body(CoachingSessionConfig))
    async def configure(run_id: str, request: Request) -> Response:
        config = await _read(request, CoachingSessionConfig, max_body_bytes)
        if isinstance(config, Response):
            return config
        set_deadline(asyncio.get_running_loop().time() + deadline_s)  # probes stop retrying by then
        try:
            await sessions.configure(run_id, config)
        except SessionConflict as conflict:
            return JSONResponse({"detail": str(conflict)}, status_code=409)
        except BackendsUnreachable as problem:
            return JSONResponse({"detail": f"unable to initialize LLM coaching; verify backend connectivity "
                                           f"from the agent: {problem}"}, status_code=503)
        return Response(status_code=204)

    @router.delete("/v1/coaching/sessions/{run_id:path}", status_code=204)
    async def close(run_id: str) -> Response:
        await sessions.close(run_id)
        return Response(status_code=204)

    @router.post("/v1/coaching", openapi_extra=_body(SpecializedCoachingRequest), responses={200: {
        "description": "The correction, or why there is none", "content": {"application/json": {
            "schema": SCHEMAS[SpecializedCoachingResponse]}}}})
    async def coaching(request: Request) -> Response:
        body = await _read(request, SpecializedCoachingRequest, max_body_bytes)
        if isinstance(body, Response):
            return body
        set_deadline(asyncio.get_running_loop().time() + deadline_s)
        try:
            async with sessions.acquire(body.run_id) as session:
                answer = await _process(service, body, session)
        except UnknownSession as unknown:
            return JSONResponse({"detail": str(unknown)}, status_code=404)
        return JSONResponse(answer.model_dump(mode="json"))

    return router


async def _process(service: CoachingService, request: SpecializedCoachingRequest, session: CoachingSession
                   ) -> SpecializedCoachingResponse:
    try:
        answer = await service.process(request, session)
        answer.validate_request(request)
        return answer
    except Exception as error:  # a bug costs this request an error answer, never the run
        log.exception("coaching request %s failed", request.request_id)
        return SpecializedCoachingResponse(request_id=request.request_id, status="error",
                                           reason=f"internal error: {type(error).__name__}: {error}")


def _body(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": SCHEMAS[model]}}}}


async def _read(request: Request, model: type[Model], limit: int) -> Model | Response:
    body = await read_body(request, limit)
    return body if isinstance(body, Response) else parse_body(body, model)


def coaching_info(policy: Policy, *, routes_mounted: bool) -> dict[str, Any]:
    """`specialized_coaching`, `coaching_resume` and `coaching_unavailable_reason` for `/v1/info`,
    true to what this server does; `capabilities.coaching` is `bool(specialized_coaching)`.

    `coaching_resume` needs only the policy to apply `replace_say`; the specialized kinds need the
    routes. GEN requests a kind only if it is listed, and opens a session only if one is."""
    specialized = list(COACHING_KINDS) if routes_mounted else []
    return {
        "specialized_coaching": specialized,
        "coaching_resume": applies_coaching(policy),
        "coaching_unavailable_reason": None if specialized else "the coaching routes are not mounted on this server",
    }


__all__ = ["COACHING_DEFINITIONS", "coaching_info", "coaching_router"]
