"""The Gemini backend at the transport seam, with a recorded generateContent body."""

from __future__ import annotations

import asyncio

import pytest

from lava.backends.gemini import GeminiBackend
from lava.backends.retry import RetryPolicy
from lava.errors import BackendResponseError
from recorded import Replay, recording
from test_backend_openai import SECRET, gen_request


def gemini(replay: Replay, attempts: int = 3) -> GeminiBackend:
    return GeminiBackend(model="gemini-2.5-flash", api_key=SECRET, http_client=replay.client(),
                         retry=RetryPolicy(attempts=attempts, base_delay_s=0.01))


def test_generate_content_with_schema_and_candidates() -> None:
    replay = Replay([(200, recording("gemini_generate_content.json"))])
    completions = asyncio.run(gemini(replay).generate(gen_request(n=2)))
    assert replay.exhausted
    request = replay.requests[0]
    assert request.url.path.endswith("/models/gemini-2.5-flash:generateContent")
    assert request.headers["x-goog-api-key"] == SECRET
    body = replay.bodies[0]
    config = body["generationConfig"]
    assert config["candidateCount"] == 2 and config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"]["type"] == "object"
    assert body["systemInstruction"]["parts"][0]["text"] == "rules"
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Please press sw1"}]}]
    assert [c.text for c in completions] == [
        '{"say": "", "tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw1"}}]}',
        '{"say": "I will press sw1 now.", "tool_calls": []}']
    assert completions[0].usage.input_tokens == 355


def test_retry_on_503_then_success() -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    replay = Replay([(503, error), (200, recording("gemini_generate_content.json"))])
    completions = asyncio.run(gemini(replay).generate(gen_request(n=2)))
    assert completions[0].retries == 1 and replay.exhausted


def test_bad_request_not_retried() -> None:
    error = {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}}
    replay = Replay([(400, error)])
    with pytest.raises(BackendResponseError, match="400") as raised:
        asyncio.run(gemini(replay).generate(gen_request()))
    assert len(replay.requests) == 1 and SECRET not in str(raised.value)
