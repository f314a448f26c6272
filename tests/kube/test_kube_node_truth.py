"""``serve --backend kubernetes`` decides from Node objects (agent/server/cluster/kube_nodes.py,
the rules in agent/server/rollout/nodestatus.py), against a real kube-apiserver 1.20.2: each test
is named after the upstream function (openshift/machine-config-operator pkg/controller/node/
status.go, node_controller.go) whose behaviour it checks, as an outside tester with only the
bootstrap token would try to steer a pool.

No kubelet runs: the test plays the kubelet, creating each Node with its Ready condition.
The control plane's node lifecycle controller never marks these heartbeat-less Nodes NotReady by
itself (NO_NODE_LIFECYCLE in tests/helpers/kube_cluster.py; benchmarks/bench_kube.py stops the
controller manager instead). Pools are cluster-scoped: the module finds its worker's control plane
as a new one (``kube_cluster_reset``, tests/conftest.py).
"""

import json

import pytest

from tests.helpers.certs import make_tls
from tests.helpers.kube_cluster import wait_for
from tests.helpers.server_proc import ServerProcess

MCO = "/apis/machineconfiguration.openshift.io/v1"
W, M, INFRA_ROLE = "node-role.kubernetes.io/worker", "node-role.kubernetes.io/master", "node-role.kubernetes.io/infra"


@pytest.fixture(scope="module")
def kube(kube_cluster_reset):
    return kube_cluster_reset.ready_for_server("node-config-server-test")


@pytest.fixture(scope="module")
def server(kube, tmp_path_factory):
    """Bootstrap token only, no admin token: as the README runs it and as the issue's tester tried.
    TLS: each node proves its name with its kubelet's client certificate from this control
    plane's CA (which the server reads from kube-system/extension-apiserver-authentication); the
    ghosts have the bootstrap token only."""
    srv = ServerProcess(None, tls=make_tls(str(tmp_path_factory.mktemp("tls"))), token="b00tstrap", workers=1,
                        kubelet=kube.kubelet_cert, extra_args=[
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
    for i in range(3):  # the bootstrap token only: pending, nothing they say counts
        r = server.node_session(f"ghost-{i}", kubelet=False).post(
            server.url(f"/api/v1/nodes/ghost-{i}/report"), data=json.dumps(done(master, {M: ""}, pool="master")),
            timeout=10)
        assert r.status_code == 200 and r.json()["counted"] is False, r.text
    r = server.node_session("ghost-0", kubelet=False).post(server.url("/api/v1/nodes/ghost-0/drain"),
                                                          json={"pool": "master", "config": "x"}, timeout=30)
    assert r.status_code == 403 and "counts for nothing" in r.json()["error"]["message"], r.text
    # A ghost with a kubelet certificate for a name that has no Node: proven, still nobody.
    report(server, "ghost-k", done(master, {M: ""}, pool="master"))
    r = ask_drain(server, "ghost-k", "master")
    assert r.status_code == 409, r.text
    assert "no Node object named ghost-k" in r.json()["error"]["message"]
    st = counts(server, "master")
    assert st["machineCount"] == 1 and st["updatedMachineCount"] == 0  # m-0 never reported; ghosts are nobody
    node = server.session().get(server.url("/api/v1/nodes/ghost-k"), timeout=10).json()
    assert node["counted"] is False and "no Node object named ghost-k" in node["notCounted"]
    # The real master gets its slot.
    report(server, "m-0", done(master, {M: ""}, pool="master"))
    assert ask_drain(server, "m-0", "master").status_code == 200
    # No Node, no MachineConfigNode (upstream makes one per Node): a proven name's report is kept in
    # its registration, as a pending one's, and a pending one never reaches one either
    assert kube.get(f"{MCO}/machineconfignodes/ghost-k").status_code == 404
    assert node["report"]["state"] == "Done"
    assert kube.get(f"{MCO}/machineconfignodes/ghost-0").status_code == 404
    # The harness's --auto-approve '.*' approved the ghosts' names: with this backend a rule binds no
    # name to a Node, so they are kept and shown as pending (their reports in their Secrets), and
    # serve said so at start.
    reg = server.session().get(server.url("/api/v1/nodes/ghost-0/registration"), timeout=10).json()
    assert reg["state"] == "Pending" and reg["approvedBy"] == "rule" and "kubelet" in reg["pendingBecause"]
    kept = server.session().get(server.url("/api/v1/nodes/ghost-0"), timeout=10).json()
    assert kept["report"]["_server"]["pending"] is True and kept["counted"] is False
    listed = server.session().get(server.url("/api/v1/nodes?approval=pending"), timeout=10).json()
    assert {"ghost-0", "ghost-1", "ghost-2"} <= {i["node"] for i in listed["items"]}
    assert "ghost-k" not in {i["node"] for i in listed["items"]}
    assert "cannot bind a name to a Node with --backend kubernetes" in server.log_text()
    assert "kube-system/extension-apiserver-authentication proves its name" in server.log_text()


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


def test_CheckNodeReady_a_notready_Node_is_named_in_get_nodes_describe_node_and_the_pools_rollout(kube, server):
    """Issue 49: a node Done on its pool's target whose Node is NotReady: READY False and why in
    the node list and the node, and the pool's status.rollout.notReady (describe pool) names it."""
    infra = target(server, "infra")
    create_node(kube, "i-up", {W: "", INFRA_ROLE: ""})  # its own: not another test's Node
    create_node(kube, "i-down", {W: "", INFRA_ROLE: ""}, ready="Unknown")
    for n in ("i-up", "i-down"):
        report(server, n, done(infra, {W: "", INFRA_ROLE: ""}, pool="infra"))
    why = "node i-down is reporting NotReady=Unknown"
    wait_for(lambda: (pool(server, "infra")["status"].get("rollout") or {}).get("notReady", {}).get("i-down") == why,
             "i-down named in infra's rollout")
    one = server.session().get(server.url("/api/v1/nodes/i-down"), timeout=10).json()
    assert (one.get("ready"), one.get("notReady")) == ("False", why), one

    def listed():
        items = {i["name"]: i for i in server.session().get(server.url("/api/v1/nodes"), timeout=10).json()["items"]}
        return "i-up" in items and "i-down" in items and items
    items = wait_for(listed, "i-up and i-down in the node list")
    assert (items["i-down"].get("ready"), items["i-down"].get("notReady")) == ("False", why)
    assert items["i-up"].get("ready") == "True" and "notReady" not in items["i-up"]



def test_every_Node_is_listed_with_or_without_an_agent_from_its_own_annotations_paged_with_no_name_twice(kube, server):
    """As ``oc get nodes`` (ours: the pools count every Node, so the list shows every Node): a Node
    node-agent never reported for is an item with its pool by its labels and its state from its
    MCD annotations, rollout Unmanaged, and ``GET /api/v1/nodes/<name>`` answers for it; pages of
    any size list each name once, in order."""
    infra = target(server, "infra")
    create_node(kube, "u-mcd", {W: "", INFRA_ROLE: ""})
    mcd = "machineconfiguration.openshift.io/"
    patch_node(kube, "u-mcd", {"metadata": {"annotations": {mcd + "state": "Done", mcd + "currentConfig": infra,
                                                            mcd + "desiredConfig": infra}}})
    create_node(kube, "u-agent", {W: "", INFRA_ROLE: ""})
    report(server, "u-agent", done(infra, {W: "", INFRA_ROLE: ""}, pool="infra"))
    create_node(kube, "u-none", {"kubernetes.io/os": "linux"})  # in no pool

    def listed(limit):
        names, token = [], ""
        while True:
            page = server.session().get(server.url(f"/api/v1/nodes?limit={limit}&continue={token}"), timeout=10).json()
            names += [i["name"] for i in page["items"]]
            token = page["metadata"].get("continue")
            if not token:
                return names, {i["name"]: i for i in page["items"]}

    def got():
        items = {i["name"]: i for i in server.session().get(server.url("/api/v1/nodes"), timeout=10).json()["items"]}
        return "u-mcd" in items and (items["u-mcd"].get("report") or {}).get("state") == "Done" and items
    items = wait_for(got, "u-mcd listed with its MCD state")
    assert (items["u-mcd"]["pool"], items["u-mcd"]["rollout"]["state"], items["u-mcd"]["updated"]) == (
        "infra", "Unmanaged", True)
    assert items["u-mcd"]["ready"] == "True" and items["u-mcd"]["reportedAt"] == ""
    assert items["u-none"]["pool"] == "" and items["u-none"]["membership"].startswith("Node u-none: ")
    assert items["u-agent"]["rollout"]["state"] != "Unmanaged"
    nodes = {n["metadata"]["name"] for n in kube.session().get(kube.url + "/api/v1/nodes", timeout=10).json()["items"]}
    for limit in (1, 2, 3, 500):
        names, _ = listed(limit)
        assert names == sorted(set(names)) and nodes <= set(names), (limit, names)
    one = server.session().get(server.url("/api/v1/nodes/u-mcd"), timeout=10)
    assert one.status_code == 200 and one.json()["rollout"]["state"] == "Unmanaged", one.text
    assert server.session().get(server.url("/api/v1/nodes/no-such-node"), timeout=10).status_code == 404

# -- issue 45: a name binds to its Node only when its kubelet's certificate proves it or the admin approves it --

ADMIN = "4dmin-token"
POOL_KEYS = ("machineCount", "readyMachineCount", "updatedMachineCount", "unavailableMachineCount",
             "degradedMachineCount")


@pytest.fixture(scope="module")
def admin_server(kube, server, tmp_path_factory):
    """Another replica of the same node state (the same namespace), with an admin token."""
    top = tmp_path_factory.mktemp("admin-replica")
    (top / "admin").write_text(ADMIN + "\n")
    srv = ServerProcess(None, tls=server.tls, token="b00tstrap", workers=1, kubelet=kube.kubelet_cert, extra_args=[
        "--backend", "kubernetes", "--kubeconfig", kube.kubeconfig_for("node-config-server-test"),
        "--admin-token-file", str(top / "admin")])
    with srv:
        yield srv


def as_admin(srv):
    s = srv.session(token=False)
    s.headers["Authorization"] = f"Bearer {ADMIN}"
    return s


def seen_by_admin(kube, name):
    """What `kubectl get node NAME -o yaml` shows an admin of it: labels, annotations, spec."""
    obj = kube.get(f"/api/v1/nodes/{name}").json()
    return {"labels": obj["metadata"].get("labels"), "annotations": obj["metadata"].get("annotations"),
            "spec": obj.get("spec")}


def mcn_of(kube, name):
    """The Node's MachineConfigNode as the API holds it, once made with its conditions (kube_mcn
    makes one for every Node)."""
    return wait_for(lambda: (lambda r: r.ok and (r.json().get("status") or {}).get("conditions") and r.json())(
        kube.get(f"{MCO}/machineconfignodes/{name}")), f"{name}'s MachineConfigNode")


def as_made(mcn):
    """What an MCN says, but for when it was made and written (uid, times, versions)."""
    return {"spec": mcn["spec"], "report": (mcn["metadata"].get("annotations") or {}).get("node-agent.openshift.io/report"),
            "conditions": [{k: c[k] for k in ("type", "status", "reason", "message")} for c in mcn["status"]["conditions"]],
            "configVersion": mcn["status"].get("configVersion")}


def synced(kube, srv, sentinel, mark):
    """A proven node's report through ``srv`` written on its Node: the write-back round after
    every report ``srv`` took before it has run (the server writes in separate steps). The mark is
    its currentConfig: a Working write leaves the Node's reason as it was (writer.go SetWorking)."""
    report(srv, sentinel, {"pool": "worker", "state": "Working", "currentConfig": mark, "labels": {W: ""}})
    wait_for(lambda: (kube.get(f"/api/v1/nodes/{sentinel}").json()["metadata"].get("annotations") or {})
             .get("machineconfiguration.openshift.io/currentConfig") == mark, f"{sentinel}'s report {mark} on its Node")


def test_a_bootstrap_token_holder_changes_nothing_an_admin_sees_for_a_real_Nodes_name(kube, admin_server):
    """The issue's first finding: a pending name of a real, MCD-managed Node counted for it
    (worker 4 -> 3 updated), wrote its annotations and MCN, took the drain slot. Now nothing: the
    Node, its (absent) MCN, the pool's numbers and the drain slots are as before, until and after
    the admin deletes the name."""
    srv, worker = admin_server, target(admin_server, "worker")
    managed = {f"machineconfiguration.openshift.io/{k}": v for k, v in (
        ("currentConfig", worker), ("desiredConfig", worker), ("state", "Done"))}
    create_node(kube, "real-w9", {W: ""})
    patch_node(kube, "real-w9", {"metadata": {"annotations": managed}})  # a real MCD manages it
    create_node(kube, "sentinel-0", {W: ""})
    synced(kube, srv, "sentinel-0", "before")
    wait_for(lambda: "real-w9" in pool(srv, "worker")["status"]["nodes"], "real-w9 counted from its annotations")
    wait_for(lambda: mcn_of(kube, "real-w9")["status"]["configVersion"].get("current") == worker,
             "real-w9's MachineConfigNode (every Node has one), its current config from its annotations")
    before = {"node": seen_by_admin(kube, "real-w9"), "pool": counts(srv, "worker"), "mcn": mcn_of(kube, "real-w9")}
    assert "node-agent.openshift.io/report" not in (before["mcn"]["metadata"].get("annotations") or {})

    squat = srv.node_session("real-w9", kubelet=False)  # the bootstrap token only
    assert srv.session().get(srv.url("/api/v1/nodes/real-w9/registration")).json()["state"] == "Pending"
    evil = {"pool": "worker", "state": "Degraded", "currentConfig": worker, "desiredConfig": "rendered-evil",
            "reason": "squatted", "labels": {W: ""}}
    out = squat.post(srv.url("/api/v1/nodes/real-w9/report"), data=json.dumps(evil), timeout=10).json()
    assert out["counted"] is False and "kubelet" in out["note"]
    r = squat.post(srv.url("/api/v1/nodes/real-w9/drain"), json={"pool": "worker", "config": "x"}, timeout=30)
    assert r.status_code == 403, r.text
    synced(kube, srv, "sentinel-0", "after-squat")
    assert seen_by_admin(kube, "real-w9") == before["node"]
    assert counts(srv, "worker") == before["pool"]
    assert mcn_of(kube, "real-w9") == before["mcn"]  # not one write
    described = srv.session().get(srv.url("/api/v1/nodes/real-w9"), timeout=10).json()
    assert described["counted"] is False and "from its own annotations" in described["notCounted"]
    # The pending list tells the admin this name is a real, managed Node.
    items = {i["node"]: i for i in as_admin(srv).get(srv.url("/api/v1/nodes?approval=pending")).json()["items"]}
    assert items["real-w9"]["nodeObject"]["exists"] is True and "Done" in items["real-w9"]["nodeObject"]["managed"]
    assert items["real-w9"]["address"] == "127.0.0.1"
    # The admin deletes the name: still exactly as before.
    assert as_admin(srv).delete(srv.url("/api/v1/nodes/real-w9"), timeout=30).json()["deleted"] is True
    synced(kube, srv, "sentinel-0", "after-delete")
    assert seen_by_admin(kube, "real-w9") == before["node"] and counts(srv, "worker") == before["pool"]
    assert mcn_of(kube, "real-w9") == before["mcn"]


def test_the_admins_delete_takes_back_everything_a_name_it_approved_wrote(kube, admin_server):
    """Approving a squatted name by mistake hands it the Node: its report's annotations, the
    custom pool's labels (its firstPivotConfig), a MachineConfigNode, a cordon. The admin's
    delete takes every one of them back: the Node, its MCN and the pool's numbers as before."""
    srv, role = admin_server, "node-role.kubernetes.io/sq45"
    kube.kubectl("apply", "-f", "-", input=json.dumps({  # a custom pool of this test's own
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool", "metadata": {"name": "sq45"},
        "spec": {"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}},
                 "nodeSelector": {"matchLabels": {role: ""}}, "maxUnavailable": 1}}))
    infra = wait_for(lambda: srv.session().get(srv.url("/api/v1/pools/sq45"), timeout=10).ok and target(srv, "sq45"),
                     "pool sq45 rendered")
    create_node(kube, "plain-w8", {W: ""})  # a Node from before node-agent: no MCD annotations
    wait_for(lambda: "plain-w8" in pool(srv, "worker")["status"]["nodes"], "plain-w8 in worker")
    before = {"node": seen_by_admin(kube, "plain-w8"), "worker": counts(srv, "worker"), "infra": counts(srv, "sq45"),
              "mcn": as_made(mcn_of(kube, "plain-w8"))}
    squat = srv.node_session("plain-w8", kubelet=False)
    body = {"pool": "sq45", "state": "Done", "currentConfig": infra, "desiredConfig": infra,
            "firstPivotConfig": infra, "labels": {W: ""}}
    assert squat.post(srv.url("/api/v1/nodes/plain-w8/report"), data=json.dumps(body), timeout=10).status_code == 200
    assert as_admin(srv).post(srv.url("/api/v1/nodes/plain-w8/approve"), timeout=30).status_code == 200
    wait_for(lambda: (seen_by_admin(kube, "plain-w8")["labels"] or {}).get(role) == "",
             "the pool's label the approved report's firstPivotConfig applies")
    wait_for(lambda: "plain-w8" in pool(srv, "sq45")["status"]["nodes"], "plain-w8 in pool sq45")
    r = squat.post(srv.url("/api/v1/nodes/plain-w8/drain"), json={"pool": "sq45", "config": infra}, timeout=60)
    assert r.status_code == 200, r.text
    assert seen_by_admin(kube, "plain-w8")["spec"].get("unschedulable") is True
    wait_for(lambda: as_made(mcn_of(kube, "plain-w8"))["report"], "its report on its MachineConfigNode")
    uid = mcn_of(kube, "plain-w8")["metadata"]["uid"]
    out = as_admin(srv).delete(srv.url("/api/v1/nodes/plain-w8"), timeout=30).json()
    assert out["deleted"] is True and out["leaseReleased"] is True
    assert seen_by_admin(kube, "plain-w8") == before["node"]
    # the MCN its reports wrote is gone; the one made again for the Node says what it said before
    again = wait_for(lambda: (lambda m: m["metadata"]["uid"] != uid and m)(mcn_of(kube, "plain-w8")),
                     "plain-w8's MachineConfigNode made again from the Node alone")
    assert as_made(again) == before["mcn"]
    wait_for(lambda: counts(srv, "worker") == before["worker"] and counts(srv, "sq45") == before["infra"],
             "the pools' numbers as before")


def test_a_server_that_cannot_read_the_client_ca_says_identity_is_by_admin_approval_only(kube, tmp_path):
    """A user bound to deploy/rbac.yaml's roles but for the RoleBinding in kube-system: no kubelet
    certificate can prove a name; serve says so at start (one line) and /healthz carries it."""
    user = "ncs-no-client-ca"
    kube.kubectl("create", "clusterrolebinding", user, "--clusterrole=node-config-server", f"--user={user}")
    for namespace in ("node-config-server", "node-config-server-credentials"):
        kube.kubectl("create", "rolebinding", user, "-n", namespace, f"--role={namespace}", f"--user={user}")
    srv = ServerProcess(None, tls=make_tls(str(tmp_path / "tls")), token="b00tstrap", workers=1, auto_approve=None,
                        extra_args=["--backend", "kubernetes", "--kubeconfig", kube.kubeconfig_for(user)])
    with srv:
        said = [line for line in srv.log_text().splitlines() if "node identity by admin approval only" in line]
        assert len(said) == 1 and "extension-apiserver-authentication-reader" in said[0], said
        health = srv.session().get(srv.url("/healthz"), timeout=10).json()
        assert any("node identity by admin approval only" in w for w in health["warnings"]), health
        assert any("nobody can be approved" in w for w in health["warnings"]), health  # no admin token either
