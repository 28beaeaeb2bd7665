"""Engine guarantees: order, isolation, error mapping, deadlines (tested through the backend seam)."""

from __future__ import annotations

import asyncio
import json
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import user_input
from lava.backends.base import Completion, GenerationRequest
from lava.backends.scripted import FunctionBackend, ScriptedBackend
from lava.engine import Engine, EngineLimits
from lava.errors import BackendUnavailable, InvalidInput
from lava.policies.full_history import FullHistoryPolicy
from lava.protocol import AgentRequest
from lava.settings import Settings

PRESS = '{{"tool_calls": [{{"robot": "panda", "name": "press_button", "arguments": {{"id": "{}"}}}}]}}'


def engine_for(backend, **limits) -> Engine:
    return Engine(FullHistoryPolicy(backend, Settings(backend="scripted")), EngineLimits(**limits))


def request(*inputs, request_id="req-1") -> AgentRequest:
    return AgentRequest.model_validate({"request_id": request_id, "inputs": list(inputs)})


def run(engine: Engine, req: AgentRequest):
    return asyncio.run(engine.respond(req))


@settings(max_examples=25, deadline=None)
@given(counts=st.lists(st.integers(min_value=1, max_value=4), max_size=5), ids=st.randoms())
def test_outputs_follow_input_then_candidate_order(counts: list[int], ids: random.Random) -> None:
    source_ids = ids.sample(range(-50, 50), len(counts))

    async def jittery(req: GenerationRequest):
        await asyncio.sleep(ids.random() / 200)  # inputs finish in random order
        return [PRESS.format(f"sw{k}") for k in range(req.n)]

    req = request(*(user_input(id=i, n=n) for i, n in zip(source_ids, counts, strict=True)))
    outputs = run(engine_for(FunctionBackend(jittery)), req)
    assert [(o["request_id"], o["source_id"], o["candidate_index"]) for o in outputs] == [
        ("req-1", i, k) for i, n in zip(source_ids, counts, strict=True) for k in range(n)]


def test_candidates_get_independent_memories_and_rules_survive() -> None:
    memory = {"memory_list": ["Keep fragile objects separate."], "history": [], "custom": {"nested": [1]}}
    backend = FunctionBackend(lambda req: [PRESS.format("sw1"), '{"say": "Which button?"}'])
    req = request(user_input(n=2, memory=memory))
    first, second = run(engine_for(backend), req)
    assert first["status"] == second["status"] == "completed"
    for out in (first, second):
        assert out["memory"]["memory_list"] == ["Keep fragile objects separate."]
        assert out["memory"]["custom"] == {"nested": [1]}
    assert first["memory"]["history"] != second["memory"]["history"]
    # no object is shared between the candidates or with the request
    first["memory"]["custom"]["nested"].append(2)
    first["memory"]["memory_list"].append("x")
    assert second["memory"]["custom"] == {"nested": [1]}
    assert req.inputs[0].memory["custom"] == {"nested": [1]}
    assert req.inputs[0].memory["history"] == []


def test_an_input_without_tools_can_still_be_answered_in_text() -> None:
    """`tools` may be empty (its default): the model's `{"say": ...}` is then the whole answer."""
    backend = FunctionBackend(lambda req: ['{"say": "Understood."}'])
    (out,) = run(engine_for(backend), request(user_input("Hello", tools=[])))
    assert out["status"] == "completed", out["error"]
    assert out["output"] == {"say": "Understood.", "tool_calls": []}


def test_a_model_call_is_timed_even_when_the_backend_does_not_time_itself() -> None:
    async def slow(req):
        await asyncio.sleep(0.05)
        return [PRESS.format("sw1")]

    (out,) = run(engine_for(FunctionBackend(slow)), request(user_input()))
    assert out["internal_steps"][0]["duration_s"] >= 0.05


def test_memory_history_uses_reference_schema() -> None:
    backend = FunctionBackend(lambda req: [PRESS.format("sw1")])
    (out,) = run(engine_for(backend), request(user_input("Please press sw1")))
    assert out["memory"]["history"] == [
        {"author": "USER", "content": "Please press sw1"},
        {"author": "MODEL", "content": json.dumps(
            {"say": "", "action": {"panda": {"name": "press_button", "arguments": {"id": "sw1"}}}})},
    ]


def test_backend_failure_costs_only_its_input() -> None:
    def flaky(req: GenerationRequest):
        if "boom" in req.messages[-1].content:
            raise BackendUnavailable("connection refused by 127.0.0.1:9", component="backend:openai")
        return [PRESS.format("sw1")] * req.n

    memory = {"memory_list": ["rule"], "history": [{"author": "USER", "content": "earlier"}]}
    req = request(user_input(id=0, n=2), user_input("boom", id=1, n=2, memory=memory), user_input(id=2))
    outputs = run(engine_for(FunctionBackend(flaky)), req)
    assert [o["status"] for o in outputs] == ["completed", "completed", "error", "error", "completed"]
    for failed in outputs[2:4]:
        assert failed["error"] == {"code": "backend_unavailable", "message": "connection refused by 127.0.0.1:9",
                                   "component": "backend:openai"}
        assert failed["memory"] == memory
        assert failed["output"] is None


def test_unexpected_exception_becomes_internal_error() -> None:
    def broken(req):
        raise KeyError("bug")

    (out,) = run(engine_for(FunctionBackend(broken)), request(user_input()))
    assert out["status"] == "error"
    assert out["error"]["code"] == "internal_error"
    assert "KeyError" in out["error"]["message"]


def test_invalid_output_is_repaired_once_with_the_validators_words() -> None:
    answers = iter(['{"tool_calls": [{"robot": "panda", "name": "fly", "arguments": {}}]}', PRESS.format("sw1")])
    backend = FunctionBackend(lambda req: [next(answers)])
    (out,) = run(engine_for(backend), request(user_input()))
    assert out["status"] == "completed"
    assert out["output"]["tool_calls"][0]["name"] == "press_button"
    repair_prompt = backend.requests[1].messages[-1].content
    assert "'fly' is not a known tool" in repair_prompt
    assert [s["component"] for s in out["internal_steps"]] == ["commander", "commander.repair"]
    assert out["internal_steps"][0]["output_raw"].startswith('{"tool_calls": [{"robot": "panda", "name": "fly"')


def test_unrepairable_output_is_an_invalid_output_error_with_trace() -> None:
    backend = FunctionBackend(lambda req: ["I think {maybe"] * req.n)
    memory = {"memory_list": ["r"]}
    (out,) = run(engine_for(backend), request(user_input(memory=memory)))
    assert out["status"] == "error"
    assert out["error"]["code"] == "invalid_output"
    assert out["error"]["component"] == "commander"
    assert out["memory"] == memory
    assert [s["output_raw"] for s in out["internal_steps"]] == ["I think {maybe", "I think {maybe"]


def test_deadline_turns_slow_candidates_into_errors_in_time() -> None:
    async def slow(req: GenerationRequest):
        if "slow" in req.messages[-1].content:
            await asyncio.sleep(30)
        return [PRESS.format("sw1")] * req.n

    req = request(user_input(id=0), user_input("slow please", id=1, n=2))
    started = time.perf_counter()
    outputs = run(engine_for(FunctionBackend(slow), deadline_s=0.3), req)
    assert time.perf_counter() - started < 2
    assert [o["status"] for o in outputs] == ["completed", "error", "error"]
    assert outputs[1]["error"]["code"] == "deadline_exceeded"


def test_concurrency_is_bounded() -> None:
    running = peak = 0

    async def counting(req):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return [PRESS.format("sw1")] * req.n

    req = request(*(user_input(id=i) for i in range(12)))
    run(engine_for(FunctionBackend(counting), max_concurrency=3), req)
    assert peak == 3


def test_wrong_number_of_completions_is_an_error() -> None:
    (out,) = run(engine_for(FunctionBackend(lambda req: [])), request(user_input()))
    assert out["status"] == "error" and out["error"]["code"] == "invalid_output"


@pytest.mark.parametrize(("fields", "loc"), [
    ({"memory": {"memory_list": "rule"}}, ("inputs", 1, "memory", "memory_list")),
    ({"memory": {"memory_list": ["ok", 3]}}, ("inputs", 1, "memory", "memory_list")),
    ({"memory": {"history": {}}}, ("inputs", 1, "memory", "history")),
    ({"memory": {"history": [{"author": "BOT", "content": "x"}]}}, ("inputs", 1, "memory", "history", 0, "author")),
    ({"memory": {"history": [{"author": "USER", "content": 3}]}}, ("inputs", 1, "memory", "history", 0, "content")),
    ({"memory": {"summary": ["x"]}}, ("inputs", 1, "memory", "summary")),
    ({"extra_keys": {"inference_mode": "yes"}}, ("inputs", 1, "extra_keys", "inference_mode")),
    ({"tools": [{"description": "x"}]}, ("inputs", 1, "tools", 0, "name")),
    ({"attributes": {"known_robots": [1]}}, ("inputs", 1, "attributes", "known_robots")),
])
def test_malformed_known_fields_fail_the_request_naming_the_field(fields, loc) -> None:
    backend = ScriptedBackend()
    with pytest.raises(InvalidInput) as raised:
        run(engine_for(backend), request(user_input(id=0), user_input(id=1, **fields)))
    assert raised.value.loc == loc
    assert backend.requests == []  # refused before any model work


def test_candidate_cap() -> None:
    with pytest.raises(InvalidInput, match="at most 4"):
        run(engine_for(ScriptedBackend(), max_candidates=4), request(user_input(n=5)))


def test_completion_objects_pass_through() -> None:
    backend = FunctionBackend(lambda req: [Completion(text='{"say": "Hello there."}')])
    (out,) = run(engine_for(backend), request(user_input("hi")))
    assert out["output"] == {"say": "Hello there.", "tool_calls": []}


rule_text = st.text(max_size=30)
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(max_size=8))
json_value = st.recursive(json_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                              st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                          max_leaves=10)


@settings(max_examples=60, deadline=None)
@given(rules=st.lists(rule_text, max_size=4),
       extra=st.dictionaries(st.text(min_size=1, max_size=6).filter(
           lambda k: k not in ("memory_list", "history", "summary", "lava")), json_value, max_size=3),
       n=st.integers(min_value=1, max_value=3), fail=st.booleans())
def test_memory_list_and_unknown_keys_survive_every_candidate(rules, extra, n, fail) -> None:
    memory = {"memory_list": rules, **extra}
    answer = "garbage {" if fail else PRESS.format("sw1")
    outputs = run(engine_for(FunctionBackend(lambda req: [answer] * req.n)), request(user_input(n=n, memory=memory)))
    assert len(outputs) == n
    for out in outputs:
        assert out["memory"]["memory_list"] == rules
        for key, value in extra.items():
            assert out["memory"][key] == value
        assert out["status"] == ("error" if fail else "completed")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=25,
)


@given(value=JSON_VALUES)
def test_json_copies_are_equal_independent_and_exact(value) -> None:
    from lava.memory import json_copies

    first, second = json_copies({"memory": value}, 2)
    assert first == second == {"memory": value}
    assert repr(first) == repr({"memory": value})  # ints stay ints, floats keep every digit and -0.0
    first["memory"] = "changed"
    assert second == {"memory": value}


def test_json_copies_of_values_orjson_refuses() -> None:
    from lava.memory import json_copies

    value = {"big": 2**80, "surrogate": "\ud800", "nested": [{"x": 1}]}
    first, second = json_copies(value, 2)
    assert first == second == value
    first["nested"][0]["x"] = 2
    assert second["nested"][0]["x"] == 1 and value["nested"][0]["x"] == 1
