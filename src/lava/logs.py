"""Log lines that say which request, and which input of it, they belong to.

The /v1/responses route puts the request id in a context variable and the engine puts each
input's id in another, inside that input's own task. asyncio copies the context into every task
and into threads started with `asyncio.to_thread`, so records from policies, backends and
uvicorn (which logs a failing request from that request's task) carry both ids without any
function passing them along.

`log_format = "json"` writes one JSON object a line for log pipelines; `"text"` is for people.
Secrets are masked by `security.RedactingFilter` before either formatter sees a record.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar
from typing import IO, Any

import orjson

from .security import RedactingFilter, Redactor

request_id_var: ContextVar[str | None] = ContextVar("lava_request_id", default=None)
source_id_var: ContextVar[int | None] = ContextVar("lava_source_id", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s"


class RequestContextFilter(logging.Filter):
    """Stamps each record with the ids of the request (and input) being handled where it was logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        record.source_id = source_id_var.get()
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        source_id = getattr(record, "source_id", None)
        if request_id is None:
            record.context = ""
        elif source_id is None:
            record.context = f" [{request_id}]"
        else:
            record.context = f" [{request_id} input {source_id}]"
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, ids, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            entry["request_id"] = request_id
        source_id = getattr(record, "source_id", None)
        if source_id is not None:
            entry["source_id"] = source_id
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        try:
            return orjson.dumps(entry).decode()
        except TypeError:  # lone surrogates or integers past 64 bits: the stdlib escapes or writes them
            return json.dumps(entry)


def configure_logging(level: str, log_format: str, redact: Redactor, stream: IO[str] | None = None) -> logging.Handler:
    """Route every record (lava's, uvicorn's, the SDKs') through one handler on the root logger,
    ids stamped and secrets masked; returns the handler so a caller can remove it again."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(RequestContextFilter())
    handler.addFilter(RedactingFilter(redact))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Python warnings become records too, so a JSON log holds nothing but JSON lines.
    logging.captureWarnings(True)
    return handler


__all__ = [
    "JsonFormatter",
    "RequestContextFilter",
    "TextFormatter",
    "configure_logging",
    "request_id_var",
    "source_id_var",
]
