"""lava's wire models must accept and refuse exactly what magma_core 2.0.1's models do."""

from __future__ import annotations

import copy
import math
from typing import Any

import magma_core.protocol.agent as magma
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import lava.protocol as lava

MODELS = ["AgentRequest", "AgentInput", "AgentInstruction", "AgentOutput", "AgentDecision", "ToolCall",
          "AgentError", "AgentHealth", "AgentInfo"]


@pytest.mark.parametrize("name", MODELS)
def test_schema_and_config_match_magma_core(name: str) -> None:
    ours, theirs = getattr(lava, name), getattr(magma, name)
    assert ours.model_json_schema() == theirs.model_json_schema()
    assert ours.model_config == theirs.model_config


def accepts(model: type, payload: Any) -> bool:
    try:
        model.model_validate(payload)
    except ValidationError:
        return False
    return True


COMPLETED = {
    "request_id": "r", "source_id": 0, "candidate_index": 0, "status": "completed", "memory": {},
    "internal_steps": [], "output": {"say": "hi", "tool_calls": []}, "error": None,
}
FAILED = {**COMPLETED, "status": "error", "output": None, "error": {"code": "invalid_output", "message": "m"}}


def mutated(base: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(base)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DELETE = object()

# Cases from protocol.md §15: (payload, accepted by magma_core 2.0.1)
OUTPUT_CASES = [
    (COMPLETED, True),
    (FAILED, True),
    (mutated(COMPLETED, ("output",), {"say": "x", "tool_calls": [
        {"name": "t", "arguments": {}, "target_robot_name": "r"}]}), True),
    (mutated(COMPLETED, ("output",), {"say": "", "tool_calls": []}), True),
    (mutated(COMPLETED, ("memory",), {"a": [1, 2.5, None, True, {"b": "c"}]}), True),
    (mutated(COMPLETED, ("source_id",), True), False),
    (mutated(COMPLETED, ("source_id",), 0.0), False),
    (mutated(COMPLETED, ("source_id",), "0"), False),
    (mutated(COMPLETED, ("extra",), 1), False),
    (mutated(COMPLETED, ("memory",), {"a": math.nan}), False),
    (mutated(COMPLETED, ("memory",), {"a": math.inf}), False),
    (mutated(COMPLETED, ("output",), None), False),
    (mutated(FAILED, ("output",), {"say": "x"}), False),
    (mutated(FAILED, ("error", "code"), ""), False),
    (mutated(COMPLETED, ("output",), {"tool_calls": [{"name": "t", "arguments": {}}]}), False),
    (mutated(COMPLETED, ("output",), {"tool_calls": [{"name": "t", "arguments": [], "target_robot_name": "r"}]}),
     False),
    (mutated(COMPLETED, ("memory",), _DELETE), False),
    (mutated(COMPLETED, ("internal_steps",), ["step"]), False),
    (mutated(COMPLETED, ("candidate_index",), -1), False),
    (mutated(COMPLETED, ("status",), "ok"), False),
]


@pytest.mark.parametrize(("payload", "accepted"), OUTPUT_CASES)
def test_output_cases_match_magma_core(payload: dict, accepted: bool) -> None:
    assert accepts(magma.AgentOutput, payload) is accepted
    assert accepts(lava.AgentOutput, payload) is accepted


def test_request_rules() -> None:
    entry = {"id": -3, "instruction": {"type": "user", "content": "x"}}
    for model in (lava.AgentRequest, magma.AgentRequest):
        assert accepts(model, {"request_id": "r", "inputs": []})
        assert accepts(model, {"request_id": "r", "inputs": [entry]})
        assert not accepts(model, {"request_id": "r", "inputs": [entry, entry]})  # duplicate ids
        assert not accepts(model, {"request_id": "r", "inputs": [{**entry, "num_outputs": 0}]})
        assert not accepts(model, {"request_id": "r", "inputs": [{**entry, "instruction": {"type": "system",
                                                                                            "content": "x"}}]})
        assert not accepts(model, {"request_id": "", "inputs": []})


def test_info_rules() -> None:
    base = {"agent_id": "a", "agent_version": "1", "capabilities": {"inference": True}}
    for model in (lava.AgentInfo, magma.AgentInfo):
        assert accepts(model, base)
        assert not accepts(model, {**base, "coaching_session_version": "1"})
        assert not accepts(model, {**base, "capabilities": {"inference": 1}})
        assert not accepts(model, {k: v for k, v in base.items() if k != "capabilities"})


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                      st.text(max_size=5))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=8)
field_value = st.one_of(json_value, st.sampled_from(["completed", "error", "r", "", 0, 1, -1]))


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from([COMPLETED, FAILED]),
    key=st.sampled_from([*COMPLETED.keys(), "extra"]),
    value=field_value,
)
def test_random_outputs_judged_like_magma_core(base: dict, key: str, value: Any) -> None:
    payload = {**base, key: value}
    assert accepts(lava.AgentOutput, payload) is accepts(magma.AgentOutput, payload)


@settings(max_examples=200, deadline=None)
@given(memory=st.dictionaries(st.text(max_size=4), json_value, max_size=4), ids=st.lists(st.integers(), max_size=4))
def test_random_requests_judged_like_magma_core(memory: dict, ids: list[int]) -> None:
    payload = {"request_id": "r", "inputs": [
        {"id": i, "instruction": {"type": "env", "content": "{}"}, "memory": memory} for i in ids]}
    assert accepts(lava.AgentRequest, payload) is accepts(magma.AgentRequest, payload)
