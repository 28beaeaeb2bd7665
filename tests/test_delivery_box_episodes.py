"""MagmaPolicy played through delivery_box episodes that MAGMA's own generator compiled
(MultiOrderDelivery, many seeds, and longer episodes of several requests, "MultiOrderDelivery-long";
fixtures/extract_magma_stages.py says how they were made): the generator is the ground truth for every
order marked, every urgent order put first and every rule. In the longer episodes a promotion ("For each
future order, add one brets as a free gift.") comes before orders stated without it, which MAGMA's checks
count with it.

Each episode starts from its skeleton's products on the table and its rules, with its variation's tools
and MAGMA's delivery_tools messages (test_packing.PackageWorld: one robot, a product station and a
package station). Each stage must meet its goal as MAGMA checks it, within its max_tool_calls (its
target and 4 more):
- AtLeastPackageCompletedStage: so many of its orders marked, as `_validated_assignment_count` reads the
  marks: an order marked twice, a package marked for two orders, or a package that is not exactly its
  order's recipe fails the episode;
- EmptyPackageTakenStage: an empty package held (the urgent order's, after setting the begun one down);
- AtLeastProductsInHeldPackageStage: the held package holds so many of the recipe's products, each type
  counted up to the recipe's count;
- ValidatePackageStage: one mark in the stage, for its order, exactly its recipe.
A rule gets words that take it in, and the completion that follows a flagged stage gets words (after
looking in the package, where MAGMA allows it). The model is never asked.

Between two action stages MAGMA delays the next request, as episodes.py plays it: the agent's next call
is held while the user speaks (an urgent order arrives while a product is being put).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from episodes import MagmaNames, Stage, acknowledged, episode
from test_packing import PackageWorld

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "delivery_box_episodes.json").read_text())


class Station(MagmaNames):
    """The product and package stations (PackageWorld), in the episode's tool names."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.world = PackageWorld(spec["table"])
        self.attributes = {**spec["attributes"], "known_robots": ["panda"]}

    def answer(self, name: str, arguments: dict) -> tuple[bool, str]:
        return self.world.run(name, arguments)


def recipe(products: dict[str, int]) -> Counter:
    return Counter({kind: n for kind, n in products.items() if n})


def validated(orders: list[dict], station: Station) -> int:
    """MAGMA's `_validated_assignment_count`: the orders marked, failing on a wrong mark of one of them."""
    wanted = {order["manufacturing_order"]: recipe(order["products"]) for order in orders}
    done, packages = set(), set()
    for package, order, products in station.world.marks:
        if order not in wanted:
            continue
        assert order not in done and package not in packages and products == wanted[order], \
            f"{package} marked {order} with {dict(products)}, wanted {dict(wanted[order])}: {station.calls}"
        done.add(order)
        packages.add(package)
    return len(done)


class MarkedOnce:
    """ValidatePackageStage: the stage's one mark, for its order and exactly its recipe."""

    def __init__(self, order: dict) -> None:
        self.order, self.start = order, None

    def __call__(self, station: Station) -> bool:
        marks = station.world.marks
        if self.start is None:
            self.start = len(marks)
        new = marks[self.start:]
        assert len(new) <= 1, f"marked {len(new)} packages in one stage: {station.calls}"
        if not new:
            return False
        _, order, products = new[0]
        assert (order, products) == (self.order["manufacturing_order"], recipe(self.order["products"])), \
            f"marked {order} with {dict(products)}, wanted {self.order}: {station.calls}"
        return True


def held_products(station: Station, products: dict[str, int]) -> int:
    world = station.world
    if world.package is None:
        return 0
    inside = Counter(p.rsplit("_", 1)[0] for p in world.contents[world.package])
    return sum(min(inside[kind], n) for kind, n in products.items())


def play(spec: dict[str, Any], station: Station) -> Stage:
    say, kind, budget = spec["say"], spec["kind"], spec.get("budget", 0)
    if kind == "AtLeastPackageCompletedStage":
        orders, minimum = spec["orders"], spec["minimum"]
        return Stage(say, lambda d: validated(orders, d) >= minimum, budget=budget)
    if kind == "EmptyPackageTakenStage":
        return Stage(say, lambda d: d.world.package is not None and not d.world.contents[d.world.package],
                     budget=budget)
    if kind == "AtLeastProductsInHeldPackageStage":
        products, minimum = spec["products"], spec["minimum"]
        return Stage(say, lambda d: held_products(d, products) >= minimum, budget=budget)
    if kind == "ValidatePackageStage":
        return Stage(say, MarkedOnce(spec["order"]), budget=budget)
    lookups = frozenset(station.named(name) for name in spec.get("lookups", ()))
    return Stage(say, lookups=lookups, budget=budget)


# The tools that fail under MAGMA-BENCH's execution_error condition (CycleTool's take and put declare
# its OneShotToolFailureError), in MAGMA's own names.
FAILING = {"take", "put"}


@pytest.mark.parametrize("errors", [False, True], ids=["clean", "execution_error"])
@pytest.mark.parametrize("spec", EPISODES, ids=[e["episode"] for e in EPISODES])
def test_magma_delivery_box_episode(spec: dict[str, Any], errors: bool) -> None:
    station = Station(spec)
    stages = [play(s, station) for s in spec["stages"]]
    said, asked = episode(station, stages, spec["memory_list"], fails=station.fails(FAILING) if errors else None)
    in_words = [s for s, stage in zip(spec["stages"], stages, strict=True) if not stage.acts]
    for wanted, words in zip(in_words, said, strict=True):
        if wanted["kind"] == "ConstraintBaseStage":
            assert acknowledged(words, wanted["say"]), words
    assert station.world.held is None, f"{station.world.held} left in the gripper"
    assert not asked


def test_the_episodes_cover_orders_urgent_orders_and_rules() -> None:
    kinds = {s["kind"] for e in EPISODES for s in e["stages"]}
    assert {"AtLeastPackageCompletedStage", "EmptyPackageTakenStage", "AtLeastProductsInHeldPackageStage",
            "ValidatePackageStage", "ConstraintBaseStage", "CompletionAnswerStage"} <= kinds
    # Promotions of both kinds before an order stage of the same episode.
    for words in ("free gift", "third unit"):
        assert any(any(words in (s["say"] or "") for s in e["stages"][:i]) and stage["kind"].startswith(("AtLeast",
                   "EmptyPackage")) for e in EPISODES for i, stage in enumerate(e["stages"])), words
