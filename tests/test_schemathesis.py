"""schemathesis against lava's own OpenAPI document, over a real socket: requests that conform to
the document and requests that break it on purpose (both generation modes). Every answer is a
valid 2xx or a 4xx that names the problem; never a 5xx.

The cases come from schemathesis's strategies driven by hypothesis directly (its pytest plugin
does not yet run on pytest 9)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from conftest import settings as lava_settings
from lava.app import create_app
from servers import uvicorn_thread, wait_ready


def lava_app():
    # A small candidate cap: schemathesis happily asks for billions of candidates.
    return create_app(lava_settings(max_candidates=64))


SCHEMA = schemathesis.openapi.from_dict(lava_app().openapi())
OPERATIONS = [(path, method) for path, methods in SCHEMA.raw_schema["paths"].items() for method in methods]


def cases(path: str, method: str):
    operation = SCHEMA[path][method]
    return st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in GenerationMode))


@pytest.fixture(scope="module")
def lava_url():
    with uvicorn_thread(lava_app()) as url:
        wait_ready(url, timeout=20)
        yield url


def test_the_document_covers_the_protocol_routes() -> None:
    assert {("/health", "get"), ("/v1/info", "get"), ("/v1/responses", "post")} <= set(OPERATIONS)


def test_every_reference_in_the_document_resolves() -> None:
    import json
    import re

    document = SCHEMA.raw_schema
    references = set(re.findall(r'"\$ref": "([^"]+)"', json.dumps(document)))
    assert "#/components/schemas/AgentInput" in references
    for reference in references:
        node = document
        for part in reference.removeprefix("#/").split("/"):
            node = node[part]  # a KeyError names the dangling reference


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_generated_request_gets_a_valid_answer_or_a_named_4xx(lava_url, data) -> None:
    path, method = data.draw(st.sampled_from(OPERATIONS))
    case = data.draw(cases(path, method))
    response = case.call(base_url=lava_url, timeout=30)
    assert response.status_code < 500, (case.method, case.path, response.status_code, response.text[:500])
    if path == "/v1/responses":
        if response.status_code == 200:
            assert isinstance(response.json(), list)
        else:
            assert response.status_code in (413, 422), response.status_code
            detail = response.json()["detail"]
            assert detail and all(item["loc"] and item["msg"] for item in detail), detail
