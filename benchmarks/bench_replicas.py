"""One replica on SQLite, one on etcd, three on etcd behind haproxy: a config storm and a report
storm against each (issue 20).

    .venv/bin/python benchmarks/bench_replicas.py [--quick] [--json]

Real parts only: node-config-server (gunicorn, TLS, token), a three-member etcd cluster (Debian's
etcd-server), haproxy in TCP mode, and wrk (a C load generator) for both storms: GET
``/config/worker`` and POST ``/api/v1/nodes/<n>/report`` (each request a different node, from
a Lua script). The three set-ups run side by side and the rounds are interleaved (sqlite, etcd-1,
etcd-3, sqlite, ...), so machine noise falls on every case alike; each figure is the median of
the rounds with min and max. The ratio of each row is its requests/s over the SQLite server's.

Honest limits: everything shares this machine's CPUs (2 here), so three replicas cannot be
faster than one on it; what the rows show is what the shared store costs per request, not the
capacity three hosts would have.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks.common import Row  # noqa: E402

WRK = shutil.which("wrk") or "/usr/bin/wrk"
TOKEN = "bench-token"
NODES = 200  # registered nodes the report storm reports as (each with its own credential)
REPORT_LUA = """
local nodes = {NODES}
request = function()
  local n = nodes[math.random(1, #nodes)]
  return wrk.format("POST", "/api/v1/nodes/" .. n[1] .. "/report",
    {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. n[2]},
    '{"pool": "worker", "state": "Done", "currentConfig": "rendered-worker-bench"}')
end
"""


def _session():
    import requests

    s = requests.Session()
    s.trust_env = False
    s.verify = False
    s.headers["Authorization"] = f"Bearer {TOKEN}"
    requests.packages.urllib3.disable_warnings()
    return s


def register(base: str, node: str, session=None) -> str:
    """Node ``node``'s credential: a report is accepted only as the node itself (docs/security.md)."""
    r = (session or _session()).post(f"{base}/api/v1/nodes/{node}/register", timeout=10)
    r.raise_for_status()
    return r.json()["credential"]


def report_script(path: str, base: str, prefix: str) -> str:
    """A wrk script reporting as NODES nodes registered on ``base`` (a wrk -H header would not do:
    each node has its own credential)."""
    s = _session()
    table = ", ".join(f'{{"{prefix}-{i}", "{register(base, f"{prefix}-{i}", s)}"}}' for i in range(NODES))
    with open(path, "w") as f:
        f.write(REPORT_LUA.replace("{NODES}", "{" + table + "}"))
    return path


def _wrk(url: str, seconds: int, connections: int, script: str = "") -> Dict[str, float]:
    argv = [WRK, "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-H", f"Authorization: Bearer {TOKEN}"]
    if script:
        argv += ["-s", script]
    out = subprocess.run(argv + [url], capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed: {out.stderr.strip()[-300:]}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out.stdout).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out.stdout)
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out.stdout)
    return {"rps": rps, "p99_s": float(p99.group(1)) * scale[p99.group(2)] if p99 else 0.0,
            "non2xx": int(non2xx.group(1)) if non2xx else 0}


def _setups(top: str):
    from tests.helpers.certs import make_tls
    from tests.helpers.etcd_cluster import EtcdCluster
    from tests.helpers.haproxy import HAProxy
    from tests.helpers.server_proc import ServerProcess, free_port

    state = os.path.join(top, "state")
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    tls = make_tls(os.path.join(top, "tls"))
    etcd = EtcdCluster(os.path.join(top, "etcd"))
    etcd.start()
    r = subprocess.run([sys.executable, "-m", "agent.server.cli", "load-state", "--store", etcd.url, state],
                       capture_output=True, text=True, cwd=REPO)
    if r.returncode != 0:
        raise RuntimeError(f"load-state failed: {r.stderr}")
    sqlite = ServerProcess(state, tls=tls, token=TOKEN, workers=2).start()
    extra = lambda i: ["--store", etcd.url, "--cache-dir", os.path.join(top, f"cache{i}")]  # noqa: E731
    one = ServerProcess(None, tls=tls, token=TOKEN, workers=2, extra_args=extra(0)).start()
    three = [ServerProcess(None, tls=tls, token=TOKEN, workers=1, extra_args=extra(i + 1)).start() for i in range(3)]
    lb = HAProxy(top, free_port(), [s.port for s in three]).__enter__()
    urls = {"sqlite, 1 replica": sqlite.base_url, "etcd, 1 replica": one.base_url,
            "etcd, 3 replicas (haproxy)": f"https://127.0.0.1:{lb.port}", "_replicas": [s.base_url for s in three]}

    def stop():
        lb.__exit__()
        for s in [sqlite, one] + three:
            s.stop()
        etcd.stop()

    return urls, stop


def propagation(replicas: List[str], samples: int) -> List[float]:
    """Seconds from a report acknowledged by one replica until another replica's pool view
    counts it (polled every 5 ms; the poll itself is part of the figure)."""
    s = _session()
    out = []
    for i in range(samples):
        a, b = replicas[i % len(replicas)], replicas[(i + 1) % len(replicas)]
        before = s.get(f"{b}/api/v1/pools/worker", timeout=10).json()["status"]["machineCount"]
        own = {"Authorization": f"Bearer {register(a, f'prop-{i}', s)}"}
        r = s.post(f"{a}/api/v1/nodes/prop-{i}/report", json={"pool": "worker", "state": "Working"}, timeout=10,
                   headers=own)
        r.raise_for_status()
        acked = time.perf_counter()
        while s.get(f"{b}/api/v1/pools/worker", timeout=10).json()["status"]["machineCount"] <= before:
            if time.perf_counter() - acked > 30:
                raise RuntimeError(f"{b} did not count a report taken by {a} within 30 s")
            time.sleep(0.005)
        out.append(time.perf_counter() - acked)
    return out


def measure(rounds: int, seconds: int, connections: int) -> Dict[str, Dict[str, List[Dict[str, float]]]]:
    top = tempfile.mkdtemp(prefix="bench-replicas-")
    urls, stop = _setups(top)
    replicas = urls.pop("_replicas")
    out: Dict[str, Dict[str, List[Dict[str, float]]]] = {name: {"config": [], "report": []} for name in urls}
    try:
        out["_propagation"] = {"seconds": propagation(replicas, 10 if rounds == 1 else 30)}
        scripts = {}  # the etcd setups share one store: register there once
        for name, base in urls.items():  # warm-up: workers render, connections open
            _wrk(base + "/config/worker", 1, 8)
            kind = "sqlite" if name.startswith("sqlite") else "etcd"
            if kind not in scripts:
                scripts[kind] = report_script(os.path.join(top, f"report-{kind}.lua"), base, f"bench-{kind}")
            scripts[name] = scripts[kind]
        for _ in range(rounds):
            for name, base in urls.items():
                out[name]["config"].append(_wrk(base + "/config/worker", seconds, connections))
                out[name]["report"].append(_wrk(base, seconds, connections, scripts[name]))
    finally:
        stop()
        shutil.rmtree(top, ignore_errors=True)
    return out


def _summary(samples: List[Dict[str, float]]) -> Dict[str, float]:
    rps = [s["rps"] for s in samples]
    p99 = [s["p99_s"] for s in samples]
    return {"rps": statistics.median(rps), "rps_min": min(rps), "rps_max": max(rps),
            "p99_s": statistics.median(p99), "non2xx": sum(s["non2xx"] for s in samples)}


def rows_from(results: Dict[str, Dict[str, List[Dict[str, float]]]], connections: int) -> List[Row]:
    rows = []
    prop = sorted(results.pop("_propagation")["seconds"])
    p99 = prop[min(len(prop) - 1, int(len(prop) * 0.99))]
    rows.append(Row("replicas: a report seen by another replica", "etcd watch, 3 replicas", statistics.median(prop),
                    note=f"median of {len(prop)}, max {max(prop) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
                         "(acknowledged by one replica until another's pool view counts it)"))
    base = {kind: _summary(results["sqlite, 1 replica"][kind])["rps"] for kind in ("config", "report")}
    for kind, what in (("config", "config storm (GET /config/worker)"), ("report", f"report storm (POST report as {NODES} nodes)")):
        for name, per in results.items():
            s = _summary(per[kind])
            ratio = s["rps"] / base[kind] if base[kind] else 0.0
            note = (f"{s['rps']:.0f} req/s (min {s['rps_min']:.0f}, max {s['rps_max']:.0f}), p99 "
                    f"{s['p99_s'] * 1000:.0f} ms, {connections} connections; {ratio:.2f}x the SQLite server's rate")
            if s["non2xx"]:
                note += f"; {s['non2xx']} non-2xx answers"
            rows.append(Row(f"replicas: {what}", name, 1.0 / s["rps"] if s["rps"] else None, note=note,
                            extra={"rps": s["rps"], "p99_s": s["p99_s"], "ratio_rps": ratio},
                            floor=None if name.startswith("sqlite") else "sqlite, 1 replica",
                            is_floor=name.startswith("sqlite")))
    return rows


def run(quick: bool = False) -> List[Row]:
    from tests.helpers.etcd_cluster import have_etcd
    from tests.helpers.haproxy import have_haproxy

    if not (have_etcd() and have_haproxy() and os.access(WRK, os.X_OK)):
        return [Row("replicas", "sqlite vs etcd", None, note="etcd-server, haproxy or wrk missing (make bench)")]
    connections = 32
    results = measure(rounds=1 if quick else 3, seconds=2 if quick else 5, connections=connections)
    return rows_from(results, connections)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = run(args.quick)
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=1))
    else:
        for r in rows:
            print(f"{r.group:45s} {r.case:28s} {r.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
