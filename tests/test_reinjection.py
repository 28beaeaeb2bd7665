"""Coaching corrections through /v1/responses: applied from the input alone, as MAGMA-GEN reinjects them."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from magma_core.protocol.agent_coaching import InternalStep, ReplaceSay

from coaching_helpers import PRESS, call, reinjected
from lava.backends.scripted import ScriptedBackend
from lava.coaching.reinjection import CoachingReinjection
from lava.engine import Engine
from lava.memory import append_turn, decision_record
from lava.policies import create_policy
from lava.policies.base import CandidateResult, Policy
from lava.protocol import AgentDecision, AgentRequest
from lava.settings import Settings
from magma_contract import check_response

MEMORY = {
    "memory_list": ["Never press sw0.", "Answer briefly."],
    "history": [{"author": "USER", "content": "Hello"}, {"author": "MODEL", "content": '{"say": "Hi.", "action": {}}'}],
    "scenario_notes": {"kept": [1, 2]},
}
FEEDBACK = json.dumps({"infos": "panda: press_button succeed with message: You have the sw1 button pressed.",
                       "previous_tool_call": {"panda": {"name": "press_button", "arguments": {"id": "sw1"}}}})


def coached_input(payload: Any, *, instruction: dict[str, str] | None = None, n: int = 1) -> dict[str, Any]:
    entry = {**copy.deepcopy(PRESS), "memory": copy.deepcopy(MEMORY), "num_outputs": n,
             "extra_keys": {"coaching": payload}}
    if instruction is not None:
        entry["instruction"] = instruction
    return entry


def respond(client, *entries: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    request = {"request_id": "coached", "inputs": [dict(entry, id=index) for index, entry in enumerate(entries)]}
    answer = client.post("/v1/responses", json=request).json()
    check_response(request, answer)  # the consumers' own validation, plus lava's decision rules
    return request, answer


def test_replace_say_completes_with_the_text_and_records_the_turn(make_client) -> None:
    backend = ScriptedBackend()
    client = make_client(backend)
    payload = ReplaceSay(text="Done, sw1 and sw3 are pressed.").model_dump(mode="json")
    _, (output,) = respond(client, coached_input(payload))
    assert output["status"] == "completed"
    assert output["output"] == {"say": "Done, sw1 and sw3 are pressed.", "tool_calls": []}
    memory = output["memory"]
    assert memory["memory_list"] == MEMORY["memory_list"]
    assert memory["scenario_notes"] == MEMORY["scenario_notes"]
    assert memory["history"] == [*MEMORY["history"], {"author": "USER", "content": PRESS["instruction"]["content"]},
                                 {"author": "MODEL", "content": decision_record(AgentDecision(**output["output"]))}]
    (step,) = output["internal_steps"]
    InternalStep.model_validate({key: step[key] for key in InternalStep.model_fields})
    assert step["origin"] == "coaching" and step["component"] == "commander"
    assert PRESS["instruction"]["content"] in step["full_prompt"]  # the prompt the policy would have shown
    assert json.loads(step["output_raw"]) == {"say": "Done, sw1 and sw3 are pressed."}
    assert backend.requests == []  # no model was asked


def test_replace_decision_leaves_memory_exactly_as_the_same_decision_made_by_the_model(make_client) -> None:
    decision = {"say": "", "tool_calls": [call("sw3")]}
    model_answer = {"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw3"}}]}
    scripted = ScriptedBackend([model_answer] * 3)
    plain = {**coached_input(None), "extra_keys": {}}
    # full_history takes the model's answer as is (magma would plan this request without the model;
    # the magma policy has its own test below).
    _, (by_model,) = respond(make_client(scripted, policy="full_history"), plain)
    _, (by_coaching,) = respond(make_client(ScriptedBackend(), policy="full_history"), coached_input(
        {"kind": "replace_decision", "decision": decision}))
    assert by_model["output"] == by_coaching["output"] == decision
    assert by_coaching["memory"] == by_model["memory"]
    assert by_coaching["internal_steps"][0]["output_formatted"] == decision


def test_a_recovery_input_records_the_feedback_as_a_system_turn(make_client) -> None:
    _, (output,) = respond(make_client(), coached_input(
        {"kind": "replace_decision", "decision": {"say": "", "tool_calls": [call("sw3")]}},
        instruction={"type": "env", "content": FEEDBACK}))
    assert output["status"] == "completed"
    assert output["memory"]["history"][-2] == {"author": "SYSTEM", "content": FEEDBACK}


def test_corrections_are_reproducible_from_the_input_alone(make_client) -> None:
    payload = {"kind": "replace_decision", "decision": {"say": "", "tool_calls": [call("sw1")]}}
    first = respond(make_client(), coached_input(payload, n=2))[1]
    second = respond(make_client(), coached_input(payload, n=2))[1]
    assert first == second
    assert [o["candidate_index"] for o in first] == [0, 1]
    assert first[0]["memory"] == first[1]["memory"]


def test_text_is_held_to_the_same_rules_as_a_model_answer(make_client) -> None:
    _, (output,) = respond(make_client(), coached_input({"kind": "replace_say", "text": "Pressed {sw1} <now>"}))
    assert output["output"]["say"] == "Pressed (sw1) (now)"
    assert any("braces" in note for note in output["internal_steps"][0]["assumptions"])


INVALID = {
    "not an object": "replace sw1",
    "unknown kind": {"kind": "rewrite_everything", "text": "x"},
    "empty text": {"kind": "replace_say", "text": ""},
    "missing text": {"kind": "replace_say"},
    "extra key": {"kind": "replace_say", "text": "ok", "tone": "kind"},
    "unknown tool": {"kind": "replace_decision", "decision": {"say": "", "tool_calls": [
        {"name": "fly_away", "arguments": {}, "target_robot_name": "panda"}]}},
    "unknown robot": {"kind": "replace_decision", "decision": {"say": "", "tool_calls": [call("sw1", "r2d2")]}},
    "wrong argument type": {"kind": "replace_decision", "decision": {"say": "", "tool_calls": [
        {"name": "press_button", "arguments": {"id": 1}, "target_robot_name": "panda"}]}},
    "empty decision": {"kind": "replace_decision", "decision": {"say": "", "tool_calls": []}},
    "decision not an object": {"kind": "replace_decision", "decision": "press sw1"},
}


@pytest.mark.parametrize("payload", INVALID.values(), ids=INVALID.keys())
def test_an_invalid_payload_is_an_error_candidate_with_the_memory_unchanged(make_client, payload) -> None:
    backend = ScriptedBackend()
    entry = coached_input(payload)
    _, (output,) = respond(make_client(backend), entry)
    assert output["status"] == "error"
    assert output["error"]["code"] == "invalid_coaching"
    assert output["error"]["component"] == "commander"
    assert output["memory"] == entry["memory"]
    (step,) = output["internal_steps"]
    assert step["origin"] == "coaching" and step["error"]
    assert backend.requests == []


def test_inputs_without_a_correction_go_to_the_policy(make_client) -> None:
    backend = ScriptedBackend()
    entry = {**coached_input(None), "extra_keys": {"coaching": None, "inference_mode": True}}
    _, (output,) = respond(make_client(backend), entry)
    assert output["status"] == "completed"
    assert output["output"]["tool_calls"] == [call("sw1")]  # the scripted rule's first button
    assert output["internal_steps"][0]["origin"] == "model"
    assert len(backend.requests) == 1


def test_one_request_mixes_coached_and_ordinary_inputs(make_client) -> None:
    coached = coached_input({"kind": "replace_say", "text": "All done."})
    ordinary = {**coached_input(None), "extra_keys": {}}
    _, outputs = respond(make_client(), ordinary, coached)
    assert [o["internal_steps"][0]["origin"] for o in outputs] == ["model", "coaching"]


@pytest.mark.parametrize("policy", ["full_history", "magma"])
def test_every_policy_lava_creates_applies_corrections(policy) -> None:
    engine = Engine(create_policy(Settings(backend="scripted", policy=policy), ScriptedBackend()))
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [
        coached_input({"kind": "replace_say", "text": "All done."})]})
    (output,) = asyncio.run(engine.respond(request))
    assert output["status"] == "completed"
    assert output["output"]["say"] == "All done."


def test_the_magma_policy_records_a_corrected_call_in_its_task_state() -> None:
    """So the next turn's feedback about that call is read against the right pending call."""
    engine = Engine(create_policy(Settings(backend="scripted", policy="magma"), ScriptedBackend()))
    payload = {"kind": "replace_decision", "decision": {"say": "", "tool_calls": [call("sw1")]}}
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [coached_input(payload)]})
    (output,) = asyncio.run(engine.respond(request))
    assert output["status"] == "completed"
    task = output["memory"]["lava"]["task"]
    assert task["pending"] == [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw1"}}]


class RecordingPolicy(Policy):
    """A policy with its own prompt and memory layout: reinjection must use both."""

    name = "recording"

    async def decide(self, situation, memories):
        return [CandidateResult.failed(AssertionError("never asked"))]

    def coaching_messages(self, situation):
        from lava.backends.base import Message

        return [Message("system", "own system"), Message("user", "own view of " + situation.instruction.content)]

    def record_decision(self, situation, decision, memory):
        memory["turns"] = memory.get("turns", 0) + 1
        return append_turn(memory, situation.instruction, decision)


def test_a_policy_s_own_prompt_and_memory_hooks_are_used() -> None:
    engine = Engine(CoachingReinjection(RecordingPolicy(ScriptedBackend(), Settings(backend="scripted"))))
    request = AgentRequest.model_validate({"request_id": "r", "inputs": [
        coached_input({"kind": "replace_say", "text": "Noted."})]})
    (output,) = asyncio.run(engine.respond(request))
    assert output["status"] == "completed"
    assert output["memory"]["turns"] == 1
    assert output["internal_steps"][0]["full_prompt"] == (
        "<|system|>\nown system\n\n<|user|>\nown view of " + PRESS["instruction"]["content"])


def test_the_payload_gen_builds_for_a_proposal_round_trips(make_client) -> None:
    payload = {"kind": "replace_decision", "decision": {"say": "", "tool_calls": [call("sw1")]}}
    request = reinjected(PRESS, payload)
    answer = make_client().post("/v1/responses", json=request).json()
    check_response(request, answer)
    assert answer[0]["status"] == "completed"
