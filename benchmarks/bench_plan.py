"""``plan`` on a 50,000-file change (5,000 with --quick): the pure diff + disruption policy (``plan_disruption``) and the
whole ``node-agent plan --from --to --json`` command (read, parse, validate both configs, plan,
print), against the floor: ``json.loads`` of the two config files (the bare cost of reading them).
"""

import json
import os
import shutil
import sys
import tempfile
import urllib.parse
from typing import List

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import VENV_BIN, Row, interleaved, median, run_quiet

GROUP = "plan 50,000-file change"
FLOOR = "json.loads of both configs"
FILES = 50000


def config(version: str, files: int = FILES) -> dict:
    # every file's contents differ between "a" and "b"; a few modes too, so several fields change
    files = [{"path": f"/etc/bench/d{i % 50}/file-{i:05d}.conf", "mode": 0o644 if version == "a" or i % 7 else 0o600,
              "contents": {"source": "data:," + urllib.parse.quote(f"setting{i} = {version}\n")}}
             for i in range(files)]
    return {"ignition": {"version": "3.4.0"}, "storage": {"files": files}}


def run(quick: bool = False) -> List[Row]:
    from agent.disruption import effective_policy, plan_disruption
    from agent.ignition.load import load_node_config

    runs = 3 if quick else 5
    files = 5000 if quick else FILES
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
            "load + validate both configs": validate_both,
            "plan_disruption (diff + policy)": lambda: plan_disruption(old, new, policy),
        }
        script = os.path.join(VENV_BIN, "node-agent")
        cli = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "agent"]
        cli += ["plan", "--from", paths["a"], "--to", paths["b"], "--json"]
        cases["node-agent plan --json (CLI)"] = lambda: run_quiet(cli)
        samples = interleaved(cases, runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    note = f"{runs} runs, interleaved"
    rows = [Row(GROUP, FLOOR, median(samples[FLOOR]), is_floor=True, note=note)]
    for name in list(cases)[1:]:
        extra = "; whole process: start-up, parse, validate, plan, JSON out" if "CLI" in name else ""
        rows.append(Row(GROUP, name, median(samples[name]), floor=FLOOR, note=note + extra))
    return rows


if __name__ == "__main__":
    from benchmarks.common import table

    print(table(run(quick="--quick" in sys.argv)))
