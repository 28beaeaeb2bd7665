"""Tool descriptors -> JSON Schema, and the decision validator (protocol.md §7.1, §8)."""

from __future__ import annotations

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lava.errors import InvalidInput
from lava.protocol import AgentDecision, ToolCall
from lava.tools import ToolBox, parse_tool, parse_tools

PRESS = {"name": "press_button", "description": "Press a button.",
         "arguments": {"id": {"description": "Name of the button to press.", "type": "str"}}}
CANCEL = {"name": "cancel_current_action", "description": "Cancel.", "arguments": {}}
CYCLE = {"name": "launch_cycle", "description": "Run a cycle.",
         "arguments": {"recipe": {"type": "list", "description": "colours"}, "delivery_number": {"type": "int"}}}


def box(*tools: dict, robots: list[str] | None = None, statuses: dict | None = None) -> ToolBox:
    attributes = {"known_robots": robots or ["panda"]}
    if statuses:
        attributes["robot_statuses"] = statuses
    return ToolBox.from_input(list(tools), attributes)


def call(name: str, robot: str = "panda", **arguments) -> ToolCall:
    return ToolCall(name=name, arguments=arguments, target_robot_name=robot)


def test_magma_descriptor_to_json_schema() -> None:
    tool = parse_tool(CYCLE)
    assert tool.arguments_schema() == {
        "type": "object",
        "properties": {"recipe": {"type": "array", "description": "colours"},
                       "delivery_number": {"type": "integer"}},
        "required": ["recipe", "delivery_number"],
        "additionalProperties": False,
    }
    assert tool.signature() == "launch_cycle(recipe: array, delivery_number: integer)"


def test_parameters_key_and_json_schema_descriptors_read_the_same() -> None:
    docs_style = {"name": "press_button", "parameters": {"id": {"description": "Button name.", "type": "str"}}}
    openai_style = {"name": "press_button", "parameters": {"type": "object", "properties": {
        "id": {"type": "string", "description": "Button name."}}}}
    assert parse_tool(docs_style).params == parse_tool(openai_style).params


@pytest.mark.parametrize(("descriptor", "loc"), [
    ({"description": "no name"}, ("tools", 0, "name")),
    ({"name": ""}, ("tools", 0, "name")),
    ({"name": "t", "arguments": ["id"]}, ("tools", 0, "arguments")),
    ({"name": "t", "arguments": {"id": 3}}, ("tools", 0, "arguments", "id")),
])
def test_malformed_descriptors_name_the_field(descriptor: dict, loc: tuple) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_tools([descriptor])
    assert raised.value.loc == loc


def test_duplicate_tool_names_refused() -> None:
    with pytest.raises(InvalidInput, match="listed twice"):
        parse_tools([PRESS, PRESS])


def test_valid_decisions() -> None:
    toolbox = box(CANCEL, PRESS, CYCLE, robots=["arm1", "arm2"])
    assert toolbox.check(AgentDecision(say="Done, sw1 is pressed.")).ok
    assert toolbox.check(AgentDecision(tool_calls=[call("press_button", "arm1", id="sw1"),
                                                   call("cancel_current_action", "arm2")])).ok
    assert toolbox.check(AgentDecision(tool_calls=[call("launch_cycle", "arm1", recipe=["red"],
                                                        delivery_number=2)])).ok


@pytest.mark.parametrize(("decision", "problem"), [
    (AgentDecision(say="x", tool_calls=[call("press_button", id="sw1")]), "never both"),
    (AgentDecision(), "empty"),
    (AgentDecision(say="here {is} json"), "must not contain"),
    (AgentDecision(say="a <b> tag"), "must not contain"),
    (AgentDecision(say="   "), "blank"),
    (AgentDecision(tool_calls=[call("fly", id="sw1")]), "not a known tool"),
    (AgentDecision(tool_calls=[call("press_button", "r2d2", id="sw1")]), "not a known robot"),
    (AgentDecision(tool_calls=[call("press_button")]), "missing arguments: id"),
    (AgentDecision(tool_calls=[call("press_button", id="sw1", force=1)]), "unknown arguments: force"),
    (AgentDecision(tool_calls=[call("press_button", id=1)]), "must be of type str, got int"),
    (AgentDecision(tool_calls=[call("launch_cycle", recipe=["r"], delivery_number=True)]), "type int, got bool"),
    (AgentDecision(tool_calls=[call("launch_cycle", recipe=["r"], delivery_number=1.5)]), "type int, got float"),
    (AgentDecision(tool_calls=[call("press_button", id="sw1"), call("press_button", id="sw2")]),
     "one per robot"),
])
def test_invalid_decisions_explained(decision: AgentDecision, problem: str) -> None:
    check = box(CANCEL, PRESS, CYCLE).check(decision)
    assert not check.ok
    assert problem in check.message()


def test_empty_decision_allowed_only_with_suspended_work() -> None:
    assert not box(PRESS).check(AgentDecision()).ok
    running = box(PRESS, statuses={"panda": "RUNNING press_button(id=sw1)"})
    assert running.check(AgentDecision()).ok


def test_known_robots_must_be_names() -> None:
    with pytest.raises(InvalidInput) as raised:
        ToolBox.from_input([PRESS], {"known_robots": "panda"})
    assert raised.value.loc == ("attributes", "known_robots")


def test_decision_schema_accepts_exactly_the_valid_shapes() -> None:
    toolbox = box(CANCEL, PRESS, robots=["arm1", "arm2"])
    schema = toolbox.decision_schema()
    ok = [
        {"say": "Done."},
        {"tool_calls": [{"robot": "arm1", "name": "press_button", "arguments": {"id": "sw1"}}]},
        {"tool_calls": [{"robot": "arm1", "name": "cancel_current_action", "arguments": {}},
                        {"robot": "arm2", "name": "press_button", "arguments": {"id": "sw2"}}]},
    ]
    bad = [
        {"say": "x", "tool_calls": []},
        {"say": "a {b}"},
        {"say": ""},
        {"tool_calls": []},
        {"tool_calls": [{"robot": "arm3", "name": "press_button", "arguments": {"id": "sw1"}}]},
        {"tool_calls": [{"robot": "arm1", "name": "fly", "arguments": {}}]},
        {"tool_calls": [{"robot": "arm1", "name": "press_button", "arguments": {}}]},
        {"tool_calls": [{"robot": "arm1", "name": "press_button", "arguments": {"id": 3}}]},
        {"tool_calls": [{"robot": "arm1", "name": "press_button", "arguments": {"id": "a", "x": 1}}]},
    ]
    for value in ok:
        jsonschema.validate(value, schema)
    for value in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(value, schema)


names = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)


@given(robots=st.lists(names, min_size=1, max_size=3, unique=True), tool=names, arg=names, value=st.text(max_size=6))
def test_schema_valid_calls_pass_the_validator(robots: list[str], tool: str, arg: str, value: str) -> None:
    """Whatever constrained decoding can produce for one robot's call, the validator accepts."""
    toolbox = box({"name": tool, "arguments": {arg: {"type": "str"}}}, robots=robots)
    payload = {"tool_calls": [{"robot": robots[-1], "name": tool, "arguments": {arg: value}}]}
    jsonschema.validate(payload, toolbox.decision_schema())
    decision = AgentDecision(tool_calls=[ToolCall(name=tool, arguments={arg: value}, target_robot_name=robots[-1])])
    assert toolbox.check(decision).ok
