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


def test_a_general_report_is_the_look_not_an_inspection_of_what_is_held() -> None:
    # advanced_delivery: inspect() comes first in the list and only works with something in the gripper.
    toolbox = ToolBox.from_input([
        {"name": "inspect", "description": "Inspect the held product to learn whether it is clean or broken.",
         "arguments": {}},
        {"name": "detection", "description": "List products on the current table and in the held tray or package.",
         "arguments": {}},
    ], {"known_robots": ["reception_robot"]})
    assert roles(toolbox)[0].name == "detection"


def _enums(tools: list, attributes: dict, results: list[str]) -> dict:
    from lava.situation import Situation

    entry = user_input("Do it.", tools=tools, attributes={"known_robots": ["arm1"], **attributes})
    situation = Situation.read(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]}).inputs[0])
    enums = parameter_enums(situation.toolbox, [*attributes.get("object_type", []), "banana_0", "apple_1",
                                                "left_zone", "snacks"])
    MagmaPolicy.narrow_by_attributes(situation, enums, {})
    MagmaPolicy.drop_kind_names(situation, enums, results)
    return enums


def test_values_follow_the_attribute_a_description_names_and_instances_replace_kinds() -> None:
    moving = [{"name": "move_to", "description": "Move to a place.",
               "arguments": {"target": {"description": "One of the listed move_targets.", "type": "str"}}}]
    enums = _enums(moving, {"move_targets": ["snacks_spot", "priority_bay_0"], "object_type": ["snacks"]}, [])
    assert enums["move_to"]["target"] == ["snacks_spot", "priority_bay_0"]
    # bi_robot_sorting: deplace(object="banana") is refused; the observation named banana_0.
    deplace = [{"name": "deplace", "description": "Move an object to an area.",
                "arguments": {"object": {"type": "str"}, "target_area": {"type": "str"}}}]
    seen = ["get_objects_state: banana_0, apple_1 are in the right area."]
    enums = _enums(deplace, {"object_type": ["banana", "apple"]}, seen)
    assert "banana" not in enums["deplace"]["object"] and "banana_0" in enums["deplace"]["object"]
    assert "banana" in _enums(deplace, {"object_type": ["banana", "apple"]}, [])["deplace"]["object"]
