"""Structured logs: every line logged while a request is handled names its request (and input),
whoever logged it (engine, backend, uvicorn), as JSON when asked, with secrets still masked."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest
import uvicorn

from conftest import user_input
from lava.app import create_app
from lava.backends.scripted import FunctionBackend, ScriptedBackend
from lava.logs import configure_logging
from lava.policies.base import CandidateResult, Policy
from lava.protocol import AgentDecision
from lava.security import Redactor
from lava.settings import Settings
from servers import free_port, lava_process

SECRET = "sk-live-0123456789abcdef0123"
backend_log = logging.getLogger("lava.backends.under_test")


@pytest.fixture
def captured_logs() -> Iterator[Any]:
    """lava's logging setup (as `lava serve` installs it) writing to a buffer; undone afterwards."""
    root = logging.getLogger()
    level = root.level
    handlers: list[logging.Handler] = []
    stream = io.StringIO()

    def install(log_format: str = "json") -> io.StringIO:
        handlers.append(configure_logging("debug", log_format, Redactor([SECRET]), stream))
        return stream

    yield install
    for handler in handlers:
        root.removeHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.fixture
def serve():
    """Run an app under uvicorn as `lava serve` does (log_config=None: its records reach the root handler)."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []
    # Servers started earlier in this process with uvicorn's own logging config stopped its loggers
    # from propagating; a fresh `lava serve` process starts with them pristine, as here.
    saved = {}
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.propagate, logger.level)
        logger.handlers, logger.propagate, logger.level = [], True, logging.NOTSET

    def start(app) -> str:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(10)
    for name, (handlers, propagate, level) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate, logger.level = handlers, propagate, level


def request(*inputs: dict[str, Any], request_id: str) -> dict[str, Any]:
    return {"request_id": request_id, "inputs": list(inputs)}


def post(url: str, payload: dict[str, Any]) -> tuple[int, Any]:
    """A client that logs nothing itself (it shares the process, and so the root logger, with the server)."""
    data = json.dumps(payload).encode()
    call = urllib.request.Request(f"{url}/v1/responses", data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(call, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def lines_of(stream: io.StringIO, start: int = 0) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue()[start:].splitlines()]


def test_every_line_logged_during_a_request_is_json_with_its_request_id(captured_logs, serve) -> None:
    def chatty(generation):
        source = generation.situation.input.id
        backend_log.warning("backend deciding input %s with key %s", source, SECRET)
        if source == 7:
            raise RuntimeError("this backend has a bug")
        return ['{"say": "hello"}'] * generation.n

    url = serve(create_app(Settings(backend="scripted", policy="full_history"), backend=FunctionBackend(chatty)))
    stream = captured_logs("json")
    start = len(stream.getvalue())
    status, answer = post(url, request(user_input(id=3), user_input(id=7), request_id="req-json-1"))
    assert status == 200
    assert [output["status"] for output in answer] == ["completed", "error"]
    time.sleep(0.1)  # the server thread may still be writing its last lines

    lines = lines_of(stream, start)
    assert lines, "the request logged nothing"
    assert all(line["request_id"] == "req-json-1" for line in lines), lines
    backend_lines = [line for line in lines if line["logger"] == backend_log.name]
    assert sorted(line["source_id"] for line in backend_lines) == [3, 7]
    for line in backend_lines:
        assert line["message"] == f"backend deciding input {line['source_id']} with key [redacted]"
    (failure,) = [line for line in lines if line["logger"] == "lava.engine"]
    assert failure["level"] == "error" and failure["source_id"] == 7
    assert "RuntimeError: this backend has a bug" in failure["exception"]
    assert any(line["logger"] == "lava.app" and "answered 2 candidates (1 errors)" in line["message"] for line in lines)
    assert SECRET not in stream.getvalue()


class UnencodablePolicy(Policy):
    """A bug that escapes the engine: a memory that cannot be written as JSON, so the route fails."""

    name = "unencodable"

    async def decide(self, situation, memories):
        return [CandidateResult(decision=AgentDecision(say="hi"), memory={"x": object()}) for _ in memories]


def test_uvicorns_report_of_a_failed_request_carries_its_request_id(captured_logs, serve) -> None:
    settings = Settings(backend="scripted", policy="full_history")
    app = create_app(settings, policy=UnencodablePolicy(ScriptedBackend(), settings))
    url = serve(app)
    stream = captured_logs("json")
    start = len(stream.getvalue())
    status, _ = post(url, request(user_input(), request_id="req-broken"))
    assert status == 500
    time.sleep(0.1)
    lines = lines_of(stream, start)
    (report,) = [line for line in lines if line["logger"] == "uvicorn.error"]
    assert report["message"].strip() == "Exception in ASGI application"
    assert "TypeError" in report["exception"]
    assert all(line["request_id"] == "req-broken" for line in lines)


def test_lines_outside_requests_carry_no_request_id(captured_logs) -> None:
    stream = captured_logs("json")
    logging.getLogger("lava.test").info("between requests")
    (line,) = lines_of(stream)
    assert line["message"] == "between requests" and "request_id" not in line and "source_id" not in line


def test_text_lines_name_the_request_and_input(captured_logs) -> None:
    from lava.logs import request_id_var, source_id_var

    stream = captured_logs("text")

    def in_request() -> None:
        request_id_var.set("req-text")
        logging.getLogger("lava.test").info("no input yet")
        source_id_var.set(5)
        logging.getLogger("lava.test").info("deciding, key %s", SECRET)

    import contextvars

    contextvars.copy_context().run(in_request)
    first, second = stream.getvalue().splitlines()
    assert first.endswith("INFO lava.test [req-text]: no input yet")
    assert second.endswith("INFO lava.test [req-text input 5]: deciding, key [redacted]")


def test_warnings_become_json_lines(captured_logs) -> None:
    import warnings

    stream = captured_logs("json")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("an SDK deprecation", DeprecationWarning, stacklevel=1)
    (line,) = lines_of(stream)
    assert line["logger"] == "py.warnings" and "an SDK deprecation" in line["message"]


def test_lava_serve_writes_json_lines_with_request_ids(tmp_path) -> None:
    log = tmp_path / "lava.log"
    with lava_process("--backend", "scripted", "--log-level", "debug", env={"LAVA_LOG_FORMAT": "json"},
                      log=log) as url:
        answer = httpx.post(f"{url}/v1/responses", json=request(user_input(), request_id="req-process"), timeout=30)
        assert answer.status_code == 200
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(line["logger"] == "uvicorn.error" and "Uvicorn running" in line["message"] for line in lines)
    answered = [line for line in lines if line["message"].startswith("answered ")]
    assert [line["request_id"] for line in answered] == ["req-process"]
