"""The coaching LLMs MAGMA-GEN names in a session, as lava backends.

GEN's only backend type, `ollama`, is an OpenAI-style chat-completions endpoint given as a full
URL (GEN posts to it verbatim); lava reaches it through its own `OpenAICompatBackend`, so the
coach gets the same structured-output fallbacks, retries and error mapping as decisions do.

Two failures are told apart: a configuration lava cannot use at all (`UnusableBackend`: unknown
type, not a chat-completions URL) and a backend that does not answer (`UnreachableBackend`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from ..backends.base import GenerationRequest, Message
from ..backends.openai_compat import OpenAICompatBackend
from ..backends.retry import RetryPolicy
from ..errors import BackendError
from .models import CoachingBackendConfig

# "ollama" is what GEN sends; "openai" names the same wire format for anyone configuring by hand.
CHAT_COMPLETIONS_TYPES = ("ollama", "openai")
CHAT_COMPLETIONS_PATH = "/chat/completions"
# GEN's max_retry counts attempts; beyond a few, a dead backend would only hold the session's PUT.
MAX_ATTEMPTS = 5


class UnusableBackend(Exception):
    """The configuration cannot work whatever the network does; `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class UnreachableBackend(Exception):
    """The backend did not answer its probe (down, refusing, or not serving the model)."""


def chat_completions_base(endpoint: str) -> str:
    """`http://host/v1/chat/completions` -> `http://host/v1`, the base URL the OpenAI SDK extends."""
    parsed = urlparse(endpoint)
    path = parsed.path.rstrip("/")
    if parsed.scheme not in ("http", "https") or not parsed.netloc or not path.endswith(CHAT_COMPLETIONS_PATH) \
            or parsed.query or parsed.fragment:
        raise UnusableBackend(
            "endpoint", f"{endpoint!r} is not a chat-completions URL (http(s)://host[:port]/...{CHAT_COMPLETIONS_PATH})"
        )
    return endpoint[: endpoint.rindex(CHAT_COMPLETIONS_PATH)]


def usable_base_url(config: CoachingBackendConfig) -> str:
    """The base URL to reach `config` at, or `UnusableBackend` if lava cannot speak to it."""
    if config.type not in CHAT_COMPLETIONS_TYPES:
        raise UnusableBackend("type", f"unknown coaching backend type {config.type!r}; lava speaks "
                                      f"{', '.join(CHAT_COMPLETIONS_TYPES)}")
    return chat_completions_base(config.endpoint)


def open_backend(config: CoachingBackendConfig) -> OpenAICompatBackend:
    base_url = usable_base_url(config)
    import openai

    headers = dict(config.headers)

    async def apply_headers(request: Any) -> None:
        # After the SDK's own headers, so a configured Authorization wins over its placeholder key.
        for name, value in headers.items():
            request.headers[name] = value

    http_client = openai.DefaultAsyncHttpxClient(event_hooks={"request": [apply_headers]}) if headers else None
    # GEN's max_retry counts attempts (0 would never call); lava makes at least one.
    retry = RetryPolicy(attempts=min(MAX_ATTEMPTS, max(1, config.max_retry)), call_timeout_s=config.timeout)
    return OpenAICompatBackend(model=config.default_model, base_url=base_url, retry=retry, http_client=http_client)


async def probe(backend: OpenAICompatBackend) -> None:
    """One token from the model: the backend is reachable and serves `default_model`."""
    request = GenerationRequest(messages=(Message("user", "Reply with OK."),), n=1, greedy=True, max_tokens=1,
                                component="coach.probe")
    try:
        await backend.generate(request)
    except BackendError as error:
        raise UnreachableBackend(error.message) from error


__all__ = [
    "CHAT_COMPLETIONS_TYPES",
    "MAX_ATTEMPTS",
    "UnreachableBackend",
    "UnusableBackend",
    "chat_completions_base",
    "open_backend",
    "probe",
    "usable_base_url",
]
