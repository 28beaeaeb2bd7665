"""The four measurements of `lava bench`, each taken side by side within one run.

1. server overhead: a GEN-shaped batch through `lava serve` (zero-latency scripted backend)
   against the floor server (`floor.py`), requests alternating between the two; and, in
   process, where lava's part of that time goes (`breakdown`);
2. model path: the same batch decided by the embedded model, lava's strategy (one prompt
   evaluation per input, shared prefixes, every candidate in one decoding loop) against the
   naive one (each candidate evaluates its whole prompt from an empty cache, one after another);
3. prompt tokens per decision over a 40-turn episode, per memory policy;
4. RSS of a `lava serve` process before and after many requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import orjson

from ..processes import free_port, serving
from ..protocol import AgentRequest
from ..settings import Settings
from .workload import gen_batch, small_requests

JSON = {"content-type": "application/json"}


# -- processes --------------------------------------------------------------------------------

LOGS = Path(tempfile.gettempdir()) / "lava-bench"


@contextlib.contextmanager
def server(module_args: list[str], port: int) -> Iterator[tuple[str, int]]:
    """`python -m MODULE_ARGS` serving on 127.0.0.1:port; yields (url, pid) once it is ready."""
    LOGS.mkdir(exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    with serving([sys.executable, "-m", *module_args], f"{url}/health", log=LOGS / f"{module_args[0]}-{port}.log"
                 ) as process:
        yield url, process.pid


def lava_scripted(port: int, policy: str | None = None) -> list[str]:
    return ["lava.cli", "serve", "--backend", "scripted", "--port", str(port), "--log-level", "warning",
            *(["--policy", policy] if policy else [])]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


# -- 1. server overhead ---------------------------------------------------------------------------

def _timed_post(client: httpx.Client, url: str, body: bytes) -> tuple[float, Any]:
    started = time.perf_counter()
    response = client.post(url + "/v1/responses", content=body, headers=JSON)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed, response


def _summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"median_ms": statistics.median(ordered) * 1000, "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1000,
            "min_ms": ordered[0] * 1000}


def server_overhead(fixtures: Path, *, rounds: int, warmup: int = 20,
                    also: tuple[str, ...] = ("full_history",)) -> dict[str, Any]:
    """The default policy's server against the floor, and each policy in `also` beside them, all
    in one alternating loop so they share the machine's moods."""
    request = gen_batch(fixtures)
    body = orjson.dumps(request)
    expected = sum(entry["num_outputs"] for entry in request["inputs"])
    ports = {name: free_port() for name in ("lava", *also)}
    floor_port = free_port()
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(httpx.Client(timeout=60))
        urls: dict[str, str] = {}
        for name, port in ports.items():
            urls[name], _ = stack.enter_context(server(lava_scripted(port, None if name == "lava" else name), port))
            _, answer = _timed_post(client, urls[name], body)
            outputs = answer.json()
            statuses = [o["status"] for o in outputs]
            if len(outputs) != expected or set(statuses) != {"completed"}:
                raise RuntimeError(f"{name} answered the batch with {len(outputs)} outputs, statuses {set(statuses)}")
            if name == "lava":
                answer_bytes = answer.content
        answer_file = stack.enter_context(tempfile.NamedTemporaryFile(suffix=".json"))
        answer_file.write(answer_bytes)
        answer_file.flush()
        urls["floor"], _ = stack.enter_context(server(["lava.bench.floor", str(floor_port), answer_file.name],
                                                      floor_port))
        times: dict[str, list[float]] = {name: [] for name in urls}
        order = list(urls)
        for round_ in range(warmup + rounds):
            # Rotate who goes first so no server always meets a freshly idle CPU.
            shift = round_ % len(order)
            for name in order[shift:] + order[:shift]:
                elapsed, _ = _timed_post(client, urls[name], body)
                if round_ >= warmup:
                    times[name].append(elapsed)
    lava, floor = _summary(times["lava"]), _summary(times["floor"])
    policies = {name: {**_summary(times[name]), "ratio": _summary(times[name])["median_ms"] / floor["median_ms"]}
                for name in also}
    return {
        "batch": f"{len(request['inputs'])} inputs x {request['inputs'][0]['num_outputs']} candidates, "
                 f"{len(request['inputs'][0]['memory']['history'])}-entry histories, {len(body):,} bytes",
        "answer_bytes": len(answer_bytes), "rounds": rounds, "lava": lava, "floor": floor,
        "ratio": lava["median_ms"] / floor["median_ms"], "policy": Settings().policy, "also": policies,
    }


# -- 1b. where the overhead goes, in process -------------------------------------------------------

class _InstantPolicy:
    """Answers every candidate at once with one fixed decision: the engine's own cost, alone."""

    name = "instant"

    def __init__(self) -> None:
        from ..protocol import AgentDecision

        self.decision = AgentDecision(say="Done.")

    async def decide(self, situation: Any, memories: list[dict[str, Any]]) -> list[Any]:
        from ..policies import CandidateResult

        return [CandidateResult(decision=self.decision, memory=memory) for memory in memories]


def overhead_breakdown(fixtures: Path, *, rounds: int, policies: tuple[str, ...] = ("magma", "full_history")
                       ) -> dict[str, Any]:
    """The GEN batch's stages timed in this process, all in one alternating loop (medians, ms per
    batch): what lava does beyond the floor's two steps, and which part of it is the policy's."""
    from magma_core.protocol.agent import AgentRequest as MagmaRequest

    from ..app import create_app, encode_json, parse_request
    from ..engine import Engine, read_situations

    body = orjson.dumps(gen_batch(fixtures))
    request = parse_request(body)
    engines = {name: create_app(Settings(backend="scripted", policy=name)).state.runtime.engine
               for name in policies}
    limits = next(iter(engines.values())).limits
    engines["instant"] = Engine(_InstantPolicy(), limits)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    answer = loop.run_until_complete(engines[policies[0]].respond(request))
    stages: dict[str, Callable[[], Any]] = {
        "floor: validate (magma_core)": lambda: MagmaRequest.model_validate_json(body),
        "floor: encode the answer": lambda: orjson.dumps(answer),
        "read and validate the body": lambda: parse_request(body),
        "read the inputs (situations)": lambda: read_situations(request, limits),
        "encode the answer": lambda: encode_json(answer),
        **{f"engine + {name}": (lambda e=engine: loop.run_until_complete(e.respond(request)))
           for name, engine in engines.items()},
    }
    times: dict[str, list[float]] = {label: [] for label in stages}
    try:
        for round_ in range(rounds + 20):
            for label, stage in stages.items():
                started = time.perf_counter()
                stage()
                if round_ >= 20:
                    times[label].append(time.perf_counter() - started)
    finally:
        loop.close()
    ms = {label: statistics.median(values) * 1000 for label, values in times.items()}
    situations = ms["read the inputs (situations)"]
    engine_alone = ms["engine + instant"] - situations
    return {
        "rounds": rounds,
        "floor_ms": ms["floor: validate (magma_core)"] + ms["floor: encode the answer"],
        "stages_ms": ms,
        "engine_alone_ms": engine_alone,  # copies, tasks, outputs, metrics: no policy work
        "policy_ms": {name: ms[f"engine + {name}"] - ms["engine + instant"] for name in policies},
    }


# -- 4. RSS over many requests ---------------------------------------------------------------------

def rss_growth(fixtures: Path, *, requests: int, warmup: int = 500) -> dict[str, Any]:
    bodies = [orjson.dumps(request) for request in small_requests(fixtures)]
    port = free_port()
    with server(lava_scripted(port), port) as (url, pid), httpx.Client(timeout=60) as client:
        for index in range(warmup):
            _timed_post(client, url, bodies[index % len(bodies)])
        before = rss_bytes(pid)
        started = time.perf_counter()
        for index in range(requests):
            _timed_post(client, url, bodies[index % len(bodies)])
        seconds = time.perf_counter() - started
        after = rss_bytes(pid)
    return {"requests": requests, "warmup": warmup, "rss_before_mb": before / 2**20, "rss_after_mb": after / 2**20,
            "growth": (after - before) / before, "requests_per_s": requests / seconds}


# -- 3. prompt tokens per decision, per policy -----------------------------------------------------

def token_counter(settings: Settings) -> tuple[Callable[[str], int], str]:
    """Count with the embedded model's own tokenizer when it is installed, else estimate."""
    try:
        import llama_cpp
        from llama_cpp._utils import suppress_stdout_stderr

        from ..backends.local import resolve_model_path

        path = resolve_model_path(settings.model_path, settings.embedded_model, settings.cache_dir)
        with suppress_stdout_stderr(disable=False):  # llama.cpp's load chatter goes to the C-level stderr
            vocab = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        return (lambda text: len(vocab.tokenize(text.encode(), add_bos=False, special=True))), path.name
    except Exception:  # no local extra: a documented estimate, labelled as such
        return (lambda text: (len(text) + 3) // 4), "estimate (characters / 4)"


def episode_input(memory: dict[str, Any], instruction: dict[str, str], buttons: list[str]) -> dict[str, Any]:
    return {
        "id": 0, "instruction": instruction,
        "tools": [
            {"name": "cancel_current_action", "description": "Cancel the current action running on the targeted robot.",
             "arguments": {}},
            {"name": "press_button", "description": "Press a button.",
             "arguments": {"id": {"description": "Name of the button to press.", "type": "str"}}},
        ],
        "attributes": {"objects": buttons, "known_robots": ["panda"], "robot_statuses": {"panda": "FREE"}},
        "memory": memory, "num_outputs": 1, "extra_keys": {"inference_mode": True},
    }


async def _episode_tokens(policy_name: str, turns: int, count: Callable[[str], int]) -> list[int]:
    from ..backends.scripted import ScriptedBackend
    from ..engine import Engine
    from ..policies import create_policy

    settings = Settings(backend="scripted", policy=policy_name)
    engine = Engine(create_policy(settings, ScriptedBackend()))
    buttons = [f"sw{index}" for index in range(turns)]
    instruction = {"type": "user", "content": f"Please press {', '.join(buttons)}, in that order."}
    memory: dict[str, Any] = {"memory_list": ["Always tell the user when the whole task is done."]}
    per_decision = []
    for _ in range(turns):
        request = AgentRequest.model_validate({"request_id": "tokens", "inputs": [
            episode_input(memory, instruction, buttons)]})
        (output,) = await engine.respond(request)
        if output["status"] != "completed":
            raise RuntimeError(f"{policy_name}: turn {len(per_decision) + 1} failed: {output['error']}")
        per_decision.append(sum(count(step["full_prompt"]) for step in output["internal_steps"]
                                if step.get("full_prompt")))
        memory = output["memory"]
        calls = output["output"]["tool_calls"]
        if not calls:
            break
        call = calls[0]
        previous = {call["target_robot_name"]: {"name": call["name"], "arguments": call["arguments"]}}
        infos = f"panda: {call['name']} succeed with message: You have the {call['arguments']['id']} button pressed."
        feedback = orjson.dumps({"infos": infos, "previous_tool_call": previous}).decode()
        instruction = {"type": "env", "content": feedback}
    return per_decision


def prompt_tokens(policies: list[str], *, turns: int, settings: Settings) -> dict[str, Any]:
    count, tokenizer = token_counter(settings)
    results = {}
    for name in policies:
        tokens = asyncio.run(_episode_tokens(name, turns, count))
        # A decision taken without a model call (a planned step) reads no prompt at all: 0 tokens. The
        # growth is over the decisions that read one (None when none did: nothing to grow).
        prompted = [t for t in tokens if t]
        results[name] = {"decisions": len(tokens), "first": tokens[0], "last": tokens[-1], "max": max(tokens),
                         "mean": statistics.fmean(tokens), "model_decisions": len(prompted),
                         "growth": max(prompted) / prompted[0] if prompted else None, "per_decision": tokens}
    return {"tokenizer": tokenizer, "turns": turns, "policies": results}


# -- 2. model path: lava's strategy against the naive one ------------------------------------------

def naive_backend_class() -> type:
    from ..backends.local import LocalBackend

    class NaiveLocalBackend(LocalBackend):
        """Every candidate evaluates its whole prompt from an empty cache, one after another: what an
        agent gets from a runtime without prefix reuse or parallel candidates."""

        def _execute(self, jobs: list[Any]) -> None:
            for job in jobs:
                outputs, finish = [], []
                for k in range(job.n):
                    self._engine.forget()
                    single = dataclasses.replace(job, n=1, seed=job.seed + k, outputs=[], finish=[], guess_ahead=False)
                    self._engine.run([single])
                    if single.error is not None:
                        job.error = single.error
                        break
                    outputs += single.outputs
                    finish += single.finish
                job.outputs, job.finish, job.cached_tokens = outputs, finish, 0
                job.candidates_share_prompt = False

    return NaiveLocalBackend


async def _decide_batch(settings: Settings, backend: Any, request: dict[str, Any]) -> tuple[float, list[dict]]:
    from ..engine import Engine, EngineLimits
    from ..policies import create_policy

    # The server's own concurrency, so the figure is what `lava serve` does; no deadline cuts the naive run short.
    limits = EngineLimits(max_concurrency=settings.max_concurrency, deadline_s=3600)
    engine = Engine(create_policy(settings, backend), limits)
    parsed = AgentRequest.model_validate(request)
    backend._engine.forget()  # both strategies start from an empty cache
    started = time.perf_counter()
    outputs = await engine.respond(parsed)
    return time.perf_counter() - started, outputs


def model_path(fixtures: Path, settings: Settings, *, inputs: int, candidates: int, history: int) -> dict[str, Any]:
    from ..backends.local import LocalBackend

    request = gen_batch(fixtures, inputs=inputs, candidates=candidates, history=history)
    warmup = gen_batch(fixtures, inputs=1, candidates=1, history=2)
    kwargs = {"embedded_model": settings.embedded_model, "cache_dir": settings.cache_dir,
              "context_tokens": settings.context_tokens, "threads": settings.threads}
    results: dict[str, Any] = {}

    async def run(label: str, backend: LocalBackend) -> None:
        started = time.perf_counter()
        await backend.start()
        load_s = time.perf_counter() - started
        try:
            await _decide_batch(settings, backend, warmup)  # threads and caches warm, for both alike
            engine = backend._engine
            guessed_before = engine.guessed_tokens, engine.guessed_tokens_kept
            seconds, outputs = await _decide_batch(settings, backend, request)
        finally:
            await backend.close()
        steps = [step for output in outputs for step in output["internal_steps"] if "total_input_tokens" in step]
        by_input: dict[int, set[str]] = {}
        for output in outputs:
            if output["status"] == "completed":
                by_input.setdefault(output["source_id"], set()).add(json.dumps(output["output"], sort_keys=True))
        results[label] = {
            # MAGMA-GEN explores one branch per candidate: identical candidates of an input waste branches.
            "distinct": sum(len(seen) for seen in by_input.values()) / max(1, len(outputs)),
            "seconds": seconds, "load_s": load_s,
            "candidates": len(outputs), "completed": sum(o["status"] == "completed" for o in outputs),
            "model_calls": len(steps),
            "prompt_tokens": sum(step["total_input_tokens"] for step in steps),
            "cached_tokens": sum(step["total_cached_tokens"] for step in steps),
            "output_tokens": sum(step["total_output_tokens"] for step in steps),
            # Evaluated ahead from prompt lookup in the steps of other tokens, and kept.
            "guessed_tokens": engine.guessed_tokens - guessed_before[0],
            "guessed_tokens_kept": engine.guessed_tokens_kept - guessed_before[1],
        }

    asyncio.run(run("lava", LocalBackend(settings.model_path, **kwargs)))
    asyncio.run(run("naive", naive_backend_class()(settings.model_path, **kwargs)))
    return {
        "batch": f"{inputs} inputs x {candidates} candidates, {history}-entry histories, policy {settings.policy}",
        "model": settings.model_path.name if settings.model_path else settings.embedded_model,
        "threads": settings.threads or os.cpu_count(),
        **results, "speedup": results["naive"]["seconds"] / results["lava"]["seconds"],
    }


__all__ = ["model_path", "overhead_breakdown", "prompt_tokens", "rss_growth", "server_overhead"]
