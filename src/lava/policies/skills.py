"""Skills: deterministic planners for task shapes a small model cannot plan (two robots sharing
zones, a robot walking between halls with a tray, ...).

A skill recognises its task from the tools and the texts it was given, keeps its own JSON notes in
the task state (`state.notes[skill.name]`, so any replica continues from it), and proposes the next
decision, or None to leave the turn to the rest of the policy. Skills never call the model.

Each turn the policy calls, in order:
1. `skill.observe(situation, state, notes)` after the feedback was folded into the task state
   (`state.done_calls`, `state.pending_failed`, `state.last_feedback`, ...): update the notes;
2. `skill.next(situation, state, notes)` when the current request asks for action: the next
   decision, or None.
Notes are a plain dict the skill mutates; the policy stores it back.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Protocol

from ..protocol import AgentDecision
from ..situation import Situation
from .task_state import TaskState


class Skill(Protocol):
    name: str

    def observe(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> None: ...

    def next(self, situation: Situation, state: TaskState, notes: dict[str, Any]) -> AgentDecision | None: ...


# name -> (module, class); imported when first used
SKILLS: dict[str, tuple[str, str]] = {
    "orders": ("lava.policies.orders", "OrdersSkill"),
    "returns": ("lava.policies.returns", "ReturnsSkill"),
    "halls": ("lava.policies.halls", "HallsSkill"),  # robots carrying a tray between halls
    "zones": ("lava.policies.zones", "ZonesSkill"),  # robots sharing areas (bi_robot_sorting)
    "kitchen": ("lava.policies.kitchen", "KitchenSkill"),  # a washer and a storer clearing a table
    "procedures": ("lava.policies.procedures", "ProceduresSkill"),  # a rule's ordered steps (coffee, laundry)
    "cubes": ("lava.policies.cubes", "CubesSkill"),  # cubes counted by color, taken by color and place
}

_loaded: list[Skill] | None = None


def skills() -> list[Skill]:
    global _loaded
    if _loaded is None:
        _loaded = [getattr(import_module(module), cls)() for module, cls in SKILLS.values()]
    return _loaded


def _keep(state: TaskState, name: str, notes: dict[str, Any]) -> None:
    # Only skills that found their task write notes: the memory of every other task stays as it was.
    if notes or name in state.notes:
        state.notes = {**state.notes, name: notes}


def observe_all(situation: Situation, state: TaskState) -> None:
    for skill in skills():
        notes = dict(state.notes.get(skill.name) or {})
        skill.observe(situation, state, notes)
        _keep(state, skill.name, notes)


def next_decision(situation: Situation, state: TaskState) -> AgentDecision | None:
    for skill in skills():
        notes = dict(state.notes.get(skill.name) or {})
        decision = skill.next(situation, state, notes)
        _keep(state, skill.name, notes)
        if decision is not None:
            return decision
    return None


__all__ = ["SKILLS", "Skill", "next_decision", "observe_all", "skills"]
