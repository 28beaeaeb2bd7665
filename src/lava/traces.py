"""The recent exchanges behind the /ui trace page: a bounded ring buffer, for people to look at.

It is observability, never state: nothing in lava reads it to decide anything, and a restart
empties it. Recording costs nothing but a reference: the buffer keeps the request body as read
and the answer as encoded, bytes that already exist. Bytes, not the parsed objects, because a
buffer of 200 GEN batches holds millions of small objects that the garbage collector would walk
again and again on the hot path (measured: 1.2 ms per request). Everything the page shows is
decoded when it asks; the list's rows are cached per exchange.

Bounded twice: by requests (`trace_buffer_size`) and by the bytes of their request and answer
bodies (`trace_buffer_bytes`), so a burst of large MAGMA-GEN batches cannot grow the process;
the newest request is always kept.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

Output = dict[str, Any]
TEXT_PREVIEW = 160
MAX_DIFF_CHANGES = 500


@dataclass(slots=True)
class Exchange:
    seq: int
    received: float  # wall clock, seconds since the epoch
    duration_s: float
    request_body: bytes
    answer: bytes
    rows: list[dict[str, Any]] | None = None  # the list's rows, made on the page's first look

    @property
    def size(self) -> int:
        return len(self.request_body) + len(self.answer)

    def decoded(self) -> tuple[dict[str, Any], list[Output]]:
        # The standard library, not orjson: integers beyond 64 bits must read back exactly.
        return json.loads(self.request_body), json.loads(self.answer)


class TraceBuffer:
    def __init__(self, capacity: int, max_bytes: int) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._exchanges: deque[Exchange] = deque()
        self._bytes = 0
        self._seq = itertools.count(1)

    def record(self, request_body: bytes, answer: bytes, *, received: float, duration_s: float) -> None:
        exchange = Exchange(next(self._seq), received, duration_s, request_body, answer)
        self._exchanges.append(exchange)
        self._bytes += exchange.size
        while len(self._exchanges) > self.capacity or (self._bytes > self.max_bytes and len(self._exchanges) > 1):
            self._bytes -= self._exchanges.popleft().size

    def __len__(self) -> int:
        return len(self._exchanges)

    def summaries(self, status: str | None = None, limit: int = 500) -> dict[str, Any]:
        """The page's list: one row per candidate, newest request first, and counts per status."""
        counts = {"completed": 0, "error": 0}
        rows: list[dict[str, Any]] = []
        for exchange in reversed(self._exchanges):
            if exchange.rows is None:
                request, outputs = exchange.decoded()
                inputs = _inputs_by_id(request)
                exchange.rows = [_summary(exchange, index, output, inputs.get(output["source_id"]))
                                 for index, output in enumerate(outputs)]
            for row in exchange.rows:
                counts[row["status"]] = counts.get(row["status"], 0) + 1
                if len(rows) < limit and (status is None or row["status"] == status):
                    rows.append(row)
        return {"counts": {"all": sum(counts.values()), **counts}, "exchanges": rows}

    def detail(self, seq: int, index: int) -> dict[str, Any] | None:
        """Everything about one candidate, or None once it has left the buffer."""
        exchange = next((e for e in self._exchanges if e.seq == seq), None)
        if exchange is None:
            return None
        request, outputs = exchange.decoded()
        if not 0 <= index < len(outputs):
            return None
        output = outputs[index]
        agent_input = _inputs_by_id(request).get(output["source_id"])
        before = agent_input.get("memory", {}) if agent_input is not None else {}
        return {
            **_summary(exchange, index, output, agent_input),
            "request": {
                "inputs": len(request.get("inputs", [])),
                "candidates": len(outputs),
                "duration_s": exchange.duration_s,
            },
            "input": {key: value for key, value in agent_input.items() if key != "memory"} if agent_input else None,
            "output": output["output"],
            "error": output["error"],
            "internal_steps": output["internal_steps"],
            "memory_diff": memory_diff(before, output["memory"]),
        }


def _inputs_by_id(request: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {entry["id"]: entry for entry in request.get("inputs", [])}


def _preview(text: str) -> str:
    return text if len(text) <= TEXT_PREVIEW else text[: TEXT_PREVIEW - 1] + "…"


def _decision_text(output: Output) -> str:
    if output["status"] != "completed":
        error = output["error"] or {}
        return f"{error.get('code', 'error')}: {error.get('message', '')}"
    decision = output["output"] or {}
    calls = decision.get("tool_calls") or []
    if calls:
        return "; ".join(
            f"{call.get('target_robot_name')}.{call.get('name')}({_arguments(call.get('arguments'))})" for call in calls
        )
    return f"say: {decision.get('say', '')}"


def _arguments(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return ""
    return ", ".join(f"{key}={value!r}" for key, value in arguments.items())


def _summary(exchange: Exchange, index: int, output: Output, agent_input: dict[str, Any] | None) -> dict[str, Any]:
    steps = output["internal_steps"] or []
    error = output["error"] or {}
    return {
        "id": f"{exchange.seq}-{index}",
        "seq": exchange.seq,
        "index": index,
        "received": exchange.received,
        "duration_s": exchange.duration_s,
        "request_id": output["request_id"],
        "source_id": output["source_id"],
        "candidate_index": output["candidate_index"],
        "status": output["status"],
        "code": error.get("code"),
        "instruction_type": agent_input["instruction"]["type"] if agent_input is not None else None,
        "instruction": _preview(agent_input["instruction"]["content"]) if agent_input is not None else "",
        "decision": _preview(_decision_text(output)),
        "model_calls": sum(1 for step in steps if "total_input_tokens" in step),
        "model_s": round(sum(float(step.get("duration_s", 0.0)) for step in steps), 4),
        "input_tokens": sum(int(step.get("total_input_tokens", 0)) for step in steps),
        "output_tokens": sum(int(step.get("total_output_tokens", 0)) for step in steps),
    }


def memory_diff(before: Any, after: Any, limit: int = MAX_DIFF_CHANGES) -> dict[str, Any]:
    """What the candidate changed in the memory: `changes` of {path, op: added|removed|changed,
    before, after}; objects compared by key, lists by position (appended turns read as added)."""
    changes: list[dict[str, Any]] = []
    truncated = _diff(before, after, "", changes, limit)
    return {"changes": changes, "truncated": truncated}


def _diff(before: Any, after: Any, path: str, changes: list[dict[str, Any]], limit: int) -> bool:
    """Appends changes below `path`; True once `limit` is reached."""
    if before is after:  # an error candidate returns the input memory itself
        return False
    if isinstance(before, dict) and isinstance(after, dict):
        for key in before:
            child = f"{path}.{key}" if path else str(key)
            if key not in after:
                if _add(changes, limit, child, "removed", before[key], None):
                    return True
            elif _diff(before[key], after[key], child, changes, limit):
                return True
        for key in after:
            if key not in before and _add(changes, limit, f"{path}.{key}" if path else str(key), "added",
                                          None, after[key]):
                return True
        return False
    if isinstance(before, list) and isinstance(after, list):
        for position in range(max(len(before), len(after))):
            child = f"{path}[{position}]"
            if position >= len(before):
                stop = _add(changes, limit, child, "added", None, after[position])
            elif position >= len(after):
                stop = _add(changes, limit, child, "removed", before[position], None)
            else:
                stop = _diff(before[position], after[position], child, changes, limit)
            if stop:
                return True
        return False
    if before != after or type(before) is not type(after):
        return _add(changes, limit, path, "changed", before, after)
    return False


def _add(changes: list[dict[str, Any]], limit: int, path: str, op: str, before: Any, after: Any) -> bool:
    if len(changes) >= limit:
        return True
    changes.append({"path": path, "op": op, "before": before, "after": after})
    return False


__all__ = ["Exchange", "TraceBuffer", "memory_diff"]
