"""Request bodies, the same way on every route: read under a size limit, parse strictly, and
document the wire model in the OpenAPI document.

Routes read their bodies by hand rather than through FastAPI's body parameters, so that a body
is parsed once, NaN and Infinity are refused everywhere (pydantic's JSON mode lets them into
free-form fields, while magma_core's consumers refuse them), and oversized bodies get a 413
before they are buffered.
"""

from __future__ import annotations

from typing import Any, TypeVar

import pydantic_core
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from .errors import InvalidInput

Model = TypeVar("Model", bound=BaseModel)

SCHEMA_REF = "#/components/schemas/{model}"


async def read_body(request: Request, limit: int) -> bytes | Response:
    """The body, or a 413 as soon as it is known to exceed `limit` (without buffering it all)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return _too_large(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return _too_large(size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_body(body: bytes, model: type[Model]) -> Model:
    """Bytes -> `model`. Python-mode validation after parsing refuses NaN and Infinity even in
    free-form JSON fields, with the field's location."""
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


__all__ = ["openapi_schema", "parse_body", "read_body"]
