"""The embedded default: llama.cpp in process (llama-cpp-python) with a GGUF model.

One model instance, driven by one worker thread: llama.cpp contexts are not thread-safe, and a
single thread also keeps the KV cache warm for the next request. The event loop never blocks.

The prompt is rendered with the model's own chat template (from the GGUF metadata) and sent as
text, so the trace records exactly what the model read, and llama.cpp's prefix reuse is visible:
candidates of one input re-use the evaluated prompt and only sample; consecutive turns of an
episode re-use everything up to the new turn. Decoding is constrained by a GBNF grammar compiled
from the input's decision schema, so the model cannot name an unknown tool or robot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..deadlines import deadline
from ..errors import BackendError, BackendTimeout, BackendUnavailable, ConfigError, MissingExtra
from .base import Backend, Capabilities, Completion, GenerationRequest, Usage
from .weights import DEFAULT_MODEL, MODELS, materialize

log = logging.getLogger("lava.backends.local")

GRAMMAR_CACHE_SIZE = 64


def _import_llama() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise MissingExtra("the local backend", "local", "llama-cpp-python") from exc
    return llama_cpp


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


class LocalBackend(Backend):
    name = "local"

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        embedded_model: str = DEFAULT_MODEL,
        cache_dir: Path,
        context_tokens: int = 8192,
        threads: int | None = None,
    ) -> None:
        self.model_path = model_path
        self.embedded_model = embedded_model
        self.cache_dir = cache_dir
        self.context_tokens = context_tokens
        self.threads = threads or os.cpu_count() or 1
        self.model = model_path.name if model_path else embedded_model
        self.capabilities = Capabilities(
            shares_prompt_across_n=True, json_schema=True, deterministic_greedy=True,
            max_context_tokens=context_tokens,
        )
        self._llm: Any = None
        self._formatter: Any = None
        self._grammars: OrderedDict[str, Any] = OrderedDict()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lava-llama")
        self._loaded = threading.Event()
        self.load_seconds: float | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def prepare(self) -> Path:
        """Resolve (join and verify) the model file; cheap once cached. Safe to call before serving."""
        return resolve_model_path(self.model_path, self.embedded_model, self.cache_dir)

    def _load(self) -> None:
        llama_cpp = _import_llama()
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        started = time.perf_counter()
        path = self.prepare()
        llm = llama_cpp.Llama(
            model_path=str(path), n_ctx=self.context_tokens, n_threads=self.threads,
            n_threads_batch=self.threads, n_batch=512, verbose=False,
        )
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(f"{path} has no chat template in its metadata; lava needs one to prompt it")
        eos = llm.detokenize([llm.token_eos()], special=True).decode("utf-8", errors="ignore")
        adds_bos = str(llm.metadata.get("tokenizer.ggml.add_bos_token", "false")).lower() == "true"
        bos = llm.detokenize([llm.token_bos()], special=True).decode("utf-8", errors="ignore") if adds_bos else ""
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        self._llm = llm
        self.load_seconds = time.perf_counter() - started
        self._loaded.set()
        log.info("loaded %s in %.1f s (%d threads, context %d)", path.name, self.load_seconds, self.threads,
                 self.context_tokens)

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    @property
    def ready(self) -> bool:
        return self._loaded.is_set()

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- generation --------------------------------------------------------------------------

    def render_prompt(self, request: GenerationRequest) -> tuple[str, list[str]]:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        formatted = self._formatter(messages=messages)
        stop = formatted.stop if isinstance(formatted.stop, list) else [formatted.stop]
        return formatted.prompt, [marker for marker in stop if marker]  # an empty marker would stop at once

    def _grammar(self, schema: Any) -> Any:
        key = json.dumps(schema, sort_keys=True)
        grammar = self._grammars.get(key)
        if grammar is None:
            from llama_cpp import LlamaGrammar

            grammar = LlamaGrammar.from_json_schema(key, verbose=False)
            self._grammars[key] = grammar
            if len(self._grammars) > GRAMMAR_CACHE_SIZE:
                self._grammars.popitem(last=False)
        else:
            self._grammars.move_to_end(key)
        return grammar

    def _cached_prefix(self, tokens: list[int]) -> int:
        cached = self._llm.input_ids[: self._llm.n_tokens]
        shared = 0
        for a, b in zip(cached, tokens, strict=False):
            if a != b:
                break
            shared += 1
        return shared

    def _generate_sync(self, request: GenerationRequest, until: float | None) -> list[Completion]:
        llm = self._llm
        if until is not None and time.monotonic() >= until:
            raise BackendTimeout("the deadline passed while waiting for the model", component=f"backend:{self.name}")
        stopping = None
        if until is not None:
            from llama_cpp import StoppingCriteriaList

            stopping = StoppingCriteriaList([lambda ids, logits: time.monotonic() >= until])
        prompt, stop = self.render_prompt(request)
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        if len(tokens) + request.max_tokens > self.context_tokens:
            raise BackendError(
                f"the prompt has {len(tokens)} tokens; with {request.max_tokens} to generate it exceeds the "
                f"context of {self.context_tokens} (setting context_tokens)", component=f"backend:{self.name}",
            )
        grammar = self._grammar(request.json_schema) if request.json_schema else None
        completions = []
        for k in range(request.n):
            cached = self._cached_prefix(tokens)
            started = time.perf_counter()
            result = llm.create_completion(
                prompt=tokens,
                max_tokens=request.max_tokens,
                temperature=0.0 if request.greedy else request.temperature,
                top_p=1.0 if request.greedy else request.top_p,
                top_k=1 if request.greedy else 40,
                min_p=0.0 if request.greedy else 0.05,
                repeat_penalty=1.0,
                stop=stop,
                seed=None if request.seed is None else request.seed + k,
                grammar=grammar,
                stopping_criteria=stopping,
            )
            choice = result["choices"][0]
            usage = result.get("usage") or {}
            completions.append(Completion(
                text=choice.get("text") or "",
                finish_reason=choice.get("finish_reason"),
                usage=Usage(
                    input_tokens=int(usage.get("prompt_tokens", len(tokens))),
                    output_tokens=int(usage.get("completion_tokens", 0)),
                    cached_tokens=min(cached, len(tokens)),
                    requests=1,
                ),
                duration_s=time.perf_counter() - started,
                prompt=prompt,
            ))
        return completions

    async def generate(self, request: GenerationRequest) -> list[Completion]:
        if not self.ready:
            raise BackendUnavailable("the embedded model is not loaded", component=f"backend:{self.name}")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._generate_sync, request, deadline())
        except BackendError:
            raise
        except (ValueError, RuntimeError) as exc:  # llama.cpp reports decode failures this way
            raise BackendError(f"llama.cpp failed: {exc}", component=f"backend:{self.name}") from exc

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "threads": self.threads, "context": self.context_tokens}


__all__ = ["LocalBackend", "resolve_model_path"]
