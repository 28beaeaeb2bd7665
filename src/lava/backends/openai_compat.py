"""OpenAI and every OpenAI-compatible server (vLLM, llama.cpp server, Ollama, LM Studio, OpenRouter,
Gemini's compatible endpoint), through the official `openai` SDK.

Servers differ in what they honour, so each has a `ServerProfile` of plain facts: whether `n`
returns n choices, which structured-output form it accepts. Who we talk to (URL, key, model) is
separate from what it can do. When a server refuses the structured-output form its profile
claims, the backend falls back once to the next weaker form and remembers that for the process.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

from ..errors import BackendError, BackendRateLimited, BackendResponseError, BackendTimeout, BackendUnavailable
from ..parsing import NativeCall
from .base import Backend, Capabilities, Completion, GenerationRequest, Usage
from .retry import Failure, RetryPolicy, call_timeout, parse_retry_after, with_retries

log = logging.getLogger("lava.backends.openai")

# Strongest first. json_schema: OpenAI/vLLM `response_format`; json_object_schema: llama.cpp
# server's `{"type": "json_object", "schema": ...}`; json_object: valid JSON only; none: prompt only.
StructuredMode = Literal["json_schema", "json_object_schema", "json_object", "none"]
FALLBACK: dict[str, StructuredMode] = {
    "json_schema": "json_object_schema",
    "json_object_schema": "json_object",
    "json_object": "none",
}


@dataclass(frozen=True, slots=True)
class ServerProfile:
    name: str
    returns_n_choices: bool
    structured: StructuredMode
    strict_schema: bool = False  # OpenAI's strict mode: a root object, every property required
    sends_seed: bool = True


PROFILES: dict[str, ServerProfile] = {
    "openai": ServerProfile("openai", returns_n_choices=True, structured="json_schema", strict_schema=True),
    "vllm": ServerProfile("vllm", returns_n_choices=True, structured="json_schema"),
    # llama-cpp-python's server answers 500 to json_schema but honours a schema in json_object.
    "llama-cpp": ServerProfile("llama-cpp", returns_n_choices=False, structured="json_object_schema"),
    "ollama": ServerProfile("ollama", returns_n_choices=False, structured="json_schema"),
    "gemini-openai": ServerProfile("gemini-openai", returns_n_choices=True, structured="json_schema",
                                   strict_schema=True, sends_seed=False),
    "generic": ServerProfile("generic", returns_n_choices=False, structured="json_schema"),
}


def guess_profile(base_url: str | None) -> str:
    """A profile from the URL when the user named none; `generic` falls back safely anyway."""
    if not base_url:
        return "openai"
    parsed = urlparse(base_url)
    host, port = (parsed.hostname or ""), parsed.port
    if "generativelanguage.googleapis.com" in host:
        return "gemini-openai"
    if host.endswith("openai.com"):
        return "openai"
    if port == 11434:
        return "ollama"
    return "generic"


def _classify(exc: Exception, component: str) -> Failure:
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return Failure(BackendTimeout(f"no answer from the server in time: {exc}", component=component),
                       transient=True)
    if isinstance(exc, openai.APIConnectionError):
        return Failure(BackendUnavailable(f"cannot reach the server: {exc}", component=component), transient=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after = parse_retry_after(exc.response.headers.get("retry-after"))
        message = f"the server answered {status}: {_short(exc)}"
        if status == 429:
            return Failure(BackendRateLimited(message, component=component), transient=True,
                           retry_after_s=retry_after)
        return Failure(BackendResponseError(message, component=component, status=status),
                       transient=status >= 500 or status in (408, 409), retry_after_s=retry_after)
    return Failure(BackendResponseError(f"unexpected answer: {type(exc).__name__}: {exc}", component=component),
                   transient=False)


def _short(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return error["message"][:500]
    return str(exc)[:500]


def strict_object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI strict mode wants an object root: `{"say", "tool_calls"}`, both present, one empty."""
    branches = schema.get("anyOf") or [schema]
    calls_branch = next((b for b in branches if "tool_calls" in b.get("properties", {})), None)
    say: dict[str, Any] = {"type": "string", "description": "text for the user; empty when calling tools"}
    properties: dict[str, Any] = {"say": say}
    if calls_branch is not None:
        items = calls_branch["properties"]["tool_calls"]["items"]
        properties["tool_calls"] = {"type": "array", "items": _strict(items),
                                    "description": "robot tool calls; empty when talking"}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _strict(node: Any) -> Any:
    """`const` -> one-value `enum`; drop keywords strict mode refuses (lengths, patterns)."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, Mapping):
        return node
    out = {}
    for key, value in node.items():
        if key in ("minLength", "maxLength", "pattern", "minItems", "maxItems"):
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        out[key] = _strict(value)
    if out.get("type") == "object" and "properties" in out and not out["properties"]:
        out.pop("required", None)
    return out


class OpenAICompatBackend(Backend):
    name = "openai"

    def __init__(
        self,
        *,
        model: str | None,
        base_url: str | None = None,
        api_key: str | None = None,
        profile: str | None = None,
        api: Literal["chat", "responses"] = "chat",
        retry: RetryPolicy | None = None,
        http_client: Any = None,
        max_parallel: int = 16,
    ) -> None:
        import openai

        self.profile = PROFILES[profile or guess_profile(base_url)]
        self.model = model or ("gpt-4o-mini" if self.profile.name == "openai" else "default")
        self.base_url = base_url
        self.api = api
        self.retry = retry or RetryPolicy()
        self.structured: StructuredMode = self.profile.structured
        self.capabilities = Capabilities(
            shares_prompt_across_n=self.profile.returns_n_choices, json_schema=self.profile.structured != "none",
            native_tools=False, deterministic_greedy=False,
        )
        # Local servers need no key, but the SDK insists on one; never a real secret in that case.
        self.client = openai.AsyncOpenAI(
            api_key=api_key or "not-needed", base_url=base_url, max_retries=0, http_client=http_client,
        )
        self._parallel = asyncio.Semaphore(max_parallel)
        self.component = f"backend:{self.name}"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "profile": self.profile.name, "base_url": self.base_url,
                "structured": self.structured, "api": self.api}

    async def close(self) -> None:
        await self.client.close()

    # -- request building --------------------------------------------------------------------

    def response_format(self, request: GenerationRequest, mode: StructuredMode) -> dict[str, Any] | None:
        if request.json_schema is None or mode == "none":
            return None
        schema = dict(request.json_schema)
        if self.profile.strict_schema:
            schema = strict_object_schema(schema)
        if mode == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": "decision", "schema": schema,
                                                           "strict": self.profile.strict_schema}}
        if mode == "json_object_schema":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_object"}

    def sampling(self, request: GenerationRequest, index: int) -> dict[str, Any]:
        args: dict[str, Any] = {
            "temperature": 0.0 if request.greedy else request.temperature,
            "top_p": 1.0 if request.greedy else request.top_p,
        }
        if request.seed is not None and self.profile.sends_seed:
            args["seed"] = request.seed + index
        return args

    # -- calls -------------------------------------------------------------------------------

    async def _chat(self, request: GenerationRequest, n: int, index: int) -> list[Completion]:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        mode = self.structured
        while True:
            kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": request.max_tokens,
                                      **self.sampling(request, index)}
            if n > 1:
                kwargs["n"] = n
            response_format = self.response_format(request, mode)
            if response_format is not None:
                kwargs["response_format"] = response_format
            started = time.perf_counter()
            try:
                response, retries = await with_retries(
                    lambda kwargs=kwargs: self.client.chat.completions.create(**kwargs,
                                                                              timeout=call_timeout(self.retry)),
                    lambda exc: _classify(exc, self.component), self.retry,
                )
            except BackendResponseError as error:
                if response_format is None or not self._refuses_structured(error) or mode not in FALLBACK:
                    raise
                log.warning("%s refused response_format %s (%s); falling back to %s",
                            self.base_url or "the server", mode, error.message, FALLBACK[mode])
                mode = self.structured = FALLBACK[mode]
                continue
            return self._chat_completions(response, retries, time.perf_counter() - started)

    @staticmethod
    def _refuses_structured(error: BackendError) -> bool:
        # 400/422 for unknown fields; llama-cpp-python's server answers 500 to json_schema, with a
        # validation message naming response_format. Any other 500 is the server failing, and
        # must not cost the structured mode for good.
        if error.status in (400, 422):
            return True
        return error.status == 500 and "response_format" in (error.message or "")

    def _chat_completions(self, response: Any, retries: int, seconds: float) -> list[Completion]:
        usage = getattr(response, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
        completion_tokens = getattr(usage, "completion_tokens", 0) or 0
        details = getattr(usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", 0) or 0
        choices = list(response.choices or [])
        out = []
        for k, choice in enumerate(choices):
            message = choice.message
            native = tuple(
                NativeCall(call.function.name, call.function.arguments or "")
                for call in (message.tool_calls or []) if getattr(call, "function", None)
            )
            share = Usage(
                input_tokens=prompt_tokens if k == 0 else 0,
                output_tokens=completion_tokens // max(1, len(choices)),
                cached_tokens=cached if k == 0 else prompt_tokens,
                requests=1 if k == 0 else 0,
            )
            out.append(Completion(text=message.content or "", native_calls=native,
                                  finish_reason=choice.finish_reason, usage=share, retries=retries,
                                  duration_s=seconds))
        return out

    async def _responses(self, request: GenerationRequest, index: int) -> Completion:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "input": [{"role": m.role, "content": m.content} for m in request.messages],
            "max_output_tokens": request.max_tokens,
        }
        sampling = self.sampling(request, index)
        sampling.pop("seed", None)  # the Responses API takes no seed
        kwargs.update(sampling)
        if request.json_schema is not None:
            kwargs["text"] = {"format": {"type": "json_schema", "name": "decision", "strict": True,
                                         "schema": strict_object_schema(request.json_schema)}}
        started = time.perf_counter()
        response, retries = await with_retries(
            lambda: self.client.responses.create(**kwargs, timeout=call_timeout(self.retry)),
            lambda exc: _classify(exc, self.component), self.retry,
        )
        usage = getattr(response, "usage", None)
        details = getattr(usage, "input_tokens_details", None)
        return Completion(
            text=response.output_text or "",
            finish_reason=getattr(response, "status", None),
            usage=Usage(getattr(usage, "input_tokens", 0) or 0, getattr(usage, "output_tokens", 0) or 0,
                        getattr(details, "cached_tokens", 0) or 0, 1),
            retries=retries, duration_s=time.perf_counter() - started,
        )

    async def _one(self, request: GenerationRequest, index: int) -> list[Completion]:
        async with self._parallel:
            if self.api == "responses":
                return [await self._responses(request, index)]
            return await self._chat(request, 1, index)

    async def generate(self, request: GenerationRequest) -> Sequence[Completion]:
        completions: list[Completion] = []
        if request.n > 1 and self.profile.returns_n_choices and self.api == "chat":
            async with self._parallel:
                completions = await self._chat(request, request.n, 0)
        # Servers that ignore `n` (or gave fewer choices): the rest as separate, concurrent calls.
        missing = range(len(completions), request.n)
        if missing:
            batches = await asyncio.gather(*(self._one(request, k) for k in missing))
            completions += [c for batch in batches for c in batch]
        if len(completions) < request.n:
            raise BackendResponseError(f"the server returned {len(completions)} of {request.n} answers",
                                       component=self.component)
        return completions[: request.n]


__all__ = ["PROFILES", "OpenAICompatBackend", "ServerProfile", "guess_profile", "strict_object_schema"]
