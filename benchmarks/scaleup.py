"""Scale-up during a rollout (issue 7): N new nodes first-boot while a pool config and a layered
OS image roll out; per node, what it was served, when, its reboots and its pool over time.

    .venv/bin/python benchmarks/scaleup.py [--nodes 50] [--parallel 8] [--json]

Exit 0 when every invariant holds, 1 when one is violated, 2 when the scenario could not be
carried out (a step failed or timed out; the message says which). Real parts: node-config-server
(gunicorn, TLS, bearer token) on a copy of examples/state, and ``node-agent`` processes on
scratch node roots (tests/helpers/noderoot.py).

The scenario:

1. *Existing members*: ``--existing`` nodes per pool (worker, infra) first-boot and are brought
   to Done on the initial config (infra: on its layered image, which members get by naming
   themselves; new nodes get it once a member runs it).
2. *Phase A*: a first share of the new nodes joins; nothing has changed yet.
3. *Rollout*: 00-worker (selected by both pools) gets a file no disruption policy covers, so
   both pools get a new target that needs a reboot; then infra's MachineOSConfig gets a new
   ``currentImagePullSpec`` and a succeeded MachineOSBuild for infra's new rendered config: a
   new layered image exists, run by no node. *Phase B* nodes are queued at the same moment and
   join while the rollout goes on.
4. *Proof*: in each pool the first existing member runs ``node-agent update --once`` (it names
   itself, gets the target, stages it, reports Working with a reboot pending), is rebooted
   (simulated, below), and runs ``update --once`` again, which reports Done on what it now
   boots. That Done report proves the target (and, for infra, the image). The other members
   follow. *Phase C*, the rest of the new nodes, is queued once every pool is proven.
5. Every new node, after its first boot, is rebooted (simulated) and ``node-agent firstboot``
   runs again, as the unit would if its done-stamp were missing: it must do nothing.

What is simulated (the roots are offline; nothing else is): a *reboot* of a root applies what
the agent staged there, i.e. ``var/lib/node-agent/pending-os.json``: its ``osImageURL`` becomes
the aleph file's ``container-image.image`` (what ``planning.booted_os`` reads offline), its
kernel arguments are appended to / deleted from ``proc/cmdline``, ``proc/sys/kernel/random/
boot_id`` gets a new id, and pending-os.json is removed (the staged deployment is now the
booted one). Nothing else of the root changes.

Invariants:

1. no wrong-pool moment: a poller samples ``GET /api/v1/pools`` all along, and no node is ever
   listed under a pool other than its own; at the end the node's kubelet labels
   (``CUSTOM_KUBELET_LABELS``), its node annotations (``.../pool``) and the server's registry
   (``GET /api/v1/nodes/<n>``) all name its pool;
2. no node served an unproven config or image: the target of a pool is proven when the server
   has a member's Done report on it (with the new layered image for infra). That report cannot
   exist before the proving ``update --once`` process started (``provenAfter``), so a node
   whose fetch stage *ended* before then must have been served the old config and not the new
   image; timestamps of both sides come from this machine's clock. Independently, no poller
   sample may show the server deciding to serve the new target to new nodes before then;
3. at most one reboot per node at first boot: ``rebootPending`` of the first run, plus any
   reboot a second ``firstboot`` run asks for (it must say "already done").
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.helpers.certs import make_tls  # noqa: E402
from tests.helpers.noderoot import make_node_root  # noqa: E402
from tests.helpers.server_proc import ServerProcess  # noqa: E402

EXAMPLES = os.path.join(REPO, "examples", "state")
TOKEN = "scaleup-token"
ANN = "machineconfiguration.openshift.io/"
POOLS = ("worker", "infra")
ROLE_LABEL = {"worker": "node-role.kubernetes.io/worker", "infra": "node-role.kubernetes.io/infra"}
NEW_IMAGE = "registry.example.com/infra/os-image@sha256:" + "9d3f6a1c" * 8
STATE = "var/lib/node-agent"
ROLLOUT_FILE = ("      - path: /etc/scaleup/rollout.conf\n        mode: 420\n        overwrite: true\n"
                "        contents:\n          source: data:,rollout%3D2%0A\n")


# -- node roots -------------------------------------------------------------------------------

def _read_json(path: str) -> Optional[Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _write_atomic(path: str, text: str) -> None:
    # the project's own atomic write (the server polls the state directory while we write)
    from agent.host.files import atomic_write

    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, text.encode("utf-8"))


def simulate_reboot(root: str) -> Dict[str, Any]:
    """Boot the root into what the agent staged (see the module docstring); returns what changed."""
    pending = _read_json(os.path.join(root, STATE, "pending-os.json")) or {}
    image = pending.get("osImageURL") or ""
    aleph_path = os.path.join(root, "sysroot/.aleph-version.json")
    if image:
        aleph = _read_json(aleph_path) or {}
        aleph["container-image"] = {"image": image, "imgid": "sha256:" + uuid.uuid4().hex * 2}
        _write_atomic(aleph_path, json.dumps(aleph))
    kargs = pending.get("kernelArguments") or {}
    try:
        with open(os.path.join(root, "proc/cmdline"), encoding="utf-8") as f:
            cmdline = f.read().split()
    except FileNotFoundError:
        cmdline = []
    cmdline = [a for a in cmdline if a not in (kargs.get("delete") or [])]
    cmdline += [a for a in (kargs.get("append") or []) if a not in cmdline]
    os.makedirs(os.path.join(root, "proc/sys/kernel/random"), exist_ok=True)
    _write_atomic(os.path.join(root, "proc/cmdline"), " ".join(cmdline) + "\n")
    _write_atomic(os.path.join(root, "proc/sys/kernel/random/boot_id"), str(uuid.uuid4()) + "\n")
    if pending:
        os.unlink(os.path.join(root, STATE, "pending-os.json"))
    return {"image": image, "kernelArguments": kargs}


def agent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def _must(proc: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if proc.returncode != 0:
        raise RuntimeError(f"{what} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return proc


def _epoch(stamp: str) -> float:
    when = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    return when.replace(tzinfo=datetime.timezone.utc).timestamp()


def _pool_of_rendered(name: str) -> str:
    return name[len("rendered-"):].rsplit("-", 1)[0] if name.startswith("rendered-") and name.count("-") >= 2 else ""


# -- what is recorded per node ------------------------------------------------------------------

@dataclass
class NodeRecord:
    name: str
    pool: str  # the pool it boots into (its pointer's /config/<pool>)
    phase: str
    launched: float = 0.0
    ended: float = 0.0
    exit_code: Optional[int] = None
    error: str = ""
    config: str = ""  # status-firstboot.json config
    image: str = ""  # the served osImageURL (current-config.json)
    staged_image: str = ""  # what its first boot staged (pending-os.json)
    fetch_start: float = 0.0
    fetch_end: float = 0.0
    reboots: int = 0
    firstboot_runs_with_work: int = 0
    pool_labels: str = ""
    pool_annotations: str = ""
    pool_registry: str = ""
    records_agree: bool = True
    disagreement: str = ""


def read_node(rec: NodeRecord, root: str) -> None:
    """Fill ``rec`` from the node's own records."""
    status = _read_json(os.path.join(root, STATE, "status-firstboot.json")) or {}
    rec.config = status.get("config") or ""
    fetch = next((s for s in status.get("stages", []) if s.get("name") == "fetch"), None)
    if fetch:
        rec.fetch_start = _epoch(fetch["startedAt"])
        rec.fetch_end = rec.fetch_start + float(fetch.get("seconds") or 0.0)
    rec.reboots = 1 if status.get("rebootPending") else 0
    current = _read_json(os.path.join(root, STATE, "current-config.json")) or {}
    rec.image = current.get("osImageURL") or ""
    rec.staged_image = (_read_json(os.path.join(root, STATE, "pending-os.json")) or {}).get("osImageURL") or ""
    ann = _read_json(os.path.join(root, "etc/machine-config-daemon/node-annotations.json")) or {}
    rec.pool_annotations = ann.get(ANN + "pool") or _pool_of_rendered(ann.get(ANN + "firstPivotConfig", ""))
    encapsulated = _read_json(os.path.join(root, "etc/ignition-machine-config-encapsulated.json")) or {}
    with open(os.path.join(root, "etc/kubernetes/kubelet-env"), encoding="utf-8") as f:
        env = f.read()
    labels = [ln.partition("=")[2] for ln in env.splitlines() if ln.startswith("CUSTOM_KUBELET_LABELS=")]
    keys = {item.partition("=")[0] for item in ",".join(labels).split(",") if item}
    roles = [p for p, key in ROLE_LABEL.items() if key in keys]
    rec.pool_labels = roles[0] if len(roles) == 1 else ",".join(roles) or "(none)"
    problems = []
    if ann.get(ANN + "firstPivotConfig") != rec.config or current.get("name") != rec.config:
        problems.append(f"config: status {rec.config}, annotations {ann.get(ANN + 'firstPivotConfig')}, "
                        f"current-config {current.get('name')}")
    if ((encapsulated.get("spec") or {}).get("osImageURL") or "") != rec.image:
        problems.append(f"image: encapsulated {(encapsulated.get('spec') or {}).get('osImageURL')}, "
                        f"current-config {rec.image}")
    rec.records_agree = not problems
    rec.disagreement = "; ".join(problems)


# -- the poller ---------------------------------------------------------------------------------

class Poller(threading.Thread):
    """Samples GET /api/v1/pools: where every node is listed, and what new nodes are served."""

    def __init__(self, srv: ServerProcess, intended: Dict[str, str], interval: float = 0.15):
        super().__init__(daemon=True)
        self.srv = srv
        self.intended = intended
        self.interval = interval
        self.stop_event = threading.Event()
        self.samples = 0
        self.errors: List[str] = []
        self.wrong: List[Dict[str, Any]] = []  # {"t", "node", "listed", "intended"}
        self.served: Dict[str, List[Tuple[float, str, str]]] = {p: [] for p in POOLS}  # (t_before, config, image)

    def run(self) -> None:
        session = self.srv.session()
        while not self.stop_event.is_set():
            self.sample(session)
            self.stop_event.wait(self.interval)
        self.sample(session)

    def sample(self, session) -> None:
        before = time.time()
        try:
            r = session.get(self.srv.url("/api/v1/pools"), timeout=30)
            r.raise_for_status()
            items = r.json()["items"]
        except Exception as exc:  # a failed sample is reported, not fatal to the run
            self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            return
        self.samples += 1
        for item in items:
            pool = item["metadata"]["name"]
            served = item["status"].get("served") or {}
            if pool in self.served:
                self.served[pool].append((before, served.get("config", ""), served.get("image", "")))
            for node in item["status"].get("nodes") or {}:
                want = self.intended.get(node)
                if want is not None and want != pool:
                    self.wrong.append({"t": before, "node": node, "listed": pool, "intended": want})

    def stop(self) -> None:
        self.stop_event.set()
        self.join(60)


# -- the scenario ---------------------------------------------------------------------------------

@dataclass
class PoolRollout:
    old_config: str = ""
    old_base: str = ""
    old_layered: str = ""
    new_config: str = ""
    new_image: str = ""  # the layered image of the new config (infra), or the new config's base image
    proven_after: float = 0.0  # the proving update process started: no Done report on the target before
    proven_by: float = 0.0  # it had returned: the server had the report
    prover: str = ""
    server_switched: Optional[float] = None  # first poller sample serving the new target


@dataclass
class Result:
    nodes: int
    parallel: int
    existing_per_pool: int
    wall_s: float = 0.0
    join_s: float = 0.0
    firstboots_per_s: float = 0.0
    firstboot_median_s: float = 0.0
    poller_samples: int = 0
    poller_errors: List[str] = field(default_factory=list)
    pools: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    rollout: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    invariants: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    nodes_detail: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(v["ok"] for v in self.invariants.values())


class Scenario:
    def __init__(self, workdir: str, nodes: int, parallel: int, existing: int):
        self.workdir = workdir
        self.n = nodes
        self.parallel = parallel
        self.existing = existing
        self.state = os.path.join(workdir, "state")
        self.lock = threading.Lock()
        self.records: List[NodeRecord] = []
        self.rollout = {p: PoolRollout() for p in POOLS}

    # -- helpers --
    def pools(self) -> Dict[str, Dict[str, Any]]:
        r = self.api.get(self.srv.url("/api/v1/pools"), timeout=30)
        r.raise_for_status()
        return {item["metadata"]["name"]: item for item in r.json()["items"]}

    def wait(self, what: str, predicate, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.1)

    def root(self, name: str, pool: str) -> str:
        return make_node_root(os.path.join(self.workdir, "nodes", name), self.srv.base_url, pool,
                              ca_pem=self.tls.ca_pem(), token=TOKEN, node_name=name, fetch_budget=60)

    def settle(self, root: str, name: str, budget: int = 4) -> None:
        """Reboot (simulated) and run ``update --once`` until the node has nothing pending."""
        for _ in range(budget):
            if not os.path.exists(os.path.join(root, STATE, "reboot-pending.json")) and \
                    not os.path.exists(os.path.join(root, STATE, "pending-os.json")):
                return
            simulate_reboot(root)
            _must(agent("update", "--once", "--root", root), f"update --once on {name}")
        raise RuntimeError(f"{name} still has a reboot pending after {budget} reboots")

    # -- existing members --
    def bring_up_member(self, name: str, pool: str) -> str:
        root = self.root(name, pool)
        _must(agent("firstboot", "--root", root), f"firstboot of member {name}")
        self.settle(root, name)
        # A member names itself: it gets the pool's target, with the layered image if there is one.
        _must(agent("update", "--once", "--root", root), f"update --once on {name}")
        self.settle(root, name)
        return root

    # -- new nodes --
    def join(self, rec: NodeRecord) -> NodeRecord:
        root = os.path.join(self.workdir, "nodes", rec.name)
        rec.launched = time.time()
        first = agent("firstboot", "--root", root)
        rec.ended = time.time()
        rec.exit_code = first.returncode
        if first.returncode != 0:
            rec.error = first.stderr.strip()[-400:]
            return rec
        read_node(rec, root)
        rec.firstboot_runs_with_work = 1
        if rec.reboots:
            simulate_reboot(root)
        again = agent("firstboot", "--root", root)
        if again.returncode != 0 or "already done" not in again.stdout:
            rec.firstboot_runs_with_work += 1
            status = _read_json(os.path.join(root, STATE, "status-firstboot.json")) or {}
            rec.reboots += 1 if status.get("rebootPending") else 0
        return rec

    # -- the rollout --
    def start_rollout(self) -> None:
        path = os.path.join(self.state, "machineconfigs", "00-worker.yaml")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert "      files:\n" in text
        _write_atomic(path, text.replace("      files:\n", "      files:\n" + ROLLOUT_FILE, 1))
        pools = self.wait("both pools to get a new target", lambda: (lambda v: v if all(
            v[p]["spec"]["configuration"]["name"] != self.rollout[p].old_config for p in POOLS) else None)(self.pools()))
        for p in POOLS:
            self.rollout[p].new_config = pools[p]["spec"]["configuration"]["name"]
        # The new layered image: infra's MachineOSConfig points at it, and a succeeded build of
        # infra's new rendered config exists. No node runs it yet.
        mosc_path = os.path.join(self.state, "machineosconfigs", "infra.yaml")
        with open(mosc_path, encoding="utf-8") as f:
            mosc = yaml.safe_load(f)
        mosc.setdefault("status", {})["currentImagePullSpec"] = NEW_IMAGE
        _write_atomic(mosc_path, yaml.safe_dump(mosc, sort_keys=False))
        new_infra = self.rollout["infra"].new_config
        build = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSBuild",
                 "metadata": {"name": "infra-" + new_infra.rsplit("-", 1)[1]},
                 "spec": {"machineOSConfig": {"name": "infra"}, "machineConfig": {"name": new_infra},
                          "renderedImagePushSpec": "registry.example.com/infra/os-image:latest"},
                 "status": {"conditions": [{"type": "Building", "status": "False"},
                                           {"type": "Succeeded", "status": "True"},
                                           {"type": "Failed", "status": "False"}],
                            "digestedImagePushSpec": NEW_IMAGE}}
        _write_atomic(os.path.join(self.state, "machineosbuilds", "infra-build-2.yaml"),
                      yaml.safe_dump(build, sort_keys=False))
        self.wait("the server to see the new build", lambda: self.pools()["infra"]["status"].get("layeredImage") == NEW_IMAGE)
        self.rollout["infra"].new_image = NEW_IMAGE
        self.rollout["worker"].new_image = self.rollout["worker"].old_base  # no layering in worker

    def prove_and_update_members(self, pool: str) -> None:
        roll = self.rollout[pool]
        for i, (name, root) in enumerate(zip(self.member_names[pool], self.member_roots[pool])):
            _must(agent("update", "--once", "--root", root), f"update --once on {name}")
            if not os.path.exists(os.path.join(root, STATE, "reboot-pending.json")):
                raise RuntimeError(f"{name}: the rollout's change should have asked for a reboot")
            simulate_reboot(root)
            before = time.time()
            _must(agent("update", "--once", "--root", root), f"update --once on {name} after its reboot")
            after = time.time()
            if i == 0:
                report = self.api.get(self.srv.url(f"/api/v1/nodes/{name}"), timeout=30).json()["report"]
                want_image = roll.new_image if pool == "infra" else None
                if report.get("state") != "Done" or report.get("currentConfig") != roll.new_config or \
                        (want_image and report.get("currentImage") != want_image):
                    raise RuntimeError(f"{name} did not report Done on {roll.new_config}: {report}")
                roll.proven_after, roll.proven_by, roll.prover = before, after, name

    # -- the run --
    def run(self) -> Result:
        result = Result(self.n, self.parallel, self.existing)
        t0 = time.time()
        shutil.copytree(EXAMPLES, self.state)
        self.tls = make_tls(os.path.join(self.workdir, "tls"))
        self.member_names = {p: [f"member-{p}-{i}" for i in range(self.existing)] for p in POOLS}
        new = [NodeRecord(f"new-{POOLS[i % 2]}-{i:03d}", POOLS[i % 2], "") for i in range(self.n)]
        a_end, b_end = max(2, self.n * 3 // 10), max(4, self.n * 6 // 10)
        for i, rec in enumerate(new):
            rec.phase = "A" if i < a_end else "B" if i < b_end else "C"
        intended = {r.name: r.pool for r in new}
        intended.update({n: p for p in POOLS for n in self.member_names[p]})
        with ServerProcess(self.state, tls=self.tls, token=TOKEN, workers=2, threads=8) as srv:
            self.srv = srv
            self.api = srv.session()
            for rec in new:
                self.root(rec.name, rec.pool)
            poller = Poller(srv, intended)
            poller.start()
            try:
                with ThreadPoolExecutor(max_workers=2) as ex:
                    roots = {p: ex.submit(lambda p=p: [self.bring_up_member(n, p) for n in self.member_names[p]])
                             for p in POOLS}
                    self.member_roots = {p: f.result() for p, f in roots.items()}
                pools = self.pools()
                with open(os.path.join(self.state, "machineconfigs", "00-worker.yaml"), encoding="utf-8") as f:
                    base = yaml.safe_load(f)["spec"]["osImageURL"]  # both pools' base; the rollout keeps it
                for p in POOLS:
                    roll = self.rollout[p]
                    roll.old_config = pools[p]["spec"]["configuration"]["name"]
                    roll.old_layered = pools[p]["status"].get("layeredImage") or ""
                    roll.old_base = base
                join_start = time.time()
                with ThreadPoolExecutor(max_workers=self.parallel) as pool_ex:
                    futures = [pool_ex.submit(self.join, r) for r in new if r.phase == "A"]
                    for f in futures:
                        f.result()
                    self.start_rollout()
                    futures += [pool_ex.submit(self.join, r) for r in new if r.phase == "B"]
                    with ThreadPoolExecutor(max_workers=len(POOLS)) as ex:
                        for f in [ex.submit(self.prove_and_update_members, p) for p in POOLS]:
                            f.result()
                    futures += [pool_ex.submit(self.join, r) for r in new if r.phase == "C"]
                    for f in futures:
                        f.result()
                join_end = time.time()
            finally:
                poller.stop()
            for rec in new:
                if rec.exit_code == 0:
                    got = self.api.get(self.srv.url(f"/api/v1/nodes/{rec.name}"), timeout=30)
                    rec.pool_registry = got.json().get("pool", "") if got.status_code == 200 else f"HTTP {got.status_code}"
            final_pools = self.pools()
        self.records = new
        result.wall_s = time.time() - t0
        result.join_s = join_end - join_start
        result.firstboots_per_s = self.n / result.join_s if result.join_s else 0.0
        durations = [r.ended - r.launched for r in new if r.exit_code == 0]
        result.firstboot_median_s = statistics.median(durations) if durations else 0.0
        result.poller_samples = poller.samples
        result.poller_errors = poller.errors[:5]
        for p in POOLS:
            roll = self.rollout[p]
            switched = [t for t, config, _ in poller.served[p] if config == roll.new_config]
            roll.server_switched = min(switched) if switched else None
        result.rollout = {p: asdict(r) for p, r in self.rollout.items()}
        self.check(result, poller, final_pools)
        result.nodes_detail = [asdict(r) for r in new]
        return result

    # -- verdicts --
    def classify(self, rec: NodeRecord) -> Tuple[str, str]:
        roll = self.rollout[rec.pool]
        config = "new" if rec.config == roll.new_config else "old" if rec.config == roll.old_config else "other"
        if rec.pool == "infra" and rec.image == roll.new_image:
            image = "layered-new"
        elif rec.pool == "infra" and roll.old_layered and rec.image == roll.old_layered:
            image = "layered-old"
        elif rec.image == roll.old_base or (rec.pool == "worker" and rec.image == roll.new_image):
            image = "base"
        else:
            image = "other"
        return config, image

    def check(self, result: Result, poller: Poller, final_pools: Dict[str, Any]) -> None:
        failed = [r for r in self.records if r.exit_code != 0]
        # 1. pools
        end_mismatch = [f"{r.name}: intended {r.pool}, labels {r.pool_labels}, annotations {r.pool_annotations}, "
                        f"registry {r.pool_registry}" for r in self.records if r.exit_code == 0 and
                        not (r.pool == r.pool_labels == r.pool_annotations == r.pool_registry)]
        listed = {n: p for p, item in final_pools.items() for n in item["status"].get("nodes") or {}}
        missing = [r.name for r in self.records if r.exit_code == 0 and listed.get(r.name) != r.pool]
        result.invariants["pool"] = {
            "ok": not poller.wrong and not end_mismatch and not missing and not failed,
            "wrongPoolMoments": len(poller.wrong), "samples": poller.samples,
            "examples": [f"{w['node']} listed under {w['listed']} (intended {w['intended']})" for w in poller.wrong[:5]]
            + end_mismatch[:5] + [f"{n} not listed under its pool at the end" for n in missing[:5]]
            + [f"{r.name}: firstboot exited {r.exit_code}: {r.error}" for r in failed[:5]]}
        # 2. nothing unproven
        bad, early_switch, disagree = [], [], []
        windows = {"beforeProof": 0, "duringProof": 0, "afterProof": 0}
        for r in self.records:
            if r.exit_code != 0:
                continue
            roll = self.rollout[r.pool]
            config, image = self.classify(r)
            if not r.records_agree:
                disagree.append(f"{r.name}: {r.disagreement}")
            if config == "other" or image == "other":
                bad.append(f"{r.name}: served {r.config} / {r.image}, which is neither the old nor the new target")
            if r.fetch_end < roll.proven_after:
                windows["beforeProof"] += 1
                if config != "old" or image == "layered-new":
                    bad.append(f"{r.name}: fetched before {roll.prover} proved {roll.new_config} "
                               f"(fetch ended {roll.proven_after - r.fetch_end:.3f}s before the proving run started) "
                               f"but was served {r.config} / {r.image}")
            elif r.fetch_start > roll.proven_by:
                windows["afterProof"] += 1
            else:
                windows["duringProof"] += 1
            if image == "layered-new" and config != "new":
                bad.append(f"{r.name}: the new layered image with the old config {r.config}")
            if r.staged_image and r.staged_image != r.image:
                bad.append(f"{r.name}: staged {r.staged_image} but was served {r.image}")
        for p in POOLS:
            roll = self.rollout[p]
            if roll.server_switched is not None and roll.server_switched < roll.proven_after:
                early_switch.append(f"{p}: the server served {roll.new_config} to new nodes at a sample "
                                    f"{roll.proven_after - roll.server_switched:.3f}s before the proving run started")
        result.invariants["unproven"] = {"ok": not bad and not early_switch and not disagree, **windows,
                                         "examples": (bad + early_switch + disagree)[:10]}
        # 3. reboots
        over = [r for r in self.records if r.reboots > 1 or r.firstboot_runs_with_work > 1]
        result.invariants["reboots"] = {"ok": not over, "nodesOverOne": len(over),
                                        "examples": [f"{r.name}: {r.reboots} reboots, first boot did work "
                                                     f"{r.firstboot_runs_with_work} times" for r in over[:5]]}
        # per pool summary
        for p in POOLS:
            mine = [r for r in self.records if r.pool == p and r.exit_code == 0]
            row: Dict[str, Any] = {"nodes": len([r for r in self.records if r.pool == p]),
                                   "failed": len([r for r in self.records if r.pool == p and r.exit_code != 0])}
            for r in mine:
                config, image = self.classify(r)
                row[f"config_{config}"] = row.get(f"config_{config}", 0) + 1
                row[f"image_{image}"] = row.get(f"image_{image}", 0) + 1
                key = f"reboots_{min(r.reboots, 2)}" if r.reboots < 2 else "reboots_2+"
                row[key] = row.get(key, 0) + 1
            row["wrongPoolMoments"] = len([w for w in poller.wrong if w["intended"] == p])
            row["firstbootsPerS"] = len(mine) / result.join_s if result.join_s else 0.0
            result.pools[p] = row


def run_scenario(nodes: int = 50, parallel: int = 8, existing: int = 2, workdir: Optional[str] = None) -> Result:
    own = workdir is None
    top = workdir or tempfile.mkdtemp(prefix="scaleup-")
    try:
        return Scenario(top, nodes, parallel, existing).run()
    finally:
        if own:
            shutil.rmtree(top, ignore_errors=True)


# -- output ---------------------------------------------------------------------------------------

def summary(res: Result) -> str:
    lines = [f"scale-up during a rollout: {res.nodes} new nodes ({res.parallel} at a time), "
             f"{res.existing_per_pool} existing member(s) per pool",
             "",
             "| pool | nodes | config old/new | image base/layered-old/layered-new | reboots 0/1/>1 "
             "| wrong-pool moments | first boots/s |",
             "|---|---:|---|---|---|---:|---:|"]
    for p, row in res.pools.items():
        lines.append(f"| {p} | {row['nodes']} | {row.get('config_old', 0)}/{row.get('config_new', 0)} | "
                     f"{row.get('image_base', 0)}/{row.get('image_layered-old', 0)}/{row.get('image_layered-new', 0)} | "
                     f"{row.get('reboots_0', 0)}/{row.get('reboots_1', 0)}/{row.get('reboots_2+', 0)} | "
                     f"{row['wrongPoolMoments']} | {row['firstbootsPerS']:.2f} |")
    lines += ["", f"join phase {res.join_s:.1f} s ({res.firstboots_per_s:.2f} first boots/s, median first boot "
                  f"{res.firstboot_median_s:.2f} s under load); whole run {res.wall_s:.1f} s; "
                  f"{res.poller_samples} pool samples"]
    for p, roll in res.rollout.items():
        sw = roll["server_switched"]
        lines.append(f"{p}: {roll['old_config']} -> {roll['new_config']}; proven by {roll['prover']} within "
                     f"[{roll['proven_after'] - res_t0(res):.2f} s, {roll['proven_by'] - res_t0(res):.2f} s]; "
                     f"server first seen serving it at "
                     f"{'never' if sw is None else f'{sw - res_t0(res):.2f} s'} (times from the first launch)")
    inv = res.invariants["unproven"]
    lines.append(f"fetches: {inv['beforeProof']} before the proof, {inv['duringProof']} during, "
                 f"{inv['afterProof']} after")
    lines.append("")
    names = {"pool": "1. no wrong-pool assignment; labels, annotations, registry agree",
             "unproven": "2. no node served an unproven config or image",
             "reboots": "3. at most one reboot per node at first boot"}
    for key, label in names.items():
        v = res.invariants[key]
        lines.append(f"{'PASS' if v['ok'] else 'FAIL'}  {label}")
        for ex in v.get("examples") or []:
            lines.append(f"      {ex}")
    if res.poller_errors:
        lines.append(f"poller errors: {res.poller_errors}")
    return "\n".join(lines)


def res_t0(res: Result) -> float:
    launched = [n["launched"] for n in res.nodes_detail if n["launched"]]
    return min(launched) if launched else 0.0


def run(quick: bool = False):
    """benchmarks/run.py's entry: one row, the median first boot under the storm."""
    from benchmarks.common import Row

    res = run_scenario(nodes=12 if quick else 50, parallel=8)
    verdicts = ", ".join(f"{k} {'ok' if v['ok'] else 'VIOLATED'}" for k, v in res.invariants.items())
    per_pool = "; ".join(f"{p}: config old/new {r.get('config_old', 0)}/{r.get('config_new', 0)}, "
                         f"reboots>1 {r.get('reboots_2+', 0)}, wrong-pool {r['wrongPoolMoments']}"
                         for p, r in res.pools.items())
    return [Row("scale-up during rollout", f"{res.nodes} nodes first-boot, {res.parallel} at a time",
                res.firstboot_median_s,
                note=f"median first boot under load; {res.firstboots_per_s:.2f} first boots/s, join phase "
                     f"{res.join_s:.1f} s; invariants: {verdicts}; {per_pool}")]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=50, help="new nodes joining (default 50)")
    ap.add_argument("--parallel", type=int, default=8, help="first boots at a time (default 8)")
    ap.add_argument("--existing", type=int, default=2, help="existing members per pool (default 2)")
    ap.add_argument("--json", action="store_true", help="print the full result as JSON")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (node roots, state, nodes.db)")
    args = ap.parse_args(argv)
    if args.nodes < 4 or args.parallel < 1 or args.existing < 1:
        ap.error("--nodes must be at least 4, --parallel and --existing at least 1")
    if args.keep:
        os.makedirs(args.keep, exist_ok=False)
    try:
        res = run_scenario(args.nodes, args.parallel, args.existing, workdir=args.keep)
    except RuntimeError as exc:  # the rollout itself could not be carried out (a step failed or timed out)
        print(f"scale-up scenario failed: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out = asdict(res)
        out["ok"] = res.ok
        print(json.dumps(out, indent=1, sort_keys=True))
    else:
        print(summary(res))
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
