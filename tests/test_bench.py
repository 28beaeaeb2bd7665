"""`lava bench`: its workload has the shape it claims, prompts share their prefixes, and the
benchmark runs end to end and reports figures that come from real measurements."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from lava.bench import workload
from lava.cli import main
from lava.policies.messages import commander_messages
from lava.protocol import AgentRequest
from lava.situation import Situation
from magma_contract import AgentRequest as MagmaRequest


def test_gen_batch_has_the_gen_shape_and_is_a_valid_request() -> None:
    request = workload.gen_batch(FIXTURES)
    MagmaRequest.model_validate(request)
    inputs = request["inputs"]
    assert [entry["id"] for entry in inputs] == list(range(10))
    assert {entry["num_outputs"] for entry in inputs} == {2}
    assert all("inference_mode" not in entry["extra_keys"] for entry in inputs)  # GEN samples
    assert len({json.dumps(entry["tools"]) for entry in inputs}) == 1  # one scenario
    for entry in inputs:
        history = entry["memory"]["history"]
        assert len(history) == 20
        assert history[0]["author"] == "USER"
        assert [turn["author"] for turn in history[1:]] == ["MODEL", "SYSTEM"] * 9 + ["MODEL"]
        assert entry["instruction"]["type"] == "env"
        assert "previous_tool_call" in json.loads(entry["instruction"]["content"])
    # Branches share a beginning, then diverge at their own failed-and-retried step.
    histories = [json.dumps(entry["memory"]["history"]) for entry in inputs]
    assert len(set(histories)) == 10
    assert all(h[:200] == histories[0][:200] for h in histories)


def test_a_branch_retries_the_call_that_failed() -> None:
    episode = workload.Episode.from_requests(workload.read_requests(FIXTURES / workload.EPISODE_FIXTURE))
    history, _ = workload.branch_history(episode, 1, 20)
    failed = json.loads(history[4]["content"])
    assert "temporary execution error" in failed["infos"]
    assert history[3] == history[5]  # the same call again after the failure
    assert json.loads(history[3]["content"])["action"] == failed["previous_tool_call"]


def test_inputs_with_the_same_tools_and_rules_share_a_byte_identical_prefix() -> None:
    """The stable part comes first, so prefix caches (llama.cpp, vLLM) hit across inputs."""
    request = AgentRequest.model_validate(workload.gen_batch(FIXTURES, inputs=3))
    first, second, third = (commander_messages(Situation.read(entry)) for entry in request.inputs)
    assert first[0] == second[0] == third[0]  # the system message: rules, robots, tools
    assert first[0].role == "system" and "Always tell the user" in first[0].content
    # Branch i fails at its call i: branches 1 and 2 share one turn more than branches 0 and 1.
    def shared(a, b):
        return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)

    assert shared(second, third) == shared(first, second) + 2 >= 5


def test_lava_bench_measures_overhead_tokens_and_rss_end_to_end(tmp_path, capsys) -> None:
    report_file = tmp_path / "bench.json"
    code = main(["bench", "--only", "overhead,tokens,rss", "--rounds", "10", "--requests", "300",
                 "--turns", "12", "--json", str(report_file)])
    assert code == 0
    report = json.loads(report_file.read_text())
    overhead = report["overhead"]
    assert overhead["lava"]["median_ms"] > 0 and overhead["floor"]["median_ms"] > 0
    assert overhead["ratio"] == pytest.approx(overhead["lava"]["median_ms"] / overhead["floor"]["median_ms"])
    # The default policy and full_history, each measured against the same floor in the same loop.
    assert overhead["policy"] == "magma"
    also = overhead["also"]["full_history"]
    assert also["ratio"] == pytest.approx(also["median_ms"] / overhead["floor"]["median_ms"])
    full, magma = report["tokens"]["policies"]["full_history"], report["tokens"]["policies"]["magma"]
    assert full["decisions"] == magma["decisions"] == 12
    # The full history grows with every turn; the bounded policy does not.
    assert full["per_decision"] == sorted(full["per_decision"]) and full["last"] > 2 * full["first"]
    # magma plans this episode without the model (its rule is not about the buttons), so it reads no
    # prompt at all; when it does read some, they do not grow.
    assert magma["growth"] is None or magma["growth"] <= 1.5
    assert magma["max"] < full["last"]
    rss = report["rss"]
    assert rss["requests"] == 300 and rss["rss_before_mb"] > 10 and rss["rss_after_mb"] > 10
    printed = capsys.readouterr().out
    assert "ratio" in printed and "RSS" in printed and "full_history" in printed


def test_the_breakdown_attributes_lavas_time_to_its_stages(tmp_path, capsys) -> None:
    report_file = tmp_path / "bench.json"
    assert main(["bench", "--only", "breakdown", "--rounds", "5", "--json", str(report_file)]) == 0
    breakdown = json.loads(report_file.read_text())["breakdown"]
    stages = breakdown["stages_ms"]
    assert breakdown["floor_ms"] == pytest.approx(
        stages["floor: validate (magma_core)"] + stages["floor: encode the answer"])
    # The engine with an instant policy is the part no policy can remove; each policy adds its own.
    assert breakdown["engine_alone_ms"] == pytest.approx(
        stages["engine + instant"] - stages["read the inputs (situations)"])
    for name in ("magma", "full_history"):
        assert breakdown["policy_ms"][name] == pytest.approx(stages[f"engine + {name}"] - stages["engine + instant"])
        assert stages[f"engine + {name}"] > 0
    assert "where the time goes" in capsys.readouterr().out


def test_unknown_sections_are_refused() -> None:
    with pytest.raises(SystemExit, match="unknown section"):
        main(["bench", "--only", "overhead,speed"])


@pytest.mark.model
def test_model_path_naive_strategy_evaluates_every_candidate_alone() -> None:
    pytest.importorskip("llama_cpp")
    from lava.bench.measure import model_path
    from lava.settings import Settings

    result = model_path(FIXTURES, Settings(), inputs=2, candidates=2, history=4)
    lava, naive = result["lava"], result["naive"]
    assert lava["completed"] == naive["completed"] == 4
    assert naive["cached_tokens"] == 0  # nothing reused: the baseline is what it says
    assert lava["cached_tokens"] > 0  # the second candidate of each input, and the shared system prompt
    assert lava["prompt_tokens"] == naive["prompt_tokens"]  # same prompts, so the times compare
    assert result["speedup"] == pytest.approx(naive["seconds"] / lava["seconds"])
    # Two candidates of two inputs: between one and two distinct decisions per input.
    assert 0.5 <= lava["distinct"] <= 1.0
