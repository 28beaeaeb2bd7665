"""Optional bearer-token authentication, as a pure ASGI middleware (no per-request task overhead).

MAGMA-BENCH and MAGMA-GEN send no credentials, so authentication is off unless `auth_token` is
set; it is meant for deployments reachable beyond loopback, behind a proxy that adds the header.
`/health` stays open for load balancers and orchestrators' probes.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable
from typing import Any

import orjson

OPEN_PATHS = frozenset({"/health"})


class BearerAuth:
    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        supplied = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        # Constant-time comparison: the answer's timing says nothing about the token.
        if hmac.compare_digest(supplied, self._expected):
            await self.app(scope, receive, send)
            return
        reason = "missing Authorization header" if not supplied else "invalid bearer token"
        body = orjson.dumps({"detail": f"authentication required: {reason} (this server has auth_token set)"})
        await send({
            "type": "http.response.start",
            "status": 401,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b'Bearer realm="lava"')],
        })
        await send({"type": "http.response.body", "body": body})


class Redactor:
    """Replaces every configured secret in a text. A remote server may echo our credentials in its
    error body (some do, on 401); that text then reaches error candidates, internal steps and logs,
    so every answer body and log record passes through here."""

    MASK = "[redacted]"

    def __init__(self, secrets: Iterable[str | None]) -> None:
        # Short values would mask ordinary words; real keys and tokens are long.
        self.secrets = tuple(sorted({s for s in secrets if s and len(s) >= 8}, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, self.MASK)
        return text

    def body(self, encoded: bytes) -> bytes:
        """The same for an encoded JSON answer (the mask has nothing JSON would escape)."""
        for secret in self.secrets:
            raw = secret.encode()
            if raw in encoded:
                encoded = encoded.replace(raw, self.MASK.encode())
        return encoded

    @classmethod
    def from_settings(cls, settings: Any) -> Redactor:
        values = [getattr(settings, name, None) for name in ("openai_api_key", "gemini_api_key", "auth_token")]
        return cls(v.get_secret_value() for v in values if v is not None)


class RedactingFilter(logging.Filter):
    """A logging filter that renders each record, masks secrets, and freezes the result."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self.redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        if self.redact.secrets:
            message = record.getMessage()
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.msg, record.args = self.redact(message), None
            if record.exc_text:
                record.exc_text = self.redact(record.exc_text)
            if record.stack_info:
                record.stack_info = self.redact(record.stack_info)
        return True


def install_log_redaction(redact: Redactor) -> None:
    """Mask secrets in every handler of the root logger (uvicorn's and lava's records end there)."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter(redact))


__all__ = ["OPEN_PATHS", "BearerAuth", "RedactingFilter", "Redactor", "install_log_redaction"]
