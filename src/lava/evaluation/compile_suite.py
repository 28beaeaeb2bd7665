"""Compile several local benchmark directories in one MAGMA-venv process (imports once, ~1 s each).

Usage (inside the MAGMA venv):  python compile_suite.py PLAN.json [--max-tool-calls N]
PLAN: {"<out dir>": ["scenario.Entry[=JSON][@SEED]", ...], ...}; one scenario per directory.
Prints one JSON line per directory: {"out": ..., "ok": bool, "roots": [...], "skipped": {entry: error},
"error": ...}; `roots` are the benchmark roots written (OUT itself, plus a sibling per further tools
class, see local_benchmark). An entry that cannot be compiled (a benchmark bundle named as a preset)
is skipped, with its error, rather than losing the other entries of its scenario.
`--max-tool-calls` is the budget MAGMA-GEN's task generator fills when it expands a definition
(local_benchmark's option: its default 10 makes one or two requests, 40 is MAGMA-GEN's own default).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import local_benchmark


def _compile(out: str, entries: list[str], options: list[str]) -> list[str]:
    """The benchmark roots written; raises what the compiler raised."""
    chatter = io.StringIO()
    with contextlib.redirect_stdout(chatter):
        local_benchmark.main([out, *entries, *options])
    return [line[len("root: "):] for line in chatter.getvalue().splitlines() if line.startswith("root: ")]


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[-1500:]


def main() -> int:
    plan = json.loads(Path(sys.argv[1]).read_text())
    options = sys.argv[2:]  # passed on to every compile
    for out, entries in plan.items():
        skipped: dict[str, str] = {}
        try:
            roots = _compile(out, entries, options)
        except BaseException as exc:  # SystemExit from argparse errors included
            if len(entries) == 1:
                print(json.dumps({"out": out, "ok": False, "error": _error(exc)}), flush=True)
                continue
            scratch = tempfile.mkdtemp(prefix="lava-compile-")
            for entry in entries:  # which ones fail on their own
                try:
                    _compile(str(Path(scratch) / "one"), [entry], options)
                except BaseException as alone:
                    skipped[entry] = _error(alone)
            shutil.rmtree(scratch, ignore_errors=True)
            kept = [e for e in entries if e not in skipped]
            try:
                if not kept or not skipped:
                    raise exc
                roots = _compile(out, kept, options)
            except BaseException as again:
                print(json.dumps({"out": out, "ok": False, "error": _error(again), "skipped": skipped}), flush=True)
                continue
        print(json.dumps({"out": out, "ok": True, "roots": roots, "skipped": skipped}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
