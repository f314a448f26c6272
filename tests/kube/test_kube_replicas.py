"""Three stateless node-config-server replicas on one Kubernetes API (``serve --backend
kubernetes``, node state in the API: ``--store kubernetes``, the default there): no data
directory, no etcd of their own. What the etcd fleet of tests/etcd/test_replicas.py shows, shown
here on the API: one rendered config everywhere, a report through one replica counted and
gating on the others, ``maxUnavailable`` held together through coordination.k8s.io Leases,
and a replica started afresh knowing every node.

Every replica runs as a user bound only to what deploy/rbac.yaml grants. No kubelet runs: the
test makes each node's Node object, as its kubelet would register it (a name with no Node counts
for nothing and gets no drain slot: agent/server/cluster/kube_nodes.py), with no pods on it, so a
drain cordons it and finds nothing to evict (tests/kube/test_kube_drain.py has the real drain).
The control plane's node lifecycle controller never marks these heartbeat-less Nodes NotReady
(unavailable) by itself (NO_NODE_LIFECYCLE); the module finds its worker's control plane as a new
one (``kube_cluster_reset``).
"""

import json
import os
import time

import pytest

from agent.server.rollout.progress import epoch_of
from tests.etcd.test_replicas import (  # the etcd fleet's
    an_expired_lease_frees_its_slot,
    drain_storm,
    pool,
    report,
)
from tests.helpers.certs import make_tls
from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slow

EXAMPLES = os.path.join(REPO, "examples", "state")
TOKEN = "kube-replica-token"
NAMESPACE = "node-config-server"  # deploy/rbac.yaml's
USER = "node-config-server-replica"
# A drain's cordon holds its slot once its lease expires, as every replica's Node watch sees it: the
# TTL is past that watch's lag on a loaded machine (4 s was not: a CI run granted 8 of 7 slots).
LEASE_TTL = 20
MCO = "/apis/machineconfiguration.openshift.io/v1"


class Fleet:
    def __init__(self, top, kube):
        self.top, self.kube = top, kube
        self.tls = make_tls(str(top / "tls"))
        self.kubeconfig = kube.kubeconfig_for(USER)
        self.replicas = []
        self.credentials = {}

    def replica(self, port=None):
        return ServerProcess(None, tls=self.tls, token=TOKEN, workers=1, threads=8, port=port,
                             extra_args=["--backend", "kubernetes", "--kubeconfig", self.kubeconfig,
                                         "--namespace", NAMESPACE, "--lease-ttl", str(LEASE_TTL)])

    def start(self):
        self.replicas = [self.replica().start() for _ in range(3)]
        return self

    def stop(self):
        for r in self.replicas:
            r.stop()

    def session(self, node=None):
        s = self.replicas[0].session()
        if node is not None:
            s.cert = self.kube.kubelet_cert(node)  # its kubelet's certificate: with this backend it proves the name
            if node not in self.credentials:
                r = s.post(self.replicas[0].url(f"/api/v1/nodes/{node}/register"), timeout=10)
                assert r.status_code == 201, r.text
                self.credentials[node] = r.json()["credential"]
            s.headers["Authorization"] = f"Bearer {self.credentials[node]}"
        return s


@pytest.fixture(scope="module")
def fleet(kube_cluster_reset, tmp_path_factory):
    kube = kube_cluster_reset
    top = tmp_path_factory.mktemp("kube-replicas")
    # Each test makes the Nodes it needs: a Node no node-agent reports for is unavailable as
    # upstream counts it (its MCD never ran), and made up front they would leave the worker
    # pool no capacity to target anything.
    register_node(kube.ready_for_server(USER), "kmember-1")
    f = Fleet(top, kube)
    try:
        yield f.start()
    finally:
        f.stop()


def register_node(kube, name):
    """The Node a kubelet registers: a worker, Ready."""
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": ""}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "m"}]}}
    r = kube.session().post(kube.url + "/api/v1/nodes", json=body, timeout=10)
    assert r.status_code == 201, r.text


def test_every_replica_serves_the_same_rendered_config_and_keeps_no_local_state(fleet):
    names = {pool(r)["spec"]["configuration"]["name"] for r in fleet.replicas}
    etags = {r.session().get(r.url("/config/worker"), timeout=10).headers["ETag"] for r in fleet.replicas}
    assert len(names) == 1 and len(etags) == 1
    for r in fleet.replicas:
        assert os.listdir(r.data_dir) == [], "a replica on the API store wrote node state of its own"


def test_the_cluster_view_lists_every_replica_from_their_heartbeat_leases(fleet):
    r = fleet.replicas[0]

    def three():
        doc = r.session().get(r.url("/api/v1/cluster"), timeout=10).json()
        seen.append([(x["replica"], x["pid"], x["stateSignature"], x["at"]) for x in doc["replicas"]])
        # Three processes, all rendering from the same objects (each announces every 5 s).
        return doc if len({x[:2] for x in seen[-1]}) == 3 and len({x[2] for x in seen[-1]}) == 1 else None

    seen = []
    doc = wait_for(three, "every replica has announced itself, all with one state signature", 30)
    assert doc["store"]["kind"] == "kubernetes" and doc["store"]["healthy"], seen[-3:]
    leases = fleet.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases",
                            params={"labelSelector": "node-agent.openshift.io/kind=replica"}).json()["items"]
    assert len(leases) >= 3


def test_a_report_through_one_replica_is_counted_and_gates_on_the_others(fleet):
    a, b, c = fleet.replicas
    first = pool(a)["spec"]["configuration"]["name"]
    resp = report(a, "kmember-1", {"pool": "worker", "state": "Done", "currentConfig": first,
                                   "desiredConfig": first}, fleet)
    assert resp.status_code == 200, resp.text
    for r in (b, c):  # its Node counts in machineCount from the start; its report reaches every replica
        wait_for(lambda r=r: (pool(r)["status"]["nodes"].get("kmember-1") or {}).get("state") == "Done",
                 "the other replicas see its report", 30)
    # The MCO-1940 gate: a new target is served to new nodes only once a member has proven it,
    # and the proof is what the API holds (the node's record on its MachineConfigNode).
    fleet.kube.kubectl("apply", "-f", "-", input=(
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
        "  name: 99-kube-replica-test\n  labels:\n    machineconfiguration.openshift.io/role: worker\n"
        "spec:\n  config:\n    ignition:\n      version: 3.4.0\n    storage:\n      files:\n"
        "      - path: /etc/kube-replica-test\n        contents:\n          source: data:,hello\n"))

    def moved():
        views = [pool(x) for x in fleet.replicas]
        targets = {v["spec"]["configuration"]["name"] for v in views}
        return views if len(targets) == 1 and targets != {views[0]["status"]["configuration"]["name"]} else None

    views = wait_for(moved, "every replica has the new target", 30)
    target, old = views[0]["spec"]["configuration"]["name"], views[0]["status"]["configuration"]["name"]
    assert {v["status"]["served"]["config"] for v in views} == {old}  # unproven: nobody gets it
    # A Done proves only a config served to that node as itself (docs/security.md "Identity"):
    # the member fetches the target with its credential first, as node-agent does.
    # The server targets it (one replica decides, through the pool row's compare-and-swap; replica a
    # answers from its watch of that row).
    got = wait_for(lambda: (lambda r: r.headers.get("X-Served-Config") == target and r)(
        fleet.session("kmember-1").get(a.url("/config/worker"), timeout=10)), "kmember-1 targeted", 10)
    assert got.status_code == 200 and got.headers["X-Rollout"] == "updating", got.headers
    resp = report(a, "kmember-1", {"pool": "worker", "state": "Done", "currentConfig": target,
                                   "desiredConfig": target}, fleet)
    assert resp.status_code == 200, resp.text
    for r in (b, c):
        wait_for(lambda r=r: pool(r)["status"]["served"]["config"] == target, "the proof reaches every replica", 30)
    mcn = fleet.kube.get(f"{MCO}/machineconfignodes/kmember-1").json()
    record = json.loads(mcn["metadata"]["annotations"]["node-agent.openshift.io/report"])
    assert record["report"]["currentConfig"] == target and record["pool"] == "worker"


def live_drain_leases(fleet, pool_name):
    items = fleet.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases").json()["items"]
    now = time.time()
    live = 0
    for lease in items:
        spec = lease.get("spec") or {}
        if not spec.get("holderIdentity") or (lease["metadata"].get("labels") or {}).get(
                "node-agent.openshift.io/pool") != pool_name:
            continue
        renewed = spec.get("renewTime") or spec.get("acquireTime")
        if renewed and epoch_of(renewed) + float(spec.get("leaseDurationSeconds") or 0) >= now:
            live += 1
    return live


def test_thirty_concurrent_drains_through_three_replicas_respect_max_unavailable(fleet):
    # Counted from the API's own Lease objects, not from any replica's view.
    # Each Done on the pool's target: available, as upstream's IsUnavailableForUpdate reads it.
    target = pool(fleet.replicas[0])["spec"]["configuration"]["name"]
    done = {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target}
    for i in range(30):
        register_node(fleet.kube, f"kdrainer-{i:02d}")
    nodes, answers, limit, peak = drain_storm(fleet, "kdrainer", lambda: live_drain_leases(fleet, "worker"), 0.05,
                                              done)
    granted = [a for a in answers if a.status_code == 200]
    assert all(a.status_code in (200, 429) for a in answers), [a.text for a in answers if a.status_code >= 300]
    assert 1 <= len(granted) <= limit and peak <= limit, (len(granted), peak, limit)
    # A granted node's drain cordoned its Node: unavailable, so it holds its slot after its lease
    # too, as upstream's getUnavailableMachines counts it; an admin uncordons them, and the
    # expired leases free the slots.
    for node, answer in zip(nodes, answers):
        if answer.status_code == 200:
            fleet.kube.kubectl("uncordon", node)
    an_expired_lease_frees_its_slot(fleet, nodes, answers, LEASE_TTL)


def test_a_replica_started_afresh_knows_every_node(fleet):
    register_node(fleet.kube, "kfresh-1")
    r = report(fleet.replicas[0], "kfresh-1", {"pool": "worker", "state": "Done"}, fleet)
    assert r.status_code == 200, r.text
    wait_for(lambda: fleet.session().get(fleet.replicas[2].url("/api/v1/nodes/kfresh-1"), timeout=10).status_code
             == 200, "replica 2 has node kfresh-1 (the node this test reported through replica 0)", 10)
    count = pool(fleet.replicas[2])["status"]["machineCount"]
    assert count >= 1
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
    selector = {"labelSelector": "node-agent.openshift.io/kind=replica"}

    def announced():
        return {i["spec"]["holderIdentity"] for i in fleet.kube.get(leases, params=selector).json()["items"]}

    before = announced()
    fleet.replicas[2].stop()
    gone = before - announced()  # its worker took its announcement away as it exited (worker_exit)
    assert len(gone) == 1 and f":{fleet.replicas[2].port}/" in gone.pop(), (before, announced())
    fleet.replicas[2] = fleet.replica().start()  # a new process and an empty data directory
    # Healthy before its Node cache is listed: until then pools are counted from the node store
    # (kube_nodes.NodeTruth.ready), so wait for the count from the Nodes.
    assert wait_for(lambda: pool(fleet.replicas[2])["status"]["machineCount"] == count,
                    f"the new replica counts {count} machines (its Node cache listed)", 30)
    node = fleet.session().get(fleet.replicas[2].url("/api/v1/nodes/kfresh-1"), timeout=10)
    assert node.status_code == 200 and node.json()["pool"] == "worker", node.text
    # Its credential too: the node acts as itself through the new replica.
    assert report(fleet.replicas[2], "kfresh-1", {"pool": "worker", "state": "Done"}, fleet).status_code == 200
