"""A small batched inference engine on llama.cpp's C API: shared prefixes, parallel candidates.

Why not `llama_cpp.Llama`: it keeps one sequence, so the candidates of an input and the inputs
of a batch run one after another, each re-evaluating what the previous one evicted, and its
grammar sampler checks all 151k vocabulary entries at every step. This engine instead

- keeps `slots` sequences in one unified KV cache and remembers the tokens each holds; a new
  prompt starts from the slot sharing its longest prefix (copying cells is free in a unified
  cache), so turn t+1 re-uses turn t, and branches of one episode re-use each other;
- evaluates the new part of every prompt of a batch, then decodes all candidates of all inputs
  together, each step in a single `llama_decode` call;
- samples with the grammar applied lazily: the few most likely tokens are checked one by one
  against the candidate's grammar state (exact for greedy decoding and for top-k sampling), and
  only when none fits is the grammar applied to the whole vocabulary;
- guesses ahead from the prompt (prompt lookup, as vLLM's n-gram speculation): the tokens that
  followed the candidate's last few tokens where they last occurred (the JSON of the examples,
  the names in the prompt) are evaluated in the same step as its next token and kept as far as
  the sampler agrees, so a narrow batch writes a decision's fixed JSON in a few steps, not one
  step a token.

It is synchronous and not thread-safe: one worker thread owns it (see `local.py`).
"""

from __future__ import annotations

import ctypes
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import llama_cpp as L
import numpy as np

TOP_CANDIDATES = 48
# Prompt lookup: a guess continues the last 2 to 4 tokens from where they last occurred.
NGRAM_SIZES = (4, 3, 2)
GUESS_MAX = 12  # tokens guessed ahead by one candidate in one step
# A guessed token costs about 8 ms, a step about 40 ms (2 cores, the 0.5B model): guesses
# pay while a step is narrow, not when many candidates already fill it.
GUESS_STEP_TOKENS = 24


@dataclass
class Job:
    """One prompt to complete `n` times."""

    tokens: list[int]
    n: int
    max_tokens: int
    greedy: bool
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    seed: int = 0
    grammar: str | None = None  # GBNF
    deadline: float | None = None  # time.monotonic()
    # False when each candidate evaluated the prompt on its own (the naive baseline of `lava bench`).
    candidates_share_prompt: bool = True
    guess_ahead: bool = True  # prompt lookup (off: one token a step, as the naive baseline)
    # filled by the engine
    outputs: list[list[int]] = field(default_factory=list)
    finish: list[str] = field(default_factory=list)
    cached_tokens: int = 0
    error: Exception | None = None


@dataclass
class _Slot:
    seq: int
    tokens: list[int] = field(default_factory=list)
    last_used: float = 0.0


@dataclass
class _Candidate:
    job: Job
    index: int
    slot: _Slot
    grammar: object | None
    rng: np.random.Generator
    lookup: _Lookup | None = None
    out: list[int] = field(default_factory=list)
    done: bool = False
    finish: str = "length"
    guess_size: int = GUESS_MAX
    stop: int | None = None  # the end-of-turn token that finished it


log = logging.getLogger("lava.backends.llama")


class _Lookup:
    """Where each run of 2 to 4 tokens last occurred with something after it, in the candidate's
    output, its prompt, or the engine's recent outputs: what a candidate guesses its next tokens
    from."""

    def __init__(self, prompt: list[int], prompt_ends: dict[tuple[int, ...], int], recent: _RecentOutputs) -> None:
        self.tokens = prompt  # the prompt, then the output as it is accepted
        self.prompt_ends = prompt_ends
        self.recent = recent
        self.output_ends: dict[tuple[int, ...], int] = {}

    @staticmethod
    def index(tokens: list[int]) -> dict[tuple[int, ...], int]:
        ends: dict[tuple[int, ...], int] = {}
        for n in sorted(NGRAM_SIZES):
            for end in range(n - 1, len(tokens) - 1):  # the last token has nothing after it yet
                ends[tuple(tokens[end - n + 1:end + 1])] = end
        return ends

    def append(self, token: int) -> None:
        tokens = self.tokens
        end = len(tokens) - 1  # runs ending here now have a continuation
        tokens.append(token)
        for n in NGRAM_SIZES:
            if end >= n - 1:
                self.output_ends[tuple(tokens[end - n + 1:end + 1])] = end

    def guess(self, size: int) -> list[int]:
        tokens = self.tokens
        for n in NGRAM_SIZES:
            key = tuple(tokens[-n:])
            end = self.output_ends.get(key, self.prompt_ends.get(key))
            if end is not None:
                return tokens[end + 1:min(end + 1 + size, len(tokens))]
            found = self.recent.ends.get(key)
            if found is not None:
                source, end = found
                return source[end + 1:end + 1 + size]
        return []


class _RecentOutputs:
    """The runs of tokens of recent outputs, each with the end of its prompt: decisions repeat
    their JSON from one turn to the next, and a turn's first tokens follow the prompt's last ones."""

    MAX_RUNS = 20_000  # then it starts over: about two hundred outputs' worth

    def __init__(self) -> None:
        self.ends: dict[tuple[int, ...], tuple[list[int], int]] = {}

    def add(self, prompt: list[int], output: list[int]) -> None:
        if len(self.ends) > self.MAX_RUNS:
            self.ends.clear()
        tokens = prompt[-max(NGRAM_SIZES):] + output
        self.ends.update((run, (tokens, end)) for run, end in _Lookup.index(tokens).items())


class EngineError(RuntimeError):
    pass


def amx_compiled() -> bool:
    """Whether this llama.cpp build multiplies with Intel AMX (built natively on an AMX CPU)."""
    return b"AMX_INT8 = 1" in L.llama_print_system_info()


class LlamaEngine:
    def __init__(self, model_path: str, *, n_ctx: int, slots: int, threads: int, n_batch: int = 512,
                 verbose: bool = False) -> None:
        from llama_cpp._logger import set_verbose

        set_verbose(verbose)  # llama.cpp's load chatter on stderr, unless asked for
        L.llama_backend_init()
        model_params = L.llama_model_default_params()
        if amx_compiled():
            # Its AMX kernels crash in the first decode of a Q4_K model on Sapphire Rapids
            # (ggml-org/llama.cpp#20824). Weights then stay in plain CPU buffers; the repacked
            # AVX-512 layout they give up measured no faster for this model (9.20 s against 9.25 s).
            log.warning("llama.cpp was built with AMX, whose kernels crash on Q4_K models; loading without them")
            model_params.use_extra_bufts = False
        self.model = L.llama_model_load_from_file(model_path.encode(), model_params)
        if not self.model:
            raise EngineError(f"llama.cpp could not load {model_path}")
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = slots
        params.n_threads = threads
        params.n_threads_batch = threads
        params.kv_unified = True  # shared prefixes occupy their cells once
        # llama.cpp's CPU flash attention (its "auto" choice) handles a batch of fewer than 64
        # tokens one query row at a time: a decoding step of 20 candidates measured 16.5 ms a token
        # with it and 7.3 ms without (prompts: 5.6 against 6.3 ms). Plain attention's cost grows with
        # the cells in use and catches up at about 8k of them; lava's slots share prefixes and stay
        # well below that (a 30-batch MAGMA-GEN-like run: 258 s without, 364 s with).
        params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = L.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise EngineError("llama.cpp could not create a context")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.memory = L.llama_get_memory(self.ctx)
        self.slots = [_Slot(seq) for seq in range(slots)]
        self.batch = L.llama_batch_init(n_batch, 0, 1)
        self._single = (L.llama_token_data * 1)()
        self._single_array = L.llama_token_data_array(data=self._single, size=1, selected=-1, sorted=False)
        self._full = (L.llama_token_data * self.n_vocab)()
        self._full_view = np.ctypeslib.as_array(self._full)  # structured: id, logit, p
        self._full_ids = np.arange(self.n_vocab, dtype=np.int32)
        self.recent = _RecentOutputs()
        self.guessed_tokens = self.guessed_tokens_kept = 0  # for `lava bench`

    # -- model facts --------------------------------------------------------------------------

    def metadata(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(1 << 16)
        size = L.llama_model_meta_val_str(self.model, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", errors="replace") if size >= 0 else None

    def token_text(self, token: int, special: bool = True) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        size = L.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = L.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        return buffer.raw[:size]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_text(t, special=False) for t in tokens).decode("utf-8", errors="replace")

    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        buffer = (L.llama_token * capacity)()
        count = L.llama_tokenize(self.vocab, data, len(data), buffer, capacity, False, True)
        if count < 0:
            raise EngineError("prompt could not be tokenized")
        return list(buffer[:count])

    def eos_text(self) -> str:
        return self.token_text(L.llama_vocab_eos(self.vocab)).decode("utf-8", errors="replace")

    # -- KV cache slots ------------------------------------------------------------------------

    @staticmethod
    def _common(a: Sequence[int], b: Sequence[int]) -> int:
        limit = min(len(a), len(b))
        i = 0
        while i < limit and a[i] == b[i]:
            i += 1
        return i

    def _prepare_slot(self, tokens: list[int], taken: set[int]) -> tuple[_Slot, int]:
        """A free slot holding the longest available prefix of `tokens`; returns (slot, cached)."""
        best_source, best = None, 0
        for slot in self.slots:
            shared = self._common(slot.tokens, tokens)
            if shared > best:
                best_source, best = slot, shared
        best = min(best, len(tokens) - 1)  # always evaluate at least one token to get fresh logits
        if best_source is not None and best_source.seq not in taken and best > 0:
            target = best_source
        else:
            target = self._free_slot(taken)
        if target is best_source:
            L.llama_memory_seq_rm(self.memory, target.seq, best, -1)
        else:
            L.llama_memory_seq_rm(self.memory, target.seq, -1, -1)
            if best_source is not None and best > 0:
                L.llama_memory_seq_cp(self.memory, best_source.seq, target.seq, 0, best)
        target.tokens = list(tokens[:best]) if best_source is not None and best > 0 else []
        return target, len(target.tokens)

    def forget(self) -> None:
        """Empty the KV cache: the next prompts start cold (for measurements)."""
        L.llama_memory_clear(self.memory, True)
        for slot in self.slots:
            slot.tokens = []

    def _free_slot(self, taken: set[int]) -> _Slot:
        free = [s for s in self.slots if s.seq not in taken]
        if not free:
            raise EngineError("no free sequence slot")
        return min(free, key=lambda s: (s.last_used, len(s.tokens)))

    def _evict_for(self, needed: int, taken: set[int]) -> bool:
        """Free KV cells by forgetting idle slots (least recently used first)."""
        idle = sorted((s for s in self.slots if s.seq not in taken and s.tokens), key=lambda s: s.last_used)
        for slot in idle:
            L.llama_memory_seq_rm(self.memory, slot.seq, -1, -1)
            slot.tokens = []
            needed -= 1
            if needed <= 0:
                return True
        return bool(idle)

    # -- decoding ------------------------------------------------------------------------------

    def _decode(self, items: list[tuple[int, int, int, bool]], taken: set[int]) -> None:
        batch = self.batch
        for start in range(0, len(items), self.n_batch):
            chunk = items[start:start + self.n_batch]
            batch.n_tokens = len(chunk)
            for i, (token, pos, seq, logits) in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = pos
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = logits
            status = L.llama_decode(self.ctx, batch)
            if status == 1 and self._evict_for(1, taken):
                status = L.llama_decode(self.ctx, batch)
            if status != 0:
                raise EngineError(f"llama_decode failed with status {status} (context full?)")

    def _logits(self, index: int) -> np.ndarray:
        pointer = L.llama_get_logits_ith(self.ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def _fits(self, grammar: object | None, token: int) -> bool:
        if grammar is None:
            return True
        self._single[0].id = token
        self._single[0].logit = 0.0
        self._single[0].p = 0.0
        self._single_array.size = 1
        self._single_array.selected = -1
        L.llama_sampler_apply(grammar, ctypes.byref(self._single_array))
        return not math.isinf(self._single[0].logit)

    def _allowed_everywhere(self, grammar: object, logits: np.ndarray) -> np.ndarray:
        """Full-vocabulary grammar check: the slow path, taken only when no likely token fits."""
        view = self._full_view
        view["id"] = self._full_ids
        view["logit"] = logits
        view["p"] = 0.0
        array = L.llama_token_data_array(data=self._full, size=self.n_vocab, selected=-1, sorted=False)
        L.llama_sampler_apply(grammar, ctypes.byref(array))
        return np.array(view["logit"], copy=True)

    def _allowed(self, candidate: _Candidate, logits: np.ndarray, k: int, first_only: bool) -> list[int]:
        """The k most likely tokens that the grammar admits, most likely first (`first_only`: the first)."""
        top = np.argpartition(-logits, k)[:k]
        top = top[np.argsort(-logits[top])]
        grammar = candidate.grammar
        if grammar is None:
            return [int(top[0])] if first_only else [int(t) for t in top]
        allowed: list[int] = []
        for t in top:
            if self._fits(grammar, int(t)):
                allowed.append(int(t))
                if first_only:
                    break
        if not allowed:
            masked = self._allowed_everywhere(grammar, logits)
            finite = np.flatnonzero(np.isfinite(masked))
            if finite.size == 0:
                raise EngineError("the grammar admits no token")
            allowed = [int(t) for t in finite[np.argsort(-masked[finite])][:k]]
        return allowed

    def _sample(self, candidate: _Candidate, logits: np.ndarray, guessed: int | None = None) -> int:
        """The next token; `guessed`, the token already evaluated in its place, is kept with the
        probability the sampler gives it and otherwise excluded from the draw (speculative
        sampling with a fixed guess), so guessing never changes what is sampled, only when."""
        job = candidate.job
        greedy = job.greedy or job.temperature <= 0
        allowed = self._allowed(candidate, logits, TOP_CANDIDATES if job.greedy else max(1, job.top_k), greedy)
        if greedy:
            return allowed[0]
        chosen = np.array(allowed)
        scaled = logits[chosen].astype(np.float64) / job.temperature
        probs = np.exp(scaled - scaled.max())
        probs /= probs.sum()
        if job.top_p < 1.0:
            order = np.argsort(-probs)
            cumulative = np.cumsum(probs[order])
            keep = order[: int(np.searchsorted(cumulative, job.top_p) + 1)]
            mask = np.zeros_like(probs)
            mask[keep] = probs[keep]
            probs = mask / mask.sum()
        if guessed is not None and guessed in allowed:
            where = allowed.index(guessed)
            if candidate.rng.random() < probs[where]:
                return guessed
            rest = probs.sum() - probs[where]
            if rest <= 0:
                return guessed
            probs[where] = 0.0
            probs /= rest
        return int(candidate.rng.choice(chosen, p=probs))

    def run(self, jobs: Sequence[Job]) -> None:
        """Complete every job in place (`outputs`, `finish`, `cached_tokens`, or `error`)."""
        pending = list(jobs)
        while pending:
            group, seats = [], 0
            while pending and (not group or seats + pending[0].n <= len(self.slots)):
                job = pending.pop(0)
                if job.n > len(self.slots):
                    job.error = EngineError(f"{job.n} candidates exceed the {len(self.slots)} sequence slots")
                    continue
                group.append(job)
                seats += job.n
            if group:
                self._run_group(group)

    def _run_group(self, jobs: list[Job]) -> None:
        now = time.monotonic()
        taken: set[int] = set()
        candidates: list[_Candidate] = []
        first_logits: list[tuple[list[_Candidate], int]] = []
        for job in jobs:
            if job.deadline is not None and now >= job.deadline:
                job.error = TimeoutError("the deadline passed before generation started")
                continue
            if len(job.tokens) + job.max_tokens > self.n_ctx:
                job.error = EngineError(f"prompt of {len(job.tokens)} tokens plus {job.max_tokens} to generate "
                                        f"exceeds the context of {self.n_ctx}")
                continue
            slot, cached = self._prepare_slot(job.tokens, taken)
            taken.add(slot.seq)
            job.cached_tokens = cached
            rest = job.tokens[cached:]
            # Decoding job by job lets the next job's prefix come from this one's fresh cells.
            self._decode([(tok, cached + i, slot.seq, i == len(rest) - 1) for i, tok in enumerate(rest)], taken)
            slot.tokens = list(job.tokens)
            slot.last_used = now
            logits_copy = np.array(self._logits(-1), copy=True)
            seats = [slot]
            for _ in range(job.n - 1):
                other = self._free_slot(taken)
                L.llama_memory_seq_rm(self.memory, other.seq, -1, -1)
                L.llama_memory_seq_cp(self.memory, slot.seq, other.seq, 0, len(job.tokens))
                other.tokens = list(job.tokens)
                other.last_used = now
                taken.add(other.seq)
                seats.append(other)
            group = []
            prompt_ends = _Lookup.index(job.tokens) if job.guess_ahead else None
            for index, seat in enumerate(seats):
                grammar = None
                if job.grammar:
                    grammar = L.llama_sampler_init_grammar(self.vocab, job.grammar.encode(), b"root")
                    if not grammar:
                        raise EngineError("invalid grammar")
                candidate = _Candidate(job, index, seat, grammar, np.random.default_rng(job.seed + index),
                                       _Lookup(list(job.tokens), prompt_ends, self.recent)
                                       if prompt_ends is not None else None)
                group.append(candidate)
                candidates.append(candidate)
            first_logits.append((group, logits_copy))
        try:
            self._generate(candidates, first_logits)
        finally:
            for candidate in candidates:
                if candidate.grammar is not None:
                    L.llama_sampler_free(candidate.grammar)
        for job in jobs:
            if job.error is None:
                mine = sorted((c for c in candidates if c.job is job), key=lambda c: c.index)
                job.outputs = [c.out for c in mine]
                job.finish = [c.finish for c in mine]
                if job.guess_ahead:
                    for c in mine:
                        self.recent.add(job.tokens, c.out + ([c.stop] if c.stop is not None else []))

    def _accept(self, candidate: _Candidate, token: int) -> None:
        if L.llama_vocab_is_eog(self.vocab, token):
            candidate.done, candidate.finish, candidate.stop = True, "stop", token
            return
        if candidate.grammar is not None:
            L.llama_sampler_accept(candidate.grammar, token)
        candidate.out.append(token)
        if candidate.lookup is not None:
            candidate.lookup.append(token)
        if len(candidate.out) >= candidate.job.max_tokens:
            candidate.done, candidate.finish = True, "length"

    def _generate(self, candidates: list[_Candidate], first: list[tuple[list[_Candidate], np.ndarray]]) -> None:
        for group, logits in first:
            for candidate in group:
                self._accept(candidate, self._sample(candidate, logits))
        taken = {c.slot.seq for c in candidates}
        while True:
            now = time.monotonic()
            for candidate in candidates:
                if not candidate.done and candidate.job.deadline is not None and now >= candidate.job.deadline:
                    candidate.done, candidate.finish = True, "deadline"
            active = [c for c in candidates if not c.done]
            if not active:
                break
            room = max(0, min(GUESS_STEP_TOKENS, self.n_batch) - len(active)) // len(active)
            items, guesses = [], []
            for candidate in active:
                token, seq, pos = candidate.out[-1], candidate.slot.seq, len(candidate.slot.tokens)
                items.append((token, pos, seq, True))
                candidate.slot.tokens.append(token)
                size = min(room, candidate.guess_size, candidate.job.max_tokens - len(candidate.out))
                guess = candidate.lookup.guess(size) if candidate.lookup and size > 0 else []
                items += [(t, pos + 1 + j, seq, True) for j, t in enumerate(guess)]
                guesses.append(guess)
            self._decode(items, taken)
            row = 0
            for candidate, guess in zip(active, guesses, strict=True):
                self._advance(candidate, guess, row)
                row += len(guess) + 1

    def _advance(self, candidate: _Candidate, guess: list[int], row: int) -> None:
        """Samples the candidate's next token from its first row of the step, then one more from the
        row of each guessed token the sampler agreed with; the cells of the rest are dropped."""
        kept = 0
        while True:
            guessed = guess[kept] if kept < len(guess) else None
            token = self._sample(candidate, self._logits(row + kept), guessed)
            self._accept(candidate, token)
            if candidate.done or guessed is None or token != guessed:
                break
            kept += 1
        self.guessed_tokens += len(guess)
        self.guessed_tokens_kept += kept
        if guess:
            candidate.slot.tokens += guess[:kept]
            if kept < len(guess):
                L.llama_memory_seq_rm(self.memory, candidate.slot.seq, len(candidate.slot.tokens), -1)
            # A guess that missed early is likely to miss again soon (a name being chosen):
            # guess short until guesses hold again.
            candidate.guess_size = GUESS_MAX if kept == len(guess) else max(1, kept)


__all__ = ["EngineError", "Job", "LlamaEngine"]
