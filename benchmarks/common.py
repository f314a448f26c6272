"""Shared pieces of the benchmarks: timing, medians, subprocess runs, and the result rows.

Every benchmark module has ``run(quick: bool = False) -> List[Row]``; ``benchmarks/run.py``
collects the rows and prints one table. Measurements are medians of repeated runs, and the
cases compared with each other are interleaved (A B C A B C ...) so that machine noise (CPU
frequency, page cache, other load) falls on every case alike instead of on whichever ran last.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)


@dataclass
class Row:
    group: str  # "start-up", "apply", ...
    case: str  # what ran
    median_s: Optional[float]  # None: not measured (see note)
    floor: Optional[str] = None  # the case this one is compared with (its ratio is median / floor's)
    note: str = ""
    extra: Dict[str, float] = field(default_factory=dict)  # e.g. {"p90_s": ...}
    is_floor: bool = False
    # every sample (one per interleaved round): the table then shows min-max beside the median,
    # and the ratio to the floor round by round (this round's sample / the floor's, median and
    # min-max), which is what interleaving makes comparable
    samples: List[float] = field(default_factory=list)
    unit: str = "s"  # "s" (median_s is seconds) or "MiB" (a peak of memory)


def rows_of(group: str, samples: Dict[str, List[float]], floor: str, notes: Dict[str, str],
            unit: str = "s") -> List[Row]:
    """One row per case of an interleaved run, the floor first, each with its samples."""
    rows = [Row(group, floor, median(samples[floor]), is_floor=True, note=notes.get(floor, ""),
                samples=list(samples[floor]), unit=unit)]
    for name, xs in samples.items():
        if name != floor:
            rows.append(Row(group, name, median(xs), floor=floor, note=notes.get(name, ""), samples=list(xs),
                            unit=unit))
    return rows


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(cases: Dict[str, Callable[[], object]], runs: int, warmup: int = 1) -> Dict[str, List[float]]:
    """Run every case ``runs`` times, round-robin; returns the samples per case (seconds)."""
    for _ in range(warmup):
        for fn in cases.values():
            fn()
    samples: Dict[str, List[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, fn in cases.items():
            samples[name].append(timed(fn))
    return samples


def run_quiet(argv: Sequence[str], env: Optional[Dict[str, str]] = None, check: bool = True) -> None:
    proc = subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-400:]}")


def fmt_time(seconds: Optional[float]) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_value(value: Optional[float], unit: str = "s") -> str:
    if unit == "s" or value is None:
        return fmt_time(value)
    if unit == "x":  # a ratio
        return f"{value:.2f}x"
    return f"{value:.1f} {unit}"


def _median_range(row: Row) -> str:
    text = fmt_value(row.median_s, row.unit)
    if len(row.samples) > 1:
        text += f" ({fmt_value(min(row.samples), row.unit)}-{fmt_value(max(row.samples), row.unit)})"
    return text


def ratio(row: Row, base: Row) -> str:
    """``row`` against its floor: round by round when both have one sample per interleaved
    round (median and min-max of those ratios), else median / median."""
    if row.median_s is None or not base.median_s:
        return ""
    pairs = list(zip(row.samples, base.samples))
    if len(row.samples) == len(base.samples) > 1 and all(b > 0 for _, b in pairs):
        per_round = [a / b for a, b in pairs]
        return f"{median(per_round):.2f}× ({min(per_round):.2f}-{max(per_round):.2f}) {row.floor}"
    return f"{row.median_s / base.median_s:.2f}× {row.floor}"


def table(rows: List[Row]) -> str:
    """A Markdown table: group, case, median (min-max), ratio to its floor, note."""
    by_case = {(r.group, r.case): r for r in rows}
    lines = ["| benchmark | case | median (min-max) | vs. floor | note |", "|---|---|---:|---:|---|"]
    for r in rows:
        text = ""
        if r.is_floor:
            text = "1.00× (floor)"
        elif r.floor:
            base = by_case.get((r.group, r.floor))
            if base is not None:
                text = ratio(r, base)
        lines.append(f"| {r.group} | {r.case} | {_median_range(r)} | {text} | {r.note} |")
    return "\n".join(lines)


def print_result(doc: Any, rows: List[Row], as_json: bool) -> int:
    """What a benchmark run on its own prints: its JSON document (``--json``) or its table."""
    if as_json:
        print(json.dumps(doc, indent=1))
    else:
        print(table(rows))
    return 0


def save_json(name: str, doc: Any) -> str:
    """Keep a benchmark's JSON document as build/bench/``name`` (plots.py draws from it)."""
    path = os.path.join(REPO, "build", "bench", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return path
