"""Deterministic, instant backends for tests, demos and overhead benchmarks. Not an agent's mind.

`ScriptedBackend` answers like a model would (raw text the policy must parse), from either

- a script: a JSON list whose entry *i* answers the *i*-th decision of an interaction (the
  number of MODEL turns already in the input's memory, so it is as stateless as the server).
  An entry is raw model text, a decision object (`{"say": ...}` or `{"tool_calls": [...]}`), or
  a list of those, one per candidate (candidate k takes entry k modulo the list's length);
  past the end of the script the rule below answers;
- or, without a script, one documented rule:
  1. the values of the input's attributes that the last user message mentions, in the order it
     mentions them, are the plan (`known_robots` and `robot_statuses` excluded);
  2. each decision calls the first tool with exactly one parameter on the first free known
     robot, with the next plan value: the count of calls recorded since that user message says
     which one is next;
  3. with nothing (left) to call it says "Done." (or "Understood." to a message with no plan).

`FunctionBackend` wraps any function of a `GenerationRequest`, for tests that need a specific
model behaviour (errors, slowness, garbage) at the backend seam.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..jsontext import json_text
from ..protocol import AgentDecision, ToolCall
from ..situation import Situation
from ..tools import CANCEL_TOOL
from .base import Backend, Capabilities, Completion, GenerationRequest, Usage

ScriptEntry = str | dict[str, Any] | list[Any]
# Tests inspect the latest requests; a long-lived process keeps only this many of them.
KEPT_REQUESTS = 256


def load_script(path: Path) -> list[ScriptEntry]:
    try:
        script = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the script {path}: {exc}") from exc
    if not isinstance(script, list):
        raise ConfigError(f"the script {path} must be a JSON list of answers")
    return script


def _entry_text(entry: Any) -> str:
    return entry if isinstance(entry, str) else json.dumps(entry, ensure_ascii=False)


@lru_cache(maxsize=1024)
def _words(text: str) -> tuple[str, ...]:
    # Cached: every decision of an interaction reads the same user message again.
    return tuple(re.findall(r"\w+(?:[.-]\w+)*", text))


def rule_decision(situation: Situation) -> AgentDecision:
    """The scripted rule (module docstring); pure, so tests can state what it must do."""
    rule = _rule(situation)
    if isinstance(rule, str):
        return AgentDecision(say=rule)
    name, arguments, robot = rule
    return AgentDecision(tool_calls=[ToolCall(name=name, arguments=arguments, target_robot_name=robot)])


def _rule_text(situation: Situation) -> str:
    """`render_decision(rule_decision(situation))`, without building the models in between: the
    overhead benchmark answers every input with it."""
    rule = _rule(situation)
    if isinstance(rule, str):
        return json_text({"say": rule})
    name, arguments, robot = rule
    return json_text({"tool_calls": [{"robot": robot, "name": name, "arguments": arguments}]})


def _rule(situation: Situation) -> str | tuple[str, dict[str, Any], str]:
    """The rule's answer: a text to say, or one call as (tool, arguments, robot)."""
    history = situation.memory.history
    if situation.instruction.type == "user":
        request, calls_done = situation.instruction.content, 0
    else:
        # The latest USER turn, searched from the end (the one the max over all indexes finds).
        last_user = next((i for i in range(len(history) - 1, -1, -1) if history[i].author == "USER"), None)
        if last_user is None:
            return "Done."
        request = history[last_user].content
        calls_done = sum(
            1 for t in history[last_user + 1:] if t.author == "MODEL" and '"action": {}' not in t.content
        )
    vocabulary = {
        value
        for key, values in situation.attributes.items()
        if key not in ("known_robots", "robot_statuses") and isinstance(values, list)
        for value in values
        if isinstance(value, str)
    }
    plan = [word for word in _words(request) if word in vocabulary]
    tool = next(
        (t for t in situation.toolbox.tools if t.name != CANCEL_TOOL and len(t.params) == 1), None
    )
    robots = situation.toolbox.robots or ()
    free = [r for r in robots if r not in situation.toolbox.busy] or list(robots)
    if not plan or tool is None or not free:
        return "Understood." if situation.instruction.type == "user" else "Done."
    if calls_done >= len(plan):
        return "Done."
    return tool.name, {tool.params[0].name: plan[calls_done]}, free[0]


class ScriptedBackend(Backend):
    name = "scripted"
    capabilities = Capabilities(shares_prompt_across_n=True, json_schema=True, deterministic_greedy=True,
                                varies_with_seed=False)

    def __init__(self, script: Sequence[ScriptEntry] | None = None, *, delay_s: float = 0.0,
                 keep_requests: int = KEPT_REQUESTS) -> None:
        self.script = list(script) if script is not None else None
        self.delay_s = delay_s
        self.model = "scripted-rule" if script is None else "scripted-file"
        self.keep_requests = keep_requests
        self.requests: list[GenerationRequest] = []  # the latest `keep_requests` requests, for tests

    @classmethod
    def from_file(cls, path: Path | None, *, delay_s: float = 0.0, keep_requests: int = KEPT_REQUESTS
                  ) -> ScriptedBackend:
        return cls(load_script(path) if path is not None else None, delay_s=delay_s, keep_requests=keep_requests)

    def _answer(self, request: GenerationRequest, candidate: int) -> str:
        situation = request.situation
        if situation is None:
            return json.dumps({"say": "Done."})
        if self.script is not None and (turn := situation.memory.model_turns) < len(self.script):
            entry = self.script[turn]
            if isinstance(entry, list) and entry:
                entry = entry[candidate % len(entry)]
            return _entry_text(entry)
        return _rule_text(situation)

    def _varies(self, request: GenerationRequest) -> bool:
        """Whether candidates may answer differently: only a script entry listing answers does that."""
        situation = request.situation
        return (self.script is not None and situation is not None
                and situation.memory.model_turns < len(self.script)
                and isinstance(self.script[situation.memory.model_turns], list))

    async def generate(self, request: GenerationRequest) -> list[Completion]:
        if self.keep_requests:
            self.requests.append(request)
            if len(self.requests) > 2 * self.keep_requests:
                del self.requests[:-self.keep_requests]
        started = time.perf_counter()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        varies = self._varies(request)
        texts: list[str] = []
        for k in range(request.n):
            # The rule ignores the candidate index: decide once, answer every candidate alike.
            texts.append(self._answer(request, k) if k == 0 or varies else texts[0])
        prompt_chars = sum([len(m.content) for m in request.messages])
        # Timed here, as a model server times itself: callers need not copy each completion to add it.
        took = time.perf_counter() - started
        return [Completion(text=text, finish_reason="stop", duration_s=took, usage=Usage(
                    input_tokens=prompt_chars // 4, output_tokens=len(text) // 4, requests=1 if k == 0 else 0))
                for k, text in enumerate(texts)]


Responder = Callable[[GenerationRequest], Awaitable[Sequence[str | Completion]] | Sequence[str | Completion]]


class FunctionBackend(Backend):
    """A backend whose answers come from a function: the model behaviour under test, at the seam."""

    name = "function"

    def __init__(self, respond: Responder, capabilities: Capabilities | None = None) -> None:
        self.respond = respond
        self.capabilities = capabilities or Capabilities(shares_prompt_across_n=True, json_schema=True)
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> list[Completion]:
        self.requests.append(request)
        answers = self.respond(request)
        if asyncio.iscoroutine(answers) or isinstance(answers, Awaitable):
            answers = await answers
        return [a if isinstance(a, Completion) else Completion(text=a, usage=Usage(requests=1)) for a in answers]


__all__ = ["FunctionBackend", "ScriptedBackend", "load_script", "rule_decision"]
