"""Replay recorded provider bodies at the HTTP transport seam (httpx2.MockTransport)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx2 as httpx

RECORDINGS = Path(__file__).parent / "recordings"


def recording(name: str) -> Any:
    return json.loads((RECORDINGS / name).read_text())


class Replay:
    """Answers requests in order from `answers` (status, body[, headers]) and records every request.

    `exhausted` tells a test whether every recorded answer was used, so a backend that silently
    makes fewer calls than expected cannot pass.
    """

    def __init__(self, answers: Sequence[tuple[int, Any] | tuple[int, Any, dict] | Callable]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.bodies.append(json.loads(request.content or b"{}"))
        if not self.answers:
            raise AssertionError(f"unexpected extra request to {request.url}")
        answer = self.answers.pop(0)
        if callable(answer):
            return answer(request)
        status, body, *rest = answer
        headers = rest[0] if rest else {}
        content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        return httpx.Response(status, content=content, headers={"content-type": "application/json", **headers})

    @property
    def exhausted(self) -> bool:
        return not self.answers

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))
