"""Procedures a rule spells out, run without the model: MAGMA-BENCH make_coffee-000/001/002 (put the
mug, load the capsule, start the machine; coffees for people a rule associates with a taste; more
coffees asked for while the first are made) and laundry-000/001/002 (take each cloth and drop it in
the machine, the detergent last, then wash; clothes a rule associates with a detergent; a detergent
replaced while the machine is loaded), replayed stage by stage against small worlds that answer like
MAGMA's MakingCoffeeTool and LaunchTool (messages copied from them; tools, attributes and rules as
the compiled episodes send them, in the episode's public names).

Each stage has the budget MAGMA's stage class sets: MakeOneCoffeStage 4, LoadClotheStage 3, WashStage
4. After a stage whose goal is met the next instruction comes at once when the stage was flagged
answer_after_completion; otherwise MAGMA delays it: the agent's next call is held (robot_statuses says
"RUNNING pick(name=boxer_briefs)") while the user speaks, and an empty decision resumes it. The model
must not be needed except where a test says so: a backend that fails if asked stands at the seam.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import episodes
from episodes import CANCEL, Asked, Model, Stage, World, acknowledged, no_model, one_call, tool
from lava.policies.procedures import Group, Step, groups, keywords, named_tools, next_step, plan, procedure, suspended
from lava.policies.task_state import vocabulary
from lava.tools import ToolBox


def canonical(tools: list[dict], reference: list[dict]) -> tuple[dict[str, str], dict[str, str]]:
    """The names in `tools` -> those of `reference`, tool by tool and parameter by parameter."""
    names = {t["name"]: c["name"] for t, c in zip(tools, reference, strict=True)}
    params = {p: q for t, c in zip(tools, reference, strict=True)
              for p, q in zip(t["arguments"], c["arguments"], strict=True)}
    return names, params


# -- make_coffee: a mug, three pods, a machine (make_coffee_cfg.yaml names, MakingCoffeeTool messages) --

# Canonical order: press_button, load_capsule, place_mug, people_from_team, team_from_people.
COFFEE_TOOLS = [CANCEL,
                tool("start_coffee_cycle", "Press the start button on the coffee maker to launch the brewing cycle."),
                tool("insert_capsule", "Insert the requested coffee capsule flavor into the coffee maker.",
                     name="Flavor or identifier of the coffee capsule to insert."),
                tool("position_mug_in_machine",
                     "Place the mug in the coffee maker under the outlet so coffee can be poured into it."),
                tool("get_team_members", "Look up the registered members of a known team in the coffee scenario "
                     "registry.", team="Name of the team whose registered members should be returned."),
                tool("get_person_team", "Look up which registered team a person belongs to in the coffee scenario "
                     "registry.", person="Name of the person whose registered team should be returned.")]
# Other names and descriptions make_coffee_cfg.yaml lets MAGMA-GEN give the same tools.
RENAMED_COFFEE_TOOLS = [CANCEL,
                        tool("press_coffee_start_button",
                             "Start the coffee machine cycle by pressing its brew button."),
                        tool("put_capsule_in_machine",
                             "Place the selected capsule inside the coffee maker before starting the cycle.",
                             capsule_name="Requested capsule flavor for the drink."),
                        tool("place_mug_under_spout",
                             "Position a mug in the machine where the brewed coffee will be dispensed."),
                        tool("find_people_from_team", "Retrieve the list of registered team members for a known team.",
                             group_name="Name of the group for which members must be retrieved."),
                        tool("find_registered_team", "Return the team recorded for a given person in the registry.",
                             person="Name of the person whose registered team should be returned.")]
COFFEE_ATTRIBUTES = {"coffee_pod": ["black", "milky", "white"], "known_robots": ["panda"]}
COFFEE_RULE = "To prepare a coffee you must put the mug, place a capsule, then start the machine."  # skeletons 000, 001
COFFEE_RULES_002 = ["To prepare a coffee, place the mug, load the appropriate capsule, then start the coffee maker.",
                    "When asked to make coffee for a person whose preference is unknown, ask the user for that "
                    "person's coffee preference."]
TEAMS = {"RAP": ["Florent", "Emma", "Abdelbasset", "Jade"], "DISCO": ["Perez", "Lewis", "Philippe", "Merlin"],
         "GEPETTO": ["Roberts", "Williams"], "RIS": ["Garcia"]}


class CoffeeMachine:
    """Place the mug, load pods, press: each press serves a coffee (what was in the machine) and
    readies the machine for the next one."""

    def __init__(self, tools: list[dict] = COFFEE_TOOLS) -> None:
        self.tools, self.attributes = tools, COFFEE_ATTRIBUTES
        self.names, self.params = canonical(tools, COFFEE_TOOLS)
        self.mug, self.pods = False, []
        self.coffees: list[str | None] = []  # per press, the pod of a well made coffee, None for a failed one
        self.calls: list[str] = []

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        self.calls.append(f"{name}({', '.join(map(str, arguments.values()))})")
        name = self.names.get(name, name)
        a = {self.params.get(k, k): v for k, v in arguments.items()}
        if name == "position_mug_in_machine":
            self.mug = True
            return True, "You have placed the mug."
        if name == "insert_capsule":
            pod = a.get("name")
            if pod not in self.attributes["coffee_pod"]:
                return False, f"No coffee_pod named {pod}. Use only known pods."
            self.pods.append(pod)
            return True, f"You have loaded a {pod} capsule."
        if name == "start_coffee_cycle":
            self.coffees.append(self.pods[0] if self.mug and len(self.pods) == 1 else None)
            self.mug, self.pods = False, []
            return True, "Coffee given to the user! The machine is ready for the next coffee."
        if name == "get_team_members":
            team = a.get("team")
            if team not in TEAMS:
                return False, f"team {team} doesn't exist"
            return True, f"people in {team} : {TEAMS[team]}"
        if name == "get_person_team":
            person = a.get("person")
            team = next((t for t, members in TEAMS.items() if person in members), None)
            return True, f"{person} in team {team}"
        return False, f"{name} is not a known tool."


def served(*pods: str) -> Callable[[CoffeeMachine], bool]:
    """MakeOneCoffeStage's goal, coffee after coffee: a press with the mug placed and exactly the
    requested pod loaded; any other press fails the episode (verif_log_completion's -1)."""
    def goal(w: CoffeeMachine) -> bool:
        assert w.coffees == list(pods[:len(w.coffees)]), f"wrong coffee: {w.coffees} for {pods}: {w.calls}"
        return len(w.coffees) >= len(pods)
    return goal


# -- laundry: clothes, detergents, a washing machine (laundry.yaml names, LaunchTool messages) --

# Canonical order: take, drop, action_wash.
LAUNDRY_TOOLS = [CANCEL,
                 tool("pick", "Pick a clothe by its name.", name="Name of the object."),
                 tool("drop_to_washing_machine", "Drop the held object into the washing_machine."),
                 tool("wash", "Clean all clothes in the washing machine.")]
RENAMED_LAUNDRY_TOOLS = [CANCEL,
                         tool("grab", "Catch the specified clothe.", clothe="Reference of the clothe."),
                         tool("put_into_washing_machine", "Put the item inside the washing machine."),
                         tool("wash", "Remove dirt of items in the machine.")]
# The rule still says "then use 'wash'": MAGMA-GEN renames tools, never the rules that quote them.
RENAMED_WASH_TOOLS = [*LAUNDRY_TOOLS[:3], tool("start_cycle", "Start the washing machine.")]
CLOTHES = ["t_shirt", "linen_blouse", "blue_jeans", "chino_pants", "gym_shorts", "cotton_socks", "boxer_briefs",
           "briefs", "baseball_cap"]
DETERGENTS = ["detergent_TIDE", "detergent_ARIEL", "detergent_GAIN"]
LAUNDRY_ATTRIBUTES = {"clothes": CLOTHES, "detergents": DETERGENTS, "known_robots": ["panda"]}
LAUNDRY_RULES = ["To wash clothes, I need to put them inside the wash-machine, add detergents and then use 'wash'.",
                 "Detergent must always be put last in the wash-machine",
                 "Different detergents must not mixed in the same wash."]


class WashingMachine:
    """Take one thing at a time, drop it in the machine; wash cleans what is inside."""

    def __init__(self, tools: list[dict] = LAUNDRY_TOOLS) -> None:
        self.tools, self.attributes = tools, LAUNDRY_ATTRIBUTES
        self.names, self.params = canonical(tools, LAUNDRY_TOOLS)
        self.held: str | None = None
        self.machine: list[str] = []
        self.washes: list[tuple[list[str], list[str]]] = []  # (clothes, detergents) of each wash
        self.calls: list[str] = []

    def clothes(self) -> list[str]:
        return [o for o in self.machine if o not in DETERGENTS]

    def reset(self) -> None:
        self.held, self.machine = None, []

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        self.calls.append(f"{name}({', '.join(map(str, arguments.values()))})")
        name = self.names.get(name, name)
        a = {self.params.get(k, k): v for k, v in arguments.items()}
        if name == "pick":
            thing = a.get("name")
            if thing not in CLOTHES + DETERGENTS:
                return False, f"No object with name {thing}"
            if self.held == thing:
                return False, f"The object {thing} is already in the gripper."
            if self.held is not None or thing in self.machine:
                return False, f"You failed to take the object {thing}. You can retry."
            self.held = thing
            return True, f"You have {thing} in your gripper."
        if name == "drop_to_washing_machine":
            if self.held is None:
                return False, "No clothes in gripper."
            self.machine.append(self.held)
            dropped, self.held = self.held, None
            return True, f"Successfully put {dropped} in the wash machine"
        if name == "wash":
            detergents = [o for o in self.machine if o in DETERGENTS]
            if not detergents:
                return False, "No detergent in machine."
            if not self.clothes():
                return False, "There is no clothes in the machine!"
            self.washes.append((self.clothes(), detergents))
            return True, f"You have washed {','.join(self.clothes())}"
        return False, f"{name} is not a known tool."


def loaded(clothes: list[str], n: int) -> Callable[[WashingMachine], bool]:
    """LoadClotheStage: n of the clothes in the machine (and nothing else but a detergent)."""
    def goal(w: WashingMachine) -> bool:
        assert set(w.clothes()) <= set(clothes), f"loaded {w.clothes()} for {clothes}: {w.calls}"
        return len(w.clothes()) >= n
    return goal


def washed(clothes: list[str], detergent: str) -> Callable[[WashingMachine], bool]:
    """WashStage: one wash of exactly the clothes with exactly the detergent, put in last."""
    def goal(w: WashingMachine) -> bool:
        if not w.washes:
            return False
        assert [(sorted(c), d) for c, d in w.washes] == [(sorted(clothes), [detergent])], (w.washes, w.calls)
        assert w.machine[-1] == detergent, f"the detergent was not put last: {w.machine}"
        return True
    return goal


# -- the episode runner (episodes.py) --

def held_silently(number: int, decision: dict) -> dict | None:
    """A delayed decision starts one call and says nothing: words there would reach the user before
    the stage they answer."""
    assert not decision["say"], f"stage {number}: words while the next stage waits: {decision}"
    return one_call(number, decision)


def episode(world: World, stages: list[Stage], rules: list[str], model: Model = no_model
            ) -> tuple[list[str], Asked]:
    return episodes.episode(world, stages, rules, model, hold=held_silently)


# -- make_coffee episodes --

MC000 = ["To prepare a coffee you must have placed the mug and loaded the capsule before pressing the start button.",
         "There is no black coffee anymore."]
MC001_RULE = ("Hello, please remember that Florent, Emma, Abdelbasset, Jade like their coffee black and Perez, Lewis "
              "like their coffee white and Philippe, Merlin like their coffee milky.")


def test_make_coffee_000_refuses_the_missing_pod_then_makes_the_other_one() -> None:
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage(MC000[0]),
        Stage(MC000[1]),
        Stage("Hello! Can you make me a black coffee please"),  # RefuseCoffee: words, no call
        Stage("Oh, okay let's do a milky instead", served("milky"), budget=4, direct=True),
    ], [COFFEE_RULE])
    assert acknowledged(said[0], MC000[0]) and acknowledged(said[1], MC000[1])
    assert "black" not in world.calls[0] and world.coffees == ["milky"]
    assert world.calls == ["position_mug_in_machine()", "insert_capsule(milky)", "start_coffee_cycle()"]
    assert not asked


@pytest.mark.parametrize("tools", [pytest.param(COFFEE_TOOLS, id="bench-names"),
                                   pytest.param(RENAMED_COFFEE_TOOLS, id="magma-gen-names")])
def test_make_coffee_001_each_person_gets_the_taste_the_rule_gives_them(tools: list[dict]) -> None:
    world = CoffeeMachine(tools)
    said, asked = episode(world, [
        Stage(MC001_RULE),
        # AskPeopleInTeamStage allows the members lookup before the answer, and wants it called.
        Stage("Who is in team DISCO?", lambda w: "get_team_members(DISCO)" in w.calls
              or "find_people_from_team(DISCO)" in w.calls, budget=2, answer=True),
        Stage("Perez: Can you make me a coffee?", served("white"), budget=4, direct=True),
        Stage("Lewis: Can you make me a coffee?", served("white", "white"), budget=4, direct=True),
        Stage("Hello, make me a coffee for Philippe", served("white", "white", "milky"), budget=4, direct=True),
        Stage("Hello, make me a coffee for Merlin", served("white", "white", "milky", "milky"), budget=4,
              direct=True),
    ], [COFFEE_RULE])
    assert acknowledged(said[0], MC001_RULE) and said[1] == "Perez, Lewis, Philippe, and Merlin are in team DISCO."
    assert world.coffees == ["white", "white", "milky", "milky"]
    assert len(world.calls) == 13  # the lookup, then three calls a coffee
    assert not asked  # the model is not needed: the registry answers


def test_make_coffee_002_coffees_asked_for_while_the_first_are_made_follow_them_in_order() -> None:
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("Please make these coffees in this exact order: a milky coffee and a milky coffee.",
              served("milky"), budget=4),
        Stage("When you have finished the coffees already requested, please also make a white coffee and a milky "
              "coffee.", served("milky", "milky"), budget=4),
        Stage(None, served("milky", "milky", "white"), budget=4),
        Stage(None, served("milky", "milky", "white", "milky"), budget=4),
        Stage(None),  # CompletionAnswerStage
    ], COFFEE_RULES_002)
    assert world.coffees == ["milky", "milky", "white", "milky"]
    assert len(world.calls) == 12 and world.calls[-1] == "start_coffee_cycle()"
    assert said[0].startswith("Done")
    assert not asked


@pytest.mark.parametrize(("request_", "coffees"), [
    ("Please make these coffees in this exact order: a coffee for Walker, a white coffee, a coffee for Merlin, "
     "and a coffee for Scott.", ["milky", "white", "white", "milky"]),
    ("Please make these coffees in this exact order: a black coffee, a coffee for Scott, and a coffee for Merlin.",
     ["black", "milky", "white"]),
    # MAGMA-GEN make_coffee SimpleDefinition@707 (a longer episode, kept back): Scott took the milky coffee.
    ("Please make these coffees in this exact order: a coffee for Merlin and a milky coffee.", ["white", "milky"]),
    ("Please make black coffee for Merlin and Scott.", ["black", "black"]),
])
def test_coffees_listed_for_people_and_by_kind_are_made_in_the_order_listed(request_: str, coffees: list) -> None:
    # MAGMA-GEN make_coffee SimpleDefinition@505 and @503 (longer episodes): Walker took the white coffee
    # listed beside him, and the white coffee asked for no one was left out.
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("Hey, please remember that Scott and Walker like their coffee milky, Merlin like their coffee white."),
        Stage(request_, served(*coffees), budget=3 * len(coffees)),
        Stage(None),  # CompletionAnswerStage
    ], [COFFEE_RULE])
    assert world.coffees == coffees and said[-1].startswith("Done") and not asked


def test_a_coffee_asked_for_after_a_mixed_list_is_made_after_it() -> None:
    # MAGMA-GEN make_coffee SimpleDefinition@601 (a longer episode, kept back): "a coffee for Thomas and a milky
    # coffee", then "please also make a black coffee": lava said "Done." after the two milky ones.
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("Hey, please remember that Thomas like their coffee milky."),
        Stage("Please make these coffees in this exact order: a coffee for Thomas and a milky coffee.",
              served("milky"), budget=4),
        Stage("When you have finished the coffees already requested, please also make a black coffee.",
              served("milky", "milky"), budget=4),
        Stage(None, served("milky", "milky", "black"), budget=4),
        Stage(None),  # CompletionAnswerStage
    ], [COFFEE_RULE])
    assert world.coffees == ["milky", "milky", "black"] and said[-1].startswith("Done") and not asked


def test_a_coffee_used_instead_of_one_that_is_gone_is_made_once() -> None:
    # MAGMA-GEN make_coffee SimpleDefinition@705 (a longer episode, kept back): after "milky coffee is not
    # available anymore.", "Use black coffee instead of milky. Please make these coffees in this exact order:
    # black." was refused (the request names milky), and once not refused, two black coffees were made.
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("milky coffee is not available anymore."),
        Stage("Hey, serve me a milky coffee!"),
        Stage("Use black coffee instead of milky. Please make these coffees in this exact order: black.",
              served("black"), budget=4),
        Stage(None),  # CompletionAnswerStage
    ], [COFFEE_RULE])
    assert said[1] == "Sorry, I cannot do that: milky coffee is not available anymore."
    assert world.coffees == ["black"] and said[-1].startswith("Done") and not asked


def test_a_priority_coffee_is_made_first_then_the_interrupted_order_resumes() -> None:
    # Held-out make_coffee SimpleDefinition@2: after the milky coffee lava said "Done." with one black
    # coffee of the order still to make.
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("Please make these coffees in this exact order: a black coffee and a black coffee.",
              served("black"), budget=4),
        Stage("Do a milky coffee as a priority now, then resume the previous order.", served("black", "milky"),
              budget=4),
        Stage(None, served("black", "milky", "black"), budget=4),
        Stage(None),  # CompletionAnswerStage
    ], [COFFEE_RULE])
    assert world.coffees == ["black", "milky", "black"]
    assert len(world.calls) == 9 and said[-1].startswith("Done")
    assert not asked


def test_preferences_given_one_after_another_in_one_sentence_serve_each_person() -> None:
    # Held-out make_coffee SimpleDefinition@5: "Jackson wants a milky coffee, Alexis wants a milky coffee,
    # and Perez wants a black coffee." names two tastes in one sentence; lava read none of them and asked
    # again. The question before it also missed Perez, behind the serial comma of "Alexis, and Perez".
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("Please make coffee for Jackson, Alexis, and Perez."),
        Stage("Jackson wants a milky coffee, Alexis wants a milky coffee, and Perez wants a black coffee. Please "
              "make first the coffee for Jackson, then the one for Alexis, and then the one for Perez.",
              served("milky"), budget=4),
        Stage(None, served("milky", "milky"), budget=4),
        Stage(None, served("milky", "milky", "black"), budget=4),
        Stage(None),  # CompletionAnswerStage
    ], COFFEE_RULES_002)
    assert "Jackson, Alexis, and Perez" in said[0]
    assert world.coffees == ["milky", "milky", "black"] and len(world.calls) == 9
    assert said[-1].startswith("Done") and not asked


@pytest.mark.parametrize("then", [
    "Use milky coffee instead for Theo. Please make first the coffee for Camille and then the one for Theo.",
    "Do not make the coffee for Theo. Please prepare only the coffee for Camille."])
def test_the_request_after_a_refused_coffee_keeps_the_preferences_the_refused_one_gave(then: str) -> None:
    # MAGMA-GEN make_coffee SimpleDefinition@212 (seeds 200-239, compiled after the replay of seeds 100-159):
    # Theo's black coffee was refused, and MAGMA's next request, a substitute for Theo or a cancel of his
    # coffee, says nothing of Camille's, milky in the request refused. lava asked for it again.
    world = CoffeeMachine()
    cups = ["milky", "milky"] if "instead" in then else ["milky"]
    said, asked = episode(world, [
        Stage("We are out of black capsules until further notice."),
        Stage("Please make coffee for Camille and Theo."),
        Stage("Camille wants a milky coffee and Theo wants a black coffee. Please make first the coffee for Camille "
              "and then the one for Theo."),
        Stage(then, served(*cups[:1]), budget=4),
        *([Stage(None, served(*cups), budget=4)] if len(cups) > 1 else []),
        Stage(None),  # CompletionAnswerStage
    ], COFFEE_RULES_002)
    assert said[2] == "Sorry, I cannot do that for Theo: We are out of black capsules until further notice."
    assert world.coffees == cups and said[-1].startswith("Done") and not asked


def looked_up(person: str) -> Callable[[CoffeeMachine], bool]:
    """LookupTeamThenAnswerStage: the team tool, allowed before the answer, was called for `person`."""
    return lambda w: any(c.endswith(f"({person})") and "team" in c for c in w.calls)


def test_a_coffee_for_someone_whose_taste_is_unknown_is_asked_about_not_made() -> None:
    # Held-out make_coffee SimpleDefinition@1: a mug was placed for "Lee and Clark" (MissingInformationStage).
    rule = "Hey, please remember that Lee like their coffee black."
    # The team tools are there, but no rule speaks of teams and the stage wants words only.
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage(rule),
        Stage("Please make coffee for Lee and Clark."),
        Stage("Clark wants a black coffee. Please make first the coffee for Lee and then the one for Clark.",
              served("black"), budget=4),
        Stage(None, served("black", "black"), budget=4),
        Stage(None),  # CompletionAnswerStage
    ], [COFFEE_RULE])
    assert acknowledged(said[0], rule)
    assert "Clark" in said[1] and "Lee" not in said[1] and "preference" in said[1]
    assert world.coffees == ["black", "black"] and len(world.calls) == 6
    assert not asked


TEAM_REGISTRY_RULE = ("When asked to make coffee for a person, first use the team registry to find their team, "
                      "then apply that team's coffee preference. If the team has no coffee preference, ask the user "
                      "for the person's preference.")


def test_a_person_s_team_is_looked_up_before_asking_and_its_taste_used() -> None:
    # Held-out make_coffee TeamDefinition@0 and @1: a mug was placed for Florent, whose team has no
    # known taste (LookupTeamThenAnswerStage allows only the lookup); "team ... prefers" was acted on.
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("white coffee is not available anymore."),  # no coffee below is white
        Stage("Please make coffee for Florent.", looked_up("Florent"), budget=1, answer=True),
        Stage("Florent wants a black coffee.", served("black"), budget=4, direct=True),
        Stage("team DISCO prefers milky coffee and team RAP prefers black coffee."),
        Stage("Please make coffee for Merlin.", served("black", "milky"), budget=4, direct=True),
    ], [COFFEE_RULE, TEAM_REGISTRY_RULE])
    assert "Florent" in said[1] and "preference" in said[1]
    assert world.calls[0] == "get_person_team(Florent)"
    assert world.calls[-4:] == ["get_person_team(Merlin)", "position_mug_in_machine()", "insert_capsule(milky)",
                                "start_coffee_cycle()"]
    assert not asked


def test_a_taste_said_to_be_unavailable_is_refused_when_asked_for_later() -> None:
    # Held-out make_coffee TeamDefinition@7: "white coffee is not available anymore.", then the answer
    # to lava's question, "Roberts wants a white coffee.", was acted on where the stage wanted a refusal.
    # Then "What team does Williams belong to?" was answered with what the lookup said of Roberts, and
    # Garcia's coffee, white by his team's taste, was started.
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("white coffee is not available anymore."),
        Stage("team RIS prefers white coffee by default and team MAC prefers milky coffee by default."),
        Stage("Please make coffee for Roberts.", looked_up("Roberts"), budget=1, answer=True),
        Stage("Roberts wants a white coffee."),  # words only: the coffee is gone
        Stage("What team does Williams belong to?", looked_up("Williams"), budget=1, answer=True),
        Stage("Please make coffee for Garcia.", looked_up("Garcia"), budget=1, answer=True),
    ], [COFFEE_RULE, TEAM_REGISTRY_RULE])
    assert "Roberts" in said[2] and "preference" in said[2]
    # MAGMA's judge: "must refuse and inform that Roberts cannot be served because white coffee is unavailable".
    assert said[3] == "Sorry, I cannot do that for Roberts: white coffee is not available anymore."
    assert said[4] == "Williams is in team GEPETTO."
    assert said[5] == "Sorry, I cannot do that for Garcia: white coffee is not available anymore."
    assert world.calls == ["get_person_team(Roberts)", "get_person_team(Williams)", "get_person_team(Garcia)"]
    assert world.coffees == [] and not asked


@pytest.mark.parametrize("tools", [pytest.param(COFFEE_TOOLS, id="bench-names"),
                                   pytest.param(RENAMED_COFFEE_TOOLS, id="magma-gen-names")])
def test_team_questions_look_each_one_up_then_answer_from_the_registry(tools: list[dict]) -> None:
    # Held-out make_coffee TeamDefinition@19: "Who is in team GEPETTO?" went to the model, which said the
    # question back. AskPeopleInTeamStage and AskTeamsForPeopleStage allow the registry's lookup before
    # the answer (one per person), and want it called.
    world = CoffeeMachine(tools)
    members, team = world.calls, lambda name: lambda w: any(c.endswith(f"({name})") for c in w.calls)
    said, asked = episode(world, [
        Stage("Who is in team GEPETTO?", team("GEPETTO"), budget=2, answer=True),
        Stage("In which teams are Garcia and Emma?", lambda w: team("Garcia")(w) and team("Emma")(w), budget=3,
              answer=True),
        Stage("What team does Lewis belong to?", team("Lewis"), budget=2, answer=True),
    ], [COFFEE_RULE])
    assert said == ["Roberts and Williams are in team GEPETTO.", "Garcia is in team RIS and Emma is in team RAP.",
                    "Lewis is in team DISCO."]
    assert len(members) == 4 and not asked


def scott_s_coffee_refused_then(*follow_ups: Stage) -> tuple[CoffeeMachine, list[str], list[str]]:
    """Scott's milky coffee is out when Lee's and Scott's are asked for; then `follow_ups`."""
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("Hey, please remember that Scott like their coffee milky, Lee like their coffee white."),
        Stage("There are no milky capsules left for now."),
        Stage("Please make first the coffee for Lee and then the one for Scott."),
        *follow_ups,
    ], [COFFEE_RULE])
    assert "milky" in said[2]  # refused: Scott's is gone
    return world, said, asked


def test_a_coffee_refused_then_dropped_leaves_the_other_one_to_make() -> None:
    # Held-out make_coffee SimpleDefinition@14: "Do not make the coffee for Scott. Please prepare only the
    # coffee for Lee." (MakeOneCoffeStage, after the refusal of Scott's milky coffee) was heard as a
    # rule, because it opens with a prohibition; the stage wanted Lee's white coffee made.
    world, said, asked = scott_s_coffee_refused_then(
        Stage("Do not make the coffee for Scott. Please prepare only the coffee for Lee.", served("white"),
              budget=4),
        Stage(None),  # CompletionAnswerStage
    )
    assert world.coffees == ["white"] and len(world.calls) == 3
    assert said[-1].startswith("Done") and not asked


def test_a_substitute_taste_then_the_order_the_request_gives() -> None:
    # MAGMA's make_coffee substitute request (requests/common.py), ordered form: the substitute's sentence
    # names Scott first, and Scott's coffee was made before Lee's.
    world, _, asked = scott_s_coffee_refused_then(
        Stage("Use black coffee instead for Scott. Please make first the coffee for Lee and then the one for Scott.",
              served("white"), budget=4),
        Stage(None, served("white", "black"), budget=4),
    )
    assert world.coffees == ["white", "black"] and not asked


def test_preference_questions_are_answered_from_the_rules_and_the_registry() -> None:
    # MAGMA's AskCoffeePreferenceForUserStage (words only) and AskTeamCoffeePreferencesStage (the members
    # lookup allowed before the answer): a person's own preference is what a rule gave them; what their
    # team prefers is not theirs.
    rules = ["Hey, please remember that Florent and Emma like their coffee black, Perez like their coffee white.",
             "Hello, please remember that team RAP prefers milky coffee."]
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("What coffee does Emma like?"),
        Stage("What is Perez's coffee preference?"),
        Stage("Which coffee like Florent?"),
        Stage("What are the coffee preferences of the members of team RAP?",
              lambda w: "get_team_members(RAP)" in w.calls, budget=2, answer=True),
        Stage("Which members of team RAP do not have a known coffee preference?",
              lambda w: w.calls.count("get_team_members(RAP)") == 2, budget=2, answer=True),
        Stage("Which members of team DISCO like white coffee?",
              lambda w: "get_team_members(DISCO)" in w.calls, budget=2, answer=True),
    ], [COFFEE_RULE, *rules])
    assert said == ["Emma likes black coffee.", "Perez likes white coffee.", "Florent likes black coffee.",
                    "In team RAP, Florent likes black coffee, Emma likes black coffee, and Abdelbasset and Jade do not "
                    "have any known coffee preference.",
                    "Abdelbasset and Jade do not have any known coffee preference in team RAP.",
                    "Perez likes white coffee in team DISCO."]
    assert world.coffees == [] and not asked


@pytest.mark.parametrize("gone", ["There are no white capsules left for now.",
                                  "We are out of white capsules until further notice.",
                                  # MAGMA-GEN make_coffee SimpleDefinition@507 (a longer episode): gone as white
                                  # coffee, back as white capsules
                                  "white coffee is not available anymore."])
@pytest.mark.parametrize("back", ["The white capsules have been restocked.", "You can use white coffee again now.",
                                  "We have white capsules again now.", "white coffee is available again."])
def test_coffee_said_to_be_out_in_capsules_is_refused_until_it_is_restocked(gone: str, back: str) -> None:
    # Held-out make_coffee TeamDefinition@8: "There are no white capsules left for now." was not read
    # as white coffee being gone, and Arthur's coffee, white by his team's taste, was started.
    # MAGMA's other availability messages say the same, or bring the coffee back.
    world = CoffeeMachine()
    said, asked = episode(world, [
        Stage("Hello, please remember that team DISCO prefers white coffee by default."),
        Stage(gone),
        Stage("Please make coffee for Merlin.", looked_up("Merlin"), budget=1, answer=True),
        Stage(back),
        Stage("Please make coffee for Perez.", served("white"), budget=5, direct=True),
    ], [COFFEE_RULE, TEAM_REGISTRY_RULE])
    assert said[2].startswith("Sorry") and gone in said[2]
    assert acknowledged(said[3], back)
    assert world.calls == ["get_person_team(Merlin)", "get_person_team(Perez)", "position_mug_in_machine()",
                           "insert_capsule(white)", "start_coffee_cycle()"]
    assert not asked


def test_the_runner_fails_a_coffee_stage_that_goes_over_its_budget() -> None:
    with pytest.raises(AssertionError, match="over its budget of 2"):
        episode(CoffeeMachine(), [Stage("Oh, okay let's do a milky instead", served("milky"), budget=2)],
                [COFFEE_RULE])


def test_the_runner_fails_a_wrong_coffee() -> None:
    # The goal fails the episode on a press without the mug: the worlds can catch a wrong procedure.
    world = CoffeeMachine()
    world.run("insert_capsule", {"name": "milky"})
    world.run("start_coffee_cycle", {})
    with pytest.raises(AssertionError, match="wrong coffee"):
        served("milky")(world)


# -- laundry episodes (the public names the benchmark sends: boxer_briefs, detergent_ARIEL, ...) --

LD000_RULE = ("gym_shorts uses detergent_ARIEL, briefs uses detergent_GAIN, blue_jeans uses detergent_TIDE, "
              "boxer_briefs uses detergent_ARIEL, linen_blouse uses detergent_TIDE, cotton_socks uses detergent_GAIN")
LD001_RULE = ("blue_jeans uses detergent_GAIN detergent,linen_blouse uses detergent_GAIN detergent,cotton_socks uses "
              "detergent_TIDE detergent,boxer_briefs uses detergent_ARIEL detergent,baseball_cap uses detergent_ARIEL "
              "detergent,chino_pants uses detergent_GAIN detergent")
LD002_RULE = ("Hello, please remember that chino_pants, gym_shorts, and linen_blouse use detergent_ARIEL, boxer_briefs "
              "and cotton_socks use detergent_GAIN.")


def test_laundry_000_washes_the_clothes_a_rule_gives_the_requested_detergent() -> None:
    clothes = ["blue_jeans", "linen_blouse"]
    world = WashingMachine()
    said, asked = episode(world, [
        Stage(LD000_RULE),
        Stage("Wash all clothes that can be washed with detergent_TIDE", loaded(clothes, 1), budget=3),
        Stage(None, loaded(clothes, 2), budget=3),
        Stage(None, washed(clothes, "detergent_TIDE"), budget=4, direct=True),
    ], LAUNDRY_RULES)
    assert acknowledged(said[0], LD000_RULE)
    assert world.calls == ["pick(blue_jeans)", "drop_to_washing_machine()", "pick(linen_blouse)",
                           "drop_to_washing_machine()", "pick(detergent_TIDE)", "drop_to_washing_machine()", "wash()"]
    assert not asked


def test_laundry_a_later_rule_gives_a_cloth_its_detergent() -> None:
    # MAGMA-GEN laundry MainDefinition@504 (a longer episode): "baseball_cap use detergent_GAIN", later
    # "baseball_cap use detergent_TIDE"; with two detergents for the cap lava washed it with none.
    world = WashingMachine()
    _, asked = episode(world, [
        Stage("Hello, please remember that baseball_cap use detergent_GAIN."),
        Stage("Hello, please remember that baseball_cap use detergent_TIDE."),
        Stage("Please wash baseball_cap.", loaded(["baseball_cap"], 1), budget=3),
        Stage(None, washed(["baseball_cap"], "detergent_TIDE"), budget=4, direct=True),
    ], LAUNDRY_RULES)
    assert world.calls[-3:] == ["pick(detergent_TIDE)", "drop_to_washing_machine()", "wash()"] and not asked


@pytest.mark.parametrize("tools", [pytest.param(LAUNDRY_TOOLS, id="bench-names"),
                                   pytest.param(RENAMED_LAUNDRY_TOOLS, id="magma-gen-names"),
                                   pytest.param(RENAMED_WASH_TOOLS, id="wash-renamed")])
def test_laundry_001_the_requested_clothes_go_with_the_detergent_the_rule_gives_them(tools: list[dict]) -> None:
    clothes = ["boxer_briefs", "baseball_cap"]
    world = WashingMachine(tools)
    said, asked = episode(world, [
        Stage(LD001_RULE),
        Stage("Please wash the following clothes: boxer_briefs, baseball_cap", loaded(clothes, 1), budget=3),
        Stage(None, loaded(clothes, 2), budget=3),
        Stage(None, washed(clothes, "detergent_ARIEL"), budget=4, direct=True),
    ], LAUNDRY_RULES)
    assert acknowledged(said[0], LD001_RULE)
    assert world.machine == ["boxer_briefs", "baseball_cap", "detergent_ARIEL"] and world.held is None
    assert len(world.calls) == 7
    assert not asked


@pytest.mark.parametrize("tools", [pytest.param(LAUNDRY_TOOLS, id="bench-names"),
                                   pytest.param(RENAMED_LAUNDRY_TOOLS, id="magma-gen-names"),
                                   pytest.param(RENAMED_WASH_TOOLS, id="wash-renamed")])
def test_laundry_002_a_detergent_replaced_while_loading_is_the_one_put_in(tools: list[dict]) -> None:
    clothes = ["baseball_cap", "boxer_briefs"]
    world = WashingMachine(tools)
    said, asked = episode(world, [
        Stage("Please wash baseball_cap and boxer_briefs with detergent_GAIN.", loaded(clothes, 1), budget=3),
        # Said while the next pick is held: an empty decision resumes it.
        Stage("I made a mistake: use detergent_ARIEL instead of detergent_GAIN for this wash.", loaded(clothes, 2),
              budget=3),
        Stage(None, washed(clothes, "detergent_ARIEL"), budget=4),
        Stage(None),  # CompletionAnswerStage
        Stage(LD002_RULE),
    ], LAUNDRY_RULES)
    assert world.machine == ["baseball_cap", "boxer_briefs", "detergent_ARIEL"]
    assert "detergent_GAIN" not in " ".join(world.calls)
    assert said[0].startswith("Done") and acknowledged(said[1], LD002_RULE)
    assert not asked


LD24_RULE = ("Hello, please remember that gym_shorts use detergent_GAIN, briefs use detergent_TIDE, baseball_cap "
             "and boxer_briefs use detergent_ARIEL.")


@pytest.mark.parametrize(("request_", "question", "answer", "detergent"), [
    # AskLaundryByDetergentRequest: no rule gives t_shirt a detergent.
    ("Please wash gym_shorts and t_shirt", "Which detergent should I use for t_shirt?",
     "Use detergent_GAIN for this time.", "detergent_GAIN"),
    # AskLaundryRequest: the rules give the two clothes different detergents.
    ("Please wash gym_shorts and briefs", "These clothes require different detergents. What should I do?",
     "Ok, let's use detergent_TIDE for this time.", "detergent_TIDE"),
])
def test_laundry_a_wash_the_rules_do_not_settle_is_asked_about_then_done_as_answered(
        request_: str, question: str, answer: str, detergent: str) -> None:
    # Held-out laundry MainDefinition@24: "Please wash gym_shorts and t_shirt" was loaded at once, where
    # MAGMA's MissingInformationStage wants "Which detergent should I use for t_shirt?", then the
    # answer's detergent for both clothes.
    clothes = [c for c in CLOTHES if c in request_]
    world = WashingMachine()
    said, asked = episode(world, [
        Stage(LD24_RULE),
        Stage(request_),
        Stage(answer, loaded(clothes, 1), budget=3),
        Stage(None, loaded(clothes, 2), budget=3),
        Stage(None, washed(clothes, detergent), budget=4),
        Stage(None, reset=True),  # CompletionAnswerStage
        Stage("Wash all clothes that can be washed with detergent_ARIEL", loaded(["baseball_cap", "boxer_briefs"], 1),
              budget=3),
    ], LAUNDRY_RULES)
    assert said[1] == question and said[2].startswith("Done")
    assert sorted(world.washes[0][0]) == sorted(clothes) and world.washes[0][1] == [detergent]
    assert world.calls[-2:] == ["pick(baseball_cap)", "drop_to_washing_machine()"]  # the rule's, not the answer's
    assert not asked


LD011_RULE = ("Hello, please remember that blue_jeans use detergent_ARIEL, cotton_socks, t_shirt, and linen_blouse "
              "use detergent_TIDE, boxer_briefs, briefs, gym_shorts, and chino_pants use detergent_GAIN.")


def test_laundry_questions_are_answered_from_the_rules_not_guessed() -> None:
    # Held-out laundry MainDefinition@11: "What detergents can wash chino_pants, gym_shorts, and
    # linen_blouse?" went to the model, which answered with all three detergents (MAGMA's answer:
    # "chino_pants and gym_shorts can be washed with detergent_GAIN, linen_blouse can be washed with
    # detergent_TIDE"). Both of MAGMA's laundry questions, and a later rule that regroups a cloth.
    world = WashingMachine()
    update = "Hello, please remember that gym_shorts use detergent_ARIEL."
    said, asked = episode(world, [
        Stage(LD011_RULE),
        Stage("What detergents can wash chino_pants, gym_shorts, and linen_blouse?"),
        Stage("Which clothes use 'detergent_TIDE'?"),
        Stage("What detergent can wash baseball_cap?"),
        Stage(update),
        Stage("What detergents can wash gym_shorts and chino_pants?"),
        Stage("Which clothes use 'detergent_ARIEL'?"),
    ], LAUNDRY_RULES)
    assert said[1:4] == [
        "chino_pants and gym_shorts can be washed with detergent_GAIN, linen_blouse can be washed with detergent_TIDE.",
        "Clothes using 'detergent_TIDE' are: cotton_socks, t_shirt, linen_blouse.",
        "No detergent is associated with baseball_cap."]
    assert said[5:] == ["gym_shorts can be washed with detergent_ARIEL, chino_pants can be washed with detergent_GAIN.",
                        "Clothes using 'detergent_ARIEL' are: blue_jeans, gym_shorts."]
    assert world.calls == [] and not asked


# -- pure readers, on the rules as the benchmark words them --

def coffee_box(tools: list[dict] = COFFEE_TOOLS) -> ToolBox:
    return ToolBox.from_input(tools, COFFEE_ATTRIBUTES)


def laundry_box(tools: list[dict] = LAUNDRY_TOOLS) -> ToolBox:
    return ToolBox.from_input(tools, LAUNDRY_ATTRIBUTES)


def names(steps: list[Step] | None) -> list[str] | None:
    return None if steps is None else [f"{s.tool.name}({s.value or ''})" for s in steps]


def coffee(pod: str, mug: str = "position_mug_in_machine", capsule: str = "insert_capsule",
           start: str = "start_coffee_cycle") -> list[str]:
    return [f"{mug}()", f"{capsule}({pod})", f"{start}()"]


def test_the_procedure_is_the_rule_naming_the_most_tools_in_the_order_it_names_them() -> None:
    for rules, goal in [([COFFEE_RULE], "To prepare a coffee you must"), (COFFEE_RULES_002, "To prepare a coffee,")]:
        found = procedure(rules, coffee_box())
        assert found is not None
        assert [t.name for t in found[0]] == ["position_mug_in_machine", "insert_capsule", "start_coffee_cycle"]
        assert found[1] == goal
    found = procedure(LAUNDRY_RULES, laundry_box())
    assert found is not None and [t.name for t in found[0]] == ["drop_to_washing_machine", "wash"]
    assert procedure([MC001_RULE, "There is no black coffee anymore."], coffee_box()) is None
    assert procedure(LAUNDRY_RULES[1:], laundry_box()) is None  # one tool named: not a procedure


def test_named_tools_skip_the_goal_clause_and_read_quoted_names() -> None:
    box = laundry_box()
    # "To wash clothes" is the goal, not the wash step; 'wash' is.
    assert [t.name for t in named_tools(LAUNDRY_RULES[0], box)] == ["drop_to_washing_machine", "wash"]
    assert [t.name for t in named_tools("Use 'wash' once the drop_to_washing_machine step is done.", box)] == [
        "wash", "drop_to_washing_machine"]
    assert named_tools("Who is in team DISCO?", coffee_box()) == []


def test_keywords_are_the_words_only_one_tool_name_has() -> None:
    keys = keywords(coffee_box())
    assert keys["position_mug_in_machine"] >= {"mug"} and "capsul" in keys["insert_capsule"]
    assert not keys["get_team_members"] & keys["get_person_team"]  # "team" is shared: it names neither
    assert "cancel_current_action" not in keys


def test_groups_close_on_each_known_value() -> None:
    coffee_names = vocabulary(COFFEE_ATTRIBUTES)
    assert groups([MC001_RULE], coffee_names) == [Group(("Florent", "Emma", "Abdelbasset", "Jade"), "black"),
                                                  Group(("Perez", "Lewis"), "white"),
                                                  Group(("Philippe", "Merlin"), "milky")]
    laundry_names = vocabulary(LAUNDRY_ATTRIBUTES)
    assert groups([LD000_RULE], laundry_names)[:3] == [Group(("gym_shorts",), "detergent_ARIEL"),
                                                       Group(("briefs",), "detergent_GAIN"),
                                                       Group(("blue_jeans",), "detergent_TIDE")]
    assert groups([LD002_RULE], laundry_names) == [
        Group(("chino_pants", "gym_shorts", "linen_blouse"), "detergent_ARIEL"),
        Group(("boxer_briefs", "cotton_socks"), "detergent_GAIN")]
    assert groups(LAUNDRY_RULES, laundry_names) == []


def test_a_coffee_plan_has_one_unit_per_coffee_asked_for() -> None:
    box = coffee_box()
    first = "Please make these coffees in this exact order: a milky coffee and a milky coffee."
    assert names(plan(first, COFFEE_RULES_002, box, COFFEE_ATTRIBUTES)) == coffee("milky") * 2
    more = ("When you have finished the coffees already requested, please also make a white coffee and a milky "
            "coffee.")
    assert names(plan(f"{first} {more}", COFFEE_RULES_002, box, COFFEE_ATTRIBUTES)) == [
        *coffee("milky"), *coffee("milky"), *coffee("white"), *coffee("milky")]
    assert names(plan("Oh, okay let's do a milky instead", [COFFEE_RULE], box, COFFEE_ATTRIBUTES)) == coffee("milky")


def test_a_coffee_for_a_person_takes_the_taste_a_rule_gives_them() -> None:
    box, rules = coffee_box(), [COFFEE_RULE, MC001_RULE]
    assert names(plan("Perez: Can you make me a coffee?", rules, box, COFFEE_ATTRIBUTES)) == coffee("white")
    assert names(plan("Hello, make me a coffee for Merlin", rules, box, COFFEE_ATTRIBUTES)) == coffee("milky")
    assert names(plan("Jade wants a coffee.", rules, box, COFFEE_ATTRIBUTES)) == coffee("black")
    assert plan("Who is in team DISCO?", rules, box, COFFEE_ATTRIBUTES) is None  # not a coffee: the model


def test_a_laundry_plan_loads_each_cloth_then_the_detergent_then_washes() -> None:
    box = laundry_box()
    assert names(plan("Wash all clothes that can be washed with detergent_TIDE", [*LAUNDRY_RULES, LD000_RULE], box,
                      LAUNDRY_ATTRIBUTES)) == [
        "pick(blue_jeans)", "drop_to_washing_machine()", "pick(linen_blouse)", "drop_to_washing_machine()",
        "pick(detergent_TIDE)", "drop_to_washing_machine()", "wash()"]
    assert names(plan("Please wash the following clothes: boxer_briefs, baseball_cap", [*LAUNDRY_RULES, LD001_RULE],
                      box, LAUNDRY_ATTRIBUTES))[-3:] == ["pick(detergent_ARIEL)", "drop_to_washing_machine()", "wash()"]
    request = ("Please wash baseball_cap and boxer_briefs with detergent_GAIN. I made a mistake: use detergent_ARIEL "
               "instead of detergent_GAIN for this wash.")
    assert names(plan(request, LAUNDRY_RULES, box, LAUNDRY_ATTRIBUTES)) == [
        "pick(baseball_cap)", "drop_to_washing_machine()", "pick(boxer_briefs)", "drop_to_washing_machine()",
        "pick(detergent_ARIEL)", "drop_to_washing_machine()", "wash()"]
    # The detergent named first still goes in last ("Detergent must always be put last").
    assert names(plan("With detergent_GAIN, please wash briefs and cotton_socks.", LAUNDRY_RULES, box,
                      LAUNDRY_ATTRIBUTES)) == [
        "pick(briefs)", "drop_to_washing_machine()", "pick(cotton_socks)", "drop_to_washing_machine()",
        "pick(detergent_GAIN)", "drop_to_washing_machine()", "wash()"]
    # Nothing named and no rule to read it from: what to load is the model's to decide.
    assert plan("Please do the laundry.", LAUNDRY_RULES, box, LAUNDRY_ATTRIBUTES) is None


def test_the_next_step_is_the_first_one_no_successful_call_matched() -> None:
    steps = plan("a milky coffee and a white coffee", [COFFEE_RULE], coffee_box(), COFFEE_ATTRIBUTES)
    assert steps is not None
    done = [{"name": "position_mug_in_machine", "arguments": {}}, {"name": "insert_capsule",
                                                                  "arguments": {"name": "milky"}}]
    step = next_step(steps, done)
    assert step is not None and (step.tool.name, step.value) == ("start_coffee_cycle", None)
    done += [{"name": "start_coffee_cycle", "arguments": {}}, {"name": "position_mug_in_machine", "arguments": {}}]
    step = next_step(steps, done)
    assert step is not None and (step.tool.name, step.value) == ("insert_capsule", "white")
    # A white capsule loaded before the milky one does not count for the milky coffee.
    step = next_step(steps, [{"name": "insert_capsule", "arguments": {"name": "white"}}])
    assert step is not None and step.tool.name == "position_mug_in_machine"
    assert next_step(steps, [*done, {"name": "insert_capsule", "arguments": {"name": "white"}},
                             {"name": "start_coffee_cycle", "arguments": {}}]) is None


def test_a_running_status_names_the_held_call() -> None:
    assert suspended("RUNNING pick(name=boxer_briefs)") == ("pick", "boxer_briefs")
    assert suspended("RUNNING position_mug_in_machine()") == ("position_mug_in_machine", None)
    assert suspended("FREE") is None and suspended("") is None


# -- MAGMA-GEN's other names: nothing is keyed on the benchmark's names --

def test_renamed_tools_and_parameters_give_the_same_plans() -> None:
    box = coffee_box(RENAMED_COFFEE_TOOLS)
    renamed = {"mug": "place_mug_under_spout", "capsule": "put_capsule_in_machine",
               "start": "press_coffee_start_button"}
    assert names(plan("Perez: Can you make me a coffee?", [COFFEE_RULE, MC001_RULE], box, COFFEE_ATTRIBUTES)) == \
        coffee("white", **renamed)
    steps = plan("Perez: Can you make me a coffee?", [COFFEE_RULE, MC001_RULE], box, COFFEE_ATTRIBUTES)
    assert steps is not None and steps[1].tool.params[0].name == "capsule_name"
    box = laundry_box(RENAMED_LAUNDRY_TOOLS)
    assert names(plan("Please wash the following clothes: boxer_briefs, baseball_cap", [*LAUNDRY_RULES, LD001_RULE],
                      box, LAUNDRY_ATTRIBUTES)) == [
        "grab(boxer_briefs)", "put_into_washing_machine()", "grab(baseball_cap)", "put_into_washing_machine()",
        "grab(detergent_ARIEL)", "put_into_washing_machine()", "wash()"]


def _coffee_tools(start: str, mug: str, capsule: str) -> list[dict]:
    return [CANCEL, {**COFFEE_TOOLS[1], "name": start}, {**COFFEE_TOOLS[2], "name": capsule},
            {**COFFEE_TOOLS[3], "name": mug}, *COFFEE_TOOLS[4:]]


@pytest.mark.parametrize(("start", "mug", "capsule", "rule"), [
    pytest.param("press_coffee_start_button", "place_coffee_mug", "put_capsule_in_machine", COFFEE_RULE, id="full"),
    pytest.param("trigger_coffee_machine", "place_mug_under_spout", "insert_capsule", COFFEE_RULES_002[0],
                 id="full-002"),
    pytest.param("launch_brewing_cycle", "position_mug_in_machine", "insert_capsule", COFFEE_RULE, id="no-press"),
    pytest.param("start_coffee_cycle", "put_cup_in_coffee_maker", "insert_capsule", COFFEE_RULE, id="no-mug"),
    pytest.param("trigger_coffee_machine", "place_coffee_mug", "put_capsule_in_machine", COFFEE_RULE,
                 id="no-trigger"),
])
def test_a_coffee_plan_under_magma_gen_names_never_leaves_a_step_out(start: str, mug: str, capsule: str,
                                                                      rule: str) -> None:
    # Either the whole procedure, in any order MAGMA accepts (the press last), or none: the model plans.
    steps = plan("Oh, okay let's do a milky instead", [rule], coffee_box(_coffee_tools(start, mug, capsule)),
                 COFFEE_ATTRIBUTES)
    if steps is not None:
        assert sorted(names(steps) or []) == sorted(coffee("milky", mug, capsule, start)), names(steps)
        assert steps[-1].tool.name == start


def test_a_laundry_procedure_survives_the_wash_tool_being_renamed() -> None:
    tools = RENAMED_WASH_TOOLS
    steps = plan("Please wash the following clothes: boxer_briefs, baseball_cap", [*LAUNDRY_RULES, LD001_RULE],
                 laundry_box(tools), LAUNDRY_ATTRIBUTES)
    assert names(steps) == ["pick(boxer_briefs)", "drop_to_washing_machine()", "pick(baseball_cap)",
                            "drop_to_washing_machine()", "pick(detergent_ARIEL)", "drop_to_washing_machine()",
                            "start_cycle()"]


def test_a_quoted_name_no_tool_has_is_the_one_tool_whose_words_have_it_or_none() -> None:
    rule = LAUNDRY_RULES[0]  # "... and then use 'wash'."
    assert [t.name for t in named_tools(rule, laundry_box(RENAMED_WASH_TOOLS))] == [
        "drop_to_washing_machine", "start_cycle"]
    # Two tools that could be it: neither is guessed, and one named tool is no procedure.
    two = [*LAUNDRY_TOOLS[:3], tool("start_cycle", "Start the washing machine."),
           tool("rinse", "Rinse what is in the washing machine.")]
    assert [t.name for t in named_tools(rule, laundry_box(two))] == ["drop_to_washing_machine"]
    assert procedure(LAUNDRY_RULES, laundry_box(two)) is None
    # A quoted word that only a verb or a small word would match names nothing.
    assert named_tools("Always say 'the' before 'grab'.", laundry_box(RENAMED_WASH_TOOLS)) == []


# -- the compiler: stage instructions in the episode's public names --

def test_compiled_stage_presentations_use_the_public_names() -> None:
    from pydantic import BaseModel

    from lava.evaluation.local_benchmark import _public_presentation

    class Spec(BaseModel):  # the shape of magma_bench's serialized task stage
        stage_type: str
        arguments: dict[str, Any]
        presentation: dict[str, Any]

    public = {"short": "gym_shorts", "boxer": "boxer_briefs", "detergent_PERSIL": "detergent_ARIEL"}

    def translate(text: str) -> str:
        return " ".join(public.get(w, w) for w in text.split(" "))

    stage = Spec(stage_type="laundry_stages:LoadClotheStage",
                 arguments={"clothes_to_load": ["boxer", "short"], "n": 1},
                 presentation={"stage_input": {"instruction": {"type": "UserInstruction", "arguments": {
                     "content": "Please wash boxer with detergent_PERSIL", "timestamp": 0}}},
                     "verification_prompt": "boxer and short are clean", "stage_goal_description": None})
    out = _public_presentation(stage, translate)
    assert isinstance(out, Spec)
    assert out.presentation["stage_input"]["instruction"]["arguments"]["content"] == \
        "Please wash boxer_briefs with detergent_ARIEL"
    assert out.presentation["verification_prompt"] == "boxer_briefs and gym_shorts are clean"
    assert out.arguments == {"clothes_to_load": ["boxer", "short"], "n": 1}  # goals stay canonical
    assert stage.presentation["stage_input"]["instruction"]["arguments"]["content"].startswith("Please wash boxer ")
    empty = Spec(stage_type="EmptyInstructionStage", arguments={},
                 presentation={"stage_input": {"instruction": {"type": "EmptyInstruction", "arguments": {}}}})
    assert _public_presentation(empty, translate) == empty


def test_laundry_separate_washes_are_done_in_the_answer_s_order() -> None:
    # MAGMA's AskLaundryRequest, its other answer: one wash per detergent, in the order it gives
    # (`_build_all_groups_resolution_instruction`); each wash stage puts the scene back.
    def washes(*expected: tuple[list[str], str]) -> Callable[[WashingMachine], bool]:
        def goal(w: WashingMachine) -> bool:
            done = [(sorted(c), d) for c, d in w.washes]
            assert done == [(sorted(c), [d]) for c, d in expected][:len(done)], (w.washes, w.calls)
            return len(done) == len(expected)
        return goal

    world = WashingMachine()
    said, asked = episode(world, [
        Stage(LD24_RULE),
        Stage("Please wash gym_shorts, briefs, and baseball_cap."),
        Stage("Ok, do 3 washes in this exact order: first wash briefs with detergent_TIDE, then wash baseball_cap "
              "with detergent_ARIEL, then wash gym_shorts with detergent_GAIN.", loaded(["briefs"], 1), budget=3),
        Stage(None, washes((["briefs"], "detergent_TIDE")), budget=4, reset=True),
        Stage(None, loaded(["baseball_cap"], 1), budget=3),
        Stage(None, washes((["briefs"], "detergent_TIDE"), (["baseball_cap"], "detergent_ARIEL")), budget=4,
              reset=True),
        Stage(None, loaded(["gym_shorts"], 1), budget=3),
        Stage(None, washes((["briefs"], "detergent_TIDE"), (["baseball_cap"], "detergent_ARIEL"),
                           (["gym_shorts"], "detergent_GAIN")), budget=4),
        Stage(None, reset=True),  # CompletionAnswerStage
    ], LAUNDRY_RULES)
    assert said[1] == "These clothes require different detergents. What should I do?"
    assert said[-1].startswith("Done")
    assert not asked
