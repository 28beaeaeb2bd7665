"""Specialized coaching with a real coaching model: llama.cpp's OpenAI-compatible server on 127.0.0.1
serving the embedded GGUF, configured the way MAGMA-GEN configures its backends."""

from __future__ import annotations

import pytest
from magma_core.protocol.agent import AgentResponse

from coaching_helpers import PRESS, call, coaching_request, llama_server, post_coaching, reinjected, session_config
from lava.protocol import AgentDecision
from lava.tools import ToolBox

pytestmark = pytest.mark.model
pytest.importorskip("llama_cpp.server.app")

RUN = "live-run"


@pytest.fixture(scope="module")
def coach_url(tmp_path_factory):
    with llama_server(tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield url


@pytest.fixture
def client(make_client, coach_url):
    client = make_client()
    response = client.put(f"/v1/coaching/sessions/{RUN}", json=session_config(coach_url, timeout=120, max_retry=2))
    assert response.status_code == 204, response.text
    yield client
    assert client.delete(f"/v1/coaching/sessions/{RUN}").status_code == 204


def proposed(answer) -> AgentDecision:
    assert answer.status == "corrected", answer.reason
    decisions = {str(p.extra_keys["decision"]) for p in answer.proposals}
    assert len(decisions) == 1
    decision = AgentDecision.model_validate(answer.proposals[0].extra_keys["decision"])
    assert ToolBox.from_input(PRESS["tools"], PRESS["attributes"]).check(decision).ok
    return decision


def test_failure_corrected_by_the_model_and_reinjected(client) -> None:
    rejected = {"say": "", "tool_calls": [call("sw3")]}
    answer = post_coaching(client, coaching_request(
        "failure", output=rejected, run_id=RUN,
        execution={"diagnosable": True, "execution_results": [
            {"robot": "panda", "tool": "press_button", "result": True, "error_flag": "none",
             "message": "You have the sw3 button pressed."}]},
        diagnosis={"explanation": "The user asked for sw1 first; sw3 was pressed instead.",
                   "expected_decision": "Press the button the user named first."}))
    decision = proposed(answer)
    assert decision.model_dump(mode="json") != rejected
    assert "## Model call" in answer.logs[0].content  # the prompt and raw answer are in GEN's coaching log

    request = reinjected(PRESS, answer.proposals[0].extra_keys)
    (output,) = AgentResponse.model_validate(client.post("/v1/responses", json=request).json()).root
    assert output.status == "completed"
    assert output.output.model_dump(mode="json") == decision.model_dump(mode="json")


def test_format_with_nothing_to_salvage_is_corrected_by_the_model(client) -> None:
    answer = post_coaching(client, coaching_request(
        "format", run_id=RUN, error={"code": "invalid_output", "message": "the model returned no answer"},
        internal_steps=[{"id": "step-0", "component": "commander", "origin": "model", "full_prompt": "p",
                         "input_elements": {}, "output_raw": "<|endoftext|>"}]))
    proposed(answer)
