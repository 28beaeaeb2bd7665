"""Decide every captured MAGMA request in tests/fixtures with a real backend; print latency,
validity and memory figures.  Usage:  python benchmarks/fixture_decisions.py [--backend local]"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import time
from pathlib import Path

from lava.backends import create_backend
from lava.engine import Engine
from lava.policies import create_policy
from lava.protocol import AgentRequest
from lava.settings import Settings

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


async def main(backend_name: str) -> None:
    settings = Settings(backend=backend_name)
    backend = create_backend(settings)
    started = time.perf_counter()
    await backend.start()
    load_s = time.perf_counter() - started
    engine = Engine(create_policy(settings, backend))
    latencies, statuses, repairs = [], [], 0
    for path in sorted(FIXTURES.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            request = AgentRequest.model_validate_json(line)
            started = time.perf_counter()
            outputs = await engine.respond(request)
            elapsed = time.perf_counter() - started
            latencies.append(elapsed / max(1, len(outputs)))
            statuses += [o["status"] for o in outputs]
            repairs += sum(1 for o in outputs if len(o["internal_steps"]) > 1)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "backend": backend_name, "model": backend.model, "load_s": round(load_s, 2),
        "requests": len(latencies), "candidates": len(statuses),
        "valid_decisions": statuses.count("completed"), "valid_rate": round(statuses.count("completed") / len(statuses), 3),
        "repaired": repairs,
        "first_decision_s": round(latencies[0], 2),
        "warm_median_s": round(statistics.median(latencies[1:]), 2),
        "warm_p90_s": round(sorted(latencies[1:])[int(0.9 * (len(latencies) - 1))], 2),
        "peak_rss_mb": round(rss_mb),
    }, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="local")
    asyncio.run(main(parser.parse_args().backend))
