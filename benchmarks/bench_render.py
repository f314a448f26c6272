"""Render cost against the number of MachineConfigs: the same 10,000 files in 10, 100 and
1,000 MachineConfigs (``render.render_pool``: select, merge, hash).

    .venv/bin/python benchmarks/bench_render.py [--quick]

Linear means the three cost about the same; the floor is 10 MachineConfigs of 1,000 files and
the target is <= 2x for 1,000 MachineConfigs of 10 files. Interleaved, median of the runs.
"""

import argparse
import os
import sys
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import Row, interleaved, median, table  # noqa: E402

POOL = {"metadata": {"name": "worker"}, "spec": {"machineConfigSelector": {
    "matchLabels": {"machineconfiguration.openshift.io/role": "worker"}}}}


def machine_configs(count: int, files_each: int) -> Dict[str, Dict[str, Any]]:
    out = {}
    for m in range(count):
        files = [{"path": f"/etc/bench/{m}/{i}.conf", "mode": 420,
                  "contents": {"source": f"data:,mc{m}-file{i}"}} for i in range(files_each)]
        name = f"{m:05d}-worker"
        out[name] = {"metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": "worker"}},
                     "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": files},
                                         "systemd": {"units": [{"name": f"u{m}.service", "enabled": True}]}},
                              "kernelArguments": [f"arg{m % 7}"]}}
    return out


def run(quick: bool = False) -> List[Row]:
    from agent.server.rollout.render import render_pool

    total = 2000 if quick else 10000
    shapes = [(10, total // 10), (100, total // 100), (1000, total // 1000)]
    states = {f"{n:,} MachineConfigs x {f:,} files": machine_configs(n, f) for n, f in shapes}
    cases = {name: (lambda mcs=mcs: render_pool(POOL, mcs)) for name, mcs in states.items()}
    samples = interleaved(cases, runs=3 if quick else 7)
    floor = next(iter(states))
    rows = []
    for name, xs in samples.items():
        rows.append(Row("render", name, median(xs), floor=floor, is_floor=name == floor,
                        note=f"min {min(xs) * 1e3:.0f} ms, max {max(xs) * 1e3:.0f} ms ({len(xs)} interleaved runs)"))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(table(run(args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
