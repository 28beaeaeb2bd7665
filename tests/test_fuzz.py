"""Adversarial requests from hypothesis: every answer is a 4xx naming the problem, or a valid 200.
Never a 5xx, never a crash."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import user_input

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text()
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=20)
FIELDS = ["id", "instruction", "tools", "attributes", "memory", "num_outputs", "extra_keys"]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def client():
    from fastapi.testclient import TestClient

    from conftest import settings as lava_settings
    from lava.app import create_app

    with TestClient(create_app(lava_settings(max_candidates=64))) as test_client:
        yield test_client


def check(response) -> None:
    assert response.status_code in (200, 413, 422), (response.status_code, response.text[:500])
    if response.status_code == 200:
        assert isinstance(response.json(), list)
    else:
        detail = response.json()["detail"]
        assert detail and all(d["msg"] and d["loc"] for d in detail)


@FUZZ
@given(body=JSON)
def test_arbitrary_json_bodies(client, body) -> None:
    content = json.dumps(body, allow_nan=True).encode()
    check(client.post("/v1/responses", content=content, headers={"content-type": "application/json"}))


@FUZZ
@given(field=st.sampled_from(FIELDS), value=JSON, n=st.integers(min_value=-2, max_value=3))
def test_one_field_of_a_real_input_replaced(client, field, value, n) -> None:
    entry = user_input(n=max(n, 1))
    entry[field] = value
    body = {"request_id": "r", "inputs": [entry, user_input(id=1)]}
    check(client.post("/v1/responses", content=json.dumps(body, allow_nan=True).encode(),
                      headers={"content-type": "application/json"}))


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_bytes_that_are_not_json(client, raw) -> None:
    check(client.post("/v1/responses", content=raw, headers={"content-type": "application/json"}))


@pytest.mark.parametrize("body", [
    {"request_id": "r", "inputs": [user_input(n=2**63)]},
    {"request_id": "r", "inputs": [user_input(), user_input()]},  # duplicate ids
    {"request_id": "x" * 1_000_000, "inputs": []},
    {"request_id": "\ud800", "inputs": []},
])
def test_hostile_shapes(client, body) -> None:
    check(client.post("/v1/responses", content=json.dumps(body).encode(), headers={"content-type": "application/json"}))


def test_deep_nesting(client) -> None:
    entry = json.dumps(user_input()).replace('"memory": {}', '"memory": {"deep": ' + "[" * 5000 + "]" * 5000 + "}")
    check(client.post("/v1/responses", content=('{"request_id": "r", "inputs": [' + entry + "]}").encode(),
                      headers={"content-type": "application/json"}))
