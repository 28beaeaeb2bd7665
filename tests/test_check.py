"""`lava check`: passes lava, and names exactly the broken rule of agents that each break one."""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lava import conformance
from lava.app import create_app
from lava.protocol import AgentRequest
from lava.settings import Settings
from servers import free_port, lava_process, uvicorn_thread

CHECK_NAMES = [name for name, _ in conformance.CHECKS]


def run_check(url: str, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    parser = argparse.ArgumentParser()
    conformance.add_parser(parser.add_subparsers(dest="command"))
    report = tmp_path / "check.json"
    args = parser.parse_args(["check", url, "--timeout", "30", "--json", str(report), *extra])
    return conformance.run(args), json.loads(report.read_text())


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {r["name"]: r["status"] for r in report["results"]}


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def toy_agent(fault: str | None = None) -> Starlette:
    """A minimal conforming agent (say-only, history in memory) that breaks one rule on request."""
    turns_by_input_id: dict[int, int] = {}  # server-side state: only the "stateful" fault uses it

    async def health(request: Request) -> Response:
        if fault == "not_ready":
            return JSONResponse({"detail": "model still loading"}, status_code=503)
        return JSONResponse({"status": "ready"})

    async def info(request: Request) -> Response:
        document: dict[str, Any] = {"protocol_version": "2.0", "agent_id": "toy-agent", "agent_version": "1.0",
                                    "capabilities": {"inference": True, "coaching": False}}
        if fault == "inference_string":
            document["capabilities"]["inference"] = "true"
        if fault == "old_protocol":
            document["protocol_version"] = "1.0"
        if fault == "coaching_session_version":
            document["coaching_session_version"] = "1"
        return JSONResponse(document)

    def candidates(entry: Any) -> list[dict[str, Any]]:
        say = "Understood."
        if fault == "stateful":
            turns_by_input_id[entry.id] = turns_by_input_id.get(entry.id, 0) + 1
            say = f"Understood, turn {turns_by_input_id[entry.id]}."
        shared = copy.deepcopy(entry.memory)
        outputs = []
        for index in range(entry.num_outputs):
            memory = shared if fault == "shared_memory" else copy.deepcopy(entry.memory)
            history = memory.setdefault("history", [])
            history += [{"author": "USER", "content": entry.instruction.content},
                        {"author": "MODEL", "content": json.dumps({"say": say, "action": {}})}]
            if fault == "drop_memory_list":
                memory.pop("memory_list", None)
            steps = []
            if fault == "nan_in_internal_steps":
                steps.append({"id": "step-0", "component": "toy", "confidence": float("nan")})
            output = {"source_id": entry.id, "candidate_index": index, "status": "completed", "memory": memory,
                      "internal_steps": steps, "output": {"say": say, "tool_calls": []}, "error": None}
            if fault == "error_keeps_turn" and index == 1:
                # The failed candidate returns its edited memory, not the input memory.
                output.update(status="error", output=None, error={"code": "invalid_output", "message": "bad"})
            if fault == "inconsistent_status":
                output["error"] = {"code": "none", "message": "no error"}
            outputs.append(output)
        return outputs[::-1] if fault == "reverse_candidates" else outputs

    async def responses(request: Request) -> Response:
        try:
            body = json.loads(await request.body(), parse_constant=_refuse_constant)
            parsed = AgentRequest.model_validate(body)
        except ValueError as exc:  # pydantic's ValidationError included
            return JSONResponse({"detail": str(exc)}, status_code=500 if fault == "500_on_bad_input" else 422)
        if not parsed.inputs and fault == "wrapped_empty":
            return JSONResponse({"outputs": []})
        if fault == "rejects_own_memory" and any(e.memory.get("history") for e in parsed.inputs):
            return JSONResponse({"detail": "unknown memory format"}, status_code=422)
        request_id = "not-the-request-id" if fault == "wrong_request_id" else parsed.request_id
        outputs = [{"request_id": request_id, **o} for entry in parsed.inputs for o in candidates(entry)]
        return Response(json.dumps(outputs), media_type="application/json")  # allow_nan: a fault needs it

    return Starlette(routes=[
        Route("/health", health),
        Route("/v1/info", info),
        Route("/v1/responses", responses, methods=["POST"]),
    ])


def test_lava_serve_scripted_passes_every_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with lava_process("--backend", "scripted", log=tmp_path / "serve.log") as url:
        exit_code, report = run_check(url, tmp_path)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "PASS"), report["results"]
    assert exit_code == 0 and report["exit_code"] == 0
    assert report["validator"].startswith("magma_core 2.0.1")
    table = capsys.readouterr().out
    assert all(f"{name} " in table for name in CHECK_NAMES)
    assert "10 checks: 10 passed, 0 failed, 0 skipped" in table


def test_the_conforming_toy_agent_passes_every_check(tmp_path: Path) -> None:
    # The baseline the fault cases below depart from: without a fault, nothing fails.
    with uvicorn_thread(toy_agent()) as url:
        exit_code, report = run_check(url, tmp_path)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "PASS"), report["results"]
    assert exit_code == 0


FAULTS = [
    # fault, the one check that must fail, a fragment of its detail
    ("not_ready", "health", "HTTP 503"),
    ("inference_string", "info", "inference='true'"),
    ("old_protocol", "info", "protocol_version is '1.0'"),
    ("coaching_session_version", "info", "coaching_session_version"),
    ("wrapped_empty", "empty-inputs", "JSON array"),
    ("reverse_candidates", "ordering", "output 0 is source_id 2 candidate 1, expected source_id 2 candidate 0"),
    ("shared_memory", "memory-independence", "records this input 3 times"),
    ("error_keeps_turn", "memory-independence", "candidate 1: an error candidate must return the input memory"),
    ("drop_memory_list", "memory-list", "memory_list missing"),
    ("stateful", "deterministic-repeat", '"tool_calls": []} then {"say": "Understood, turn '),
    ("rejects_own_memory", "follow-up", "HTTP 422"),
    ("500_on_bad_input", "bad-input", "malformed JSON -> 500"),
    ("wrong_request_id", "strict-types", "request_id 'not-the-request-id' is not the request's"),
    ("inconsistent_status", "strict-types", "Completed candidates"),
    ("nan_in_internal_steps", "strict-types", "NaN is not JSON"),
]


@pytest.mark.parametrize(("fault", "failing", "detail"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_broken_agent_fails_exactly_the_check_for_its_fault(tmp_path: Path, fault: str, failing: str,
                                                              detail: str) -> None:
    with uvicorn_thread(toy_agent(fault)) as url:
        exit_code, report = run_check(url, tmp_path)
    results = {r["name"]: r for r in report["results"]}
    assert {name for name, r in results.items() if r["status"] != "PASS"} == {failing}, report["results"]
    assert results[failing]["status"] == "FAIL"
    assert detail in results[failing]["detail"]
    assert exit_code == 1 and report["exit_code"] == 1


def test_bad_input_lists_every_request_the_agent_accepted(tmp_path: Path) -> None:
    async def accept_anything(request: Request) -> Response:
        return JSONResponse([])

    app = toy_agent()
    app.router.routes[2] = Route("/v1/responses", accept_anything, methods=["POST"])
    with uvicorn_thread(app) as url:
        _, report = run_check(url, tmp_path)
    detail = next(r["detail"] for r in report["results"] if r["name"] == "bad-input")
    assert detail.startswith('malformed JSON -> 200; body is an array -> 200; num_outputs "2" -> 200')
    assert "and 13 more" in detail


def test_the_bearer_token_reaches_a_server_that_requires_one(tmp_path: Path) -> None:
    token = "a-long-enough-conformance-token"
    with uvicorn_thread(create_app(Settings(backend="scripted", auth_token=token))) as url:
        without_token, refused = run_check(url, tmp_path)
        with_token, accepted = run_check(url, tmp_path, "--token", token)
    assert statuses(accepted) == dict.fromkeys(CHECK_NAMES, "PASS"), accepted["results"]
    assert with_token == 0
    # /health is open; every other route answers 401, which must not pass as "rejects bad input".
    assert statuses(refused)["health"] == "PASS"
    assert statuses(refused)["info"] == "FAIL" and "HTTP 401; pass --token" in refused["results"][1]["detail"]
    assert statuses(refused)["bad-input"] == "SKIP"
    assert without_token == 1


def test_an_unreachable_server_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the port was only bound to pick it
    exit_code, report = run_check(url, tmp_path)
    assert exit_code == 2
    assert report == {"url": url, "reachable": False, "error": report["error"], "exit_code": 2, "results": []}
    assert "ConnectError" in report["error"]
    assert "is unreachable" in capsys.readouterr().err


def test_without_magma_core_the_probe_validates_with_lavas_own_models(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "magma_core.protocol", None)  # None in sys.modules: ImportError
    assert conformance.load_contract().source.startswith("lava.protocol")
    with uvicorn_thread(toy_agent("coaching_session_version")) as url:
        exit_code, report = run_check(url, tmp_path)
    assert report["validator"].startswith("lava.protocol")
    info = next(r for r in report["results"] if r["name"] == "info")
    assert info["status"] == "FAIL" and "coaching_session_version" in info["detail"]
    assert exit_code == 1
