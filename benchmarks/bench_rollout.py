"""A change rolled out to a fleet by ``serve --backend kubernetes`` (issue 46): the server targets
the nodes, ``maxUnavailable`` at a time; how close to the ideal, how many at once, what it writes.

    .venv/bin/python benchmarks/bench_rollout.py [--quick] [--sizes 500 1000] [--update-seconds 10]
        [--changes none drain layered] [--json FILE]

Design.

- **Real parts.** One control plane per fleet size (tests/helpers/kube_cluster.py: etcd,
  kube-apiserver 1.20.2 with RBAC, OpenShift's CRDs), the examples' pools and MachineConfigs, the
  worker pool's ``maxUnavailable: "10%"``, and one Node object per simulated node (bench_kube's
  ``node_object``: labelled into the worker pool, Ready), all created before the server starts.
  The real ``node-config-server serve --backend kubernetes`` (node state in the API, the default
  ``--store kubernetes``; gunicorn with 2 gevent workers, one per CPU here, as serve's default) as a
  user bound only to deploy/rbac.yaml's roles; plain HTTP, as bench_kube: a member's fetches and
  reports ride kept-alive connections, so TLS would add a handshake per node, not a cost per
  targeting (node-agent itself sends its credential only over https).
- **kube-controller-manager is stopped** once the control plane is up (after it made the default
  ServiceAccount of the namespace the pinned node's pod runs in): with no kubelet heartbeating, its
  node lifecycle controller would mark every Node unreachable after 40 s (NotReady: unavailable,
  which stalls any rollout, and a write storm of its own that a real cluster does not have). Its
  disruption controller's one job here, the PodDisruptionBudget's status, is written by this
  benchmark as that controller writes it (``disruptionsAllowed: 0``), as tests/kube play the
  kubelet's part for pods: the eviction API then refuses the pod's eviction (429) for real.
- **Light agents** (benchmarks/rollout_fleet.py, one gevent greenlet per node in a process of its
  own, so that 1,000 long polls cost the client little and gevent never patches this process):
  node-agent's protocol, its long poll (``?wait=25``, ``If-None-Match``), its pause between passes
  and its planner (to know whether the move drains and reboots), a fixed time per update. What
  each agent does is streamed back with its time: when it learned its turn, sent Working, was Done.
- **The changes.** Each size runs the same three rollouts, the first two measured from the moment
  the MachineConfig is POSTed to the API (the server's render and its targeting included):
  1. a file under /etc/nmstate/openshift (node-agent's default policy: None, no drain, no
     reboot): targeting alone paces it;
  2. a file no policy covers (drain and reboot), with the oldest node (the first upstream's order
     targets) pinned: a pod on its Node under a PodDisruptionBudget whose minAvailable is its
     replicas, and ``serve --drain-defer-after 5`` (the drain cadence shortened likewise). The
     others must finish; the pinned node must be deferred, named in the pool's
     ``status.rollout.deferred``, never evicted; once the budget and its pod go, it is tried again
     and finishes (timed too);
  3. a layered change (issue 52; benchmarks/rollout_layered.py): the worker pool opted in to
     image mode (a MachineOSConfig), a MachineConfig POSTed, and nobody may be targeted while its
     rendered config's image is not built (the pool's waitReason says so); then the build
     succeeds (the MachineOSConfig's ``status.currentImagePullSpec``, a MachineOSBuild
     Succeeded with its ``digestedImagePushSpec``), and the rollout of config + image (drain and
     reboot: the OS image changes) is timed from that moment until every node sent Done with
     ``currentImage`` and ``desiredImage`` the build's image, as node-agent reports them. It
     fails loudly when no node's Done came for ``rollout_layered.stall_limit`` (before issue 52
     the pool stopped after its first wave), or when a node was told its turn before the build,
     or went to another image. Last, because it leaves the pool in image mode.
  The sizes run side by side, interleaved (change 1 at 500, at 1,000, then change 2 at 500, at
  1,000, ...), so that the machine's noise falls on both alike. ``--changes`` picks some of them.
- **Figures.** The wall-clock until every node's Done, against the ideal ceil(N / maxUnavailable)
  x update time; the peak of nodes updating at once, exact from the agents' own spans (from the
  fetch that told a node its turn to the moment it sent Done; the server frees a slot only after
  that Done arrives, so spans of a correct server never overlap past maxUnavailable); API writes
  per node, counted by the API server itself (``apiserver_request_total`` of write verbs, before
  the change and once the server wrote back the last node's state (no write for 3 s); the
  benchmark's own writes subtracted; the replicas' heartbeat Leases included); the delay from the server's targeting (the
  ``at`` of the node's entry in the pool row, a ConfigMap this benchmark watches) to the agent's
  fetch returning; the handover from a Done sent to the next node targeted; CPU seconds of the
  server, kube-apiserver + etcd, and the light agents.
"""

import argparse
import bisect
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import rollout_layered as layered  # noqa: E402
from benchmarks.common import REPO, Row, save_json  # noqa: E402

SIZES, QUICK_SIZES = (500, 1000), (100, 200)
UPDATE_S, QUICK_UPDATE_S = 10.0, 5.0
MAX_UNAVAILABLE = "10%"
DEFER_AFTER = 5  # serve --drain-defer-after: seconds a PodDisruptionBudget may hold a drain
GROUP = "rollout (kubernetes)"
TOKEN = "bench-rollout"
ADMIN_TOKEN = "bench-rollout-admin"
USER = "node-config-server-rollout"
NAMESPACE = "node-config-server"  # the server's (deploy/rbac.yaml)
PINNED_NS = "pinned"
MCO = "/apis/machineconfiguration.openshift.io/v1"
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY")
NONE_POLICY_DIR = "/etc/nmstate/openshift"  # node-agent's default disruption policy: None
FLEET = os.path.join(REPO, "benchmarks", "rollout_fleet.py")


# -- pure: what the figures are -------------------------------------------------------------------

def ideal_seconds(nodes: int, max_unavailable: int, update_s: float) -> float:
    """The least a rollout can take: waves of ``max_unavailable`` nodes, each ``update_s`` long."""
    return math.ceil(nodes / max(1, max_unavailable)) * update_s


def peak_concurrency(spans: Iterable[Tuple[float, float]]) -> int:
    """The most spans open at one instant (a span ending when another starts does not overlap it)."""
    points = []
    for start, end in spans:
        points += [(start, 1), (end, -1)]
    peak = now = 0
    for _, step in sorted(points, key=lambda p: (p[0], p[1])):  # ends (-1) before starts at the same time
        now += step
        peak = max(peak, now)
    return peak


def mean_concurrency(spans: Iterable[Tuple[float, float]]) -> float:
    """Spans open on average between the first start and the last end (their total over that time)."""
    spans = list(spans)
    if not spans:
        return 0.0
    width = max(e for _, e in spans) - min(s for s, _ in spans)
    return sum(e - s for s, e in spans) / width if width > 0 else float(len(spans))


LINE = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.eE+]+)\s*$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def write_counts(metrics: str) -> Dict[str, float]:
    """Write requests the API server counted (``apiserver_request_total``), by "resource[/sub] VERB
    code", from its /metrics text."""
    out: Dict[str, float] = {}
    for line in metrics.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group("labels")))
        if labels.get("verb") not in WRITE_VERBS:
            continue
        resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        key = f"{resource} {labels['verb']} {labels.get('code', '')}"
        out[key] = out.get(key, 0.0) + float(m.group("value"))
    return out


def writes_between(before: Dict[str, float], after: Dict[str, float],
                   ours: Optional[Dict[str, int]] = None) -> Dict[str, int]:
    """The writes made between two counts, less ``ours`` (keys "resource VERB code")."""
    out = {k: int(after.get(k, 0) - before.get(k, 0)) for k in set(before) | set(after)}
    for k, n in (ours or {}).items():
        out[k] = out.get(k, 0) - n
    return {k: v for k, v in sorted(out.items()) if v}


def by_resource(writes: Dict[str, int]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for key, n in writes.items():
        resource = key.split(" ", 1)[0]
        out[resource] = out.get(resource, 0) + n
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def spans_of(events: Sequence[Dict[str, Any]], config: str) -> Dict[str, Tuple[float, float]]:
    """Each node's span of updating to ``config``: from its ``learned`` to its ``done`` (or
    ``deferred``, which gives its slot back). A node that learned it twice has its last span."""
    start: Dict[str, float] = {}
    out: Dict[str, Tuple[float, float]] = {}
    for e in events:
        if e.get("c") != config:
            continue
        if e["e"] == "learned":
            start[e["n"]] = e["t"]
        elif e["e"] in ("done", "deferred") and e["n"] in start:
            out[e["n"] + ("" if e["e"] == "done" else "#deferred")] = (start.pop(e["n"]), e["t"])
    return out


def quantiles(xs: Sequence[float]) -> Dict[str, float]:
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    return {"n": len(s), "median": statistics.median(s), "p90": s[min(len(s) - 1, int(0.9 * len(s)))],
            "max": s[-1], "min": s[0]}


def latest_before(times: Sequence[float], t: float) -> Optional[float]:
    """The latest of the sorted ``times`` at or before ``t`` (None: none)."""
    i = bisect.bisect_right(times, t)
    return times[i - 1] if i else None


def learn_delays(targeted: Dict[Tuple[str, str], List[float]], events: Sequence[Dict[str, Any]],
                 config: str) -> List[float]:
    """Seconds from the server's targeting of each node to ``config`` (the latest before it
    learned it: a node deferred is targeted again later) to the node's fetch telling it."""
    out = []
    for e in events:
        if e["e"] == "learned" and e.get("c") == config:
            at = latest_before(targeted.get((e["n"], config), []), e["t"])
            if at is not None:
                out.append(e["t"] - at)
    return out


def handovers(targeted: Dict[Tuple[str, str], List[float]], events: Sequence[Dict[str, Any]], config: str,
              first_wave_until: float) -> List[float]:
    """For each targeting to ``config`` after the first wave: seconds from the last Done sent
    before it (the slot it got) to that targeting."""
    dones = sorted(e["t"] for e in events if e["e"] == "done" and e.get("c") == config)
    out = []
    for (_, c), ats in targeted.items():
        for at in ats:
            last = latest_before(dones, at) if c == config and at > first_wave_until else None
            if last is not None:
                out.append(at - last)
    return out


# -- the set-up: a control plane, the server, the light agents ----------------------------------------

def say(text: str) -> None:
    print(f"  bench_rollout {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def approval_args(admin_token_file: str) -> List[str]:
    """How a simulated node comes to count: with --backend kubernetes only a kubelet certificate or
    the admin proves a name (a --auto-approve rule binds nothing: docs/security.md), so each light
    agent is approved with the admin token right after it registers (rollout_fleet.py)."""
    return ["--admin-token-file", admin_token_file]


def server_args(kubeconfig: str, admin_token_file: str) -> List[str]:
    return ["--backend", "kubernetes", "--kubeconfig", kubeconfig, *approval_args(admin_token_file),
            # registration is the fleet's set-up, not what is measured: never its bottleneck
            "--register-rate", "100000", "--register-burst", "100000", "--max-unvetted", "1000000",
            # the pinned node's drain: attempts a second apart, given up (deferred) after DEFER_AFTER
            "--drain-attempt-timeout", "2", "--drain-retry", "1", "--drain-defer-after", str(DEFER_AFTER)]


def machine_config(name: str, path: str, text: str) -> Dict[str, Any]:
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": "worker"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                {"path": path, "mode": 420, "contents": {"source": "data:," + text}}]}}}}


def pin(kc: Any, node: str) -> None:
    """A pod on ``node`` under a PodDisruptionBudget whose minAvailable is its replicas (1): no
    eviction may pass it. The kubelet's part (the pod Running and Ready) and the disruption
    controller's (the budget's status: no disruption allowed) are played here, as in
    tests/kube/test_kube_drain_cadence.py: neither runs."""
    s = kc.session()
    base = f"{kc.url}/api/v1/namespaces/{PINNED_NS}/pods"

    def call(method: str, url: str, body: Dict[str, Any], merge: bool = False) -> Dict[str, Any]:
        headers = {"Content-Type": "application/merge-patch+json"} if merge else {}
        r = s.request(method, url, data=json.dumps(body), headers=headers, timeout=30)
        if r.status_code not in (200, 201):
            raise RuntimeError(f"{method} {url}: {r.status_code} {r.text[:300]}")
        return r.json()

    call("POST", base, {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "app", "namespace": PINNED_NS, "labels": {"role": "app"}},
                        "spec": {"nodeName": node, "automountServiceAccountToken": False,
                                 "containers": [{"name": "c", "image": "registry.invalid/app:1"}]}})
    call("PATCH", f"{base}/app/status", {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}}, merge=True)
    pdbs = f"{kc.url}/apis/policy/v1beta1/namespaces/{PINNED_NS}/poddisruptionbudgets"
    pdb = call("POST", pdbs, {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
                              "metadata": {"name": "app"},
                              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"role": "app"}}}})
    call("PATCH", f"{pdbs}/app/status", {"status": {
        "observedGeneration": pdb["metadata"]["generation"], "disruptionsAllowed": 0, "currentHealthy": 1,
        "desiredHealthy": 1, "expectedPods": 1}}, merge=True)


def unpin(kc: Any) -> Dict[str, int]:
    """The budget and its pod go (the application moved away); returns these writes (ours)."""
    s = kc.session()
    for path, body in ((f"/apis/policy/v1beta1/namespaces/{PINNED_NS}/poddisruptionbudgets/app", None),
                       (f"/api/v1/namespaces/{PINNED_NS}/pods/app", {"gracePeriodSeconds": 0})):
        r = s.delete(kc.url + path, json=body, timeout=30)
        if r.status_code != 200:
            raise RuntimeError(f"DELETE {path}: {r.status_code} {r.text[:300]}")
    return {"poddisruptionbudgets DELETE 200": 1, "pods DELETE 200": 1}


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of ``pid`` (and, ``children``, of each live child: gunicorn's workers)."""
    tick = os.sysconf("SC_CLK_TCK")

    def own(p: int) -> Tuple[int, float]:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / tick

    total = own(pid)[1]
    if children:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    ppid, used = own(int(entry))
                except (OSError, ValueError, IndexError):
                    continue
                total += used if ppid == pid else 0.0
    return total


class RowWatch(threading.Thread):
    """The worker pool's row (the ConfigMap node-config-server-pool-worker) in each version the
    API holds: when the server targeted each node to each config (its entry's ``at``), deferrals,
    and the target's moves. Watches of a few seconds, one after the other from the last version."""

    def __init__(self, kc: Any, pool: str = "worker"):
        super().__init__(daemon=True)
        self.s, self.url = kc.session(), f"{kc.url}/api/v1/namespaces/{NAMESPACE}/configmaps"
        self.field = f"metadata.name=node-config-server-pool-{pool}"
        self.lock = threading.Lock()
        self.targeted: Dict[Tuple[str, str], List[float]] = {}
        self.deferred: Dict[str, Tuple[float, str]] = {}  # node -> (at, why), the first deferral
        self.targets: List[Tuple[float, str]] = []  # (seen at, the pool's target)
        self.versions = self.relists = 0
        self.stopping = threading.Event()
        self.version = self._list()
        self.start()

    def _list(self) -> str:
        doc = self.s.get(self.url, params={"fieldSelector": self.field}, timeout=30).json()
        for item in doc.get("items") or []:
            self._note(item)
        return doc["metadata"]["resourceVersion"]

    def _note(self, obj: Dict[str, Any]) -> None:
        row = json.loads((obj.get("data") or {}).get("row") or "{}")
        if not row:
            return
        now = time.time()
        with self.lock:
            self.versions += 1
            if not self.targets or self.targets[-1][1] != row.get("target"):
                self.targets.append((now, row.get("target")))
            for node, entry in ((row.get("rollout") or {}).get("targets") or {}).items():
                if entry.get("deferred"):
                    self.deferred.setdefault(node, (float(entry["deferred"].get("at") or now),
                                                    str(entry["deferred"].get("why") or "")))
                    continue
                ats = self.targeted.setdefault((node, str(entry.get("config"))), [])
                at = float(entry.get("at") or now)
                if at not in ats:
                    ats.append(at)
                    ats.sort()

    def run(self) -> None:
        import requests

        while not self.stopping.is_set():
            params = {"watch": "1", "resourceVersion": self.version, "timeoutSeconds": "5",
                      "fieldSelector": self.field, "allowWatchBookmarks": "true"}
            try:
                with self.s.get(self.url, params=params, stream=True, timeout=30) as resp:
                    for line in resp.iter_lines():
                        event = json.loads(line) if line else {}
                        if event.get("type") == "ERROR":  # too old (410): list again (versions between are lost)
                            self.relists += 1
                            self.version = self._list()
                            break
                        obj = event.get("object") or {}
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._note(obj)
                        self.version = (obj.get("metadata") or {}).get("resourceVersion") or self.version
            except requests.RequestException:
                time.sleep(0.5)

    def target(self) -> str:
        with self.lock:
            return self.targets[-1][1] if self.targets else ""

    def snapshot(self) -> Dict[Tuple[str, str], List[float]]:
        with self.lock:
            return {k: list(v) for k, v in self.targeted.items()}

    def close(self) -> None:
        self.stopping.set()
        self.join(30)
        self.s.close()


class Fleet:
    """One size: its control plane with ``n`` Nodes, its server, its light agents (a process)."""

    def __init__(self, top: str, n: int, update_s: float, pinned_pod: bool = True):
        from agent.core.objectchecks import parse_max_unavailable
        from benchmarks.bench_kube import create_nodes
        from tests.helpers.kube_cluster import KubeCluster

        self.n, self.update_s, self.top = n, update_s, os.path.join(top, f"n{n}")
        self.names = [f"w-{i:05d}" for i in range(n)]
        self.pinned = self.names[0]  # created first: the oldest, the first upstream's order targets
        self.max_unavailable = parse_max_unavailable(MAX_UNAVAILABLE, n)
        self.srv: Any = None
        self.proc: Optional[subprocess.Popen] = None
        self.rows: Optional[RowWatch] = None
        self.events: List[Dict[str, Any]] = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.kc = KubeCluster(self.top).start()
        self.kc.create_namespace(PINNED_NS)  # its default ServiceAccount comes from the controller manager
        cm = self.kc.procs.pop("kube-controller-manager")
        os.killpg(cm.pid, signal.SIGTERM)
        cm.wait(15)
        self.kc.apply_examples()
        self.kc.kubectl("patch", "mcp", "worker", "--type", "merge", "-p",
                        json.dumps({"spec": {"maxUnavailable": MAX_UNAVAILABLE}}))
        self.kc.bind_server_user(USER)
        create_nodes(self.kc, self.names[:1])
        time.sleep(1.1)  # creationTimestamp has whole seconds: the pinned Node is strictly the oldest
        self.create_rate = create_nodes(self.kc, self.names[1:])
        self.pinned_pod = pinned_pod  # the drain change's pod and budget on the pinned node, until unpinned
        if pinned_pod:
            pin(self.kc, self.pinned)
        say(f"n={n}: control plane up, {n} Nodes made ({self.create_rate:.0f}/s)")

    def start(self) -> "Fleet":
        from tests.helpers.server_proc import ServerProcess

        admin = os.path.join(self.top, "admin-token")
        with open(os.open(admin, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(ADMIN_TOKEN + "\n")
        self.srv = ServerProcess(None, token=TOKEN, workers=2, auto_approve=None,
                                 extra_args=server_args(self.kc.kubeconfig_for(USER), admin))
        self.srv.start(timeout=180)
        self.rows = RowWatch(self.kc)
        spec = os.path.join(self.top, "fleet.json")
        with open(spec, "w") as f:
            json.dump({"url": self.srv.base_url, "token": TOKEN, "admin": ADMIN_TOKEN, "pool": "worker", "names": self.names,
                       "update_s": self.update_s}, f)
        self.fleet_log = open(os.path.join(self.top, "fleet.log"), "wb")
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, FLEET, spec], stdout=subprocess.PIPE, stderr=self.fleet_log,
                                     env=env, cwd=REPO, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        started = time.monotonic()
        self.wait(self.ready.is_set, "every light agent registered and Done on its first config", 600)
        self.setup_s = time.monotonic() - started
        self.wait(lambda: self.pool_status().get("updatedMachineCount") == self.n,
                  f"the pool's status counting all {self.n} nodes updated", 300)
        self.quiet()
        say(f"n={self.n}: server up, {self.n} light agents Done on their first config in {self.setup_s:.0f} s")
        return self

    def quiet(self, still: float = 3.0, timeout: float = 300.0) -> None:
        """Until the server has written everything back: no write to the API for ``still`` seconds
        but the replicas' heartbeats (Leases, every 5 s) and the pool status of the 1 s loop."""
        def writes() -> float:
            return sum(v for k, v in self.writes().items() if not k.startswith(("leases ", "machineconfigpools/")))
        last, since = writes(), time.monotonic()
        deadline = since + timeout
        while time.monotonic() - since < still:
            if time.monotonic() > deadline:
                raise RuntimeError(f"n={self.n}: the server kept writing to the API for {timeout:.0f} s")
            time.sleep(0.5)
            now = writes()
            if now != last:
                last, since = now, time.monotonic()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            event = json.loads(line)
            if "ready" in event:
                self.fleet_ready = event
                self.ready.set()
                continue
            with self.lock:
                self.events.append(event)

    def wait(self, check, what: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = check()
            if got:
                return got
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"n={self.n}: the light agents exited ({self.proc.returncode}); see {self.top}")
            time.sleep(0.2)
        raise RuntimeError(f"n={self.n}: not seen in {timeout:.0f} s: {what}")

    def snapshot(self) -> List[Dict[str, Any]]:
        with self.lock:
            return list(self.events)

    def done_on(self, config: str) -> Dict[str, float]:
        return {e["n"]: e["t"] for e in self.snapshot() if e["e"] == "done" and e.get("c") == config}

    def pool_status(self) -> Dict[str, Any]:
        r = self.kc.get(MCO + "/machineconfigpools/worker")
        return (r.json().get("status") or {}) if r.status_code == 200 else {}

    def pool_view(self) -> Dict[str, Any]:
        """Our API's view of the pool (status.rollout: who updates, waits, is deferred and why)."""
        r = self.srv.session().get(self.srv.url("/api/v1/pools/worker"), timeout=60)
        r.raise_for_status()
        return r.json()

    def writes(self) -> Dict[str, float]:
        r = self.kc.get("/metrics")
        r.raise_for_status()
        return write_counts(r.text)

    def cpu(self) -> Dict[str, float]:
        return {"server": cpu_seconds(self.srv.proc.pid, children=True),
                "apiserver+etcd": sum(cpu_seconds(self.kc.procs[p].pid) for p in ("kube-apiserver", "etcd")),
                "agents": cpu_seconds(self.proc.pid)}  # type: ignore[union-attr]

    def post(self, name: str, path: str, text: str) -> None:
        r = self.kc.session().post(self.kc.url + MCO + "/machineconfigs", json=machine_config(name, path, text),
                                   timeout=30)
        if r.status_code != 201:
            raise RuntimeError(f"creating MachineConfig {name}: {r.status_code} {r.text[:300]}")

    def create(self, collection: str, obj: Dict[str, Any]) -> None:
        r = self.kc.session().post(self.kc.url + collection, json=obj, timeout=30)
        if r.status_code != 201:
            raise RuntimeError(f"creating {obj['kind']} {obj['metadata']['name']}: {r.status_code} {r.text[:300]}")

    def patch_status(self, path: str, body: Dict[str, Any]) -> None:
        r = self.kc.session().patch(self.kc.url + path + "/status", data=json.dumps(body), timeout=30,
                                    headers={"Content-Type": "application/merge-patch+json"})
        if r.status_code != 200:
            raise RuntimeError(f"PATCH {path}/status: {r.status_code} {r.text[:300]}")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(15)
        if self.rows is not None:
            self.rows.close()
        if self.srv is not None:
            self.srv.stop()
            if self.srv._data_dir_cleanup is not None:
                self.srv._data_dir_cleanup()
        self.kc.stop()


# -- one rollout ----------------------------------------------------------------------------------------

class ViewSampler(threading.Thread):
    """Our API's pool view every few seconds during a rollout: how many nodes it shows updating and
    unavailable, and when the pinned node was first named in ``status.rollout.deferred``, and why."""

    def __init__(self, fleet: Fleet, node: str, every: float = 3.0):
        super().__init__(daemon=True)
        self.fleet, self.node, self.every = fleet, node, every
        self.first: Optional[Dict[str, Any]] = None
        self.samples = 0
        self.series: List[Tuple[float, int, int]] = []  # (time, Updating, unavailableMachineCount)
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            try:
                status = self.fleet.pool_view()["status"]
            except Exception:  # a sample missed: the next one counts
                continue
            rollout = status.get("rollout") or {}
            self.samples += 1
            self.series.append((time.time(), int((rollout.get("counts") or {}).get("Updating", 0)),
                                int(status.get("unavailableMachineCount") or 0)))
            if self.first is None and self.node in (rollout.get("deferred") or []):
                self.first = {"t": time.time(), "reason": (rollout.get("reasons") or {}).get(self.node, ""),
                              "counts": rollout.get("counts")}

    def close(self) -> None:
        self.stopping.set()
        self.join(30)


def rollout(fleet: Fleet, name: str, path: str, pinned: bool) -> Dict[str, Any]:
    """POST one MachineConfig and follow the rollout until every node is Done on the new target
    (``pinned``: the others first, then the pinned node once its budget is gone), and the server
    wrote the last node's state back; what it took."""
    rows = fleet.rows
    assert rows is not None
    others = [n for n in fleet.names if not (pinned and n == fleet.pinned)]
    ideal = ideal_seconds(len(others), fleet.max_unavailable, fleet.update_s)
    before, cpu0, old = fleet.writes(), fleet.cpu(), rows.target()
    t0 = time.time()
    fleet.post(name, path, name)
    target = fleet.wait(lambda: (lambda t: t if t != old else "")(rows.target()), "the pool's new target", 120)
    say(f"n={fleet.n}: {name} POSTed, the pool targets {target} (ideal {ideal:.0f} s)")
    sampler = ViewSampler(fleet, fleet.pinned)
    try:
        fleet.wait(lambda: set(others) <= set(fleet.done_on(target)), f"{len(others)} nodes Done on {target}",
                   4 * ideal + 300)
    finally:
        sampler.close()
    t_others = max(fleet.done_on(target)[n] for n in others)
    say(f"n={fleet.n}: {len(others)} nodes Done on {target} {t_others - t0:.1f} s after the POST")
    ours: Dict[str, int] = {"machineconfigs POST 201": 1}
    out: Dict[str, Any] = {"nodes": fleet.n, "counted": len(others), "maxUnavailable": fleet.max_unavailable,
                           "update_s": fleet.update_s, "target": target, "ideal_s": ideal,
                           "wall_s": t_others - t0}
    if pinned:
        out["pinned"] = pinned_outcome(fleet, target, sampler, before, t_others)
        ours.update(unpin(fleet.kc))
        fleet.pinned_pod = False
        unblocked = time.time()
        done = fleet.wait(lambda: fleet.done_on(target).get(fleet.pinned), "the pinned node Done once unblocked", 300)
        out["pinned"]["done_after_unblock_s"] = done - unblocked
    return close_out(fleet, out, t0, before, cpu0, sampler, ours)


def close_out(fleet: Fleet, out: Dict[str, Any], t0: float, before: Dict[str, float], cpu0: Dict[str, float],
              sampler: ViewSampler, ours: Dict[str, int]) -> Dict[str, Any]:
    """Once every node is Done on ``out["target"]``: the pool's status counting them all, the
    server's last writes, then the rollout's figures from ``t0``, less the benchmark's own writes."""
    rows, target = fleet.rows, out["target"]
    assert rows is not None
    fleet.wait(lambda: (lambda st: st.get("updatedMachineCount") == fleet.n and
                        (st.get("configuration") or {}).get("name") == target)(fleet.pool_status()),
               "the pool's status: every node updated", 300)
    fleet.quiet()  # the last nodes' Node and MachineConfigNode writes
    after, cpu1 = fleet.writes(), fleet.cpu()
    out.update(figures(fleet, rows, target, t0, writes_between(before, after, ours)))
    shown = [(u, un) for t, u, un in sampler.series if t <= t0 + out["wall_s"]]
    out["view"] = {"samples": len(shown), "updating_mean": statistics.mean(u for u, _ in shown) if shown else None,
                   "unavailable_mean": statistics.mean(un for _, un in shown) if shown else None}
    out["cpu_s"] = {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0}
    out["window_s"] = time.time() - t0
    return out


def layered_rollout(fleet: Fleet, name: str, path: str) -> Dict[str, Any]:
    """The worker pool opted in to image mode (a MachineOSConfig, no image yet), a MachineConfig
    POSTed: the server must target nobody while the new rendered config's image is not built. Then
    the build succeeds (the MachineOSConfig's currentImagePullSpec, a succeeded MachineOSBuild):
    timed from that moment until every node is Done on the config with the build's image (its
    report's currentImage and desiredImage). A rollout with no Done for ``stall_limit`` fails
    loudly, naming the pool's view: before issue 52 it stopped after its first wave."""
    rows = fleet.rows
    assert rows is not None
    if fleet.pinned_pod:
        raise RuntimeError(f"n={fleet.n}: the pinned pod and its budget are still there (the drain change unpins them)")
    ideal = ideal_seconds(fleet.n, fleet.max_unavailable, fleet.update_s)
    ours: Dict[str, int] = {"machineosconfigs POST 201": 1, "machineconfigs POST 201": 1,
                            "machineosconfigs/status PATCH 200": 1, "machineosbuilds POST 201": 1,
                            "machineosbuilds/status PATCH 200": 1}
    before, cpu0, old = fleet.writes(), fleet.cpu(), rows.target()
    posted = time.time()
    fleet.create(MCO + "/machineosconfigs", layered.os_config("worker"))
    # The MachineConfig only once the server reads the pool as layered: POSTed at once, its watch
    # may bring the new rendering before the MachineOSConfig's does, and the first wave is then
    # targeted without an image (as upstream's informers would; a run at 200 nodes saw 3 such nodes).
    fleet.wait(lambda: "MachineOSConfig" in str(fleet.pool_view()["status"].get("served", {}).get("reason", "")),
               "the server reads the pool as layered (its served reason names the MachineOSConfig)", 120)
    fleet.post(name, path, name)
    target = fleet.wait(lambda: (lambda t: t if t != old else "")(rows.target()), "the pool's new target", 120)
    held = fleet.wait(lambda: (lambda why: why if f"layered image of {target} is not ready" in why else "")(
        str(((fleet.pool_view()["status"].get("rollout") or {}).get("waitReason")) or "")),
        "the pool held until the image is built (its rollout's waitReason)", 120)
    early = sorted({e["n"] for e in fleet.snapshot() if e["e"] == "learned" and e.get("c") == target})
    if early:
        raise RuntimeError(f"n={fleet.n}: {len(early)} node(s) told to update to {target} before its image was built: "
                           f"{', '.join(early[:5])}")
    image = layered.image_for(target)
    fleet.patch_status(MCO + "/machineosconfigs/worker", {"status": {"currentImagePullSpec": image}})
    build = layered.os_build("worker", target)
    fleet.create(MCO + "/machineosbuilds", build)
    t0 = time.time()
    fleet.patch_status(MCO + f"/machineosbuilds/{build['metadata']['name']}", {"status": layered.build_status(image)})
    say(f"n={fleet.n}: {name} POSTed, the pool targets {target}, held ({held[:80]}...) until its build "
        f"succeeded {t0 - posted:.1f} s after the POST (ideal {ideal:.0f} s)")
    sampler = ViewSampler(fleet, fleet.pinned)
    try:
        wait_every_done(fleet, target, t0)
    finally:
        sampler.close()
    events = [e for e in fleet.snapshot() if e["t"] >= posted]
    wrong = layered.problems(events, fleet.names, target, image)
    if wrong:
        raise RuntimeError(f"n={fleet.n}: the layered rollout to {target} went wrong: " + "; ".join(wrong))
    t_all = max(fleet.done_on(target).values())
    say(f"n={fleet.n}: {fleet.n} nodes Done on {target} with its image {t_all - t0:.1f} s after the build")
    out: Dict[str, Any] = {"nodes": fleet.n, "counted": fleet.n, "maxUnavailable": fleet.max_unavailable,
                           "update_s": fleet.update_s, "target": target, "image": image, "ideal_s": ideal,
                           "wall_s": t_all - t0, "post_to_build_s": t0 - posted, "held": held,
                           "plans": layered.plans(events, target)}
    return close_out(fleet, out, t0, before, cpu0, sampler, ours)


def wait_every_done(fleet: Fleet, target: str, since: float) -> None:
    """Until every node sent Done on ``target``; a RuntimeError naming how far it got and the
    pool's own view of its rollout when no node's Done came for ``stall_limit`` seconds."""
    limit = layered.stall_limit(fleet.update_s)
    while True:
        dones = fleet.done_on(target)
        if len(dones) >= fleet.n:
            return
        quiet = layered.stalled_for(list(dones.values()), since, time.time())
        if quiet > limit:
            rollout_view = (fleet.pool_view()["status"].get("rollout") or {})
            view = {k: rollout_view.get(k) for k in ("counts", "waitReason", "halted") if rollout_view.get(k)}
            raise RuntimeError(
                f"n={fleet.n}: THE LAYERED ROLLOUT STOPPED: {len(dones)} of {fleet.n} nodes Done on {target}, "
                f"none for {quiet:.0f} s (issue 52: a node Done without the desiredImage it was targeted to "
                f"was a candidate again, and the first wave kept maxUnavailable); the pool's view: "
                f"{json.dumps(view)[:1500]}")
        if fleet.proc is not None and fleet.proc.poll() is not None:
            raise RuntimeError(f"n={fleet.n}: the light agents exited ({fleet.proc.returncode}); see {fleet.top}")
        time.sleep(0.5)


def pinned_outcome(fleet: Fleet, target: str, sampler: Optional[ViewSampler], before: Dict[str, float],
                   t_others: float) -> Dict[str, Any]:
    """What became of the pinned node while the others updated: deferred (when, why, named in the
    pool's status), and its pod still there (no eviction granted)."""
    rows = fleet.rows
    assert rows is not None
    events = [e for e in fleet.snapshot() if e["n"] == fleet.pinned and e.get("c") == target]
    learned = next((e["t"] for e in events if e["e"] == "learned"), None)
    deferred = next((e for e in events if e["e"] == "deferred"), None)
    pod = fleet.kc.get(f"/api/v1/namespaces/{PINNED_NS}/pods/app")
    evictions = {k: v for k, v in writes_between(before, fleet.writes()).items() if k.startswith("pods/eviction")}
    named = sampler.first if sampler is not None else None
    return {"node": fleet.pinned,
            "deferred_after_s": (deferred["t"] - learned) if deferred and learned else None,
            "deferred_answer": deferred.get("why") if deferred else None,
            "deferred_in_row": rows.deferred.get(fleet.pinned, (None, ""))[1],
            "named_in_status": named is not None, "named_reason": (named or {}).get("reason", ""),
            "named_counts": (named or {}).get("counts"), "view_samples": sampler.samples if sampler else 0,
            "pod_kept": pod.status_code == 200 and not pod.json()["metadata"].get("deletionTimestamp"),
            "evictions": evictions, "others_done_at_s": t_others}


def drain_refusals(events: List[Dict[str, Any]], target: str) -> Dict[str, Any]:
    """The drain asks refused a slot (pure): how many, how many told to wait 10 s or more (the
    lease's Retry-After, up to 30 s: issue 53's waits on a stale Node cache), the longest wait."""
    waits = [float(e.get("wait") or 0) for e in events if e["e"] == "refused" and e.get("c") == target]
    return {"n": len(waits), "long": sum(1 for w in waits if w >= 10), "max_s": max(waits, default=0.0)}


def conflicts(writes: Dict[str, int]) -> int:
    """The writes the API server refused as conflicting (pure): 409 Conflict, and 422 (a JSON
    patch whose ``test`` failed: the server's preconditions on the taints and MCN conditions)."""
    return sum(n for key, n in writes.items() if key.endswith((" 409", " 422")))


def figures(fleet: Fleet, rows: RowWatch, target: str, t0: float, writes: Dict[str, int]) -> Dict[str, Any]:
    """The rollout's figures from the agents' events, the pool row's versions and the API's counts."""
    events = [e for e in fleet.snapshot() if e["t"] >= t0]
    targeted = {k: v for k, v in rows.snapshot().items() if k[1] == target}
    spans = spans_of(events, target)
    first = min((at for ats in targeted.values() for at in ats), default=t0)
    learned = [e["t"] for e in events if e["e"] == "learned" and e.get("c") == target]
    total = sum(writes.values())
    told = {e["n"]: e["t"] for e in events if e["e"] == "learned" and e.get("c") == target}
    working = {e["n"]: e["t"] for e in events if e["e"] == "working" and e.get("c") == target}
    return {"started_s": quantiles([working[n] - told[n] for n in working if n in told]),
            "events": events if os.environ.get("BENCH_ROLLOUT_EVENTS") else [],
            "target_s": next((t for t, name in rows.targets if name == target), t0) - t0,
            "first_targeted_s": first - t0, "first_learned_s": (min(learned) - t0) if learned else None,
            "peak": peak_concurrency(spans.values()), "spans": len(spans), "mean_updating": mean_concurrency(spans.values()),
            "learn_s": quantiles(learn_delays(targeted, events, target)),
            "handover_s": quantiles(handovers(targeted, events, target, first)),
            "targeted": sum(len(v) for v in targeted.values()),
            "refused": drain_refusals(events, target),
            "retries": sum(1 for e in events if e["e"] == "retry"),
            "retry_examples": [e["why"] for e in events if e["e"] == "retry"][:5],
            "writes": writes, "writes_by_resource": by_resource(writes), "writes_total": total,
            "writes_per_node": total / float(fleet.n), "row_versions": rows.versions, "row_relists": rows.relists}


# -- the benchmark ---------------------------------------------------------------------------------------

CHANGES = ("none", "drain", "layered")


def measure(sizes: Sequence[int], update_s: float, rounds: int = 1,
            changes: Sequence[str] = CHANGES) -> Dict[str, Any]:
    """Every size's control plane, server and agents side by side; the changes interleaved (the
    layered one last: it leaves the worker pool in image mode)."""
    top = tempfile.mkdtemp(prefix="bench-rollout-")
    fleets: List[Fleet] = []
    started = time.monotonic()
    load = os.getloadavg()
    try:
        for n in sizes:
            fleets.append(Fleet(top, n, update_s, pinned_pod="drain" in changes))
        for f in fleets:
            f.start()
        runs: Dict[str, Dict[str, Any]] = {str(f.n): {"no_drain": []} for f in fleets}
        for r in range(rounds if "none" in changes else 0):
            for f in (fleets if r % 2 == 0 else fleets[::-1]):
                runs[str(f.n)]["no_drain"].append(
                    rollout(f, f"99-bench-none-{r}", f"{NONE_POLICY_DIR}/bench-{r}.yml", pinned=False))
        for f in fleets if "drain" in changes else []:
            runs[str(f.n)]["pinned"] = rollout(f, "99-bench-drain", "/etc/bench-rollout/drain.conf", pinned=True)
        for f in fleets if "layered" in changes else []:
            runs[str(f.n)]["layered"] = layered_rollout(f, "99-bench-layered", "/etc/bench-rollout/layered.conf")
        setup = {str(f.n): {"create_nodes_per_s": f.create_rate, "agents_ready_s": f.setup_s,
                            "agents": f.fleet_ready} for f in fleets}
        return {"sizes": list(sizes), "update_s": update_s, "rounds": rounds, "maxUnavailable": MAX_UNAVAILABLE,
                "defer_after_s": DEFER_AFTER, "runs": runs, "setup": setup, "load": [load, os.getloadavg()],
                "seconds": time.monotonic() - started}
    finally:
        for f in fleets:
            f.close()
        shutil.rmtree(top, ignore_errors=True)


def _mean(run: Dict[str, Any]) -> str:
    """Nodes updating on average over the rollout: the agents' spans, and the server's view."""
    view = (run.get("view") or {}).get("updating_mean")
    return f"{run.get('mean_updating', 0):.0f}" + (f" ({view:.0f} in the pool view)" if view is not None else "")


def _learn_note(run: Dict[str, Any]) -> str:
    learn, hand = run["learn_s"], run["handover_s"]
    text = f"p90 {learn.get('p90', 0):.2f} s, max {learn.get('max', 0):.2f} s over {learn['n']} targetings"
    if hand.get("n"):
        text += f"; a Done sent to the next node targeted: median {hand['median']:.2f} s, p90 {hand['p90']:.2f} s"
    return text


def _writes_note(run: Dict[str, Any]) -> str:
    top = ", ".join(f"{k} {v / run['nodes']:.1f}" for k, v in list(run["writes_by_resource"].items())[:6])
    refused = run.get("refused") or {}
    asks = (f"; drain asks refused {refused['n']}, {refused['long']} told to wait 10 s or more (longest "
            f"{refused['max_s']:.0f} s)" if refused.get("n") else "")
    return (f"{run['writes_total']} write requests over the rollout (the API's own count): {top} per node; "
            f"{conflicts(run.get('writes') or {}) / run['nodes']:.2f} conflicts (409, 422) per node{asks}")


def rows_from(doc: Dict[str, Any]) -> List[Row]:
    """The table's rows of whichever changes ran (``runs``: no_drain, pinned, layered by size)."""
    rows: List[Row] = []
    for size in doc["sizes"]:
        runs = doc["runs"][str(size)]
        plain, pinned, lay = runs.get("no_drain") or [], runs.get("pinned"), runs.get("layered")
        whole = plain + ([lay] if lay else [])  # the changes every node takes: one ideal
        floor = ""
        if whole:
            m, t = whole[0]["maxUnavailable"], whole[0]["update_s"]
            floor = f"ideal, {size} nodes: ceil({size}/{m}) x {t:g} s"
            rows.append(Row(GROUP, floor, whole[0]["ideal_s"], is_floor=True,
                            note=f"maxUnavailable {doc['maxUnavailable']} = {m}; a fixed {t:g} s per update"))
        if plain:
            rows.extend(_plain_rows(size, plain, floor))
        ran = plain + [r for r in (pinned, lay) if r]
        if ran:
            m = ran[0]["maxUnavailable"]
            peak = max(r["peak"] for r in ran)
            means = ", ".join(f"{_mean(r)} {what}" for r, what in ((plain[-1] if plain else None, "with no drain"),
                                                                   (pinned, "with drains"), (lay, "layered")) if r)
            rows.append(Row(GROUP, f"{size} nodes: peak updating at once", float(peak), unit="nodes",
                            note=f"maxUnavailable {m}: {'never above it' if peak <= m else 'ABOVE IT'} (every change "
                                 f"run; exact, from the agents' spans); on average {means}"))
        if plain:
            last = plain[-1]
            rows.append(Row(GROUP, f"{size} nodes: targeted -> the node's fetch returns", last["learn_s"].get("median"),
                            note=_learn_note(last)))
        if pinned:
            rows.extend(_pinned_rows(size, pinned))
        if lay:
            rows.extend(_layered_rows(size, lay, floor))
    return rows


def _cpu_note(run: Dict[str, Any]) -> str:
    cpu = run["cpu_s"]
    return (f"server CPU {cpu['server']:.0f} s, API server + etcd {cpu['apiserver+etcd']:.0f} s, "
            f"light agents {cpu['agents']:.0f} s")


def _plain_rows(size: int, plain: List[Dict[str, Any]], floor: str) -> List[Row]:
    walls = [r["wall_s"] for r in plain]
    last = plain[-1]
    return [Row(GROUP, f"{size} nodes, no drain: every node Done", statistics.median(walls), floor=floor,
                samples=walls if len(walls) > 1 else [],
                note=f"from the MachineConfig's POST; the new target {last['target_s']:.1f} s after it, "
                     f"the first node told at {last['first_learned_s']:.1f} s; " + _cpu_note(last)),
            Row(GROUP, f"{size} nodes, no drain: API writes per node", last["writes_per_node"], unit="writes",
                note=_writes_note(last))]


def _plans_note(run: Dict[str, Any]) -> str:
    """What node-agent's planner made of the move, from the agents' turns (absent: not recorded)."""
    p = run.get("plans")
    return f" ({p['drain']} of {p['told']} turns drained, {p['reboot']} rebooted)" if p else ""


def _layered_rows(size: int, run: Dict[str, Any], floor: str) -> List[Row]:
    first = run["first_learned_s"]
    return [Row(GROUP, f"{size} nodes, layered (config + image), drain + reboot: every node Done", run["wall_s"],
                floor=floor,
                note=f"from the MachineOSBuild's success (the MachineConfig POSTed {run['post_to_build_s']:.1f} s "
                     f"before it: nobody targeted while its image was not built); every node Done with "
                     f"currentImage = desiredImage = the build's image{_plans_note(run)}; the first node told at "
                     + (f"{first:.1f} s; " if first is not None else "(never); ") + _cpu_note(run)),
            Row(GROUP, f"{size} nodes, layered: API writes per node", run["writes_per_node"], unit="writes",
                note=_writes_note(run) + " (from the MachineConfig's POST; the drains' cordons and uncordons included)")]


def _pinned_rows(size: int, run: Dict[str, Any]) -> List[Row]:
    p = run["pinned"]
    floor = f"ideal, {run['counted']} nodes: ceil({run['counted']}/{run['maxUnavailable']}) x {run['update_s']:g} s"
    refused = sum(v for k, v in p["evictions"].items() if " 429" in k)
    granted = sum(v for k, v in p["evictions"].items() if " 201" in k)
    named = (f"named in status.rollout.deferred ({p['named_reason'][:120]})" if p["named_in_status"]
             else "NOT named in status.rollout.deferred")
    deferred = p["deferred_after_s"]
    return [Row(GROUP, floor, run["ideal_s"], is_floor=True, note="the pinned node left out"),
            Row(GROUP, f"{size} nodes, drain + reboot, 1 pinned by a PDB: the {run['counted']} others Done",
                run["wall_s"], floor=floor,
                note=(f"pinned node deferred {deferred:.1f} s after it was told its turn" if deferred is not None
                      else "pinned node NEVER deferred") + f", {named}; its pod kept: {p['pod_kept']} "
                     f"({granted} evictions granted, {refused} refused with 429); once the budget went it was "
                     f"Done {p['done_after_unblock_s']:.1f} s later"),
            Row(GROUP, f"{size} nodes, drain + reboot: API writes per node", run["writes_per_node"], unit="writes",
                note=_writes_note(run) + " (the drains' cordons, evictions and uncordons included)")]


def run(quick: bool = False) -> List[Row]:
    from tests.helpers.etcd_cluster import ETCD
    from tests.helpers.kube_cluster import KUBECTL, find_kube_bin

    if not (find_kube_bin() and os.access(ETCD, os.X_OK) and os.access(KUBECTL, os.X_OK)):
        return [Row(GROUP, "rollout", None, note="kube-apiserver not built (make kube-bin), or etcd/kubectl missing")]
    doc = measure(QUICK_SIZES if quick else SIZES, QUICK_UPDATE_S if quick else UPDATE_S)
    save_json("rollout.json", doc)
    return rows_from(doc)


def main() -> int:
    from benchmarks.common import table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{' and '.join(map(str, QUICK_SIZES))} nodes, "
                                                         f"{QUICK_UPDATE_S:g} s per update")
    ap.add_argument("--sizes", type=int, nargs="+", help=f"fleet sizes (default {' '.join(map(str, SIZES))})")
    ap.add_argument("--update-seconds", type=float, help=f"the fixed time of one update (default {UPDATE_S:g})")
    ap.add_argument("--rounds", type=int, default=1, help="rollouts of the change with no drain per size (default 1)")
    ap.add_argument("--changes", nargs="+", choices=CHANGES, default=list(CHANGES),
                    help="which changes to roll out: none (no drain), drain (drain + reboot, 1 node pinned), "
                         "layered (a MachineOSConfig and a succeeded build: config + image; last, it leaves the "
                         "pool in image mode); default all three")
    ap.add_argument("--json", metavar="FILE", help="also write the measurements to FILE")
    args = ap.parse_args()
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    update_s = args.update_seconds or (QUICK_UPDATE_S if args.quick else UPDATE_S)
    load = os.getloadavg()[0]
    doc = measure(sizes, update_s, args.rounds, args.changes)
    if set(args.changes) == set(CHANGES):  # build/bench/rollout.json: a whole run only
        save_json("rollout.json", doc)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(table(rows_from(doc)))
    print(f"\n{doc['seconds']:.0f} s in all; load average (1 min) {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
