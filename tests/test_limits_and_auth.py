"""Bounded work per request, a bounded admission queue, bearer auth, and secrets kept out of answers."""

from __future__ import annotations

import asyncio

import httpx2 as httpx

from conftest import settings, user_input
from lava.app import create_app
from servers import uvicorn_thread

TOKEN = "lava-token-for-tests-0123456789"


def test_absurd_num_outputs_is_refused_naming_the_limit(make_client) -> None:
    client = make_client(max_candidates=64)
    response = client.post("/v1/responses", json={"request_id": "r", "inputs": [user_input(n=10**12)]})
    assert response.status_code == 422
    assert "max_candidates" in response.text and "10000000000" in response.text


def test_history_over_the_cap_is_refused_naming_the_field(make_client) -> None:
    client = make_client(max_history_entries=10)
    history = [{"author": "USER", "content": "hi"}] * 11
    response = client.post("/v1/responses",
                           json={"request_id": "r", "inputs": [user_input(memory={"history": history})]})
    assert response.status_code == 422
    (detail,) = response.json()["detail"]
    assert detail["loc"] == ["body", "inputs", 0, "memory", "history"] and "max_history_entries" in detail["msg"]
    ok = client.post("/v1/responses",
                     json={"request_id": "r", "inputs": [user_input(memory={"history": history[:10]})]})
    assert ok.status_code == 200


def test_full_queue_answers_503_with_a_reason_and_the_rest_complete() -> None:
    app = create_app(settings(max_pending_requests=3, scripted_delay_s=0.6, policy="full_history"))  # model-bound

    async def burst(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            body = {"request_id": "r", "inputs": [user_input()]}
            return await asyncio.gather(*(client.post("/v1/responses", json=body) for _ in range(8)))

    with uvicorn_thread(app) as url:
        responses = asyncio.run(burst(url))
        after = httpx.post(f"{url}/v1/responses", json={"request_id": "r", "inputs": [user_input()]}, timeout=30)
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 3 + [503] * 5
    refused = next(r for r in responses if r.status_code == 503)
    assert "max_pending_requests=3" in refused.json()["detail"] and refused.headers["retry-after"] == "1"
    assert after.status_code == 200  # the queue drains: capacity comes back


def test_two_hundred_concurrent_requests_all_answered() -> None:
    app = create_app(settings(scripted_delay_s=0.05))

    async def load(url: str) -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
            return await asyncio.gather(*(
                client.post("/v1/responses", json={"request_id": f"r{i}", "inputs": [user_input(id=i, n=2)]})
                for i in range(200)))

    with uvicorn_thread(app) as url:
        responses = asyncio.run(load(url))
    assert all(r.status_code == 200 for r in responses)
    for i, response in enumerate(responses):
        outputs = response.json()
        assert [o["request_id"] for o in outputs] == [f"r{i}"] * 2 and {o["source_id"] for o in outputs} == {i}
        assert all(o["status"] == "completed" for o in outputs)


def test_bearer_auth_guards_everything_but_health(make_client) -> None:
    client = make_client(auth_token=TOKEN)
    assert client.get("/health").status_code == 200
    missing = client.get("/v1/info")
    assert missing.status_code == 401 and "missing Authorization" in missing.json()["detail"]
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = client.post("/v1/responses", json={"request_id": "r", "inputs": []},
                        headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and TOKEN not in wrong.text
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert client.get("/v1/info", headers=good).status_code == 200
    assert client.post("/v1/responses", json={"request_id": "r", "inputs": []}, headers=good).json() == []
    assert client.get("/metrics").status_code == 401


def test_auth_is_off_by_default_and_the_server_listens_on_loopback(make_client) -> None:
    client = make_client()
    assert client.get("/v1/info").status_code == 200
    assert settings().host == "127.0.0.1"
