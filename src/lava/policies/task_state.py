"""The task state the MAGMA-aware policy keeps in memory: pure data and pure functions.

A small model cannot track a plan in free text, so lava tracks it for the model: the current
request, the calls that succeeded since it (in order), what the last feedback said, the latest
observation results, the rules the user gave, and a short digest of earlier requests. Every
value is JSON and lives under `memory["lava"]["task"]`, so any replica continues from it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import orjson

from ..protocol import AgentDecision, ToolCall
from ..situation import Feedback
from ..tools import CANCEL_TOOL, ToolBox
from . import scene as scenes
from .demos import roles
from .goals import STATED, listed, number
from .scene import read_scene

Intent = Literal["act", "answer", "acknowledge"]

MAX_DONE = 40
MAX_EPISODE_CALLS = 120  # an AdvancedDelivery episode (returns, two deliveries) runs ~60
MAX_EARLIER = 4
MAX_OBSERVATIONS = 3
MAX_RULES = 20
MAX_FAILED = 6

_RESULT = re.compile(r"^\s*(?P<robot>[^:]+?):\s*(?P<tool>\S+)\s+(?P<status>succeed|succeeded|failed)\s+with message:\s*"
                     r"(?P<message>.*)$", re.IGNORECASE)
# MAGMA's failures that ask for the same call again: an injected one ("The requested action failed due
# to a temporary execution error. Please retry.") and the tools' own ("Failed to press the sw1 button.
# You can retry.", "ref_obj_1 is not in area2, you can retry"). Nothing was wrong with the call. So
# too a put whose object stayed in the gripper ("The object is still in the gripper"): nothing changed.
_RETRY = re.compile(r"\b(?:please|you can)\s+retry\b|\bstill in the gripper\b", re.IGNORECASE)
_UNGRASPABLE = re.compile(r"\bfailed to grasp\b|\bunreachable right now\b|\bimpossible to take\b", re.IGNORECASE)
_TIMES = {"once": 1, "twice": 2, "thrice": 3, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "2": 2, "3": 3,
          "4": 4, "5": 5}
_FORGET = re.compile(r"\b(forget|ignore|discard|drop|cancel)\b.*\b(rules?|constraints?|instructions?|preferences?)\b",
                     re.IGNORECASE)


def call_text(call: ToolCall | Mapping[str, Any]) -> str:
    """`panda.press_button(id=sw1)`: the compact form MAGMA itself uses in messages."""
    if isinstance(call, ToolCall):
        robot, name, arguments = call.target_robot_name, call.name, call.arguments
    else:
        robot, name, arguments = call["robot"], call["name"], call.get("arguments", {})
    inner = ", ".join(f"{key}={value if isinstance(value, str) else json.dumps(value)}"
                      for key, value in arguments.items())
    return f"{robot}.{name}({inner})"


def _call_key(call: Mapping[str, Any]) -> str:
    return json.dumps([call.get("robot"), call.get("name"), call.get("arguments") or {}], sort_keys=True)


@dataclass(frozen=True, slots=True)
class Result:
    robot: str
    tool: str
    ok: bool
    message: str

    @property
    def retryable(self) -> bool:
        """A failure that asks for the same call again, or whose call changed nothing and may work the
        next time (the object stayed in the gripper)."""
        return not self.ok and _RETRY.search(self.message) is not None

    @property
    def ungraspable(self) -> bool:
        """A take refused because the object cannot be grasped now ("Failed to grasp: mango_1. The
        object is unreachable right now.", MAGMA's GraspFailureError): another of its kind may do."""
        return not self.ok and cannot_grasp(self.message)

    @property
    def informative(self) -> bool:
        """Whether it tells something about the world: a success, or a failure that refuses the call.
        A failure that asks for a retry says only that the call did not run."""
        return not self.retryable


def cannot_grasp(message: str) -> bool:
    """Whether a refusal says the object cannot be grasped now (MAGMA's GraspFailureError)."""
    return _UNGRASPABLE.search(message) is not None


def cannot_grasp_said(things: Sequence[str]) -> str:
    """What lava says when all that is left of the work is what could not be grasped."""
    return f"Sorry, I cannot finish: {listed(things)} cannot be grasped right now."


def read_results(feedback: Feedback) -> list[Result]:
    results = []
    for line in feedback.lines():
        match = _RESULT.match(line)
        if match:
            results.append(Result(match["robot"].strip(), match["tool"], match["status"].lower() != "failed",
                                  match["message"].strip()))
    return results


def results_with_calls(feedback: Feedback, state: TaskState) -> list[tuple[Result, Mapping[str, Any]]]:
    """Each result line with the call it reports on: MAGMA's previous_tool_call for its robot, else
    the call lava last recorded for that robot. A failure that asks for the same call again ("Please
    retry.") is left out: it tells nothing about the world, and the call is made again as it was."""
    calls: dict[str, Any] = dict(feedback.previous_calls or {})
    for call in [*state.done_calls[-2:], *state.pending_failed]:
        calls.setdefault(call["robot"], call)
    return [(result, call) for result in read_results(feedback)
            if isinstance(call := calls.get(result.robot), Mapping) and result.informative]


@dataclass
class TaskState:
    intent: Intent | None = None
    request: str = ""
    done: list[str] = field(default_factory=list)
    done_calls: list[dict[str, Any]] = field(default_factory=list)
    # Every call that succeeded, across requests (the latest MAX_EPISODE_CALLS): what the world went
    # through, for skills whose state is what the calls did (a package set aside for an urgent order,
    # then taken back).
    episode_calls: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    pending_failed: list[dict[str, Any]] = field(default_factory=list)  # the calls the last feedback refused
    retry_asked: bool = False  # the last feedback asked to make every one of them again ("Please retry.")
    last_feedback: str = ""
    last_failed: bool = False
    failures_in_row: int = 0
    observations: list[str] = field(default_factory=list)
    earlier: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    # For one-dimensional requests (one tool, one parameter): the values to use, in order.
    plan: list[str] | None = None
    turns: int = 0
    # Pick-and-place: where things are (see scene.py) and what the gripper holds, across requests.
    scene: dict[str, list[str]] | None = None
    held: str | None = None
    held_from: str | None = None  # where the held object was taken from: putting it back undoes the take
    aliases: dict[str, str] = field(default_factory=dict)  # request word -> object type in the scene
    classes: dict[str, str] = field(default_factory=dict)  # object type -> the class rules route ("mug" -> "dishware")
    condition: str | None = None  # what an inspection said of the held object ("dirty", "clean")
    # Calls refused since the world last changed, with the reason: never worth repeating.
    failed: list[dict[str, Any]] = field(default_factory=list)
    # Each skill's own JSON (see skills.py), kept across requests.
    notes: dict[str, Any] = field(default_factory=dict)
    finished: bool = False  # lava said the request is done
    # A request an urgent one interrupted ("Stop the current cycle and sort ref_obj_2 first. Finish
    # the current after."): its text, steps and plan, resumed once the urgent one is done.
    suspended: dict[str, Any] | None = None
    # Objects lava asked the user an area for (a cycle naming objects no rule places).
    asked_about: list[str] = field(default_factory=list)
    # Objects a take could not grasp ("Failed to grasp: fish. The object is unreachable right now."),
    # until something is put down (MAGMA draws such failures anew at each stage).
    ungraspable: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, private: Mapping[str, Any]) -> TaskState:
        raw = private.get("task")
        if not isinstance(raw, dict):
            return cls()
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        try:
            return cls(**known)
        except TypeError:  # a memory written by another version: start the task state afresh
            return cls()

    def dump(self) -> dict[str, Any]:
        """A deep, independent copy as plain JSON (an orjson round trip: ~20x cheaper than asdict)."""
        fields_ = self.__dict__
        # __init__ (and __copy__) set exactly the fields, in declaration order, and nothing removes
        # one: the instance dict is then the field dict, without a getattr per field for every candidate.
        if len(fields_) != len(_FIELDS):
            fields_ = {name: getattr(self, name) for name in _FIELDS}
        return orjson.loads(orjson.dumps(fields_))

    def __copy__(self) -> TaskState:
        # What copy.copy does for a plain instance (a new object sharing the field values), without
        # its generic __reduce_ex__ round: every candidate of every decision takes one.
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    # -- transitions (each returns nothing and mutates this copy only) ----------------------

    def start(self, intent: Intent, request: str) -> None:
        self._digest_request()
        self.intent, self.request = intent, request
        self.done, self.done_calls, self.pending = [], [], []
        self.last_failed, self.failures_in_row = False, 0
        self.plan = None
        self.failed = []
        self.ungraspable = []
        self.finished = False

    def suspend(self, *, question: bool = False) -> None:
        """Set the running request aside, for an urgent one or (`question`) for a question asked
        in the middle of it, after whose answer it goes on."""
        self.suspended = {"request": self.request, "done": self.done, "done_calls": self.done_calls,
                          "plan": self.plan, "question": question}

    @property
    def answering_midway(self) -> bool:
        """Whether lava is answering a question that came in the middle of a request."""
        return self.intent == "answer" and bool(self.suspended and self.suspended.get("question"))

    def _digest_request(self) -> None:
        """The running request, one line in `earlier`, as it is left for another."""
        if self.request and (self.done or self.intent == "act"):
            digest = f"{self.request} -> " + (", ".join(self.done[-6:]) if self.done else "nothing done")
            self.earlier = [*self.earlier, digest][-MAX_EARLIER:]

    def resume(self) -> None:
        """Back to the interrupted request, with the work it had done. Its digest, written when it
        was set aside, goes: it is running again, and is digested once, when it is left for good.
        The interruption's own request (an urgent one's work) is digested in its place."""
        saved, self.suspended = self.suspended or {}, None
        interrupted = f"{saved.get('request') or ''} -> "
        index = next((i for i in range(len(self.earlier) - 1, -1, -1) if self.earlier[i].startswith(interrupted)),
                     None)
        if index is not None:
            self.earlier = [*self.earlier[:index], *self.earlier[index + 1:]]
        self._digest_request()
        self.intent, self.request = "act", str(saved.get("request") or "")
        self.done, self.done_calls = list(saved.get("done") or []), list(saved.get("done_calls") or [])
        self.plan = saved.get("plan")
        self.failed, self.finished = [], False

    def amend(self, text: str) -> None:
        """A message that changes the running request ("I changed my mind: use water instead of
        juice"; "a new order ... after the current orders"): the request grows, the work done stays."""
        joint = "" if not self.request or self.request.rstrip()[-1:] in ".!?;" else "."
        self.request = f"{self.request}{joint} {text}".strip()
        self.plan = None

    def remember_rule(self, text: str) -> None:
        # "Forget all prefix rules" forgets one kind, which sequences.py reads among the rules kept.
        if _FORGET.search(text) and not re.search(r"\bprefix\b", text, re.IGNORECASE):
            self.rules = []
            return
        # Said again, a rule is the latest word: it moves last (a closed area reopened, then closed again).
        self.rules = [*(r for r in self.rules if r != text), text][-MAX_RULES:]

    def observe(self, feedback: Feedback, toolbox: ToolBox) -> list[Result]:
        """Fold environment feedback into the state: successes are done, failures remembered."""
        results = read_results(feedback)
        self.last_feedback = feedback.render()
        pending = {c["robot"]: c for c in self.pending}
        if feedback.previous_calls:
            for robot, call in feedback.previous_calls.items():
                if isinstance(call, Mapping) and isinstance(call.get("name"), str):
                    pending.setdefault(robot, {"robot": robot, "name": call["name"],
                                               "arguments": call.get("arguments") or {}})
        failed = bool(feedback.error or feedback.failure_reason)
        self.pending_failed, refused = [], False
        for result in results:
            call = pending.get(result.robot)
            if not result.ok and call is not None:
                self.pending_failed = [*self.pending_failed, call]
                # A call asked for again is not refused: the same call may well work now.
                if not result.retryable:
                    refused = True
                    self.failed = [*self.failed, {**call, "message": result.message[:200]}][-MAX_FAILED:]
                if result.ungraspable and isinstance(thing := next(iter((call.get("arguments") or {}).values()),
                                                                   None), str):
                    self.ungraspable = [*(t for t in self.ungraspable if t != thing), thing]
            if result.ok and call is not None and (tool := toolbox.get(call["name"])) is not None and tool.params:
                self.failed = []  # something moved: what failed before may work now
            if result.ok and call is not None:
                self.succeeded(call)
                tool = toolbox.get(call["name"])
                if tool is not None and (not tool.params or len(result.message) > 80):
                    self.observations = [*self.observations, f"{call['name']}: {result.message}"][-MAX_OBSERVATIONS:]
                self.track(call, result.message, toolbox)
            failed = failed or not result.ok
        if not results and not failed and pending:
            # "The action has completed." carries no per-robot line: every pending call succeeded.
            for call in pending.values():
                self.succeeded(call)
        self.retry_asked = bool(self.pending_failed) and not refused
        self.last_failed = failed
        self.failures_in_row = self.failures_in_row + 1 if failed else 0
        self.pending = []
        return results

    def succeeded(self, call: dict[str, Any]) -> None:
        self.done = [*self.done, call_text(call)][-MAX_DONE:]
        self.done_calls = [*self.done_calls, call][-MAX_DONE:]
        self.episode_calls = [*self.episode_calls, call][-MAX_EPISODE_CALLS:]

    def settle(self, toolbox: ToolBox) -> None:
        """A user message came instead of the result of lava's last calls: MAGMA moves to the next
        stage once a call meets the current one's goal, without reporting it. A robot still running
        its call shows as busy (its result comes later); every other call succeeded."""
        running = set(toolbox.busy)
        for call in self.pending:
            if call["robot"] in running:
                continue
            self.succeeded(call)
            self.track(call, "", toolbox)
        self.pending = [c for c in self.pending if c["robot"] in running]

    def track(self, call: Mapping[str, Any], message: str, toolbox: ToolBox) -> None:
        """Keep the scene true after a successful call: a new report replaces it, a take or a put
        moves one object."""
        _, take, put = roles(toolbox)
        tool = toolbox.get(call["name"])
        if tool is not None and not tool.params:
            observed = read_scene(message)
            if observed is not None:
                self.scene = observed
            elif self.held and (said := re.search(r"\b(dirty|clean)\b", message, re.IGNORECASE)):
                self.condition = said.group(1).lower()
            return
        value = next(iter((call.get("arguments") or {}).values()), None)
        if not isinstance(value, str):
            return
        if take is not None and call["name"] == take.name:
            self.held, self.condition = value, None
            self.held_from = scenes.where(self.scene, value) if self.scene is not None else None
            if self.scene is not None:
                self.scene = scenes.taken(self.scene, value)
        elif put is not None and call["name"] == put.name:
            if self.scene is not None and self.held:
                self.scene = scenes.put(self.scene, self.held, value)
            self.held = self.held_from = self.condition = None
            self.ungraspable = []

    def repeats_failure(self, decision: AgentDecision) -> bool:
        """Whether every call of the decision is one that was refused since the world last changed."""
        if not decision.tool_calls or not self.failed:
            return False
        refused = {_call_key(c) for c in self.failed}
        return all(_call_key({"robot": c.target_robot_name, "name": c.name, "arguments": c.arguments}) in refused
                   for c in decision.tool_calls)

    def repeats(self, decision: AgentDecision) -> bool:
        """A refused call again, or exactly the call that just succeeded (with arguments: loading the
        same capsule twice never makes the second coffee)."""
        if self.repeats_failure(decision):
            return True
        if len(decision.tool_calls) != 1 or not self.done_calls or self.last_failed:
            return False
        call, last = decision.tool_calls[0], self.done_calls[-1]
        return bool(call.arguments) and _call_key(last) == _call_key(
            {"robot": call.target_robot_name, "name": call.name, "arguments": call.arguments})

    def launched(self, decision: AgentDecision) -> None:
        if decision.say and not decision.tool_calls and self.intent == "act":
            self.finished = True
        self.pending = [{"robot": c.target_robot_name, "name": c.name, "arguments": c.arguments}
                        for c in decision.tool_calls]
        self.turns += 1


_FIELDS = tuple(f.name for f in fields(TaskState))


# -- what the request names ------------------------------------------------------------------


def vocabulary(attributes: Mapping[str, Any]) -> dict[str, str]:
    """Attribute values (the task's own names) mapped to the attribute they come from."""
    names: dict[str, str] = {}
    for key, value in attributes.items():
        if key in ("known_robots", "robot_statuses"):
            continue
        values: Iterable[Any] = value if isinstance(value, list) else value.values() if isinstance(value, dict) else ()
        for item in values:
            if isinstance(item, str) and item.strip():
                names.setdefault(item, key)
    return names


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str) -> list[str]:
    """The text's sentences, each with its end mark ("Do not make X. Please make Y." is two)."""
    return _SENTENCE_END.split(text.strip())


def mentioned(text: str, names: Iterable[str]) -> list[str]:
    """Names the text mentions, in order of mention, repeated as often as it asks ("two times sw0")."""
    found: list[tuple[int, str, int]] = []
    for name in sorted(set(names), key=len, reverse=True):
        for match in re.finditer(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text, re.IGNORECASE):
            if any(start <= match.start() < start + len(other) for start, other, _ in found):
                continue  # part of a longer name already found
            before = text[max(0, match.start() - 20):match.start()].lower().split()
            after = text[match.end():match.end() + 16].lower().split()
            times = 1
            if len(before) >= 2 and before[-1] == "times" and before[-2] in _TIMES:
                times = _TIMES[before[-2]]
            elif before and before[-1] in ("twice", "thrice"):
                times = _TIMES[before[-1]]
            elif after and after[0].strip(",.;") in ("twice", "thrice"):
                times = _TIMES[after[0].strip(",.;")]
            elif len(after) >= 2 and after[1].strip(",.;") == "times" and after[0] in _TIMES:
                times = _TIMES[after[0]]
            found.append((match.start(), name, times))
    found.sort()
    return [name for _, name, times in found for _ in range(times)]


_NUMBERED_NAME = re.compile(r"^(?P<prefix>[A-Za-z]+?)[_-]?(?P<number>\d+)$")
_NUMBER = rf"(?:{STATED}|zero)"  # sw0 is "button zero"


def numbered_family(names: Iterable[str], minimum: int = 2) -> tuple[str, dict[int, str]] | None:
    """Names that differ only by their number (sw0 .. sw4), at least `minimum` of them: their prefix
    and number -> name."""
    prefix, family = None, {}
    for name in names:
        match = _NUMBERED_NAME.match(name)
        if match is None or prefix not in (None, match["prefix"].lower()) or int(match["number"]) in family:
            return None
        prefix = match["prefix"].lower()
        family[int(match["number"])] = name
    return (prefix, family) if prefix is not None and len(family) >= minimum else None


def numbers_as_names(text: str, names: Iterable[str], nouns: Iterable[str]) -> str:
    """The text with numbered references written as the names they number ("the button 2 and
    button one" -> "the sw2 and sw1"), when the names form one numbered family and the word before
    the number is the family's prefix or a noun of the tool ("button" of toggle_button). A count
    ("press it two times") is not a reference; a number no name carries is left as written."""
    found = numbered_family(names)
    if found is None:
        return text
    prefix, family = found
    words = sorted({prefix, *(n.lower() for n in nouns if n)}, key=len, reverse=True)
    pattern = re.compile(rf"\b(?:{'|'.join(map(re.escape, words))})s?\s*(?:number\s+|no\.?\s*|#\s*)?"
                         rf"(?P<numbers>{_NUMBER}(?:\s*(?:,\s*and|,|and|or)\s*{_NUMBER})*)\b(?!\s+times?\b)",
                         re.IGNORECASE)

    def named(match: re.Match[str]) -> str:
        numbers = [0 if n.lower() == "zero" else number(n)
                   for n in re.findall(_NUMBER, match["numbers"], re.IGNORECASE)]
        if not all(n in family for n in numbers):
            return match[0]
        return " and ".join(family[n] for n in numbers)

    return pattern.sub(named, text)


def argument_values(calls: Sequence[Mapping[str, Any]]) -> list[str]:
    return [v for c in calls for v in (c.get("arguments") or {}).values() if isinstance(v, str)]


def remaining(request_mentions: Sequence[str], calls: Sequence[Mapping[str, Any]]) -> list[str]:
    """Mentioned names not yet used by a successful call, as a multiset, in mention order."""
    used = Counter(argument_values(calls))
    left = []
    for name in request_mentions:
        if used[name] > 0:
            used[name] -= 1
        else:
            left.append(name)
    return left


def one_dimensional(toolbox: ToolBox) -> bool:
    """One tool with one parameter besides cancel: every mentioned name is one call to make."""
    observe = roles(toolbox)[0]
    acting = [t for t in toolbox.tools if t.name != CANCEL_TOOL and t is not observe]
    return len(acting) == 1 and len(acting[0].params) == 1  # laundry's drop and wash are work too


__all__ = ["Intent", "Result", "TaskState", "argument_values", "call_text", "cannot_grasp", "cannot_grasp_said",
           "mentioned", "numbered_family", "numbers_as_names", "one_dimensional", "read_results", "remaining",
           "results_with_calls", "sentences", "vocabulary"]
