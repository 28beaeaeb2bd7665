"""Worked examples built from the input's own tools, for models too small to infer a workflow.

Small models do not work out from descriptions alone that an object must be taken before it can
be put somewhere, or that looking comes before acting. When the current tools include an
observation tool and take/put-like tools (by their names and descriptions, whatever MAGMA-GEN
renamed them to), the system prompt shows one short sequence using those very tools, with
placeholder values that cannot be mistaken for real names.
"""

from __future__ import annotations

import functools
import json
import re

from ..tools import CANCEL_TOOL, ToolBox, ToolSpec

_OBSERVE = re.compile(r"detect|state|scan|list|look|inspect|see|visible|observ|perceiv|find|locat|describ", re.I)
_GENERAL = re.compile(r"detect|list|scan|state|report|position|visible|all\b", re.I)
_NARROW = re.compile(r"\bheld\b|\bholds?\b|gripper|in (?:the|your) hand|currently carr", re.I)
_TAKE = re.compile(r"\b(take|pick|grab|grasp|load|lift|fetch)", re.I)
_PUT = re.compile(r"\b(put|place|drop|deposit|depose|release|unload|store|send)", re.I)
_HOLDING = re.compile(r"(?:you have|holding|in (?:your|the) gripper|grasped|picked up|took)\s*:?\s*"
                      r"(?:the\s+)?([A-Za-z0-9_\-]+)?", re.I)


def _words(tool: ToolSpec) -> str:
    return f"{tool.name.replace('_', ' ')} {tool.description}"


@functools.lru_cache(maxsize=512)  # tool sets repeat across inputs and turns; ToolBox is frozen
def roles(toolbox: ToolBox) -> tuple[ToolSpec | None, ToolSpec | None, ToolSpec | None]:
    tools = [t for t in toolbox.tools if t.name != CANCEL_TOOL]
    # An observer that only reports what is held (the gripper, a held package) says nothing before
    # something is held: a general report (detect, list, state) is the look to take first.
    lookers = [t for t in tools if not t.params and _OBSERVE.search(_words(t))]
    lookers.sort(key=lambda t: (bool(_NARROW.search(t.description)), not _GENERAL.search(_words(t))))
    observe = lookers[0] if lookers else None
    take = next((t for t in tools if len(t.params) == 1 and _TAKE.search(_words(t))
                 and not _PUT.search(t.name)), None)
    put = next((t for t in tools if len(t.params) == 1 and _PUT.search(_words(t)) and t is not take), None)
    return observe, take, put


_FINISH = re.compile(r"\b(valid\w*|confirm\w*|finish\w*|complete|submit\w*|deliver\w*|send\w*|serve|ship\w*)", re.I)


@functools.lru_cache(maxsize=512)
def finisher(toolbox: ToolBox) -> ToolSpec | None:
    """A parameterless tool that hands the finished work over ("valid_plate: Validate the tray and
    give it to the user"): the last call of a composition request, before saying it is done."""
    observe = roles(toolbox)[0]
    return next((t for t in toolbox.tools if t.name != CANCEL_TOOL and not t.params and t is not observe
                 and _FINISH.search(_words(t))), None)


def _call(robot: str, tool: ToolSpec, value: str | None = None) -> str:
    arguments = {tool.params[0].name: value} if value is not None and tool.params else {}
    return json.dumps({"tool_calls": [{"robot": robot, "name": tool.name, "arguments": arguments}]})


def pick_and_place_demo(toolbox: ToolBox) -> str:
    """A worked example with the input's own observe/take/put tools, or "" when they are not there."""
    observe, take, put = roles(toolbox)
    if take is None or put is None:
        return ""
    robot = (toolbox.robots or ("robot",))[0]
    lines = ["Example of a good sequence (item_A, item_B and place_P stand for real names):",
             "Request: put every item where it belongs."]
    if observe is not None:
        lines.append(f"- answer {_call(robot, observe)} -> result: item_A and item_B are on the table.")
    lines += [
        f"- answer {_call(robot, take, 'item_A')} -> result: you have item_A in your gripper.",
        f"- answer {_call(robot, put, 'place_P')} -> result: item_A was put in place_P.",
        f"- answer {_call(robot, take, 'item_B')} -> ... then put it too, one call per turn.",
        '- when nothing is left to do, answer {"say": "Done."}',
        "Take one object, then put it, before taking the next one.",
    ]
    return "\n".join(lines)


def holding(message: str) -> str | None:
    """What the last result says the robot now holds ("You have X in your gripper"), if anything."""
    match = _HOLDING.search(message)
    if match is None:
        return None
    return match.group(1) or "an object"


__all__ = ["finisher", "holding", "pick_and_place_demo", "roles"]
