"""Evaluation suites: text files listing the episodes to compile, one per line.

    # comment
    press_button.ButtonPressOrdered                       a preset, its default arguments
    press_button.ButtonPressOrdered={"sequence_of_buttons": ["sw1"], "instruction": "Press sw1"}
    press_button.Definition seeds=0-3                     a definition, expanded with seeds 0..3
    color_sorting.CleanTablePreset seeds=1,2              a preset under two semantic randomizations

Each (entry, seed) is one clean episode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SUITES_DIR = Path(__file__).parent / "suites"
_SEEDS = re.compile(r"\s+seeds=([0-9,\-]+)\s*$")


@dataclass(frozen=True, slots=True)
class SuiteEntry:
    scenario: str
    entry: str  # scenario.Name[=JSON]
    seed: int | None

    @property
    def compiled(self) -> str:
        return self.entry if self.seed is None else f"{self.entry}@{self.seed}"

    @property
    def label(self) -> str:
        name = self.entry.split("=", 1)[0]
        return name if self.seed is None else f"{name}@{self.seed}"


def _seeds(spec: str) -> list[int]:
    seeds: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            seeds.extend(range(int(low), int(high) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def parse_suite(text: str) -> list[SuiteEntry]:
    entries: list[SuiteEntry] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        seeds: list[int | None] = [None]
        match = _SEEDS.search(line)
        if match:
            seeds = list(_seeds(match.group(1)))
            line = line[: match.start()].strip()
        name = line.split("=", 1)[0]
        if "." not in name:
            raise ValueError(f"line {number}: expected scenario.Entry, got {line!r}")
        entries.extend(SuiteEntry(name.split(".", 1)[0], line, seed) for seed in seeds)
    return entries


def load_suite(name_or_path: str) -> list[SuiteEntry]:
    path = Path(name_or_path)
    if not path.is_file():
        path = SUITES_DIR / f"{name_or_path}.txt"
    if not path.is_file():
        shipped = ", ".join(p.stem for p in sorted(SUITES_DIR.glob("*.txt")))
        raise FileNotFoundError(f"no suite {name_or_path!r} (a file, or one of: {shipped})")
    return parse_suite(path.read_text(encoding="utf-8"))


def by_scenario(entries: list[SuiteEntry]) -> dict[str, list[SuiteEntry]]:
    groups: dict[str, list[SuiteEntry]] = {}
    for entry in entries:
        groups.setdefault(entry.scenario, []).append(entry)
    return groups


__all__ = ["SuiteEntry", "by_scenario", "load_suite", "parse_suite"]
