"""Server cost against fleet size: a report, a config fetch and the pool/cluster views at
100 / 1,000 / 10,000 / 50,000 nodes in the store.

    .venv/bin/python benchmarks/bench_scale.py [--quick] [--json FILE] [--sizes 100 1000 ...]

Each request goes through the real WSGI application (``agent.server.http.app.App``: routing,
validation, the node store on SQLite in WAL mode, rendering, caching) in this process, without
a socket, so the figure is the server's own cost per request. The store is filled with N
nodes by bulk insert followed by the server's own membership rebuild (the path a migrated
database takes); every size's server lives in this process at once, and the requests are timed
interleaved across sizes and cases (report, fetch, member fetch, pool view, cluster view at each
size in turn, the order of the sizes reversed every other round), and the pool's step after one report
stored (timed alone: what a step costs per changed node). Each round's report commits, so the new node's fetch after it
is answered afresh from the store, not from what the worker keeps between commits
(agent/server/http/fetchmemo.py). The floor of each row is the same request at 100 nodes: the
target is <= 2x at 50,000.
"""

import argparse
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, Row, median  # noqa: E402

SIZES = (100, 1000, 10000, 50000)
CASES = ("report", "fetch (new node)", "fetch (member)", "pool view", "cluster view", "pool step, one report since")
JSON_OUT = os.path.join(REPO, "build", "bench", "scale.json")


def make_state(directory: str) -> None:
    for sub in ("machineconfigpools", "machineconfigs"):
        os.makedirs(os.path.join(directory, sub))
    for pool, labels in (("worker", "node-role.kubernetes.io/worker: ''"), ("infra", "node-role.kubernetes.io/infra: ''")):
        with open(os.path.join(directory, "machineconfigpools", f"{pool}.yaml"), "w") as f:
            f.write(f"metadata: {{name: {pool}}}\nspec:\n  machineConfigSelector:\n    matchExpressions:\n"
                    f"    - {{key: machineconfiguration.openshift.io/role, operator: In, values: [worker, {pool}]}}\n"
                    f"  nodeSelector: {{matchLabels: {{{labels}}}}}\n  maxUnavailable: 10%\n")
    files = [{"path": f"/etc/bench/{i}.conf", "mode": 420, "contents": {"source": f"data:,file{i}"}} for i in range(20)]
    mc = {"metadata": {"name": "00-worker", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
          "spec": {"osImageURL": "quay.io/openshift-release-dev/rhel-coreos-9:9.6",
                   "config": {"ignition": {"version": "3.4.0"}, "storage": {"files": files}}}}
    with open(os.path.join(directory, "machineconfigs", "00-worker.yaml"), "w") as f:
        json.dump(mc, f)


def fill(app: Any, n: int) -> List[str]:
    """N nodes in the store: bulk insert, then the server's own rebuild of memberships/counters."""
    cluster = app.cluster
    target = cluster.store.pools()["worker"].target
    names = [f"node-{i:06d}" for i in range(n)]
    rows = []
    for i, name in enumerate(names):
        pool = "infra" if i % 10 == 0 else "worker"
        body = {"pool": pool, "state": "Done" if i % 7 else "Working", "currentConfig": target,
                "labels": {f"node-role.kubernetes.io/{pool}": ""}}
        rows.append((name, pool, json.dumps(body, sort_keys=True), time.time()))
    with cluster.db.write() as c:
        c.executemany("INSERT INTO reports (node, pool, body, received) VALUES (?,?,?,?)", rows)
        c.execute("DELETE FROM meta WHERE key='membership_signature'")
    cluster.reconcile(force=True)
    return names


def call(app: Any, method: str, path: str, body: bytes = b"", query: str = "") -> int:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "wsgi.input": io.BytesIO(body),
               "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": "application/json",
               "HTTP_ACCEPT": "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"}
    status: List[str] = []
    for _ in app(environ, lambda s, h: status.append(s)):
        pass
    code = int(status[0].split()[0])
    if code != 200:
        raise RuntimeError(f"{method} {path} -> {status[0]}")
    return code


def fleet(n: int) -> Tuple[Any, Dict[str, Callable[[], Any]], str]:
    """A server with ``n`` nodes in its store: (its app, the timed requests, its directory)."""
    from agent.server.http.app import App
    from agent.server.rollout.progress import Membership

    tmp = tempfile.mkdtemp(prefix="bench-scale-")
    make_state(tmp)
    app = App(tmp)
    app.warm()
    names = fill(app, n)
    rng = random.Random(n)
    target = app.cluster.store.pools()["worker"].target

    def report() -> None:
        node = names[rng.randrange(1, n)]
        state = rng.choice(("Done", "Working"))
        body = json.dumps({"pool": "worker", "state": state, "currentConfig": target,
                           "labels": {"node-role.kubernetes.io/worker": ""}}).encode()
        call(app, "POST", f"/api/v1/nodes/{node}/report", body)

    def step_after_report() -> float:
        """The pool's step alone, after one report stored with no wake: what a step costs per
        changed node (the queue's own steps are waited for first; timed here, not by the caller)."""
        body = {"pool": "worker", "state": rng.choice(("Done", "Working")), "currentConfig": target,
                "labels": {"node-role.kubernetes.io/worker": ""}}
        app.cluster.store.record_report(names[rng.randrange(1, n)], body, Membership("worker", "label"), time.time())
        app.cluster.pools_stepped()
        st = app.cluster.state()
        start = time.perf_counter()
        app.cluster._step_pool_now(st, "worker")
        return time.perf_counter() - start

    cases: Dict[str, Callable[[], Any]] = {
        "report": report,
        "fetch (new node)": lambda: call(app, "GET", "/config/worker"),
        "fetch (member)": lambda: call(app, "GET", "/config/worker", query=f"node={names[1]}"),
        "pool view": lambda: call(app, "GET", "/api/v1/pools/worker"),
        "cluster view": lambda: call(app, "GET", "/api/v1/cluster"),
        "pool step, one report since": step_after_report,
    }
    for fn in cases.values():
        fn()
    return app, cases, tmp


def measure_all(sizes, runs: int) -> Dict[int, Dict[str, List[float]]]:
    """Every size's server in this process at once, the rounds interleaved across sizes and cases
    (report, fetch, member fetch, pool view, cluster view at 100 nodes, then at 1,000, ...), so
    that the machine's noise and each server's background work (its pool queue) fall on all of
    them alike."""
    fleets = {}
    try:
        for n in sizes:
            print(f"  scale: {n} nodes ...", file=sys.stderr, flush=True)
            fleets[n] = fleet(n)
        samples = {n: {c: [] for c in CASES} for n in sizes}
        for i in range(runs):
            for n in (sizes if i % 2 else list(reversed(sizes))):
                for name, fn in fleets[n][1].items():
                    start = time.perf_counter()
                    took = fn()  # a case that times itself returns its seconds
                    samples[n][name].append(took if isinstance(took, float) else time.perf_counter() - start)
        return samples
    finally:
        for app, _, tmp in fleets.values():
            app.close()
            shutil.rmtree(tmp, ignore_errors=True)


def results(sizes, runs: int) -> Dict[str, Any]:
    return summary(measure_all(list(sizes), runs), sizes, runs)


def summary(samples: Dict[int, Dict[str, List[float]]], sizes, runs: int) -> Dict[str, Any]:
    """Each case's median, min, max and p99 at each size, from its samples (also bench_kube_step's)."""
    out: Dict[str, Any] = {"sizes": list(sizes), "runs": runs, "cases": {}}
    for n, by_case in samples.items():
        for case, xs in by_case.items():
            xs = sorted(xs)
            out["cases"].setdefault(case, {})[str(n)] = {"median_s": median(xs), "min_s": xs[0], "max_s": xs[-1],
                                          "p99_s": xs[min(len(xs) - 1, int(len(xs) * 0.99))]}
    return out


def rows_from(doc: Dict[str, Any]) -> List[Row]:
    rows = []
    first = str(doc["sizes"][0])
    for case, by_size in doc["cases"].items():
        for n, r in by_size.items():
            rows.append(Row(f"scale: {case}", f"{int(n):,} nodes", r["median_s"], floor=f"{int(first):,} nodes",
                            is_floor=n == first,
                            note=f"min {r['min_s'] * 1e3:.2f} ms, max {r['max_s'] * 1e3:.2f} ms, "
                                 f"p99 {r['p99_s'] * 1e3:.2f} ms ({doc['runs']} interleaved runs)"))
    return rows


def run(quick: bool = False) -> List[Row]:
    doc = results((100, 1000, 10000) if quick else SIZES, 30 if quick else 200)
    from benchmarks.common import save_json

    save_json(os.path.basename(JSON_OUT), doc)
    return rows_from(doc)


def main() -> int:
    return main_with(results, __doc__, SIZES, (100, 1000, 10000))


def main_with(results_of: Any, docstring: str, sizes, quick_sizes) -> int:
    """The command line of a benchmark over fleet sizes (this one's and bench_kube_step's)."""
    ap = argparse.ArgumentParser(description=docstring.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", nargs="+", type=int)
    ap.add_argument("--runs", type=int)
    ap.add_argument("--json", metavar="FILE", help="also write the samples' summary as JSON")
    args = ap.parse_args()
    doc = results_of(args.sizes or list(quick_sizes if args.quick else sizes), args.runs or (30 if args.quick else 200))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    from benchmarks.common import table

    print(table(rows_from(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
