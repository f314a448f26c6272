"""``plan`` on a 50,000-file change (5,000 with --quick): the pure diff + disruption policy
(``plan_disruption``, target <= 5x the floor in time and <= 2x in memory) and the whole
``node-agent plan --from --to --json`` command (read, parse, validate both configs, plan,
print), against the floor: ``json.loads`` of the two config files (the bare cost of reading them).

Memory: the peak the plan allocates (tracemalloc) against the peak of ``json.loads`` of both
files, in process; and the whole command's peak RSS against a ``python`` process that only
``json.load``s both files (both from ``os.wait4``).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
import urllib.parse
from typing import Dict, List

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import VENV_BIN, Row, interleaved, rows_of, run_quiet

FLOOR = "json.loads of both configs"
FILES = 50000


def config(version: str, files: int = FILES) -> dict:
    # every file's contents differ between "a" and "b"; a few modes too, so several fields change
    files = [{"path": f"/etc/bench/d{i % 50}/file-{i:05d}.conf", "mode": 0o644 if version == "a" or i % 7 else 0o600,
              "contents": {"source": "data:," + urllib.parse.quote(f"setting{i} = {version}\n")}}
             for i in range(files)]
    return {"ignition": {"version": "3.4.0"}, "storage": {"files": files}}


def peak_alloc_mib(fn) -> float:
    """The most ``fn`` had allocated at once (tracemalloc), in MiB."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def peak_rss_mib(argv: List[str]) -> float:
    """A child process's peak resident memory (ru_maxrss, KiB on Linux), in MiB."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}")
    return usage.ru_maxrss / 1024


def run(quick: bool = False) -> List[Row]:
    from agent.core.disruption import effective_policy, plan_disruption
    from agent.core.loadconfig import load_node_config

    runs = 3 if quick else 7
    files = 5000 if quick else FILES
    group = f"plan {files:,}-file change"
    work = tempfile.mkdtemp(prefix="bench-plan-")
    try:
        paths = {}
        for v in ("a", "b"):
            paths[v] = os.path.join(work, f"{v}.ign")
            with open(paths[v], "w") as f:
                json.dump(config(v, files), f)
        old = load_node_config(open(paths["a"], "rb").read(), paths["a"])
        new = load_node_config(open(paths["b"], "rb").read(), paths["b"])
        policy = effective_policy()
        plan = plan_disruption(old, new, policy)
        assert len(plan.changes.files) == files and plan.reboot

        def floor() -> None:
            for v in ("a", "b"):
                with open(paths[v], "rb") as f:
                    json.loads(f.read())

        def validate_both() -> None:
            for v in ("a", "b"):
                with open(paths[v], "rb") as f:
                    load_node_config(f.read(), paths[v])

        cases = {
            FLOOR: floor,
            "plan_disruption (diff + policy)": lambda: plan_disruption(old, new, policy),
            "load + validate both configs": validate_both,
        }
        script = os.path.join(VENV_BIN, "node-agent")
        cli = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "agent"]
        cli += ["plan", "--from", paths["a"], "--to", paths["b"], "--json"]
        cases["node-agent plan --json (CLI)"] = lambda: run_quiet(cli)
        samples = interleaved(cases, runs)
        memory: Dict[str, List[float]] = {FLOOR: [], "plan_disruption (diff + policy)": []}
        rss: Dict[str, List[float]] = {"python: json.load of both (peak RSS)": [], "node-agent plan --json (peak RSS)": []}
        loader = [sys.executable, "-c", "import json, sys\nfor p in sys.argv[1:]: json.load(open(p, 'rb'))",
                  paths["a"], paths["b"]]
        for _ in range(3):
            memory[FLOOR].append(peak_alloc_mib(floor))
            memory["plan_disruption (diff + policy)"].append(
                peak_alloc_mib(lambda: plan_disruption(old, new, policy)))
            rss["python: json.load of both (peak RSS)"].append(peak_rss_mib(loader))
            rss["node-agent plan --json (peak RSS)"].append(peak_rss_mib(cli))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    note = f"{runs} runs, interleaved"
    rows = rows_of(group, samples, FLOOR, {
        FLOOR: note,
        "plan_disruption (diff + policy)": note + "; target <= 5x",
        "load + validate both configs": note,
        "node-agent plan --json (CLI)": note + "; whole process: start-up, parse, validate, plan, JSON out",
    })
    rows += rows_of(group + ", memory", memory, FLOOR, {
        FLOOR: "peak allocated (tracemalloc), 3 runs",
        "plan_disruption (diff + policy)": "peak allocated (tracemalloc), 3 runs, interleaved; target <= 2x"},
        unit="MiB")
    rows += rows_of(group + ", memory", rss, "python: json.load of both (peak RSS)", {
        "python: json.load of both (peak RSS)": "whole process, 3 runs",
        "node-agent plan --json (peak RSS)": "whole process, 3 runs, interleaved"}, unit="MiB")
    return rows


if __name__ == "__main__":
    from benchmarks.common import table

    print(table(run(quick="--quick" in sys.argv)))
