"""The HTTP layer: thin routes over the engine, and one place that maps errors to status codes.

    200  every /v1/responses answer, even when some or all candidates are errors
    413  request body over `max_body_bytes`
    422  malformed request: the body names each failing field (`detail[].loc`)
    401  `auth_token` is set and the request lacks the bearer token (every route but /health)
    403  /ui from beyond loopback while `ui_allow_remote` is off
    503  not ready yet (model still loading), or `max_pending_requests` already in progress

The request body is parsed once (strict, NaN/Infinity refused) and the answer encoded once
with orjson, and POST /v1/responses is served past FastAPI's routing (`ResponsesShortcut`), which
keeps lava's own overhead near the cost of JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.datastructures import Headers

from . import AGENT_ID, __version__
from .backends import Backend, create_backend
from .bodies import openapi_schema, parse_body, read_body, receive_body
from .coaching.routes import COACHING_DEFINITIONS, coaching_info, coaching_router
from .coaching.service import CoachingService
from .engine import Engine, EngineLimits, Output
from .errors import InvalidInput, LavaError, Overloaded
from .logs import request_id_var
from .metrics import Metrics
from .policies import Policy, create_policy
from .protocol import PROTOCOL_VERSION, AgentRequest
from .security import BearerAuth, Redactor
from .settings import Settings
from .telemetry import ObservedBackend, Tracing
from .traces import TraceBuffer
from .ui import add_ui_routes

log = logging.getLogger("lava.app")

MAX_ECHOED_INPUT = 120
RESPONSES_PATH = "/v1/responses"
# POST /v1/responses: reads the body when called, answers whatever happens.
Handler = Callable[[Callable[[], Awaitable["bytes | Response"]], Mapping[str, str]], Awaitable[Response]]

# The request body is read by hand (lava.bodies), so FastAPI cannot document it: the wire model's
# schema goes in explicitly, its definitions under components/schemas.
REQUEST_SCHEMA, REQUEST_DEFINITIONS = openapi_schema(AgentRequest)


@dataclass
class Runtime:
    """What the routes need, held on `app.state.runtime`. Configuration and loaded models only."""

    settings: Settings
    backend: Backend
    policy: Policy
    engine: Engine
    metrics: Metrics
    traces: TraceBuffer | None = None  # what /ui shows; never read to decide anything
    tracing: Tracing | None = None
    load_error: str | None = None
    pending: int = 0
    loaded: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def ready(self) -> bool:
        return self.loaded.is_set() and self.load_error is None and self.backend.ready


def info_document(runtime: Runtime) -> dict[str, Any]:
    coaching = coaching_info(runtime.policy, routes_mounted=True)
    return {
        "protocol_version": PROTOCOL_VERSION,
        "agent_id": AGENT_ID,
        "agent_version": __version__,
        **coaching,
        "capabilities": {"inference": True, "coaching": bool(coaching["specialized_coaching"])},
    }


def _error_detail(error: dict[str, Any]) -> dict[str, Any]:
    detail: dict[str, Any] = {"type": error["type"], "loc": ["body", *error["loc"]], "msg": error["msg"]}
    value = error.get("input")
    if isinstance(value, float) and not math.isfinite(value):
        detail["input"] = repr(value)
    elif isinstance(value, (str, int, float, bool)) or value is None:
        text = repr(value)
        detail["input"] = value if len(text) <= MAX_ECHOED_INPUT else text[:MAX_ECHOED_INPUT] + "..."
    return detail


def validation_error_response(exc: ValidationError) -> JSONResponse:
    details = [_error_detail(e) for e in exc.errors(include_url=False, include_context=False)]
    return JSONResponse({"detail": details}, status_code=422)


def invalid_input_response(exc: InvalidInput) -> JSONResponse:
    detail = {"type": "invalid_input", "loc": ["body", *exc.loc], "msg": exc.message}
    return JSONResponse({"detail": [detail]}, status_code=422)


def error_response(exc: Exception) -> JSONResponse | None:
    """The one mapping of error types to answers, for the exception handlers and the fast path alike."""
    if isinstance(exc, ValidationError):
        return validation_error_response(exc)
    if isinstance(exc, InvalidInput):
        return invalid_input_response(exc)
    if isinstance(exc, Overloaded):
        return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "1"})
    if isinstance(exc, LavaError):
        return JSONResponse({"detail": str(exc)}, status_code=500)
    return None


class ResponsesShortcut:
    """Sends POST /v1/responses straight to its handler, past every layer of FastAPI and Starlette
    (error and telemetry middleware, routing, dependencies), which a GEN batch otherwise pays on
    the way in and on every message out, for a route that needs none of them: it reads its own
    body and turns every outcome into a response. The outermost layer of the app (authentication,
    when on, wraps it); the FastAPI route stays, documented in the OpenAPI document and answering
    the same way when a request does reach it."""

    def __init__(self, app: Any, handler: Handler, max_body_bytes: int) -> None:
        self.app = app
        self.handler = handler
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and _route_path(scope) == RESPONSES_PATH:
            response = await self.handler(lambda: receive_body(scope, receive, self.max_body_bytes),
                                          Headers(scope=scope))
            await response(scope, receive, send)
        else:
            await self.app(scope, receive, send)


class LavaApp(FastAPI):
    """FastAPI with lava's outermost layers: the /v1/responses shortcut, and authentication
    around everything (so around the shortcut too). `responses_shortcut = None` sends
    /v1/responses the whole FastAPI way (tests compare the two)."""

    responses_shortcut: Callable[[Any], Any] | None = None
    auth_token: str | None = None

    def build_middleware_stack(self) -> Any:
        stack = super().build_middleware_stack()
        if self.responses_shortcut is not None:
            stack = self.responses_shortcut(stack)
        if self.auth_token is not None:
            stack = BearerAuth(stack, token=self.auth_token)
        return stack


def _route_path(scope: dict[str, Any]) -> str:
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


def create_app(
    settings: Settings | None = None,
    *,
    backend: Backend | None = None,
    policy: Policy | None = None,
    tracer_provider: Any = None,
) -> LavaApp:
    """The app. `tracer_provider` (an OpenTelemetry one) turns tracing on whatever `otel_exporter`
    says, for embedding applications and tests; a given `policy` keeps its own backend, which is
    then neither timed nor traced."""
    settings = settings or Settings.load()
    backend = backend or create_backend(settings)
    redact = Redactor.from_settings(settings)
    metrics = Metrics()
    tracing = Tracing.from_settings(settings.otel_exporter, redact, tracer_provider)
    policy = policy or create_policy(settings, ObservedBackend(backend, metrics, tracing))
    limits = EngineLimits(
        max_concurrency=settings.max_concurrency,
        deadline_s=settings.request_deadline_s,
        max_candidates=settings.max_candidates,
        max_history_entries=settings.max_history_entries,
    )
    traces = None
    if settings.trace_buffer_size:
        traces = TraceBuffer(settings.trace_buffer_size, settings.trace_buffer_bytes)
    runtime = Runtime(settings, backend, policy, Engine(policy, limits, metrics, tracing), metrics, traces, tracing)
    metrics.pending.set_function(lambda: runtime.pending)  # read when scraped

    async def load() -> None:
        try:
            await backend.start()
        except Exception as exc:  # reported on /health; the server stays up to say why
            log.exception("backend %s failed to start", backend.name)
            runtime.load_error = f"{type(exc).__name__}: {exc}"
        finally:
            runtime.loaded.set()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(load())
        try:
            yield
        finally:
            loading.cancel()
            await backend.close()
            if tracing is not None:
                await asyncio.to_thread(tracing.shutdown)  # flushes spans; may wait on the collector

    app = LavaApp(title="lava", version=__version__, lifespan=lifespan)
    app.state.runtime = runtime
    if settings.auth_token is not None:
        app.auth_token = settings.auth_token.get_secret_value()

    async def _handled(request: Request, exc: Exception) -> Response:
        response = error_response(exc)
        if response is None:
            raise exc
        return response

    for handled in (ValidationError, InvalidInput, LavaError):  # Overloaded is a LavaError
        app.add_exception_handler(handled, _handled)

    def not_ready() -> JSONResponse:
        if runtime.load_error:
            reason = f"the {backend.name} backend failed to load: {runtime.load_error}"
        else:
            reason = f"the {backend.name} backend is still loading"
        return JSONResponse({"detail": reason}, status_code=503)

    @app.get("/health")
    async def health() -> Response:
        if not runtime.ready:
            return not_ready()
        return JSONResponse({"status": "ready"})

    @app.get("/v1/info")
    async def info() -> JSONResponse:
        return JSONResponse(info_document(runtime))

    async def answer_responses(read: Callable[[], Awaitable[bytes | Response]], headers: Mapping[str, str]
                               ) -> Response:
        """POST /v1/responses, whichever way it arrived: every outcome is a response, never raised."""
        started = time.perf_counter()
        status = 500
        request_id: str | None = None
        outputs: list[Output] | None = None
        span = tracing.start_request(headers) if tracing is not None else None
        try:
            body = await read()
            if isinstance(body, Response):
                status = body.status_code
                return body
            agent_request = parse_request(body)
            request_id = agent_request.request_id
            # Never reset: it lives in this request's own task, where uvicorn also logs the
            # request's failure after the route has returned.
            request_id_var.set(request_id)
            if not runtime.ready:
                status = 503
                return not_ready()
            if runtime.pending >= settings.max_pending_requests:
                status = 503
                raise Overloaded(
                    f"lava is at capacity: {runtime.pending} requests are already being answered "
                    f"(max_pending_requests={settings.max_pending_requests}); retry shortly"
                )
            runtime.pending += 1
            try:
                outputs = await runtime.engine.respond(agent_request)
            finally:
                runtime.pending -= 1
            status = 200
            answer = redact.body(encode_json(outputs))
            elapsed = time.perf_counter() - started
            if traces is not None:
                traces.record(body, answer, received=time.time() - elapsed, duration_s=elapsed)
            if log.isEnabledFor(logging.DEBUG):
                errors = sum(1 for output in outputs if output["status"] == "error")
                log.debug("answered %d candidates (%d errors) in %.3f s", len(outputs), errors, elapsed)
            return Response(answer, media_type="application/json")
        except LavaError as exc:  # InvalidInput (422), Overloaded (503), anything else (500)
            response = error_response(exc)
            assert response is not None  # every LavaError has its answer
            status = response.status_code
            return response
        except ValidationError as exc:
            status = 422
            return validation_error_response(exc)
        finally:
            metrics.requests.labels(str(status)).inc()
            metrics.request_seconds.observe(time.perf_counter() - started)
            if tracing is not None and span is not None:
                tracing.end_request(span, status, request_id, outputs)

    @app.post(
        RESPONSES_PATH,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": REQUEST_SCHEMA}},
            }
        },
    )
    async def responses(request: Request) -> Response:
        return await answer_responses(lambda: read_body(request, settings.max_body_bytes), request.headers)

    app.responses_shortcut = partial(ResponsesShortcut, handler=answer_responses,
                                     max_body_bytes=settings.max_body_bytes)

    document_without_wire_models = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = document_without_wire_models()
            document.setdefault("components", {}).setdefault("schemas", {}).update(
                {**REQUEST_DEFINITIONS, **COACHING_DEFINITIONS})
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/metrics", include_in_schema=False)
    async def metrics_route() -> Response:
        content, media_type = metrics.exposition()
        return Response(content, media_type=media_type)

    app.include_router(coaching_router(
        service=CoachingService(max_tokens=settings.max_tokens, seed=settings.seed),
        max_body_bytes=settings.max_body_bytes, deadline_s=settings.request_deadline_s,
    ))
    add_ui_routes(app, traces, allow_remote=settings.ui_allow_remote, redact=redact, encode=encode_json)

    return app


def parse_request(body: bytes) -> AgentRequest:
    return parse_body(body, AgentRequest)


def encode_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        # Integers beyond 64 bits are valid JSON that orjson refuses; the stdlib writes them.
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


__all__ = ["LavaApp", "Runtime", "create_app", "info_document"]
