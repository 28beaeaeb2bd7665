"""The OpenAI-compatible backend for real: the official SDK against `python -m llama_cpp.server`
on 127.0.0.1 serving the same verified GGUF the embedded backend uses."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx2 as httpx
import pytest

from conftest import fixture_requests, user_input
from lava.backends.openai_compat import OpenAICompatBackend
from lava.engine import Engine
from lava.policies.full_history import FullHistoryPolicy
from lava.protocol import AgentRequest
from lava.settings import Settings
from magma_contract import check_response
from servers import lava_process, llama_cpp_server

pytestmark = pytest.mark.model
pytest.importorskip("llama_cpp.server.app")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory) -> Iterator[str]:
    with llama_cpp_server(tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield f"{url}/v1"


def test_generic_profile_falls_back_for_real_and_answers_validly(llama_server: str) -> None:
    backend = OpenAICompatBackend(model="qwen", base_url=llama_server, profile="generic")
    engine = Engine(FullHistoryPolicy(backend, Settings(backend="openai")))
    request = {"request_id": "live", "inputs": [user_input("Please press sw2", n=2)]}
    outputs = asyncio.run(engine.respond(AgentRequest.model_validate(request)))
    check_response(request, outputs)
    assert backend.structured == "json_object_schema"  # the real server refused json_schema with a 500
    assert all(o["status"] == "completed" for o in outputs)


def test_lava_serve_openai_backend_on_llama_server(llama_server: str, tmp_path) -> None:
    args = ("--backend", "openai", "--base-url", llama_server, "--server-profile", "llama-cpp", "--model", "qwen")
    with lava_process(*args, log=tmp_path / "lava.log") as url:
        for request in fixture_requests("bench_press_button.requests.jsonl")[:2]:
            answer = httpx.post(f"{url}/v1/responses", json=request, timeout=300).json()
            outputs = check_response(request, answer).root
            assert all(o.status == "completed" for o in outputs)
