"""Packing requests solved from the task state: MAGMA-BENCH packaging-001/002 (food on a tray, then
validate it) and delivery_box-000/001 (products into packages, each package marked with its order),
replayed stage by stage against small worlds that answer like MAGMA's packaging_tools and
delivery_tools (messages copied from them).

Each stage has a budget of tool calls. Between two action stages MAGMA delays the next request: the
agent's next call is held (robot_statuses says "RUNNING take(name=fish)") while the user speaks, and
an empty decision resumes it. The model must not be needed: a backend that fails if asked stands at
the seam.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

import episodes
from conftest import user_input
from episodes import CANCEL, Stage, World, tool
from lava.backends.scripted import FunctionBackend
from lava.engine import Engine
from lava.policies.demos import finisher
from lava.policies.goals import default_recipe, kept_apart, read_recipe, tray_clash
from lava.policies.intent import heuristic_intent
from lava.policies.magma import MagmaPolicy
from lava.policies.orders import promoted, promotion, read_orders
from lava.protocol import AgentRequest
from lava.settings import Settings
from lava.tools import ToolBox

# -- packaging: food on the table, a tray, valid_plate (packaging.yaml names, packaging_tools messages) --

FOODS = ["ananas", "apple", "banana", "water", "juice", "milk", "chicken", "fish", "pasta"]
PACKAGING_RULES = [
    "To prepare a tray, take each required food object and put it on the tray.",
    "Once all requested objects are on the tray, use the tray validation tool to complete the task.",
    "Refuse a tray request if it violates the current food constraints, including incompatibility rules.",
]


PACKAGING_TOOLS = [CANCEL,
                   tool("detect", "Returns visible objects and their locations."),
                   tool("take", "Pick an object from the table.", name="The name of the object to take."),
                   tool("put", "Place the held object either on the table or on the tray.",
                        target="The name of the target where the object should be put."),
                   tool("valid_plate", "Used to validate the tray and send it to the user.")]
PACKAGING_ATTRIBUTES = {"main_course": ["chicken", "fish", "pasta"], "fruits": ["ananas", "apple", "banana"],
                        "drinks": ["water", "juice", "milk"], "known_robots": ["panda"]}


class TrayWorld:
    """A table of food and a tray; take and put one item at a time; valid_plate sends the tray."""

    def __init__(self) -> None:
        self.tools, self.attributes = PACKAGING_TOOLS, PACKAGING_ATTRIBUTES
        self.table, self.tray = list(FOODS), []
        self.held: str | None = None
        self.sent: list[list[str]] = []  # the tray, sorted, each time it was validated
        self.calls: list[str] = []

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        self.calls.append(f"{name}({', '.join(map(str, arguments.values()))})")
        if name == "detect":
            table = f"the table contain {', '.join(self.table)}" if self.table else "the table is empty"
            tray = f", and the tray contain {', '.join(self.tray)}" if self.tray else ", and the tray is empty"
            return True, f"this is the position of existing object : {table}{tray}"
        if name == "take":
            if self.held is not None:
                return False, "The gripper is not empty."
            if arguments["name"] not in self.table + self.tray:  # MAGMA's take reaches the tray too
                return False, f"{arguments['name']} is not detected"
            (self.table if arguments["name"] in self.table else self.tray).remove(arguments["name"])
            self.held = arguments["name"]
            return True, f"you have {self.held} in your gripper"
        if name == "put":
            if self.held is None:
                return False, "The gripper is empty. Aborting."
            if arguments["target"] not in ("table", "tray"):
                return False, f"Unknow {arguments['target']} used as target. Use only tray or table."
            (self.tray if arguments["target"] == "tray" else self.table).append(self.held)
            held, self.held = self.held, None
            return True, f"Successfully put {held} in the {arguments['target']}"
        if name == "valid_plate":
            self.sent.append(sorted(self.tray))
            return True, "the tray is ready ! "
        return False, f"{name} is not a known tool."


# -- delivery_box: products, packages at a station, marks (delivery.yaml names, delivery_tools messages) --

DELIVERY_TOOLS = [CANCEL,
                  tool("get_object_in_package", "List the products in the package held by the robot."),
                  tool("take", "Take an available product of a given type.", type_obj="Type of product to take."),
                  tool("put", "Put the held product on a free table cell or inside the held package.",
                       target="Target table or package location."),
                  tool("move_to", "Move the robot to a product or package station.",
                       target="Station the robot must reach."),
                  tool("mark_package", "Assign a manufacturing order to a package.", package="Package to mark.",
                       manufacturing_order="Manufacturing order assigned to the package."),
                  tool("take_box", "Take an available package from storage.",
                       package="Package to take from storage."),
                  tool("drop_box", "Drop the package currently held by the robot.")]
# Other names and descriptions delivery.yaml lets MAGMA-GEN give the same tools.
REGENERATED_TOOLS = [CANCEL,
                     tool("inspect_package", "Inspect the held package and report its contents."),
                     tool("pick_product_type", "Collect one available product of the specified type.",
                          item_type="Type of item the robot must collect."),
                     tool("deposit_item", "Deposit the held item at the requested table or package target.",
                          destination="Destination for the held product."),
                     tool("navigate_to", "Navigate the robot to the requested station.",
                          destination="Destination product or package location."),
                     tool("label_package", "Associate the specified package with an order reference.",
                          box="Box to associate with the manufacturing order.",
                          order_reference="Order reference to write on the package."),
                     tool("collect_package", "Collect the requested package from storage.",
                          box="Storage box the robot must pick up."),
                     tool("release_package", "Release the carried package at the current station.")]
# The same tools under those other names only, with the first descriptions.
RENAMED_TOOLS = [{"name": r["name"], "description": d["description"],
                  "arguments": dict(zip(r["arguments"], d["arguments"].values(), strict=True))}
                 for r, d in zip(REGENERATED_TOOLS, DELIVERY_TOOLS, strict=True)]
PACKAGES = ["package_1", "package_2", "package_3", "package_4"]
DELIVERY_ATTRIBUTES = {"product_type": ["coca", "icetea", "brets", "donut"], "slot": ["products_slot", "packages_slot"],
                       "package": PACKAGES, "known_robots": ["panda"]}


class PackageWorld:
    """A product station (products on a table) and a package station; the robot carries one package
    and one product at a time; marking a package records its order and returns its products."""

    def __init__(self, table: list[str], tools: list[dict] = DELIVERY_TOOLS) -> None:
        self.tools, self.attributes = tools, DELIVERY_ATTRIBUTES
        # The names in `tools` -> those of delivery_tools, tool by tool and parameter by parameter.
        self.names = {t["name"]: c["name"] for t, c in zip(tools, DELIVERY_TOOLS, strict=True)}
        self.params = {p: q for t, c in zip(tools, DELIVERY_TOOLS, strict=True)
                       for p, q in zip(t["arguments"], c["arguments"], strict=True)}
        self.table = list(table)
        self.at = "products_slot"
        self.held: str | None = None
        self.package: str | None = None
        self.contents: dict[str, list[str]] = {p: [] for p in PACKAGES}
        self.marks: list[tuple[str, str, Counter]] = []  # (package, order, products by type)
        self.calls: list[str] = []

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        self.calls.append(f"{name}({', '.join(map(str, arguments.values()))})")
        name = self.names.get(name, name)
        a = {self.params.get(k, k): v for k, v in arguments.items()}
        if name == "get_object_in_package":
            if self.package is None:
                return False, "no package held by the robot"
            inside = self.contents[self.package]
            return True, f"{self.package} contains {', '.join(inside)}." if inside else \
                f"{self.package} contains no product."
        if name == "take":
            if self.at != "products_slot":
                return False, "The robot must be at products_slot to take a product."
            if self.held is not None:
                return False, f"The gripper already holds {self.held}."
            product = next((p for p in self.table if p.startswith(f"{a['type_obj']}_")), None)
            if product is None:
                return False, f"No available object of type {a['type_obj']} was found."
            self.table.remove(product)
            self.held = product
            return True, f"Successfully took {product}."
        if name == "put":
            if self.at != "products_slot":
                return False, "The robot must be at products_slot to put a product."
            if a["target"] not in ("table", "package"):
                return False, "Unknown target. Use table or package."
            if self.held is None:
                return False, "The gripper does not hold a product."
            held, self.held = self.held, None
            if a["target"] == "package":
                if self.package is None:
                    self.held = held
                    return False, "The robot does not hold a package."
                self.contents[self.package].append(held)
                return True, f"Successfully put {held} inside {self.package}."
            self.table.append(held)
            return True, f"Successfully put {held} on the table."
        if name == "move_to":
            if a["target"] not in self.attributes["slot"]:
                return False, f"Unknown target {a['target']}. "
            if self.at == a["target"]:
                return False, f"The robot is already at {a['target']}."
            self.at = a["target"]
            return True, f"The robot moved to {a['target']}."
        if name == "take_box":
            if self.at != "packages_slot":
                return False, "The robot must be at packages_slot to take a package."
            if a["package"] not in PACKAGES:
                return False, f"Unknown package {a['package']}."
            if self.package is not None:
                return False, "The robot already holds a package."
            self.package = a["package"]
            return True, f"The robot took {self.package}."
        if name == "drop_box":
            if self.at != "packages_slot":
                return False, "The robot must be at packages_slot to drop a package."
            if self.package is None:
                return False, "The robot does not hold a package."
            dropped, self.package = self.package, None
            return True, f"The robot dropped {dropped}."
        if name == "mark_package":
            package, order = a["package"], a["manufacturing_order"]
            if package not in PACKAGES:
                return False, f"Unknown package {package}."
            if package == self.package:
                return False, f"{package} must be dropped before it can be marked."
            if not self.contents[package]:
                return False, f"{package} must contain at least one product."
            self.marks.append((package, order, Counter(p.rsplit("_", 1)[0] for p in self.contents[package])))
            self.table += self.contents[package]
            self.contents[package] = []
            return True, f"{package} was validated with reference {order}. "
        return False, f"{name} is not a known tool."

    def marked(self) -> dict[str, dict[str, int]]:
        """The products of each marked order: the same order twice, or a package used twice, fails."""
        orders = [order for _, order, _ in self.marks]
        packages = [package for package, _, _ in self.marks]
        assert len(set(orders)) == len(orders) and len(set(packages)) == len(packages), self.marks
        return {order: dict(products) for _, order, products in self.marks}


# -- the episode runner (episodes.py), here without the model --

def episode(world: World, stages: list[Stage], rules: list[str]) -> list[str]:
    """Play the stages in order, failing on any broken expectation; returns what was said in words."""
    said, asked = episodes.episode(world, stages, rules)
    assert not asked  # every request is solved from the task state
    return said


# -- the episodes --

def on_tray(world: TrayWorld, *foods: str) -> bool:
    return sorted(world.tray) == sorted(foods) and world.sent[-1:] == [sorted(foods)]


PACKAGING = {
    "packaging-001": [
        Stage("I would like a tray containing chicken, fish, and juice.",
              lambda w: bool({"chicken", "fish", "juice"} & set(w.tray)), budget=6),
        Stage("I changed my mind: use water instead of juice for this tray.",
              lambda w: on_tray(w, "chicken", "fish", "water"), budget=10, answer=True),
        Stage("The default tray recipe is pasta and apple."),
    ],
    "packaging-002": [
        Stage("The default tray recipe is pasta and apple."),
        Stage("I would like the default recipe with banana instead of apple.",
              lambda w: on_tray(w, "pasta", "banana"), budget=10, answer=True),
        Stage("Do not place apple and juice on the same tray."),
    ],
    # Held-out MainDefinition@7: the recipe edit was acted on (a detect) where the stage wanted words,
    # and "I would like a tray." names no food: it is the default recipe, as the rules left it.
    "packaging-held6": [
        Stage("The default tray recipe is ananas and milk."),
        Stage("In the default recipe, replace ananas with water."),
        Stage("Hello, I would like a tray.", lambda w: bool({"water", "milk"} & set(w.tray)), budget=6),
        Stage("I changed my mind: use juice instead of water for this tray.",
              lambda w: on_tray(w, "juice", "milk"), budget=10, answer=True),
    ],
    # Held-out MainDefinition@36 (MAGMA's ReplaceTrayItemRequest): the swap breaks a rule, so the
    # request is refused in words (lava looked first); the correction applies to the refused recipe.
    "packaging-held38": [
        Stage("A tray must never contain both chicken and pasta."),
        Stage("Prepare a tray based on chicken and fish, but replace fish with pasta."),
        Stage("Okay, replace fish with juice instead.", lambda w: on_tray(w, "chicken", "juice"), budget=10,
              answer=True),
    ],
    # The same request kinds on the default recipe, under a rule that replaced another.
    "packaging-default-refused": [
        Stage("The default tray recipe is pasta and apple."),
        Stage("Do not place apple and juice on the same tray."),
        Stage("Replace the rule forbidding apple and juice together with a rule forbidding pasta and milk "
              "together."),
        Stage("For the standard recipe, use milk instead of apple."),
        Stage("Then use banana instead of apple.", lambda w: on_tray(w, "pasta", "banana"), budget=10, answer=True),
    ],
}
TRAYS = {"packaging-001": ["chicken", "fish", "water"], "packaging-002": ["banana", "pasta"],
         "packaging-held6": ["juice", "milk"], "packaging-held38": ["chicken", "juice"],
         "packaging-default-refused": ["banana", "pasta"]}


@pytest.mark.parametrize("name", sorted(PACKAGING))
def test_packaging_episode_fills_and_sends_exactly_the_requested_tray(name: str) -> None:
    world = TrayWorld()
    said = episode(world, PACKAGING[name], PACKAGING_RULES)
    assert sorted(world.tray) == TRAYS[name] and world.held is None
    assert world.sent == [TRAYS[name]]  # validated once, when complete
    assert world.calls[0] == "detect()"
    assert all(said)


class FlakyTrayWorld(TrayWorld):
    """The first take and the first put fail before they run: MAGMA's OneShotToolFailureError, as the
    benchmark's execution_error episodes inject it."""

    def __init__(self) -> None:
        super().__init__()
        self.to_fail = {"take", "put"}

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        if name in self.to_fail:
            self.to_fail.remove(name)
            self.calls.append(f"{name}({', '.join(map(str, arguments.values()))}) injected")
            return False, "The requested action failed due to a temporary execution error. Please retry."
        return super().run(name, arguments)


def test_a_take_or_put_magma_asks_to_retry_is_made_again_without_looking() -> None:
    # Held-out MainDefinition@22 with injected failures: "take failed with message: The requested
    # action failed due to a temporary execution error. Please retry." was read as a refusal, so lava
    # looked again (a detect the stage pays for) before taking the same object.
    world = FlakyTrayWorld()
    stages = [Stage("Please prepare a tray with pasta and ananas.", lambda w: on_tray(w, "pasta", "ananas"),
                    budget=8, answer=True)]
    said = episode(world, stages, PACKAGING_RULES)
    assert world.calls[:5] == ["detect()", "take(ananas) injected", "take(ananas)", "put(tray) injected", "put(tray)"]
    assert "detect()" not in world.calls[1:] and said[-1].startswith("Done")


class ResettingTrayWorld(TrayWorld):
    """MAGMA's ResetPackagingTransition: every tray request starts with all the food back on the table
    (at new places) and an empty tray."""

    def reset(self) -> None:
        self.table, self.tray, self.held = list(reversed(FOODS)), [], None


def test_a_tray_request_after_a_validated_tray_looks_at_the_table_set_out_anew() -> None:
    # Held-out MainDefinition@25: after "fish and juice" was validated, "I would like a tray containing
    # fish and water." was served from the old scene (juice swapped for water on a tray MAGMA had
    # emptied): the second tray held water alone.
    world = ResettingTrayWorld()
    said = episode(world, [
        Stage("I would like a tray containing fish and juice.", lambda w: on_tray(w, "fish", "juice"), budget=10,
              answer=True, reset=True),
        Stage("I would like a tray containing fish and water.", lambda w: on_tray(w, "fish", "water"), budget=10,
              answer=True),
    ], PACKAGING_RULES)
    assert world.sent == [["fish", "juice"], ["fish", "water"]]
    assert world.calls[6:8] == ["detect()", "take(water)"] and all(said)


class GraspFailureTrayWorld(TrayWorld):
    """Fish cannot be grasped: MAGMA's GraspFoodFailureError, which the benchmark's execution_error
    episodes put on packaging stages (requested food, for the whole stage)."""

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        if name == "take" and arguments["name"] == "fish":
            self.calls.append("take(fish) refused")
            return False, "Failed to grasp: fish. The object is unreachable right now."
        return super().run(name, arguments)


def test_food_that_cannot_be_grasped_waits_for_the_rest_then_is_said() -> None:
    world = GraspFailureTrayWorld()
    said = until_words(world, "I would like a tray containing juice and fish.")  # the last named goes first
    # The rest of the tray first, the fish once more after something was put down (MAGMA draws such
    # failures per stage), no look between: the table is as lava saw it. The tray is not sent.
    assert world.calls == ["detect()", "take(fish) refused", "take(juice)", "put(tray)", "take(fish) refused"]
    assert said == "Sorry, I cannot finish: fish cannot be grasped right now." and not world.sent


def until_words(world: TrayWorld, request: str, max_turns: int = 20) -> str:
    """One request played to its first answer in words (no model), whatever the world's state then."""
    engine = Engine(MagmaPolicy(FunctionBackend(episodes.no_model), Settings(backend="scripted")))
    memory: dict = {"memory_list": list(PACKAGING_RULES), "history": []}
    instruction = {"type": "user", "content": request}
    for _ in range(max_turns):
        entry = user_input(instruction["content"], memory=memory, tools=world.tools,
                           attributes={**world.attributes, "robot_statuses": {"panda": "FREE"}})
        entry["instruction"] = instruction
        (out,) = asyncio.run(engine.respond(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})))
        assert out["status"] == "completed", out
        memory, decision = out["memory"], out["output"]
        if not decision["tool_calls"]:
            return decision["say"]
        (call,) = decision["tool_calls"]
        instruction = episodes.feedback(call, *world.run(call["name"], call["arguments"]))
    raise AssertionError(f"no words after {max_turns} turns: {world.calls}")


def completed(count: int) -> Callable[[PackageWorld], bool]:
    return lambda w: len(w.marks) >= count


DELIVERY = {
    "delivery_box-000": (
        ["icetea_1", "brets_1", "coca_1", "donut_1", "brets_2", "coca_2", "donut_2", "icetea_2", "brets_3"],
        ["Packages must be taken from the package storage", "Poducts are located in the product storage",
         "After completed the package, you must mark it and return it to the package storage"],
        {"A47": {"brets": 1}, "B12": {"donut": 1}},
        [Stage("Prepare the following two orders using two different packages: order A47: 1 brets; "
               "order B12: 1 donut", completed(1), budget=12),
         Stage(None, completed(2), budget=13, answer=True)]),
    "delivery_box-001": (
        ["icetea_2", "brets_2", "icetea_3", "coca_2", "brets_1", "donut_1", "donut_2", "coca_1", "icetea_1"],
        ["All products from the same order must be placed in the same package.",
         "When a package is ready, you must depose it to package_area and mark it with the corresponding order ID.",
         "Empty packages are available in the package area, when taking one werify that it is empty.",
         "Products are available in the product area."],
        {"002": {"donut": 1, "brets": 1}, "001": {"coca": 1, "donut": 1, "icetea": 1},
         "003": {"coca": 1, "icetea": 1, "brets": 1}},
        [Stage("Prepare the following 2 order(s) using different packages: order 002: 1 donut, 1 brets; "
               "order 001: 1 coca, 1 donut, 1 icetea", completed(1), budget=16),
         Stage("New recipe to prepare after the current orders: order 003: 1 coca, 1 icetea, 1 brets.",
               completed(2), budget=16),
         Stage(None, completed(3), budget=17, answer=True)]),
}


@pytest.mark.parametrize(("name", "tools"), [
    pytest.param("delivery_box-000", DELIVERY_TOOLS, id="delivery_box-000"),
    pytest.param("delivery_box-001", DELIVERY_TOOLS, id="delivery_box-001"),
    pytest.param("delivery_box-001", RENAMED_TOOLS, id="delivery_box-001-renamed"),
    # MAGMA-GEN's names with their own descriptions: the package parameter is described as
    # "Box to associate with the manufacturing order" (the order parameter is found by name).
    pytest.param("delivery_box-001", REGENERATED_TOOLS, id="delivery_box-001-regenerated"),
])
def test_delivery_episode_marks_each_package_with_its_order(name: str, tools: list[dict]) -> None:
    table, rules, orders, stages = DELIVERY[name]
    world = PackageWorld(table, tools)
    said = episode(world, stages, rules)
    assert world.marked() == orders
    assert world.package is None and world.held is None
    assert sorted(world.table) == sorted(table)  # marking returns every product: none lost or left held
    assert len(said) == 1


def test_the_runner_fails_a_stage_that_goes_over_its_budget() -> None:
    # The same first stage as packaging-001 (look, take, put: three calls), with two calls allowed.
    stage = PACKAGING["packaging-001"][0]
    with pytest.raises(AssertionError, match="over its budget of 2"):
        episode(TrayWorld(), [Stage(stage.say, stage.goal, budget=2)], PACKAGING_RULES)


# -- pure readers --

def test_a_recipe_amended_by_the_user_replaces_what_it_names() -> None:
    request = "I would like a tray containing chicken, fish, and juice."
    assert read_recipe(request, [], FOODS) == ["chicken", "fish", "juice"]
    amended = f"{request} I changed my mind: use water instead of juice for this tray."
    assert read_recipe(amended, [], FOODS) == ["chicken", "fish", "water"]


def test_swaps_apply_in_the_order_said_to_the_recipe_as_it_stands() -> None:
    # MAGMA-GEN packaging MainDefinition@505 (a longer episode): the default recipe with apple instead of
    # fish, then fish instead of banana; fish was left off the tray (both swaps' "old" were dropped).
    rules = ["Consider fish, ananas, and banana as the new default recipe"]
    request = ("I would like the default recipe with apple instead of fish. I changed my mind: use fish instead of "
               "banana for this tray.")
    assert read_recipe(request, rules, FOODS) == ["apple", "ananas", "fish"]
    assert read_recipe("A tray with fish and milk, without the milk. Replace fish with water.", [], FOODS) == \
        ["water"]


def test_the_default_recipe_comes_from_the_rule_that_defines_it() -> None:
    request = "I would like the default recipe with banana instead of apple."
    assert read_recipe(request, ["The default tray recipe is pasta and apple."], FOODS) == ["pasta", "banana"]
    assert read_recipe(request, [], FOODS) == ["banana"]  # no rule: only what the request itself names


def test_the_default_recipe_is_what_the_rules_set_and_then_edited() -> None:
    rules = ["The default tray recipe is ananas and milk.", "In the default recipe, replace ananas with water.",
             "Do not place apple and juice on the same tray."]  # "same" names no recipe
    assert default_recipe(rules, FOODS) == ["water", "milk"]
    assert default_recipe([*rules, "The standard tray now uses fish instead of milk."], FOODS) == ["water", "fish"]
    assert default_recipe([*rules, "Replace the standard tray recipe with chicken and pasta."], FOODS) == \
        ["chicken", "pasta"]
    assert default_recipe([*rules, "Forget the previous default recipe. The new recipe is fish and juice."],
                          FOODS) == ["fish", "juice"]
    assert read_recipe("Hello, I would like a tray.", rules, FOODS) == ["water", "milk"]
    assert read_recipe("Hello, I would like a tray.", [], FOODS) is None
    for edit in ("In the default recipe, replace ananas with water.",
                 "Replace the standard tray recipe with chicken and pasta."):
        assert heuristic_intent(edit, ["detect", "take", "put", "valid_plate"]) == "acknowledge"
    assert heuristic_intent("Prepare the default tray, but replace juice with water.", ["take"]) == "act"


def test_orders_keep_the_request_order_and_amendments_add_to_them() -> None:
    products = ["coca", "icetea", "brets", "donut"]
    request = ("Prepare the following 2 order(s) using different packages: order 002: 1 donut, 1 brets; "
               "order 001: 1 coca, 1 donut, 1 icetea")
    assert read_orders(request, products) == [("002", ["donut", "brets"]), ("001", ["coca", "donut", "icetea"])]
    amended = f"{request} New recipe to prepare after the current orders: order 003: 1 coca, 1 icetea, 1 brets."
    assert read_orders(amended, products)[-1] == ("003", ["coca", "icetea", "brets"])
    assert read_orders(request, ["apple", "pasta"]) == []  # not these products: not an order


def test_the_tray_validation_tool_is_the_finisher() -> None:
    toolbox = ToolBox.from_input(PACKAGING_TOOLS, PACKAGING_ATTRIBUTES)
    assert (found := finisher(toolbox)) is not None and found.name == "valid_plate"
    assert finisher(ToolBox.from_input(DELIVERY_TOOLS, DELIVERY_ATTRIBUTES)) is None


def test_an_urgent_order_sets_the_begun_package_aside_and_the_interrupted_order_takes_it_back() -> None:
    # Held-out delivery_box MultiOrderDelivery@5 (MAGMA's OrderWithHighPriority): package_1 held with a
    # donut in it when "Urgent interruption: ... Stop the current order, complete this new order first,
    # then resume the interrupted order." came. lava cancelled the held take, then tried to take another
    # package while still holding package_1 until the budget ran out.
    world = PackageWorld(["icetea_1", "brets_1", "coca_1", "donut_1", "coca_2", "icetea_2"])

    def holding(*types: str) -> Callable[[PackageWorld], bool]:
        return lambda w: w.package is not None and sorted(p.rsplit("_", 1)[0] for p in w.contents[w.package]) == \
            sorted(types)

    begun: list[str] = []

    def first_package_back(w: PackageWorld) -> bool:
        return w.package == begun[0] and holding("donut", "icetea")(w)

    def note_first(w: PackageWorld) -> bool:
        if holding("donut")(w):
            begun[:] = [w.package]
            return True
        return False

    rules = ["Packages must be taken from the package storage", "Products are located in the product storage",
             "After completed the package, you must mark it and return it to the package storage"]
    said = episode(world, [
        Stage("Prepare order 001: 1 donut, 1 icetea.", holding(), budget=4),
        Stage(None, note_first, budget=6),
        Stage("Urgent interruption: a new order has arrived: order 002: 1 coca, 1 icetea. Stop the current order, "
              "complete this new order first, then resume the interrupted order.", holding(), budget=8),
        Stage(None, holding("coca"), budget=6),
        Stage(None, holding("coca", "icetea"), budget=6),
        Stage(None, completed(1), budget=6),
        Stage(None, first_package_back, budget=8),
        Stage(None, completed(2), budget=6, answer=True),
    ], rules)
    assert world.marked() == {"002": {"coca": 1, "icetea": 1}, "001": {"donut": 1, "icetea": 1}}
    assert [package for package, _, _ in world.marks][1] == begun[0]
    assert said


def test_an_urgent_order_wanting_what_the_begun_package_holds_still_takes_an_empty_one() -> None:
    # MAGMA-GEN delivery_box MultiOrderDelivery@116: package_1 held with the brets of order 001 when the urgent
    # order 002 (1 icetea, 2 brets) came; its brets fitted 002, so lava packed 002 on top of it, and MAGMA's
    # next stage (an empty package held for the urgent order) was never met.
    world = PackageWorld(["icetea_2", "donut_1", "brets_2", "coca_1", "icetea_1", "brets_1", "donut_2", "coca_2",
                          "brets_3"])

    def holding(*types: str) -> Callable[[PackageWorld], bool]:
        return lambda w: w.package is not None and sorted(p.rsplit("_", 1)[0] for p in w.contents[w.package]) == \
            sorted(types)

    said = episode(world, [
        Stage("Prepare order 001: 1 brets, 1 coca, 1 icetea.", holding(), budget=6),
        Stage(None, holding("brets"), budget=8),
        Stage("Urgent interruption: a new order has arrived: order 002: 1 icetea, 2 brets. Stop the current order, "
              "complete this new order first, then resume the interrupted order.", holding(), budget=8),
        Stage(None, completed(1), budget=20),
        Stage(None, completed(2), budget=20, answer=True),
    ], ["All products from the same order must be placed in the same package."])
    assert world.marked() == {"002": {"icetea": 1, "brets": 2}, "001": {"brets": 1, "coca": 1, "icetea": 1}}
    assert [package for package, _, _ in world.marks] == ["package_2", "package_1"]  # 001 took its package back
    assert said


GIFT = "For each future order, add one brets as a free gift."
THIRD = ("For every future order that initially contains exactly two units of the same product, add a third unit "
         "of that product for free.")


@pytest.mark.parametrize(("rule", "marked"), [
    (GIFT, {"001": {"coca": 2, "brets": 1}, "002": {"donut": 1, "brets": 1}}),
    (THIRD, {"001": {"coca": 3}, "002": {"donut": 1}}),
])
def test_a_promotion_given_before_a_request_changes_its_orders(rule: str, marked: dict) -> None:
    # MAGMA-GEN delivery_box with longer episodes (--max-tool-calls 60): a promotion rule, then orders stated
    # without it; MAGMA's marks must count the gift, or the third unit. lava used to pack the orders as stated.
    world = PackageWorld(["coca_1", "coca_2", "coca_3", "brets_1", "donut_1", "brets_2", "icetea_1"])
    said = episode(world, [
        Stage(rule),
        Stage("Prepare the following 2 order(s) using different packages: order 001: 2 coca; order 002: 1 donut",
              completed(2), budget=40, answer=True),
        Stage("Forget the currently active promotion rule."),
        Stage("Prepare the following 1 order(s) using different packages: order 003: 1 brets", completed(3),
              budget=12, answer=True),
    ], ["All products from the same order must be placed in the same package."])
    assert world.marked() == {**marked, "003": {"brets": 1}}  # forgotten: the next order as stated
    assert len(said) == 4


def test_the_promotion_in_force_is_the_latest_rule_that_gives_one() -> None:
    assert promotion(["Products are available in the product area.", GIFT, THIRD]) == THIRD
    assert promotion(["Products are available in the product area."]) is None
    assert promoted(["coca", "coca", "donut"], GIFT, ["coca", "brets", "donut"]) == ["coca", "coca", "donut", "brets"]
    assert promoted(["coca", "coca", "donut"], THIRD, ["coca", "donut"]) == ["coca", "coca", "donut", "coca"]
    assert promoted(["coca"], THIRD, ["coca"]) == ["coca"]


def test_the_rules_that_keep_foods_apart_are_read_as_they_stand() -> None:
    # Every form of MAGMA's incompatibility rules; a replacing rule drops the pair it names first.
    rules = ["Do not place apple and juice on the same tray.",
             "A tray must never contain both chicken and pasta.",
             "pasta and apple must not be placed on the same tray.",
             "Replace the rule forbidding apple and juice together with a rule forbidding milk and fish together.",
             "The old rule saying that chicken and pasta cannot share a tray is replaced: now water and banana "
             "cannot share a tray."]
    assert kept_apart(rules) == [("pasta", "apple"), ("milk", "fish"), ("water", "banana")]
    foods = [food for key, values in PACKAGING_ATTRIBUTES.items() if key != "known_robots" for food in values]
    assert tray_clash("I would like a tray containing apple and juice.", rules, foods) is None  # replaced
    assert tray_clash("I would like a tray containing fish, juice and milk.", rules, foods) == ("milk", "fish")
    default = ["The default tray recipe is pasta and banana.", *rules]
    assert tray_clash("For the standard recipe, use water instead of pasta.", default, foods) == ("water", "banana")
    assert tray_clash("For the standard recipe, use apple instead of banana.", default, foods) == ("pasta", "apple")
    assert tray_clash("For the standard recipe, use juice instead of banana.", default, foods) is None
    assert tray_clash("I would like a tray containing fish and milk.", PACKAGING_RULES, foods) is None  # no pair
