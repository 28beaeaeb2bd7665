"""Servers as child processes on 127.0.0.1: `lava serve`, benchmark floors, model servers.

Shared by `lava eval`, `lava bench` and the tests, which all need the same three things: a free
port, a process that is only used once it answers its readiness route, and a stop that never
leaves it running.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx2 as httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def lava_serve_command(port: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "lava.cli", "serve", "--port", str(port), *args]


def wait_ready(url: str, process: subprocess.Popen | None = None, timeout: float = 120, *,
               log: Path | None = None) -> None:
    """Return once `url` answers 200; fail early, naming the log, if the process exits first."""
    seen = f"; see {log}" if log else ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{' '.join(map(str, process.args))} exited with {process.returncode}{seen}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer 200 within {timeout} s{seen}")


@contextlib.contextmanager
def serving(command: Sequence[str], ready_url: str, *, log: Path | None = None, timeout: float = 120,
            env: Mapping[str, str] | None = None, stop_timeout: float = 15) -> Iterator[subprocess.Popen]:
    """Run `command`, wait until `ready_url` answers 200, yield the process; always stop it."""
    with open(log, "w") if log else contextlib.nullcontext(subprocess.DEVNULL) as out:
        process = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT,
                                   env=dict(env) if env is not None else None)
        try:
            wait_ready(ready_url, process, timeout, log=log)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


__all__ = ["free_port", "lava_serve_command", "serving", "wait_ready"]
