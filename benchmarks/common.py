"""Shared pieces of the benchmarks: timing, medians, subprocess runs, and the result rows.

Every benchmark module has ``run(quick: bool = False) -> List[Row]``; ``benchmarks/run.py``
collects the rows and prints one table. Measurements are medians of repeated runs, and the
cases compared with each other are interleaved (A B C A B C ...) so that machine noise (CPU
frequency, page cache, other load) falls on every case alike instead of on whichever ran last.
"""

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

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


def table(rows: List[Row]) -> str:
    """A Markdown table: group, case, median, ratio to its floor, note."""
    by_case = {(r.group, r.case): r for r in rows}
    lines = ["| benchmark | case | median | vs. floor | note |", "|---|---|---:|---:|---|"]
    for r in rows:
        ratio = ""
        if r.is_floor:
            ratio = "1.00× (floor)"
        elif r.floor and r.median_s is not None:
            base = by_case.get((r.group, r.floor))
            if base is not None and base.median_s:
                ratio = f"{r.median_s / base.median_s:.2f}× {r.floor}"
        lines.append(f"| {r.group} | {r.case} | {fmt_time(r.median_s)} | {ratio} | {r.note} |")
    return "\n".join(lines)
