"""Request bodies, the same way on every route: read under a size limit, parse strictly, and
document the wire model in the OpenAPI document.

Routes read their bodies by hand rather than through FastAPI's body parameters, so that a body
is parsed once, NaN and Infinity are refused everywhere (pydantic's JSON mode lets them into
free-form fields, while magma_core's consumers refuse them), and oversized bodies get a 413
before they are buffered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

import orjson
import pydantic_core
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect
from starlette.types import Receive

from .errors import InvalidInput

Model = TypeVar("Model", bound=BaseModel)

SCHEMA_REF = "#/components/schemas/{model}"


async def read_body(request: Request, limit: int) -> bytes | Response:
    """The body, or a 413 as soon as it is known to exceed `limit` (without buffering it all)."""
    return await _limited(request.headers.get("content-length"), request.stream(), limit)


async def receive_body(scope: Mapping[str, Any], receive: Receive, limit: int) -> bytes | Response:
    """`read_body` for a plain ASGI handler, reading the messages itself."""
    declared = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"content-length"), None)
    return await _limited(declared, _chunks(receive), limit)


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


async def _limited(declared: str | None, chunks: AsyncIterator[bytes], limit: int) -> bytes | Response:
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return _too_large(int(declared), limit)
    received: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            return _too_large(size, limit)
        received.append(chunk)
    return b"".join(received)


def parse_body(body: bytes, model: type[Model]) -> Model:
    """Bytes -> `model`, refusing NaN and Infinity even in free-form JSON fields.

    The usual body takes the fast path: orjson refuses NaN, Infinity and numbers that overflow
    to infinity, so once it has read the body, one JSON-mode validation accepts exactly what the
    Python-mode one would (about half the cost of a parse plus a Python-mode validation). Any
    body that fails either step goes the careful way, whose errors name the field."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        pass  # maybe non-finite, or beyond orjson (integers over 64 bits): the careful way decides
    else:
        try:
            return model.model_validate_json(body)
        except ValidationError:
            pass  # the careful way reports it, with the same messages whatever the path
    return _parse_body_checked(body, model)


def _parse_body_checked(body: bytes, model: type[Model]) -> Model:
    """Python-mode validation after parsing: refuses NaN and Infinity in free-form JSON fields too,
    with the field's location."""
    try:
        data = pydantic_core.from_json(body)
    except ValueError as exc:
        raise InvalidInput((), f"the body is not valid JSON: {exc}") from None
    return model.model_validate(data)


def openapi_schema(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`model`'s JSON schema for a hand-read body, and its definitions, to be published under
    components/schemas where OpenAPI tools resolve the `$ref`s."""
    schema = model.model_json_schema(ref_template=SCHEMA_REF)
    return schema, schema.pop("$defs", {})


def _too_large(size: int, limit: int) -> JSONResponse:
    return JSONResponse(
        {"detail": f"request body of at least {size} bytes exceeds the limit of {limit} bytes (max_body_bytes)"},
        status_code=413,
    )


__all__ = ["openapi_schema", "parse_body", "read_body", "receive_body"]
