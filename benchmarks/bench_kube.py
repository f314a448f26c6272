"""``serve --backend kubernetes`` at scale (issue 29): a report's cost at 100 and at 5,000 Node
objects, the pool status writes a burst of reports makes, and the Node watch cache's memory.

    .venv/bin/python benchmarks/bench_kube.py [--quick] [--json FILE]

Design. Two real control planes (tests/helpers/kube_cluster.py: etcd, kube-apiserver 1.20.2,
OpenShift's CRDs) run side by side, one with 100 Node objects and one with 5,000 (1,000 with
``--quick``), each with its own node-config-server (one gunicorn worker, node state in the API:
``--store kubernetes``, the default with this backend; run as a user bound only to deploy/rbac.yaml's
ClusterRole and namespaced Role) and the examples' pools and MachineConfigs.
Growing one cluster from 100 to 5,000 could not be interleaved; two set-ups that differ only in
the fleet size can: each round sends a block of reports to one server, then a block to the other,
and so on, so that machine noise falls on both alike. The ratio of the table is the 5,000-Node
median over the 100-Node one, round by round.

- **A report** is timed client-side, one request at a time over a kept-alive HTTP connection
  (no TLS), from a client that is otherwise idle: the figure is the server's latency for one
  report, not a load generator's throughput. Every node has registered and reported once before
  (the store and the Node cache both hold the whole fleet), and each timed report changes the
  node's state (Done <-> Working), so each one makes the server write back (Node annotations, a
  MachineConfigNode, the pool's counts change).
- **A burst**: every node reports once, from 4 clients, once every Node has its
  MachineConfigNode (as in a cluster, where they are made with the Nodes); it is written back
  when every Node's MCD state annotation says what its report said (a metadata-only watch of
  the Nodes), and set against the API server's own rate for one merge patch of every Node's
  annotations, measured before and after it.
- **Pool status writes** are counted on the API's side: a watch on machineconfigpools, from
  before the first report until the server has written back every node, counts MODIFIED events
  (the server is the only writer of pools here). Set against the number of reports.
- **Memory** is the VmRSS of the server's gunicorn worker(s) (/proc/PID/status), in each set-up,
  with the Node objects listed into the watch cache and no report yet, then after every node
  reported; the difference between the set-ups over the difference in Nodes is the cost of a
  Node. The Node objects carry a status as a kubelet writes it (conditions, addresses, nodeInfo,
  capacity, 20 images), which the server watches whole and keeps slim (nodestatus.slim_node);
  the slim cache's own cost is also measured in-process with tracemalloc (``slim_cache_kib``).

kube-controller-manager is stopped once the control plane is up: with no kubelet heartbeating,
its node lifecycle controller would mark every Node unreachable after 40 s (a write storm of its
own that a real cluster does not have), and nothing here needs it.
"""

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, Row, save_json  # noqa: E402

SMALL, LARGE, QUICK_LARGE = 100, 5000, 1000
ADMIN_TOKEN = "bench-kube-admin"
TOKEN = "bench-kube"
MCO = "/apis/machineconfiguration.openshift.io/v1"
ROLE = "node-role.kubernetes.io/worker"
STATE = "machineconfiguration.openshift.io/state"
EXAMPLES = os.path.join(REPO, "examples", "state")
GROUP = "kubernetes backend"


def node_object(name: str) -> Dict[str, Any]:
    """A Node as a kubelet registers it (the size of the cached object is what memory measures)."""
    digest = hashlib.sha256(name.encode()).hexdigest()
    images = [{"names": [f"quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:{(digest * 2)[i:i + 64]}",
                         f"quay.io/openshift-release-dev/ocp-v4.0-art-dev:component-{i}"],
               "sizeBytes": 400000000 + i} for i in range(20)]
    conds = [{"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": "2026-01-01T00:00:00Z",
              "lastTransitionTime": "2026-01-01T00:00:00Z"} for t, s, r, m in (
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"))]
    res = {"cpu": "8", "memory": "32766572Ki", "ephemeral-storage": "125293548Ki", "pods": "250"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                ROLE: "", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                "node.openshift.io/os_id": "rhcos"}},
            "spec": {"providerID": f"baremetal://{name}"},
            "status": {"capacity": res, "allocatable": res, "conditions": conds,
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                     {"type": "Hostname", "address": name}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                       "nodeInfo": {"machineID": digest[:32], "systemUUID": digest[32:], "bootID": digest[:36],
                                    "kernelVersion": "5.14.0-427.el9_4.x86_64", "architecture": "amd64",
                                    "osImage": "Red Hat Enterprise Linux CoreOS 416.94 (Plow)",
                                    "containerRuntimeVersion": "cri-o://1.29.1", "kubeletVersion": "v1.29.5",
                                    "kubeProxyVersion": "v1.29.5", "operatingSystem": "linux"},
                       "images": images}}


def _pool(workers: int, fn, items) -> list:
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(fn, items))


def create_nodes(kc: Any, names: List[str]) -> float:
    """POST every Node (16 at a time); returns Nodes created a second."""
    local = threading.local()

    def one(name: str) -> None:
        s = getattr(local, "s", None) or kc.session()
        local.s = s
        r = s.post(kc.url + "/api/v1/nodes", json=node_object(name), timeout=60)
        if r.status_code != 201:
            raise RuntimeError(f"creating Node {name}: {r.status_code} {r.text[:200]}")

    start = time.monotonic()
    _pool(16, one, names)
    return len(names) / (time.monotonic() - start)


class ApiWatch(threading.Thread):
    """Events of one API collection from now on, as the API records them, each to ``seen(type,
    metadata)`` (the event's time is when it is seen): watches of ``window`` seconds one after the
    other from the last version seen, until ``close()``; with ``metadata_only``, as
    PartialObjectMetadata. A subclass sets what ``seen`` fills, then calls ``start()``."""

    def __init__(self, kc: Any, path: str, window: int, metadata_only: bool = False):
        super().__init__(daemon=True)
        self.s, self.url, self.window = kc.session(), kc.url + path, window
        meta = "application/json;as=PartialObjectMetadata{};g=meta.k8s.io;v=v1"
        if metadata_only:
            self.s.headers["Accept"] = meta.format("List")
        self.version = self.s.get(self.url, params={"limit": "1"}, timeout=30).json()["metadata"]["resourceVersion"]
        if metadata_only:
            self.s.headers["Accept"] = meta.format("")
        self.stopping = threading.Event()

    def seen(self, kind: str, meta: Dict[str, Any]) -> None:
        raise NotImplementedError

    def run(self) -> None:
        while not self.stopping.is_set():
            params = {"watch": "1", "resourceVersion": self.version, "timeoutSeconds": str(self.window),
                      "allowWatchBookmarks": "true"}
            with self.s.get(self.url, params=params, stream=True, timeout=30) as resp:
                for line in resp.iter_lines():
                    event = json.loads(line) if line else {}
                    meta = (event.get("object") or {}).get("metadata") or {}
                    if event.get("type") == "ERROR":
                        raise RuntimeError(f"watching {self.url}: {event}")
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.seen(event["type"], meta)
                    self.version = meta.get("resourceVersion") or self.version

    def close(self) -> None:
        self.stopping.set()
        self.join(30)
        self.s.close()


class NodeStates(ApiWatch):
    """Each Node's MCD state annotation (what node-agent's report last said, as the server wrote it
    back) with the time it was seen to change: a metadata-only watch of nodes, 5 s at a time."""

    def __init__(self, kc: Any):
        super().__init__(kc, "/api/v1/nodes", 5, metadata_only=True)
        self.state: Dict[str, str] = {}
        self.at: Dict[str, float] = {}
        self.start()

    def seen(self, kind: str, meta: Dict[str, Any]) -> None:
        state = (meta.get("annotations") or {}).get(STATE)
        if state is not None and state != self.state.get(meta["name"]):
            self.state[meta["name"]], self.at[meta["name"]] = state, time.monotonic()


class PoolWrites(ApiWatch):
    """MODIFIED events of machineconfigpools with their times: watches of a second each."""

    def __init__(self, kc: Any):
        super().__init__(kc, MCO + "/machineconfigpools", 1)
        self.events: List[Tuple[float, str]] = []
        self.start()

    def seen(self, kind: str, meta: Dict[str, Any]) -> None:
        if kind == "MODIFIED":
            self.events.append((time.monotonic(), meta["name"]))

    def between(self, t0: float, t1: float, pool: str = "") -> int:
        return sum(1 for t, name in list(self.events) if t0 <= t <= t1 and (not pool or name == pool))


def children(pid: int) -> List[int]:
    """The processes whose parent is ``pid`` (the gunicorn master's workers), from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def rss_kib(pid: int) -> int:
    """VmRSS of the server's workers (children of the gunicorn master ``pid``), KiB."""
    total = 0
    for child in children(pid):
        try:
            with open(f"/proc/{child}/status") as f:
                total += next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
        except (OSError, ValueError, IndexError, StopIteration):
            continue
    return total


def cpu_s(pid: int) -> float:
    """A process's CPU seconds so far, user and system (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settled_rss(pid: int, timeout: float = 60.0) -> int:
    """RSS once it stops growing (the Node cache listed): equal within 0.5% over 2 s."""
    deadline = time.monotonic() + timeout
    last = rss_kib(pid)
    while time.monotonic() < deadline:
        time.sleep(2)
        now = rss_kib(pid)
        if abs(now - last) <= 0.005 * max(last, 1):
            return now
        last = now
    return last


class Fleet:
    """One control plane with ``n`` Nodes and its own server."""

    def __init__(self, top: str, n: int, tag: str):
        from tests.helpers.kube_cluster import KubeCluster
        from tests.helpers.server_proc import ServerProcess

        self.n, self.tag = n, tag
        self.names = [f"{tag}-{i:05d}" for i in range(n)]
        self.kc = KubeCluster(os.path.join(top, tag)).start()
        self.srv = None
        cm = self.kc.procs.pop("kube-controller-manager")
        os.killpg(cm.pid, signal.SIGTERM)
        cm.wait(15)
        self.kc.apply_examples()
        self.kc.bind_server_user("node-config-server-bench")
        self.create_rate = create_nodes(self.kc, self.names)
        self.node_bytes = len(self.kc.get(f"/api/v1/nodes/{self.names[0]}").content)
        # The admin registers every node (approved by the admin: with this backend a report is
        # about its Node only for a name the admin approved or its kubelet's certificate proved).
        admin_file = os.path.join(top, f"{tag}-admin-token")
        with open(admin_file, "w") as f:
            f.write(ADMIN_TOKEN + "\n")
        self.srv = ServerProcess(None, token=TOKEN, workers=1, auto_approve=None, extra_args=[
            "--backend", "kubernetes", "--kubeconfig", self.kc.kubeconfig_for("node-config-server-bench"),
            "--admin-token-file", admin_file])
        started = time.monotonic()
        self.srv.start(timeout=120)
        self.server_start = time.monotonic() - started
        self.session = self.srv.session()
        self.rss_nodes_only = settled_rss(self.srv.proc.pid)
        self.target = self.session.get(self.srv.url("/api/v1/pools/worker"), timeout=10).json()["spec"][
            "configuration"]["name"]
        self.creds: Dict[str, str] = {}
        self.state: Dict[str, str] = {}

    def body(self, node: str) -> str:
        state = self.state[node] = "Working" if self.state.get(node) == "Done" else "Done"
        return json.dumps({"pool": "worker", "state": state, "currentConfig": self.target,
                           "desiredConfig": self.target, "labels": {ROLE: ""}})

    def report(self, node: str, session: Any = None) -> float:
        """One report as ``node``; returns its latency (client-side, seconds)."""
        s = session or self.session
        headers = {"Authorization": f"Bearer {self.creds[node]}", "Content-Type": "application/json"}
        body = self.body(node)
        start = time.perf_counter()
        r = s.post(self.srv.url(f"/api/v1/nodes/{node}/report"), data=body, headers=headers, timeout=60)
        took = time.perf_counter() - start
        if r.status_code != 200:
            raise RuntimeError(f"report {node}: {r.status_code} {r.text[:200]}")
        return took

    def register_all(self) -> None:
        local = threading.local()

        def one(node: str) -> None:
            s = getattr(local, "s", None) or self.srv.session(token=False)
            s.headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"
            local.s = s
            r = s.post(self.srv.url(f"/api/v1/nodes/{node}/register"), timeout=60)
            if r.status_code not in (200, 201):
                raise RuntimeError(f"register {node}: {r.status_code} {r.text[:200]}")
            self.creds[node] = r.json()["credential"]

        _pool(4, one, self.names)

    def wait_mcns(self, timeout: float = 900) -> float:
        """Until every Node has its MachineConfigNode (the server's sweep makes at most 50 a
        second), so that a burst meets the fleet as a cluster's Nodes are, each with its own:
        before, half of the burst's reports came before their MachineConfigNode and were kept in
        the registration, then moved, and the burst timed the sweep. Returns the seconds waited."""
        t0 = time.monotonic()
        while self.written() < self.n:
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"{self.tag}: {self.written()} of {self.n} MachineConfigNodes made in {timeout} s")
            time.sleep(0.5)
        return time.monotonic() - t0

    def report_all(self) -> Dict[str, float]:
        """Every node reports once (4 clients); written back when every Node's MCD state annotation
        says what its report said (the node controller's view of a report: the MCD's own report
        is that write); the API's pool writes are counted until then."""
        watch, states = PoolWrites(self.kc), NodeStates(self.kc)
        pids = {"server": [self.srv.proc.pid] + children(self.srv.proc.pid),
                "kube-apiserver": [self.kc.procs["kube-apiserver"].pid], "etcd": [self.kc.procs["etcd"].pid]}
        cpu0 = {k: sum(cpu_s(p) for p in v) for k, v in pids.items()}
        local = threading.local()

        def one(node: str) -> None:
            s = getattr(local, "s", None) or self.srv.session(token=False)
            local.s = s
            self.report(node, s)

        t0 = time.monotonic()
        _pool(4, one, self.names)
        sent = time.monotonic()
        while any(states.state.get(name) != self.state[name] for name in self.names):
            if time.monotonic() - sent > 900:
                done = sum(states.state.get(name) == self.state[name] for name in self.names)
                raise RuntimeError(f"{self.tag}: only {done} of {self.n} nodes written back in 900 s")
            time.sleep(0.2)
        drained = max(states.at[name] for name in self.names)
        cpu = {k: round(sum(cpu_s(p) for p in v) - cpu0[k], 2) for k, v in pids.items()}
        states.close()
        time.sleep(2.5)  # the last coalesced round
        watch.close()
        self.rss_reported = settled_rss(self.srv.proc.pid)
        self.node_bytes_reported = len(self.kc.get(f"/api/v1/nodes/{self.names[0]}").content)
        return {"reports": self.n, "send_s": sent - t0, "written_s": drained - t0, "cpu_s": cpu,
                "worker_writes_at_s": [round(t - t0, 2) for t, name in watch.events if name == "worker"],
                "worker_writes": watch.between(t0, drained + 2.5, "worker"),
                "all_pool_writes": watch.between(t0, drained + 2.5)}

    def api_patch_rate(self, round_no: int) -> float:
        """The API server's own rate for what a report's write-back is made of: one JSON merge
        patch of an annotation on every Node, from 4 clients as the reports come, as admin (no
        node-config-server in the way); Nodes patched a second."""
        local = threading.local()
        patch = json.dumps({"metadata": {"annotations": {"bench.node-agent.io/probe": str(round_no)}}})

        def one(name: str) -> None:
            s = getattr(local, "s", None) or self.kc.session()
            local.s = s
            r = s.patch(self.kc.url + f"/api/v1/nodes/{name}", data=patch, timeout=60,
                        headers={"Content-Type": "application/merge-patch+json"})
            if r.status_code != 200:
                raise RuntimeError(f"patch {name}: {r.status_code} {r.text[:200]}")

        t0 = time.monotonic()
        _pool(4, one, self.names)
        return self.n / (time.monotonic() - t0)

    def api_report_floor(self, round_no: int) -> float:
        """The API server's own rate for the three writes a report is made of, from 4 clients as
        the reports come, as admin, no node-config-server in the way: an annotation of a report's
        size on the MachineConfigNode (merge patch), the Node's annotation (merge patch) and the
        MachineConfigNode's conditions (a JSON patch of the status that tests the conditions
        held, listed before the clock starts, and changes one message); Nodes a second."""
        listed = self.kc.get(MCO + "/machineconfignodes").json()["items"]
        held = {o["metadata"]["name"]: (o.get("status") or {}).get("conditions") or [] for o in listed}
        local = threading.local()
        record = json.dumps({"metadata": {"annotations": {"bench.node-agent.io/probe": "x" * 400}}})
        node = json.dumps({"metadata": {"annotations": {"bench.node-agent.io/probe": str(round_no)}}})
        merge, jsonpatch = "application/merge-patch+json", "application/json-patch+json"

        def one(name: str) -> None:
            s = getattr(local, "s", None) or self.kc.session()
            local.s = s
            conds = [dict(c, message=c.get("message", "").split(" [probe")[0] + f" [probe {round_no}]")
                     if c.get("type") == "Updated" else c for c in held[name]]
            ops = json.dumps([{"op": "test", "path": "/status/conditions", "value": held[name]},
                              {"op": "replace", "path": "/status/conditions", "value": conds}])
            for path, body, kind in ((f"{MCO}/machineconfignodes/{name}", record, merge),
                                     (f"/api/v1/nodes/{name}", node, merge),
                                     (f"{MCO}/machineconfignodes/{name}/status", ops, jsonpatch)):
                r = s.patch(self.kc.url + path, data=body, timeout=60, headers={"Content-Type": kind})
                if r.status_code != 200:
                    raise RuntimeError(f"patch {path}: {r.status_code} {r.text[:200]}")

        t0 = time.monotonic()
        _pool(4, one, self.names)
        return self.n / (time.monotonic() - t0)

    def written(self) -> int:
        r = self.kc.get(MCO + "/machineconfignodes", params={"limit": "1"})
        doc = r.json()
        return len(doc.get("items") or []) + int(doc["metadata"].get("remainingItemCount") or 0)

    def close(self) -> None:
        if self.srv is not None:
            self.srv.stop()
            if self.srv._data_dir_cleanup is not None:
                self.srv._data_dir_cleanup()
        self.kc.stop()


def timed_rounds(fleets: List[Fleet], rounds: int, per_round: int) -> Dict[str, Any]:
    """Blocks of ``per_round`` sequential reports, alternating between the fleets; the median
    latency of each block is one sample. Pool writes of the larger fleet counted meanwhile."""
    import random

    rng = random.Random(29)
    samples: Dict[str, List[float]] = {f.tag: [] for f in fleets}
    watch = PoolWrites(fleets[-1].kc)
    t0 = time.monotonic()
    for i in range(rounds + 1):  # round 0 warms up
        for fleet in (fleets if i % 2 else fleets[::-1]):
            got = [fleet.report(rng.choice(fleet.names)) for _ in range(per_round)]
            if i:
                samples[fleet.tag].append(statistics.median(got))
    t1 = time.monotonic()
    time.sleep(2.5)
    watch.close()
    return {"samples": samples, "seconds": t1 - t0, "reports": (rounds + 1) * per_round,
            "worker_writes": watch.between(t0, t1 + 2.5, "worker")}


def measure(quick: bool) -> Dict[str, Any]:
    large = QUICK_LARGE if quick else LARGE
    top = tempfile.mkdtemp(prefix="bench-kube-")
    fleets: List[Fleet] = []
    started = time.monotonic()
    try:
        for n, tag in ((SMALL, "small"), (large, "large")):
            fleets.append(Fleet(top, n, tag))
        burst = {}
        for f in fleets:
            f.register_all()
            f.mcns_s = f.wait_mcns()
            before = f.api_patch_rate(1)  # interleaved: the API's own rates before and after the burst
            floor_before = f.api_report_floor(1)
            burst[f.tag] = dict(f.report_all(), mcns_s=f.mcns_s)
            burst[f.tag]["api_patch_rates"] = [before, f.api_patch_rate(2)]
            burst[f.tag]["api_report_rates"] = [floor_before, f.api_report_floor(2)]
        rounds = timed_rounds(fleets, rounds=6 if quick else 20, per_round=50)
        small, big = fleets
        return {"sizes": {"small": small.n, "large": big.n}, "burst": burst, "rounds": rounds,
                "node_bytes": big.node_bytes, "node_bytes_reported": big.node_bytes_reported, "create_rate": big.create_rate, "server_start_s": big.server_start,
                "rss_kib": {f.tag: {"nodes_only": f.rss_nodes_only, "reported": f.rss_reported} for f in fleets},
                "slim_kib": slim_cache_kib(big.n),
                "load": os.getloadavg(), "quick": quick, "seconds": time.monotonic() - started}
    finally:
        for f in fleets:
            f.close()
        shutil.rmtree(top, ignore_errors=True)


# The burst set against the API server's own rates, measured before and after it (4 clients):
# (the key in the burst's figures, what the row compares with, its note)
RATE_ROWS = (
    ("api_patch_rates", "the API's own merge-patch rate",
     "{back:.0f} nodes/s written back; the API server patched {rates} Nodes/s (4 clients, before and after "
     "the burst); target >= 0.8x"),
    ("api_report_rates", "the API's own rate for a report's three writes",
     "the API server took a report's writes (the record, the Node, the MachineConfigNode's status) for "
     "{rates} nodes/s (4 clients, before and after the burst): node-config-server's own share"),
)


def rows_from(doc: Dict[str, Any]) -> List[Row]:
    small, large = doc["sizes"]["small"], doc["sizes"]["large"]
    s = doc["rounds"]["samples"]
    floor = f"report, {small} Nodes"
    rows = [Row(GROUP, floor, statistics.median(s["small"]), is_floor=True, samples=s["small"],
                note="client-side latency of one report, sequential, keep-alive HTTP; median of each block of 50"),
            Row(GROUP, f"report, {large} Nodes", statistics.median(s["large"]), floor=floor, samples=s["large"],
                note=f"target <= 1.5x; {len(s['large'])} interleaved rounds")]
    for tag, n in (("small", small), ("large", large)):
        b = doc["burst"][tag]
        rows.append(Row(GROUP, f"{n} reports at {n} Nodes (burst, 4 clients)", b["written_s"],
                        note=f"sent in {b['send_s']:.1f} s, every Node's state annotation written back in "
                             f"{b['written_s']:.1f} s ({n / b['written_s']:.0f} nodes/s; every Node had its "
                             f"MachineConfigNode first, made in {b.get('mcns_s', 0):.1f} s); CPU in the burst: "
                             f"{', '.join(f'{k} {v:.1f} s' for k, v in b.get('cpu_s', {}).items())}; "
                             f"{b['worker_writes']} status write(s) of pool "
                             f"worker ({b['all_pool_writes']} of all pools), not {n}; at "
                             f"{', '.join(str(t) for t in b.get('worker_writes_at_s', [])[:8])} s"))
        for key, against, says in RATE_ROWS:
            if b.get(key):
                rates = " and ".join(f"{r:.0f}" for r in b[key])
                rows.append(Row(GROUP, f"written back at {n} Nodes vs {against}",
                                (n / b["written_s"]) / statistics.mean(b[key]), unit="x",
                                note=says.format(back=n / b["written_s"], rates=rates)))
    r = doc["rounds"]
    rows.append(Row(GROUP, f"{r['reports']} reports (timed rounds)", r["seconds"],
                    note=f"{r['worker_writes']} status write(s) of pool worker at {large} Nodes over {r['seconds']:.1f} s"))
    if "slim_kib" in doc:
        slim, whole = doc["slim_kib"]
        rows.append(Row(GROUP, f"Node cache as kept (slim), per Node at {large} Nodes", slim, unit="KiB",
                        note=f"tracemalloc; a whole Node as the API sends it costs {whole:.1f} KiB"))
    rss = doc["rss_kib"]
    for key, what in (("nodes_only", "Node watch cache, per Node"), ("reported", "per reporting node, all told")):
        per = (rss["large"][key] - rss["small"][key]) / float(large - small)
        size = doc["node_bytes" if key == "nodes_only" else "node_bytes_reported"]
        rows.append(Row(GROUP, what, per, unit="KiB",
                        note=f"worker RSS {rss['small'][key] / 1024:.0f} MiB at {small}, "
                             f"{rss['large'][key] / 1024:.0f} MiB at {large} Nodes; a Node is {size} bytes of JSON"
                             + (f" (created at {doc['create_rate']:.0f}/s; the server was healthy "
                                f"{doc['server_start_s']:.1f} s after its start)"
                                if key == "nodes_only" else "")))
    return rows


def slim_cache_kib(n: int) -> Tuple[float, float]:
    """KiB per Node of the server's Node cache as it keeps them (agent/server/rollout/nodestatus.py
    slim_node: labels, the MCD's annotations, three conditions, spec.unschedulable), against the
    whole Node as the API sends it, by tracemalloc over ``n`` kubelet-sized Nodes in a dict by
    name: the cache's own cost, without the worker's other memory that RSS also moves with."""
    import tracemalloc

    from agent.server.rollout.nodestatus import slim_node

    def cost(transform) -> float:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        cache = {}
        for i in range(n):
            name = f"slim-{i:05d}"
            cache[name] = transform(json.loads(json.dumps(node_object(name))))  # parsed as the watch parses it
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        del cache
        return used / 1024.0 / n

    return cost(slim_node), cost(lambda obj: obj)


def run(quick: bool = False) -> List[Row]:
    from tests.helpers.etcd_cluster import ETCD
    from tests.helpers.kube_cluster import KUBECTL, find_kube_bin

    if not (find_kube_bin() and os.access(ETCD, os.X_OK) and os.access(KUBECTL, os.X_OK)):
        return [Row(GROUP, "scale", None, note="kube-apiserver not built (make kube-bin), or etcd/kubectl missing")]
    doc = measure(quick)
    save_json("kube.json", doc)
    return rows_from(doc)


def main() -> int:
    from benchmarks.common import table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{SMALL} vs {QUICK_LARGE} Nodes, fewer rounds")
    ap.add_argument("--json", metavar="FILE", help="also write the measurements to FILE")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    start = time.monotonic()
    doc = measure(args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(table(rows_from(doc)))
    print(f"\n{time.monotonic() - start:.0f} s in all; load average (1 min) {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
