"""Where node-config-server's worker spends its CPU in bench_kube's burst (issue 53): N Nodes on a
real control plane, every node registered and its MachineConfigNode made, then N reports from 4 clients while py-spy samples the
server's gunicorn worker (50 Hz, every thread, idle stacks too); prints what the burst took and
how many of the worker's busy samples fall in each part.

    python3 -m venv /tmp/spy && /tmp/spy/bin/pip install py-spy     # a profiler, not a dependency
    PYTHONPATH=$PWD .venv/bin/python tools/profile_kube_burst.py --py-spy /tmp/spy/bin/py-spy [--nodes 1000]

py-spy needs ptrace of a child process (root, or kernel.yama.ptrace_scope 0). The raw stacks are
kept in ``--out`` (default build/profile/burst.raw) for a flame graph or another count.
"""

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, Tuple

# What each row counts: a busy sample whose stack holds that function (a+b: both).
PARTS = (("write-back (KubeSync's node loop: Node patch, MachineConfigNode)", "write_back.<locals>.one"),
         ("  the Node's patch (KubeSync._patch_node)", "KubeSync._patch_node"),
         ("  the MachineConfigNode's status (McnWriter._write)", "McnWriter._write"),
         ("  the MachineConfigNode's read before its write (_put_spec's GET)", "McnWriter._put_spec+KubeClient.get"),
         ("answering requests (the report's record before its answer)", "Worker.handle"),
         ("  the record's write on the MachineConfigNode (KubeNodeStore.record_report)", "KubeNodeStore.record_report"),
         ("  the record in the registration, no MachineConfigNode yet", "KubeCredentials._update_registration"),
         ("  moving a kept record onto a new MachineConfigNode (adopt)", "KubeNodeStore.adopt"),
         ("the pool's step (PoolQueue)", "PoolQueue._run"),
         ("  the pool's members (NodeTruth.members)", "NodeTruth.members"),
         ("the pools' status loop (KubeSync.sync_pools)", "KubeSync.sync_pools"),
         ("the watch caches (Reflector)", "Reflector._run"),
         ("requests' per-request environment look-up", "Session.merge_environment_settings"),
         ("every API request, all parts (KubeClient.request)", "KubeClient.request"))
IDLE = ("acquire_with_timeout", "Hub.run")  # gevent's thread pool waiting, the hub waiting on sockets


def count(raw: str) -> Tuple[int, int, Dict[str, int]]:
    """(all samples, busy samples, busy samples per function name) of py-spy's raw output."""
    total = busy = 0
    per: Dict[str, int] = collections.Counter()
    with open(raw, encoding="utf-8") as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            total += int(n)
            if frames[-1].startswith(IDLE):
                continue
            busy += int(n)
            names = {re.sub(r" \(.*", "", frame) for frame in frames}
            for name in names:
                per[name] += int(n)
            for _, key in PARTS:
                if "+" in key and all(part in names for part in key.split("+")):
                    per[key] += int(n)
    return total, busy, per


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--py-spy", required=True, help="the py-spy executable")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--out", default="build/profile/burst.raw")
    args = ap.parse_args()
    if not os.access(args.py_spy, os.X_OK):
        print(f"--py-spy {args.py_spy}: not an executable; install it as the docstring says", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    from benchmarks.bench_kube import Fleet, children

    top = tempfile.mkdtemp(prefix="profile-kube-")
    fleet = Fleet(top, args.nodes, "large")
    try:
        fleet.register_all()
        fleet.wait_mcns()  # as bench_kube: a burst on Nodes that have their MachineConfigNodes
        before = fleet.api_patch_rate(1)
        [worker] = children(fleet.srv.proc.pid)
        made = fleet.written()
        spy = subprocess.Popen([args.py_spy, "record", "-p", str(worker), "-r", "50", "-f", "raw", "-o", args.out,
                                "--threads", "--idle"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # py-spy attached
        burst = fleet.report_all()
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
        after = fleet.api_patch_rate(2)
    finally:
        fleet.close()
        shutil.rmtree(top, ignore_errors=True)
    total, busy, per = count(args.out)
    print(json.dumps({"nodes": args.nodes, "mcns_before": made, "send_s": round(burst["send_s"], 1),
                      "written_s": round(burst["written_s"], 1), "api_patch_rates": [round(before), round(after)],
                      "samples": total, "busy": busy, "load": os.getloadavg()}))
    for label, name in PARTS:
        print(f"{100 * per[name] / max(busy, 1):5.1f} %  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
