"""Validate lava's answers exactly as the real consumers do, with magma_core 2.0.1's own models."""

from __future__ import annotations

from typing import Any

from magma_core.protocol.agent import AgentHealth, AgentInfo, AgentRequest, AgentResponse

from lava.protocol import AgentDecision
from lava.tools import ToolBox


def check_response(request: dict[str, Any], answer: Any) -> AgentResponse:
    """What MAGMA-GEN and MAGMA-BENCH do with a /v1/responses answer, plus lava's decision rules."""
    parsed_request = AgentRequest.model_validate(request)
    response = AgentResponse.model_validate(answer)
    response.validate_request(parsed_request)
    inputs = {entry.id: entry for entry in parsed_request.inputs}
    for output in response.root:
        entry = inputs[output.source_id]
        if output.status == "completed":
            toolbox = ToolBox.from_input(entry.tools, entry.attributes)
            check = toolbox.check(AgentDecision.model_validate(output.output.model_dump()))
            assert check.ok, check.message()
        rules = entry.memory.get("memory_list")
        if rules is not None:
            assert output.memory.get("memory_list") == rules
    return response


def check_startup(health: Any, info: Any) -> None:
    AgentHealth.model_validate(health)
    parsed = AgentInfo.model_validate(info)
    assert info["protocol_version"] == "2.0"  # gen reads the raw key
    assert parsed.capabilities.get("inference") is True
