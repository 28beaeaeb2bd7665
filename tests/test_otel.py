"""OpenTelemetry: a span per request, per input's decision, per candidate and per backend call,
with GenAI semantic-convention attributes, off by default, and never carrying an API key."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from conftest import user_input
from lava.app import create_app
from lava.errors import MissingExtra
from lava.settings import Settings
from servers import FaultyModelServer, uvicorn_thread

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

SECRET = "sk-otel-0123456789abcdef0123"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


@pytest.fixture
def provider(exporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def body(*inputs: dict[str, Any], request_id: str = "req-otel") -> dict[str, Any]:
    return {"request_id": request_id, "inputs": list(inputs)}


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def test_spans_nest_request_decision_backend_call_and_candidate(provider, exporter) -> None:
    app = create_app(Settings(backend="scripted", policy="full_history"), tracer_provider=provider)
    with TestClient(app) as client:
        answer = client.post("/v1/responses", json=body(user_input(id=3, n=2), user_input("hello", id=8)))
    assert answer.status_code == 200
    spans = exporter.get_finished_spans()

    (root,) = by_name(spans, "POST /v1/responses")
    decisions = by_name(spans, "invoke_agent lava")
    calls = by_name(spans, "chat scripted-rule")
    candidates = by_name(spans, "lava.candidate")
    assert len(spans) == 1 + 2 + 2 + 3
    assert {span.context.trace_id for span in spans} == {root.context.trace_id}
    assert root.parent is None and root.kind == SpanKind.SERVER
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["lava.request_id"] == "req-otel"
    assert root.attributes["lava.candidate.count"] == 3 and root.attributes["lava.candidate.error_count"] == 0

    decision_of = {span.attributes["lava.source_id"]: span for span in decisions}
    assert set(decision_of) == {3, 8}
    for decision in decisions:
        assert decision.parent.span_id == root.context.span_id
        assert decision.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert decision.attributes["lava.request_id"] == "req-otel"
        assert decision.attributes["lava.policy"] == "full_history"
    assert decision_of[3].attributes["lava.candidate.count"] == 2
    # One backend call per input (the scripted backend answers n candidates from one prompt).
    assert sorted(decision_of_span(call, decisions) for call in calls) == [3, 8]
    for call in calls:
        assert call.kind == SpanKind.CLIENT
        assert call.attributes["gen_ai.operation.name"] == "chat"
        assert call.attributes["gen_ai.request.model"] == "scripted-rule"
        assert call.attributes["gen_ai.provider.name"] == call.attributes["gen_ai.system"] == "scripted"
        assert call.attributes["gen_ai.usage.input_tokens"] > 0 and call.attributes["gen_ai.usage.output_tokens"] > 0
        assert call.attributes["lava.component"] == "commander"
        assert call.attributes["gen_ai.response.finish_reasons"] == ("stop",) * (2 if call.parent.span_id ==
                                                                                 decision_of[3].context.span_id else 1)
    assert sorted((decision_of_span(c, decisions), c.attributes["lava.candidate.index"]) for c in candidates) == [
        (3, 0), (3, 1), (8, 0)]
    assert {c.attributes["lava.candidate.status"] for c in candidates} == {"completed"}
    assert decision_of[3].attributes["gen_ai.usage.input_tokens"] == sum(
        c.attributes["gen_ai.usage.input_tokens"] for c in candidates if c.attributes["lava.source_id"] == 3)


def decision_of_span(span: ReadableSpan, decisions: list[ReadableSpan]) -> int:
    (parent,) = [d for d in decisions if d.context.span_id == span.parent.span_id]
    return parent.attributes["lava.source_id"]


def test_an_error_candidate_and_its_repair_call_are_marked(provider, exporter, tmp_path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["not a decision {"]))
    app = create_app(Settings(backend="scripted", policy="full_history", script=script), tracer_provider=provider)
    with TestClient(app) as client:
        answer = client.post("/v1/responses", json=body(user_input()))
    assert answer.json()[0]["error"]["code"] == "invalid_output"
    spans = exporter.get_finished_spans()
    (candidate,) = by_name(spans, "lava.candidate")
    assert candidate.status.status_code == StatusCode.ERROR
    assert candidate.attributes["lava.candidate.status"] == "error"
    assert candidate.attributes["lava.candidate.code"] == candidate.attributes["error.type"] == "invalid_output"
    assert sorted(span.attributes["lava.component"] for span in by_name(spans, "chat scripted-file")) == [
        "commander", "commander.repair"]
    (root,) = by_name(spans, "POST /v1/responses")
    assert root.attributes["lava.candidate.error_count"] == 1


def test_a_callers_traceparent_continues_its_trace(provider, exporter) -> None:
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    app = create_app(Settings(backend="scripted", policy="full_history"), tracer_provider=provider)
    with TestClient(app) as client:
        client.post("/v1/responses", json=body(user_input()),
                    headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
    (root,) = by_name(exporter.get_finished_spans(), "POST /v1/responses")
    assert f"{root.context.trace_id:032x}" == trace_id
    assert f"{root.parent.span_id:016x}" == parent_id


def test_a_rejected_request_is_a_span_without_an_error_status(provider, exporter) -> None:
    app = create_app(Settings(backend="scripted", policy="full_history"), tracer_provider=provider)
    with TestClient(app) as client:
        assert client.post("/v1/responses", json={"request_id": "", "inputs": []}).status_code == 422
    (root,) = exporter.get_finished_spans()
    assert root.attributes["http.response.status_code"] == 422
    assert root.status.status_code == StatusCode.UNSET  # the client's mistake, not the server's


def test_api_keys_never_reach_span_attributes(provider, exporter) -> None:
    """A server that quotes our key back in its error body: the error reaches spans redacted."""
    model = FaultyModelServer()
    model.mode = "echo_key"
    with uvicorn_thread(model.app()) as url:
        settings = Settings(backend="openai", policy="full_history", base_url=f"{url}/v1", openai_api_key=SECRET,
                            model="m", backend_attempts=1)
        with TestClient(create_app(settings, tracer_provider=provider)) as client:
            answer = client.post("/v1/responses", json=body(user_input()))
    assert answer.json()[0]["status"] == "error"
    spans = exporter.get_finished_spans()
    (call,) = by_name(spans, "chat m")
    assert call.status.status_code == StatusCode.ERROR and call.attributes["error.type"].startswith("backend_")
    assert "[redacted]" in call.status.description
    assert call.attributes["gen_ai.provider.name"] == "generic"  # an OpenAI-compatible server lava cannot name
    everything = json.dumps([json.loads(span.to_json()) for span in spans])
    assert SECRET not in everything


def test_the_console_exporter_prints_spans_when_configured(capsys) -> None:
    with TestClient(create_app(Settings(backend="scripted", policy="full_history", otel_exporter="console"))) as client:
        client.post("/v1/responses", json=body(user_input()))
    printed = capsys.readouterr().out  # flushed when the app shut down
    assert '"name": "invoke_agent lava"' in printed and '"name": "POST /v1/responses"' in printed
    assert '"service.name": "lava"' in printed


def test_the_otlp_exporter_sends_spans_to_a_collector(monkeypatch) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    received: list[ExportTraceServiceRequest] = []

    async def collect(request):
        received.append(ExportTraceServiceRequest.FromString(await request.body()))
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/traces", collect, methods=["POST"])])
    with uvicorn_thread(collector) as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{url}/v1/traces")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "lava-under-test")
        settings = Settings(backend="scripted", policy="full_history", otel_exporter="otlp")
        with TestClient(create_app(settings)) as client:
            client.post("/v1/responses", json=body(user_input()))
    resource_spans = [rs for export in received for rs in export.resource_spans]
    names = {span.name for rs in resource_spans for ss in rs.scope_spans for span in ss.spans}
    assert {"POST /v1/responses", "invoke_agent lava", "chat scripted-rule", "lava.candidate"} <= names
    services = {attr.value.string_value for rs in resource_spans for attr in rs.resource.attributes
                if attr.key == "service.name"}
    assert services == {"lava-under-test"}


def test_a_missing_sdk_is_named_with_its_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(MissingExtra, match=r"lava-agent\[otel\]") as raised:
        create_app(Settings(backend="scripted", policy="full_history", otel_exporter="console"))
    assert raised.value.extra == "otel"


def test_with_tracing_off_the_sdk_is_never_imported() -> None:
    program = (
        "import sys\n"
        "from fastapi.testclient import TestClient\n"
        "from lava.app import create_app\n"
        "from lava.settings import Settings\n"
        "with TestClient(create_app(Settings(backend='scripted', policy='full_history'))) as client:\n"
        "    client.post('/v1/responses', json={'request_id': 'r', 'inputs': [{'id': 0, 'instruction': "
        "{'type': 'user', 'content': 'hi'}}]})\n"
        "    assert client.app.state.runtime.tracing is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
