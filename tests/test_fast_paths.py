"""Every shortcut taken for speed (issue 5) answers exactly as the careful way it skips.

Each fast path is compared with the general code it bypasses, on the inputs it is meant for and
on the ones that must fall back: the same models, the same 422 details, the same parses, the same
outputs, and candidates that stay independent when they share work.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from conftest import settings as settings_scripted
from conftest import user_input
from lava import parsing
from lava.app import create_app, validation_error_response
from lava.backends.scripted import FunctionBackend, ScriptedBackend
from lava.bench.workload import fixtures_dir, gen_batch
from lava.bodies import _parse_body_checked, parse_body
from lava.engine import Engine
from lava.errors import InvalidInput
from lava.jsontext import json_text
from lava.memory import MemoryView, decision_record
from lava.parsing import (
    _candidates,
    _json_objects,
    _marked_candidates,
    _scan_json_values,
    _strip_think_tags,
    parse_decision,
    render_decision,
    strip_reasoning,
)
from lava.policies import commander, create_policy
from lava.policies import names as names_module
from lava.policies.base import read_decision
from lava.protocol import AgentDecision, AgentRequest, ToolCall
from lava.tools import ToolBox, shared_decision_schema

# -- request bodies: one JSON-mode validation when the body allows it ------------------------------


def _outcome(body: bytes, parse: Any = parse_body) -> tuple[str, Any]:
    """What a body becomes: a model, a 422 answer, or an InvalidInput, whichever parser reads it."""
    try:
        return "ok", parse(body, AgentRequest).model_dump()
    except ValidationError as exc:
        return "422", validation_error_response(exc).body
    except InvalidInput as exc:
        return "invalid", (exc.loc, exc.message)


def _careful(body: bytes) -> tuple[str, Any]:
    return _outcome(body, _parse_body_checked)


def _request(**fields: Any) -> str:
    entry = {"id": 1, "instruction": {"type": "user", "content": "hi"}, **fields}
    return json.dumps({"request_id": "r", "inputs": [entry]})


BODIES = [
    _request(),
    _request(memory={"history": [{"author": "USER", "content": "x"}], "n": 1.5e3, "z": -0.0}),
    _request(id=1.0),
    _request(id=True),
    _request(num_outputs=0),
    _request(num_outputs=2.0),
    _request(tools=[1]),
    _request(extra=1),
    _request(memory={"a": 123456789012345678901234567890}),  # beyond orjson: the careful way
    _request(id=123456789012345678901234567890),
    '{"request_id": "r", "inputs": [{"id": 1, "instruction": {"type": "user", "content": "x"}, '
    '"memory": {"a": NaN}}]}',
    '{"request_id": "r", "inputs": [{"id": 1, "instruction": {"type": "user", "content": "x"}, '
    '"memory": {"a": 1e400}}]}',
    '{"request_id": "r", "inputs": [{"id": 1, "instruction": {"type": "user", "content": "x"}, '
    '"attributes": {"a": [-Infinity]}}]}',
    '{"request_id": "r", "request_id": "s", "inputs": []}',
    '{"request_id": "\\ud800", "inputs": []}',
    '{"request_id": "r", "inputs": []} trailing',
    '{"request_id": "r", "inputs": []}  \n',
    '{"request_id": "r", "inputs": [{"id": 1, "instruction": {"type": "user", "content": "x"}}, '
    '{"id": 1, "instruction": {"type": "user", "content": "x"}}]}',
    '{"request_id": "", "inputs": []}',
    "[]",
    "",
    "not json",
]


@pytest.mark.parametrize("body", BODIES)
def test_request_bodies_read_exactly_as_the_careful_way(body: str) -> None:
    raw = body.encode("utf-8", "surrogatepass")
    fast, careful = _outcome(raw), _careful(raw)
    if fast[0] == "ok" and careful[0] == "ok":
        # NaN never gets this far; compare as JSON so -0.0 and big integers count exactly.
        assert json.dumps(fast[1]) == json.dumps(careful[1])
    else:
        assert fast == careful


def test_non_finite_numbers_are_refused_by_the_fast_path_too() -> None:
    for body in BODIES[10:13]:
        kind, detail = _outcome(body.encode())
        assert kind == "422" and b"finite_number" in detail


def test_the_gen_batch_takes_one_json_validation() -> None:
    body = orjson.dumps(gen_batch(fixtures_dir()))
    assert parse_body(body, AgentRequest) == _parse_body_checked(body, AgentRequest)


# -- the /v1/responses shortcut past FastAPI's routing ----------------------------------------------


def _without_shortcut(**overrides: Any) -> TestClient:
    """An app whose POST /v1/responses goes the whole FastAPI way, to the documented route."""
    app = create_app(settings_scripted(**overrides))
    app.responses_shortcut = None
    return TestClient(app)


def _untimed(answer: Any) -> Any:
    """An answer without its measured durations, the one part two runs may not share."""
    for output in answer if isinstance(answer, list) else []:
        for step in output["internal_steps"]:
            step.pop("duration_s", None)
    return answer


@pytest.mark.parametrize("payload", [
    {"request_id": "r", "inputs": [user_input(n=2), {**user_input(n=1), "id": 2}]},
    {"request_id": "r", "inputs": [{**user_input(), "id": "1"}]},
    {"request_id": "r", "inputs": [{**user_input(), "memory": {"history": [{"author": "ROBOT", "content": ""}]}}]},
    {"request_id": "r"},
])
def test_shortcut_answers_exactly_as_the_fastapi_route(make_client, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = {"content-type": "application/json"}
    shortcut = make_client().post("/v1/responses", content=body, headers=headers)
    with _without_shortcut() as client:
        routed = client.post("/v1/responses", content=body, headers=headers)
    assert (shortcut.status_code, _untimed(shortcut.json())) == (routed.status_code, _untimed(routed.json()))


def test_shortcut_keeps_the_body_limit_and_bad_json(make_client) -> None:
    client = make_client(max_body_bytes=100)
    big = json.dumps({"request_id": "r", "inputs": [user_input()]}).encode()
    answer = client.post("/v1/responses", content=big, headers={"content-type": "application/json"})
    with _without_shortcut(max_body_bytes=100) as routed:
        expected = routed.post("/v1/responses", content=big, headers={"content-type": "application/json"})
    assert answer.status_code == 413 and answer.content == expected.content
    bad = client.post("/v1/responses", content=b"{", headers={"content-type": "application/json"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body"]


def test_post_responses_is_still_documented(make_client) -> None:
    document = make_client().app.openapi()
    operation = document["paths"]["/v1/responses"]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["inputs"]["items"]["$ref"].endswith("/AgentInput")
    assert "AgentInput" in document["components"]["schemas"]


def test_other_methods_and_paths_still_go_through_fastapi(make_client) -> None:
    client = make_client()
    assert client.get("/v1/responses").status_code == 405
    assert client.post("/v1/responses/", json={"request_id": "r", "inputs": []},
                       follow_redirects=False).status_code == 307


# -- model text: reading a bare JSON answer without the regular expressions -----------------------

TEXTS = st.one_of(
    st.text(max_size=60),
    st.from_regex(r"\s*[\[{].{0,40}[\]}]\s*", fullmatch=True),
    st.builds(json.dumps, st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=8)),
    st.builds(lambda a, b: a + " " + b, st.builds(json.dumps, st.dictionaries(st.text(max_size=3), st.integers())),
              st.builds(json.dumps, st.lists(st.integers(), max_size=2))),
)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@given(TEXTS)
def test_whole_text_json_reads_as_the_scan_does(text: str) -> None:
    assert _same(_json_objects(text), _scan_json_values(text))


@given(TEXTS)
def test_texts_without_tags_or_fences_read_as_the_full_candidate_search(text: str) -> None:
    if "<" not in text and "```" not in text:
        assert _same(_candidates(text), _marked_candidates(text))
        assert strip_reasoning(text) == _strip_think_tags(text)


@pytest.mark.parametrize("text", ['{"say": "Done."}', '  {"tool_calls": [{"robot": "panda", "name": "press_button", '
                                  '"arguments": {"id": "sw1"}}]}\n', "[1] [2]", '{"a": NaN}'])
def test_common_answers_parse_as_before(text: str) -> None:
    parsed = parse_decision(text, robots=("panda",))
    marked = _marked_candidates(_strip_think_tags(text))
    assert _same(_candidates(strip_reasoning(text)), marked)
    assert parsed.raw == text


# -- candidates sharing work stay independent ------------------------------------------------------


def _engine(backend: Any) -> Engine:
    return Engine(create_policy(settings_scripted(policy="full_history"), backend))


def test_candidates_with_one_answer_read_it_once_yet_stay_independent(monkeypatch) -> None:
    reads: list[str] = []
    real = commander.read_decision

    def counting(completion: Any, toolbox: ToolBox) -> Any:
        reads.append(completion.text)
        return real(completion, toolbox)

    monkeypatch.setattr(commander, "read_decision", counting)
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [user_input(n=3)]})
    outputs = asyncio.run(_engine(ScriptedBackend()).respond(request))
    assert len(reads) == 1 and [o["candidate_index"] for o in outputs] == [0, 1, 2]
    assert outputs[0]["memory"] == outputs[1]["memory"] == outputs[2]["memory"]
    outputs[0]["memory"]["history"].append({"author": "USER", "content": "mine"})
    outputs[0]["internal_steps"][0]["output_formatted"]["say"] = "changed"
    assert outputs[1]["memory"]["history"][-1]["author"] == "MODEL"
    assert outputs[2]["internal_steps"][0]["output_formatted"] != {"say": "changed"}
    assert outputs[0]["output"] is not outputs[1]["output"]


def test_shared_reading_gives_the_outputs_of_one_reading_per_candidate(monkeypatch) -> None:
    request = AgentRequest.model_validate(gen_batch(fixtures_dir(), inputs=3, candidates=3, history=8))
    shared = asyncio.run(_engine(ScriptedBackend()).respond(request))
    monkeypatch.setattr(commander, "_read_once", lambda completion, situation, read:
                        read_decision(completion, situation.toolbox))
    separate = asyncio.run(_engine(ScriptedBackend()).respond(request))

    assert _untimed(shared) == _untimed(separate)


def test_different_answers_are_each_read() -> None:
    backend = FunctionBackend(lambda request: ['{"say": "one"}', '{"say": "two"}'])
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [user_input(n=2)]})
    outputs = asyncio.run(_engine(backend).respond(request))
    assert [o["output"]["say"] for o in outputs] == ["one", "two"]


# -- tools, schemas and histories read once -----------------------------------------------------------


def test_tools_are_parsed_once_but_refused_every_time() -> None:
    tools = user_input()["tools"]
    first, second = ToolBox.from_input(tools, {}), ToolBox.from_input(json.loads(json.dumps(tools)), {})
    assert first.tools is second.tools
    duplicate = [tools[0], tools[0]]
    for _ in range(2):
        with pytest.raises(InvalidInput) as refused:
            ToolBox.from_input(duplicate, {})
        assert refused.value.loc == ("tools", 1, "name")


def test_shared_schema_is_the_toolbox_schema() -> None:
    toolbox = ToolBox.from_input(user_input()["tools"], {"known_robots": ["panda", "franka"]})
    assert shared_decision_schema(toolbox) == toolbox.decision_schema()
    assert shared_decision_schema(toolbox) is shared_decision_schema(
        ToolBox.from_input(user_input()["tools"], {"known_robots": ["panda", "franka"]}))


@pytest.mark.parametrize(("history", "loc"), [
    ([{"author": "USER", "content": "a"}, "text"], ("memory", "history", 1)),
    ([{"author": "ROBOT", "content": "a"}], ("memory", "history", 0, "author")),
    ([{"content": "a"}], ("memory", "history", 0, "author")),
    ([{"author": "USER", "content": 3}], ("memory", "history", 0, "content")),
    ([{"author": "USER"}], ("memory", "history", 0, "content")),
    ([{"author": ["USER"], "content": "a"}], ("memory", "history", 0, "author")),
    ([None], ("memory", "history", 0)),
])
def test_malformed_histories_still_name_the_field(history: list[Any], loc: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidInput) as refused:
        MemoryView.parse({"history": history})
    assert refused.value.loc == loc


def test_well_formed_history_reads_every_turn() -> None:
    history = [{"author": a, "content": c, "extra": 1} for a, c in (("USER", "u"), ("MODEL", "m"), ("SYSTEM", "s"))]
    view = MemoryView.parse({"history": history})
    assert [(t.author, t.content) for t in view.history] == [("USER", "u"), ("MODEL", "m"), ("SYSTEM", "s")]


# -- the server process -------------------------------------------------------------------------------


def test_a_scripted_server_keeps_no_requests_but_tests_can() -> None:
    app = create_app(settings_scripted())
    assert app.state.runtime.backend.keep_requests == 0
    assert ScriptedBackend().keep_requests > 0


def test_scripted_completions_carry_their_own_duration() -> None:
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [user_input(n=2)]})
    outputs = asyncio.run(_engine(ScriptedBackend()).respond(request))
    assert all(step["duration_s"] >= 0 for o in outputs for step in o["internal_steps"])


# -- encoders and constructors built once ---------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10)


@given(JSON_VALUES)
def test_json_text_is_json_dumps_without_ascii_escapes(value: Any) -> None:
    assert json_text(value) == json.dumps(value, ensure_ascii=False)


def test_json_text_of_records_and_decisions() -> None:
    decision = AgentDecision(say="", tool_calls=[ToolCall(name="pick", arguments={"objet": "tasse à café", "n": 2.0},
                                                          target_robot_name="panda")])
    action = {"panda": {"name": "pick", "arguments": {"objet": "tasse à café", "n": 2.0}}}
    assert decision_record(decision) == json.dumps({"say": "", "action": action}, ensure_ascii=False)
    assert render_decision(decision) == json.dumps({"tool_calls": [
        {"robot": "panda", "name": "pick", "arguments": {"objet": "tasse à café", "n": 2.0}}]}, ensure_ascii=False)
    assert render_decision(AgentDecision(say="Fini « ok »")) == json.dumps({"say": "Fini « ok »"}, ensure_ascii=False)


@pytest.mark.parametrize(("model", "fields"), [
    (ToolCall, {"name": "pick", "arguments": {"id": "a"}, "target_robot_name": "panda"}),
    (ToolCall, {"name": "", "arguments": {"x": float("nan")}, "target_robot_name": "panda"}),  # unvalidated, as before
    (AgentDecision, {"say": "Done.", "tool_calls": []}),
])
def test_unchecked_models_are_the_constructed_ones(model: Any, fields: dict[str, Any]) -> None:
    fast, slow = parsing._unchecked(model, dict(fields)), model.model_construct(**fields)
    assert fast == slow and repr(fast) == repr(slow)
    assert list(fast.__dict__) == list(slow.__dict__)
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__ and fast.__pydantic_private__ == slow.__pydantic_private__
    if model is AgentDecision:
        assert fast.model_dump(mode="json") == slow.model_dump(mode="json")


@given(TEXTS)
def test_decisions_read_as_with_model_construct(text: str) -> None:
    fast = parse_decision(text, robots=("panda",))
    real = parsing._unchecked
    parsing._unchecked = lambda model, fields: model.model_construct(**fields)  # type: ignore[assignment]
    try:
        slow = parse_decision(text, robots=("panda",))
    finally:
        parsing._unchecked = real
    assert (fast.decision, fast.problems, fast.assumptions) == (slow.decision, slow.problems, slow.assumptions)


# -- names read once per text ----------------------------------------------------------------------------

def _careful_names() -> dict[str, Any]:
    """policies.names as it read every text on every call, before its caches."""
    n = names_module

    def identifiers(text: str) -> list[str]:
        return [m.group(0) for m in n._IDENTIFIER.finditer(text)]

    def contents(texts: list[str]) -> set[str]:
        return {name for text in texts for m in n._CONTENTS.finditer(text) for name in identifiers(m.group(1))}

    def containers(texts: list[str]) -> list[str]:
        return list(dict.fromkeys(m.group(1) for text in texts for m in n._CONTAINER.finditer(text)
                                  if m.group(1).lower() not in n._STOP))

    def description_words(text: str) -> list[str]:
        return [w for w in re.findall(r"[A-Za-z][A-Za-z0-9_\-]*", text) if len(w) > 2 and w.lower() not in n._STOP]

    def known_names(attributes: dict[str, Any], texts: list[str], user_texts: list[str]) -> list[str]:
        names = n.attribute_values(attributes)
        for text in texts:
            names += identifiers(text)
            names += [m.group(1) for m in n._CONTAINER.finditer(text) if m.group(1).lower() not in n._STOP]
        for text in user_texts:
            names += identifiers(text)
            names += n._CAPITALIZED.findall(text)
        return list(dict.fromkeys(names))

    return {"identifiers": identifiers, "contents": contents, "containers": containers,
            "description_words": description_words, "known_names": known_names}


SCENE_TEXTS = st.lists(st.one_of(
    st.text(alphabet="abcAB_-12 .;\n", max_size=40),
    st.sampled_from(["white_tray contains white_cube_1 and red_cube_2.", "The Table has blue_cube_1; bin holds x9",
                     "Put the Red cube in Tray_2", "panda: get_objects succeed with message: tray_a has cube_b",
                     "Use table or a tray name such as white_tray", "Name of the button to press (sw1, sw22)."]),
), max_size=4)


@given(SCENE_TEXTS, SCENE_TEXTS)
def test_cached_names_are_the_careful_ones(texts: list[str], user: list[str]) -> None:
    careful = _careful_names()
    attributes = {"objects": ["cube_1", "Tray"], "known_robots": ["panda"]}
    for _ in range(2):  # filling the caches, then reading from them
        assert names_module.contents(texts) == careful["contents"](texts)
        assert names_module.containers(texts) == careful["containers"](texts)
        assert names_module.known_names(attributes, texts, user) == careful["known_names"](attributes, texts, user)
        for text in [*texts, *user]:
            assert names_module.identifiers(text) == careful["identifiers"](text)
            assert names_module.description_words(text) == careful["description_words"](text)
    returned = names_module.identifiers("cube_1 cube_2")
    returned.append("mine")
    assert names_module.identifiers("cube_1 cube_2") == ["cube_1", "cube_2"]


def test_parameter_enums_offer_the_descriptions_words() -> None:
    target = {"type": "str", "description": "Use table or a tray."}
    toolbox = ToolBox.from_input([{"name": "put_in", "description": "Put it in a place such as white_tray.",
                                   "arguments": {"target": target}}], {})
    careful = _careful_names()
    own = careful["description_words"]("Use table or a tray.") + careful["identifiers"](
        "Put it in a place such as white_tray.")
    for _ in range(2):
        assert names_module.parameter_enums(toolbox, ["cube_1", "table"], exclude={"put_in": {"tray"}}) == {
            "put_in": {"target": [v for v in dict.fromkeys(["cube_1", "table", *own]) if v != "tray"]}}


# -- inputs read with fewer objects --------------------------------------------------------------------

def test_history_turns_are_plain_immutable_records() -> None:
    (turn,) = MemoryView.parse({"history": [{"author": "USER", "content": "hi"}]}).history
    assert (turn.author, turn.content) == ("USER", "hi") and repr(turn) == "Turn(author='USER', content='hi')"
    with pytest.raises(AttributeError):
        turn.author = "MODEL"  # type: ignore[misc]


def test_the_server_process_collects_young_objects_above_a_batch(monkeypatch) -> None:
    import gc

    import uvicorn

    from lava import cli

    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append(app))
    monkeypatch.setattr("lava.logs.configure_logging", lambda *args, **kwargs: None)
    before = gc.get_threshold()
    try:
        assert cli.main(["serve", "--backend", "scripted", "--port", "0"]) == 0
        assert served and gc.get_threshold() == (cli.GC_YOUNG_THRESHOLD, *before[1:])
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


# -- one deadline timer per request, acting as a timeout per input ------------------------------------------

def _timed_engine(respond: Any, **limits: Any) -> Engine:
    from lava.engine import EngineLimits
    from lava.policies.full_history import FullHistoryPolicy

    return Engine(FullHistoryPolicy(FunctionBackend(respond), settings_scripted()), EngineLimits(**limits))


async def _slow_when_asked(request: Any) -> list[str]:
    if "slow" in request.messages[-1].content:
        await asyncio.sleep(30)
    return ['{"say": "ok"}'] * request.n


def _statuses(outputs: list[dict[str, Any]]) -> list[str]:
    return [o["status"] if o["status"] == "completed" else o["error"]["code"] for o in outputs]


def test_the_deadline_cuts_only_the_inputs_still_deciding() -> None:
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [
        user_input(id=0), user_input("slow", id=1, n=2), user_input(id=2)]})
    outputs = asyncio.run(_timed_engine(_slow_when_asked, deadline_s=0.2).respond(request))
    assert _statuses(outputs) == ["completed", "deadline_exceeded", "deadline_exceeded", "completed"]


def test_inputs_waiting_for_a_slot_are_cut_too() -> None:
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [
        user_input("slow", id=0), user_input("slow", id=1), user_input(id=2)]})
    outputs = asyncio.run(_timed_engine(_slow_when_asked, deadline_s=0.2, max_concurrency=1).respond(request))
    assert _statuses(outputs) == ["deadline_exceeded"] * 3


def test_a_deadline_already_passed_still_lets_instant_decisions_through() -> None:
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [user_input(id=0), user_input("slow", id=1)]})
    outputs = asyncio.run(_timed_engine(_slow_when_asked, deadline_s=0).respond(request))
    assert _statuses(outputs) == ["completed", "deadline_exceeded"]


def test_a_timeout_raised_by_the_policy_is_a_deadline_error() -> None:
    async def timing_out(request: Any) -> list[str]:
        raise TimeoutError("the model server took too long")

    request = AgentRequest.model_validate({"request_id": "r", "inputs": [user_input(id=0)]})
    assert _statuses(asyncio.run(_timed_engine(timing_out).respond(request))) == ["deadline_exceeded"]


def test_cancelling_the_request_cancels_its_inputs() -> None:
    started: list[Any] = []

    async def waiting(request: Any) -> list[str]:
        started.append(asyncio.current_task())
        await asyncio.sleep(30)
        return ['{"say": "ok"}'] * request.n

    async def main() -> None:
        engine = _timed_engine(waiting, deadline_s=10)
        request = AgentRequest.model_validate({"request_id": "r", "inputs": [user_input(id=0), user_input(id=1)]})
        answering = asyncio.create_task(engine.respond(request))
        await asyncio.sleep(0.05)
        answering.cancel()
        with pytest.raises(asyncio.CancelledError):
            await answering
        await asyncio.sleep(0)
        assert len(started) == 2 and all(task.cancelled() for task in started)

    asyncio.run(main())


# -- metrics: each step read once ---------------------------------------------------------------------------

def _observed_the_careful_way(metrics: Any, outputs: list[dict[str, Any]]) -> None:
    """Metrics.observe_candidates as it read every candidate's steps twice and looked labels up each time."""
    for output in outputs:
        error = output.get("error") or {}
        metrics.candidates.labels(output["status"], error.get("code", "")).inc()
        steps = output.get("internal_steps") or []
        if any(str(step.get("component", "")).endswith(".repair") for step in steps):
            metrics.repairs.inc()
        for step in steps:
            if "total_input_tokens" not in step:
                continue
            metrics.model_calls.labels(str(step.get("component", ""))).inc()
            metrics.model_seconds.observe(float(step.get("duration_s", 0.0)))
            metrics.tokens.labels("input").inc(step.get("total_input_tokens", 0))
            metrics.tokens.labels("output").inc(step.get("total_output_tokens", 0))
            metrics.tokens.labels("cached").inc(step.get("total_cached_tokens", 0))


def _samples(metrics: Any) -> list[tuple[str, list[tuple[str, str]], float]]:
    return sorted((s.name, sorted(s.labels.items()), s.value) for family in metrics.registry.collect()
                  for s in family.samples
                  if not s.name.endswith("_created"))


def test_candidates_are_counted_as_the_careful_way() -> None:
    from lava.metrics import Metrics

    def step(component: str, seconds: float, tokens: bool = True) -> dict[str, Any]:
        counted = {"total_input_tokens": 40, "total_output_tokens": 7, "total_cached_tokens": 3} if tokens else {}
        return {"component": component, "duration_s": seconds, **counted}

    outputs = [
        {"status": "completed", "error": None, "internal_steps": [step("classifier", 0.002), step("commander", 0.3)]},
        {"status": "completed", "error": None, "internal_steps": [step("commander", 0.3)]},
        {"status": "error", "error": {"code": "invalid_output"},
         "internal_steps": [step("commander", 0.01), step("commander.repair", 7.5)]},
        {"status": "error", "error": {"code": "deadline_exceeded"}, "internal_steps": []},
        {"status": "completed", "error": None, "internal_steps": [step("planner", 0.0, tokens=False),
                                                                   step("commander.repair", 0.02, tokens=False)]},
    ]
    fast, careful = Metrics(), Metrics()
    for _ in range(2):
        fast.observe_candidates(outputs)
        _observed_the_careful_way(careful, outputs)
    assert _samples(fast) == _samples(careful)


def _turns_read_entry_by_entry(history: list[Any]) -> Any:
    """memory._turns's careful reading alone: the turns, or where and why it refuses."""
    from lava.memory import AUTHORS, Turn

    turns = []
    for index, entry in enumerate(history):
        if not isinstance(entry, dict):
            return ("memory", "history", index)
        if entry.get("author") not in AUTHORS:
            return ("memory", "history", index, "author")
        if not isinstance(entry.get("content"), str):
            return ("memory", "history", index, "content")
        turns.append(Turn(entry["author"], entry["content"]))
    return tuple(turns)


HISTORY_ENTRIES = st.one_of(
    st.fixed_dictionaries({"author": st.sampled_from(["USER", "MODEL", "SYSTEM"]), "content": st.text(max_size=5)}),
    st.fixed_dictionaries({"author": st.sampled_from(["USER", "ROBOT", "user"]) | st.lists(st.just("USER"), max_size=1)
                           | st.none() | st.integers(), "content": st.text(max_size=3) | st.none() | st.integers()}),
    st.dictionaries(st.sampled_from(["author", "content", "extra"]), st.sampled_from(["USER", "x"]), max_size=3),
    st.none() | st.text(max_size=3) | st.lists(st.just("USER"), max_size=2),
)


@given(st.lists(HISTORY_ENTRIES, max_size=6))
def test_histories_read_as_entry_by_entry(history: list[Any]) -> None:
    try:
        read: Any = MemoryView.parse({"history": history}).history
    except InvalidInput as refused:
        read = refused.loc
    expected = _turns_read_entry_by_entry(history)
    assert read == expected
    if isinstance(read, tuple) and read and not isinstance(read[0], str):
        assert all(type(turn).__name__ == "Turn" for turn in read)


# -- the magma policy: per-tool-set tables and work done once per decision ------------------------------

def _magma_situations() -> list[Any]:
    """Every captured input, and GEN batches of the captured episodes, as situations."""
    from lava.bench.workload import Episode, branch_history, read_requests
    from lava.protocol import AgentInput
    from lava.situation import Situation

    entries = []
    for path in sorted(fixtures_dir().glob("*.requests.jsonl")):
        requests = read_requests(path)
        entries += [entry for request in requests for entry in request["inputs"]]
        try:
            episode = Episode.from_requests(requests)
            for index in range(4):
                history, instruction = branch_history(episode, index, 9 + 3 * index)
                entries.append({**episode.template, "instruction": {"type": "env", "content": instruction},
                                "memory": {"memory_list": ["Never use the table."], "history": history}})
        except (ValueError, KeyError, IndexError, ZeroDivisionError):
            pass  # an episode whose feedback is not MAGMA's JSON, or one request: its captured inputs are enough
    # Descriptions naming attributes (one of them empty), kinds and new places: narrow_by_attributes,
    # drop_kind_names and the location rule each take their other branches.
    moving = [{"name": "move_to", "description": "Move to a place.", "arguments": {"place": {
                  "type": "str", "description": "A place from move_targets or drop_zones."}}},
              {"name": "pick", "description": "Pick one of the listed items.", "arguments": {
                  "object_name": {"type": "str", "description": "The object, such as banana_0."},
                  "object_type": {"type": "str", "description": "One of the known colors."}}},
              {"name": "add_new_location", "description": "Add a new location.", "arguments": {
                  "location": {"type": "str", "description": "Where, e.g. shelf_9 or table."}}},
              {"name": "report", "description": "Report what is in the gripper, held or not.", "arguments": {}}]
    for attributes in ({"move_targets": [], "drop_zones": ["zone_a", "zone_b"], "colors": ["red"],
                        "items": ["banana", "apple"]},
                       {"move_targets": ["dock"], "drop_zones": ["zone_a"], "colors": [], "items": []}):
        entries.append(user_input("Move the banana to zone_a, then pick the apple.", tools=moving,
                                  attributes={"known_robots": ["arm1"], **attributes}))
    return [Situation.read(AgentInput.model_validate(entry)) for entry in entries]


def _magma_states(policy: Any, situation: Any) -> list[Any]:
    """The state lava builds for this input, and variants that reach the other branches: an object
    held, a put just refused, a request that clears a place or says otherwise."""
    from lava.policies.demos import roles

    state = policy.turn_state(situation, intent="act")
    states = [state]
    _, take, put = roles(situation.toolbox)
    names = [n for values in situation.attributes.values() if isinstance(values, list) for n in values
             if isinstance(n, str)] + ["green_cube_1", "blue_cube_2", "white_tray", "table"]
    robot = (situation.toolbox.robots or ("robot",))[0]
    for index, value in enumerate(names[:6]):
        for request in ("Sort the cubes.", "Clear the table and keep the blue cube.", "Put it in the white tray."):
            variant = copy.copy(state)
            variant.request, variant.held = request, value
            variant.held_from = "table" if index % 2 else None
            if take is not None:
                variant.done_calls = [*state.done_calls, {"robot": robot, "name": take.name,
                                                          "arguments": {take.params[0].name: value}}]
            if put is not None and len(put.params) == 1:
                variant.last_failed = True
                variant.pending_failed = [{"robot": robot, "name": put.name,
                                           "arguments": {put.params[0].name: names[0]}}]
            if index % 3:
                variant.observations = [*state.observations, f"detect: white_tray contains {value}, red_cube_3."]
            states.append(variant)
    return states


def _careful_enums(policy: Any, situation: Any, state: Any, *, narrow: bool = True) -> dict[str, Any]:
    """MagmaPolicy.enums as it was before its per-tool-set tables: every regex per tool, per input."""
    import re as re_

    from lava.policies import magma
    from lava.policies.demos import roles
    from lava.policies.goals import cleared
    from lava.policies.names import (
        contents,
        description_words,
        identifiers,
        known_names,
        location_values,
        parameter_enums,
    )

    results = [*state.observations, state.last_feedback, *state.earlier]
    user = [state.request, *state.rules, *situation.memory.memory_list]
    names = known_names(situation.attributes, results, user)
    _, take, put = roles(situation.toolbox)
    exclude: dict[str, set[str]] = {}
    if take is not None and put is not None:
        taken = {v for c in state.done_calls if c["name"] == take.name for v in c.get("arguments", {}).values()
                 if isinstance(v, str)}
        exclude[put.name] = taken | contents(results)
        exclude[take.name] = set(taken)
    if put is not None and state.held and state.held_from:
        exclude.setdefault(put.name, set()).add(state.held_from)
    if put is not None and state.request and (place := cleared(state.request)):
        exclude.setdefault(put.name, set()).update(p for p in names if p.lower().replace("_", " ") == place.lower())
    if state.last_failed and state.pending_failed:
        for call in state.pending_failed:
            tool = situation.toolbox.get(call["name"])
            if tool is not None and len(tool.params) == 1:
                value = (call.get("arguments") or {}).get(tool.params[0].name)
                if isinstance(value, str):
                    exclude.setdefault(tool.name, set()).add(value)
    enums = parameter_enums(situation.toolbox, names, exclude=exclude)
    places = list(dict.fromkeys([*(state.scene or {}), *magma.containers(results),
                                 *location_values(situation.attributes)]))
    if places:
        for tool in situation.toolbox.tools:
            for param in tool.params:
                if (param.json_type == "string" and magma._LOCATION.search(f"{param.name} {param.description}")
                        and not re_.search(r"\bnew\b", f"{tool.description} {param.description}", re_.I)):
                    own = [w for w in [*identifiers(param.description), *description_words(param.description)]
                           if w in places or "_" in w or w.lower() == "table"]
                    allowed = [v for v in dict.fromkeys([*places, *own]) if v not in exclude.get(tool.name, set())]
                    if allowed:
                        enums.setdefault(tool.name, {})[param.name] = allowed
    lists = {key: [v for v in value if isinstance(v, str)] for key, value in situation.attributes.items()
             if isinstance(value, list) and key not in ("known_robots",)}
    for tool in situation.toolbox.tools:
        for param in tool.params:
            if param.json_type != "string":
                continue
            text = f"{param.description} {tool.description}".lower()
            named = [key for key, values in lists.items() if values and re_.search(
                rf"(?:listed|one of|among)\s+(?:the\s+)?(?:known\s+)?{re_.escape(key.lower())}\b"
                if "_" not in key else rf"\b{re_.escape(key.lower())}\b", text)]
            if len(named) == 1:
                allowed = [v for v in lists[named[0]] if v not in exclude.get(tool.name, set())]
                if allowed:
                    enums.setdefault(tool.name, {})[param.name] = allowed
    seen = set(identifiers(" ".join(results)))
    if seen:
        for tool in situation.toolbox.tools:
            for param in tool.params:
                values = enums.get(tool.name, {}).get(param.name)
                if not values or not magma._OBJECT_PARAM.search(param.name) or magma._KIND_PARAM.search(param.name):
                    continue
                kept = [v for v in values if not any(i.startswith((v + "_", v + "-")) for i in seen)]
                if kept and len(kept) < len(values):
                    enums[tool.name][param.name] = kept
    movable = contents(results) - exclude.get(take.name, set()) if take is not None and put is not None else set()
    if movable and take is not None:
        enums[take.name] = {take.params[0].name: sorted(movable)}
    if state.scene and take is not None and put is not None:
        objects = [t for things in state.scene.values() for t in things if t not in exclude.get(take.name, set())]
        if objects:
            enums[take.name] = {take.params[0].name: sorted(set(objects))}
        targets = [p for p in enums.get(put.name, {}).get(put.params[0].name, places) if p in places
                   and p not in exclude.get(put.name, set())] or [p for p in places
                                                                  if p not in exclude.get(put.name, set())]
        if targets:
            enums[put.name] = {put.params[0].name: targets}
    if narrow and put is not None and not magma._CONTRARY.search(" ".join(user)):
        matches = _careful_matches(policy, situation, state, policy.held(state, take, put), put)
        if len(matches) == 1:
            enums[put.name] = {put.params[0].name: matches}
    return enums


def _careful_matches(policy: Any, situation: Any, state: Any, held: Any, put: Any) -> list[str]:
    if not held or put is None:
        return []
    known = _careful_enums(policy, situation, state, narrow=False)
    return policy.matching_places(situation, state, held, put, known)


def _careful_not_now(policy: Any, situation: Any, state: Any) -> tuple[str, ...]:
    """MagmaPolicy.not_now as it was: the words of every tool, every input."""
    from lava.policies import magma
    from lava.policies.demos import roles
    from lava.policies.goals import words
    from lava.policies.names import contents, description_words
    from lava.policies.task_state import argument_values

    excluded: list[str] = []
    if not situation.toolbox.busy:
        excluded.append(magma.CANCEL_TOOL)
    if state.intent == "answer":
        observe = roles(situation.toolbox)[0]
        excluded += [t.name for t in situation.toolbox.tools if observe is None or t.name != observe.name]
    if state.done_calls and not state.last_failed:
        tool = situation.toolbox.get(state.done_calls[-1]["name"])
        if tool is not None and not tool.params:
            excluded.append(tool.name)
    _, take, put = roles(situation.toolbox)
    if not state.held:
        excluded += [t.name for t in situation.toolbox.tools if not t.params and magma._HELD.search(t.description)]
    if take is not None and put is not None:
        said = words(" ".join([state.request, *situation.memory.memory_list, *state.rules]))
        for tool in situation.toolbox.tools:
            named = words(tool.name.replace("_", " ")) | words(" ".join(description_words(tool.description)))
            if tool.params and tool not in (take, put) and not (named - magma._VERBS) & said:
                excluded.append(tool.name)
        if policy.held(state, take, put) is not None:
            excluded += [t.name for t in situation.toolbox.tools if t.name != put.name]
        else:
            excluded.append(put.name)
            seen = contents([*state.observations, state.last_feedback])
            taken = set(argument_values([c for c in state.done_calls if c["name"] == take.name]))
            if seen and seen <= taken:
                excluded.append(take.name)
    return tuple(excluded)


def _careful_steps_named(situation: Any, state: Any) -> list[str]:
    from lava.policies import magma
    from lava.policies.goals import words

    said = words(" ".join([state.request, *situation.memory.memory_list, *state.rules]))
    called = {c["name"] for c in state.done_calls}
    named = []
    for tool in situation.toolbox.tools:
        if tool.name == magma.CANCEL_TOOL or tool.name in called:
            continue
        objects = words(tool.name.replace("_", " ")) - magma._VERBS
        if objects and objects <= said:
            named.append(tool.name)
    return named


def test_magma_tables_and_shared_enums_decide_as_the_careful_way() -> None:
    from lava.policies import magma
    from lava.policies.demos import roles
    from lava.settings import Settings

    policy = magma.MagmaPolicy(ScriptedBackend(), Settings(backend="scripted", policy="magma"))
    checked = 0
    for situation in _magma_situations():
        for state in _magma_states(policy, situation):
            _, take, put = roles(situation.toolbox)
            careful = _careful_enums(policy, situation, state)
            for _ in range(2):  # filling the tables, then reading from them
                assert policy.enums(situation, state) == careful
                assert policy.enums(situation, state, narrow=False) == _careful_enums(policy, situation, state,
                                                                                      narrow=False)
                assert policy.steps_named_not_done(situation, state) == _careful_steps_named(situation, state)
                assert policy.not_now(situation, state) == _careful_not_now(policy, situation, state)
            # propose's one enums and one matching_places, shared by the grammar and the prompt
            held = policy.held(state, take, put)
            known = policy.enums(situation, state, narrow=False)
            matches = policy.matching_places(situation, state, held, put, known)
            assert matches == _careful_matches(policy, situation, state, held, put)
            policy.narrow_to_match(situation, state, known, matches)
            assert known == careful
            ask = "Give the next tool call."
            assert policy.messages(situation, state, ask, [], matches) == policy.messages(situation, state, ask, [])
            checked += 1 + bool(matches)
    assert checked > 100
    assert magma._location_params.cache_info().hits > 0


def test_task_states_copy_and_dump_as_the_generic_way() -> None:
    import copy as copy_module

    from lava.policies.task_state import _FIELDS, TaskState

    loaded = TaskState.load({"task": {"intent": "act", "request": "Sort.", "done": ["a"], "scene": {"t": ["c_1"]},
                                      "notes": {"zones": {"k": [1, 2.5, None]}}, "unknown": 1}})
    started = TaskState()
    started.start("act", "Do it.")
    started.remember_rule("Never use the table.")
    for state in (TaskState(), loaded, started):
        twin = copy_module.copy(state)
        generic = copy_module._reconstruct(state, None, *state.__reduce_ex__(4))
        assert type(twin) is type(generic) and twin is not state
        assert vars(twin) == vars(generic) and all(getattr(twin, f) is getattr(state, f) for f in _FIELDS)
        careful = orjson.dumps(orjson.loads(orjson.dumps({name: getattr(state, name) for name in _FIELDS})))
        assert orjson.dumps(state.dump()) == careful
        assert orjson.dumps(twin.dump()) == careful
        dumped = state.dump()
        assert dumped["done"] is not state.done and dumped["notes"] is not state.notes
    odd = TaskState()
    odd.extra = "not a field"  # never done by lava; dump still writes the fields only
    assert list(odd.dump()) == list(_FIELDS)


def test_the_scripted_rule_text_is_the_rendered_rule() -> None:
    from lava.backends.scripted import _rule_text, rule_decision
    from lava.protocol import AgentInput
    from lava.situation import Situation

    said = {"author": "USER", "content": "Please press sw2, then sw0."}
    pressed = {"author": "MODEL", "content": json.dumps({"say": "", "action": {"panda": {
        "name": "press_button", "arguments": {"id": "sw2"}}}})}
    idle = {"author": "MODEL", "content": json.dumps({"say": "", "action": {}})}
    cases = [("user", "Please press sw2, then sw0.", [], {}), ("user", "Hello there", [], {}),
             ("env", '{"infos": "ok"}', [], {}), ("env", '{"infos": "ok"}', [said], {}),
             ("env", '{"infos": "ok"}', [said, pressed, idle], {}),
             ("env", '{"infos": "ok"}', [said, pressed, said, pressed], {}),
             ("env", '{"infos": "ok"}', [said, pressed, pressed, pressed], {}),
             ("user", "press sw1", [], {"robot_statuses": {"panda": "RUNNING x"}}),
             ("user", "press sw1", [], {"known_robots": ["panda", "franka"], "robot_statuses": {"panda": "RUNNING"}})]
    for kind, content, history, attributes in cases:
        entry = user_input(content, memory={"history": history})
        entry["instruction"] = {"type": kind, "content": content}
        entry["attributes"] = {**entry["attributes"], **attributes}
        situation = Situation.read(AgentInput.model_validate(entry))
        assert _rule_text(situation) == render_decision(rule_decision(situation))


PLAIN_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.floats(allow_nan=False,
                                                                                              allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10)


@given(st.text(max_size=10), st.lists(st.tuples(st.text(min_size=1, max_size=5), st.dictionaries(
    st.text(max_size=5), PLAIN_JSON, max_size=3), st.text(min_size=1, max_size=5)), max_size=3))
def test_model_steps_dump_decisions_as_pydantic_does(say: str, calls: list[Any]) -> None:
    from lava.policies.base import decision_json

    decision = AgentDecision.model_validate({"say": say, "tool_calls": [
        {"name": n, "arguments": a, "target_robot_name": r} for n, a, r in calls]})
    dumped = decision_json(decision)
    assert json.dumps(dumped) == json.dumps(decision.model_dump(mode="json"))
    assert dumped == decision.model_dump(mode="json")
    for call, original in zip(dumped["tool_calls"], decision.tool_calls, strict=True):
        assert call["arguments"] is not original.arguments  # a copy: steps never share the decision's dicts


@given(st.dictionaries(st.sampled_from(["objects", "object_types", "item_class", "target_areas", "locations",
                                        "known_robots", "robot_statuses", "zones", "parts", "Items", "colour"]),
                       st.one_of(st.lists(st.sampled_from(["a", " ", "b_1", "", 3])), st.text(max_size=3),
                                 st.dictionaries(st.text(max_size=2), st.sampled_from(["x", "y", 1])))))
def test_attribute_values_by_key_read_as_the_careful_way(attributes: dict[str, Any]) -> None:
    def careful(attrs: dict[str, Any], key: Any) -> list[str]:
        out: list[str] = []
        for name, value in attrs.items():
            if name in ("known_robots", "robot_statuses") or not key.search(name):
                continue
            items = value if isinstance(value, list) else value.values() if isinstance(value, dict) else [value]
            out += [v for v in items if isinstance(v, str) and v.strip()]
        return list(dict.fromkeys(out))

    for _ in range(2):
        assert names_module.location_values(attributes) == careful(attributes, names_module._PLACE_KEY)
        assert names_module.object_values(attributes) == careful(
            {k: v for k, v in attributes.items() if not names_module._CLASS_KEY.search(k)}, names_module._OBJECT_KEY)
