"""The real MAGMA-GEN 2.0.0 coaching `lava serve`, then exporting training datasets with lava's exporter.

One press_button generation (`nb_branch: 1`, `nb_env: 1`) with coaching on. The coaching (and
judging) model is llama.cpp's OpenAI-compatible server on 127.0.0.1 serving the embedded GGUF;
lava itself decides with a script whose first answer is unusable, so GEN's first turn is an error
candidate and a `format` coaching request is certain. lava's coach asks the model, GEN reinjects
the proposal through /v1/responses, and the run goes on; then `magma-gen export --agent lava`
writes the datasets through the `magma.export.gen` entry point.

Needs the consumer environment of ../shared/magma/setup-magma-consumer.sh and the embedded model.
Without the environment the test is skipped, and fails when LAVA_REQUIRE_MAGMA=1 (as in CI).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from coaching_helpers import llama_server
from conftest import ROOT
from lava.evaluation.consumer import MagmaEnvironment
from servers import lava_process

pytestmark = [pytest.mark.magma, pytest.mark.model]

RUN = "lava_coaching"
ENTRY_POINT = "lava.coaching.export:exporter"
# An answer the validator refuses however often it is asked again (press_button needs an id).
SCRIPT = [{"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {}}]}]
# GEN waits for every launched node; one it never schedules would hold the run for 600 s (see the
# report on GEN's executor queue), so idle runs end sooner. GEN still writes its graph then.
STALL_TIMEOUT_S = "60"


def installed_exporter(magma: MagmaEnvironment) -> dict | None:
    """Which `lava` exporter MAGMA's environment would load, and from where (None: none loads)."""
    probe = ("import json; from importlib.metadata import entry_points; import lava.coaching.export as m; "
             "print(json.dumps({'entry': [e.value for e in entry_points(group='magma.export.gen') "
             "if e.name == 'lava'], 'file': m.__file__}))")
    result = subprocess.run([magma.python, "-c", probe], capture_output=True, text=True, env=magma.environ(),
                            timeout=120)
    return json.loads(result.stdout) if result.returncode == 0 else None


def ensure_exporter(magma: MagmaEnvironment) -> None:
    """Install this checkout into MAGMA's environment unless its exporter is already the one found.

    `--no-deps`: the exporter needs only pydantic and magma_core, both already there."""
    def current(found: dict | None) -> bool:
        return found is not None and found["entry"] == [ENTRY_POINT] and Path(found["file"]).is_relative_to(ROOT)

    if current(installed_exporter(magma)):
        return
    pip = subprocess.run([str(magma.venv / "bin" / "pip"), "install", "--no-deps", "-e", str(ROOT)],
                         capture_output=True, text=True, env=magma.environ(), timeout=600)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    found = installed_exporter(magma)
    assert current(found), f"pyproject.toml must declare magma.export.gen: lava = {ENTRY_POINT!r}; found {found}"


def gen_config(agent_url: str, planner_url: str, coach_url: str) -> dict:
    return {
        "backends": {"local": {
            "type": "ollama", "endpoint": f"{coach_url}/v1/chat/completions", "default_model": "coach",
            # GEN's own client posts without a content type unless told; llama.cpp's server needs it.
            "headers": {"Content-Type": "application/json"}, "timeout": 120, "max_retry": 2,
        }},
        "magma_agent_address": agent_url,
        "magma_planner_address": planner_url,
        "coaching": {"enabled": True},
        "generate": {"seed": 0, "nb_branch": 1, "nb_env": 1, "nb_max_update": 2, "max_start_per_stage": 1,
                     "randomized": False},
    }


def run(command: list[str], *, cwd: Path, env: dict[str, str], log: Path, timeout: float) -> int:
    with open(log, "w") as out:
        return subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout).returncode


@pytest.mark.timeout(900)
def test_magma_gen_coaches_lava_and_exports_datasets(magma: MagmaEnvironment, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp.server.app")
    ensure_exporter(magma)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    gen = str(magma.venv / "bin" / "magma-gen")
    env = {**magma.environ(), "MAGMA_GEN_STALL_TIMEOUT_SECONDS": STALL_TIMEOUT_S}
    with llama_server(tmp_path / "llama.log") as coach_url, magma.planner(tmp_path / "planner.log") as planner_url, \
         lava_process("--backend", "scripted", "--script", str(script), "--policy", "full_history",
                      log=tmp_path / "lava.log") as agent_url:  # full_history answers the script's text as is
        config = tmp_path / "gen.yaml"
        config.write_text(json.dumps(gen_config(agent_url, planner_url, coach_url)))  # JSON is YAML
        code = run([gen, "run", RUN, "--config-path", str(config), "--preset", "press_button.ButtonPressOrdered",
                    "--sequence_of_buttons", "sw1,sw3", "--instruction", "Please press sw1 then sw3."],
                   cwd=tmp_path, env=env, log=tmp_path / "gen.log", timeout=600)
    assert code == 0, (tmp_path / "gen.log").read_text()[-3000:]
    graph = tmp_path / "output" / RUN
    assert json.loads((graph / "config.json").read_text())["agent_id"] == "lava"

    # GEN asked lava's coach, and lava answered with corrections (its logs land in the run folder).
    reports = [path.read_text() for path in sorted((graph / "_coaching_logs").glob("*.md"))]
    corrected = [text for text in reports if text.startswith("# lava coaching corrected")]
    assert corrected, [text[:200] for text in reports]
    # ... and GEN reinjected them: candidates answered from `extra_keys.coaching`, without a model.
    candidates = [c for path in graph.glob("[0-9]*.json") for c in json.loads(path.read_text())["candidates"]]
    coached = [c for c in candidates if c["response_status"] == "completed"
               and [step.get("origin") for step in c["internal_steps"]] == ["coaching"]]
    assert coached

    code = run([gen, "export", str(graph), "--agent", "lava"], cwd=tmp_path, env=env, log=tmp_path / "export.log",
               timeout=300)
    assert code == 0, (tmp_path / "export.log").read_text()[-3000:]
    datasets = graph / "datasets"
    rows = json.loads((datasets / "lava_sft.json").read_text())
    assert rows, (tmp_path / "export.log").read_text()
    assert json.loads((datasets / "export_failures.json").read_text()) == []
    manifest = json.loads((datasets / "export_manifest.json").read_text())
    assert manifest["complete"] and manifest["rows"] == {"sft": len(rows)}
    for row in rows:
        roles = [message["role"] for message in row["messages"]]
        assert roles[0] == "system" and roles[-1] == "assistant" and set(roles) <= {"system", "user", "assistant"}
    assert len(json.loads((datasets / "lava_sft_train.json").read_text())) + len(
        json.loads((datasets / "lava_sft_validation.json").read_text())) == len(rows)
    print(f"coaching reports: {len(reports)} ({len(corrected)} lava corrections); coached candidates: "
          f"{len(coached)}; dataset rows: {len(rows)}")
