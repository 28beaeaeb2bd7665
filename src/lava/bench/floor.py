"""The floor lava's overhead is measured against: a bare ASGI server that only decodes the request,
validates it with magma_core's own models, and encodes an answer of the right shape (one output
per candidate, each with a copy of the input memory). No framework, no agent.

Run as `python -m lava.bench.floor PORT`; it serves until killed.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

from ..memory import clone_json


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


def answer(body: bytes) -> bytes:
    request = AgentRequest.model_validate_json(body)
    outputs = []
    for entry in request.inputs:
        for index in range(entry.num_outputs):
            outputs.append({
                "request_id": request.request_id, "source_id": entry.id, "candidate_index": index,
                "status": "completed", "memory": clone_json(entry.memory), "internal_steps": [],
                "output": {"say": "Done.", "tool_calls": []}, "error": None,
            })
    return orjson.dumps(outputs)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = answer(b"".join(chunks)) if scope["method"] == "POST" else b'{"status":"ready"}'
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
