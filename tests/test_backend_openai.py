"""The OpenAI-compatible backend at the transport seam: profiles, fallbacks, retries, errors."""

from __future__ import annotations

import asyncio
import time

import httpx2 as httpx
import pytest

from conftest import user_input
from lava.backends.base import GenerationRequest, Message
from lava.backends.openai_compat import OpenAICompatBackend, guess_profile, strict_object_schema
from lava.backends.retry import Failure, RetryPolicy, with_retries
from lava.deadlines import set_deadline
from lava.engine import Engine
from lava.errors import BackendRateLimited, BackendResponseError, BackendTimeout, BackendUnavailable
from lava.policies.full_history import FullHistoryPolicy
from lava.protocol import AgentRequest
from lava.settings import Settings
from lava.tools import ToolBox
from recorded import Replay, recording

TOOLBOX = ToolBox.from_input(user_input()["tools"], user_input()["attributes"])
SECRET = "sk-test-DO-NOT-LEAK-4242"


def gen_request(n: int = 1, greedy: bool = False) -> GenerationRequest:
    return GenerationRequest(
        messages=(Message("system", "rules"), Message("user", "Please press sw1")),
        n=n, greedy=greedy, seed=7, json_schema=TOOLBOX.decision_schema(),
    )


def backend(replay: Replay, profile: str | None, base_url: str | None = "http://127.0.0.1:9/v1",
            attempts: int = 4, **kw) -> OpenAICompatBackend:
    return OpenAICompatBackend(model="m", base_url=base_url, api_key=SECRET, profile=profile,
                               retry=RetryPolicy(attempts=attempts, base_delay_s=0.01), http_client=replay.client(),
                               **kw)


def test_profiles_are_guessed_from_the_url() -> None:
    assert guess_profile(None) == "openai"
    assert guess_profile("https://api.openai.com/v1") == "openai"
    assert guess_profile("http://localhost:11434/v1") == "ollama"
    assert guess_profile("https://generativelanguage.googleapis.com/v1beta/openai/") == "gemini-openai"
    assert guess_profile("http://gpu-box:8000/v1") == "generic"


def test_openai_n_in_one_call_with_strict_schema() -> None:
    replay = Replay([(200, recording("openai_chat_n2.json"))])
    completions = asyncio.run(backend(replay, "openai", base_url=None).generate(gen_request(n=2)))
    assert replay.exhausted and len(replay.requests) == 1
    body = replay.bodies[0]
    assert body["n"] == 2 and body["seed"] == 7
    assert replay.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["type"] == "object"  # strict mode: object root
    assert set(fmt["json_schema"]["schema"]["required"]) == {"say", "tool_calls"}
    assert [c.text.startswith('{"say":"') for c in completions] == [True, True]
    assert completions[0].usage.input_tokens == 412 and completions[0].usage.cached_tokens == 384
    assert sum(c.usage.output_tokens for c in completions) == 40  # 41 split over two choices


def test_strict_schema_has_no_keywords_strict_mode_refuses() -> None:
    text = str(strict_object_schema(TOOLBOX.decision_schema()))
    for keyword in ("'const'", "'minLength'", "'pattern'", "'minItems'", "'anyOf': [{'type': 'object', 'properties': "
                    "{'tool_calls'"):
        assert keyword not in text


def test_llama_cpp_server_profile_uses_json_object_schema_and_fans_out_n() -> None:
    replay = Replay([(200, recording("llama_cpp_server_chat.json"))] * 2)
    completions = asyncio.run(backend(replay, "llama-cpp").generate(gen_request(n=2)))
    assert replay.exhausted and len(completions) == 2
    for body in replay.bodies:
        assert "n" not in body
        assert body["response_format"]["type"] == "json_object"
        assert body["response_format"]["schema"] == TOOLBOX.decision_schema()
    assert {b["seed"] for b in replay.bodies} == {7, 8}  # distinct samples


def test_ollama_profile_ignored_n_is_fanned_out() -> None:
    replay = Replay([(200, recording("ollama_chat.json"))] * 3)
    b = backend(replay, None, base_url="http://127.0.0.1:11434/v1")
    assert b.profile.name == "ollama"
    completions = asyncio.run(b.generate(gen_request(n=3)))
    assert replay.exhausted and len(completions) == 3
    assert all(body["response_format"]["type"] == "json_schema" for body in replay.bodies)


def test_server_that_returns_fewer_choices_than_n_is_completed_by_extra_calls() -> None:
    one_choice = recording("llama_cpp_server_chat.json")
    replay = Replay([(200, one_choice), (200, one_choice)])
    completions = asyncio.run(backend(replay, "vllm").generate(gen_request(n=2)))
    assert len(completions) == 2 and replay.exhausted
    assert replay.bodies[0]["n"] == 2 and "n" not in replay.bodies[1]


def test_refused_json_schema_falls_back_once_and_is_remembered() -> None:
    refused = recording("llama_cpp_server_json_schema_error.json")
    replay = Replay([(500, refused["body"]), (200, recording("llama_cpp_server_chat.json")),
                     (200, recording("llama_cpp_server_chat.json"))])
    b = backend(replay, "generic", attempts=1)
    asyncio.run(b.generate(gen_request()))
    asyncio.run(b.generate(gen_request()))
    assert replay.exhausted
    assert [body["response_format"]["type"] for body in replay.bodies] == ["json_schema", "json_object",
                                                                          "json_object"]
    assert b.structured == "json_object_schema"


def test_429_honours_retry_after_then_succeeds() -> None:
    replay = Replay([(429, {"error": {"message": "Rate limit reached"}}, {"retry-after": "0.3"}),
                     (200, recording("ollama_chat.json"))])
    started = time.perf_counter()
    (completion,) = asyncio.run(backend(replay, "ollama").generate(gen_request()))
    assert time.perf_counter() - started >= 0.3
    assert completion.retries == 1 and replay.exhausted


def test_5xx_retried_with_backoff_then_gives_up_without_storming() -> None:
    replay = Replay([(503, {"error": {"message": "overloaded"}})] * 3)
    with pytest.raises(BackendResponseError, match="503"):
        asyncio.run(backend(replay, "vllm", attempts=3).generate(gen_request()))
    assert len(replay.requests) == 3  # exactly the configured attempts


def test_4xx_is_not_retried() -> None:
    replay = Replay([(401, {"error": {"message": "Incorrect API key provided"}})])
    with pytest.raises(BackendResponseError, match="401") as raised:
        asyncio.run(backend(replay, "openai", base_url=None).generate(gen_request()))
    assert len(replay.requests) == 1
    assert SECRET not in str(raised.value)


def test_429_exhausted_is_rate_limited() -> None:
    replay = Replay([(429, {"error": {"message": "slow down"}})] * 2)
    with pytest.raises(BackendRateLimited):
        asyncio.run(backend(replay, "vllm", attempts=2).generate(gen_request()))


def test_connection_refused_is_unavailable() -> None:
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    replay = Replay([refuse, refuse])
    with pytest.raises(BackendUnavailable):
        asyncio.run(backend(replay, "vllm", attempts=2).generate(gen_request()))


def test_the_last_attempt_keeps_its_cause_however_little_time_is_left() -> None:
    """The deadline cuts retries short, but where no retry was due the failure's own code stands."""
    refused = Failure(BackendUnavailable("cannot reach the server"), transient=True)

    async def attempt() -> None:
        raise refused

    async def run_with_a_deadline(policy: RetryPolicy) -> None:
        set_deadline(time.monotonic() + 1.0)
        await with_retries(attempt, lambda exc: refused, policy)

    with pytest.raises(BackendUnavailable, match="cannot reach"):
        asyncio.run(run_with_a_deadline(RetryPolicy(attempts=1, base_delay_s=10.0)))
    with pytest.raises(BackendTimeout, match="deadline leaves"):  # a retry that would overrun it is not waited for
        asyncio.run(run_with_a_deadline(RetryPolicy(attempts=2, base_delay_s=10.0)))


def test_responses_api() -> None:
    replay = Replay([(200, recording("openai_responses.json"))])
    (completion,) = asyncio.run(backend(replay, "openai", base_url=None, api="responses").generate(gen_request()))
    assert replay.requests[0].url.path.endswith("/responses")
    body = replay.bodies[0]
    assert body["text"]["format"]["type"] == "json_schema" and body["input"][1]["content"] == "Please press sw1"
    assert completion.text == '{"say":"Done, sw1 is pressed.","tool_calls":[]}'
    assert completion.usage.input_tokens == 398


def test_greedy_requests_temperature_zero() -> None:
    replay = Replay([(200, recording("ollama_chat.json"))])
    asyncio.run(backend(replay, "ollama").generate(gen_request(greedy=True)))
    assert replay.bodies[0]["temperature"] == 0.0


def test_through_the_engine_candidates_and_traces(monkeypatch) -> None:
    replay = Replay([(200, recording("openai_chat_n2.json"))])
    b = backend(replay, "openai", base_url=None)
    engine = Engine(FullHistoryPolicy(b, Settings(backend="openai")))
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [user_input(n=2)]})
    first, second = asyncio.run(engine.respond(request))
    assert first["output"]["tool_calls"][0]["name"] == "press_button" and first["output"]["say"] == ""
    assert second["output"] == {"say": "Which button should I press first?", "tool_calls": []}
    assert SECRET not in str([first, second])


def test_unreachable_server_gives_error_candidates_not_a_failed_start(make_client) -> None:
    from lava.app import create_app

    settings = Settings(backend="openai", base_url="http://127.0.0.1:1/v1", backend_attempts=2,
                        openai_api_key=SECRET)
    from fastapi.testclient import TestClient

    with TestClient(create_app(settings)) as client:
        assert client.get("/health").status_code == 200
        memory = {"memory_list": ["keep it"], "history": []}
        # A request only the model can place (no button named): the unreachable server is asked.
        entry = user_input("Please press the blinking button", memory=memory)
        response = client.post("/v1/responses", json={"request_id": "r", "inputs": [entry]})
    assert response.status_code == 200
    (out,) = response.json()
    assert out["status"] == "error" and out["error"]["code"] == "backend_unavailable"
    assert out["memory"] == memory
    assert SECRET not in response.text
