"""The episode runner the packing, tables-and-warehouse and procedures tests share: MagmaPolicy driven
through a small world stage by stage, as MAGMA-BENCH plays a task.

Each stage has a budget of tool calls. Between two action stages MAGMA delays the next request: the
agent's next call is held (robot_statuses says "RUNNING take(name=fish)") while the user speaks, and
an empty decision resumes it. Tool results come back in MAGMA's feedback format. The model sits behind
a backend that records every request, and by default fails if asked at all.

The worlds, their goals and what each episode must end with stay in the test modules.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from conftest import user_input
from lava.backends.base import GenerationRequest
from lava.backends.scripted import FunctionBackend
from lava.engine import Engine
from lava.policies.magma import MagmaPolicy
from lava.protocol import AgentRequest
from lava.settings import Settings

CANCEL = {"name": "cancel_current_action", "description": "Cancel the current action running on the targeted robot.",
          "arguments": {}}


def tool(name: str, description: str, /, **params: str) -> dict:
    """A tool as MAGMA sends it: string parameters, each with its description."""
    return {"name": name, "description": description,
            "arguments": {p: {"description": d, "type": "str"} for p, d in params.items()}}


class World(Protocol):
    tools: list[dict]
    attributes: dict[str, Any]
    calls: list[str]

    def run(self, name: str, arguments: dict) -> tuple[bool, str]: ...


@runtime_checkable
class Resettable(Protocol):
    """A world whose scene a stage can put back (MAGMA's reset_at_end)."""

    def reset(self) -> None: ...


@dataclass(frozen=True)
class Stage:
    """What the user says (None: the stage goes on from the last tool result), when the stage's goal
    is met and in how many tool calls, and whether it ends with a text answer. A stage without a goal
    (a rule, a question) wants words and no call.

    `direct` (MAGMA's answer_after_completion): the next instruction comes right after the goal rather
    than while the agent's next call is held. `reset` (reset_at_end): the world's scene is put back
    after the stage, so that a sorted object can be sorted again in the next cycle.

    `lookups` (MAGMA's allow_tools_before_answer): a text stage may first call these tools, at most
    `budget` times, and then answer."""

    say: str | None
    goal: Callable[[Any], bool] | None = None
    budget: int = 0
    answer: bool = False
    direct: bool = False
    reset: bool = False
    lookups: frozenset[str] = frozenset()

    @property
    def acts(self) -> bool:
        return self.goal is not None


class MagmaNames:
    """A world for a compiled episode's tools, in its semantic variation's names (MAGMA-GEN renames tools
    and their parameters): `run` records each call and hands it to `answer` in MAGMA's own names."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.tools = [CANCEL, *spec["tools"]]
        self.magma: dict[str, tuple[str, dict[str, str]]] = {name: (same[0], same[1])
                                                             for name, same in spec["magma_names"].items()}
        self.calls: list[str] = []

    def run(self, name: str, arguments: dict) -> tuple[bool, str]:
        self.calls.append(f"{name}({', '.join(map(str, arguments.values()))})")
        if (call := self.magma_call(name, arguments)) is None:
            return False, f"{name} is not a known tool."
        return self.answer(*call)

    def answer(self, name: str, arguments: dict) -> tuple[bool, str]:
        """The tool's result, as MAGMA words it, for a call in MAGMA's own names."""
        raise NotImplementedError

    def named(self, magma_name: str) -> str:
        """This episode's name for the tool MAGMA calls `magma_name`."""
        return next(name for name, (same, _) in self.magma.items() if same == magma_name)

    def fails(self, magma_names: set[str]) -> Callable[[str], bool]:
        """`episode`'s `fails` for the tools MAGMA calls `magma_names`."""
        return lambda name: name in self.magma and self.magma[name][0] in magma_names

    def magma_call(self, name: str, arguments: dict) -> tuple[str, dict] | None:
        """The call in MAGMA's own names, None for a tool the episode does not have."""
        if name not in self.magma:
            return None
        same, params = self.magma[name]
        return same, {params.get(k, k): v for k, v in arguments.items()}


def feedback(call: dict, ok: bool, message: str) -> dict:
    """A tool result as MAGMA reports it to the agent."""
    robot = call["target_robot_name"]
    return {"type": "env", "content": json.dumps({
        "infos": f"{robot}: {call['name']} {'succeed' if ok else 'failed'} with message: {message}",
        "previous_tool_call": {robot: {"name": call["name"], "arguments": call["arguments"]}}})}


# MAGMA's OneShotToolFailureError, as the agent reads it.
EXECUTION_ERROR = "The requested action failed due to a temporary execution error. Please retry."


def running(call: dict) -> str:
    """The robot status MAGMA shows while `call` is held."""
    return f"RUNNING {call['name']}({', '.join(f'{k}={v}' for k, v in call['arguments'].items())})"


Model = Callable[[GenerationRequest], list[str]]
Asked = list[tuple[int, GenerationRequest]]  # each model request, with the number of the stage that made it
# What the agent's decision, made while the user speaks after stage `number`, starts and MAGMA holds.
Hold = Callable[[int, dict], dict | None]


def no_model(req: GenerationRequest) -> list[str]:
    raise AssertionError(f"the model was asked ({req.component}): {req.messages[-1].content[-300:]}")


def one_call(number: int, decision: dict) -> dict | None:
    """The strict reading: the decision starts exactly one call."""
    (call,) = decision["tool_calls"]
    return call


def agent(tools: list[dict], attributes: dict[str, Any], rules: list[str]) -> Callable[[dict], dict]:
    """MagmaPolicy behind the engine, the model failing if asked: `decide(instruction)` answers one input
    and carries the memory to the next. `attributes` is read at every turn (robot_statuses change)."""
    eng = Engine(MagmaPolicy(FunctionBackend(no_model), Settings(backend="scripted")))
    memory: dict = {"memory_list": list(rules), "history": []}

    def decide(instruction: dict) -> dict:
        nonlocal memory
        entry = user_input(instruction["content"], memory=memory, tools=tools, attributes=attributes)
        entry["instruction"] = instruction
        (out,) = asyncio.run(eng.respond(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})))
        assert out["status"] == "completed", out["error"]
        memory = out["memory"]
        return out["output"]
    return decide


def episode(world: World, stages: list[Stage], rules: list[str], model: Model = no_model,
            hold: Hold = one_call, fails: Callable[[str], bool] | None = None) -> tuple[list[str], Asked]:
    """Play the stages in order, failing on any broken expectation; returns what was said in words
    and each model request (`asked`). The default model fails when asked, but the engine may recover
    from a failing backend: a caller that wants no model at all checks that `asked` is empty.
    `fails`: MAGMA-BENCH's execution_error condition; the first call of each action stage to a tool it
    names (the tools that declare MAGMA's OneShotToolFailureError) fails before it runs, with MAGMA's
    message, and the stage forgives it."""
    asked: Asked = []
    number = 0

    def backend(req: GenerationRequest) -> list[str]:
        asked.append((number, req))
        return model(req)

    eng = Engine(MagmaPolicy(FunctionBackend(backend), Settings(backend="scripted")))
    memory: dict = {"memory_list": list(rules), "history": []}
    status, held, said = "FREE", None, []

    def decide(instruction: dict) -> dict:
        nonlocal memory
        entry = user_input(instruction["content"], memory=memory, tools=world.tools,
                           attributes={**world.attributes, "robot_statuses": {"panda": status}})
        entry["instruction"] = instruction
        (out,) = asyncio.run(eng.respond(AgentRequest.model_validate({"request_id": "r", "inputs": [entry]})))
        assert out["status"] == "completed", (f"stage {number} (model asked: {[r.component for _, r in asked]}): "
                                              f"{out.get('error') or out}")
        memory = out["memory"]
        return out["output"]

    def attempt(call: dict, failed_once: bool) -> tuple[bool, str, bool]:
        """The call's result, and whether it was the stage's one forgiven execution error."""
        if fails is not None and not failed_once and fails(call["name"]):
            return False, EXECUTION_ERROR, True
        return (*world.run(call["name"], call["arguments"]), False)

    result: dict | None = None  # the feedback of the last tool call
    for number, stage in enumerate(stages):
        instruction = {"type": "user", "content": stage.say} if stage.say else result
        assert instruction is not None, f"stage {number} has nothing to go on"
        calls = 0
        failed_once = False
        while stage.acts and not stage.goal(world):
            decision = decide(instruction)
            if decision["tool_calls"]:
                (call,) = decision["tool_calls"]
                if held is not None:
                    # A held call can only be cancelled: the robot is busy with it. MAGMA's skill
                    # manager drops the suspended call before its executor counts calls: it is free.
                    assert call["name"] == CANCEL["name"], f"{call} while the robot was {status}"
                    ok, message, held, status = True, f"{held['name']} was cancelled.", None, "FREE"
                    calls -= 1
                else:
                    ok, message, forgiven = attempt(call, failed_once)
                    failed_once |= forgiven
                    calls -= forgiven
            else:
                assert not decision["say"], f"stage {number} said {decision['say']!r} before its goal: {world.calls}"
                assert held is not None, f"stage {number}: an empty decision with no call held: {world.calls}"
                call, held, status = held, None, "FREE"  # the held call goes on
                ok, message, forgiven = attempt(call, failed_once)
                failed_once |= forgiven
                calls -= forgiven
            calls += 1
            assert calls <= stage.budget, f"stage {number} over its budget of {stage.budget}: {world.calls}"
            instruction = result = feedback(call, ok, message)
        following = stages[number + 1] if number + 1 < len(stages) else None
        if not stage.acts or stage.answer:
            decision = decide(instruction)
            looked = 0
            while decision["tool_calls"] and stage.lookups:
                (call,) = decision["tool_calls"]
                assert call["name"] in stage.lookups, f"stage {number} allows {sorted(stage.lookups)}, not {call}"
                looked += 1
                assert looked <= stage.budget, f"stage {number} over its {stage.budget} lookups: {world.calls}"
                ok, message = world.run(call["name"], call["arguments"])
                instruction = result = feedback(call, ok, message)
                decision = decide(instruction)
            assert decision["say"] and not decision["tool_calls"], f"stage {number} wanted words: {decision}"
            said.append(decision["say"])
        elif following is not None and following.say and following.acts and not stage.direct:
            # Delayed input: the agent's next decision starts while the user speaks; its call is held.
            call = hold(number, decide(instruction))
            if call is not None:
                held, status = call, running(call)
        if stage.reset:
            assert isinstance(world, Resettable), f"stage {number} resets a world without a scene to reset"
            world.reset()
    assert held is None, f"{held} was never resumed"
    return said, asked


def same_answer(said: str, wanted: str) -> bool:
    """Whether words are MAGMA's own answer to its question, but for case and a closing full stop."""
    return said.strip().rstrip(".").lower() == wanted.strip().rstrip(".").lower()


def acknowledged(said: str, rule: str) -> bool:
    """Whether words take a rule in: the rule repeated, or an acknowledgement."""
    return rule in said or "understood" in said.lower() or "noted" in said.lower()
