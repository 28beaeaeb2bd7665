"""The real MAGMA-BENCH 2.0.1 against `lava serve`: the proof that its users' software accepts lava.

Needs the consumer environment of ../shared/magma/setup-magma-consumer.sh (`.ci/run` makes it).
Without it the test is skipped locally, and fails when LAVA_REQUIRE_MAGMA=1 (as in CI).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lava.evaluation.consumer import MagmaEnvironment
from servers import lava_process

pytestmark = pytest.mark.magma


PRESETS = [
    "press_button.ButtonPressOrdered",
    'press_button.ButtonPressOrdered={"sequence_of_buttons":["sw1","sw3"],"instruction":"Please press sw1 then sw3."}',
]


def test_magma_bench_runs_press_button_against_scripted_lava(magma: MagmaEnvironment, tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    magma.compile_benchmark(bench, PRESETS, log=tmp_path / "compile.log")
    with magma.planner(tmp_path / "planner.log") as planner_url, \
         lava_process("--backend", "scripted", log=tmp_path / "lava.log") as agent_url:
        result = magma.run_bench(bench, tmp_path / "results", agent_url=agent_url, planner_url=planner_url,
                                 log=tmp_path / "bench.log", timeout_s=900)
    assert result.returncode == 0, (tmp_path / "bench.log").read_text()[-3000:]
    assert result.summary.get("status") == "complete"
    assert len(result.episodes) == len(PRESETS)
    assert "invalid_format" not in result.statuses(), result.statuses()
    # The scripted rule walks the buttons the instruction names, so the explicit episode succeeds.
    explicit = next(e for e in result.episodes if e.episode_id.endswith("001-clean"))
    assert explicit.success, explicit.reason


@pytest.mark.model
def test_magma_bench_runs_press_button_against_the_embedded_model(magma: MagmaEnvironment, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    bench = tmp_path / "bench"
    magma.compile_benchmark(bench, PRESETS, log=tmp_path / "compile.log")
    with magma.planner(tmp_path / "planner.log") as planner_url, \
         lava_process(log=tmp_path / "lava.log", timeout=180) as agent_url:  # `lava serve`, no flags
        result = magma.run_bench(bench, tmp_path / "results", agent_url=agent_url, planner_url=planner_url,
                                 log=tmp_path / "bench.log", timeout_s=1500)
    assert result.returncode == 0, (tmp_path / "bench.log").read_text()[-3000:]
    assert result.summary.get("status") == "complete"
    assert len(result.episodes) == len(PRESETS)
    assert "invalid_format" not in result.statuses(), [(e.status, e.reason) for e in result.episodes]
