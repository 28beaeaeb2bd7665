"""Drive the real MAGMA consumers (magma-bench 2.0.1) from lava: planner, compiler, runner, results.

The consumers live in their own Python 3.12 environment (made by MAGMA's
`setup-magma-consumer.sh`: a venv, CPU Vulkan, and a motion-planner shim), described by an
`env.sh` file. `MagmaEnvironment.discover` reads it; everything here runs the consumers as
subprocesses, exactly as a user would, and reads their result files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..processes import free_port

LOCAL_BENCHMARK = Path(__file__).with_name("local_benchmark.py")
COMPILE_SUITE = Path(__file__).with_name("compile_suite.py")
DEFAULT_ENV_FILE = Path("/tmp/magma-e2e/env.sh")
_MAGMA_VARIABLES = ("MAGMA_VENV", "VK_ICD_FILENAMES", "LD_LIBRARY_PATH")


@dataclass(frozen=True)
class MagmaEnvironment:
    venv: Path
    planner_script: Path
    variables: dict[str, str]

    @classmethod
    def discover(cls, env_file: Path | None = None) -> MagmaEnvironment:
        env_file = env_file or DEFAULT_ENV_FILE
        if not env_file.is_file():
            raise ConfigError(
                f"no MAGMA consumer environment at {env_file}: run MAGMA's setup-magma-consumer.sh first"
            )
        # Let bash evaluate the file: it is written for `source`, with parameter expansions.
        listing = subprocess.run(
            ["bash", "-c", 'source "$1" && env -0', "bash", str(env_file)],
            capture_output=True, check=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        ).stdout.decode()
        variables = dict(item.split("=", 1) for item in listing.split("\0") if "=" in item)
        variables = {k: v for k, v in variables.items() if k in _MAGMA_VARIABLES}
        venv = Path(variables.get("MAGMA_VENV", "/tmp/mv312"))
        if not (venv / "bin" / "magma-bench").exists():
            raise ConfigError(f"the MAGMA venv {venv} has no magma-bench; rerun setup-magma-consumer.sh")
        return cls(venv, env_file.parent / "planner_shim.py", variables)

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def environ(self) -> dict[str, str]:
        env = {**os.environ, **self.variables}
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        return env

    @contextlib.contextmanager
    def planner(self, log: Path) -> Iterator[str]:
        port = free_port()
        with open(log, "w") as out:
            process = subprocess.Popen(
                [self.python, str(self.planner_script), str(port)], stdout=out, stderr=subprocess.STDOUT,
                env=self.environ(),
            )
            try:
                deadline = time.monotonic() + 60
                while True:
                    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the motion planner did not start; see {log}")
                    time.sleep(0.2)
                yield f"http://127.0.0.1:{port}"
            finally:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(10)
                if process.poll() is None:
                    process.kill()

    def compile_benchmark(self, out: Path, entries: Sequence[str], *, seed: int = 0, log: Path | None = None) -> None:
        """A local benchmark directory from `scenario.Preset[=JSON]` / `scenario.Definition` entries."""
        result = subprocess.run(
            [self.python, str(LOCAL_BENCHMARK), str(out), *entries, "--seed", str(seed)],
            capture_output=True, text=True, env=self.environ(), timeout=600,
        )
        if log is not None:
            log.write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            raise RuntimeError(f"compiling {entries} failed: {result.stderr[-2000:]}")

    def compile_plan(self, plan: dict[str, list[str]], log: Path, *, max_tool_calls: int | None = None
                     ) -> dict[str, Compiled]:
        """Compile several benchmark directories in one process; {out dir: what was written}.
        `max_tool_calls`: the budget a definition is expanded to (None: the local compiler's default, 10)."""
        plan_file = log.with_suffix(".plan.json")
        plan_file.write_text(json.dumps(plan))
        options = [] if max_tool_calls is None else ["--max-tool-calls", str(max_tool_calls)]
        result = subprocess.run([self.python, str(COMPILE_SUITE), str(plan_file), *options], capture_output=True,
                                text=True, env=self.environ(), timeout=1800)
        log.write_text(result.stdout + result.stderr)
        outcome = {out: Compiled(error="the compiler did not report on it") for out in plan}
        for line in result.stdout.splitlines():
            if line.startswith("{"):
                report = json.loads(line)
                skipped = dict(report.get("skipped") or {})
                outcome[report["out"]] = (
                    Compiled(roots=[Path(r) for r in report.get("roots") or [report["out"]]], skipped=skipped)
                    if report["ok"] else Compiled(error=report.get("error", "failed"), skipped=skipped))
        return outcome

    def run_bench(
        self, benchmark: Path, results: Path, *, agent_url: str, planner_url: str, log: Path,
        timeout_s: float = 3600, extra_args: Sequence[str] = (),
        on_episode: Callable[[str], None] | None = None,
    ) -> BenchResult:
        command = [
            str(self.venv / "bin" / "magma-bench"), "run", "--benchmark-root", str(benchmark),
            "--results-path", str(results), "--skip-judge", "--videos", "off", "--sim-backend", "cpu",
            "--nb-env", "1", "--model-logs", "--agent-address", agent_url, "--planner-address", planner_url,
            *extra_args,
        ]
        started = time.monotonic()
        progress = results / "progress.log"
        reported = 0
        with open(log, "w") as out:
            # A config.yaml in the working directory would be picked up: run from the results' parent.
            results.parent.mkdir(parents=True, exist_ok=True)
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.environ(),
                                       cwd=results.parent)
            try:
                while process.poll() is None:
                    if time.monotonic() - started > timeout_s:
                        break
                    reported = _report_progress(progress, reported, on_episode)
                    time.sleep(1.0)
            finally:  # a timeout, Ctrl-C or SIGTERM must not leave a simulator running
                if process.poll() is None:
                    process.kill()
                    process.wait()
            _report_progress(progress, reported, on_episode)
        return BenchResult.read(results, process.returncode, time.monotonic() - started)


def _report_progress(progress: Path, reported: int, on_episode: Callable[[str], None] | None) -> int:
    if on_episode is None or not progress.is_file():
        return reported
    lines = [line for line in progress.read_text().splitlines() if "EPISODE_COMPLETED" in line]
    for line in lines[reported:]:
        on_episode(line)
    return len(lines)


@dataclass
class Compiled:
    """One compiled plan entry: its benchmark roots (one per tools class), or why it failed, and the
    entries left out because they could not be compiled (entry: error)."""
    roots: list[Path] = field(default_factory=list)
    error: str | None = None
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class Episode:
    episode_id: str
    scenario: str
    status: str
    success: bool
    reason: str
    agent_turns: int
    trace_path: Path


_COMPLETED = re.compile(r"EPISODE_COMPLETED episode=(?P<episode>\S+) success=(?P<success>\w+) "
                        r"status=(?P<status>\S+)(?: duration_seconds=\S+)? reason=(?P<reason>.*)$", re.M)


@dataclass
class BenchResult:
    returncode: int
    seconds: float
    results: Path
    episodes: list[Episode] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, results: Path, returncode: int, seconds: float) -> BenchResult:
        out = cls(returncode, seconds, results)
        result_file = results / "result.json"
        if result_file.is_file():
            out.summary = json.loads(result_file.read_text())
        for path in sorted(results.glob("scenarios/*/episodes/*.json")):
            data = json.loads(path.read_text())
            terminal = data.get("terminal") or {}
            trace = data.get("trace") or []
            out.episodes.append(Episode(
                episode_id=data.get("episode_id", path.stem),
                scenario=path.parent.parent.name,
                status=str(terminal.get("status", "unknown")),
                success=bool(data.get("success")),
                reason=str(terminal.get("reason") or ""),
                agent_turns=sum(1 for event in trace if event.get("kind") == "agent_answer"),
                trace_path=path,
            ))
        # A scenario with an episode the infrastructure ended (the motion planner gave up) is
        # "partial": MAGMA-BENCH writes no episode file for any of its episodes, solved ones
        # included. Their outcomes are still in the progress log (the last attempt of each), and
        # the infrastructure failures in result.json: every episode that ran is listed.
        recorded = {episode.episode_id for episode in out.episodes}
        scenario = next(iter(out.summary.get("partial_scenario_ids") or []), results.name)
        unrecorded: dict[str, Episode] = {}
        progress = results / "progress.log"
        for match in _COMPLETED.finditer(progress.read_text() if progress.is_file() else ""):
            if match["episode"] not in recorded:
                unrecorded[match["episode"]] = Episode(
                    episode_id=match["episode"], scenario=scenario, status=match["status"],
                    success=match["success"] == "True", reason=match["reason"].strip(), agent_turns=0,
                    trace_path=progress)
        for failure in out.summary.get("infrastructure_failures") or []:
            episode_id = str(failure.get("episode_id", ""))
            if episode_id and episode_id not in recorded and episode_id not in unrecorded:
                unrecorded[episode_id] = Episode(
                    episode_id=episode_id, scenario=str(failure.get("scenario_id", scenario)),
                    status="infrastructure_failure", success=False, reason=str(failure.get("reason") or ""),
                    agent_turns=0, trace_path=result_file)
        out.episodes += unrecorded.values()
        return out

    def statuses(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for episode in self.episodes:
            counts[episode.status] = counts.get(episode.status, 0) + 1
        return counts


__all__ = ["BenchResult", "Compiled", "Episode", "MagmaEnvironment"]
