"""The floor lava's overhead is measured against: a bare ASGI server that only decodes the request,
validates it with magma_core's own models, and encodes the answer. No framework, no agent.

The answer it encodes is lava's own answer to the same request (handed over in a file), so both
servers read the same bytes and write the same bytes: what lava spends beyond that is lava's.

Run as `python -m lava.bench.floor PORT ANSWER.json`; it serves until killed.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson


def _load_models() -> Any:
    try:
        from magma_core.protocol.agent import AgentRequest
    except ImportError as exc:
        raise SystemExit(
            "the overhead floor validates with magma_core's models: "
            "pip install --no-deps -r requirements/test-magma-core.txt"
        ) from exc
    return AgentRequest


AgentRequest = _load_models()


def application(answer: Any) -> Any:
    """The floor server: any POST is validated as an agent request and answered with `answer`."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b'{"status":"ready"}'
        if scope["method"] == "POST":
            AgentRequest.model_validate_json(b"".join(chunks))
            body = orjson.dumps(answer)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    return app


if __name__ == "__main__":
    from pathlib import Path

    import uvicorn

    uvicorn.run(application(orjson.loads(Path(sys.argv[2]).read_bytes())), host="127.0.0.1", port=int(sys.argv[1]),
                log_level="warning", access_log=False)
