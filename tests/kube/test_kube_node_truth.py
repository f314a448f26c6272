"""``serve --backend kubernetes`` decides from Node objects (agent/server/cluster/kube_nodes.py,
the rules in agent/server/rollout/nodestatus.py), against a real kube-apiserver 1.20.2: each test
is named after the upstream function (openshift/machine-config-operator pkg/controller/node/
status.go, node_controller.go) whose behaviour it checks, as an outside tester with only the
bootstrap token would try to steer a pool.

No kubelet runs: the test plays the kubelet, creating each Node with its Ready condition.
kube-controller-manager is stopped once the control plane is up, or its node lifecycle controller
would mark these heartbeat-less Nodes NotReady after 40 s (benchmarks/bench_kube.py does the same).
The module has a control plane of its own: pools are cluster-scoped.
"""

import json
import os
import signal

import pytest

from tests.helpers.kube_cluster import KubeCluster, find_kube_bin, wait_for
from tests.helpers.server_proc import ServerProcess

MCO = "/apis/machineconfiguration.openshift.io/v1"
W, M, INFRA_ROLE = "node-role.kubernetes.io/worker", "node-role.kubernetes.io/master", "node-role.kubernetes.io/infra"


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    if not find_kube_bin():
        pytest.skip("kube-apiserver 1.20.2 is not built: run make kube-bin (make test does)")
    with KubeCluster(str(tmp_path_factory.mktemp("node-truth"))) as kc:
        cm = kc.procs.pop("kube-controller-manager")
        os.killpg(cm.pid, signal.SIGTERM)
        cm.wait(15)
        kc.apply_examples()
        kc.bind_server_user("node-config-server-test")
        yield kc


@pytest.fixture(scope="module")
def server(kube):
    """Bootstrap token only, no admin token: as the README runs it and as the issue's tester tried."""
    srv = ServerProcess(None, token="b00tstrap", workers=1, extra_args=[
        "--backend", "kubernetes", "--kubeconfig", kube.kubeconfig_for("node-config-server-test")])
    with srv:
        yield srv


def create_node(kube, name, labels, ready="True"):
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "m"}]}}
    r = kube.session().post(kube.url + "/api/v1/nodes", json=body, timeout=10)
    assert r.status_code == 201, r.text


def patch_node(kube, name, patch):
    r = kube.session().patch(kube.url + f"/api/v1/nodes/{name}", data=json.dumps(patch), timeout=10,
                             headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text


def pool(server, name):
    r = server.session().get(server.url(f"/api/v1/pools/{name}"), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def counts(server, name):
    st = pool(server, name)["status"]
    return {k: st[k] for k in ("machineCount", "readyMachineCount", "updatedMachineCount",
                               "unavailableMachineCount", "degradedMachineCount")}


def target(server, name):
    return pool(server, name)["spec"]["configuration"]["name"]


def report(server, node, body):
    r = server.node_session(node).post(server.url(f"/api/v1/nodes/{node}/report"), data=json.dumps(body), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def ask_drain(server, node, pool_name, config=None):
    """A drain for ``config``, by default the pool's target (what these nodes are Done on: a node
    is drained only for its desired config)."""
    return server.node_session(node).post(server.url(f"/api/v1/nodes/{node}/drain"),
                                          json={"pool": pool_name, "config": config or target(server, pool_name)},
                                          timeout=30)


def done(config, labels=None, **more):
    return dict({"pool": "worker", "state": "Done", "currentConfig": config, "desiredConfig": config,
                 "labels": labels or {W: ""}}, **more)


def test_getNodesForPool_a_reporting_name_with_no_Node_counts_for_nothing(kube, server):
    """The issue's tester: names that never got a Node claim master's labels, report Done, ask
    for master's drain slot. No pool size, no proof, no slot; describe node says why."""
    create_node(kube, "m-0", {M: ""})
    master = target(server, "master")
    wait_for(lambda: counts(server, "master")["machineCount"] == 1, "the master Node counted")
    for i in range(3):
        report(server, f"ghost-{i}", done(master, {M: ""}, pool="master"))
    r = ask_drain(server, "ghost-0", "master")
    assert r.status_code == 409, r.text
    assert "no Node object named ghost-0" in r.json()["error"]["message"]
    st = counts(server, "master")
    assert st["machineCount"] == 1 and st["updatedMachineCount"] == 0  # m-0 never reported; ghosts are nobody
    node = server.session().get(server.url("/api/v1/nodes/ghost-0"), timeout=10).json()
    assert node["counted"] is False and "no Node object named ghost-0" in node["notCounted"]
    # The real master gets its slot.
    report(server, "m-0", done(master, {M: ""}, pool="master"))
    assert ask_drain(server, "m-0", "master").status_code == 200
    ghost = kube.get(f"{MCO}/machineconfignodes/ghost-0")  # its report is kept on an MCN of its own
    assert ghost.status_code == 200, ghost.text  # (a 404's Status has no ownerReferences either)
    assert not ghost.json()["metadata"].get("ownerReferences")  # no Node to own it


def test_getPrimaryPoolForNode_labels_move_a_node_and_a_report_claims_nothing(kube, server):
    """A worker Node reporting master's labels stays a worker; `oc label node X infra=` moves
    it to infra, removing the label moves it back."""
    create_node(kube, "w-move", {W: ""})
    worker = target(server, "worker")
    report(server, "w-move", done(worker, {M: ""}))
    wait_for(lambda: "w-move" in pool(server, "worker")["status"]["nodes"], "w-move in worker")
    assert "w-move" not in pool(server, "master")["status"]["nodes"]
    r = ask_drain(server, "w-move", "master")
    assert r.status_code == 409 and "put it in pool worker" in r.json()["error"]["message"], r.text
    # Its MachineConfigNode: the pool its Node's labels say, owned by the Node (upgrade_monitor.go).
    uid = kube.get("/api/v1/nodes/w-move").json()["metadata"]["uid"]

    def mcn_owned():
        mcn = kube.get(f"{MCO}/machineconfignodes/w-move").json()
        owners = mcn["metadata"].get("ownerReferences") or []
        return mcn if [(o["kind"], o["name"], o["uid"]) for o in owners] == [("Node", "w-move", uid)] else None
    assert wait_for(mcn_owned, "the MachineConfigNode owned by its Node")["spec"]["pool"]["name"] == "worker"
    patch_node(kube, "w-move", {"metadata": {"labels": {INFRA_ROLE: ""}}})
    wait_for(lambda: "w-move" in pool(server, "infra")["status"]["nodes"]
             and "w-move" not in pool(server, "worker")["status"]["nodes"], "w-move in infra")
    patch_node(kube, "w-move", {"metadata": {"labels": {INFRA_ROLE: None}}})
    wait_for(lambda: "w-move" in pool(server, "worker")["status"]["nodes"]
             and "w-move" not in pool(server, "infra")["status"]["nodes"], "w-move back in worker")


def test_calculateStatus_counts_nodes_with_or_without_an_agent_and_readiness_from_the_Node(kube, server):
    """machineCount: every Node the pool selects; ready needs Ready and not cordoned;
    unavailable: NotReady or cordoned, not nodes Done on what they desire."""
    before = counts(server, "infra")
    infra = target(server, "infra")
    create_node(kube, "i-ready", {W: "", INFRA_ROLE: ""})
    create_node(kube, "i-cordoned", {W: "", INFRA_ROLE: ""})
    create_node(kube, "i-silent", {W: "", INFRA_ROLE: ""}, ready="False")  # no agent report, NotReady
    patch_node(kube, "i-cordoned", {"spec": {"unschedulable": True}})
    for n in ("i-ready", "i-cordoned"):
        report(server, n, done(infra, {W: "", INFRA_ROLE: ""}, pool="infra"))

    def grew():
        now = counts(server, "infra")
        return {k: now[k] - before[k] for k in now} == {
            "machineCount": 3, "readyMachineCount": 1, "updatedMachineCount": 2, "unavailableMachineCount": 2,
            "degradedMachineCount": 0} and now
    wait_for(grew, "infra counts from the Nodes")


def test_getAllCandidateMachines_every_unavailable_node_takes_a_drain_slot(kube, server):
    """worker's maxUnavailable "25%" of 2 Nodes is 1; a Node a user cordoned uses it up."""
    worker = target(server, "worker")
    for n in ("w-a", "w-b"):
        create_node(kube, n, {W: ""})
        report(server, n, done(worker))
    patch_node(kube, "w-b", {"spec": {"unschedulable": True}})
    wait_for(lambda: "w-b" in pool(server, "worker")["status"]["nodes"] and
             counts(server, "worker")["unavailableMachineCount"] >= 1, "w-b unavailable")
    r = ask_drain(server, "w-a", "worker")
    assert r.status_code == 429, r.text
    patch_node(kube, "w-b", {"spec": {"unschedulable": None}})
    wait_for(lambda: ask_drain(server, "w-a", "worker").status_code == 200, "the slot once w-b is schedulable again")


def test_calculateStatus_NodeDegraded_names_each_node_as_upstream(kube, server):
    create_node(kube, "i-bad", {W: "", INFRA_ROLE: ""})
    infra = target(server, "infra")
    report(server, "i-bad", {"pool": "infra", "state": "Degraded", "currentConfig": infra, "desiredConfig": infra,
                             "reason": "disk full", "labels": {W: "", INFRA_ROLE: ""}})

    def cond():
        conds = {c["type"]: c for c in pool(server, "infra")["status"]["conditions"]}
        return conds["NodeDegraded"]["status"] == "True" and conds["NodeDegraded"]
    got = wait_for(cond, "NodeDegraded")
    assert got["reason"].endswith("nodes are reporting degraded status on sync")
    assert 'Node i-bad is reporting: "disk full"' in got["message"]
