"""The MAGMA-aware policy: small constrained steps a small model can get right.

Per turn:
1. a user message is classified (act / answer / acknowledge): from its wording when that is
   clear, else by the model as a three-way constrained choice;
2. an acknowledgement is answered in plain words, and the rule kept in memory for later turns;
3. an action request starts a task: lava keeps the request, the calls that succeeded since, the
   last result and the latest observations in memory, and shows the model that state instead of
   the whole history (the prompt stays bounded however long the episode);
4. the commander then chooses the next calls, with decoding constrained to calls when work is
   known to remain (names the request mentions and no call has used yet), or to calls-or-text
   otherwise; a text answer after completed work becomes a plain completion message.

Memory: `memory_list` untouched; `history` in the reference schema, kept to a window of recent
turns; everything else under `memory["lava"]`.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ..backends.base import Backend, GenerationRequest, Message
from ..errors import CandidateError
from ..memory import LAVA_KEY, append_turn
from ..parsing import strip_reasoning
from ..prompts import render
from ..protocol import AgentDecision, ToolCall
from ..settings import Settings
from ..situation import Situation
from ..tools import CANCEL_TOOL, ToolBox, ToolSpec, robot_statuses
from . import sequences, skills
from .associations import association_answer
from .base import CandidateResult, Policy, model_step
from .commander import Commander, Proposal
from .demos import _PUT, finisher, pick_and_place_demo, roles
from .demos import _TAKE as _TAKE_VERB
from .goals import (
    NUMBER,
    after_refused_tray,
    answered_areas,
    area_news,
    asked_categories,
    class_examples,
    cleared,
    cycle_answer,
    cycle_goal,
    default_news,
    listed,
    next_step,
    place_named,
    read_cycle,
    read_goal,
    recipe,
    recipe_clearing,
    removal_news,
    routed,
    routes,
    sibling_home,
    standing_additions,
    stem,
    tray_clash,
    unavailable,
    words,
)
from .halls import hall_answer
from .intent import INTENT_SCHEMA, heuristic_intent
from .messages import task_state
from .names import (
    attribute_values,
    containers,
    contents,
    description_words,
    identifiers,
    known_names,
    location_values,
    object_values,
    parameter_enums,
)
from .procedures import after_refused_people, refused_people, taste_answer, team_answer
from .returns import count_answer, delivery_answer
from .scene import render_scene
from .task_state import (
    Intent,
    TaskState,
    argument_values,
    call_text,
    cannot_grasp_said,
    mentioned,
    numbered_family,
    numbers_as_names,
    one_dimensional,
    remaining,
    vocabulary,
)
from .zones import scene_answer

HISTORY_WINDOW = 12
# A message that changes the running request rather than starting a new one.
_AMEND = re.compile(r"\b(changed? my mind|change of plan|instead of|after the current|(?:once|when) you have finished|"
                    r"as well|also|this (?:tray|order|package|box))\b", re.I)
# An urgent request that pauses the running one: "Stop the current sorting cycle and sort ref_obj_2 into
# area1. This task has priority. Finish the current after."
# "Now wait for further instruction": nothing to do and nothing to remember.
_WAIT = re.compile(r"\bwait for (?:further|more|new|next|my|the next) instructions?\b", re.IGNORECASE)
# "Do a milky coffee as a priority now, then resume the previous order": it pauses the running one
# too, but stops nothing: the call held meanwhile (placing a mug) serves the urgent request as well.
_INTERRUPT = re.compile(r"\b(?:stop|pause|interrupt|suspend)\b[^.]*\b(?:current|ongoing|what you are doing)\b"
                        r"[^.]*\.?.*\b(?:finish|resume|continue|complete|go back to)\b|"
                        r"\b(?:as an? (?:priority|urgent)|urgently|first|immediately)\b[^.]*?\bthen\s+"
                        r"(?:resume|continue|finish|complete|go back to)\b[^.]*\b"
                        r"(?:previous|current|earlier|ongoing|other|rest|remaining)\b|"
                        # "Okay, press sw4 now before resuming your current sequence."
                        r"\bbefore\s+(?:resum|continu|finish|complet|going back to|returning to)\w*\b[^.]*\b"
                        r"(?:previous|current|earlier|ongoing|other|rest|remaining)\b",
                        re.I | re.S)
_STOP = re.compile(r"\b(?:stop|pause|interrupt|suspend)\b", re.I)
_SENDING = re.compile(r"\b(?:cycles?|sort\w*|send|move|store|put|place|bring|deliver)\b", re.I)
_REMOVED = re.compile(r"\binstead\s+of\s+(?:the\s+)?([\w-]+)|\bwithout\s+(?:the\s+)?([\w-]+)", re.I)
# "Set 1 orange, 1 bowl on the table": the items first, MAGMA's SetTable preset (every object to its place).
_MORE = re.compile(r"\b(?:add|adding|another|more|extra|additional)\b", re.I)
_SET_ITEMS = re.compile(rf"^\s*(?:please\s+)?set\s+{NUMBER}\s", re.I)
_CONTRARY = re.compile(r"\b(opposite|other|swap|cross|instead|except|leave|keep|not|never|mismatch)\b", re.I)
DONE_SHOWN = 8  # the latest steps in full; older ones as counts per tool, so prompts stay bounded
RESAMPLE_ROUNDS = 2
# Failed feedback turns in a row after which lava stops and says what failed. The planners hand over to
# the model after 3; in every MAGMA-BENCH episode lava has run, none that reached 5 recovered.
MAX_FAILURES_IN_ROW = 5
REDRAWS = 3  # draws per candidate that repeated a refused call
_TAKE_LIKE = re.compile(r"\b(take|pick|grab|grasp|lift|fetch)", re.I)
_OBJECT_PARAM = re.compile(r"object|item|name|product|thing|obj\b", re.I)
_KIND_PARAM = re.compile(r"type|kind|colou?r|class|category", re.I)
_LOCATION = re.compile(r"locat|place|source|target|destination|where|tray|container|zone|area|shelf|bin\b", re.I)
# Verbs of tool names: what remains names the object a step is about.
_VERBS = frozenset(("get", "set", "put", "place", "take", "press", "push", "insert", "load", "unload", "make", "do",
                    "run", "stop", "move", "send", "detect", "scan", "list", "check", "grab", "pick", "drop",
                    "release", "open", "close", "turn", "add", "remove", "use", "go", "launch", "call"))
_IMPOSSIBLE = ("cannot", "can't", "can not", "unable", "impossible", "not possible", "no such", "not available",
               "does not exist", "doesn't exist", "not found", "sorry", "no more", "anymore")


_HELD = re.compile(r"\bheld\b|\bholding\b|\bin (?:the|your) gripper\b", re.I)
_CONDITION = re.compile(r"dirty|clean|state|condition|quality|damaged", re.I)
_NEW = re.compile(r"\bnew\b", re.I)


def check_tool(toolbox: ToolBox) -> ToolSpec | None:
    """A parameterless tool that reports on the held object ("Inspect the held object to determine if
    it is dirty or clean")."""
    return next((t for t in toolbox.tools if t.name != CANCEL_TOOL and not t.params and _HELD.search(t.description)
                 and _CONDITION.search(t.description)), None)


@functools.lru_cache(maxsize=512)
def _held_tools(toolbox: ToolBox) -> tuple[str, ...]:
    """Parameterless tools that act on or with the held object (not_now)."""
    return tuple(t.name for t in toolbox.tools if not t.params and _HELD.search(t.description))


@functools.lru_cache(maxsize=512)
def _unnamed_candidates(toolbox: ToolBox) -> tuple[tuple[str, frozenset[str]], ...]:
    """not_now's pick-and-place candidates: every tool with parameters but the take and the put,
    with the object words of its name and description (those a request must say to need it)."""
    _, take, put = roles(toolbox)
    return tuple((tool.name, frozenset((words(tool.name.replace("_", " "))
                                        | words(" ".join(description_words(tool.description)))) - _VERBS))
                 for tool in toolbox.tools if tool.params and tool not in (take, put))


@functools.lru_cache(maxsize=512)
def _named_things(toolbox: ToolBox) -> tuple[str, ...]:
    """What the tools with parameters act on, by their names after the leading verb (toggle_button:
    "button"): the words a user numbers things by ("button 2")."""
    return tuple(dict.fromkeys(word for tool in toolbox.tools if tool.params and tool.name != CANCEL_TOOL
                               for word in tool.name.lower().split("_")[1:] if word.isalpha()))


# Tools that keep the robot's own lists (known areas, locations) rather than move things.
_BOOKKEEPING = frozenset(("add", "remove", "delete", "create", "register", "unregister", "declare", "rename"))


@functools.lru_cache(maxsize=512)
def _own_words(toolbox: ToolBox) -> tuple[tuple[ToolSpec, frozenset[str]], ...]:
    """One-parameter bookkeeping tools (add_new_location, remove_location), each with the words of
    its name no other tool's name has (remove_location: {remove}; add_new_location: {add, new})."""
    _, take, put = roles(toolbox)
    tools = [t for t in toolbox.tools if t.name != CANCEL_TOOL and len(t.params) == 1 and t not in (take, put)
             and t.name.lower().split("_")[0] in _BOOKKEEPING]
    named = {t.name: frozenset(t.name.lower().split("_")) for t in toolbox.tools}
    return tuple((t, frozenset(w for w in named[t.name] if w.isalpha()
                               and not any(w in other for n, other in named.items() if n != t.name)))
                 for t in tools)


@functools.lru_cache(maxsize=512)
def _name_objects(toolbox: ToolBox) -> tuple[tuple[str, frozenset[str]], ...]:
    """steps_named_not_done's table: each tool but cancel, with the object words of its name."""
    return tuple((tool.name, frozenset(words(tool.name.replace("_", " ")) - _VERBS))
                 for tool in toolbox.tools if tool.name != CANCEL_TOOL)


@functools.lru_cache(maxsize=512)
def _location_params(toolbox: ToolBox) -> tuple[tuple[str, str, tuple[tuple[str, bool], ...]], ...]:
    """enums' location parameters: (tool, parameter, the names its description offers, each with
    whether it is kept whatever the places are: an identifier with "_" or "table")."""
    table = []
    for tool in toolbox.tools:
        for param in tool.params:
            if (param.json_type == "string" and _LOCATION.search(f"{param.name} {param.description}")
                    and not _NEW.search(f"{tool.description} {param.description}")):
                own = tuple((w, "_" in w or w.lower() == "table")
                            for w in [*identifiers(param.description), *description_words(param.description)])
                table.append((tool.name, param.name, own))
    return tuple(table)


@functools.lru_cache(maxsize=512)
def _attribute_params(toolbox: ToolBox, keys: tuple[str, ...]) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """narrow_by_attributes' table: per string parameter, the attribute keys (of `keys`, in order)
    its descriptions name."""
    table = []
    for tool in toolbox.tools:
        for param in tool.params:
            if param.json_type != "string":
                continue
            text = f"{param.description} {tool.description}".lower()
            table.append((tool.name, param.name, tuple(key for key in keys if _names_attribute(key, text))))
    return tuple(table)


def _names_attribute(key: str, text: str) -> bool:
    return re.search(rf"(?:listed|one of|among)\s+(?:the\s+)?(?:known\s+)?{re.escape(key.lower())}\b"
                     if "_" not in key else rf"\b{re.escape(key.lower())}\b", text) is not None


@functools.lru_cache(maxsize=512)
def _object_params(toolbox: ToolBox) -> tuple[tuple[str, str], ...]:
    """drop_kind_names' table: parameters that name an object instance, not a kind."""
    return tuple((tool.name, param.name) for tool in toolbox.tools for param in tool.params
                 if _OBJECT_PARAM.search(param.name) and not _KIND_PARAM.search(param.name))


def _plain(text: str) -> str:
    return " ".join(text.split()).translate(str.maketrans({"{": "(", "}": ")", "<": "(", ">": ")"}))


def refusal(state: TaskState, rule: str, whom: Sequence[str] = ()) -> AgentDecision:
    """The answer to a request for something `rule` says is gone: acting anyway fails the stage,
    saying so is the answer, and it ends the request (a question after it is not one in the middle
    of it). `whom`: the people it was for, named ("I cannot do that for Arthur")."""
    state.finished = True
    for_whom = f" for {listed(whom)}" if whom else ""
    return AgentDecision(say=f"Sorry, I cannot do that{for_whom}: {_plain(rule)}")


def _governed(request: str, own: Iterable[str], values: Sequence[str]) -> list[str]:
    """The values that follow one of a tool's own words, in order: "remove area5 and area1 from ..."
    gives both, "remove area2 ... and consider area4 as the default" only area2."""
    by_word = {v.lower(): v for v in values}
    out: list[str] = []
    for found in re.finditer(rf"\b(?:{'|'.join(sorted(own))})\b", request, re.IGNORECASE):
        for token in re.finditer(r"[\w-]+", request[found.end():]):
            word = token.group(0).lower()
            if word in ("the", "and", "also", "both", "then"):
                continue
            if word not in by_word:
                break
            out.append(by_word[word])
    return list(dict.fromkeys(out))


def stalled(state: TaskState) -> AgentDecision:
    """The answer once calls keep failing: what failed last, and a question, where more calls would
    only spend the user's budget on the same refusals (it ends the request)."""
    state.finished = True
    last = state.failed[-1] if state.failed else None
    detail = f" The last one, {call_text(last)}, failed with: {_plain(last['message'])}" if last else ""
    return AgentDecision(say=f"I stopped: my last {state.failures_in_row} attempts failed.{detail} "
                             "How should I go on?")


def _call(tool: ToolSpec, robot: str, value: str | None = None) -> AgentDecision:
    """One call of `tool` on `robot`, with `value` for its one parameter when given."""
    arguments = {tool.params[0].name: value} if value is not None else {}
    return AgentDecision(tool_calls=[ToolCall(name=tool.name, arguments=arguments, target_robot_name=robot)])


def acknowledgement(text: str) -> str:
    """A plain acknowledgement that restates what will be remembered (judges check understanding)."""
    clean = _plain(text)
    if len(clean) > 300:
        clean = clean[:297] + "..."
    return f"Understood, I will keep this in mind: {clean}"


_OFF_STAGE = re.compile(r"\bis not allowed in this stage\b")


def off_stage(state: TaskState) -> bool:
    """Whether the last feedback refused a call because the stage takes no action now."""
    if not state.last_failed or not state.failed:
        return False
    last = state.failed[-1]
    return (_OFF_STAGE.search(last.get("message", "")) is not None
            and any(c["name"] == last["name"] and c.get("robot") == last.get("robot") for c in state.pending_failed))


def completion_message(state: TaskState) -> str:
    if not state.done:
        return "Done."
    steps = [line.split(".", 1)[1] if "." in line else line for line in state.done[-8:]]
    return "Done. I completed: " + "; ".join(steps) + "."


@functools.lru_cache(maxsize=256)
def _system_prompt(toolbox: ToolBox, rules: tuple[str, ...]) -> str:
    """The stable part of the prompt, rendered once per tool set and rules: the inputs of a
    MAGMA-GEN batch and the turns of an episode share it (and the model's prefix cache too)."""
    return render("magma_system.j2", robots=toolbox.robots, tools=toolbox.tools, rules=list(rules),
                  demo=pick_and_place_demo(toolbox))


# What the classes rules route by mean, for the model that names an object's class: with these, the local
# model named 70 of 72 of MAGMA's renamed kitchen types right (a stein was food), against 65 with the bare
# names (a mango was dishware in held-out table_cleaning SimpleDefinition@112, and into the washing machine).
CLASS_GLOSSES = {"food": "something people eat (a fruit, a vegetable)",
                 "dishware": "something people eat or drink from (a vessel, a container)"}


def class_prompt(classes: Sequence[str]) -> str:
    if all(cls in CLASS_GLOSSES for cls in classes):
        return "Name the class of each object. " + " ".join(f"{cls}: {CLASS_GLOSSES[cls]}." for cls in classes)
    return f"Name the class of each object: {' or '.join(classes)}."


def _which_class(kind: str) -> str:
    noun = kind.replace("_", " ")
    return f"Which class is {'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}?"


class MagmaPolicy(Policy):
    name = "magma"

    def __init__(self, backend: Backend, settings: Settings) -> None:
        super().__init__(backend, settings)
        self.commander = Commander(backend, settings)

    # -- intent ------------------------------------------------------------------------------

    async def classify(self, situation: Situation) -> tuple[Intent, list[dict[str, Any]]]:
        text = situation.instruction.content
        intent = heuristic_intent(text, situation.toolbox.tool_names)
        if intent is not None:
            return intent, []
        request = GenerationRequest(
            messages=(Message("user", render("classify.j2", message=text, tools=[
                t.name for t in situation.toolbox.tools if t.name != CANCEL_TOOL])),),
            n=1, greedy=True, max_tokens=12, seed=self.settings.seed, json_schema=INTENT_SCHEMA,
            situation=situation, component="classifier",
        )
        (completion,) = await self.backend.generate(request)
        try:
            label = json.loads(strip_reasoning(completion.text)).get("intent")
        except (ValueError, AttributeError):
            label = None
        intent = label if label in ("act", "answer", "acknowledge") else "act"
        step = model_step(0, request, completion, input_elements={"message": text})
        step["output_formatted"] = {"intent": intent}
        return intent, [step]

    # -- one-dimensional requests: a plan of values, executed one per turn --------------------

    @staticmethod
    def requested(situation: Situation, state: TaskState, names: Iterable[str]) -> list[str]:
        """The task's names the request asks for, in order, numbered references ("button 2") included."""
        return mentioned(numbers_as_names(state.request, names, _named_things(situation.toolbox)), names)

    def named_call(self, situation: Situation, state: TaskState) -> AgentDecision | None:
        """A request that names one tool by its own words and one value for it ("we won't use area2
        anymore, you can remove it": remove_location(area2); "a new area, called area4":
        add_new_location(area4)) is that call, once; with a list of values after the tool's word
        ("remove area5 and area1"), one call per value, in order."""
        robots = situation.toolbox.robots or ()
        if len(robots) != 1 or not state.request:
            return None
        said = set(re.findall(r"[a-z]+", state.request.lower()))
        found = [(tool, own) for tool, own in _own_words(situation.toolbox) if own and own & said]
        if len(found) != 1:
            return None
        tools = [found[0][0]]
        param = tools[0].params[0]
        places = _LOCATION.search(f"{param.name} {param.description}") is not None
        pool = location_values(situation.attributes) if places else object_values(situation.attributes)
        # What this request's calls already removed is no longer in the attributes, and is still named.
        pool = [*pool, *(v for c in state.done_calls if c["name"] == tools[0].name
                         for v in c.get("arguments", {}).values() if isinstance(v, str) and v not in pool)]
        values = list(dict.fromkeys(mentioned(state.request, pool)))
        # A new one of the family: area4 beside area1..3, or beside area2 alone once the others were removed.
        if (family := numbered_family(pool, minimum=1)) is not None:
            values += [v for v in re.findall(rf"\b{re.escape(family[0])}[_-]?\d+\b", state.request, re.I)
                       if v not in values]
        values = values or re.findall(r"\b(?:called|named)\s+([A-Za-z][\w-]*)", state.request)
        if len(values) > 1:
            # "remove area2 from your known area and consider area4 as the default": the values the
            # tool's own word governs ("remove area5 and area1").
            values = _governed(state.request, found[0][1], values)
        if not values:
            return None
        planned = [{"robot": robots[0], "name": tools[0].name, "arguments": {param.name: v}} for v in values]
        done = state.done_calls
        if done != planned[:len(done)] or state.last_failed:
            return None  # something else happened: the model decides
        if len(done) == len(planned):
            return AgentDecision(say=completion_message(state))
        if not done and situation.instruction.type != "user":
            return None
        return _call(tools[0], robots[0], values[len(done)])

    @staticmethod
    def known_answer(situation: Situation, state: TaskState) -> str | None:
        """What a request said of the delivery a question names; the answer the rules give, when
        objects go to areas by rule and nothing can be looked at."""
        asked_of = [str(state.suspended.get("request") or "")] if state.suspended else []
        asked_of += [digest.split(" -> ", 1)[0] for digest in reversed(state.earlier)]
        if (said := delivery_answer(state.request, asked_of)) is not None:
            return said
        rules = [*situation.memory.memory_list, *state.rules]
        if (said := association_answer(state.request, rules, situation.attributes)) is not None:
            return said
        if (said := taste_answer(state.request, rules, situation.attributes)) is not None:
            return said
        observe, take, put = roles(situation.toolbox)
        if observe is not None or take is None or put is None or state.scene is not None:
            return None
        return cycle_answer(state.request, rules, object_values(situation.attributes),
                            location_values(situation.attributes))

    def acting_tool(self, situation: Situation) -> ToolSpec:
        return next(t for t in situation.toolbox.tools if t.name != CANCEL_TOOL and t.params)

    async def plan(self, situation: Situation, state: TaskState, wanted: list[str]
                   ) -> tuple[list[str], list[dict[str, Any]]]:
        """The values to use, in order. Without rules the request's own order is the plan; rules in
        the forms sequences.py reads order it without the model; with other rules the model orders
        them (constrained to known values, at least the requested ones)."""
        rules = [*situation.memory.memory_list, *state.rules]
        if not rules or (state.suspended is not None and not state.answering_midway):
            # "Okay, press sw1 now before resuming your current sequence": a step inside the sequence
            # the rules already ordered, not a new one (MAGMA's interruption stage presses sw1 alone).
            return wanted, []
        names = vocabulary(situation.attributes)
        if (order := sequences.ordered(state.request, wanted, rules, list(names))) is not None:
            return order, []
        tool = self.acting_tool(situation)
        allowed = sorted(set(wanted) | {v for rule in rules for v in mentioned(rule, names)})
        examples = [*[*dict.fromkeys([*allowed, *names])][:3], "x", "y", "z"]
        schema = {"type": "array", "items": {"enum": allowed}, "minItems": len(wanted),
                  "maxItems": len(wanted) + len(allowed)}
        request = GenerationRequest(
            messages=(Message("user", render("plan.j2", rules=rules, tool=tool, param=tool.params[0].name,
                                             values=allowed, request=state.request, a=examples[0], b=examples[1],
                                             c=examples[2])),),
            n=1, greedy=True, max_tokens=16 + 8 * schema["maxItems"], seed=self.settings.seed,
            json_schema=schema, situation=situation, component="planner",
        )
        (completion,) = await self.backend.generate(request)
        try:
            proposed = json.loads(strip_reasoning(completion.text))
        except ValueError:
            proposed = None
        valid = isinstance(proposed, list) and all(isinstance(v, str) for v in proposed) and not remaining(
            wanted, [{"arguments": {"v": v}} for v in proposed])
        plan = list(proposed) if valid else wanted  # a plan that drops a requested value is not taken
        step = model_step(0, request, completion, input_elements={"request": state.request, "rules": rules})
        step["output_formatted"] = {"plan": plan, "accepted": valid}
        return plan, [step]

    def next_planned(self, situation: Situation, state: TaskState) -> AgentDecision | None:
        """The plan's next call, or None when the plan is done."""
        assert state.plan is not None
        tool = self.acting_tool(situation)
        index = sum(1 for call in state.done_calls if call["name"] == tool.name)  # not a cancelling, say
        if index >= len(state.plan):
            return None
        robots = situation.toolbox.robots or ("robot",)
        free = [r for r in robots if r not in situation.toolbox.busy] or list(robots)
        call = ToolCall(name=tool.name, arguments={tool.params[0].name: state.plan[index]}, target_robot_name=free[0])
        return AgentDecision(tool_calls=[call])

    # -- pick-and-place: observe, then take and put toward a goal read from the request ---------

    def pick_and_place(self, situation: Situation, state: TaskState) -> AgentDecision | None:
        """The next call when the request is a pick-and-place goal over a known scene (see
        goals.py), an observation when the scene is unknown or a take/put just failed, and None
        when the model should decide."""
        observe, take, put = roles(situation.toolbox)
        robots = situation.toolbox.robots or ("robot",)
        if len(robots) > 1 or state.failures_in_row >= 3:
            return None
        robot = robots[0]
        if (look := self.look(situation, state)) is not None:
            return look
        if take is None or put is None:
            return None
        rules = [*situation.memory.memory_list, *state.rules]
        puts_done = sum(1 for c in state.done_calls if c["name"] == put.name)
        moved = set(argument_values([c for c in state.done_calls if c["name"] == take.name]))
        if state.scene is None:
            if observe is not None:
                return None
            # Nothing to look with: objects and areas are the task's own lists, destinations the rules'.
            objects, areas = object_values(situation.attributes), location_values(situation.attributes)
            cycle = read_cycle(state.request, rules, objects, areas)
            if (cycle is not None and not state.done_calls and situation.instruction.type == "user"
                    and _SENDING.search(state.request)):
                if cycle.paused:
                    return AgentDecision(say=f"Sorry, I cannot do that now: {listed(cycle.paused)} must not be "
                                             "handled yet. Tell me when I may.")
                if cycle.blocked:
                    closed = list(dict.fromkeys(cycle.blocked.values()))
                    return AgentDecision(say=f"Sorry, I cannot do that: {listed(closed)} must not be used anymore, "
                                             f"and {listed(list(cycle.blocked))} would go there.")
                if cycle.missing:
                    state.asked_about = list(cycle.missing)
                    # "... for all objects from categories Product A and Rare": the question names the
                    # categories too.
                    named = asked_categories(state.request, rules, objects, areas, cycle.missing)
                    which = listed([f"category {name} ({listed(things)})" for name, things in named]) if named \
                        else listed(cycle.missing)
                    return AgentDecision(say=f"Which area should {which} go to? I have no target "
                                             f"area for {'it' if len(cycle.missing) == 1 else 'them'}.")
            goal = cycle_goal(cycle)
            if goal is None:
                return None
            step = next_step(goal, {}, state.held, puts_done, moved)
            if step is None or (step.action != "done" and step.value is None):
                return None
            if step.action == "done":
                return AgentDecision(say=completion_message(state))
            return _call(take if step.action == "take" else put, robot, step.value)
        looked_last = self.looked_last(situation, state)
        goal = read_goal(state.request, rules, state.scene, scene=state.scene, held=state.held)
        if goal is None:  # the recipe's own steps wait until the place it says to clear is clear
            goal = recipe_clearing(state.request, rules, state.scene, state.held)
        check = check_tool(situation.toolbox)
        if goal is None:
            if (steps := self.recipe_steps(situation, state, rules)) is not None:
                return steps
            return self.add_step(situation, state, rules, check, robot, moved)
        # MAGMA gives clearing a stage per object (ClearTableStage 5 calls, PlaceObjectsStage 4), so
        # take, inspect and put fit: a dirty object put away as clean fails its stage.
        if (check is not None and state.held and state.condition is None
                and check.name in " ".join(rules)
                and not any(c["name"] == check.name for c in state.failed)):
            return _call(check, robot)  # a rule asks to inspect before choosing where it goes
        step = next_step(goal, state.scene, state.held, puts_done, moved, state.ungraspable)
        if step is not None and step.action == "take" and step.value in state.ungraspable:
            # Only what could not be grasped is left: trying it again would fail the same way.
            return AgentDecision(say=cannot_grasp_said([step.value]))
        if step is not None and step.action == "put" and state.held and goal.clear is not None:
            step = type(step)("put", routed(state.held, state.condition, state.scene, rules, exclude=(goal.clear,),
                                            cls=state.classes.get(stem(state.held)))
                              or step.value)
        if step is None:
            if observe is not None and not looked_last:
                return _call(observe, robot)
            return None
        if step.action == "finish":
            finish = finisher(situation.toolbox)
            last_put = max((i for i, c in enumerate(state.done_calls) if c["name"] == put.name), default=-1)
            if finish is None or any(c["name"] == finish.name for c in state.done_calls[last_put + 1:]):
                return AgentDecision(say=completion_message(state))
            return _call(finish, robot)
        if step.action == "done":
            return AgentDecision(say=completion_message(state))
        if step.value is None:
            return None  # where it goes is the model's choice (see enums)
        return _call(take if step.action == "take" else put, robot, step.value)

    def recipe_steps(self, situation: Situation, state: TaskState, rules: list[str]) -> AgentDecision | None:
        """The next step of a rule that says how to do the request, in order; None without such a rule."""
        clauses = recipe(state.request, rules)
        if not clauses or state.scene is None:
            return None
        _, take, put = roles(situation.toolbox)
        places = [*state.scene, *location_values(situation.attributes)]
        objects = [t for ts in state.scene.values() for t in ts] + ([state.held] if state.held else [])
        steps: list[tuple[ToolSpec, str | None]] = []
        for clause in clauses:
            said = words(clause)
            tool = next((t for t in situation.toolbox.tools if t.name in said and t not in (take, put)), None)
            if tool is not None:
                steps.append((tool, None))
            elif take is not None and _TAKE_VERB.search(clause):
                thing = next((o for o in objects if words(stem(o)) <= said), None)
                if thing is None:
                    return None
                steps.append((take, thing))
            elif put is not None and _PUT.search(clause):
                place = next((p for p in places if words(p) <= said), None)
                if place is None:
                    return None
                steps.append((put, place))
        done = 0
        for call in state.done_calls:  # the clearing before the steps takes and puts other things
            if done < len(steps) and call["name"] == steps[done][0].name and (
                    steps[done][1] is None or steps[done][1] in (call.get("arguments") or {}).values()):
                done += 1
        if done >= len(steps):
            return AgentDecision(say=completion_message(state))
        tool, value = steps[done]
        return _call(tool, (situation.toolbox.robots or ("robot",))[0], value)

    def add_step(self, situation: Situation, state: TaskState, rules: list[str], check: ToolSpec | None,
                 robot: str, moved: set[str]) -> AgentDecision | None:
        """"Set 1 apple, 1 plate on the table": bring what is missing there, one object at a time.
        Said that way (the items first, MAGMA's SetTable preset), it is the whole arrangement: every
        object has its place, so what lies on the table and is not wanted there (or one too many of
        its kind) is taken away first, inspected when a rule asks, and put where it belongs. A wanted
        one already there stays uninspected: taking it to look costs three calls of a stage that
        allows four, and it is most often clean."""
        _, take, put = roles(situation.toolbox)
        wanted = standing_additions(state.request, rules, [*state.scene, *location_values(situation.attributes)])
        if wanted is None or take is None or put is None:
            return None
        place, items = wanted
        exact = _SET_ITEMS.match(state.request) is not None
        counts: dict[str, int] = {}
        for count, word in items:
            kind = state.aliases.get(word, word)
            counts[kind] = counts.get(kind, 0) + count
        inspecting = check is not None and check.name in " ".join(rules)
        if state.held:
            if inspecting and state.condition is None:
                return _call(check, robot)
            cls = state.classes.get(stem(state.held))
            if state.condition == "dirty":
                target = routed(state.held, "dirty", state.scene, rules, cls=cls)
            elif not exact or sum(stem(t) == stem(state.held) for t in state.scene.get(place, [])) < counts.get(
                    stem(state.held), 0):
                target = place
            else:  # not wanted there (or enough of its kind already): its own place, else the model's choice
                target = routed(state.held, state.condition, state.scene, rules, exclude=(place,), cls=cls)
            return _call(put, robot, target) if target else None
        if exact:
            kept: dict[str, int] = {}
            ruled = words(" ".join(rules))  # what a rule uses there (the sponge) stays
            for thing in state.scene.get(place, []):
                kind = stem(thing)
                if kind in ruled:
                    continue
                kept[kind] = kept.get(kind, 0) + 1
                if thing not in moved and kept[kind] > counts.get(kind, 0):
                    return _call(take, robot, thing)
        # "Complete the table by adding 1 goblet and 1 orange": one more orange than the one already there.
        more = _MORE.search(state.request) is not None
        for kind, count in counts.items():
            have = [t for t in state.scene.get(place, []) if stem(t) == kind and (not more or t in moved)]
            if len(have) >= count:
                continue
            spare = [t for p, ts in state.scene.items() if p != place for t in ts if stem(t) == kind and t not in moved]
            if not spare:
                return None  # unknown word or nothing left: the model (or the alias step) decides
            return _call(take, robot, spare[0])
        return AgentDecision(say=completion_message(state))

    async def resolve_aliases(self, situation: Situation, state: TaskState) -> list[dict[str, Any]]:
        """Words of the request that name no object type in the scene ("apple" when the scene has
        orange_1): one constrained model choice each among the types the request does not name."""
        if state.scene is None:
            return []
        wanted = standing_additions(state.request, [*situation.memory.memory_list, *state.rules],
                                    [*state.scene, *location_values(situation.attributes)])
        if wanted is None:
            return []
        # What the robot holds is in no place of the scene, but it is still an object of its kind.
        held = {stem(state.held)} if state.held else set()
        kinds = sorted({stem(t) for ts in state.scene.values() for t in ts} | held)
        steps = []
        for _, word in wanted[1]:
            if word in kinds or word in state.aliases:
                continue
            free = [k for k in kinds if k not in {w for _, w in wanted[1]} and k not in state.aliases.values()]
            if not free:
                continue
            kind, step = await self.choose(
                situation, (Message("user", f"The user asked for '{word}', but no object has that name. The objects "
                                            f"are of these kinds: {', '.join(free)}. Which kind does the user mean?"),),
                "kind", free, component="aliases", input_elements={"word": word})
            if kind is not None:
                state.aliases = {**state.aliases, word: kind}
            steps.append(step)
        return steps

    async def choose(self, situation: Situation, messages: tuple[Message, ...], key: str, choices: list[str], *,
                     component: str, input_elements: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        """One short greedy model answer constrained to `{key: one of choices}`: the choice (None when
        the answer is not one of them) and the call's trace step."""
        request = GenerationRequest(
            messages=messages, n=1, greedy=True, max_tokens=16, seed=self.settings.seed,
            json_schema={"type": "object", "properties": {key: {"enum": choices}}, "required": [key]},
            situation=situation, component=component)
        (completion,) = await self.backend.generate(request)
        try:
            choice = json.loads(strip_reasoning(completion.text)).get(key)
        except (ValueError, AttributeError):
            choice = None
        return (choice if choice in choices else None), model_step(0, request, completion,
                                                                    input_elements=input_elements)

    async def classify_held(self, situation: Situation, state: TaskState) -> dict[str, Any] | None:
        """The class of the held object ("food" or "dishware" for a mug), as one constrained model
        choice, when rules route by class ("clean dishware in dish_storage") and no other object of
        its type shows its place. Asked after a short dialogue of examples the scene shows (the mango
        in food_storage is food): over MAGMA's kitchen types, the 0.5B model named 64% right when
        asked cold (a goblet, a mug "food") and 98% after examples of both classes."""
        if state.held is None or state.scene is None or stem(state.held) in state.classes:
            return None
        rules = [*situation.memory.memory_list, *state.rules]
        places = {*state.scene, *location_values(situation.attributes)}
        classes = list(dict.fromkeys(cls for (_, cls), place in routes(rules).items() if place in places))
        # A sibling on the table being cleared (the other dirty orange) shows no place to put it.
        phrase = cleared(state.request) if state.request else None
        clearing = place_named(phrase, state.scene) if phrase else None
        if clearing is None and state.request:  # "Clean and wipe the table.": the wiping recipe clears it
            recipe_goal = recipe_clearing(state.request, rules, state.scene, state.held)
            clearing = recipe_goal.clear if recipe_goal is not None else None
        if len(classes) < 2 or sibling_home(state.held, state.scene, exclude=(clearing,) if clearing else ()):
            return None
        kind = stem(state.held)
        dialogue = [Message("system", class_prompt(classes))]
        for example, cls in class_examples(state.scene, rules, classes):
            dialogue += [Message("user", _which_class(example)), Message("assistant", json.dumps({"class": cls}))]
        dialogue.append(Message("user", _which_class(kind)))
        cls, step = await self.choose(situation, tuple(dialogue), "class", classes, component="classes",
                                      input_elements={"object": state.held})
        if cls is None:
            return None
        state.classes = {**state.classes, kind: cls}
        return step

    @staticmethod
    def looked_last(situation: Situation, state: TaskState) -> bool:
        observe = roles(situation.toolbox)[0]
        return (observe is not None and bool(state.done_calls) and not state.last_failed
                and state.done_calls[-1]["name"] == observe.name)

    def look(self, situation: Situation, state: TaskState) -> AgentDecision | None:
        """An observation call, when acting now would be guessing: nothing has been observed yet
        and the tools act on named objects, or a call just failed (the names were wrong, or the
        scene is not what lava believed). Looking costs one call; a wrong name costs the stage."""
        observe = roles(situation.toolbox)[0]
        robots = situation.toolbox.robots or ("robot",)
        if observe is None or len(robots) > 1 or state.failures_in_row >= 3 or self.looked_last(situation, state):
            return None
        if any(c["name"] == observe.name for c in state.failed):
            return None  # looking itself is refused right now ("no package held"): the model must act first
        acts_on_objects = any(t.params and _TAKE_LIKE.search(t.name.replace("_", " ") + " " + t.description)
                              for t in situation.toolbox.tools)
        unseen = not state.observations and state.scene is None and acts_on_objects
        # An object that could not be grasped is where lava believes: looking would show the same.
        refused = state.last_failed and any(c["name"] != observe.name
                                            and not set(argument_values([c])) & set(state.ungraspable)
                                            for c in state.pending_failed)
        if not (unseen or refused):
            return None
        return _call(observe, robots[0])

    # -- the commander's view ----------------------------------------------------------------

    def messages(self, situation: Situation, state: TaskState, ask: str, left: list[str],
                 matches: list[str] | None = None) -> list[Message]:
        """`matches`: matching_places for what is held, when the caller has it already."""
        system = _system_prompt(situation.toolbox, (*situation.memory.memory_list, *state.rules))
        _, take, put = roles(situation.toolbox)
        held = self.held(state, take, put)
        if matches is None:
            matches = self.matching_places(situation, state, held, put)
        shown = state.done[-DONE_SHOWN:]
        older = Counter(line.split("(", 1)[0] for line in state.done[:-DONE_SHOWN]) if len(state.done) > DONE_SHOWN \
            else Counter()
        before = ", ".join(f"{name} x{count}" for name, count in older.items())
        user = render("magma_state.j2", state=task_state(situation.attributes), earlier=state.earlier,
                      observations=state.observations, request=state.request or situation.instruction.content,
                      done=shown, done_before=f"{sum(older.values())} earlier steps: {before}" if older else "",
                      done_offset=len(state.done) - len(shown), last_feedback=state.last_feedback, left=left, ask=ask,
                      holding=held, matches=matches,
                      scene=render_scene(state.scene, state.held) if state.scene else [],
                      failed=[f"{call_text(c)}: {c['message']}" for c in state.failed],
                      holding_known=take is not None and put is not None and bool(state.done_calls))
        return [Message("system", system), Message("user", user)]

    @staticmethod
    def held(state: TaskState, take: ToolSpec | None, put: ToolSpec | None) -> str | None:
        """What the robot holds, from the last take/put calls that succeeded."""
        if take is None or put is None:
            return None
        for call in reversed(state.done_calls):
            if call["name"] == put.name:
                return None
            if call["name"] == take.name:
                value = next(iter(call.get("arguments", {}).values()), None)
                return value if isinstance(value, str) else "an object"
        return None

    async def propose(self, situation: Situation, state: TaskState, *, say: bool, calls: bool, ask: str,
                      left: list[str], first_step: int) -> list[Proposal]:
        # The enums, and the places matching what is held, are worked out once for the grammar and
        # the prompt (each used to recompute them: up to three enums per decision).
        _, take, put = roles(situation.toolbox)
        enums = self.enums(situation, state, narrow=False)
        matches = self.matching_places(situation, state, self.held(state, take, put), put, enums)
        self.narrow_to_match(situation, state, enums, matches)
        schema = situation.toolbox.decision_schema(say=say, calls=calls, exclude=self.not_now(situation, state),
                                                   enums=enums)
        elements = {"intent": state.intent, "request": state.request, "done": list(state.done), "left": left,
                    "constrained_to": "calls" if not say else "text" if not calls else "calls or text"}
        messages = self.messages(situation, state, ask, left, matches)
        proposals = await self.commander.propose(situation, messages, situation.n, schema=schema,
                                                 input_elements=elements, first_step=first_step)
        if not situation.greedy and situation.n > 1 and self.backend.capabilities.varies_with_seed:
            proposals = await self.distinct(situation, messages, schema, elements, proposals, first_step)
        if state.failed or state.done_calls:
            proposals = await self.fresh(situation, state, messages, schema, elements, proposals, first_step)
        return proposals

    async def fresh(self, situation: Situation, state: TaskState, messages: list[Message], schema: dict[str, Any],
                    elements: dict[str, Any], proposals: list[Proposal], first_step: int) -> list[Proposal]:
        """A candidate that repeats a refused call, or the call that just succeeded, is sampled again
        (greedy decoding would only give it back): a few draws, the first one that tries something
        new is kept."""
        for round_number in range(1, RESAMPLE_ROUNDS + 1):
            repeats = [i for i, proposal in enumerate(proposals)
                       if proposal.decision is not None and state.repeats(proposal.decision)]
            if not repeats:
                break
            draws = await self.commander.propose(situation, messages, REDRAWS * len(repeats), schema=schema,
                                                 input_elements=elements, first_step=first_step, sample=True,
                                                 seed_offset=104729 * round_number)
            usable = iter(d for d in draws if d.decision is not None and not state.repeats(d.decision))
            for index in repeats:
                replacement = next(usable, None)
                if replacement is not None:
                    proposals[index] = replacement
        return proposals

    async def distinct(self, situation: Situation, messages: list[Message], schema: dict[str, Any],
                       elements: dict[str, Any], proposals: list[Proposal], first_step: int) -> list[Proposal]:
        """MAGMA-GEN explores one branch per candidate: identical candidates waste branches, so
        duplicates are resampled a bounded number of times (different seeds), then kept. A round
        that brings nothing new ends it: the model is sure of that answer, and another round of
        draws would most likely agree again."""
        for round_number in range(1, RESAMPLE_ROUNDS + 1):
            seen: set[str] = set()
            duplicates = []
            for index, proposal in enumerate(proposals):
                if proposal.decision is None:
                    continue
                key = proposal.decision.model_dump_json()
                if key in seen:
                    duplicates.append(index)
                seen.add(key)
            if not duplicates:
                break
            fresh = await self.commander.propose(situation, messages, len(duplicates), schema=schema,
                                                 input_elements=elements, first_step=first_step,
                                                 seed_offset=7919 * round_number)
            replaced = 0
            for index, proposal in zip(duplicates, fresh, strict=True):
                if proposal.decision is not None and (key := proposal.decision.model_dump_json()) not in seen:
                    proposals[index] = proposal
                    seen.add(key)
                    replaced += 1
            if not replaced:
                break
        return proposals

    def matching_places(self, situation: Situation, state: TaskState, held: str | None,
                        put: ToolSpec | None, known: dict[str, dict[str, list[str]]] | None = None) -> list[str]:
        """Places whose name shares a word with the held object (blue_cube_1 -> blue_tray).
        `known`: `enums(situation, state, narrow=False)` when the caller has it already."""
        if not held or put is None:
            return []
        if known is None:
            known = self.enums(situation, state, narrow=False)
        places = known.get(put.name, {}).get(put.params[0].name, [])
        objects = {*object_values(situation.attributes), *(t for ts in (state.scene or {}).values() for t in ts),
                   *contents([*state.observations, state.last_feedback]), held}
        places = [p for p in places if p not in objects]  # an object is never a place
        split = [set(w for w in re.split(r"[_\-\s]+", o.lower()) if w and not w.isdigit()) for o in objects]
        common = set.intersection(*split) if len(split) > 1 else set()  # "ref", "obj", "cube": not distinctive
        words = {w for w in re.split(r"[_\-\s]+", held.lower()) if w and not w.isdigit()} - common
        return [p for p in places if p != held and ("_" in p or "-" in p)
                and words & set(re.split(r"[_\-\s]+", p.lower()))]

    def enums(self, situation: Situation, state: TaskState, *, narrow: bool = True
              ) -> dict[str, dict[str, list[str]]]:
        """Known names for every string parameter; a put-like tool never targets what is held."""
        results = [*state.observations, state.last_feedback, *state.earlier]
        user = [state.request, *state.rules, *situation.memory.memory_list]
        names = known_names(situation.attributes, results, user)
        _, take, put = roles(situation.toolbox)
        exclude: dict[str, set[str]] = {}
        if take is not None and put is not None:
            taken = {v for c in state.done_calls if c["name"] == take.name for v in c.get("arguments", {}).values()
                     if isinstance(v, str)}
            exclude[put.name] = taken | contents(results)  # things are put *into* places, not into things
            exclude[take.name] = set(taken)  # an object moved once in this task is where it belongs
        if put is not None and state.held and state.held_from:
            exclude.setdefault(put.name, set()).add(state.held_from)  # putting it back would undo the take
        if put is not None and state.request and (place := cleared(state.request)):
            exclude.setdefault(put.name, set()).update(
                p for p in names if p.lower().replace("_", " ") == place.lower())  # it is being emptied
        if state.last_failed and state.pending_failed:
            # The call that just failed, with the same value, would fail again.
            for call in state.pending_failed:
                tool = situation.toolbox.get(call["name"])
                if tool is not None and len(tool.params) == 1:
                    value = (call.get("arguments") or {}).get(tool.params[0].name)
                    if isinstance(value, str):
                        exclude.setdefault(tool.name, set()).add(value)
        enums = parameter_enums(situation.toolbox, names, exclude=exclude)
        places = list(dict.fromkeys([*(state.scene or {}), *containers(results),
                                     *location_values(situation.attributes)]))
        if places:
            # A parameter that names a location takes a place the robots reported (or one its own
            # description names), not a colour or an object.
            for tool_name, param_name, offered in _location_params(situation.toolbox):
                own = [w for w, kept in offered if kept or w in places]
                allowed = [v for v in dict.fromkeys([*places, *own]) if v not in exclude.get(tool_name, set())]
                if allowed:
                    enums.setdefault(tool_name, {})[param_name] = allowed
        self.narrow_by_attributes(situation, enums, exclude)
        self.drop_kind_names(situation, enums, results)
        movable = contents(results) - exclude.get(take.name, set()) if take is not None and put is not None else set()
        if movable and take is not None:
            # Only what the robots reported as lying somewhere can be taken.
            enums[take.name] = {take.params[0].name: sorted(movable)}
        if state.scene and take is not None and put is not None:
            # The scene is the best account of what exists: objects are taken, places receive.
            objects = [t for things in state.scene.values() for t in things if t not in exclude.get(take.name, set())]
            if objects:
                enums[take.name] = {take.params[0].name: sorted(set(objects))}
            targets = [p for p in enums.get(put.name, {}).get(put.params[0].name, places) if p in places
                       and p not in exclude.get(put.name, set())] or [p for p in places
                                                                      if p not in exclude.get(put.name, set())]
            if targets:
                enums[put.name] = {put.params[0].name: targets}
        if narrow:
            # The enums as they stand are what matching_places reads (enums(narrow=False)).
            self.narrow_to_match(situation, state, enums,
                                 self.matching_places(situation, state, self.held(state, take, put), put, enums))
        return enums

    @staticmethod
    def narrow_to_match(situation: Situation, state: TaskState, enums: dict[str, dict[str, list[str]]],
                        matches: list[str]) -> None:
        """`matches`: matching_places for what is held, read from these enums before narrowing."""
        put = roles(situation.toolbox)[2]
        user = [state.request, *state.rules, *situation.memory.memory_list]
        if put is not None and len(matches) == 1 and not _CONTRARY.search(" ".join(user)):
            # One place is named after what is held: that is where it goes (small models copy the
            # previous target instead). Requests that say otherwise ("opposite", "leave") keep the choice.
            enums[put.name] = {put.params[0].name: matches}

    @staticmethod
    def narrow_by_attributes(situation: Situation, enums: dict[str, dict[str, list[str]]],
                             exclude: dict[str, set[str]]) -> None:
        """A parameter whose description names an attribute ("One of the listed move_targets") takes
        that attribute's values only (a product type is not a place to move to)."""
        lists = {key: [v for v in value if isinstance(v, str)] for key, value in situation.attributes.items()
                 if isinstance(value, list) and key not in ("known_robots",)}
        for tool_name, param_name, keys in _attribute_params(situation.toolbox, tuple(lists)):
            named = [key for key in keys if lists[key]]
            if len(named) == 1:
                allowed = [v for v in lists[named[0]] if v not in exclude.get(tool_name, set())]
                if allowed:
                    enums.setdefault(tool_name, {})[param_name] = allowed

    @staticmethod
    def drop_kind_names(situation: Situation, enums: dict[str, dict[str, list[str]]], results: list[str]) -> None:
        """An object parameter takes instances (banana_0), not the kind they were named after
        ("banana" is refused: "You used an unknow object name"), once instances were reported."""
        seen = set(identifiers(" ".join(results)))
        if not seen:
            return
        # A value v is a kind of an instance i when i starts with v + "_" or v + "-": when v is one of
        # the prefixes of the instances cut at a "_" or "-" (one set per turn, not a scan per value).
        kinds = {i[:k] for i in seen for k, ch in enumerate(i) if ch in "_-"}
        for tool_name, param_name in _object_params(situation.toolbox):
            values = enums.get(tool_name, {}).get(param_name)
            if not values:
                continue
            kept = [v for v in values if v not in kinds]
            if kept and len(kept) < len(values):
                enums[tool_name][param_name] = kept

    def not_now(self, situation: Situation, state: TaskState) -> tuple[str, ...]:
        """Tools that cannot be the right next call, left out of this turn's grammar:
        - a parameterless tool that just succeeded (it would only say the same again);
        - with take/put-like tools: everything but putting while an object is held, and putting
          while nothing is;
        - cancelling while no robot is busy (there is nothing to cancel);
        - to answer a question, anything but looking (a question wants words, not actions)."""
        excluded: list[str] = []
        if not situation.toolbox.busy:
            excluded.append(CANCEL_TOOL)
        if state.intent == "answer":
            observe = roles(situation.toolbox)[0]
            excluded += [t.name for t in situation.toolbox.tools if observe is None or t.name != observe.name]
        if state.done_calls and not state.last_failed:
            tool = situation.toolbox.get(state.done_calls[-1]["name"])
            if tool is not None and not tool.params:
                excluded.append(tool.name)
        _, take, put = roles(situation.toolbox)
        if not state.held:  # tools that act on or with the held object only fail with an empty gripper
            excluded += _held_tools(situation.toolbox)
        if take is not None and put is not None:
            # A tool that neither the request nor a rule names by its object words (set_light, add_new_location)
            # is not part of a pick-and-place job.
            said = words(" ".join([state.request, *situation.memory.memory_list, *state.rules]))
            excluded += [name for name, objects in _unnamed_candidates(situation.toolbox) if not objects & said]
            if self.held(state, take, put) is not None:
                excluded += [t.name for t in situation.toolbox.tools if t.name != put.name]
            else:
                excluded.append(put.name)
                seen = contents([*state.observations, state.last_feedback])
                taken = set(argument_values([c for c in state.done_calls if c["name"] == take.name]))
                if seen and seen <= taken:
                    excluded.append(take.name)  # everything reported has been moved: nothing left to take
        return tuple(excluded)

    # -- the turn ----------------------------------------------------------------------------

    async def decide(self, situation: Situation, memories: list[dict[str, Any]]) -> list[CandidateResult]:
        state = TaskState.load(situation.memory.private)
        if state.answering_midway and not state.pending:
            state.resume()  # the question was answered: the request it interrupted goes on
        shared_steps: list[dict[str, Any]] = []
        instruction = situation.instruction
        asked_midway = False

        def everyone(decision: AgentDecision) -> list[CandidateResult]:
            """One decision for every candidate, each with its own copy of the steps taken so far."""
            return [self.result(situation, state, decision, [dict(s) for s in shared_steps], memory)
                    for memory in memories]
        if instruction.type == "user":
            state.settle(situation.toolbox)
            intent, shared_steps = await self.classify(situation)
            answers = bool(state.asked_about) and bool(answered_areas(
                instruction.content, state.asked_about, [*situation.memory.memory_list, *state.rules],
                object_values(situation.attributes), location_values(situation.attributes)))
            state.asked_about = []
            if answers:
                # The areas lava asked for ("For this cycle, ref_obj_3 goes to area5"): the request
                # goes on with them, whatever the wording would say on its own.
                intent = "act"
            elif intent == "acknowledge" and _WAIT.search(instruction.content):
                return everyone(AgentDecision(say="Understood, I will wait for your next instruction."))
            elif intent == "acknowledge":
                state.remember_rule(instruction.content)
                return everyone(AgentDecision(say=acknowledgement(instruction.content)))
            if intent == "act":
                # "... However, you must not use area2 anymore": it holds for the requests after this one.
                for clause in area_news(instruction.content, location_values(situation.attributes)):
                    state.remember_rule(clause)
                for sentence in default_news(instruction.content, object_values(situation.attributes),
                                             location_values(situation.attributes)):
                    state.remember_rule(sentence)
                for sentence in removal_news(instruction.content, location_values(situation.attributes)):
                    state.remember_rule(sentence)
            running = intent == "act" and state.intent == "act" and bool(state.request) and not state.finished
            interrupts = running and _INTERRUPT.search(instruction.content) is not None
            if answers:
                state.amend(instruction.content)
                state.finished = False
            elif interrupts:
                state.suspend()
                state.start(intent, instruction.content)
            elif running and _AMEND.search(instruction.content):
                state.amend(instruction.content)
            elif (intent == "answer" and state.intent == "act" and state.request and not state.finished
                  and state.suspended is None):
                # A question in the middle of a request ("What are the recipient name ... for delivery
                # AD-001?"): answered, then the request goes on, its skills' notes untouched.
                state.suspend(question=True)
                state.start(intent, instruction.content)
                asked_midway = True
            else:
                if self.handed_over(situation, state):
                    # MAGMA sets the scene out anew for the next request (ResetPackagingTransition:
                    # every food back on the table, the tray empty): what lava saw is gone.
                    state.scene, state.observations = None, []
                corrected = self.after_refusal(situation, state) if intent == "act" else None
                state.start(intent, corrected or instruction.content)
            if intent == "act" and situation.toolbox.busy:
                # lava's own next call is held while the user speaks: it was the best next step, so
                # it runs (an empty decision), unless the message removed what it acts on or stops it.
                stops = interrupts and (_STOP.search(instruction.content) is not None
                                        or self.held_apart(situation, instruction.content))
                return everyone(self.resume_or_cancel(situation, state, stop=stops))
            rules = [*situation.memory.memory_list, *state.rules]
            gone = unavailable(rules, instruction.content)
            if intent == "act" and gone is not None:
                return everyone(refusal(state, gone, refused_people(rules, situation.toolbox, situation.attributes,
                                                                    instruction.content, state.observations)))
            clash = tray_clash(state.request, rules, attribute_values(situation.attributes)) if intent == "act" \
                else None
            if clash is not None:  # MAGMA's ForbiddenElemStage wants words, and any call fails it
                return everyone(refusal(state, f"{clash[0]} and {clash[1]} cannot be placed on the same tray."))
        elif situation.feedback is not None:
            if situation.toolbox.busy and not state.pending and not situation.feedback.previous_calls:
                # lava answered in words (a question) while its call was held, and MAGMA-BENCH reports
                # the words as "The action failed.": nothing of lava's failed, the held call goes on.
                return everyone(AgentDecision())
            state.observe(situation.feedback, situation.toolbox)
            if state.failures_in_row >= MAX_FAILURES_IN_ROW and state.intent == "act":
                return everyone(stalled(state))
        if not asked_midway:
            skills.observe_all(situation, state)
        if situation.feedback is not None and (again := self.retried(situation, state)) is not None:
            return everyone(again)

        move = await self.next_move(situation, state, shared_steps)
        if state.suspended is not None and not state.answering_midway and _says_done(move):
            # The urgent request is done: the one it interrupted goes on, in this same turn.
            state.resume()
            move = await self.next_move(situation, state, shared_steps)
        if isinstance(move, AgentDecision):
            return everyone(move)
        results = []
        for proposal, memory in zip(move, memories, strict=True):
            steps = [dict(step) for step in shared_steps] + proposal.steps
            if proposal.decision is None:
                error = proposal.error or CandidateError("no decision", component=self.name)
                results.append(CandidateResult.failed(error, steps, proposal.usage))
                continue
            decision = self.not_again(situation, state, proposal.decision)
            completes = decision.say and not decision.tool_calls and state.intent == "act" and state.done
            if completes and not any(word in decision.say.lower() for word in _IMPOSSIBLE):
                decision = AgentDecision(say=completion_message(state))
            results.append(self.result(situation, state, decision, steps, memory, usage=proposal.usage))
        return results

    async def next_move(self, situation: Situation, state: TaskState, shared_steps: list[dict[str, Any]]
                        ) -> AgentDecision | list[Proposal]:
        """One decision for every candidate (a plan, a skill, pick-and-place), or the model's
        proposals, one per candidate. Model steps taken on the way are added to `shared_steps`."""

        def record(steps: Iterable[dict[str, Any]]) -> None:
            for step in steps:
                step["id"] = f"step-{len(shared_steps)}"
                shared_steps.append(step)

        instruction = situation.instruction
        if state.intent == "act" and off_stage(state):
            # MAGMA moved on to the answer: its stage refuses actions ("move_to is not allowed in this
            # stage. Allowed tools are: ['detect']"), and each further call spends the answer's budget
            # (held-out hall_sorting MainDefinition@46, a longer episode under execution errors).
            return AgentDecision(say=completion_message(state))
        if state.intent == "act" and one_dimensional(situation.toolbox) and state.failures_in_row < 3:
            if instruction.type == "user" or state.plan is None:
                # Also after a turn that left the request unplanned: the cancelling of a held call.
                wanted = self.requested(situation, state, vocabulary(situation.attributes))
                if wanted:
                    state.plan, plan_steps = await self.plan(situation, state, wanted)
                    record(plan_steps)
            if state.plan:
                return self.next_planned(situation, state) or AgentDecision(say=completion_message(state))

        if state.intent == "act":
            record(await self.resolve_aliases(situation, state))
        if state.intent == "act":
            # A bookkeeping request ("this new area4 for ref_obj_2. Add it") before reading it as a
            # cycle, unless it asks to send things somewhere.
            sending = _SENDING.search(state.request) is not None
            if (decision := (None if sending else self.named_call(situation, state))
                    or skills.next_decision(situation, state) or self.pick_and_place(situation, state)
                    or (self.named_call(situation, state) if sending else None)) is not None:
                return decision
        if state.intent == "act" and (step := await self.classify_held(situation, state)) is not None:
            # Where the held object goes was the model's open choice; its class, with the rules, says it.
            record([step])
            if (decision := self.pick_and_place(situation, state)) is not None:
                return decision

        first = len(shared_steps)
        if state.intent == "answer" and (looked_up := team_answer(situation, state)) is not None:
            return looked_up
        if state.intent == "answer" and (said := self.known_answer(situation, state)) is not None:
            return AgentDecision(say=said)
        if state.intent == "answer":  # the skills' own pictures: a scene, the halls' rules, a count
            if (seen := scene_answer(situation, state)) is not None:
                return seen
            if (ruled := hall_answer(situation, state)) is not None:
                return AgentDecision(say=ruled)
            if (counted := count_answer(situation, state, state.notes.get("returns") or {})) is not None:
                return counted
        if state.intent == "answer":
            # Words only: most question stages refuse any tool call (non_requested_action), and
            # what the robots reported so far is in the prompt.
            return await self.propose(situation, state, say=True, calls=False, left=[], first_step=first,
                                      ask="Answer the user's question in one short sentence.")
        names = vocabulary(situation.attributes)
        left = remaining(self.requested(situation, state, names), state.done_calls) if state.request else []
        # Looking is not doing: until a call with arguments has succeeded, "done" would be premature.
        acted = any((tool := situation.toolbox.get(c["name"])) is not None and tool.params for c in state.done_calls)
        must_act = (instruction.type == "user" or not acted or (bool(left) and one_dimensional(situation.toolbox))
                    or bool(self.steps_named_not_done(situation, state)))
        ask = ("Give the next tool call." if must_act else
               "If everything the request asks for is done, say so; otherwise give the next tool call.")
        return await self.propose(situation, state, say=not must_act, calls=True, ask=ask, left=left,
                                  first_step=first)

    @staticmethod
    def resume_or_cancel(situation: Situation, state: TaskState, *, stop: bool = False) -> AgentDecision:
        """A message arrived while a robot's call is held: an empty decision resumes it, unless the
        amended request no longer wants what it acts on ("instead of juice" while taking juice), or
        the message stops the current work for a more urgent one (`stop`)."""
        if stop and situation.toolbox.get(CANCEL_TOOL) is not None:
            return AgentDecision(tool_calls=[ToolCall(name=CANCEL_TOOL, arguments={}, target_robot_name=robot)
                                             for robot in situation.toolbox.busy])
        removed = {w.lower() for m in _REMOVED.finditer(state.request) for w in m.groups() if w}
        for robot, status in robot_statuses(situation.attributes).items():
            values = {v.lower() for v in re.findall(r"=\s*([\w-]+)", status)}
            if robot in situation.toolbox.busy and values & removed:
                return AgentDecision(tool_calls=[ToolCall(name=CANCEL_TOOL, arguments={}, target_robot_name=robot)])
        return AgentDecision()

    @staticmethod
    def after_refusal(situation: Situation, state: TaskState) -> str | None:
        """The request a user message makes of one lava just refused: a tray ("Okay, replace fish with
        juice instead." after "Prepare a tray based on chicken and fish, but replace fish with pasta."
        broke a rule), the refused recipe corrected; people's coffees ("Use milky coffee instead for
        Theo. ..." after Theo's black one was refused), with the preferences the refused request gave.
        None when there is none, or the message stands on its own."""
        if not (state.finished and state.intent == "act" and state.request):
            return None
        rules = [*situation.memory.memory_list, *state.rules]
        message = situation.instruction.content
        if tray_clash(state.request, rules, attribute_values(situation.attributes)) is not None:
            return after_refused_tray(state.request, message)
        return after_refused_people(rules, situation.toolbox, situation.attributes, state.request, message,
                                    state.observations)

    @staticmethod
    def held_apart(situation: Situation, request: str) -> bool:
        """Whether the calls held while an urgent request arrives act on things it does not name
        (pressing sw1 when "press sw4 now before resuming" comes): they are no part of it and would
        run first. A held call without values (placing the mug) may well serve it, and runs on."""
        said = {w.lower() for w in re.findall(r"[\w-]+", request)}
        held = [{v.lower() for v in re.findall(r"=\s*([\w-]+)", status)}
                for robot, status in robot_statuses(situation.attributes).items() if robot in situation.toolbox.busy]
        return bool(held) and all(values and not values & said for values in held)

    @staticmethod
    def steps_named_not_done(situation: Situation, state: TaskState) -> list[str]:
        """Tools the request or a rule names by their object ("placed the mug and loaded the capsule
        before pressing the start button": place_mug, insert_capsule, press_start) that have not
        been called since the request: until they have, the work is not done."""
        said = words(" ".join([state.request, *situation.memory.memory_list, *state.rules]))
        called = {c["name"] for c in state.done_calls}
        return [name for name, objects in _name_objects(situation.toolbox)
                if name not in called and objects and objects <= said]

    @staticmethod
    def handed_over(situation: Situation, state: TaskState) -> bool:
        """Whether the last thing that happened was handing the work over ("valid_plate: Validate the
        tray and send it to the user")."""
        finish = finisher(situation.toolbox)
        return finish is not None and bool(state.episode_calls) and state.episode_calls[-1]["name"] == finish.name

    @staticmethod
    def retried(situation: Situation, state: TaskState) -> AgentDecision | None:
        """The calls MAGMA asked to make again ("The requested action failed due to a temporary
        execution error. Please retry."), as they were, when every failure of the feedback asked so:
        a skill or the model would read the failure as a refusal, and look or try something else."""
        if not state.retry_asked or state.intent != "act" or state.failures_in_row >= 3:
            return None
        calls = [ToolCall(name=c["name"], arguments=c.get("arguments") or {}, target_robot_name=c["robot"])
                 for c in state.pending_failed if situation.toolbox.get(c["name"]) is not None]
        return AgentDecision(tool_calls=calls) if calls else None

    def not_again(self, situation: Situation, state: TaskState, decision: AgentDecision) -> AgentDecision:
        """The exact calls that just failed would fail the same way: look instead, when lava can."""
        observe = roles(situation.toolbox)[0]
        if (state.repeats_failure(decision) and observe is not None and not self.looked_last(situation, state)
                and not any(c["name"] == observe.name for c in state.failed)):  # looking is refused too
            robot = decision.tool_calls[0].target_robot_name
            return _call(observe, robot)
        return decision

    # -- coaching (lava.coaching.reinjection): a corrected decision lands in the task state too --

    def coaching_messages(self, situation: Situation) -> list[Message]:
        state = self.turn_state(situation, intent="act")
        return self.messages(situation, state, "Give the next tool call.", [])

    def record_decision(self, situation: Situation, decision: AgentDecision, memory: dict[str, Any]
                        ) -> dict[str, Any]:
        state = self.turn_state(situation, intent="act" if decision.tool_calls else "answer")
        return self.result(situation, state, decision, [], memory).memory

    @staticmethod
    def turn_state(situation: Situation, *, intent: Intent) -> TaskState:
        """The task state after this input, as `decide` builds it, without asking the model."""
        state = TaskState.load(situation.memory.private)
        if state.answering_midway:
            state.resume()
        if situation.instruction.type == "user":
            state.settle(situation.toolbox)
            state.start(intent, situation.instruction.content)
        elif situation.feedback is not None:
            state.observe(situation.feedback, situation.toolbox)
        skills.observe_all(situation, state)
        return state

    def result(self, situation: Situation, state: TaskState, decision: AgentDecision,
               steps: list[dict[str, Any]], memory: dict[str, Any], usage: Any = None) -> CandidateResult:
        # Every candidate continues from its own copy: launched() only rebinds fields, and dump()
        # below deep-copies into the memory, so a shallow copy is enough here.
        own = copy.copy(state)
        own.launched(decision)
        private = memory.get(LAVA_KEY)
        memory[LAVA_KEY] = {**(private if isinstance(private, dict) else {}), "task": own.dump()}
        append_turn(memory, situation.instruction, decision)
        history = memory.get("history")
        if isinstance(history, list) and len(history) > HISTORY_WINDOW:
            memory["history"] = history[-HISTORY_WINDOW:]
        kwargs = {"usage": usage} if usage is not None else {}
        return CandidateResult(decision=decision, memory=memory, steps=steps, **kwargs)


def _says_done(move: AgentDecision | list[Proposal]) -> bool:
    """Whether the move only says something: the request it was made for needs nothing more."""
    decisions = [move] if isinstance(move, AgentDecision) else [p.decision for p in move]
    return all(d is not None and bool(d.say) and not d.tool_calls for d in decisions)


__all__ = ["MagmaPolicy", "acknowledgement", "completion_message"]
