"""Cubes counted by color (MAGMA's color_sorting with its color tools, CrossColorPreset): the
detection reports counts per place, cubes are taken by color and place, and the held one is put."""

from __future__ import annotations

import copy

from episodes import Stage, episode, tool
from lava.policies.cubes import goal_counts, next_move, read_counts

OPPOSITE = ("Arrange the cubes so the two trays contain matching opposite groups: each tray should contain the "
            "same number of cubes from the other tray's color. If one color has more cubes than the other, leave "
            "the unmatched extra cubes on the table.")
SORT = "Please sort all the cubes by color: put each cube in the tray matching its color."
RETRY = "The requested action failed due to a temporary execution error. Please retry."


class CubeWorld:
    """ColorDetectionTools as MAGMA-BENCH runs them, under one of its renamings."""

    def __init__(self, cubes: dict[str, dict[str, int]], colors: list[str], failing: dict[int, str] | None = None):
        self.cubes = copy.deepcopy(cubes)
        self.held: str | None = None
        self.calls: list[str] = []
        self.failing = failing or {}  # call number -> the failure MAGMA injects there
        self.tools = [
            tool("query_objects_info", "Provide the current state of every detected object."),
            tool("grab_item_by_id", "Grab the referenced item using its given name.",
                 cube_color="Color identifying the cube that must be picked.",
                 pickup_area="Area where the robot should look for the cube."),
            tool("send_to_target", "Send the held cube to the table or a named tray.",
                 destination="Destination: table or the name of a color tray."),
        ]
        self.attributes = {"known_robots": ["panda"], "known_tray_color": colors}

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        self.calls.append(f"{name}({', '.join(f'{k}={v}' for k, v in arguments.items())})")
        if len(self.calls) in self.failing:
            return False, self.failing[len(self.calls)]
        if name == "query_objects_info":
            seen = copy.deepcopy(self.cubes)
            if self.held:  # lifted, in no tray: the detection counts it on the table
                seen["table"][self.held] = seen["table"].get(self.held, 0) + 1
            parts = [f" {place} contains " + ", ".join(f"{n} {c} cube" + ("s" if n > 1 else "")
                                                         for c, n in have.items() if n)
                     for place, have in seen.items() if any(have.values())]
            return True, "this is the position of existing cubes:" + ".".join(parts) + "."
        if name == "grab_item_by_id":
            color, place = arguments["cube_color"], arguments["pickup_area"]
            if self.held is not None:
                return False, f"The object {self.held}_cube_1 is already in the gripper."
            if self.cubes.get(place, {}).get(color, 0) < 1:
                return False, f"There is no {color} cube instance in {place}."
            self.cubes[place][color] -= 1
            self.held = color
            return True, f"Successfuly grasped {color}_cube_1"
        if name == "send_to_target":
            target = arguments["destination"]
            if self.held is None:
                return False, "There is no cube in the gripper."
            if target not in self.cubes:
                return False, f"There is no location named {target}."
            self.cubes[target][self.held] = self.cubes[target].get(self.held, 0) + 1
            self.held = None
            return True, f"Successfuly sent cube to {target}"
        return False, f"unknown tool {name}"

    def placed(self, goal: dict[str, dict[str, int]]) -> int:
        """MAGMA's CountCubes: cubes where the goal wants them, up to the number wanted there."""
        return sum(min(self.cubes[place].get(color, 0), wanted) for place, want in goal.items()
                   for color, wanted in want.items())


# CrossColorPreset: 3 red and 4 white cubes; each tray holds three of the other color, a white one
# stays on the table. Two cubes start misplaced, so two stages of four calls, the last one answered.
CROSS_GOAL = {"red_tray": {"white": 3}, "white_tray": {"red": 3}, "table": {"white": 1}}
CROSS_START = {"red_tray": {"white": 2}, "white_tray": {"red": 2, "white": 1}, "table": {"white": 1, "red": 1}}


def cross_stages(world: CubeWorld) -> list[Stage]:
    return [Stage(OPPOSITE, goal=lambda w: w.placed(CROSS_GOAL) >= 6, budget=4),
            Stage(None, goal=lambda w: w.placed(CROSS_GOAL) >= 7, budget=4, answer=True)]


def test_opposite_groups_are_arranged_from_one_look_without_the_model() -> None:
    world = CubeWorld(CROSS_START, ["red", "white"])
    said, asked = episode(world, cross_stages(world), rules=[])
    assert not asked
    assert world.cubes == {"red_tray": {"white": 3}, "white_tray": {"red": 3, "white": 0},
                           "table": {"white": 1, "red": 0}}
    assert world.calls == ["query_objects_info()",
                           "grab_item_by_id(cube_color=white, pickup_area=white_tray)",
                           "send_to_target(destination=red_tray)",
                           "grab_item_by_id(cube_color=red, pickup_area=table)",
                           "send_to_target(destination=white_tray)"]
    assert said[-1].startswith("Done")


def test_a_temporary_failure_is_retried_and_a_refused_take_makes_it_look_again() -> None:
    # Call 2 (the first take) fails for a moment: taken again, nothing looked at. Call 5 is refused
    # as if the counts were wrong: lava looks again before taking.
    world = CubeWorld(CROSS_START, ["red", "white"],
                      failing={2: RETRY, 5: "There is no red cube instance in table."})
    said, asked = episode(world, cross_stages(world), rules=[])
    assert not asked
    assert world.calls[1] == world.calls[2] == "grab_item_by_id(cube_color=white, pickup_area=white_tray)"
    assert world.calls[4:6] == ["grab_item_by_id(cube_color=red, pickup_area=table)", "query_objects_info()"]
    assert world.placed(CROSS_GOAL) == 7 and said[-1].startswith("Done")


def test_a_put_that_did_not_let_go_of_the_cube_is_made_again() -> None:
    # MAGMA's put verifiers answer "The object is still in the gripper" when the gripper did not
    # release: nothing changed, so the same put again (lava looked, then took the model's word).
    world = CubeWorld(CROSS_START, ["red", "white"], failing={3: "The object is still in the gripper"})
    said, asked = episode(world, cross_stages(world), rules=[])
    assert not asked
    assert world.calls[2] == world.calls[3] == "send_to_target(destination=red_tray)"
    assert world.placed(CROSS_GOAL) == 7 and said[-1].startswith("Done")


def test_sorting_by_color_counts_an_empty_tray_the_report_leaves_out() -> None:
    # The white tray is empty, so the report never names it: the task's tray colors do.
    world = CubeWorld({"red_tray": {"red": 1, "white": 2}, "white_tray": {}, "table": {"red": 2}},
                      ["red", "white"])
    goal = {"red_tray": {"red": 3}, "white_tray": {"white": 2}}
    stages = [Stage(SORT, goal=lambda w: w.placed(goal) >= 2, budget=3)] + [
        Stage(None, goal=lambda w, n=n: w.placed(goal) >= n, budget=2, answer=n == 5) for n in (3, 4, 5)]
    said, asked = episode(world, stages, rules=[])
    assert not asked
    assert world.cubes["white_tray"] == {"white": 2} and world.cubes["red_tray"] == {"red": 3, "white": 0}
    assert said[-1].startswith("Done")


def test_reports_and_goals_read_as_magma_writes_them() -> None:
    report = ("this is the position of existing cubes: table contains 1 white cube. "
              "white_tray contains 2 red cubes, 1 white cube.")
    assert read_counts(report) == {"table": {"white": 1}, "white_tray": {"red": 2, "white": 1}}
    assert read_counts("there is no cube detected") == {}
    assert read_counts("Successfuly sent cube to table") is None
    assert goal_counts(OPPOSITE, ["red", "white"], {"red": 5, "white": 3}) == {
        "table": {"red": 2, "white": 0}, "red_tray": {"white": 3}, "white_tray": {"red": 3}}
    assert goal_counts("Move one red cube from the table to the white tray", ["red", "white"], {"red": 1}) is None
    counts = {"table": {"red": 1}, "red_tray": {"red": 1}}
    assert next_move(counts, {"table": {}, "red_tray": {"red": 2}}, None) == ("take", "red@table")
    assert next_move(counts, {"table": {}, "red_tray": {"red": 2}}, "red") == ("put", "red_tray")
    assert next_move(counts, {"table": {"red": 1}, "red_tray": {"red": 1}}, None) is None

