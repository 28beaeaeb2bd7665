"""The backend seam, observed: latency per backend always, OpenTelemetry spans when configured.

Spans (when `otel_exporter` is not "none", or an app is given a tracer provider):

    POST /v1/responses            SERVER  one per request (W3C traceparent honoured)
    └── invoke_agent lava         one per input: the policy deciding its candidates
        ├── chat {model}          CLIENT  one per backend call, GenAI semantic conventions
        └── lava.candidate        one per candidate, with its final status and error code

Attributes follow the GenAI conventions (`gen_ai.operation.name`, `gen_ai.request.model`,
`gen_ai.provider.name` and the older `gen_ai.system`, `gen_ai.usage.*_tokens`) plus `lava.*` ids.
Prompts and answers are never put in spans (they are in `internal_steps` and on /ui); every
free text that is (error messages) passes through the redactor first, since a remote server may
quote our API key back. With tracing off, the OpenTelemetry packages are not even imported and
the hot path pays one `is None` test per seam.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import __version__
from .backends.base import Backend, Capabilities, Completion, GenerationRequest
from .errors import CandidateError, MissingExtra
from .metrics import Metrics
from .security import Redactor

if TYPE_CHECKING:
    from .situation import Situation

Output = dict[str, Any]
MAX_STATUS_MESSAGE = 500


def provider_name(backend: Backend) -> str:
    """`gen_ai.provider.name`: the well-known value where there is one, else the server kind."""
    profile = getattr(getattr(backend, "profile", None), "name", None)
    if backend.name == "gemini" or profile == "gemini-openai":
        return "gcp.gemini"
    if isinstance(profile, str) and profile != "openai":
        return profile  # vllm, ollama, llama-cpp, generic: OpenAI's wire format, another server
    return backend.name


def build_tracer_provider(exporter: str) -> Any:
    """An SDK tracer provider exporting to the console or over OTLP/HTTP. The OTEL_* environment
    (endpoint, headers, service name, resource attributes) is read by the SDK itself."""
    try:
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise MissingExtra(f"otel_exporter={exporter!r}", "otel", "opentelemetry-sdk") from None
    if exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise MissingExtra("otel_exporter='otlp'", "otel", "opentelemetry-exporter-otlp-proto-http") from None
        span_exporter: Any = OTLPSpanExporter()
    else:
        span_exporter = ConsoleSpanExporter(out=sys.stdout)  # today's stdout, not the one at import
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over lava's own defaults.
    resource = Resource.create({"service.name": "lava", "service.version": __version__}).merge(
        OTELResourceDetector().detect()
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    return provider


@dataclass(slots=True)
class SpanScope:
    span: Any
    token: object
    start_ns: int


class Tracing:
    def __init__(self, provider: Any, redact: Redactor, *, owns_provider: bool) -> None:
        from opentelemetry import context, propagate, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._context, self._propagate, self._trace = context, propagate, trace
        self._kind, self._status, self._code = SpanKind, Status, StatusCode
        self.provider = provider
        self.owns_provider = owns_provider
        self.tracer = provider.get_tracer("lava", __version__)
        self.redact = redact

    @classmethod
    def from_settings(cls, exporter: str, redact: Redactor, provider: Any = None) -> Tracing | None:
        if provider is not None:
            return cls(provider, redact, owns_provider=False)
        if exporter == "none":
            return None
        return cls(build_tracer_provider(exporter), redact, owns_provider=True)

    def shutdown(self) -> None:
        """Flush what is still buffered; only for a provider lava built itself."""
        if self.owns_provider:
            self.provider.shutdown()

    def _enter(self, span: Any) -> SpanScope:
        token = self._context.attach(self._trace.set_span_in_context(span))
        return SpanScope(span, token, time.time_ns())

    def _fail(self, span: Any, code: str, message: str) -> None:
        span.set_attribute("error.type", code)
        span.set_status(self._status(self._code.ERROR, self.redact(message)[:MAX_STATUS_MESSAGE]))

    # -- one request
    def start_request(self, headers: Mapping[str, str]) -> SpanScope:
        # Under an instrumented ASGI stack the current span is the parent; else the caller's traceparent.
        current = self._trace.get_current_span().get_span_context().is_valid
        parent = None if current else self._propagate.extract(headers)
        span = self.tracer.start_span(
            "POST /v1/responses", context=parent, kind=self._kind.SERVER,
            attributes={"http.request.method": "POST", "http.route": "/v1/responses"},
        )
        return SpanScope(span, self._context.attach(self._trace.set_span_in_context(span, parent)), time.time_ns())

    def end_request(self, scope: SpanScope, status: int, request_id: str | None, outputs: list[Output] | None
                    ) -> None:
        span = scope.span
        span.set_attribute("http.response.status_code", status)
        if request_id is not None:
            span.set_attribute("lava.request_id", self.redact(request_id))
        if outputs is not None:
            span.set_attribute("lava.candidate.count", len(outputs))
            span.set_attribute("lava.candidate.error_count", sum(1 for o in outputs if o["status"] == "error"))
        if status >= 500:
            span.set_status(self._status(self._code.ERROR))
        span.end()
        self._context.detach(scope.token)

    # -- one input: the policy deciding its candidates
    def start_decision(self, request_id: str, situation: Situation, policy: str) -> SpanScope:
        span = self.tracer.start_span("invoke_agent lava", attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "lava",
            "lava.policy": policy,
            "lava.request_id": self.redact(request_id),
            "lava.source_id": situation.input.id,
            "lava.candidate.count": situation.n,
        })
        return self._enter(span)

    def end_decision(self, scope: SpanScope, outputs: Sequence[Output]) -> None:
        span = scope.span
        parent = self._trace.set_span_in_context(span)
        input_tokens = output_tokens = 0
        for output in outputs:
            candidate_in, candidate_out = _tokens(output)
            input_tokens += candidate_in
            output_tokens += candidate_out
            candidate = self.tracer.start_span("lava.candidate", context=parent, start_time=scope.start_ns,
                                               attributes={
                "lava.request_id": self.redact(output["request_id"]),
                "lava.source_id": output["source_id"],
                "lava.candidate.index": output["candidate_index"],
                "lava.candidate.status": output["status"],
                "gen_ai.usage.input_tokens": candidate_in,
                "gen_ai.usage.output_tokens": candidate_out,
            })
            if output["error"] is not None:
                candidate.set_attribute("lava.candidate.code", output["error"]["code"])
                self._fail(candidate, output["error"]["code"], output["error"]["message"])
            candidate.end()
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        span.end()
        self._context.detach(scope.token)

    # -- one backend call
    def start_backend_call(self, backend: Backend, provider: str, request: GenerationRequest) -> SpanScope:
        model = str(backend.model or backend.name)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": request.max_tokens,
            "gen_ai.request.temperature": 0.0 if request.greedy else request.temperature,
            "lava.backend": backend.name,
            "lava.component": request.component,
        }
        if request.n != 1:
            attributes["gen_ai.request.choice.count"] = request.n
        if request.seed is not None:
            attributes["gen_ai.request.seed"] = request.seed
        span = self.tracer.start_span(f"chat {model}", kind=self._kind.CLIENT, attributes=attributes)
        return self._enter(span)

    def end_backend_call(self, scope: SpanScope, completions: Sequence[Completion] | None,
                         error: BaseException | None = None) -> None:
        span = scope.span
        if completions is not None:
            span.set_attribute("gen_ai.usage.input_tokens", sum(c.usage.input_tokens for c in completions))
            span.set_attribute("gen_ai.usage.output_tokens", sum(c.usage.output_tokens for c in completions))
            span.set_attribute("gen_ai.response.finish_reasons",
                               [c.finish_reason for c in completions if c.finish_reason])
            # Every completion of one call repeats that call's retry count.
            span.set_attribute("lava.retries", max((c.retries for c in completions), default=0))
        elif isinstance(error, CandidateError):
            self._fail(span, error.code, error.message)
        elif error is not None:
            self._fail(span, type(error).__name__, f"{type(error).__name__}: {error}")
        span.end()
        self._context.detach(scope.token)


def _tokens(output: Output) -> tuple[int, int]:
    steps = output["internal_steps"] or ()
    return (sum(int(s.get("total_input_tokens", 0)) for s in steps),
            sum(int(s.get("total_output_tokens", 0)) for s in steps))


class ObservedBackend(Backend):
    """What policies call: the real backend, timed per call (`lava_backend_call_seconds`) and
    traced when tracing is on. Everything else is the real backend's."""

    def __init__(self, inner: Backend, metrics: Metrics, tracing: Tracing | None = None) -> None:
        self.inner = inner
        self.tracing = tracing
        self._provider = provider_name(inner)
        self._seconds = metrics.backend_seconds.labels(inner.name)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    # Read through, not copied: a backend may learn its model or weaken its capabilities at start.
    @property  # type: ignore[override]
    def name(self) -> str:
        return self.inner.name

    @property  # type: ignore[override]
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property  # type: ignore[override]
    def model(self) -> str:
        return self.inner.model

    @property
    def ready(self) -> bool:
        return self.inner.ready

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    async def generate(self, request: GenerationRequest) -> Sequence[Completion]:
        tracing = self.tracing
        scope = tracing.start_backend_call(self.inner, self._provider, request) if tracing is not None else None
        started = time.perf_counter()
        try:
            completions = await self.inner.generate(request)
        except BaseException as exc:  # cancellation included: the span still ends, marked failed
            if tracing is not None and scope is not None:
                tracing.end_backend_call(scope, None, exc)
            raise
        finally:
            self._seconds.observe(time.perf_counter() - started)
        if tracing is not None and scope is not None:
            tracing.end_backend_call(scope, completions)
        return completions


__all__ = ["ObservedBackend", "SpanScope", "Tracing", "build_tracer_provider", "provider_name"]
