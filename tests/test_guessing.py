"""Guessing ahead in the embedded model's engine (prompt lookup): guessed tokens are evaluated in
the step of the token before them and kept as far as the sampler agrees, which changes when a
token is sampled, never which."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from lava.backends import llama_engine
from lava.backends.llama_engine import Job, LlamaEngine, _Candidate, _Lookup, _RecentOutputs, _Slot


def lookup(prompt: list[int], recent: _RecentOutputs | None = None) -> _Lookup:
    return _Lookup(list(prompt), _Lookup.index(prompt), recent or _RecentOutputs())


def test_a_guess_continues_the_longest_run_where_it_last_occurred() -> None:
    prompt = [10, 1, 2, 3, 4, 11, 1, 2, 5, 6, 12]
    recent_run = lookup(prompt)
    for token in (11, 1, 2):
        recent_run.append(token)
    assert recent_run.guess(2) == [5, 6]  # (1, 2) last occurred before 5, 6
    longer_run = lookup(prompt)
    for token in (10, 1, 2):
        longer_run.append(token)
    assert longer_run.guess(2) == [3, 4]  # (10, 1, 2) is a longer match than (1, 2)
    assert longer_run.guess(1) == [3]


def test_the_output_so_far_comes_before_the_prompt() -> None:
    own = lookup([1, 2, 3, 9])
    for token in (1, 2, 7, 8, 1, 2):
        own.append(token)
    assert own.guess(2) == [7, 8]


def test_recent_outputs_seed_the_guess_where_the_prompt_has_no_match() -> None:
    recent = _RecentOutputs()
    recent.add([5, 6, 7, 8], [20, 21, 22, 23])  # the last turn: its prompt ended with 7, 8
    fresh = lookup([30, 31, 7, 8], recent)
    assert fresh.guess(3) == [20, 21, 22]
    fresh.append(20)
    assert fresh.guess(8) == [21, 22, 23]
    assert lookup([40, 41, 42]).guess(4) == []  # nothing to go by: no guess


def candidate(job: Job, seed: int) -> _Candidate:
    return _Candidate(job, 0, _Slot(0), None, np.random.default_rng(seed))


def test_sampling_with_a_guess_draws_from_the_same_distribution() -> None:
    engine = LlamaEngine.__new__(LlamaEngine)  # sampling needs no model
    logits = np.log(np.array([0.3, 0.25, 0.2, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01] + [1e-6] * 41, dtype=np.float32))
    job = Job(tokens=[], n=1, max_tokens=8, greedy=False, temperature=1.0, top_p=0.95, top_k=40)
    draws = 20_000
    for guessed in (0, 1, 4, 8):  # the likeliest, a likely one, a rare one, one outside top_p
        plain, guessing = candidate(job, 1), candidate(job, 2)
        without = Counter(engine._sample(plain, logits) for _ in range(draws))
        with_guess = Counter(engine._sample(guessing, logits, guessed) for _ in range(draws))
        for token in range(12):
            assert abs(without[token] - with_guess[token]) / draws < 0.015, (guessed, token, without, with_guess)
        assert with_guess[8] == 0  # cut by top_p, guessed or not


def test_greedy_decoding_takes_the_likeliest_token_whatever_was_guessed() -> None:
    engine = LlamaEngine.__new__(LlamaEngine)
    logits = np.arange(60, dtype=np.float32)
    job = Job(tokens=[], n=1, max_tokens=8, greedy=True)
    assert {engine._sample(candidate(job, seed), logits, 3) for seed in range(20)} == {59}


@pytest.mark.model
def test_guessing_ahead_keeps_greedy_answers_and_saves_steps(monkeypatch) -> None:
    """Captured MAGMA-BENCH requests (greedy), decided by the embedded model with and without
    guessing: the same decisions; with guessing, guessed tokens were kept."""
    from conftest import fixture_requests
    from lava.backends.local import LocalBackend
    from lava.engine import Engine
    from lava.policies.full_history import FullHistoryPolicy
    from lava.protocol import AgentRequest
    from lava.settings import Settings

    settings = Settings(backend="local", policy="full_history")
    backend = LocalBackend(cache_dir=settings.cache_dir)
    engine = Engine(FullHistoryPolicy(backend, settings))
    requests = [AgentRequest.model_validate(r) for r in fixture_requests("bench_color_sorting.requests.jsonl")[:3]]
    default_step_tokens = llama_engine.GUESS_STEP_TOKENS
    steps: list[int] = []
    original_decode = LlamaEngine._decode

    def counted(self, items, taken):
        steps.append(len(items))
        return original_decode(self, items, taken)

    monkeypatch.setattr(LlamaEngine, "_decode", counted)

    async def decide(step_tokens: int) -> tuple[list[str], int]:
        monkeypatch.setattr(llama_engine, "GUESS_STEP_TOKENS", step_tokens)
        backend._engine.forget()
        steps.clear()
        answers = []
        for request in requests:
            answers += [json.dumps(o["output"], sort_keys=True) for o in await engine.respond(request)]
        return answers, len(steps)

    async def go():
        await backend.start()
        try:
            return await decide(0), await decide(default_step_tokens)
        finally:
            await backend.close()

    (plain, plain_steps), (guessing, guessing_steps) = asyncio.run(go())
    assert guessing == plain
    assert backend._engine.guessed_tokens_kept > 0
    assert guessing_steps < plain_steps
