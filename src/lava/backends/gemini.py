"""Google Gemini through the official `google-genai` SDK (extra `gemini`).

Decoding is constrained with `response_json_schema` (the object form OpenAI strict mode also
uses), candidates come from `candidate_count`, and the SDK's own retries are off: lava's retry
layer owns them, bounded by the request deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from ..errors import BackendRateLimited, BackendResponseError, BackendTimeout, BackendUnavailable, MissingExtra
from .base import Backend, Capabilities, Completion, GenerationRequest, Usage
from .openai_compat import strict_object_schema
from .retry import Failure, RetryPolicy, call_timeout, parse_retry_after, with_retries

MAX_CANDIDATES = 8


def _import_genai() -> tuple[Any, Any]:
    try:
        from google import genai
        from google.genai import types
    except ImportError as exc:
        raise MissingExtra("the gemini backend", "gemini", "google-genai") from exc
    return genai, types


def _classify(exc: Exception, component: str) -> Failure:
    import httpx2
    from google.genai import errors

    if isinstance(exc, httpx2.TimeoutException):
        return Failure(BackendTimeout(f"no answer from Gemini in time: {exc}", component=component), transient=True)
    if isinstance(exc, httpx2.TransportError):
        return Failure(BackendUnavailable(f"cannot reach Gemini: {exc}", component=component), transient=True)
    if isinstance(exc, errors.APIError):
        status = int(exc.code or 0)
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) or {}
        retry_after = parse_retry_after(headers.get("retry-after") if hasattr(headers, "get") else None)
        message = f"Gemini answered {status}: {(exc.message or str(exc))[:500]}"
        if status == 429:
            return Failure(BackendRateLimited(message, component=component, status=status), transient=True,
                           retry_after_s=retry_after)
        return Failure(BackendResponseError(message, component=component, status=status),
                       transient=status >= 500 or status == 408, retry_after_s=retry_after)
    return Failure(BackendResponseError(f"unexpected answer: {type(exc).__name__}: {exc}", component=component),
                   transient=False)


class GeminiBackend(Backend):
    name = "gemini"
    capabilities = Capabilities(shares_prompt_across_n=True, json_schema=True, deterministic_greedy=False)

    def __init__(
        self,
        *,
        model: str | None,
        api_key: str | None,
        base_url: str | None = None,
        retry: RetryPolicy | None = None,
        http_client: Any = None,
    ) -> None:
        genai, types = _import_genai()
        self.types = types
        self.model = model or "gemini-2.5-flash"
        self.retry = retry or RetryPolicy()
        options: dict[str, Any] = {"retry_options": None}
        if base_url:
            options["base_url"] = base_url
        if http_client is not None:
            options["httpx_async_client"] = http_client
        self.client = genai.Client(api_key=api_key or "missing-key", http_options=types.HttpOptions(**options))
        self.component = f"backend:{self.name}"

    def _config(self, request: GenerationRequest, count: int, index: int, system: str | None) -> Any:
        config: dict[str, Any] = {
            "temperature": 0.0 if request.greedy else request.temperature,
            "top_p": 1.0 if request.greedy else request.top_p,
            "max_output_tokens": request.max_tokens,
            "candidate_count": count,
            "system_instruction": system,
            "http_options": self.types.HttpOptions(timeout=int(call_timeout(self.retry) * 1000)),
        }
        if request.seed is not None:
            config["seed"] = request.seed + index
        if request.json_schema is not None:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = strict_object_schema(request.json_schema)
        return self.types.GenerateContentConfig(**config)

    def _contents(self, request: GenerationRequest) -> tuple[str | None, list[Any]]:
        system = "\n\n".join(m.content for m in request.messages if m.role == "system") or None
        contents = [
            self.types.Content(role="model" if m.role == "assistant" else "user",
                               parts=[self.types.Part(text=m.content)])
            for m in request.messages if m.role != "system"
        ]
        return system, contents

    async def _call(self, request: GenerationRequest, count: int, index: int) -> list[Completion]:
        system, contents = self._contents(request)
        started = time.perf_counter()
        response, retries = await with_retries(
            lambda: self.client.aio.models.generate_content(
                model=self.model, contents=contents, config=self._config(request, count, index, system)),
            lambda exc: _classify(exc, self.component), self.retry,
        )
        seconds = time.perf_counter() - started
        meta = response.usage_metadata
        prompt = getattr(meta, "prompt_token_count", 0) or 0
        output = getattr(meta, "candidates_token_count", 0) or 0
        cached = getattr(meta, "cached_content_token_count", 0) or 0
        candidates = list(response.candidates or [])
        completions = []
        for k, candidate in enumerate(candidates):
            parts = getattr(getattr(candidate, "content", None), "parts", None) or []
            text = "".join(p.text for p in parts if getattr(p, "text", None) and not getattr(p, "thought", False))
            completions.append(Completion(
                text=text,
                finish_reason=str(candidate.finish_reason) if candidate.finish_reason else None,
                usage=Usage(prompt if k == 0 else 0, output // max(1, len(candidates)),
                            cached if k == 0 else prompt, 1 if k == 0 else 0),
                retries=retries, duration_s=seconds,
            ))
        return completions

    async def generate(self, request: GenerationRequest) -> Sequence[Completion]:
        first = min(request.n, MAX_CANDIDATES)
        completions = await self._call(request, first, 0)
        missing = range(len(completions), request.n)
        if missing:
            extra = await asyncio.gather(*(self._call(request, 1, k) for k in missing))
            completions += [c for batch in extra for c in batch]
        if len(completions) < request.n:
            raise BackendResponseError(f"Gemini returned {len(completions)} of {request.n} answers",
                                       component=self.component)
        return completions[: request.n]

    async def close(self) -> None:
        aclose = getattr(self.client.aio, "aclose", None)
        if aclose is not None:
            await aclose()


__all__ = ["GeminiBackend"]
