"""Run every benchmark under benchmarks/ and print one table (``make bench``).

    .venv/bin/python benchmarks/run.py [--quick] [--only NAME ...] [--update-docs]

``--quick`` runs fewer repetitions (a smoke test of the benchmarks themselves); ``--update-docs``
also writes the table and the machine it ran on into docs/performance.md (between the
``bench:begin``/``bench:end`` markers). A benchmark that cannot run (a peer not installed, a
module not there yet) gives a row that says so instead of failing the whole run.
"""

import argparse
import datetime
import importlib
import os
import platform
import sys
import time
import traceback
from typing import List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, Row, table  # noqa: E402

BENCHMARKS = ["server_storm", "bench_slow_clients", "bench_scale", "bench_kube_step", "bench_render", "bench_startup",
              "bench_apply", "bench_plan", "bench_drift", "bench_validate", "scaleup", "bench_replicas", "bench_kube", "bench_rollout"]
DOC = os.path.join(REPO, "docs", "performance.md")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def machine() -> str:
    cpus = os.cpu_count() or 0
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return (f"{platform.system()} {platform.release()}, {cpus} CPU(s){' (' + model + ')' if model else ''}, "
            f"Python {platform.python_version()}")


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def run_all(names: List[str], quick: bool) -> List[Row]:
    rows: List[Row] = []
    for name in names:
        start = time.monotonic()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            got = importlib.import_module(f"benchmarks.{name}").run(quick=quick)
        except Exception as exc:
            traceback.print_exc()
            got = [Row(name, "(failed)", None, note=f"{type(exc).__name__}: {exc}"[:200])]
        print(f"  {name}: {time.monotonic() - start:.1f}s", file=sys.stderr, flush=True)
        rows.extend(got)
    return rows


def update_docs(text: str) -> None:
    with open(DOC) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC} has no {BEGIN} ... {END} block to update")
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    with open(DOC + ".tmp", "w") as f:
        f.write(head + BEGIN + "\n" + text + "\n" + END + tail)
    os.replace(DOC + ".tmp", DOC)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    ap.add_argument("--only", nargs="+", choices=BENCHMARKS, help="run only these")
    ap.add_argument("--update-docs", action="store_true", help=f"write the table into {os.path.relpath(DOC, REPO)}")
    args = ap.parse_args(argv)
    load_before = _load()
    rows = run_all(args.only or BENCHMARKS, args.quick)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = (f"Measured {stamp} on {machine()}{' (--quick)' if args.quick else ''}; load average (1 min) "
            f"{load_before} before, {_load()} after (the machine is shared: read the interleaved ratios, "
            f"not the absolute times).\n\n{table(rows)}")
    print(text)
    if args.update_docs:
        update_docs(text)
        print(f"\nwritten to {os.path.relpath(DOC, REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
