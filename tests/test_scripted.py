"""The scripted backend: its documented rule and its script files (stateless by construction)."""

from __future__ import annotations

import asyncio
import json

from conftest import user_input
from lava.backends.scripted import ScriptedBackend, rule_decision
from lava.engine import Engine
from lava.policies.full_history import FullHistoryPolicy
from lava.protocol import AgentInput, AgentRequest
from lava.settings import Settings
from lava.situation import Situation


def situation(content: str, *, kind: str = "user", history=None) -> Situation:
    entry = user_input(content, memory={"history": history or []})
    entry["instruction"] = {"type": kind, "content": content}
    return Situation.read(AgentInput.model_validate(entry))


def test_rule_walks_the_named_values_in_order() -> None:
    first = rule_decision(situation("Please press sw2, then sw0."))
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("press_button", {"id": "sw2"})]
    history = [{"author": "USER", "content": "Please press sw2, then sw0."},
               {"author": "MODEL", "content": json.dumps({"say": "", "action": {"panda": {
                   "name": "press_button", "arguments": {"id": "sw2"}}}})}]
    second = rule_decision(situation('{"infos": "ok"}', kind="env", history=history))
    assert second.tool_calls[0].arguments == {"id": "sw0"}
    history += [{"author": "SYSTEM", "content": '{"infos": "ok"}'}, {"author": "MODEL", "content": json.dumps(
        {"say": "", "action": {"panda": {"name": "press_button", "arguments": {"id": "sw0"}}}})}]
    assert rule_decision(situation('{"infos": "ok"}', kind="env", history=history)).say == "Done."


def test_rule_acknowledges_what_it_cannot_act_on() -> None:
    assert rule_decision(situation("Hello there")).say == "Understood."


def test_script_entries_by_turn_and_candidate(tmp_path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        [{"say": "First."}, "plain second candidate"],
        {"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw3"}}]},
    ]))
    engine = Engine(FullHistoryPolicy(ScriptedBackend.from_file(script), Settings(backend="scripted")))
    request = AgentRequest.model_validate({"request_id": "s", "inputs": [user_input(n=2)]})
    first, second = asyncio.run(engine.respond(request))
    assert first["output"]["say"] == "First." and second["output"]["say"] == "plain second candidate"
    follow = AgentRequest.model_validate({"request_id": "t", "inputs": [user_input("go on", memory=first["memory"])]})
    (third,) = asyncio.run(engine.respond(follow))
    assert third["output"]["tool_calls"][0]["arguments"] == {"id": "sw3"}
