"""Compile several local benchmark directories in one MAGMA-venv process (imports once, ~1 s each).

Usage (inside the MAGMA venv):  python compile_suite.py PLAN.json
PLAN: {"<out dir>": ["scenario.Entry[=JSON][@SEED]", ...], ...}; one scenario per directory.
Prints one JSON line per directory: {"out": ..., "ok": bool, "roots": [...], "error": ...}; `roots` are
the benchmark roots written (OUT itself, plus a sibling per further tools class, see local_benchmark).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import local_benchmark


def main() -> int:
    plan = json.loads(Path(sys.argv[1]).read_text())
    for out, entries in plan.items():
        chatter = io.StringIO()
        try:
            with contextlib.redirect_stdout(chatter):
                local_benchmark.main([out, *entries])
            roots = [line[len("root: "):] for line in chatter.getvalue().splitlines() if line.startswith("root: ")]
            print(json.dumps({"out": out, "ok": True, "roots": roots}), flush=True)
        except BaseException as exc:  # SystemExit from argparse errors included
            print(json.dumps({"out": out, "ok": False, "error": f"{type(exc).__name__}: {exc}"[-1500:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
