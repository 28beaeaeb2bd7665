"""Shared fixtures. Tests never reach the network beyond 127.0.0.1: the guard below enforces it."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lava.app import create_app
from lava.backends.base import Backend
from lava.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
FIXTURES = Path(__file__).parent / "fixtures"

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> Any:
    if self.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0]
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise RuntimeError(f"test tried to reach the network: {address!r}")
    return _real_connect(self, address)


@pytest.fixture(autouse=True, scope="session")
def _no_network() -> Iterator[None]:
    socket.socket.connect = _loopback_only  # type: ignore[method-assign]
    yield
    socket.socket.connect = _real_connect  # type: ignore[method-assign]


def fixture_requests(name: str | None = None) -> list[dict[str, Any]]:
    """Real requests captured from MAGMA-BENCH and MAGMA-GEN runs (../shared/fixtures)."""
    paths = sorted(FIXTURES.glob("*.requests.jsonl")) if name is None else [FIXTURES / name]
    requests = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                requests.append(json.loads(line))
    return requests


def settings(**overrides: Any) -> Settings:
    return Settings(**{"backend": "scripted", **overrides})


@pytest.fixture
def make_client():
    """Build an app (optionally around a given backend) and a started TestClient for it."""
    from fastapi.testclient import TestClient

    clients = []

    def build(backend: Backend | None = None, **overrides: Any) -> TestClient:
        client = TestClient(create_app(settings(**overrides), backend=backend))
        client.__enter__()
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.__exit__(None, None, None)


def user_input(content: str = "Please press sw1", *, id: int = 0, n: int = 1, **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": id,
        "instruction": {"type": "user", "content": content},
        "tools": [
            {"name": "cancel_current_action", "description": "Cancel the current action running on the targeted robot.",
             "arguments": {}},
            {"name": "press_button", "description": "Press a button.",
             "arguments": {"id": {"description": "Name of the button to press.", "type": "str"}}},
        ],
        "attributes": {"objects": ["sw0", "sw1", "sw2", "sw3"], "known_robots": ["panda"],
                       "robot_statuses": {"panda": "FREE"}},
        "memory": {},
        "num_outputs": n,
        "extra_keys": {},
    }
    entry.update(fields)
    return entry


@pytest.fixture(scope="session")
def magma():
    """The real MAGMA consumers (../shared/magma/setup-magma-consumer.sh; `.ci/run` makes them).
    Without them a test is skipped locally, and fails when LAVA_REQUIRE_MAGMA=1 (as in CI)."""
    from lava.errors import ConfigError
    from lava.evaluation.consumer import MagmaEnvironment

    env_file = os.environ.get("LAVA_MAGMA_ENV")
    try:
        return MagmaEnvironment.discover(Path(env_file) if env_file else None)
    except ConfigError as exc:
        if os.environ.get("LAVA_REQUIRE_MAGMA") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
