"""Real servers on 127.0.0.1 for tests: an app under uvicorn in a thread, or `lava serve` as a process."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import uvicorn

from lava import processes
from lava.processes import free_port


@contextlib.contextmanager
def uvicorn_thread(app) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def wait_ready(url: str, process: subprocess.Popen | None = None, timeout: float = 120) -> None:
    """Until `url`/health answers 200."""
    processes.wait_ready(f"{url}/health", process, timeout)


@contextlib.contextmanager
def lava_process(*args: str, port: int | None = None, env: dict | None = None,
                 log: Path | None = None, timeout: float = 120) -> Iterator[str]:
    """`lava serve ARGS` as a real process; yields its base URL once /health says ready."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    with processes.serving(processes.lava_serve_command(port, *args), f"{url}/health", log=log, timeout=timeout,
                           env={**os.environ, **(env or {})}):
        yield url


@contextlib.contextmanager
def llama_cpp_server(log: Path, *, alias: str | None = None, timeout: float = 180) -> Iterator[str]:
    """`python -m llama_cpp.server` on the embedded GGUF at 127.0.0.1; yields its base URL (no /v1).
    The real OpenAI-compatible server that stands in for vLLM, Ollama and GEN's coaching backends."""
    from lava.backends.weights import QWEN_CODER_05B, materialize
    from lava.settings import Settings

    model = materialize(QWEN_CODER_05B, Settings().cache_dir)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--n_ctx", "8192", *(["--model_alias", alias] if alias else [])]
    with processes.serving(command, f"{url}/v1/models", log=log, timeout=timeout, stop_timeout=20):
        yield url


class FaultyModelServer:
    """A model server on 127.0.0.1 that misbehaves on demand, speaking both the OpenAI Chat
    Completions and the Gemini generateContent wire formats (so each backend kind meets the same
    faults through its real SDK and a real socket). `mode` picks the fault; `hits` counts calls."""

    ANSWERS: ClassVar[dict[str, str]] = {
        "garbage": '\x00}{ ]]tool_calls[[ \ufffd',
        "truncated": '{"say": "", "tool_calls": [{"robot": "panda", "name": "press_bu',
        "empty": "",
        "invalid_tool": '{"say": "", "tool_calls": [{"robot": "panda", "name": "fly_away", "arguments": {}}]}',
        "wrong_robot": '{"say": "", "tool_calls": [{"robot": "r2d2", "name": "press_button", '
                       '"arguments": {"id": "sw1"}}]}',
        "ok": '{"say": "", "tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw1"}}]}',
    }

    def __init__(self) -> None:
        self.mode = "ok"
        self.hits = 0
        self.slow_s = 3.0

    def app(self):
        import asyncio

        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def answer(request, shape):
            self.hits += 1
            if self.mode == "500":
                return JSONResponse({"error": {"message": "internal failure", "code": 500}}, status_code=500)
            if self.mode == "429":
                return JSONResponse({"error": {"message": "slow down", "code": 429}}, status_code=429,
                                    headers={"Retry-After": "0"})
            if self.mode == "echo_key":  # a hostile or careless server quoting our credentials back
                supplied = request.headers.get("authorization") or request.headers.get("x-goog-api-key", "")
                return JSONResponse({"error": {"message": f"key {supplied} is not valid", "code": 401}},
                                    status_code=401)
            if self.mode == "slow":
                await asyncio.sleep(self.slow_s)
            text = self.ANSWERS.get(self.mode, self.ANSWERS["ok"])
            finish = "length" if self.mode == "truncated" else "stop"
            return JSONResponse(shape(text, finish))

        def chat(text, finish):
            return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}

        def gemini(text, finish):
            return {"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": text}]},
                                    "finishReason": "MAX_TOKENS" if finish == "length" else "STOP"}],
                    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5}}

        async def chat_route(request):
            return await answer(request, chat)

        async def gemini_route(request):
            return await answer(request, gemini)

        return Starlette(routes=[
            Route("/v1/chat/completions", chat_route, methods=["POST"]),
            Route("/{version}/models/{rest:path}", gemini_route, methods=["POST"]),
        ])
