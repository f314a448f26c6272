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
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, Row, table  # noqa: E402

BENCHMARKS = ["server_storm", "bench_scale", "bench_render", "bench_startup", "bench_apply", "bench_plan",
              "bench_validate", "scaleup", "bench_replicas"]
DOC = os.path.join(REPO, "docs", "performance.md")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _storm_rows(quick: bool) -> List[Row]:
    """The config-server storm is its own script (owned by the server's engineer): use its
    ``run()`` if it has one that gives Rows, else its ``--json`` output."""
    path = os.path.join(REPO, "benchmarks", "server_storm.py")
    group = "config server storm"
    if not os.path.exists(path):
        return [Row(group, "node-config-server vs nginx (static file)", None,
                    note="benchmarks/server_storm.py is not there yet; nothing measured")]
    argv = [sys.executable, path, "--json"] + (["--quick"] if quick else [])
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0 and "--quick" in argv:  # an older script without --quick
        argv.remove("--quick")
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [Row(group, "server_storm.py --json", None, note=f"exited {proc.returncode}: {tail[:160]}")]
    try:
        return storm_rows_from_json(json.loads(proc.stdout), group)
    except (ValueError, TypeError, KeyError) as exc:
        return [Row(group, "server_storm.py --json", None, note=f"output not understood ({exc})")]


def storm_rows_from_json(doc: Any, group: str) -> List[Row]:
    """Rows from server_storm.py's JSON: an object whose object-valued members are the cases
    (``{"node_config_server": {"rps", "p50_ms", "p99_ms", ...}, "nginx": {...}, ...}``) and whose
    plain members describe the set-up; a list of case objects (``case``/``name``) works too.
    The median column is the p50 latency of one fetch; throughput goes in the note."""
    if isinstance(doc, dict) and isinstance(doc.get("rows") or doc.get("results"), list):
        doc = doc.get("rows") or doc.get("results")
    setup: Dict[str, Any] = {}
    if isinstance(doc, dict):
        items = [dict(v, case=k) for k, v in doc.items() if isinstance(v, dict)]
        setup = {k: v for k, v in doc.items() if not isinstance(v, dict) and k != "benchmark"}
    else:
        items = list(doc)
    if not items:
        raise ValueError("no cases in it")
    rows: List[Row] = []
    floor_case = None
    for item in items:
        case = str(item.get("case") or item.get("name") or item.get("server"))
        if "median_s" in item:
            med = float(item["median_s"])
        elif "median_ms" in item or "p50_ms" in item:
            med = float(item.get("median_ms", item.get("p50_ms"))) / 1000
        else:
            med = None
        skip = {"case", "name", "server", "median_s", "median_ms", "p50_ms", "floor", "is_floor"}
        note = ", ".join(f"{k}={_short(v)}" for k, v in item.items() if k not in skip)
        is_floor = bool(item.get("is_floor") or item.get("floor") is True or "nginx" in case.lower())
        if is_floor and floor_case is None:
            floor_case = case
        rows.append(Row(group, case, med, is_floor=is_floor, note="p50 latency; " + note if med is not None else note))
    for r in rows:
        if not r.is_floor and floor_case:
            r.floor = floor_case
    if setup:
        rows[0].note += "; set-up: " + ", ".join(f"{k}={_short(v)}" for k, v in setup.items())
    return rows


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


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


def run_all(names: List[str], quick: bool) -> List[Row]:
    rows: List[Row] = []
    for name in names:
        start = time.monotonic()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            if name == "server_storm":
                got = _storm_rows(quick)
            else:
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
    rows = run_all(args.only or BENCHMARKS, args.quick)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"Measured {stamp} on {machine()}{' (--quick)' if args.quick else ''}.\n\n{table(rows)}"
    print(text)
    if args.update_docs:
        update_docs(text)
        print(f"\nwritten to {os.path.relpath(DOC, REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
