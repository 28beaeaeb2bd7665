"""Specialized coaching over HTTP, checked with the real magma_core 2.0.1 models as MAGMA-GEN checks it.

The coaching backend is a real OpenAI-compatible server on 127.0.0.1 reached through the real
OpenAI SDK (`FaultyModelServer`, which misbehaves on demand); test_coaching_live.py does the same
against llama.cpp.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from magma_core.protocol.agent import AgentInfo, AgentResponse

from coaching_helpers import (
    PRESS,
    backend_config,
    call,
    coaching_request,
    post_coaching,
    reinjected,
    session_config,
)
from lava.coaching.models import CoachingSessionConfig
from lava.coaching.sessions import CoachingSessions, SessionConflict, UnknownSession
from servers import FaultyModelServer, free_port, uvicorn_thread

RUN = "run-1"


@pytest.fixture(scope="module")
def model_server():
    server = FaultyModelServer()
    with uvicorn_thread(server.app()) as url:
        yield server, url


@pytest.fixture
def coach(model_server):
    server, url = model_server
    server.mode = "ok"
    return server, url


@pytest.fixture
def client(make_client, coach):
    _, url = coach
    client = make_client()
    assert client.put(f"/v1/coaching/sessions/{RUN}", json=session_config(url)).status_code == 204
    yield client
    client.delete(f"/v1/coaching/sessions/{RUN}")


# -- the wire models ------------------------------------------------------------------------

CORE_MODELS = ["CoachingBackendConfig", "CoachingSessionConfig", "CoachingStage", "CoachingError",
               "CoachingDiagnosis", "CoachingStep", "ReinjectionPoint", "SpecializedCoachingRequest",
               "CoachingProposal", "CoachingLog", "SpecializedCoachingResponse", "ReplaceSay"]


@pytest.mark.parametrize("name", CORE_MODELS)
def test_lava_s_coaching_models_are_core_2_0_1_s_field_for_field(name) -> None:
    from magma_core.protocol import agent_coaching as core

    from lava.coaching import models

    assert getattr(models, name).model_json_schema() == getattr(core, name).model_json_schema()


SAMPLES = [
    ("ReinjectionPoint", {"id": "replacement"}),
    ("ReinjectionPoint", {"id": "both", "input_step_id": 1, "input": PRESS}),
    ("CoachingSessionConfig", {"backends": {}}),
    ("CoachingSessionConfig", {"backends": {"a": {"type": "ollama", "endpoint": "e", "default_model": "m",
                                                  "timeout": 5}}}),
    ("CoachingBackendConfig", {"type": "ollama", "endpoint": "e", "default_model": "m", "timeout": 0}),
    ("SpecializedCoachingResponse", {"request_id": "r", "status": "corrected"}),
    ("SpecializedCoachingResponse", {"request_id": "r", "status": "abandoned"}),
    ("SpecializedCoachingResponse", {"request_id": "r", "status": "abandoned", "reason": "no"}),
    ("CoachingLog", {"coaching_type": "Failure", "content": ""}),
    ("ReplaceSay", {"kind": "replace_say", "text": ""}),
    ("SpecializedCoachingRequest", {**coaching_request("format").model_dump(mode="json"), "target_step_id": 99}),
    ("SpecializedCoachingRequest", coaching_request("format").model_dump(mode="json")),
]


@pytest.mark.parametrize(("name", "data"), SAMPLES)
def test_lava_s_coaching_models_accept_exactly_what_core_accepts(name, data) -> None:
    from magma_core.protocol import agent_coaching as core
    from pydantic import ValidationError

    from lava.coaching import models

    def accepts(model) -> bool:
        try:
            model.model_validate(data)
        except ValidationError:
            return False
        return True

    assert accepts(getattr(models, name)) == accepts(getattr(core, name))


# -- /v1/info -------------------------------------------------------------------------------


def test_info_advertises_every_coaching_kind_and_resume(make_client) -> None:
    info = make_client().get("/v1/info").json()
    parsed = AgentInfo.model_validate(info)
    assert parsed.specialized_coaching == ["failure", "suboptimal", "format"]
    assert parsed.coaching_resume is True
    assert parsed.coaching_unavailable_reason is None
    assert info["capabilities"] == {"inference": True, "coaching": True}
    assert "coaching_session_version" not in info


# -- sessions -------------------------------------------------------------------------------


def test_session_lifecycle_identical_put_is_a_no_op_and_a_different_one_conflicts(make_client, coach) -> None:
    server, url = coach
    client = make_client()
    before = server.hits
    assert client.put("/v1/coaching/sessions/run-a", json=session_config(url)).status_code == 204
    assert server.hits == before + 1  # the backend was probed once
    assert client.put("/v1/coaching/sessions/run-a", json=session_config(url)).status_code == 204
    assert server.hits == before + 1  # ... and not again for the identical configuration
    other = client.put("/v1/coaching/sessions/run-a", json=session_config(url, model="another"))
    assert other.status_code == 409
    assert client.delete("/v1/coaching/sessions/run-a").status_code == 204
    assert client.delete("/v1/coaching/sessions/run-a").status_code == 204  # idempotent
    assert client.delete("/v1/coaching/sessions/never-opened").status_code == 204
    # Once closed, the run id may be configured anew, with another configuration.
    assert client.put("/v1/coaching/sessions/run-a", json=session_config(url, model="another")).status_code == 204
    client.delete("/v1/coaching/sessions/run-a")


def test_unreachable_backend_is_503_and_opens_no_session(make_client) -> None:
    client = make_client()
    closed = f"http://127.0.0.1:{free_port()}"
    response = client.put("/v1/coaching/sessions/run-b", json=session_config(closed))
    assert response.status_code == 503
    assert "verify backend connectivity" in response.json()["detail"]
    assert client.post("/v1/coaching", json=coaching_request("format", run_id="run-b").model_dump(
        mode="json")).status_code == 404


@pytest.mark.parametrize(("change", "why"), [
    ({"type": "vllm"}, "unknown coaching backend type"),
    ({"endpoint": "http://127.0.0.1:9/api/chat"}, "not a chat-completions URL"),
])
def test_backends_lava_cannot_use_are_422_naming_the_field_before_any_is_contacted(make_client, coach, change,
                                                                                    why) -> None:
    server, url = coach
    config = {"backends": {"first": backend_config(url).model_dump(mode="json"),
                           "second": {**backend_config(url).model_dump(mode="json"), **change}}}
    before = server.hits
    response = make_client().put("/v1/coaching/sessions/run-c", json=config)
    assert response.status_code == 422
    (detail,) = response.json()["detail"]
    assert detail["loc"] == ["body", "backends", "second", next(iter(change))]
    assert why in detail["msg"]
    assert server.hits == before


def test_backend_failing_its_probe_is_503(make_client, coach) -> None:
    server, url = coach
    server.mode = "500"
    assert make_client().put("/v1/coaching/sessions/run-d", json=session_config(url)).status_code == 503


def test_session_config_is_validated_as_strictly_as_core_2_0_1(make_client, coach) -> None:
    _, url = coach
    client = make_client()
    legacy = {**session_config(url), "provider": "llm"}  # removed in core 2.0.1
    assert client.put("/v1/coaching/sessions/run-e", json=legacy).status_code == 422
    assert client.put("/v1/coaching/sessions/run-e", json={"backends": {}}).status_code == 422
    assert client.post("/v1/coaching", json={"run_id": RUN}).status_code == 422


def test_configured_headers_reach_the_backend(make_client) -> None:
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    seen = []

    async def chat(request):
        seen.append(request.headers.get("authorization"))
        if request.headers.get("authorization") != "Bearer from-gen":
            return JSONResponse({"error": {"message": "no"}}, status_code=401)
        return JSONResponse({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "OK"}}]})

    with uvicorn_thread(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as url:
        client = make_client()
        config = session_config(url, headers={"Authorization": "Bearer from-gen"})
        assert client.put("/v1/coaching/sessions/run-f", json=config).status_code == 204
        client.delete("/v1/coaching/sessions/run-f")
    assert seen == ["Bearer from-gen"]


def test_post_for_an_unknown_session_is_404(make_client) -> None:
    request = coaching_request("format", run_id="nobody")
    assert make_client().post("/v1/coaching", json=request.model_dump(mode="json")).status_code == 404


def test_close_waits_for_the_requests_holding_the_session() -> None:
    async def scenario() -> list[str]:
        events: list[str] = []

        async def connect(config):
            from lava.backends.scripted import ScriptedBackend

            return ScriptedBackend()

        sessions = CoachingSessions(connect)
        config = CoachingSessionConfig.model_validate({"backends": {"a": backend_config("http://127.0.0.1:9")
                                                                    .model_dump(mode="json")}})
        assert await sessions.configure("r", config) is True
        assert await sessions.configure("r", config) is False
        held = asyncio.Event()
        release = asyncio.Event()

        async def request() -> None:
            async with sessions.acquire("r"):
                held.set()
                await release.wait()
                events.append("request done")

        task = asyncio.create_task(request())
        await held.wait()
        closing = asyncio.create_task(sessions.close("r"))
        await asyncio.sleep(0.05)
        events.append("close pending" if not closing.done() else "close done early")
        with pytest.raises(SessionConflict):  # a closing session refuses configuration...
            await sessions.configure("r", config)
        with pytest.raises(UnknownSession):  # ... and new requests
            async with sessions.acquire("r"):
                pass
        release.set()
        await task
        await closing
        events.append("closed" if "r" not in sessions else "still open")
        return events

    assert asyncio.run(scenario()) == ["close pending", "request done", "closed"]


# -- corrections ----------------------------------------------------------------------------


def test_format_repaired_from_the_input_alone_without_a_model_call(client, coach) -> None:
    server, _ = coach
    raw = json.dumps({"tool_calls": [{"robot": "panda", "name": "press_button",
                                      "arguments": {"id": "sw1", "force": "high"}}]})
    request = coaching_request(
        "format", error={"code": "invalid_output", "message": "press_button got unknown arguments: force"},
        internal_steps=[{"id": "step-0", "component": "commander", "origin": "model", "full_prompt": "p",
                         "input_elements": {}, "output_raw": raw}],
    )
    before = server.hits
    answer = post_coaching(client, request)
    assert answer.status == "corrected", answer.reason
    assert server.hits == before
    (proposal,) = answer.proposals
    assert proposal.reinjection_point_id == "replacement"
    assert proposal.extra_keys == {"kind": "replace_decision", "decision": {"say": "", "tool_calls": [call("sw1")]}}
    assert answer.logs and answer.logs[0].coaching_type == "format"


def test_failure_takes_an_exact_expected_decision_from_the_diagnosis(client, coach) -> None:
    server, _ = coach
    request = coaching_request(
        "failure", output={"say": "", "tool_calls": [call("sw3")]},
        diagnosis={"explanation": "sw3 was pressed before sw1",
                   "expected_decision": "CALLS: panda.press_button(id=sw1)"},
    )
    before = server.hits
    answer = post_coaching(client, request)
    assert answer.status == "corrected", answer.reason
    assert server.hits == before
    assert answer.proposals[0].extra_keys["decision"] == {"say": "", "tool_calls": [call("sw1")]}


def test_failure_asks_the_coaching_model_and_proposes_at_every_point_that_accepts_it(client, coach) -> None:
    server, _ = coach
    recovery = {**PRESS, "instruction": {"type": "env", "content": json.dumps({
        "infos": "panda: press_button failed with message: sw9 does not exist",
        "previous_tool_call": {"panda": {"name": "press_button", "arguments": {"id": "sw9"}}}})}}
    request = coaching_request(
        "failure", output={"say": "", "tool_calls": [call("sw9")]},
        execution={"diagnosable": True, "execution_results": [
            {"robot": "panda", "tool": "press_button", "result": False, "error_flag": "bad_call",
             "message": "sw9 does not exist"}]},
        diagnosis={"explanation": "sw9 is not a button", "expected_decision": "press the button the user asked for"},
        recovery=recovery,
    )
    before = server.hits
    answer = post_coaching(client, request)
    assert answer.status == "corrected", answer.reason
    assert server.hits == before + 1  # the prose expectation is not a decision: the model was asked
    assert [p.reinjection_point_id for p in answer.proposals] == ["replacement", "recovery"]
    assert all(p.extra_keys["decision"]["tool_calls"] == [call("sw1")] for p in answer.proposals)
    log = answer.logs[0].content
    assert "sw9 is not a button" in log and "sw9 does not exist" in log  # the review reached the prompt


def test_a_correction_that_repeats_the_rejected_decision_is_abandoned(client, coach) -> None:
    server, _ = coach  # the model keeps answering press_button(sw1), the very decision that failed
    request = coaching_request("suboptimal", output={"say": "", "tool_calls": [call("sw1")]},
                               diagnosis={"explanation": "a shorter way exists", "expected_decision": None})
    before = server.hits
    answer = post_coaching(client, request)
    assert answer.status == "abandoned"
    assert not answer.proposals
    assert "rejected" in answer.reason
    assert server.hits == before + 2  # asked once more with the reason, then gave up


@pytest.mark.parametrize("mode", ["garbage", "invalid_tool", "wrong_robot"])
def test_a_model_that_gives_no_valid_decision_means_abandoned_never_an_invalid_proposal(client, coach, mode) -> None:
    server, _ = coach
    server.mode = mode
    answer = post_coaching(client, coaching_request(
        "format", error={"code": "invalid_output", "message": "unreadable"}))
    assert answer.status == "abandoned"
    assert answer.reason and not answer.proposals


def test_a_backend_failing_during_the_session_gives_an_error_answer(client, coach) -> None:
    server, _ = coach
    server.mode = "500"
    answer = post_coaching(client, coaching_request("format", error={"code": "invalid_output", "message": "x"}))
    assert answer.status == "error"
    assert "500" in answer.reason


def test_an_unusable_target_input_is_abandoned(client) -> None:
    broken = {**PRESS, "memory": {"memory_list": "not a list"}}
    answer = post_coaching(client, coaching_request("format", agent_input=broken,
                                                    error={"code": "invalid_output", "message": "x"}))
    assert answer.status == "abandoned"
    assert "memory_list" in answer.reason


def test_logs_only_when_the_session_captures_them(make_client, coach) -> None:
    _, url = coach
    client = make_client()
    config = {**session_config(url), "capture_logs": False}
    assert client.put("/v1/coaching/sessions/quiet", json=config).status_code == 204
    answer = post_coaching(client, coaching_request(
        "failure", run_id="quiet", output={"say": "", "tool_calls": [call("sw3")]},
        diagnosis={"explanation": "wrong button", "expected_decision": "CALLS: panda.press_button(id=sw1)"}))
    assert answer.status == "corrected" and answer.logs == []
    client.delete("/v1/coaching/sessions/quiet")


def test_a_proposal_reinjected_as_gen_does_is_applied_without_a_model_call(client) -> None:
    answer = post_coaching(client, coaching_request(
        "failure", output={"say": "", "tool_calls": [call("sw3")]},
        diagnosis={"explanation": "wrong order", "expected_decision": "panda.press_button(id=sw1)"}))
    request = reinjected(PRESS, answer.proposals[0].extra_keys)
    decisions = client.app.state.runtime.backend  # the scripted backend lava decides with
    before = len(decisions.requests)
    outputs = AgentResponse.model_validate(client.post("/v1/responses", json=request).json()).root
    assert len(decisions.requests) == before
    (output,) = outputs
    assert output.status == "completed"
    assert output.output.model_dump(mode="json")["tool_calls"] == [call("sw1")]
    assert output.internal_steps[0]["origin"] == "coaching"


def test_sessions_and_their_backends_close_when_the_server_stops() -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from lava.backends.scripted import ScriptedBackend
    from lava.coaching.routes import coaching_router

    opened: list[ScriptedBackend] = []
    closed: list[ScriptedBackend] = []

    class Backend(ScriptedBackend):
        async def close(self) -> None:
            closed.append(self)

    async def connect(config):
        opened.append(Backend())
        return opened[-1]

    sessions = CoachingSessions(connect)
    app = FastAPI()
    app.include_router(coaching_router(sessions))
    with TestClient(app) as client:
        assert client.put("/v1/coaching/sessions/run-z", json=session_config("http://127.0.0.1:9")).status_code == 204
        assert "run-z" in sessions and not closed
    assert "run-z" not in sessions
    assert closed == opened and len(opened) == 1


def test_info_fields_follow_what_is_actually_served() -> None:
    from lava.coaching.routes import coaching_info
    from lava.policies import create_policy
    from lava.policies.full_history import FullHistoryPolicy
    from lava.settings import Settings

    settings = Settings(backend="scripted")
    bare = FullHistoryPolicy(None, settings)  # type: ignore[arg-type]
    served = coaching_info(create_policy(settings, None), routes_mounted=True)  # type: ignore[arg-type]
    unmounted = coaching_info(bare, routes_mounted=False)
    base = {"protocol_version": "2.0", "agent_id": "lava", "agent_version": "0", "capabilities": {"inference": True}}
    for fields in (served, unmounted):
        AgentInfo.model_validate({**base, **fields})
    assert served == {"specialized_coaching": ["failure", "suboptimal", "format"], "coaching_resume": True,
                      "coaching_unavailable_reason": None}
    assert unmounted["specialized_coaching"] == [] and unmounted["coaching_resume"] is False
    assert unmounted["coaching_unavailable_reason"]


def test_bodies_are_bounded_and_strict(make_client) -> None:
    client = make_client(max_body_bytes=2000)
    request = coaching_request("format", error={"code": "invalid_output", "message": "x" * 3000})
    assert client.post("/v1/coaching", json=request.model_dump(mode="json")).status_code == 413
    body = json.dumps(coaching_request("format").model_dump(mode="json")).replace('"memory": {}',
                                                                                  '"memory": {"x": NaN}')
    assert "NaN" in body
    response = make_client().post("/v1/coaching", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
