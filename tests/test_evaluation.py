"""`lava eval`'s own parts: suites, the local benchmark compiler, and the report.

The compiler test runs the real magma_scenarios compiler in the MAGMA venv (skipped locally
without it, required in CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lava.evaluation.conditions import inject_execution_errors
from lava.evaluation.consumer import BenchResult, Compiled, Episode, MagmaEnvironment
from lava.evaluation.runner import AgentConfig, ConfigReport, ScenarioReport, _add_result, render_table, report_json
from lava.evaluation.suite import by_scenario, load_suite, parse_suite


def test_suite_lines_expand_seeds_and_keep_arguments() -> None:
    entries = parse_suite(
        "# comment\n"
        "press_button.ButtonPressOrdered\n"
        'press_button.ButtonPressOrdered={"sequence_of_buttons": ["sw1"]}\n'
        "color_sorting.SortingDefinition seeds=0-2,5\n"
    )
    assert [e.compiled for e in entries] == [
        "press_button.ButtonPressOrdered",
        'press_button.ButtonPressOrdered={"sequence_of_buttons": ["sw1"]}',
        "color_sorting.SortingDefinition@0", "color_sorting.SortingDefinition@1",
        "color_sorting.SortingDefinition@2", "color_sorting.SortingDefinition@5",
    ]
    assert list(by_scenario(entries)) == ["press_button", "color_sorting"]
    with pytest.raises(ValueError, match="line 1"):
        parse_suite("no_scenario_here")


def test_the_shipped_all_suite_covers_every_installed_scenario() -> None:
    scenarios = set(by_scenario(load_suite("all")))
    assert len(scenarios) == 11
    assert {"press_button", "color_sorting", "laundry", "advanced_delivery"} <= scenarios
    single = {e.scenario for e in load_suite("single-robot")}
    assert single == {"press_button", "color_sorting"}


def _bench(tmp_path: Path, *episodes: tuple[str, str]) -> BenchResult:
    result = BenchResult(0, 30.0, tmp_path)
    for episode_id, status in episodes:
        result.episodes.append(Episode(episode_id, "color_sorting", status, status == "success", "why", 4,
                                       tmp_path / f"{episode_id}.json"))
    return result


def test_every_episode_of_a_partial_scenario_is_listed(tmp_path: Path) -> None:
    """A scenario with an episode the planner gave up on is "partial": MAGMA-BENCH writes no episode
    file for any of its episodes, solved ones included, only the progress log and, for the failures,
    result.json (delivery_box on the local planner). The report still counts and names each one."""
    import json

    failures = [{"scenario_id": "delivery_box", "episode_id": f"delivery_box-00{i}-clean",
                 "reason": "Planner error exceeded 3 retries."} for i in (0, 1)]
    (tmp_path / "result.json").write_text(json.dumps({"partial_scenario_ids": ["delivery_box"],
                                                      "infrastructure_failures": failures}))
    attempt = ("2026-12-03T19:27:40 | WARNING | EPISODE_COMPLETED episode=delivery_box-00{i}-clean success={ok} "
               "status={status} duration_seconds=20.1 reason={reason}")
    (tmp_path / "progress.log").write_text("\n".join([
        "2026-12-03T19:27:20 | INFO | EPISODE_STARTED episode=delivery_box-000-clean",
        *(attempt.format(i=0, ok=False, status="infrastructure_failure", reason="Planner error exceeded 3 retries.")
          for _ in range(3)),  # MAGMA-BENCH retries an infrastructure failure
        attempt.format(i=1, ok=False, status="infrastructure_failure", reason="Planner error exceeded 3 retries."),
        attempt.format(i=2, ok=True, status="success", reason=""),
        "2026-12-03T19:29:23 | WARNING | SCENARIO_PARTIAL scenario=delivery_box reason=infrastructure_failure",
    ]) + "\n")
    result = BenchResult.read(tmp_path, 0, 10.0)
    assert sorted((e.episode_id, e.status, e.success) for e in result.episodes) == [
        ("delivery_box-000-clean", "infrastructure_failure", False),
        ("delivery_box-001-clean", "infrastructure_failure", False),
        ("delivery_box-002-clean", "success", True)]
    report = ScenarioReport("delivery_box")
    _add_result(report, result, 4, 2.0)
    assert (report.episodes, report.successes) == (3, 1)
    assert "infrastructure_failure 2" in render_table([ConfigReport(AgentConfig("lava", ()), [report])])


def test_an_infrastructure_failure_only_result_json_names_is_listed_too(tmp_path: Path) -> None:
    import json

    episodes = tmp_path / "scenarios" / "delivery_box" / "episodes"
    episodes.mkdir(parents=True)
    (episodes / "delivery_box-002-clean.json").write_text(json.dumps(
        {"episode_id": "delivery_box-002-clean", "success": True, "terminal": {"status": "success"}, "trace": []}))
    (tmp_path / "result.json").write_text(json.dumps({"infrastructure_failures": [
        {"scenario_id": "delivery_box", "episode_id": "delivery_box-000-clean", "reason": "Planner error."}]}))
    result = BenchResult.read(tmp_path, 0, 10.0)
    assert sorted((e.episode_id, e.status) for e in result.episodes) == [
        ("delivery_box-000-clean", "infrastructure_failure"), ("delivery_box-002-clean", "success")]


def test_progress_counts_an_episode_once_whatever_its_attempts() -> None:
    import io

    from lava.evaluation.runner import Progress

    stream = io.StringIO()
    progress = Progress(3, stream)
    line = "| EPISODE_COMPLETED episode={} success={} status={} duration_seconds=20.1 reason="
    attempts = [("db-000", False, "infrastructure_failure"), ("db-000", False, "infrastructure_failure"),
                ("db-001", True, "success"), ("db-000", True, "success")]
    for episode, ok, status in attempts:
        progress.episode("lava", line.format(episode, ok, status))
    assert (progress.done, progress.successes) == (2, 2)
    assert stream.getvalue().splitlines()[-1].startswith("[" + "#" * 20)
    assert "2/3 episodes, 2 solved" in stream.getvalue().splitlines()[-1]


def test_results_of_several_roots_are_reported_as_one_scenario(tmp_path: Path) -> None:
    report = ScenarioReport("color_sorting")
    _add_result(report, _bench(tmp_path, ("cs-000", "success"), ("cs-002", "budget_exceeded")), 8, 4.0)
    _add_result(report, _bench(tmp_path, ("cs-001", "success")), 4, 2.0)
    assert (report.episodes, report.successes, report.decisions) == (3, 2, 12)
    assert report.statuses == {"success": 2, "budget_exceeded": 1}
    assert report.seconds_per_decision == pytest.approx(0.5)
    assert [f["episode"] for f in report.failures] == ["cs-002"]
    config = ConfigReport(AgentConfig("lava", ("--policy", "magma")), [report])
    table = render_table([config])
    assert "color_sorting" in table and "2/3" in table and "budget_exceeded 1" in table
    assert report_json([config])["configs"][0]["total"]["success_rate"] == pytest.approx(2 / 3, abs=1e-4)


@pytest.mark.magma
def test_presets_with_other_tools_get_their_own_benchmark_root(magma: MagmaEnvironment, tmp_path: Path) -> None:
    """MAGMA-BENCH runs every episode of a root with the tools class its scenario.json names. The
    color_sorting presets disagree (CrossColorPreset takes by colour and source, the others by
    name), so one shared root made the environment refuse the very arguments the agent was shown."""
    out = tmp_path / "color_sorting"
    plan = {str(out): ["color_sorting.CleanTablePreset", "color_sorting.CrossColorPreset",
                       "color_sorting.SortingDefinition@0"]}
    outcome = magma.compile_plan(plan, tmp_path / "compile.log")
    compiled = outcome[str(out)]
    assert isinstance(compiled, Compiled) and compiled.error is None, (tmp_path / "compile.log").read_text()
    assert compiled.roots[0] == out and len(compiled.roots) == 2

    def take_parameters(root: Path) -> tuple[str, set[frozenset[str]]]:
        scenario = json.loads((root / "color_sorting" / "scenario.json").read_text())
        shown = set()
        for semantic in root.glob("color_sorting/*/semantic_000/semantic.json"):
            tools = json.loads(semantic.read_text())["tool_equivalence"]
            shown.add(frozenset(tools["take"]["parameters"].values()))
        return scenario["tools_type"], shown

    by_name = dict(take_parameters(root) for root in compiled.roots)
    assert by_name == {
        "magma_scenarios.scenarios.color_sorting.instance_cs_tool:InstanceColorTools": {frozenset({"name"})},
        "magma_scenarios.scenarios.color_sorting.cs_tool:ColorDetectionTools": {frozenset({"obj_color", "source"})},
    }
    total = sum(json.loads((root / "benchmark.json").read_text())["total_episodes"] for root in compiled.roots)
    assert total == 3


@pytest.mark.magma
def test_an_entry_that_cannot_compile_is_skipped_and_named_not_its_whole_scenario(magma: MagmaEnvironment,
                                                                                   tmp_path: Path) -> None:
    """color_sorting.CSB is a benchmark bundle the manifest lists among the presets, and has no
    situation_init: it used to take SortingDefinition@2 down with it."""
    out = tmp_path / "color_sorting"
    outcome = magma.compile_plan({str(out): ["color_sorting.CSB", "color_sorting.SortingDefinition@0"]},
                                 tmp_path / "compile.log")
    compiled = outcome[str(out)]
    assert compiled.error is None, (tmp_path / "compile.log").read_text()
    assert list(compiled.skipped) == ["color_sorting.CSB"] and "situation_init" in compiled.skipped["color_sorting.CSB"]
    total = sum(json.loads((root / "benchmark.json").read_text())["total_episodes"] for root in compiled.roots)
    assert total == 1
    report = ConfigReport(AgentConfig("lava"), [ScenarioReport("color_sorting", episodes=1, successes=1,
                                                               statuses={"success": 1},
                                                               not_compiled=dict(compiled.skipped))])
    assert "not compiled: color_sorting.CSB" in render_table([report])


@pytest.mark.magma
def test_a_larger_tool_call_budget_compiles_longer_episodes_of_the_same_seed(magma: MagmaEnvironment,
                                                                              tmp_path: Path) -> None:
    """`lava eval --max-tool-calls 40`: MAGMA-GEN's generator keeps adding requests until the budget is
    filled, so the same definition and seed make an episode of more requests; presets stay as they are."""
    entries = ["make_coffee.SimpleDefinition@500", "press_button.ButtonPressOrdered"]

    def compiled(budget: int | None) -> list[tuple[int, int]]:
        outs = {str(tmp_path / f"{budget}" / entry.split(".")[0]): [entry] for entry in entries}
        outcome = magma.compile_plan(outs, tmp_path / f"compile-{budget}.log", max_tool_calls=budget)
        shapes = []
        for out in outs:
            assert outcome[out].error is None, (tmp_path / f"compile-{budget}.log").read_text()
            episode = next(Path(out).glob("*/skeleton_000/semantic_000/episodes/*.json"))
            data = json.loads(episode.read_text())
            shapes.append((len(data["stages"]), data["metadata"]["clean_oracle_tool_calls"]))
        return shapes

    (short_coffee, short_preset), (long_coffee, long_preset) = compiled(None), compiled(40)
    assert compiled(10) == [short_coffee, short_preset]
    # (stages, oracle tool calls): the generator stops once a request takes it past the budget, and
    # counts a request's target calls, not the oracle's.
    assert long_coffee[0] >= 2 * short_coffee[0] and long_coffee[1] >= 2 * short_coffee[1], (short_coffee, long_coffee)
    assert long_preset == short_preset


def test_a_tool_call_budget_below_one_is_refused_before_anything_starts(capsys: pytest.CaptureFixture) -> None:
    from lava.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["eval", "smoke", "--max-tool-calls", "0"])
    assert exited.value.code == 2 and "--max-tool-calls: must be at least 1" in capsys.readouterr().err


def test_execution_errors_go_to_every_act_stage_and_only_there(tmp_path: Path) -> None:
    episodes = tmp_path / "packaging" / "skeleton_000" / "semantic_000" / "episodes"
    episodes.mkdir(parents=True)
    stages = [{"kind": "serialized", "id": "s0", "expected_behavior": "act", "active_errors": []},
              {"kind": "serialized", "id": "s1", "expected_behavior": "answer", "active_errors": []},
              {"kind": "declarative", "id": "s2", "type": "act", "active_errors": []},
              {"kind": "declarative", "id": "s3", "type": "acknowledge", "active_errors": []}]
    (episodes / "packaging-000-clean.json").write_text(json.dumps({"condition": "clean", "stages": stages}))
    assert inject_execution_errors(tmp_path) == 2
    written = json.loads((episodes / "packaging-000-clean.json").read_text())
    assert [len(stage["active_errors"]) for stage in written["stages"]] == [1, 0, 1, 0]
    assert written["stages"][0]["active_errors"][0]["runtime_arguments"] == {"remaining_failures": 1}


@pytest.mark.magma
def test_injected_execution_errors_are_what_magma_bench_loads(magma: MagmaEnvironment, tmp_path: Path) -> None:
    """MAGMA-BENCH's own loader takes the injected episodes, and each act stage holds the error."""
    out = tmp_path / "packaging"
    compiled = magma.compile_plan({str(out): ["packaging.MainDefinition@0"]}, tmp_path / "compile.log")[str(out)]
    assert compiled.error is None, (tmp_path / "compile.log").read_text()
    assert inject_execution_errors(out) >= 1
    probe = ("import sys; from pathlib import Path; from magma_bench.loader.loader import load_scenarios\n"
             "from magma_bench.artifacts.runtime import deserialize_stage\n"
             "for scenario in load_scenarios(Path(sys.argv[1])):\n"
             "    for episode in scenario.episodes:\n"
             "        for stage in map(deserialize_stage, episode.stages):\n"
             "            print(stage.benchmark_expected_behavior,"
             " [type(e).__name__ for e in stage.get_possible_errors()], stage.active_error_arguments_override)")
    shown = subprocess.run([magma.python, "-c", probe, str(out)], capture_output=True, text=True, env=magma.environ(),
                           check=True).stdout.splitlines()
    acts = [line for line in shown if line.startswith("act ")]
    assert acts and all("['OneShotToolFailureError'] {'OneShotToolFailureError': {'remaining_failures': 1}}" in line
                        for line in acts), shown
    assert all("[]" in line for line in shown if not line.startswith("act ")), shown


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout.split()
        found.update(int(c) for c in children)
        frontier += [int(c) for c in children]
    return found


@pytest.mark.magma
def test_a_terminated_eval_stops_the_agent_planner_and_simulator_it_started(magma: MagmaEnvironment,
                                                                             tmp_path: Path) -> None:
    env_file = os.environ.get("LAVA_MAGMA_ENV", "/tmp/magma-e2e/env.sh")
    process = subprocess.Popen([sys.executable, "-m", "lava.cli", "eval", "smoke", "--agent", "--backend scripted",
                                "--out", str(tmp_path / "run"), "--magma-env", env_file],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        children: set[int] = set()
        # Wait until the agent, the planner and magma-bench are all up.
        while time.monotonic() < deadline and len(children := _descendants(process.pid)) < 3:
            assert process.poll() is None, "lava eval ended before its children started"
            time.sleep(0.5)
        assert len(children) >= 3
        process.terminate()
        process.wait(60)
        time.sleep(1)
        alive = {pid for pid in children if Path(f"/proc/{pid}").exists()
                 and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()}
        assert not alive, [Path(f"/proc/{pid}/cmdline").read_bytes()[:120] for pid in alive]
    finally:
        if process.poll() is None:
            process.kill()
