"""Workloads for `lava bench`, built from requests captured from real MAGMA runs.

A MAGMA-GEN call carries up to 10 inputs of one scenario, each the head of its own generation
branch: the same tools and attributes, histories that share a beginning and then diverge where
the branches did (GEN injects failures and mission updates). `gen_batch` rebuilds that shape
from a captured bench episode (its user request and the feedback of every step, each naming the
call that produced it), diverging branch i with a failed-then-retried call at its own step.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..memory import clone_json

EPISODE_FIXTURE = "bench_color_sorting.requests.jsonl"
RETRY_FEEDBACK = ("{robot}: {name} failed with message: The requested action failed due to a temporary execution "
                  "error. Please retry.")


def fixtures_dir(explicit: Path | None = None) -> Path:
    """Captured requests: the given folder, else the checkout's tests/fixtures, else ../shared/fixtures."""
    root = Path(__file__).resolve().parents[3]
    for candidate in (explicit, root / "tests" / "fixtures", root.parent / "shared" / "fixtures"):
        if candidate is not None and (candidate / EPISODE_FIXTURE).is_file():
            return candidate
    raise FileNotFoundError(
        f"no captured MAGMA requests ({EPISODE_FIXTURE}) found; run lava bench from a checkout or pass --fixtures DIR"
    )


def read_requests(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass(frozen=True)
class Episode:
    """One captured episode as (history author, content) entries, with the scene it ran in."""

    template: dict[str, Any]  # the first input: tools, attributes, extra_keys
    entries: tuple[tuple[str, str], ...]  # USER, MODEL, SYSTEM, MODEL, SYSTEM, ...

    @classmethod
    def from_requests(cls, requests: list[dict[str, Any]]) -> Episode:
        inputs = [request["inputs"][0] for request in requests]
        entries: list[tuple[str, str]] = [("USER", inputs[0]["instruction"]["content"])]
        for entry in inputs[1:]:
            feedback = entry["instruction"]["content"]
            previous = json.loads(feedback).get("previous_tool_call") or {}
            entries.append(("MODEL", json.dumps({"say": "", "action": previous})))
            entries.append(("SYSTEM", feedback))
        return cls(inputs[0], tuple(entries))

    def calls(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Index and action of every MODEL entry."""
        for index, (author, content) in enumerate(self.entries):
            if author == "MODEL":
                yield index, json.loads(content)["action"]


def branch_history(episode: Episode, diverge_at: int, length: int) -> tuple[list[dict[str, str]], str]:
    """`length` history entries following the episode, with the call at MODEL entry `diverge_at`
    failing once and being retried; returns the history and the instruction that comes next."""
    entries = list(episode.entries)
    models = [index for index, _ in episode.calls()]
    at = models[diverge_at % len(models)]
    action = json.loads(entries[at][1])["action"]
    robot, call = next(iter(action.items()))
    failure = json.dumps({"infos": RETRY_FEEDBACK.format(robot=robot, name=call["name"]),
                          "previous_tool_call": action})
    entries[at + 1:at + 1] = [("SYSTEM", failure), entries[at]]
    while len(entries) < length + 1:  # a longer history than the episode: replay its steps
        entries += entries[1:]
    history = [{"author": author, "content": content} for author, content in entries[:length]]
    following = entries[length]
    if following[0] != "SYSTEM":  # end on feedback, as GEN asks after each executed call
        history.pop()
        following = entries[length - 1]
    return history, following[1]


def gen_batch(fixtures: Path, *, inputs: int = 10, candidates: int = 2, history: int = 20,
              rules: tuple[str, ...] = ("Always tell the user when the whole task is done.",)) -> dict[str, Any]:
    """A MAGMA-GEN-shaped request: `inputs` branches of one episode, `candidates` each, sampling."""
    episode = Episode.from_requests(read_requests(fixtures / EPISODE_FIXTURE))
    batch = []
    for index in range(inputs):
        entries, instruction = branch_history(episode, index, history)
        entry = clone_json(episode.template)
        entry.update(
            id=index,
            instruction={"type": "env", "content": instruction},
            memory={"memory_list": list(rules), "history": entries},
            num_outputs=candidates,
            extra_keys={},  # GEN samples: no inference_mode
        )
        batch.append(entry)
    return {"request_id": f"bench-gen-{inputs}x{candidates}", "inputs": batch}


def small_requests(fixtures: Path) -> list[dict[str, Any]]:
    """Every captured request, for long soak loops."""
    requests = []
    for path in sorted(fixtures.glob("*.requests.jsonl")):
        requests += read_requests(path)
    return requests


__all__ = ["Episode", "branch_history", "fixtures_dir", "gen_batch", "read_requests", "small_requests"]
