"""GET /metrics: the issue's list (request and backend latency in seconds, tokens, candidates by
status and code, parse repairs, queue depth), read the way Prometheus reads it."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from conftest import user_input
from lava.app import create_app
from lava.backends.scripted import FunctionBackend
from lava.settings import Settings

PRESS_SW1 = {"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw1"}}]}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_backend_latency_is_per_backend_and_counts_each_call_once(tmp_path) -> None:
    """Two candidates from one call, then one repair call for the candidate that answered badly."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([[PRESS_SW1, "not a decision {"]]))
    app = create_app(Settings(backend="scripted", policy="full_history", script=script))
    with TestClient(app) as client:
        assert client.post("/v1/responses", json={"request_id": "r", "inputs": [user_input(n=2)]}).status_code == 200
        seen = samples(client.get("/metrics").text)

    assert seen[("lava_backend_call_seconds_count", (("backend", "scripted"),))] == 2
    assert seen[("lava_backend_call_seconds_bucket", (("backend", "scripted"), ("le", "+Inf")))] == 2
    assert seen[("lava_model_calls_total", (("component", "commander"),))] == 2  # one step per candidate
    assert seen[("lava_model_calls_total", (("component", "commander.repair"),))] == 1
    assert seen[("lava_parse_repairs_total", ())] == 1
    assert seen[("lava_candidates_total", (("code", ""), ("status", "completed")))] == 2
    assert seen[("lava_request_seconds_count", ())] == 1
    assert seen[("lava_tokens_total", (("kind", "input"),))] > 0
    assert seen[("lava_requests_pending", ())] == 0


def test_a_failing_backend_call_is_timed_too() -> None:
    def broken(request):
        raise RuntimeError("down")

    app = create_app(Settings(backend="scripted", policy="full_history"), backend=FunctionBackend(broken))
    with TestClient(app) as client:
        answer = client.post("/v1/responses", json={"request_id": "r", "inputs": [user_input()]})
        seen = samples(client.get("/metrics").text)
    assert answer.json()[0]["error"]["code"] == "internal_error"
    assert seen[("lava_backend_call_seconds_count", (("backend", "function"),))] == 1
    assert seen[("lava_candidates_total", (("code", "internal_error"), ("status", "error")))] == 1


def test_loop_histograms_expose_what_prometheus_client_histograms_do() -> None:
    """lava's lock-free histogram against the one it replaces, in both exposition formats; only
    the `_created` timestamps differ."""
    import re

    from prometheus_client import CollectorRegistry, Histogram, generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

    from lava.metrics import LATENCY_BUCKETS, LoopHistogram

    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("x_seconds", "doc", ["backend"], buckets=LATENCY_BUCKETS, registry=theirs)
    loop = LoopHistogram("x_seconds", "doc", ["backend"], buckets=LATENCY_BUCKETS, registry=ours)
    for backend, value in [("a", 0.0), ("a", 0.005), ("b", 0.0051), ("a", 1), ("b", 299.9), ("a", 300), ("a", 1e9)]:
        reference.labels(backend).observe(value)
        loop.labels(backend).observe(value)

    def timeless(text: bytes) -> str:
        return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text.decode())

    assert timeless(generate_latest(ours)) == timeless(generate_latest(theirs))
    assert timeless(openmetrics(ours)) == timeless(openmetrics(theirs))


def test_queue_gauges_read_the_live_counts_while_a_request_runs() -> None:
    import threading

    app = create_app(Settings(backend="scripted", policy="full_history", scripted_delay_s=1.0))
    with TestClient(app) as client:
        body = {"request_id": "r", "inputs": [user_input(), {**user_input(), "id": 2}]}
        worker = threading.Thread(target=client.post, args=("/v1/responses",), kwargs={"json": body})
        worker.start()
        for _ in range(300):
            during = samples(client.get("/metrics").text)
            if during[("lava_inputs_in_flight", ())] == 2:
                break
            threading.Event().wait(0.01)
        worker.join()
        after = samples(client.get("/metrics").text)
    assert during[("lava_requests_pending", ())] == 1
    assert during[("lava_inputs_in_flight", ())] == 2
    assert after[("lava_requests_pending", ())] == after[("lava_inputs_in_flight", ())] == 0
