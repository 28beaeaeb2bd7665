"""The embedded default: llama.cpp in process with a GGUF model (Qwen2.5-Coder-0.5B by default).

One `LlamaEngine` owned by one worker thread (llama.cpp contexts are not thread-safe); the event
loop never blocks. Requests that arrive while the engine is busy, or within a few milliseconds of
each other, are decided together: the candidates of all inputs of a MAGMA-GEN batch share one
decoding loop, and prompts share their common prefixes in the KV cache.

The prompt is rendered with the model's own chat template (from the GGUF metadata) and traced
verbatim. Decoding is constrained by a GBNF grammar compiled from the input's decision schema, so
the model cannot name an unknown tool or robot, or leave out an argument.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..deadlines import deadline
from ..errors import BackendError, BackendTimeout, BackendUnavailable, ConfigError, MissingExtra
from .base import Backend, Capabilities, Completion, GenerationRequest, Usage
from .weights import DEFAULT_MODEL, MODELS, materialize

log = logging.getLogger("lava.backends.local")

GRAMMAR_CACHE_SIZE = 64
GATHER_WINDOW_S = 0.01  # how long the worker waits for more work before starting a batch


def resolve_model_path(model_path: Path | None, embedded: str, cache_dir: Path) -> Path:
    """The GGUF to load: a user's file as given, or the verified embedded model."""
    if model_path is not None:
        if not model_path.is_file():
            raise ConfigError(f"model file {model_path} does not exist")
        return model_path
    try:
        model = MODELS[embedded]
    except KeyError:
        raise ConfigError(f"unknown embedded model {embedded!r}; choose one of {', '.join(MODELS)}") from None
    return materialize(model, cache_dir)


@dataclass
class _Work:
    request: GenerationRequest
    prompt: str
    deadline: float | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


class LocalBackend(Backend):
    name = "local"

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        embedded_model: str = DEFAULT_MODEL,
        cache_dir: Path,
        context_tokens: int = 16384,
        threads: int | None = None,
        slots: int = 32,
    ) -> None:
        self.model_path = model_path
        self.embedded_model = embedded_model
        self.cache_dir = cache_dir
        self.context_tokens = context_tokens
        self.threads = threads or os.cpu_count() or 1
        self.slots = slots
        self.model = model_path.name if model_path else embedded_model
        self.capabilities = Capabilities(
            shares_prompt_across_n=True, json_schema=True, deterministic_greedy=True,
            max_context_tokens=context_tokens,
        )
        self._engine: Any = None
        self._formatter: Any = None
        self._grammars: OrderedDict[str, str] = OrderedDict()
        self._queue: queue.Queue[_Work | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()
        self.load_seconds: float | None = None
        self.batches_run = 0  # worker batches, for tests and metrics

    # -- lifecycle ---------------------------------------------------------------------------

    def prepare(self) -> Path:
        """Resolve (join and verify) the model file; cheap once cached. Safe to call before serving."""
        return resolve_model_path(self.model_path, self.embedded_model, self.cache_dir)

    def _load(self) -> None:
        try:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            from .llama_engine import LlamaEngine
        except ImportError as exc:
            raise MissingExtra("the local backend", "local", "llama-cpp-python") from exc
        started = time.perf_counter()
        path = self.prepare()
        engine = LlamaEngine(str(path), n_ctx=self.context_tokens, slots=self.slots, threads=self.threads)
        template = engine.metadata("tokenizer.chat_template")
        if not template:
            raise ConfigError(f"{path} has no chat template in its metadata; lava needs one to prompt it")
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=engine.eos_text(), bos_token="")
        self._engine = engine
        self.load_seconds = time.perf_counter() - started
        log.info("loaded %s in %.1f s (%d threads, context %d, %d slots)", path.name, self.load_seconds,
                 self.threads, self.context_tokens, self.slots)

    async def start(self) -> None:
        await asyncio.to_thread(self._load)
        self._thread = threading.Thread(target=self._serve, name="lava-llama", daemon=True)
        self._thread.start()
        self._loaded.set()

    @property
    def ready(self) -> bool:
        return self._loaded.is_set()

    async def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)

    # -- the worker --------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            gather_until = time.monotonic() + GATHER_WINDOW_S
            while True:
                try:
                    item = self._queue.get(timeout=max(0.0, gather_until - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                batch.append(item)
            self._run(batch)

    def _run(self, batch: list[_Work]) -> None:
        from .llama_engine import Job

        jobs = []
        for work in batch:
            request = work.request
            grammar = self._grammar(request.json_schema) if request.json_schema else None
            jobs.append(Job(
                tokens=self._engine.tokenize(work.prompt), n=request.n, max_tokens=request.max_tokens,
                greedy=request.greedy, temperature=request.temperature, top_p=request.top_p,
                seed=request.seed or 0, grammar=grammar, deadline=work.deadline,
            ))
        started = time.perf_counter()
        self.batches_run += 1
        try:
            self._execute(jobs)
        except Exception as exc:  # the whole group failed (llama.cpp error): every waiter hears it
            for work in batch:
                work.loop.call_soon_threadsafe(_settle, work.future, None, exc)
            return
        seconds = time.perf_counter() - started
        for work, job in zip(batch, jobs, strict=True):
            if job.error is not None:
                work.loop.call_soon_threadsafe(_settle, work.future, None, job.error)
                continue
            completions = [
                Completion(
                    text=self._engine.detokenize(tokens),
                    finish_reason=finish,
                    usage=Usage(input_tokens=len(job.tokens), output_tokens=len(tokens),
                                cached_tokens=job.cached_tokens if k == 0 or not job.candidates_share_prompt
                                else len(job.tokens),
                                requests=1 if k == 0 else 0),
                    duration_s=seconds,
                    prompt=work.prompt,
                )
                for k, (tokens, finish) in enumerate(zip(job.outputs, job.finish, strict=True))
            ]
            work.loop.call_soon_threadsafe(_settle, work.future, completions, None)

    def _execute(self, jobs: list[Any]) -> None:
        """Complete the jobs of one gathered batch: together, sharing prefixes and one decoding loop."""
        self._engine.run(jobs)

    def _grammar(self, schema: Any) -> str:
        key = json.dumps(schema, sort_keys=True)
        grammar = self._grammars.get(key)
        if grammar is None:
            from llama_cpp.llama_grammar import json_schema_to_gbnf

            # The schema's own property order is kept: robot, then tool, then its arguments.
            grammar = json_schema_to_gbnf(json.dumps(schema))
            self._grammars[key] = grammar
            if len(self._grammars) > GRAMMAR_CACHE_SIZE:
                self._grammars.popitem(last=False)
        else:
            self._grammars.move_to_end(key)
        return grammar

    # -- generation --------------------------------------------------------------------------

    def render_prompt(self, request: GenerationRequest) -> str:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        return self._formatter(messages=messages).prompt

    async def generate(self, request: GenerationRequest) -> list[Completion]:
        if not self.ready:
            raise BackendUnavailable("the embedded model is not loaded", component=f"backend:{self.name}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._queue.put(_Work(request, self.render_prompt(request), deadline(), loop, future))
        try:
            return await future
        except TimeoutError as exc:
            raise BackendTimeout(str(exc), component=f"backend:{self.name}") from exc
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"llama.cpp failed: {exc}", component=f"backend:{self.name}") from exc

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "threads": self.threads, "context": self.context_tokens,
                "slots": self.slots}


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller gave up (deadline, disconnect)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


__all__ = ["LocalBackend", "resolve_model_path"]
