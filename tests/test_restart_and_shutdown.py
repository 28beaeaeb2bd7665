"""Statelessness and lifecycle through real `lava serve` processes: kill -9 mid-episode and continue
from the returned memory, replicas taking turns, graceful shutdown, secrets kept out of logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx2 as httpx
import pytest

from conftest import user_input
from servers import free_port, wait_ready

pytestmark = pytest.mark.timeout(240)

STEPS = 5
ARGS = ("--backend", "scripted", "--policy", "magma")


def start(*args: str, port: int | None = None, env: dict | None = None, log=None) -> tuple[subprocess.Popen, str]:
    port = port or free_port()
    process = subprocess.Popen([sys.executable, "-m", "lava.cli", "serve", "--port", str(port), *args],
                               stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT,
                               env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, process, 60)
    return process, url


def step(url: str, index: int, memory: dict) -> dict:
    if index == 0:
        instruction = {"type": "user", "content": "Please press sw1, then sw3, then sw2."}
    else:
        instruction = {"type": "env", "content": json.dumps({"infos": "The action succeeded."})}
    entry = user_input(id=7, memory=memory, instruction=instruction, extra_keys={"inference_mode": True})
    response = httpx.post(f"{url}/v1/responses", json={"request_id": f"s{index}", "inputs": [entry]}, timeout=30)
    assert response.status_code == 200
    (out,) = response.json()
    assert out["status"] == "completed"
    return out


def episode(urls) -> list[dict]:
    """Decisions of one episode; `urls(i)` says which server answers step i."""
    memory: dict = {"memory_list": ["Be brief."]}
    decisions = []
    for i in range(STEPS):
        out = step(urls(i), i, memory)
        memory = out["memory"]
        decisions.append(out["output"])
    assert memory["memory_list"] == ["Be brief."]
    return decisions


def test_kill_9_mid_episode_then_continue_from_memory_gives_identical_decisions() -> None:
    process, url = start(*ARGS)
    try:
        reference = episode(lambda i: url)
    finally:
        process.kill()
    assert [d["tool_calls"][0]["arguments"]["id"] for d in reference[:3]] == ["sw1", "sw3", "sw2"]

    port = free_port()
    current = {"process": start(*ARGS, port=port)[0]}
    url = f"http://127.0.0.1:{port}"

    def killing(i: int) -> str:
        if i in (2, 4):  # mid-episode: the worker dies hard and a fresh one takes its place
            current["process"].send_signal(signal.SIGKILL)
            current["process"].wait(10)
            current["process"] = start(*ARGS, port=port)[0]
        return url

    try:
        assert episode(killing) == reference
    finally:
        current["process"].kill()


def test_two_replicas_taking_turns_give_the_same_results_as_one() -> None:
    one, url_one = start(*ARGS)
    a, url_a = start(*ARGS)
    b, url_b = start(*ARGS)
    try:
        single = episode(lambda i: url_one)
        alternating = episode(lambda i: (url_a, url_b)[i % 2])
    finally:
        for process in (one, a, b):
            process.kill()
    assert alternating == single


def test_sigterm_lets_the_in_flight_request_finish() -> None:
    process, url = start("--backend", "scripted", env={"LAVA_SCRIPTED_DELAY_S": "2"})
    result: dict = {}

    def call() -> None:
        result["response"] = httpx.post(f"{url}/v1/responses",
                                        json={"request_id": "r", "inputs": [user_input()]}, timeout=30)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.7)
    process.send_signal(signal.SIGTERM)
    caller.join(20)
    # uvicorn re-raises the signal once it has drained, so the exit status is the signal's.
    assert process.wait(20) in (0, -signal.SIGTERM)
    response = result["response"]
    assert response.status_code == 200 and response.json()[0]["status"] == "completed"


def test_api_keys_never_reach_logs_or_answers(tmp_path) -> None:
    """A server that quotes the key back in its error, with debug logging on: the key appears nowhere."""
    from servers import FaultyModelServer, uvicorn_thread

    secret = "sk-live-process-SECRET-5577aa"
    model = FaultyModelServer()
    model.mode = "echo_key"
    log = tmp_path / "lava.log"
    with uvicorn_thread(model.app()) as model_url, open(log, "w") as out:
        process, url = start("--backend", "openai", "--policy", "full_history", "--base-url", f"{model_url}/v1",
                             "--log-level", "debug",
                             env={"OPENAI_API_KEY": secret}, log=out)
        try:
            response = httpx.post(f"{url}/v1/responses", json={"request_id": "r", "inputs": [user_input()]},
                                  timeout=30)
        finally:
            process.terminate()
            process.wait(20)
    assert model.hits >= 1
    assert response.json()[0]["error"]["code"] == "backend_error"
    assert secret not in response.text
    text = log.read_text()
    assert "POST" in text or "HTTP" in text or "lava" in text  # the log did record the exchange
    assert secret not in text
