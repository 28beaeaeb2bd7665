"""The parser reads every shape models emit, never raises, and never loses the raw text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lava.parsing import NativeCall, parse_decision, render_decision, strip_reasoning
from lava.protocol import AgentDecision, ToolCall

PRESS = ToolCall(name="press_button", arguments={"id": "sw1"}, target_robot_name="panda")


def calls_of(text: str, robots=("panda",), **kw) -> list[tuple[str, dict, str]]:
    parsed = parse_decision(text, robots=robots, **kw)
    assert parsed.decision is not None, parsed.problems
    return [(c.name, c.arguments, c.target_robot_name) for c in parsed.decision.tool_calls]


SW1 = [("press_button", {"id": "sw1"}, "panda")]


@pytest.mark.parametrize("text", [
    '{"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw1"}}]}',
    '```json\n{"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw1"}}]}\n```',
    'Sure! {"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw1"}}]} done',
    '{"say": "", "action": {"panda": {"name": "press_button", "arguments": {"id": "sw1"}}}}',
    '<tool_call>\n{"name": "press_button", "arguments": {"id": "sw1"}}\n</tool_call>',
    '<tool_call>\n{"name": "press_button", "arguments": {"id": "sw1"}}',  # missing close tag
    '{"name": "press_button", "arguments": {"id": "sw1"}, "target_robot_name": "panda"}',
    '{"name": "press_button", "arguments": "{\\"id\\": \\"sw1\\"}"}',  # arguments as a JSON string
    '[{"panda": {"name": "press_button", "arguments": {"id": "sw1"}}}]',  # reference list form
    '<think>I should press {sw1}</think>{"tool_calls": [{"robot": "panda", "name": "press_button", '
    '"arguments": {"id": "sw1"}}]}',
    'press it </think>\n{"tool_calls": [{"name": "press_button", "arguments": {"id": "sw1"}, "robot": "panda"}]}',
    '{"tool_calls": [{"type": "function", "function": {"name": "press_button", '
    '"arguments": "{\\"id\\": \\"sw1\\"}"}}]}',
    '{"name": "press_button", "arguments": {"id": "sw1", "robot": "panda"}}',  # robot among the arguments
])
def test_call_shapes(text: str) -> None:
    assert calls_of(text) == SW1


def test_native_calls_take_precedence() -> None:
    calls = calls_of("ignored", native_calls=[NativeCall("press_button", '{"id": "sw1"}')])
    assert calls == SW1


def test_parallel_tool_call_tags() -> None:
    text = ('<tool_call>{"name": "deplace", "arguments": {"object": "a", "robot": "arm1"}}</tool_call>\n'
            '<tool_call>{"name": "deplace", "arguments": {"object": "b", "robot": "arm2"}}</tool_call>')
    assert calls_of(text, robots=("arm1", "arm2")) == [
        ("deplace", {"object": "a"}, "arm1"), ("deplace", {"object": "b"}, "arm2")]


def test_text_answers() -> None:
    assert parse_decision('{"say": "Done, sw1 is pressed."}').decision == AgentDecision(say="Done, sw1 is pressed.")
    plain = parse_decision("Done, sw1 is pressed.")
    assert plain.decision == AgentDecision(say="Done, sw1 is pressed.")
    assert plain.assumptions


def test_robot_assumed_only_when_unambiguous() -> None:
    text = '{"tool_calls": [{"name": "press_button", "arguments": {"id": "sw1"}}]}'
    one = parse_decision(text, robots=("panda",))
    assert one.ok and one.assumptions
    two = parse_decision(text, robots=("arm1", "arm2"))
    assert not two.ok
    assert "which robot" in two.problems[0]


@pytest.mark.parametrize("text", [
    "", "   ", '{"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": ',
    '<tool_call>oops</tool_call>', '{"tool_calls": [{"robot": "panda", "arguments": {}}]}',
    '{"tool_calls": [{"robot": "panda", "name": "x", "arguments": [1]}]}',
])
def test_unreadable_answers_are_reported_not_guessed(text: str) -> None:
    parsed = parse_decision(text, robots=("panda",))
    assert not parsed.ok
    assert parsed.problems
    assert parsed.raw == text


def test_strip_reasoning() -> None:
    assert strip_reasoning("<think>a</think> b") == "b"
    assert strip_reasoning("prefilled reasoning</think>answer") == "answer"
    assert strip_reasoning("no reasoning") == "no reasoning"


def test_render_then_parse_round_trips() -> None:
    for decision in (AgentDecision(say="ok"), AgentDecision(tool_calls=[PRESS])):
        assert parse_decision(render_decision(decision), robots=("panda",)).decision == decision


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises_and_keeps_raw(text: str) -> None:
    parsed = parse_decision(text, robots=("panda", "arm"))
    assert parsed.raw == text
    assert parsed.decision is not None or parsed.problems


@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.sampled_from(
                                                ["say", "tool_calls", "name", "arguments", "robot", "action",
                                                 "function", "x"]), inner, max_size=4)), max_leaves=10))
def test_arbitrary_json_never_raises(value) -> None:
    text = json.dumps(value)
    parsed = parse_decision(text, robots=("panda",))
    assert parsed.raw == text
