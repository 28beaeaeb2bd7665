"""The embedded model for real: llama.cpp in process with the verified Qwen2.5-Coder-0.5B."""

from __future__ import annotations

import time

import httpx2 as httpx
import pytest
from fastapi.testclient import TestClient

from conftest import fixture_requests, user_input
from lava.app import create_app
from lava.settings import Settings
from magma_contract import check_response
from servers import lava_process

pytestmark = pytest.mark.model
pytest.importorskip("llama_cpp")

# One request of each captured kind: press_button (bench and gen), colour sorting, coffee, cleaning, two robots.
SAMPLE = [r for name in ("bench_press_button.requests.jsonl", "gen_press_button.requests.jsonl",
                         "bench_color_sorting.requests.jsonl", "bench_make_coffee.requests.jsonl",
                         "bench_table_cleaning.requests.jsonl", "bench_bi_robot_sorting.requests.jsonl",
                         "bench_press_button_definition.requests.jsonl")
          for r in fixture_requests(name)[:2]]


def _ready(client: TestClient) -> TestClient:
    deadline = time.monotonic() + 120
    while client.get("/health").status_code != 200:
        assert time.monotonic() < deadline, client.get("/health").text
        time.sleep(0.2)
    return client


@pytest.fixture(scope="module")
def client():
    """The model's own mechanics (its template, shared prompt evaluation): full_history asks it
    once per decision, where the default policy may decide without it."""
    with TestClient(create_app(Settings(backend="local", policy="full_history"))) as client:
        yield _ready(client)


def test_fixture_answers_of_the_default_policy_are_valid_decisions() -> None:
    with TestClient(create_app(Settings(backend="local"))) as client:
        _ready(client)
        statuses = []
        for request in SAMPLE:
            response = client.post("/v1/responses", json=request)
            assert response.status_code == 200
            statuses += [o.status for o in check_response(request, response.json()).root]
    assert statuses.count("completed") == len(statuses), statuses


def test_fixture_answers_are_valid_decisions(client) -> None:
    """Every answer validates with magma_core and passes lava's validator; none is an error."""
    statuses = []
    for request in SAMPLE:
        response = client.post("/v1/responses", json=request)
        assert response.status_code == 200
        outputs = check_response(request, response.json()).root
        statuses += [o.status for o in outputs]
        for output in outputs:
            steps = output.internal_steps
            assert steps and steps[0]["full_prompt"].startswith("<|im_start|>system")  # the model's own template
            assert steps[0]["output_raw"]
    assert statuses.count("completed") == len(statuses), statuses


def test_inference_mode_is_deterministic(client) -> None:
    request = {"request_id": "d", "inputs": [user_input("Please press sw2", extra_keys={"inference_mode": True})]}
    first = client.post("/v1/responses", json=request).json()
    second = client.post("/v1/responses", json=request).json()
    assert first[0]["output"] == second[0]["output"]
    assert first[0]["output"]["tool_calls"][0]["arguments"] == {"id": "sw2"}


def test_candidates_share_the_evaluated_prompt(client) -> None:
    request = {"request_id": "n", "inputs": [user_input("Please press sw3", n=2)]}
    _, second = client.post("/v1/responses", json=request).json()
    prompt_tokens = second["internal_steps"][0]["total_input_tokens"]
    assert second["internal_steps"][0]["total_cached_tokens"] == prompt_tokens


def test_lava_serve_without_flags_serves_the_embedded_model(tmp_path) -> None:
    """README command 1's server: `lava serve`, no flags, offline."""
    with lava_process(log=tmp_path / "serve.log", timeout=180) as url:
        request = fixture_requests("bench_press_button.requests.jsonl")[0]
        answer = httpx.post(f"{url}/v1/responses", json=request, timeout=120).json()
        (output,) = check_response(request, answer).root
        assert output.status == "completed"


def test_a_batch_is_decided_together_and_always_fits_the_schema() -> None:
    """Hot sampling cannot break the grammar; inputs of one request share one decoding loop."""
    import asyncio

    import jsonschema

    from lava.backends.local import LocalBackend
    from lava.engine import Engine
    from lava.policies.full_history import FullHistoryPolicy
    from lava.protocol import AgentRequest
    from lava.tools import ToolBox

    settings = Settings(backend="local", temperature=1.5)
    backend = LocalBackend(cache_dir=settings.cache_dir)
    engine = Engine(FullHistoryPolicy(backend, settings))
    inputs = [user_input(f"Please press sw{i} and tell me when it is done", id=i, n=2) for i in range(4)]
    request = AgentRequest.model_validate({"request_id": "hot", "inputs": inputs})

    async def go():
        await backend.start()
        try:
            return await engine.respond(request)
        finally:
            await backend.close()

    outputs = asyncio.run(go())
    assert backend.batches_run == 1
    schema = ToolBox.from_input(inputs[0]["tools"], inputs[0]["attributes"]).decision_schema()
    import json

    for output in outputs:
        jsonschema.validate(json.loads(output["internal_steps"][0]["output_raw"]), schema)
        assert output["status"] == "completed"


def test_the_class_question_names_food_and_dishware_right() -> None:
    """Where rules route by class and no sibling shows an object's place, the embedded model names its
    class, after examples the scene shows. Asked cold ("Which of these classes is a mug: food,
    dishware?") the 0.5B model called every dishware object food; the scenes of real clearing runs
    where it went wrong come first."""
    import asyncio

    from lava.backends import create_backend
    from lava.policies.magma import MagmaPolicy
    from lava.policies.task_state import TaskState
    from lava.protocol import AgentInput
    from lava.situation import Situation

    (request,) = fixture_requests("bench_table_cleaning.requests.jsonl")[:1]
    situation = Situation.read(AgentInput.model_validate(request["inputs"][0]))
    settings = Settings(backend="local")
    cases = [  # (held, storages, class)
        ("goblet_1", {"food_storage": ["mango_2", "orange_2", "orange_1"], "dish_storage": ["bowl_1"]}, "dishware"),
        ("mug_1", {"food_storage": ["mango_1"], "dish_storage": ["bowl_1"], "trashcan": ["orange_2"]}, "dishware"),
        ("orange_2", {"food_storage": ["mango_2", "mango_1"], "dish_storage": ["bowl_2", "mug_1"],
                      "washing_machine": ["bowl_1"]}, "food"),
        # Held-out table_cleaning SimpleDefinition@112: the dirty mango went to the washing machine.
        ("mango_2", {"food_storage": ["orange_2", "orange_1"], "dish_storage": ["mug_2", "goblet_2", "mug_1"]}, "food"),
    ] + [(f"{kind}_1", {"food_storage": ["lemon_1", "peach_2"], "dish_storage": ["saucer_1", "jar_2"]}, cls)
         for kinds, cls in ((("goblet", "mug", "tumbler", "beaker", "stein"), "dishware"),
                            (("mango", "orange", "apricot", "avocado"), "food"))
         for kind in kinds]

    async def classes() -> list[str | None]:
        backend = create_backend(settings)
        await backend.start()
        try:
            policy = MagmaPolicy(backend, settings)
            named = []
            for held, storages, _ in cases:
                state = TaskState(intent="act", held=held, scene={"table": ["sponge"], **storages})
                step = await policy.classify_held(situation, state)
                assert step is not None and step["component"] == "classes"
                named.append(state.classes.get(held.rsplit("_", 1)[0]))
            return named
        finally:
            await backend.close()

    assert asyncio.run(classes()) == [cls for _, _, cls in cases]
