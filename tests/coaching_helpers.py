"""What the coaching, reinjection, export and MAGMA-GEN tests share: requests built with the real
magma_core 2.0.1 models (as MAGMA-GEN builds them), and a real llama.cpp server on 127.0.0.1."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any
from uuid import uuid4

from magma_core.protocol import agent_coaching as core

from conftest import user_input
from servers import llama_cpp_server

TARGET_STEP = 7
PRESS = user_input("Please press sw1 then sw3")


def backend_config(url: str, *, model: str = "coach", timeout: float = 20, max_retry: int = 1,
                   headers: dict[str, str] | None = None, type: str = "ollama") -> core.CoachingBackendConfig:
    """A backend as MAGMA-GEN sends it: the full chat-completions URL of an OpenAI-style server."""
    return core.CoachingBackendConfig(type=type, endpoint=f"{url}/v1/chat/completions", default_model=model,
                                      headers=headers or {}, timeout=timeout, max_retry=max_retry)


def session_config(url: str, **backend: Any) -> dict[str, Any]:
    config = core.CoachingSessionConfig(backends={"local": backend_config(url, **backend)}, capture_logs=True)
    return config.model_dump(mode="json")


def call(button: str, robot: str = "panda") -> dict[str, Any]:
    return {"name": "press_button", "arguments": {"id": button}, "target_robot_name": robot}


def coaching_request(kind: str, *, agent_input: dict[str, Any] | None = None, output: dict[str, Any] | None = None,
                     error: dict[str, Any] | None = None, internal_steps: list[dict[str, Any]] | None = None,
                     execution: dict[str, Any] | None = None, diagnosis: dict[str, Any] | None = None,
                     recovery: dict[str, Any] | None = None, run_id: str = "run-1") -> core.SpecializedCoachingRequest:
    """A request shaped like MAGMA-GEN's (gen:coaching/remote.py), validated by magma_core itself."""
    step = core.CoachingStep(id=TARGET_STEP, input=agent_input or PRESS, output=output, error=error,
                             internal_steps=internal_steps or [], execution=execution or {})
    points = [core.ReinjectionPoint(id="replacement", input_step_id=TARGET_STEP)]
    if recovery is not None:
        points.append(core.ReinjectionPoint(id="recovery", input=recovery))
    return core.SpecializedCoachingRequest(
        run_id=run_id, request_id=uuid4().hex, kind=kind,
        stage=core.CoachingStage(id=0, goal="The robot has pressed sw1.", hint="Buttons are named sw0 to sw3."),
        active_errors=[], diagnosis=None if diagnosis is None else core.CoachingDiagnosis(**diagnosis),
        target_step_id=TARGET_STEP, trajectory=[step], reinjection_points=points,
    )


def post_coaching(client: Any, request: core.SpecializedCoachingRequest) -> core.SpecializedCoachingResponse:
    """POST as MAGMA-GEN does, and check the answer exactly as it does."""
    response = client.post("/v1/coaching", json=request.model_dump(mode="json"))
    assert response.status_code == 200, response.text
    answer = core.SpecializedCoachingResponse.model_validate(response.json())
    answer.validate_request(request)
    return answer


def reinjected(point_input: dict[str, Any], extra_keys: dict[str, Any]) -> dict[str, Any]:
    """The /v1/responses request GEN sends for a proposal: the point's input with the payload added."""
    entry = {**point_input, "id": 0, "num_outputs": 1,
             "extra_keys": {**point_input.get("extra_keys", {}), "coaching": extra_keys}}
    return {"request_id": uuid4().hex, "inputs": [entry]}


def llama_server(log: Path) -> contextlib.AbstractContextManager[str]:
    """The coaching backend GEN would name: llama.cpp server serving the embedded model as "coach"."""
    return llama_cpp_server(log, alias="coach")
