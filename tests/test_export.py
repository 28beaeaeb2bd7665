"""Dataset export for MAGMA-GEN: lava's exporter fed the way `magma-gen export` feeds it, checked with
magma_core 2.0.1's export models and dataset writer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from magma_core.dataset_export import write_datasets
from magma_core.protocol.agent import AgentInput
from magma_core.protocol.agent_export import ExportExample, ExportResult, GenExporter, load_exporter
from magma_core.protocol.graph import CandidateRecord

from coaching_helpers import call
from conftest import fixture_requests, user_input
from lava.backends.base import GenerationRequest, Message
from lava.backends.scripted import FunctionBackend, ScriptedBackend
from lava.coaching.export import LavaExporter, exporter, prompt_messages
from lava.engine import Engine
from lava.parsing import render_decision
from lava.policies import create_policy
from lava.protocol import AgentDecision, AgentRequest
from lava.settings import Settings

GEN_INPUTS = [entry for request in fixture_requests("gen_press_button.requests.jsonl") for entry in request["inputs"]]


def answer(backend, entries: list[dict[str, Any]], policy: str = "full_history") -> list[dict[str, Any]]:
    engine = Engine(create_policy(Settings(backend="scripted", policy=policy), backend))
    request = {"request_id": "export", "inputs": [dict(entry, id=i) for i, entry in enumerate(entries)]}
    return asyncio.run(engine.respond(AgentRequest.model_validate(request)))


def example(entry: dict[str, Any], output: dict[str, Any], candidate_id: int = 1) -> ExportExample:
    """What GEN hands the exporter: a situation's input and one of its recorded candidates."""
    candidate = CandidateRecord(
        id=candidate_id, parent_id=0, stage_id=0, kind="agent", response_status=output["status"],
        output=output["output"], error=output["error"], internal_steps=output["internal_steps"],
        execution={}, status="success", execution_finished=True, score={"stage_0": {"total_child": 1, "optimal": 1}},
        origin="coaching" if output["internal_steps"][0]["origin"] == "coaching" else "model",
    )
    return ExportExample(example_id=f"{entry['id']}:{candidate_id}", input=AgentInput.model_validate(entry),
                         candidate=candidate)


def exported(examples: list[ExportExample]) -> list[ExportResult]:
    results = exporter().export(examples, options={})
    assert [r.example_id for r in results] == [e.example_id for e in examples]
    return [ExportResult.model_validate(r.model_dump()) for r in results]  # core's own invariants


def chat_rows(result: ExportResult) -> list[list[dict[str, str]]]:
    assert result.status == "exported", result.reason
    assert all(record.dataset == "sft" for record in result.records)
    return [record.data["messages"] for record in result.records]


def as_dicts(messages: tuple[Message, ...]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


# -- identity and discovery -----------------------------------------------------------------


def test_exporter_identity_is_the_one_v1_info_advertises(make_client) -> None:
    provider = exporter()
    assert isinstance(provider, GenExporter)
    info = make_client().get("/v1/info").json()
    assert (provider.agent_id, provider.agent_version) == (info["agent_id"], info["agent_version"])
    assert provider.renderer.filenames == {"sft": "lava_sft.json"}


def test_magma_gen_finds_the_exporter_through_its_entry_point() -> None:
    provider = load_exporter("magma.export.gen", "lava", GenExporter)  # exactly what `magma-gen export` calls
    assert isinstance(provider, LavaExporter)


def test_options_are_refused() -> None:
    with pytest.raises(ValueError, match="no options"):
        exporter().export([], options={"style": "sharegpt"})


# -- rows -----------------------------------------------------------------------------------


def test_one_row_per_model_call_with_exactly_the_messages_the_model_saw() -> None:
    backend = ScriptedBackend()
    outputs = answer(backend, GEN_INPUTS)  # MAGMA-GEN's own requests: two candidates per input
    assert all(o["status"] == "completed" for o in outputs)
    results = exported(examples_of(GEN_INPUTS, outputs))
    shown = {request.situation.input.id: as_dicts(request.messages) for request in backend.requests}
    assert len(shown) == len(GEN_INPUTS)
    for output, result in zip(outputs, results, strict=True):
        (row,) = chat_rows(result)
        assert row[:-1] == shown[output["source_id"]]
        assert row[-1] == {"role": "assistant", "content": output["internal_steps"][0]["output_raw"]}


def examples_of(entries: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> list[ExportExample]:
    return [example(dict(entries[o["source_id"]], id=o["source_id"]), o, candidate_id=k) for k, o in enumerate(outputs)]


def test_a_repaired_answer_teaches_the_repair_and_never_the_rejected_answer() -> None:
    good = render_decision(AgentDecision(tool_calls=[{"name": "press_button", "arguments": {"id": "sw1"},
                                                      "target_robot_name": "panda"}]))

    bad = '{"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {}}]}'  # no id

    def respond(request: GenerationRequest) -> list[str]:
        return [good if request.component.endswith(".repair") else bad] * request.n

    (output,) = answer(FunctionBackend(respond), [user_input()])
    assert output["status"] == "completed"
    assert [bool(step.get("problems")) for step in output["internal_steps"]] == [True, False]
    (row,) = chat_rows(exported([example(user_input(), output)])[0])
    assert row[-3:] == [{"role": "assistant", "content": bad},
                        {"role": "user", "content": row[-2]["content"]},
                        {"role": "assistant", "content": good}]
    assert "cannot be used" in row[-2]["content"]


def test_a_coached_turn_pairs_the_policy_s_prompt_with_the_correction() -> None:
    coached = dict(user_input(), extra_keys={"coaching": {"kind": "replace_decision",
                                                          "decision": {"say": "", "tool_calls": [call("sw2")]}}})
    (output,) = answer(ScriptedBackend(), [coached])
    (row,) = chat_rows(exported([example(coached, output)])[0])
    assert row[0]["role"] == "system" and "press_button" in row[0]["content"]
    assert row[-2]["role"] == "user" and "Please press sw1" in row[-2]["content"]
    assert json.loads(row[-1]["content"]) == {"tool_calls": [{"robot": "panda", "name": "press_button",
                                                              "arguments": {"id": "sw2"}}]}


def test_the_magma_policy_s_classifier_and_commander_calls_are_rows_too() -> None:
    backend = ScriptedBackend()
    entry = user_input("Could you tell me which buttons exist?")
    (output,) = answer(backend, [entry], policy="magma")
    rows = chat_rows(exported([example(entry, output)])[0])
    assert len(rows) == len(backend.requests) == len(output["internal_steps"])
    assert [row[:-1] for row in rows] == [as_dicts(request.messages) for request in backend.requests]


def test_candidates_without_a_usable_model_call_are_skipped_with_the_reason() -> None:
    output = {"status": "completed", "output": {"say": "ok", "tool_calls": []}, "error": None, "internal_steps": [
        {"id": "step-0", "component": "commander", "origin": "model", "full_prompt": "", "output_raw": "x"},
        {"id": "step-1", "component": "commander", "origin": "model", "full_prompt": "[INST] hi [/INST]",
         "output_raw": '{"say": "ok"}'},
    ]}
    (result,) = exported([example(user_input(), output)])
    assert result.status == "skipped"
    assert "step-0" in result.reason and "not a known chat layout" in result.reason


def test_gen_s_writer_produces_chat_datasets(tmp_path: Path) -> None:
    outputs = answer(ScriptedBackend(), GEN_INPUTS)
    provider = exporter()
    records = [record for result in provider.export(examples_of(GEN_INPUTS, outputs)) for record in result.records]
    tasks = {"graph-a": {"sft": [r.data for r in records[:2]]}, "graph-b": {"sft": [r.data for r in records[2:]]}}
    settings = {"producer": {"package": "magma_gen", "version": "2.0.0"}}
    write_datasets(tmp_path, tasks, filenames=provider.renderer.filenames, signature="s", settings=settings,
                   failures=[])
    rows = json.loads((tmp_path / "lava_sft.json").read_text())
    assert len(rows) == len(records) == len(outputs)
    for row in rows:
        assert set(row) == {"messages"}
        roles = [m["role"] for m in row["messages"]]
        assert roles[0] == "system" and roles[-1] == "assistant" and set(roles) <= {"system", "user", "assistant"}
    split = json.loads((tmp_path / "lava_sft_train.json").read_text()) + json.loads(
        (tmp_path / "lava_sft_validation.json").read_text())
    assert len(split) == len(rows)


# -- prompt layouts -------------------------------------------------------------------------

CONVERSATIONS = [
    [("system", "You control robots.\n\nTools:\n- press_button(id: str)"),
     ("user", "Task state:\nobjects: sw0\n\nUser: hi")],
    [("system", "s"), ("user", "u1"), ("assistant", '{"say": "a {b}"}'), ("user", "u2\n\n<|not a role|>")],
    [("user", "")],
]


@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_lava_s_own_prompt_layout_splits_back_into_its_messages(conversation) -> None:
    messages = tuple(Message(role, content) for role, content in conversation)
    assert prompt_messages(GenerationRequest(messages=messages).prompt_text()) == as_dicts(messages)


def test_chat_templates_split_back_into_messages() -> None:
    chatml = ("<|im_start|>system\nYou control robots.<|im_end|>\n<|im_start|>user\nPress sw1\n\nnow<|im_end|>\n"
              "<|im_start|>assistant\n")
    assert prompt_messages(chatml) == [{"role": "system", "content": "You control robots."},
                                       {"role": "user", "content": "Press sw1\n\nnow"}]
    llama3 = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert prompt_messages(llama3) == [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert prompt_messages("[INST] hi [/INST]") is None
    assert prompt_messages("<|im_start|>tool\nx<|im_end|>\n") is None  # a role chat rows do not carry
    assert prompt_messages("junk <|im_start|>user\nx<|im_end|>\n") is None


@pytest.mark.model
def test_the_embedded_model_s_rendered_prompts_export_as_the_messages_it_was_given() -> None:
    pytest.importorskip("llama_cpp")
    from lava.backends.local import LocalBackend

    backend = LocalBackend(None, cache_dir=Settings().cache_dir, context_tokens=4096, threads=2)
    seen: list[GenerationRequest] = []
    generate = backend.generate

    async def recording(request: GenerationRequest):
        seen.append(request)
        return await generate(request)

    backend.generate = recording  # type: ignore[method-assign]

    async def run() -> list[dict[str, Any]]:
        await backend.start()
        try:
            engine = Engine(create_policy(Settings(backend="local", policy="full_history"), backend))
            request = AgentRequest.model_validate({"request_id": "r", "inputs": [
                dict(GEN_INPUTS[0], num_outputs=1, extra_keys={"inference_mode": True})]})
            return await engine.respond(request)
        finally:
            await backend.close()

    (output,) = asyncio.run(run())
    assert output["status"] == "completed", output["error"]  # constrained, greedy: a valid answer
    assert output["internal_steps"][0]["full_prompt"].startswith("<|im_start|>")  # the template, as rendered
    rows = chat_rows(exporter().export([example(GEN_INPUTS[0], output)])[0])
    usable = [req for req, step in zip(seen, output["internal_steps"], strict=True) if not step.get("problems")]
    assert [row[:-1] for row in rows] == [as_dicts(req.messages) for req in usable]
