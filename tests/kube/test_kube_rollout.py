"""The server's node targeting on a real kube-apiserver (``serve --backend kubernetes``), as the MCO's
node controller writes it (pkg/controller/node/node_controller.go at 006209bb): each targeted
Node's ``machineconfiguration.openshift.io/desiredConfig``, the ``UpdateInProgress:PreferNoSchedule``
taint on the Nodes still to update, the ``SetDesiredConfig`` Event on the pool; and ours: a node
whose drain a PodDisruptionBudget holds past ``--drain-defer-after`` is uncordoned with its config,
gives its slot to the next node, is named in the pool's status and is tried again once the others
are done, and no PDB is violated.

A custom pool of its own (``rollout``, maxUnavailable 1) keeps this module's Nodes apart from the
examples' pools. The test plays node-agent over HTTP (fetch as a member, drain, report) and the
kubelet (Nodes, a Running pod under a PDB); kube-controller-manager runs (the disruption
controller counts the PDB; its node lifecycle controller never marks a Node NotReady by itself,
NO_NODE_LIFECYCLE), and the module finds its worker's control plane as a new one
(``kube_cluster_reset``, tests/conftest.py).
"""

import json

import pytest
import yaml

from tests.helpers.wait import wait_for
from tests.kube.test_kube_drain_cadence import TINY, USER, api, blocked_node, call, start_server

MCO = "/apis/machineconfiguration.openshift.io/v1"
ROLE = "node-role.kubernetes.io/rollout"
MCD = "machineconfiguration.openshift.io/"
POOL = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
        "metadata": {"name": "rollout"},
        "spec": {"machineConfigSelector": {"matchExpressions": [{"key": "machineconfiguration.openshift.io/role",
                                                                 "operator": "In", "values": ["worker", "rollout"]}]},
                 "nodeSelector": {"matchLabels": {ROLE: ""}}, "maxUnavailable": 1}}


def machine_config(name, path):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": "rollout"}},
            "spec": {"config": {"ignition": {"version": "3.4.0"},
                                "storage": {"files": [{"path": path, "contents": {"source": "data:,x"}}]}}}}


@pytest.fixture(scope="module")
def kube(kube_cluster_reset):
    return kube_cluster_reset.ready_for_server(USER, POOL)


def target(srv):
    r = srv.session().get(srv.url("/api/v1/pools/rollout"), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["spec"]["configuration"]["name"]


def rollout_status(srv):
    return srv.session().get(srv.url("/api/v1/pools/rollout"), timeout=10).json()["status"]["rollout"]


def report(srv, node, state, config):
    r = srv.node_session(node).post(srv.url(f"/api/v1/nodes/{node}/report"), timeout=10, data=json.dumps(
        {"pool": "rollout", "state": state, "currentConfig": config, "desiredConfig": config}))
    assert r.status_code == 200, r.text


def fetch(srv, node, why=None):
    """What the node is served as a member: (its desired config, X-Rollout); ``why`` gets the reason."""
    r = srv.node_session(node).get(srv.url("/config/rollout"), timeout=10)
    assert r.status_code == 200, r.text
    if why is not None:
        why.append(r.headers.get("X-Rollout-Reason"))
    return r.headers["X-Served-Config"], r.headers["X-Rollout"]


def drain(srv, node, config):
    return srv.node_session(node).post(srv.url(f"/api/v1/nodes/{node}/drain"), timeout=30,
                                       json={"pool": "rollout", "config": config})


def node(kube, name):
    return api(kube, f"/api/v1/nodes/{name}")


def tainted(kube, name):
    return any(t.get("key") == "UpdateInProgress" and t.get("effect") == "PreferNoSchedule"
               for t in node(kube, name)["spec"].get("taints") or [])


def test_the_server_targets_one_node_at_a_time_and_a_pdb_pinned_node_is_deferred_not_holding_the_rest(kube):
    nodes = ["r-pinned", "r-free-1", "r-free-2"]
    blocked_node(kube, "pinned", nodes[0])
    # The priority label puts it first (Nodes made in one second tie on age: sortNodeList's order by
    # creationTimestamp has a second's resolution, and then the name decides).
    call(kube, "PATCH", f"/api/v1/nodes/{nodes[0]}", {"metadata": {"labels": {
        ROLE: "", "node-config-server.openshift.io/rollout-priority": "10"}}}, merge=True)
    for name in nodes[1:]:
        kube.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"node-role.kubernetes.io/worker": "", ROLE: ""}}}))
    with start_server(kube, *TINY, "--drain-defer-after", "3") as srv:
        a = wait_for(lambda: target(srv), "the rollout pool's first target")
        for name in nodes:
            report(srv, name, "Done", a)
        wait_for(lambda: rollout_status(srv).get("counts") == {"Done": 3}, "three nodes Done on A")
        kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(machine_config("60-rollout", "/etc/rollout-b")))
        b = wait_for(lambda: (lambda t: t != a and t)(target(srv)), "B is the target")

        # The node controller's writes: desiredConfig on the targeted Node, the taint on the others,
        # the SetDesiredConfig Event on the pool.
        why = []
        assert fetch(srv, nodes[0], why) == (b, "updating"), why
        assert fetch(srv, nodes[1])[1] == "waiting"
        wait_for(lambda: node(kube, nodes[0])["metadata"]["annotations"].get(MCD + "desiredConfig") == b
                 and tainted(kube, nodes[1]) and tainted(kube, nodes[2]) and not tainted(kube, nodes[0]),
                 "desiredConfig on r-pinned, the UpdateInProgress taint on the Nodes still to update")

        def targeted_event():
            items = api(kube, "/api/v1/namespaces/node-config-server/events")["items"]
            return [e for e in items if e["reason"] == "SetDesiredConfig" and e["involvedObject"]["name"] == "rollout"]
        event = wait_for(targeted_event, "the SetDesiredConfig Event on the pool")[0]
        assert event["message"] == f"Targeted node r-pinned to MachineConfig: {b}"
        assert event["involvedObject"]["kind"] == "MachineConfigPool" and event["type"] == "Normal"
        assert event["source"]["component"] == "machineconfigcontroller-nodecontroller"

        # r-pinned's drain: cordoned, its pod held by the PDB; past --drain-defer-after it is given up.
        def deferred():
            r = drain(srv, nodes[0], b)
            assert r.status_code in (409, 429), r.text
            return r.status_code == 409 and r.json()
        answer = wait_for(deferred, "the pinned node's drain deferred", timeout=30)
        assert answer["status"] == "deferred" and "PodDisruptionBudget" in answer["reason"]
        pinned = node(kube, nodes[0])
        assert not pinned["spec"].get("unschedulable")  # uncordoned, its config kept
        assert not any(k.startswith("node-config-server.openshift.io/drain") for k in pinned["metadata"]["annotations"])
        assert api(kube, "/api/v1/namespaces/pinned/pods/app")["metadata"].get("deletionTimestamp") is None  # no PDB violated
        assert fetch(srv, nodes[0]) == (a, "deferred")
        status = rollout_status(srv)
        assert status["deferred"] == [nodes[0]] and "PodDisruptionBudget" in status["reasons"][nodes[0]]

        # The slot went to the next node; each free node updates in turn, then r-pinned is tried again.
        for name in nodes[1:]:
            wait_for(lambda name=name: fetch(srv, name) == (b, "updating"), f"{name} targeted")
            granted = wait_for(lambda name=name: (lambda r: r.status_code == 200 and r)(drain(srv, name, b)),
                               f"{name}'s drain (no pod on it)")
            assert granted.json()["granted"]
            report(srv, name, "Done", b)
            wait_for(lambda name=name: not node(kube, name)["spec"].get("unschedulable"), f"{name} uncordoned")
        wait_for(lambda: fetch(srv, nodes[0]) == (b, "updating"), "r-pinned tried again once the others are done")
        assert rollout_status(srv)["counts"] == {"Done": 2, "Updating": 1}
        # still pinned: its PDB has not changed; the admin lowers it and the drain finishes
        kube.kubectl("patch", "pdb", "app", "-n", "pinned", "--type", "merge", "-p",
                     json.dumps({"spec": {"minAvailable": 0}}))

        def evicted():
            r = drain(srv, nodes[0], b)
            pod = kube.get("/api/v1/namespaces/pinned/pods/app")
            if pod.status_code == 200 and pod.json()["metadata"].get("deletionTimestamp"):  # the kubelet's part
                kube.session().delete(f"{kube.url}/api/v1/namespaces/pinned/pods/app",
                                      json={"gracePeriodSeconds": 0}, timeout=10)
            return r.status_code == 200 and r.json()["granted"]
        wait_for(evicted, "r-pinned drained once its PDB allows it", timeout=60)
        report(srv, nodes[0], "Done", b)
        wait_for(lambda: rollout_status(srv)["counts"] == {"Done": 3}, "every node Done on B")
        wait_for(lambda: not any(tainted(kube, n) for n in nodes), "no taint once every node desires B")
        assert all(node(kube, n)["metadata"]["annotations"].get(MCD + "desiredConfig") == b for n in nodes)


REVIEWED = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "review",
                         "annotations": {"node-config-server.openshift.io/require-ack": "warnings,file-removal"}},
            "spec": {"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "review"}},
                     "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/review": ""}}}}


def test_a_misspelled_key_is_an_event_on_the_pool_and_its_rendering_waits_for_the_acknowledgement_annotation(kube):
    """Issue 49: ``storge:`` for ``storage:`` (spec.config keeps unknown fields through the API) is
    admitted, named in a Warning Event RenderWarnings on the pool and its RenderWarnings condition;
    with require-ack the rendering (which removes the file) is held (AwaitingAcknowledgement) until
    the pool's annotation acknowledges it, as ``kubectl annotate`` writes it."""
    mc = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
          "metadata": {"name": "60-review", "labels": {"machineconfiguration.openshift.io/role": "review"}},
          "spec": {"config": {"ignition": {"version": "3.4.0"},
                              "storage": {"files": [{"path": "/etc/review", "contents": {"source": "data:,x"}}]}}}}
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(REVIEWED))
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(mc))
    with start_server(kube, *TINY) as srv:
        def pool():
            return srv.session().get(srv.url("/api/v1/pools/review"), timeout=10).json()
        a = wait_for(lambda: pool()["spec"]["configuration"]["name"], "pool review's first target")
        mc["spec"]["config"]["storge"] = mc["spec"]["config"].pop("storage")
        kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(mc))
        held = wait_for(lambda: (lambda p: p["status"].get("review") and p)(pool()), "the rendering held for review")
        b = held["status"]["review"]["config"]
        assert held["spec"]["configuration"]["name"] == a and held["status"]["review"]["removes"] == ["/etc/review"]

        def events():
            items = api(kube, "/api/v1/namespaces/node-config-server/events")["items"]
            got = {e["reason"]: e for e in items if e["involvedObject"]["name"] == "review"}
            return "RenderWarnings" in got and "AwaitingAcknowledgement" in got and got
        got = wait_for(events, "the Warning Events RenderWarnings and AwaitingAcknowledgement on pool review")
        assert got["RenderWarnings"]["type"] == "Warning"
        assert "MachineConfig 60-review: $.spec.config.storge: unused key storge" in got["RenderWarnings"]["message"]
        assert "removes /etc/review" in got["AwaitingAcknowledgement"]["message"]

        def conditions():
            st = json.loads(kube.kubectl("get", "mcp", "review", "-o", "json").stdout).get("status") or {}
            return {c["type"]: c for c in st.get("conditions") or []}
        written = wait_for(lambda: (lambda c: c.get("RenderWarnings", {}).get("status") == "True" and c)(conditions()),
                           "kubectl get mcp review: RenderWarnings True")
        assert (written["RenderHeld"]["status"], written["RenderHeld"]["reason"]) == ("True", "AwaitingAcknowledgement")
        kube.kubectl("annotate", "mcp", "review", f"node-config-server.openshift.io/acknowledged={b}")
        wait_for(lambda: pool()["spec"]["configuration"]["name"] == b, "the acknowledged rendering as the target")
        wait_for(lambda: conditions()["RenderHeld"]["status"] == "False", "kubectl get mcp review: RenderHeld False")


HANDOVER = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "handover"},
            "spec": {"machineConfigSelector": {"matchExpressions": [{
                "key": "machineconfiguration.openshift.io/role", "operator": "In", "values": ["worker", "handover"]}]},
                "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/handover": ""}}, "maxUnavailable": 1}}


def test_a_drain_ask_refused_only_for_a_done_node_whose_uncordon_is_not_seen_yet_is_told_to_ask_again_in_1_s(kube):
    """Issue 53: a node Done and uncordoned, but still cordoned in the Node cache of the replica a
    drain ask reaches, took the pool's only slot there, and the ask was told Retry-After 30. The
    cache's view is made here as such a cache holds it (h-1 cordoned again with our drained-for
    mark after its Done): the refusal stands (the slot is the Node's while it is cordoned), with
    Retry-After 1 and the Node named; once the Node shows uncordoned, the next ask is granted."""
    nodes = ["h-1", "h-2"]
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(HANDOVER))
    for name in nodes:  # made in one second: the name decides the order, h-1 first
        kube.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/handover": ""}}}))
    with start_server(kube, *TINY) as srv:
        def pool():
            r = srv.session().get(srv.url("/api/v1/pools/handover"), timeout=10)
            assert r.status_code == 200, r.text
            return r.json()

        def ask(name, config):
            return srv.node_session(name).post(srv.url(f"/api/v1/nodes/{name}/drain"), timeout=30,
                                               json={"pool": "handover", "config": config})

        def say(name, config):
            r = srv.node_session(name).post(srv.url(f"/api/v1/nodes/{name}/report"), timeout=10, data=json.dumps(
                {"pool": "handover", "state": "Done", "currentConfig": config, "desiredConfig": config}))
            assert r.status_code == 200, r.text

        def served(name):
            r = srv.node_session(name).get(srv.url("/config/handover"), timeout=10)
            assert r.status_code == 200, r.text
            return r.headers["X-Served-Config"], r.headers["X-Rollout"]

        a = wait_for(lambda: pool()["spec"]["configuration"]["name"], "pool handover's first target")
        for name in nodes:
            say(name, a)
        wait_for(lambda: pool()["status"]["rollout"].get("counts") == {"Done": 2}, "both nodes Done on A")
        mc = machine_config("60-handover", "/etc/handover-b")
        mc["metadata"]["labels"]["machineconfiguration.openshift.io/role"] = "handover"
        kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(mc))
        b = wait_for(lambda: (lambda t: t != a and t)(pool()["spec"]["configuration"]["name"]), "B is the target")
        wait_for(lambda: served(nodes[0]) == (b, "updating"), "h-1 targeted")
        wait_for(lambda: (lambda r: r.status_code == 200 and r.json()["granted"])(ask(nodes[0], b)), "h-1's drain")
        assert node(kube, nodes[0])["spec"].get("unschedulable")
        say(nodes[0], b)
        wait_for(lambda: served(nodes[1]) == (b, "updating"), "h-2 targeted once h-1 is Done")

        # h-1 as a replica's Node cache that has not seen its uncordon shows it
        call(kube, "PATCH", f"/api/v1/nodes/{nodes[0]}", {"spec": {"unschedulable": True}, "metadata": {
            "annotations": {"node-config-server.openshift.io/drained-for": b}}}, merge=True)
        wait_for(lambda: pool()["status"]["unavailableMachineCount"] == 2, "h-1 cordoned in the server's Node cache")
        r = ask(nodes[1], b)
        assert r.status_code == 429, r.text
        assert r.headers["Retry-After"] == "1" and r.json()["retryAfter"] == 1, r.text
        assert "h-1 reported Done" in r.json()["reason"], r.text

        call(kube, "PATCH", f"/api/v1/nodes/{nodes[0]}", {"spec": {"unschedulable": None}, "metadata": {
            "annotations": {"node-config-server.openshift.io/drained-for": None}}}, merge=True)
        granted = wait_for(lambda: (lambda r: r.status_code == 200 and r)(ask(nodes[1], b)),
                           "h-2's drain once h-1 shows uncordoned")
        assert granted.json()["granted"]
