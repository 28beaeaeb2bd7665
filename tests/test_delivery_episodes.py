"""MagmaPolicy played through advanced_delivery episodes that MAGMA's own generator compiled
(AdvancedDeliveryDefinition and SimpleReceptionDeliveryDefinition, many seeds;
fixtures/extract_magma_stages.py says how they were made): the generator is the ground truth for every
return processed, every delivery prepared and every question.

Each episode starts from its skeleton's reception, storage and broken products and its rules, with
its variation's tools, three robots and MAGMA's AdvancedDeliveryTools messages (test_returns.Depot).
A stage's entry transition lays the products out anew (ResetAdvancedDeliveryTransition). Every
AtLeastCompletedObjectivesStage must reach its count of objectives as MAGMA counts them (clean returns
on their storage grids and broken ones in the trashcan, by AtLeastAssignedProductCount; deliveries by
their shipping labels: the right order, recipient and city, on a package of the right service at a bay
of that service, holding exactly the products asked) within its budget (1.5 times its costliest
objective); every robot's call counts. Every question gets MAGMA's own answer, after looking first
where the stage allows it; the model is never asked.

Between two action stages MAGMA delays the next request, as episodes.py plays it: the agent first gets
the last tool result, and the calls it then makes are held (robot_statuses says "RUNNING ...") while
the user speaks; an empty decision resumes them, a cancel drops them (free), and words said there are
dropped by the next answer, as MAGMA's skill manager does.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from episodes import CANCEL, EXECUTION_ERROR, agent, running
from test_returns import ROBOTS, TYPES, Depot

EPISODES = json.loads((Path(__file__).parent / "fixtures" / "delivery_episodes.json").read_text())
# Where lava's schedule spends one call more than MAGMA's budget: known, and expected to fail until fixed.
DETOUR = "preparation_robot_b stands on textile_spot, found by a refused move; going round it costs one call too many"
# The one clean return's kind is one the delivery takes, and its storage grid holds enough of it from the
# start: that objective is met before any call, so the broken one's discard ends two stages at once, and
# the last stage holds the whole delivery (a look at each spot) and the return's storage: 17 calls for 15.
COLLAPSE = "the returns' objective is met from the start: the last stage holds the delivery and the storage"
OVER_BUDGET = {"AdvancedDeliveryDefinition@113": DETOUR, "SimpleReceptionDeliveryDefinition@113": DETOUR,
               "SimpleReceptionDeliveryDefinition@126": DETOUR, "SimpleReceptionDeliveryDefinition@119": COLLAPSE,
               "SimpleReceptionDeliveryDefinition@317": COLLAPSE, "SimpleReceptionDeliveryDefinition@328": COLLAPSE}


class LabelledDepot(Depot):
    """The Depot, knowing which service each package came from (MAGMA's package names: priority_0 at
    priority_bay_0), as the shipping label check reads it."""

    def __init__(self, reception: list[str], storage: list[str], broken: list[str]) -> None:
        super().__init__(reception, storage, broken)
        self.service: dict[str, str] = {}  # robot or bay -> the service of the package it holds or has
        # Each label attached: order, name, city, bay, the package's product kinds, its service.
        self.labelled: list[tuple[str, str, str, str, Counter, str]] = []

    def run(self, robot: str, name: str, args: dict) -> tuple[bool, str]:
        at = self.at[robot]
        ok, message = super().run(robot, name, args)
        if ok and name == "take_package":
            self.service[robot] = self.service.pop(at, None) or at.split("_bay", 1)[0]
        elif ok and name == "drop_package":
            self.service[at] = self.service.pop(robot)
        elif ok and name == "attach_shipping_label":
            products = Counter(p.rsplit("_", 1)[0] for p in self.dropped[at])
            self.labelled.append((args["order_id"], args["name"], args["city"], at, products,
                                   self.service.get(at, "")))
        return ok, message

    def reset(self, reception: list[str], broken: list[str]) -> None:
        """ResetAdvancedDeliveryTransition: these products at the reception, these broken, every other
        product clean in its storage."""
        products = [p for things in [*self.tables.values(), self.trash, *self.dropped.values(),
                                     *(box or [] for box in self.box.values())] for p in things]
        products += [p for p in self.held.values() if p]
        self.tables = {"reception": list(reception)}
        for kind in TYPES:
            self.tables[f"{kind}_spot"] = sorted(p for p in products if p.startswith(kind) and p not in reception)
        self.broken, self.trash = set(broken), []
        self.held = dict.fromkeys(ROBOTS)
        self.box = {robot: ([] if robot == "reception_robot" else None) for robot in ROBOTS}
        self.dropped, self.service = {}, {}


def on_target(depot: LabelledDepot, target: str) -> list[str]:
    return depot.trash if target == "trashcan" else depot.tables.get(target.replace("_grid", "_spot"), [])


def placed(depot: LabelledDepot, requests: list[dict], fixed: dict[str, str]) -> int:
    """AtLeastAssignedProductCount's count: per request, its best target's fixed and generic products,
    each capped at what the request wants there."""
    total = 0
    for request in requests:
        best = 0
        for target in request["targets"]:
            there = on_target(depot, target)
            count = 0
            for kind, wanted in request["products"].items():
                pinned = [p for p, t in fixed.items() if t == target and p.rsplit("_", 1)[0] == kind]
                slots = min(len(pinned), wanted)
                count += min(sum(p in there for p in pinned), slots)
                count += min(sum(p.rsplit("_", 1)[0] == kind for p in there), wanted - slots)
            best = max(best, count)
        total += best
    return total


def objectives(depot: LabelledDepot, stage: dict[str, Any]) -> int:
    """What AtLeastCompletedObjectivesStage counts: its placement goals met, and its deliveries labelled."""
    met = 0
    for requests in ([r for r in stage["physical"] if "trashcan" not in r["targets"]],
                     [r for r in stage["physical"] if "trashcan" in r["targets"]]):
        if requests:
            met += placed(depot, requests, stage["fixed"]) >= sum(sum(r["products"].values()) for r in requests)
    for delivery in stage["deliveries"]:
        service, wanted = delivery["service"], Counter(delivery["products"])
        met += any(order == delivery["order_id"] and name == delivery["name"] and city == delivery["city"]
                   and bay.startswith(f"{service}_bay_") and package == service and products == wanted
                   for order, name, city, bay, products, package in depot.labelled)
    return met


def plain(text: str) -> str:
    # MAGMA's storage count says "There are 1 electronics product instance": the judge reads "There is 1".
    text = re.sub(r"^there are 1 ", "there is 1 ", text.strip().rstrip(".").lower())
    return re.sub(r",? and ", " and ", text)


@pytest.mark.parametrize("errors", [False, True], ids=["clean", "execution_error"])
@pytest.mark.parametrize("spec", [
    pytest.param(e, marks=pytest.mark.xfail(strict=True, reason=OVER_BUDGET[e["episode"]])) if e["episode"] in
    OVER_BUDGET else e for e in EPISODES], ids=[e["episode"] for e in EPISODES])
def test_magma_delivery_episode(spec: dict[str, Any], errors: bool) -> None:
    """`errors`: MAGMA-BENCH's execution_error condition. Every tool of the scenario declares MAGMA's
    OneShotToolFailureError: the first call an action stage runs fails before it runs, and is forgiven."""
    depot = LabelledDepot(spec["reception"], spec["storage"], spec["broken"])
    magma = {name: (same, params) for name, (same, params) in spec["magma_names"].items()}
    tools = [CANCEL, *spec["tools"]]
    attributes = {**spec["attributes"], "known_robots": ROBOTS, "robot_statuses": dict.fromkeys(ROBOTS, "FREE")}
    held: list[dict] = []  # the calls MAGMA holds while the next request arrives
    decide = agent(tools, attributes, spec["memory_list"])

    failing = False  # the stage's one execution error is still to come

    def run(calls: list[dict]) -> dict:
        nonlocal failing
        lines, previous = [], {}
        for call in calls:
            name, params = magma[call["name"]]
            if failing:
                ok, message, failing = False, EXECUTION_ERROR, False
            else:
                ok, message = depot.run(call["target_robot_name"], name,
                                        {params.get(k, k): v for k, v in call["arguments"].items()})
            lines.append(f"{call['target_robot_name']}: {call['name']} {'succeed' if ok else 'failed'} with message: "
                         f"{message}")
            previous[call["target_robot_name"]] = {"name": call["name"], "arguments": call["arguments"]}
        return {"type": "env", "content": json.dumps({"infos": "\n".join(lines), "previous_tool_call": previous})}

    result = None  # the feedback of the last decision
    for number, stage in enumerate(spec["stages"]):
        instruction = {"type": "user", "content": stage["say"]} if stage["say"] else result
        assert instruction is not None, f"stage {number} has nothing to go on"
        if stage["kind"] != "AtLeastCompletedObjectivesStage":
            failing = False  # only action stages fail
            decision, looked = decide(instruction), 0
            while decision["tool_calls"] and stage.get("lookups"):  # "*": any tool (none named)
                assert all("*" in stage["lookups"] or magma[c["name"]][0] in stage["lookups"]
                           for c in decision["tool_calls"]), (number, decision)
                looked += len(decision["tool_calls"])
                assert looked <= stage["budget"], f"stage {number} over its {stage['budget']} lookups: {depot.calls}"
                decision = decide(result := run(decision["tool_calls"]))
            assert decision["say"] and not decision["tool_calls"], f"stage {number} wanted words: {decision}"
            if "answer" in stage:
                assert plain(decision["say"]) == plain(stage["answer"]), (number, decision["say"], stage["answer"])
            continue
        if "reception" in stage:
            depot.reset(stage["reception"], stage["broken"])
        calls = 0
        failing = errors
        if held and not stage["say"]:  # after a question, MAGMA resumes the held calls itself
            was_failing = failing
            instruction = result = run(held)
            calls += len(held) - (was_failing and not failing)
            held.clear()
            attributes["robot_statuses"] = dict.fromkeys(ROBOTS, "FREE")
        # MAGMA verifies the goals after a call: a request is always delivered, even where they already hold.
        while (calls == 0 and stage["say"]) or objectives(depot, stage) < stage["minimum"]:
            decision = decide(instruction)
            made = decision["tool_calls"]
            if held:  # the held calls run on an empty decision; a cancel drops its robot's, for free
                cancelled = {c["target_robot_name"] for c in made if c["name"] == CANCEL["name"]}
                assert not {c["target_robot_name"] for c in made} - cancelled, f"{made} while {held} are held"
                made, calls = [c for c in held if c["target_robot_name"] not in cancelled], calls - len(cancelled)
                held.clear()
                attributes["robot_statuses"] = dict.fromkeys(ROBOTS, "FREE")
                if not made:
                    instruction = result = {"type": "env", "content": json.dumps({"infos": "\n".join(
                        f"{r}: {CANCEL['name']} succeed with message: cancelled." for r in sorted(cancelled))})}
                    continue
            assert made, f"stage {number} said {decision['say']!r} before its goal: {depot.calls}"
            was_failing = failing
            instruction = result = run(made)
            calls += len(made) - (was_failing and not failing)  # the execution error is forgiven
            assert calls <= stage["budget"], f"stage {number} over its budget of {stage['budget']}: {depot.calls}"
        following = spec["stages"][number + 1] if number + 1 < len(spec["stages"]) else None
        if following is not None and following["say"] and not stage["direct"]:
            # The delayed request: the last result first; the calls then made wait while the user speaks.
            decision = decide(result)
            held.extend(decision["tool_calls"])
            attributes["robot_statuses"] = {r: next((running(c) for c in held if c["target_robot_name"] == r), "FREE")
                                            for r in ROBOTS}


def test_the_episodes_cover_both_definitions_returns_deliveries_and_questions() -> None:
    assert {e["episode"].split("@")[0] for e in EPISODES} == {"AdvancedDeliveryDefinition",
                                                               "SimpleReceptionDeliveryDefinition"}
    kinds = {s["kind"] for e in EPISODES for s in e["stages"]}
    assert {"AtLeastCompletedObjectivesStage", "AskPendingReturnsCountStage", "AskDeliveryDetailsStage",
            "AskDeliveryServiceCountsStage", "AskStorageProductCountStage"} <= kinds
    assert any(s.get("deliveries") for e in EPISODES for s in e["stages"])
