"""Known names, tool roles and the worked example, built only from the input."""

from __future__ import annotations

import asyncio
import json

from conftest import user_input
from lava.backends.base import GenerationRequest
from lava.backends.scripted import FunctionBackend
from lava.engine import Engine
from lava.policies.demos import pick_and_place_demo, roles
from lava.policies.magma import MagmaPolicy
from lava.policies.names import contents, known_names, parameter_enums
from lava.protocol import AgentRequest
from lava.settings import Settings
from lava.tools import ToolBox

CUBE_TOOLS = [
    {"name": "put", "description": "Put the held cube on the table or in a color tray.",
     "parameters": {"target": {"description": "Use table or a tray name such as white_tray.", "type": "str"}}},
    {"name": "get_objects_state", "description": "Return the position of all detected objects.", "parameters": {}},
    {"name": "take", "description": "Take an object by its name.",
     "parameters": {"name": {"description": "The name of the object to take.", "type": "str"}}},
]
OBSERVED = "table contains white_cube_1, blue_cube_1. white_tray contains no cube. blue_tray contains white_cube_2."


def test_roles_follow_names_and_descriptions_not_positions() -> None:
    toolbox = ToolBox.from_input(CUBE_TOOLS, {"known_robots": ["panda"]})
    observe, take, put = roles(toolbox)
    assert (observe.name, take.name, put.name) == ("get_objects_state", "take", "put")
    renamed = ToolBox.from_input([
        {"name": "grab_object", "description": "Take an object.", "arguments": {"obj": {"type": "str"}}},
        {"name": "place_object_in_area", "description": "Put the held object in an area.",
         "arguments": {"area_name": {"type": "str"}}},
    ], {})
    assert [r.name if r else None for r in roles(renamed)] == [None, "grab_object", "place_object_in_area"]
    demo = pick_and_place_demo(renamed)
    assert '"name": "grab_object"' in demo and "item_A" in demo
    assert pick_and_place_demo(ToolBox.from_input([{"name": "toggle", "arguments": {}}], {})) == ""


def test_names_come_from_what_the_task_showed() -> None:
    names = known_names({"known_tray_color": ["white", "blue"]}, [OBSERVED], ["Who is in team DISCO?"])
    for name in ("white", "blue", "white_cube_1", "blue_tray", "table", "DISCO"):
        assert name in names
    assert contents([OBSERVED]) == {"white_cube_1", "blue_cube_1", "white_cube_2"}
    enums = parameter_enums(ToolBox.from_input(CUBE_TOOLS, {}), names)
    assert "white_tray" in enums["put"]["target"] and "table" in enums["put"]["target"]
    assert "Use" not in enums["put"]["target"]


def test_policy_narrows_take_to_reported_objects_and_put_to_the_matching_place() -> None:
    schemas = []

    def commander(req: GenerationRequest):
        schemas.append(req.json_schema)
        if len(schemas) == 1:
            return ['{"tool_calls": [{"robot": "panda", "name": "take", "arguments": {"name": "blue_cube_1"}}]}']
        return ['{"tool_calls": [{"robot": "panda", "name": "put", "arguments": {"target": "blue_tray"}}]}']

    engine = Engine(MagmaPolicy(FunctionBackend(commander), Settings(backend="scripted")))
    memory = {"history": [], "lava": {"task": {"intent": "act", "request": "Tidy up the cubes.",
                                               "pending": [{"robot": "panda", "name": "get_objects_state",
                                                            "arguments": {}}]}}}

    def turn(message: str, memory: dict) -> dict:
        entry = user_input(memory=memory, tools=CUBE_TOOLS, attributes={"known_tray_color": ["white", "blue"],
                                                                       "known_robots": ["panda"]})
        entry["instruction"] = {"type": "env", "content": json.dumps({"infos": message})}
        (out,) = asyncio.run(engine.respond(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})))
        return out

    out = turn(f"panda: get_objects_state succeed with message: {OBSERVED}", memory)
    first = json.dumps(schemas[0])
    assert "\"enum\": [\"blue_cube_1\", \"white_cube_1\", \"white_cube_2\"]" in first
    assert '"const": "put"' not in first  # nothing is held: nothing to put
    assert '"const": "get_objects_state"' not in first  # the scene was just observed
    turn("panda: take succeed with message: You have blue_cube_1 in your gripper.", out["memory"])
    second = json.dumps(schemas[1])
    assert "\"enum\": [\"blue_tray\"]" in second  # held blue_cube_1 goes where its name points
    assert '"const": "take"' not in second
