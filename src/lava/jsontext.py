"""`json.dumps(value, ensure_ascii=False)`, the text format of history records and model-facing
decisions, without rebuilding the encoder on every call.

`json.dumps` with any non-default argument constructs a `JSONEncoder`, a float formatter and a
C encoder each time, about two thirds of encoding a small decision; a GEN batch encodes dozens of
them. The C encoder built here once is the very one `json.dumps` would build (same string
encoder, separators and NaN handling), so the text is the same character for character. The one
difference: no circular-reference check, which only turns a ValueError into a RecursionError for
a value that could never be encoded anyway, and keeps the shared encoder free of per-call state.
"""

from __future__ import annotations

import json
from json import encoder as _json_encoder
from typing import Any

_make_encoder = getattr(_json_encoder, "c_make_encoder", None)
_encode = (
    _make_encoder(None, json.JSONEncoder().default, _json_encoder.encode_basestring, None, ": ", ", ",
                  False, False, True)
    if _make_encoder is not None else None
)


def json_text(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False)`, character for character."""
    if _encode is None or isinstance(value, str):  # no C accelerator (or a bare string): the stdlib way
        return json.dumps(value, ensure_ascii=False)
    return "".join(_encode(value, 0))


__all__ = ["json_text"]
