"""/ui: the live trace page, a single self-contained HTML file over a small JSON API.

    GET /ui                                   the page (no CDN, no network beyond this server)
    GET /ui/api/exchanges?status=&limit=      recent candidates, newest first, with counts
    GET /ui/api/exchanges/{seq}/{index}       one candidate: prompts, raw output, memory diff

It shows prompts and memories, so only loopback clients get it unless `ui_allow_remote` is set;
a request that came through a proxy (Forwarded / X-Forwarded-For) counts as remote, since the
proxy's own loopback address says nothing about who is behind it. The bearer-token middleware
guards it like every route but /health. Every body passes through the redactor.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from ..security import Redactor
from ..traces import TraceBuffer

PROXY_HEADERS = frozenset({b"forwarded", b"x-forwarded-for"})
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


@cache
def page() -> tuple[bytes, dict[str, str]]:
    """The page and its headers. The CSP allows exactly the page's own inline script and style
    (by hash): should model text ever become markup, the browser would still not run it."""
    html = resources.files(__package__).joinpath("index.html").read_text(encoding="utf-8")

    def hashes(tag: str) -> str:
        blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.S)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)

    policy = (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
              "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return html.encode(), {"Content-Security-Policy": policy, **NO_STORE}


def is_local(request: Request) -> bool:
    if any(name in PROXY_HEADERS for name, _ in request.scope["headers"]):
        return False
    if request.client is None:
        return False
    try:
        address = ipaddress.ip_address(request.client.host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def add_ui_routes(app: FastAPI, traces: TraceBuffer | None, *, allow_remote: bool, redact: Redactor,
                  encode: Callable[[Any], bytes]) -> None:
    def refused(request: Request) -> Response | None:
        if allow_remote or is_local(request):
            return None
        return JSONResponse(
            {"detail": "/ui is served to loopback clients only; set ui_allow_remote to serve it beyond"},
            status_code=403,
        )

    def answer(value: Any) -> Response:
        return Response(redact.body(encode(value)), media_type="application/json", headers=NO_STORE)

    @app.get("/ui", include_in_schema=False)
    async def ui_page(request: Request) -> Response:
        if (refusal := refused(request)) is not None:
            return refusal
        html, headers = page()
        return Response(html, media_type="text/html; charset=utf-8", headers=headers)

    @app.get("/ui/api/exchanges", include_in_schema=False)
    async def ui_exchanges(
        request: Request,
        status: Literal["completed", "error"] | None = None,
        limit: int = Query(500, ge=1, le=5000),
    ) -> Response:
        if (refusal := refused(request)) is not None:
            return refusal
        if traces is None:
            return answer({"enabled": False, "capacity": 0, "stored": 0,
                           "counts": {"all": 0, "completed": 0, "error": 0}, "exchanges": []})
        return answer({"enabled": True, "capacity": traces.capacity, "stored": len(traces),
                       **traces.summaries(status, limit)})

    @app.get("/ui/api/exchanges/{seq}/{index}", include_in_schema=False)
    async def ui_exchange(request: Request, seq: int, index: int) -> Response:
        if (refusal := refused(request)) is not None:
            return refusal
        found = traces.detail(seq, index) if traces is not None else None
        if found is None:
            return JSONResponse({"detail": "no such exchange: it has left the trace buffer"}, status_code=404)
        return answer(found)


__all__ = ["add_ui_routes", "is_local", "page"]
