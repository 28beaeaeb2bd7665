"""Episode conditions beyond the clean one MAGMA's local compiler writes.

MAGMA-BENCH's published benchmark also runs each task under `execution_error`: a stage's calls
fail now and then, before they run ("The requested action failed due to a temporary execution
error. Please retry."), and the agent must carry on. The errors are MAGMA's own
(`OneShotToolFailureError`), attached to a stage as `active_errors`, and the benchmark forgives the
failed calls. Only the tools that declare support for that error fail, as in the benchmark.

The episodes keep their ids and their `clean` condition: the benchmark's `execution_error` episodes
are also paired with their clean control, which a local run has no use for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ONE_SHOT_FAILURE = "magma_scenarios.templates.errors.take_errors:OneShotToolFailureError"


def one_shot_failure(failures: int = 1) -> dict[str, Any]:
    """An `active_errors` entry: the first `failures` calls of the stage that the error supports fail."""
    return {"error_type": ONE_SHOT_FAILURE,
            "constructor_arguments": {"failure_probability": 1.0, "failure_count": failures},
            "runtime_arguments": {"remaining_failures": failures}}


def _acts(stage: dict[str, Any]) -> bool:
    kind = stage.get("expected_behavior") if stage.get("kind") == "serialized" else stage.get("type")
    return kind == "act"


def inject_execution_errors(root: Path, failures: int = 1) -> int:
    """Give every act stage of the compiled benchmark at `root` a one-shot failure; returns how many."""
    stages = 0
    for path in sorted(root.glob("*/skeleton_*/semantic_*/episodes/*.json")):
        episode = json.loads(path.read_text())
        for stage in episode["stages"]:
            if _acts(stage):
                stage["active_errors"] = [one_shot_failure(failures)]
                stages += 1
        path.write_text(json.dumps(episode, indent=2))
    return stages


__all__ = ["ONE_SHOT_FAILURE", "inject_execution_errors", "one_shot_failure"]
