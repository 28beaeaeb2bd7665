"""`lava eval`: compile a suite, run the real MAGMA-BENCH against lava, and report per scenario.

One compiled benchmark directory per scenario (the local compiler's unit; a scenario whose presets
use different tools classes gets one root per class, reported together), shared by every agent
configuration compared, so configurations face exactly the same episodes. Each configuration
gets its own `lava serve` process; its decision latency is read from that process's /metrics.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx2 as httpx

from ..processes import free_port, lava_serve_command, serving
from .conditions import inject_execution_errors
from .consumer import BenchResult, Compiled, MagmaEnvironment
from .suite import SuiteEntry, by_scenario

STATUSES = ("success", "invalid_format", "textual_hallucination", "non_requested_action", "non_physical_exceeded",
            "budget_exceeded", "env_failure", "judge_failure", "infrastructure_failure")


@dataclass(frozen=True)
class AgentConfig:
    label: str
    serve_args: tuple[str, ...] = ()
    url: str | None = None  # an agent that is already running; serve_args are ignored then


@dataclass
class ScenarioReport:
    scenario: str
    episodes: int = 0
    successes: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    agent_turns: int = 0
    decisions: int = 0
    decision_seconds: float = 0.0
    bench_seconds: float = 0.0
    failures: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    not_compiled: dict[str, str] = field(default_factory=dict)  # suite entry: the compiler's error

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def seconds_per_decision(self) -> float | None:
        return self.decision_seconds / self.decisions if self.decisions else None


@dataclass
class ConfigReport:
    config: AgentConfig
    scenarios: list[ScenarioReport] = field(default_factory=list)

    def total(self) -> ScenarioReport:
        total = ScenarioReport("all")
        for s in self.scenarios:
            total.episodes += s.episodes
            total.successes += s.successes
            total.agent_turns += s.agent_turns
            total.decisions += s.decisions
            total.decision_seconds += s.decision_seconds
            total.bench_seconds += s.bench_seconds
            for status, count in s.statuses.items():
                total.statuses[status] = total.statuses.get(status, 0) + count
            total.not_compiled.update(s.not_compiled)
        return total


class Progress:
    """One line that redraws itself on a terminal, plain lines elsewhere (CI logs)."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total, self.done, self.successes, self.stream = total, 0, 0, stream
        self.tty = stream.isatty()
        self.outcomes: dict[tuple[str, str], bool] = {}

    def episode(self, label: str, line: str) -> None:
        # MAGMA-BENCH retries an episode the infrastructure ended, a line per attempt: an episode
        # counts once, with its latest outcome.
        episode = re.search(r"episode=(\S+)", line)
        self.outcomes[(label, episode.group(1) if episode else f"#{len(self.outcomes)}")] = "success=True" in line
        self.done, self.successes = len(self.outcomes), sum(self.outcomes.values())
        status = re.search(r"status=(\S+)", line)
        width = 30
        filled = int(width * self.done / max(1, self.total))
        bar = "#" * filled + "." * (width - filled)
        text = (f"[{bar}] {self.done}/{self.total} episodes, {self.successes} solved | {label}: "
                f"{status.group(1) if status else '?'}")
        self.stream.write(("\r" + text.ljust(110)) if self.tty else text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def _decision_metrics(url: str) -> tuple[float, float]:
    """(count, sum) of lava_decision_seconds from an agent's /metrics; zeros if it has none."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0, 0.0
    count = re.search(r"^lava_decision_seconds_count (\S+)$", text, re.MULTILINE)
    total = re.search(r"^lava_decision_seconds_sum (\S+)$", text, re.MULTILINE)
    return (float(count.group(1)) if count else 0.0, float(total.group(1)) if total else 0.0)


@contextlib.contextmanager
def running_agent(config: AgentConfig, log: Path, timeout: float = 300) -> Iterator[str]:
    if config.url:
        yield config.url.rstrip("/")
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(lava_serve_command(port, *config.serve_args), f"{url}/health", log=log, timeout=timeout,
                 stop_timeout=20):
        yield url


def compile_suite(magma: MagmaEnvironment, entries: Sequence[SuiteEntry], out: Path, *,
                  max_tool_calls: int | None = None) -> dict[str, Compiled]:
    plan = {str(out / scenario): [e.compiled for e in group] for scenario, group in by_scenario(list(entries)).items()}
    out.mkdir(parents=True, exist_ok=True)
    return magma.compile_plan(plan, out / "compile.log", max_tool_calls=max_tool_calls)


def _add_result(report: ScenarioReport, result: BenchResult, decisions: float, seconds: float) -> None:
    report.bench_seconds += result.seconds
    report.decisions += int(decisions)
    report.decision_seconds += seconds
    for episode in result.episodes:
        report.episodes += 1
        report.successes += episode.success
        report.agent_turns += episode.agent_turns
        report.statuses[episode.status] = report.statuses.get(episode.status, 0) + 1
        if not episode.success:
            report.failures.append({"episode": episode.episode_id, "status": episode.status,
                                    "reason": episode.reason[:300], "trace": str(episode.trace_path)})
    if result.returncode != 0 and not result.episodes:
        report.error = f"magma-bench exited with {result.returncode}"


def run_eval(entries: Sequence[SuiteEntry], configs: Sequence[AgentConfig], out: Path,
             magma: MagmaEnvironment, *, episode_timeout_s: float = 900, execution_errors: bool = False,
             max_tool_calls: int | None = None) -> list[ConfigReport]:
    """`execution_errors`: MAGMA-BENCH's execution_error condition (see conditions.py), else clean.
    `max_tool_calls`: the tool-call budget definitions are expanded to (None: the local compiler's 10)."""
    compiled = out / "compiled"
    compiled_plan = compile_suite(magma, entries, compiled, max_tool_calls=max_tool_calls)
    if execution_errors:
        for compiled_scenario in compiled_plan.values():
            for root in compiled_scenario.roots:
                inject_execution_errors(root)
    groups = by_scenario(list(entries))
    progress = Progress(len(entries) * len(configs))
    reports = []
    try:
        for config in configs:
            report = ConfigReport(config)
            reports.append(report)
            base = out / config.label
            base.mkdir(parents=True, exist_ok=True)
            with magma.planner(base / "planner.log") as planner_url, \
                 running_agent(config, base / "lava.log") as agent_url:
                for scenario, group in groups.items():
                    compiled_scenario = compiled_plan.get(str(compiled / scenario)) or Compiled(error="not compiled")
                    scenario_report = ScenarioReport(scenario, error=compiled_scenario.error,
                                                     not_compiled=dict(compiled_scenario.skipped))
                    report.scenarios.append(scenario_report)
                    for benchmark in compiled_scenario.roots:
                        results = base / "results" / benchmark.name
                        if results.exists():
                            shutil.rmtree(results)  # magma-bench would try to resume a previous run
                        before = _decision_metrics(agent_url)
                        result = magma.run_bench(
                            benchmark, results, agent_url=agent_url, planner_url=planner_url,
                            log=base / f"bench-{benchmark.name}.log", timeout_s=episode_timeout_s * len(group),
                            on_episode=lambda line, c=config: progress.episode(c.label, line),
                        )
                        after = _decision_metrics(agent_url)
                        _add_result(scenario_report, result, after[0] - before[0], after[1] - before[1])
    finally:
        progress.close()
    return reports


# -- output ----------------------------------------------------------------------------------


def _rate(s: ScenarioReport) -> str:
    if s.error:
        return "error"
    return f"{s.successes}/{s.episodes} {100 * s.success_rate:3.0f}%"


def _statuses(s: ScenarioReport) -> str:
    failed = [f"{k} {v}" for k, v in sorted(s.statuses.items(), key=lambda kv: -kv[1]) if k != "success"]
    if s.not_compiled:
        failed.append(f"not compiled: {', '.join(s.not_compiled)}")
    return ", ".join(failed)


def render_table(reports: Sequence[ConfigReport]) -> str:
    lines = []
    for report in reports:
        lines.append(f"== {report.config.label}  (lava serve {' '.join(report.config.serve_args) or '(defaults)'})")
        header = f"{'scenario':20s} {'success':>11s} {'turns':>6s} {'s/decision':>10s}  failures"
        lines += [header, "-" * len(header)]
        for s in [*report.scenarios, report.total()]:
            per = s.seconds_per_decision
            turns = f"{s.agent_turns / s.episodes:.1f}" if s.episodes else "-"
            lines.append(f"{s.scenario:20s} {_rate(s):>11s} {turns:>6s} {per if per is None else round(per, 2)!s:>10s}"
                         f"  {s.error or _statuses(s)}")
        lines.append("")
    if len(reports) > 1:
        lines.append("== side by side (success)")
        labels = [r.config.label for r in reports]
        lines.append(f"{'scenario':20s} " + " ".join(f"{label:>14s}" for label in labels))
        scenarios = [s.scenario for s in reports[0].scenarios] + ["all"]
        for name in scenarios:
            cells = []
            for r in reports:
                found = next((s for s in [*r.scenarios, r.total()] if s.scenario == name), None)
                cells.append(_rate(found) if found else "-")
            lines.append(f"{name:20s} " + " ".join(f"{c:>14s}" for c in cells))
    return "\n".join(lines)


def report_json(reports: Sequence[ConfigReport], condition: str = "clean", max_tool_calls: int | None = None
                ) -> dict[str, Any]:
    def scenario(s: ScenarioReport) -> dict[str, Any]:
        data = asdict(s)
        data["success_rate"] = round(s.success_rate, 4)
        data["seconds_per_decision"] = s.seconds_per_decision
        return data

    configs = [{"label": r.config.label, "serve_args": list(r.config.serve_args), "url": r.config.url,
                "total": scenario(r.total()), "scenarios": [scenario(s) for s in r.scenarios]} for r in reports]
    return {"condition": condition, "max_tool_calls": max_tool_calls, "configs": configs}


def write_report(reports: Sequence[ConfigReport], path: Path, condition: str = "clean",
                 max_tool_calls: int | None = None) -> None:
    path.write_text(json.dumps(report_json(reports, condition, max_tool_calls), indent=2))


__all__ = ["AgentConfig", "ConfigReport", "ScenarioReport", "render_table", "report_json", "run_eval",
           "write_report"]
