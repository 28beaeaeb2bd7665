"""Real captured MAGMA requests through lava, every answer validated by magma_core 2.0.1."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from conftest import fixture_requests, user_input
from magma_contract import check_response, check_startup
from servers import lava_process

ALL = fixture_requests()


def test_fixtures_are_present() -> None:
    assert len(ALL) >= 40


@pytest.mark.parametrize("request_body", ALL, ids=[r["request_id"][:8] for r in ALL])
def test_every_fixture_answer_validates(make_client, request_body) -> None:
    response = make_client().post("/v1/responses", json=request_body)
    assert response.status_code == 200
    outputs = check_response(request_body, response.json()).root
    assert all(o.status == "completed" for o in outputs)


def test_a_multi_input_multi_candidate_batch_validates(make_client) -> None:
    inputs = [{**r["inputs"][0], "id": i, "num_outputs": 1 + i % 3} for i, r in enumerate(ALL[:10])]
    request_body = {"request_id": "batch", "inputs": inputs}
    response = make_client().post("/v1/responses", json=request_body)
    check_response(request_body, response.json())


def test_lava_serve_process_passes_startup_checks_and_continues_from_memory(tmp_path) -> None:
    """A real `lava serve --backend scripted`: a two-button episode driven through returned memory."""
    with lava_process("--backend", "scripted", "--policy", "full_history", log=tmp_path / "serve.log") as url:
        check_startup(httpx.get(f"{url}/health").json(), httpx.get(f"{url}/v1/info").json())
        memory = {"memory_list": ["Only press the requested buttons."], "history": []}
        step = user_input("Please press sw1 then sw3.", memory=memory)
        pressed = []
        for turn in range(4):
            request_body = {"request_id": f"t{turn}", "inputs": [step]}
            answer = httpx.post(f"{url}/v1/responses", json=request_body).json()
            (out,) = check_response(request_body, answer).root
            if not out.output.tool_calls:
                break
            call = out.output.tool_calls[0]
            pressed.append(call.arguments["id"])
            feedback = ('{"infos": "panda: press_button succeed with message: You have the '
                        f'{call.arguments["id"]} button pressed.", "previous_tool_call": {{}}}}')
            step = {**step, "instruction": {"type": "env", "content": feedback}, "memory": out.memory}
        assert pressed == ["sw1", "sw3"]
        assert out.output.say == "Done."
        assert out.memory["memory_list"] == ["Only press the requested buttons."]
