"""The HTTP layer: routes, status codes, error bodies that name fields, readiness."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx2 as httpx

from conftest import settings, user_input
from lava import __version__
from lava.app import create_app
from lava.backends.scripted import FunctionBackend, ScriptedBackend
from servers import uvicorn_thread


def body(*inputs, request_id="r1") -> dict:
    return {"request_id": request_id, "inputs": list(inputs)}


def test_health_and_info(make_client) -> None:
    client = make_client()
    assert client.get("/health").json() == {"status": "ready"}
    info = client.get("/v1/info").json()
    assert info["protocol_version"] == "2.0"
    assert info["agent_id"] == "lava" and info["agent_version"] == __version__
    assert info["capabilities"] == {"inference": True, "coaching": True}
    assert "coaching_session_version" not in info


def test_empty_inputs_answer_an_empty_array(make_client) -> None:
    response = make_client().post("/v1/responses", json=body())
    assert response.status_code == 200 and response.json() == []


def test_strict_types_refused_with_field_location(make_client) -> None:
    client = make_client()
    for bad, loc in [
        ({**user_input(), "id": True}, ["body", "inputs", 0, "id"]),
        ({**user_input(), "num_outputs": 1.0}, ["body", "inputs", 0, "num_outputs"]),
        ({**user_input(), "surprise": 1}, ["body", "inputs", 0, "surprise"]),
        ({**user_input(), "instruction": {"type": "system", "content": "x"}}, ["body", "inputs", 0, "instruction",
                                                                               "type"]),
    ]:
        response = client.post("/v1/responses", json=body(bad))
        assert response.status_code == 422, bad
        assert loc in [d["loc"] for d in response.json()["detail"]]


def test_nan_and_infinity_refused_even_inside_memory(make_client) -> None:
    client = make_client()
    for literal in ("NaN", "Infinity", "-Infinity", "1e400"):
        raw = json.dumps(body(user_input())).replace('"memory": {}', f'"memory": {{"x": [{literal}]}}')
        response = client.post("/v1/responses", content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 422, literal
        assert response.json()["detail"][0]["loc"][:4] == ["body", "inputs", 0, "memory"]


def test_duplicate_ids_and_bad_json(make_client) -> None:
    client = make_client()
    response = client.post("/v1/responses", json=body(user_input(id=1), user_input(id=1)))
    assert response.status_code == 422 and "unique" in response.text
    response = client.post("/v1/responses", content=b'{"request_id": "r", "inputs": [')
    assert response.status_code == 422 and "not valid JSON" in response.text


def test_lava_specific_field_errors_are_422(make_client) -> None:
    response = make_client().post("/v1/responses", json=body(user_input(memory={"memory_list": "x"})))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "inputs", 0, "memory", "memory_list"]


def test_body_limit_is_413(make_client) -> None:
    client = make_client(max_body_bytes=2000)
    big = body(user_input("x" * 5000))
    response = client.post("/v1/responses", json=big)
    assert response.status_code == 413 and "max_body_bytes" in response.text
    chunked = client.post("/v1/responses", content=iter([json.dumps(big).encode()]))
    assert chunked.status_code == 413


def test_big_integers_survive_the_round_trip(make_client) -> None:
    response = make_client().post("/v1/responses", json=body(user_input(id=2**70, memory={"n": 2**80})))
    (out,) = response.json()
    assert out["source_id"] == 2**70 and out["memory"]["n"] == 2**80


class GatedBackend(ScriptedBackend):
    """Loads only when the test says so: lets a test watch the not-ready period."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    async def start(self) -> None:
        await asyncio.to_thread(self.gate.wait, 30)

    @property
    def ready(self) -> bool:
        return self.gate.is_set()


def test_not_ready_is_503_until_the_backend_has_loaded(make_client) -> None:
    backend = GatedBackend()
    client = make_client(backend=backend)
    assert client.get("/health").status_code == 503
    assert "loading" in client.get("/health").json()["detail"]
    assert client.post("/v1/responses", json=body(user_input())).status_code == 503
    assert client.get("/v1/info").status_code == 200  # identity is known before the model is
    backend.gate.set()
    deadline = time.monotonic() + 5
    while client.get("/health").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert client.post("/v1/responses", json=body(user_input())).status_code == 200


def test_failed_load_is_reported_on_health(make_client) -> None:
    class Broken(ScriptedBackend):
        async def start(self) -> None:
            raise RuntimeError("model file is corrupt")

    client = make_client(backend=Broken())
    time.sleep(0.05)
    response = client.get("/health")
    assert response.status_code == 503 and "model file is corrupt" in response.json()["detail"]


def test_health_and_info_answer_while_a_long_request_runs() -> None:
    async def slow(req):
        await asyncio.sleep(3)
        return ['{"say": "Done."}'] * req.n

    app = create_app(settings(policy="full_history"), backend=FunctionBackend(slow))  # one model call a decision
    with uvicorn_thread(app) as url:
        result = {}
        worker = threading.Thread(target=lambda: result.update(
            r=httpx.post(f"{url}/v1/responses", json=body(user_input()), timeout=30)))
        worker.start()
        time.sleep(0.3)
        started = time.perf_counter()
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.get(f"{url}/v1/info").status_code == 200
        assert time.perf_counter() - started < 1.0
        assert worker.is_alive()  # the long request was still running
        worker.join()
        assert result["r"].status_code == 200


def test_metrics_count_requests_candidates_and_errors(make_client) -> None:
    client = make_client()
    client.post("/v1/responses", json=body(user_input(n=2)))
    client.post("/v1/responses", json=body({**user_input(), "id": True}))
    text = client.get("/metrics").text
    assert 'lava_requests_total{status="200"} 1.0' in text
    assert 'lava_requests_total{status="422"} 1.0' in text
    assert 'lava_candidates_total{code="",status="completed"} 2.0' in text
    assert "lava_decision_seconds_count 1.0" in text
