"""`lava bench`: lava's speed and memory, measured side by side in one run and printed as ratios.

Targets (issue 5): overhead <= 2x the floor; the model path >= 3x faster than the naive strategy
and <= 45 s for the 10 x 2 GEN batch on 2 cores; RSS growth < 5% over 10,000 requests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

from ..settings import Settings

SECTIONS = ("overhead", "breakdown", "model", "tokens", "rss")
TARGETS = {"overhead_ratio": 2.0, "model_speedup": 3.0, "model_seconds": 45.0, "rss_growth": 0.05,
           "token_growth": 1.5}


def add_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="measure lava's overhead, model path, prompt size and memory")
    bench.add_argument("--only", default=",".join(SECTIONS),
                       help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})")
    bench.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    bench.add_argument("--fixtures", type=Path, help="captured MAGMA requests (default: the checkout's)")
    bench.add_argument("--rounds", type=int, default=200, help="overhead: timed requests per server")
    bench.add_argument("--requests", type=int, default=10_000, help="rss: requests between the two readings")
    bench.add_argument("--turns", type=int, default=40, help="tokens: decisions in the scripted episode")
    bench.add_argument("--inputs", type=int, default=10, help="model: inputs in the GEN batch")
    bench.add_argument("--candidates", type=int, default=2, help="model: candidates per input")
    bench.add_argument("--history", type=int, default=20, help="model: history entries per input")
    bench.add_argument("--policy", help="decision policy for the model path (default: the configured one)")
    bench.add_argument("--embedded-model", choices=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    bench.add_argument("--model-path", type=Path, help="another GGUF for the model path")


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def render(report: dict[str, Any]) -> str:
    lines = [f"lava bench on {report['machine']}"]
    if "overhead" in report:
        o = report["overhead"]
        lines += [
            "", f"1. server overhead: {o['batch']} in, {o['answer_bytes']:,} bytes out, {o['rounds']} requests each, "
                "alternating",
            f"   lava serve (scripted, policy {o['policy']:12}) median {o['lava']['median_ms']:7.2f} ms   "
            f"p90 {o['lava']['p90_ms']:7.2f} ms",
            *(f"   lava serve (scripted, policy {name:12}) median {r['median_ms']:7.2f} ms   p90 {r['p90_ms']:7.2f} ms"
              f"   ({r['ratio']:.2f}x the floor)" for name, r in o.get("also", {}).items()),
            f"   floor (decode, magma_core, encode same)    median {o['floor']['median_ms']:7.2f} ms   "
            f"p90 {o['floor']['p90_ms']:7.2f} ms",
            f"   ratio {o['ratio']:.2f}x the floor   (target <= {TARGETS['overhead_ratio']:g}x: "
            f"{_mark(o['ratio'] <= TARGETS['overhead_ratio'])})",
        ]
    if "breakdown" in report:
        b = report["breakdown"]
        ms = b["stages_ms"]
        lines += [
            "", f"1b. where the time goes, in this process (ms per batch, medians of {b['rounds']} alternating rounds)",
            f"   floor: validate {ms['floor: validate (magma_core)']:.2f} + encode {ms['floor: encode the answer']:.2f}"
            f" = {b['floor_ms']:.2f}",
            f"   lava:  read and validate {ms['read and validate the body']:.2f}   read the inputs "
            f"{ms['read the inputs (situations)']:.2f}   engine (copies, tasks, outputs, metrics) "
            f"{b['engine_alone_ms']:.2f}   encode {ms['encode the answer']:.2f}",
            "          policy " + "   ".join(f"{name} {value:.2f}" for name, value in b["policy_ms"].items()),
        ]
    if "model" in report:
        m = report["model"]
        lava, naive = m["lava"], m["naive"]
        lines += ["", f"2. model path: {m['batch']}, {m['model']}, {m['threads']} threads"]
        for label, r in (("lava (shared prefixes, one loop)", lava), ("naive (each candidate alone)", naive)):
            lines.append(f"   {label:36} {r['seconds']:7.1f} s   {r['completed']}/{r['candidates']} valid   "
                         f"{r['distinct'] * 100:.0f}% distinct   "
                         f"{r['model_calls']} calls   prompt {r['prompt_tokens']:,} tok ({r['cached_tokens']:,} cached)"
                         f"   out {r['output_tokens']:,} tok"
                         + (f" ({r['guessed_tokens_kept']:,} guessed ahead, of {r['guessed_tokens']:,} tried)"
                            if r.get("guessed_tokens") else ""))
        lines.append(f"   speedup {m['speedup']:.2f}x   (target >= {TARGETS['model_speedup']:g}x: "
                     f"{_mark(m['speedup'] >= TARGETS['model_speedup'])}; batch <= {TARGETS['model_seconds']:g} s: "
                     f"{_mark(lava['seconds'] <= TARGETS['model_seconds'])})")
    if "tokens" in report:
        t = report["tokens"]
        lines += ["", f"3. prompt tokens per decision over a {t['turns']}-turn scripted episode ({t['tokenizer']})"]
        for name, r in t["policies"].items():
            growth = ("no prompt at all (every decision planned)" if r["growth"] is None else
                      f"max/first prompt {r['growth']:.2f}x   (target <= {TARGETS['token_growth']:g}x: "
                      f"{_mark(r['growth'] <= TARGETS['token_growth'])})")
            lines.append(f"   {name:14} turn 1 {r['first']:6,}   turn {r['decisions']} {r['last']:6,}   "
                         f"max {r['max']:6,}   mean {r['mean']:7,.0f}   model called in {r['model_decisions']}/"
                         f"{r['decisions']} decisions   {growth}")
    if "rss" in report:
        r = report["rss"]
        lines += ["", f"4. RSS of lava serve (scripted) over {r['requests']:,} requests after {r['warmup']} warm-up",
                  f"   {r['rss_before_mb']:.1f} MB -> {r['rss_after_mb']:.1f} MB   growth {r['growth'] * 100:+.2f}%   "
                  f"({r['requests_per_s']:.0f} requests/s)   (target < {TARGETS['rss_growth'] * 100:g}%: "
                  f"{_mark(r['growth'] < TARGETS['rss_growth'])})"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from . import measure
    from .workload import fixtures_dir

    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"lava bench: unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    fixtures = fixtures_dir(args.fixtures)
    overrides = {"policy": args.policy, "embedded_model": args.embedded_model, "model_path": args.model_path}
    settings = Settings.load(**overrides)
    report: dict[str, Any] = {"machine": f"{os.cpu_count()} cores, {platform.machine()}, "
                                         f"Python {platform.python_version()}"}
    if "overhead" in sections:
        report["overhead"] = measure.server_overhead(fixtures, rounds=args.rounds)
    if "breakdown" in sections:
        report["breakdown"] = measure.overhead_breakdown(fixtures, rounds=args.rounds)
    if "model" in sections:
        report["model"] = measure.model_path(fixtures, settings, inputs=args.inputs, candidates=args.candidates,
                                             history=args.history)
    if "tokens" in sections:
        from ..policies import POLICIES

        report["tokens"] = measure.prompt_tokens(list(POLICIES), turns=args.turns, settings=settings)
    if "rss" in sections:
        report["rss"] = measure.rss_growth(fixtures, requests=args.requests)
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
        print(f"\nfigures: {args.json}")
    return 0


__all__ = ["SECTIONS", "TARGETS", "add_parser", "render", "run"]
