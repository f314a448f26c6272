"""A pool's step on Node objects (``--backend kubernetes``) after one report, against the number
of Nodes: 100 / 1,000 / 5,000 (issue 53: a step's cost per changed node O(1), not a pass over the pool).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_kube_step.py [--quick] [--sizes 100 1000 5000] [--runs 200] [--json FILE]

What a report changes on this backend: the node's record in the node store and, once written
back, its Node's MCD annotations. Each round applies both (the Node as a watch event into the
real Node cache, kube.watch.Reflector with nodestatus.slim_node; the record into the index the
Kubernetes and etcd stores read from, store/nodeindex.py), then times what the pool's step reads
and decides in this process: the pool's numbers (kube_nodes.NodeTruth.status), its members
filed into the step's index (as rolloutctl._file_members does), and targeting.step on them. The
API server's round trips are not in it (bench_kube.py and bench_rollout.py measure those). The
fleet is a worker pool of N Nodes Done on its target, maxUnavailable 10%; every size's fleet
lives in this process at once and the rounds are interleaved across sizes, the order of the
sizes reversed every other round. The floor is the same step at 100 Nodes.
"""

import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, Row  # noqa: E402

SIZES = (100, 1000, 5000)
QUICK_SIZES = (100, 1000)
CASE = "pool step on Node objects, one report since"
JSON_OUT = os.path.join(REPO, "build", "bench", "kube_step.json")
WORKER = {"node-role.kubernetes.io/worker": ""}
POOLS = {"worker": {"metadata": {"name": "worker"}, "spec": {"nodeSelector": {"matchLabels": WORKER}}},
         "infra": {"metadata": {"name": "infra"}, "spec": {"nodeSelector": {"matchLabels": {
             "node-role.kubernetes.io/infra": ""}}}}}
MCD = "machineconfiguration.openshift.io/"


class _Listing:
    """The Node cache's client: only its first list is read; events are applied in order, as its watch would."""

    def list(self, path: str, params: Any, metadata_only: bool = False, transform: Any = None) -> Any:
        return [], "1"


def _node(name: str, version: int, state: str) -> Dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version), "labels": dict(WORKER, **{
        "kubernetes.io/hostname": name}), "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {MCD + "currentConfig": "rendered-worker-a", MCD + "desiredConfig":
                                         "rendered-worker-a", MCD + "state": state}},
            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def fleet(n: int) -> Callable[[], float]:
    """A worker pool of ``n`` Nodes Done on its target; returns the timed round."""
    from agent.core.rolloutpolicy import rollout_policy
    from agent.server.cluster.kube_nodes import NodeTruth
    from agent.server.rollout import nodestatus, targeting
    from agent.server.rollout.poolindex import PoolIndex
    from agent.server.store.kube import client as kube_client
    from agent.server.store.kube import watch as kube_watch
    from agent.server.store.nodeindex import IndexedReads, NodeIndex
    from agent.server.store.nodestore import NodeRecord, PoolRow

    class Records(IndexedReads):  # the node store's reads (KubeNodeStore's are these), and its pool rows
        def __init__(self) -> None:
            self._lock, self._index = threading.RLock(), NodeIndex()
            self.rows = {"worker": PoolRow("worker", "rendered-worker-a", "rendered-worker-a")}

        def pools(self) -> Dict[str, Any]:
            return dict(self.rows)

        def generation(self) -> Any:  # KubeNodeStore's: the newest resourceVersion seen (read before issue 53's journals)
            return version[0]

    cache = kube_watch.Reflector(_Listing(), kube_client.NODES, transform=nodestatus.slim_node)
    cache._relist()
    version = [10]
    store, names = Records(), [f"worker-{i:05d}" for i in range(n)]

    def report(name: str, state: str) -> None:
        version[0] += 1
        cache._apply({"type": "MODIFIED", "object": _node(name, version[0], state)})
        body = {"currentConfig": "rendered-worker-a", "desiredConfig": "rendered-worker-a", "state": state}
        with store._lock:
            store._index.apply(name, NodeRecord(name, "worker", "labels", "", body, time.time()), version[0])

    for name in names:
        report(name, "Done")
    truth, index, turn, policy = NodeTruth(cache, store), PoolIndex(), [0], rollout_policy(POOLS["worker"])

    def file_members() -> None:  # rolloutctl._file_members on this backend (before issue 53's journals: a whole read)
        changes = getattr(truth, "member_changes", None)
        delta = changes("worker", POOLS, index.cursor) if changes is not None else None
        if delta is not None:
            index.cursor = delta[0]
            index.apply(delta[1], delta[2])
        elif changes is not None:
            members, index.cursor = truth.read_members("worker", POOLS)
            index.sync(members)
        else:
            index.sync(truth.members("worker", POOLS))

    def step() -> Any:
        status = truth.status("worker", POOLS, "rendered-worker-a", None)
        file_members()
        return status, targeting.step(None, store.rows["worker"].rollout, "rendered-worker-a", None,
                                      max(1, n // 10), policy, "", time.time(), {}, index)

    def round_() -> float:
        turn[0] += 1
        report(names[turn[0] * 7919 % n], "Done")  # a report that changes its Node and its record
        start = time.perf_counter()
        step()
        return time.perf_counter() - start

    step()
    return round_


def results(sizes: List[int], runs: int) -> Dict[str, Any]:
    from benchmarks.bench_scale import summary

    rounds = {}
    for n in sizes:
        print(f"  kube step: {n} Nodes ...", file=sys.stderr, flush=True)
        rounds[n] = fleet(n)
    samples: Dict[int, Dict[str, List[float]]] = {n: {CASE: []} for n in sizes}
    for i in range(runs):
        for n in (sizes if i % 2 else list(reversed(sizes))):
            samples[n][CASE].append(rounds[n]())
    return summary(samples, sizes, runs)


def run(quick: bool = False) -> List[Row]:
    from benchmarks.bench_scale import rows_from
    from benchmarks.common import save_json

    doc = results(list(QUICK_SIZES if quick else SIZES), 30 if quick else 200)
    save_json(os.path.basename(JSON_OUT), doc)
    return rows_from(doc)


def main() -> int:
    from benchmarks.bench_scale import main_with

    return main_with(results, __doc__, SIZES, QUICK_SIZES)


if __name__ == "__main__":
    sys.exit(main())
