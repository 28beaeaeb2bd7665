"""The fault matrix: every backend kind meets every fault through its real SDK and a real socket.

Whatever the model server does, each candidate is answered within the deadline with the right
status and code, the input memory (memory_list and all) comes back intact on errors, the server
stays healthy, and retries are bounded (no storm).
"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from conftest import user_input
from lava.app import create_app
from lava.settings import Settings
from servers import FaultyModelServer, free_port, uvicorn_thread

SECRET = "sk-fault-matrix-NEVER-SHOWN-9731"
ATTEMPTS = 2
MEMORY = {"memory_list": ["Always be polite."], "history": [], "team": {"notes": [1, 2.5, None]}}

# fault -> (expected status, expected code, model calls per candidate)
# Calls: transient HTTP faults are retried up to ATTEMPTS; unusable answers get one repair call.
MATRIX = {
    "ok": ("completed", None, 1),
    "500": ("error", "backend_error", ATTEMPTS),
    "429": ("error", "backend_rate_limited", ATTEMPTS),
    "garbage": ("error", "invalid_output", 2),
    "truncated": ("error", "invalid_output", 2),
    "empty": ("error", "invalid_output", 2),
    "invalid_tool": ("error", "invalid_output", 2),
    "wrong_robot": ("error", "invalid_output", 2),
    "slow": ("error", "deadline_exceeded", 1),
    "echo_key": ("error", "backend_error", 1),
}


@pytest.fixture(scope="module")
def model_server():
    server = FaultyModelServer()
    with uvicorn_thread(server.app()) as url:
        yield server, url


def lava_settings(kind: str, url: str | None, **overrides) -> Settings:
    common = dict(backend_attempts=ATTEMPTS, repair_attempts=1, request_deadline_s=1.5, policy="full_history")
    if kind == "openai":
        return Settings(backend="openai", base_url=url and f"{url}/v1", server_profile="vllm", model="m",
                        openai_api_key=SECRET, **common, **overrides)
    return Settings(backend="gemini", base_url=url, model="gemini-test", gemini_api_key=SECRET,
                    **common, **overrides)


@pytest.mark.parametrize("kind", ["openai", "gemini"])
@pytest.mark.parametrize("fault", list(MATRIX))
def test_every_fault_is_answered_in_time_with_its_code(model_server, kind, fault, caplog) -> None:
    server, url = model_server
    server.mode, server.hits = fault, 0
    status, code, calls = MATRIX[fault]
    entry = user_input(id=3, n=2, memory=MEMORY, extra_keys={"inference_mode": True})
    request = {"request_id": "r1", "inputs": [entry]}
    with TestClient(create_app(lava_settings(kind, url))) as client:
        started = time.monotonic()
        response = client.post("/v1/responses", json=request)
        elapsed = time.monotonic() - started
        assert client.get("/health").json() == {"status": "ready"}
    assert response.status_code == 200
    outputs = response.json()
    assert [o["candidate_index"] for o in outputs] == [0, 1]
    assert elapsed < 1.5 + 1.0  # the deadline, plus the answer's own way back
    for out in outputs:
        assert out["status"] == status, out
        assert out["source_id"] == 3 and out["request_id"] == "r1"
        if status == "error":
            assert out["error"]["code"] == code and out["error"]["message"] and out["output"] is None
            assert out["memory"] == MEMORY
        else:
            assert out["memory"]["memory_list"] == MEMORY["memory_list"]
            assert out["memory"]["team"] == MEMORY["team"]
    # Greedy candidates share one call where the server honours n; never more than the bound.
    assert server.hits <= calls * 2, f"{server.hits} model calls for 2 candidates: retries storm"
    assert SECRET not in response.text and SECRET not in caplog.text
    if fault == "echo_key":
        assert "[redacted]" in outputs[0]["error"]["message"]


@pytest.mark.parametrize("kind", ["openai", "gemini"])
def test_unreachable_server(kind) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with TestClient(create_app(lava_settings(kind, dead))) as client:
        assert client.get("/health").status_code == 200  # an unreachable backend never stops the server
        response = client.post("/v1/responses", json={"request_id": "r", "inputs": [user_input(memory=MEMORY)]})
    (out,) = response.json()
    assert out["status"] == "error" and out["error"]["code"] == "backend_unavailable", out["error"]
    assert out["memory"] == MEMORY and SECRET not in response.text


def test_a_fault_costs_only_its_own_request(model_server) -> None:
    """One app, a failing request then a healthy one: nothing sticks between requests."""
    server, url = model_server
    with TestClient(create_app(lava_settings("openai", url))) as client:
        server.mode = "500"
        bad = client.post("/v1/responses", json={"request_id": "a", "inputs": [user_input()]}).json()
        server.mode = "ok"
        good = client.post("/v1/responses", json={"request_id": "b", "inputs": [user_input()]}).json()
    assert bad[0]["status"] == "error" and good[0]["status"] == "completed"
