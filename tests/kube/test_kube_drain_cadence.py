"""A drain that cannot finish, against the real control plane (kube-apiserver 1.20.2 with RBAC,
kube-controller-manager's disruption controller for the PDB's status, OpenShift's CRDs): paced
as the MCO's drain controller paces it (small thresholds: ``serve --drain-*``), a DrainFailed
Event on the Node and ``mcc_drain_err`` past the threshold, visible in the pool view, the node
view, ``get pools`` and the MachineConfigNode, never dropped; it completes once the PDB goes.
Two replicas start one attempt between them; a single-node cluster never drains.

No kubelet runs: the test plays its part (the pod is bound at creation, marked Running/Ready
through the status subresource, and a graceful deletion is finished with gracePeriodSeconds 0).
The Infrastructure object (and CRD) it makes is cluster-wide: the module finds its worker's control
plane as a new one (``kube_cluster_reset``, tests/conftest.py), and the next module finds it gone.
"""

import contextlib
import json
import os
import threading
import time

import pytest
import requests
import yaml

from agent.server.cli import views
from agent.server.cluster.drainpacer import paced_drain
from agent.server.cluster.kube_drain import Drainer
from agent.server.rollout import draincadence as dc
from agent.server.rollout.draincadence import Cadence
from agent.server.store.kube.client import KubeClient, KubeError, load_kubeconfig
from tests.helpers.certs import make_tls
from tests.helpers.kube_cluster import kubelet_ready_status
from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

EXAMPLES = os.path.join(REPO, "examples", "state")
USER = "node-config-server-cadence"
TINY = ["--drain-attempt-timeout", "2", "--drain-retry", "1", "--drain-slow-retry", "1", "--drain-slow-after", "3",
        "--drain-fail-after", "4"]
INFRA_CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
             "metadata": {"name": "infrastructures.config.openshift.io"},
             "spec": {"group": "config.openshift.io", "scope": "Cluster",
                      "names": {"plural": "infrastructures", "singular": "infrastructure", "kind": "Infrastructure",
                                "listKind": "InfrastructureList"},
                      "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                          "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


@pytest.fixture(scope="module")
def kube(kube_cluster_reset):
    # Node state in SQLite here (start_server), but the drain's Events go to the server's own
    # namespace, which only deploy/rbac.yaml's namespaced Role grants (issue 38).
    return kube_cluster_reset.ready_for_server(USER)


def start_server(kube, *extra):
    # --store sqlite: node state in the data directory, whatever the Kubernetes backend's default
    # store; the drain works the same with every store (it is the Node's, on the API). Each node
    # proves its name with its kubelet's certificate (TLS): with this backend a name that is only
    # registered gets no drain slot.
    return ServerProcess(None, tls=make_tls(os.path.join(kube.base_dir, "server-tls")), token="b00tstrap",
                         workers=1, kubelet=kube.kubelet_cert,
                         extra_args=["--backend", "kubernetes", "--store", "sqlite", "--kubeconfig",
                                     kube.kubeconfig_for(USER), *extra])


@pytest.fixture(scope="module")
def server(kube):
    with start_server(kube, *TINY) as srv:
        yield srv


def api(kube, path):
    r = kube.get(path)
    assert r.status_code == 200, r.text
    return r.json()


def call(kube, method, path, body, merge=False):
    headers = {"Content-Type": "application/merge-patch+json"} if merge else {}
    r = kube.session().request(method, kube.url + path, data=json.dumps(body), headers=headers, timeout=10)
    assert r.status_code in (200, 201), r.text
    return r.json()


def blocked_node(kube, ns, node):
    """A worker Node running one Ready pod under a PDB that allows no disruption (minAvailable 1):
    no eviction can ever pass it."""
    kube.create_namespace(ns)
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": node, "labels": {"node-role.kubernetes.io/worker": ""}}}))
    call(kube, "POST", f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": ns, "labels": {"role": "app"}},
        "spec": {"nodeName": node, "automountServiceAccountToken": False,
                 "containers": [{"name": "c", "image": "registry.invalid/app:1"}]}})
    call(kube, "PATCH", f"/api/v1/namespaces/{ns}/pods/app/status",  # the kubelet's part: Running, Ready
         {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}, merge=True)
    call(kube, "POST", f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "app"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"role": "app"}}}})

    def observed():  # the real disruption controller has counted the pod
        pdb = api(kube, f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/app")
        st = pdb.get("status") or {}
        return st.get("observedGeneration") == pdb["metadata"]["generation"] and st.get("currentHealthy") == 1
    wait_for(observed, "the PDB's status from the disruption controller")


@contextlib.contextmanager
def kubelet_heartbeat(kube, node):
    """The Node's Ready condition posted now and every 3 s while inside, as its kubelet would: a
    Node not Ready holds a slot of its pool's maxUnavailable, as upstream. (The tests' node
    lifecycle controller waits an hour before it marks a silent Node NotReady, NO_NODE_LIFECYCLE;
    a cluster's marks one whose kubelet stopped posting after 40 s.)"""
    stop, failures = threading.Event(), []

    def beat():
        call(kube, "PATCH", f"/api/v1/nodes/{node}/status", kubelet_ready_status(), merge=True)

    def loop():
        while not stop.wait(3):
            try:
                beat()
            except requests.RequestException:  # a beat lost to a busy API server: the next one comes
                pass                            # well within the controller's 40 s grace, as a kubelet's
            except AssertionError as exc:  # refused: the test fails once it is out
                failures.append(str(exc))

    beat()
    thread = threading.Thread(target=loop, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    assert not failures, failures


def report(server, node, body):
    r = server.node_session(node).post(server.url(f"/api/v1/nodes/{node}/report"), data=json.dumps(body), timeout=10)
    assert r.status_code == 200, r.text


def events(kube, node, reason):
    items = api(kube, "/api/v1/namespaces/node-config-server/events")["items"]  # the server's namespace
    return [e for e in items if e["involvedObject"].get("name") == node and e["reason"] == reason]


def drain_annotations(kube, node):
    ann = api(kube, f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
    return {k: v for k, v in ann.items() if k in dc.KEYS}


def test_a_drain_that_cannot_finish_is_paced_visible_and_alerted_and_completes_once_unblocked(kube, server):
    ns, node = "blocked", "w-blocked"
    blocked_node(kube, ns, node)
    pools = server.session().get(server.url("/api/v1/pools"), timeout=10).json()["items"]
    target = next(p for p in pools if p["metadata"]["name"] == "worker")["spec"]["configuration"]["name"]
    report(server, node, {"pool": "worker", "state": "Working", "currentConfig": target, "desiredConfig": target})
    ask = server.node_session(node)
    answers = []

    def failed():
        r = ask.post(server.url(f"/api/v1/nodes/{node}/drain"), json={"pool": "worker", "config": target},
                     timeout=30)
        answers.append(r)
        return events(kube, node, "DrainThresholdExceeded") and events(kube, node, "DrainFailed")
    # --drain-fail-after 4: the attempt at 6 s (attempts at 0, 3 and 6 s: 2 s each, then 1 s apart)
    # emits DrainFailed; it fails at 8 s, begun past --drain-slow-after 3: DrainThresholdExceeded.
    failed_events = wait_for(failed, "DrainFailed and DrainThresholdExceeded Events", timeout=90)
    assert all(r.status_code == 429 and r.json()["status"] == "draining" for r in answers)
    assert all(int(r.headers["Retry-After"]) >= 1 for r in answers)
    assert "PodDisruptionBudget blocked/app" in answers[-1].json()["reason"]
    ev = failed_events[0]
    assert ev["type"] == "Warning" and ev["source"]["component"] == "machineconfigcontroller-nodecontroller"
    assert ev["involvedObject"]["kind"] == "Node" and ev["involvedObject"]["uid"]
    assert ev["message"] == f"node {node}: drain exceeded timeout: 4s. Will continue to retry."  # drainNode's words
    slow = events(kube, node, "DrainThresholdExceeded")[0]["message"]
    assert slow.startswith("Drain failed. Drain has been failing for more than 0.05 minutes. Waiting ")
    assert "PodDisruptionBudget blocked/app" in slow
    ann = drain_annotations(kube, node)
    assert ann[dc.FAILED] and int(ann[dc.ATTEMPTS]) >= 3 and "PodDisruptionBudget blocked/app" in ann[dc.LAST_ERROR]
    assert api(kube, f"/api/v1/nodes/{node}")["spec"]["unschedulable"] is True
    assert not api(kube, f"/api/v1/namespaces/{ns}/pods/app")["metadata"].get("deletionTimestamp")  # held by the PDB

    def pool_shows():
        items = server.session().get(server.url("/api/v1/pools"), timeout=10).json()["items"]
        worker = next(p for p in items if p["metadata"]["name"] == "worker")
        d = ((worker["status"]["drain"].get("nodes") or {}).get(node) or {})
        return worker if d.get("failing") else None
    worker = wait_for(pool_shows, "the pool view's drain of the node")
    line = views.pools_table([worker], time.time()).splitlines()[-1]
    assert line.startswith(f"worker: node {node} draining for ") and "FAILING" in line and "blocked/app" in line
    node_view = server.session().get(server.url(f"/api/v1/nodes/{node}"), timeout=10).json()
    assert "PodDisruptionBudget blocked/app" in node_view["drain"]["blockedBy"]
    assert "PodDisruptionBudget blocked/app" in views.describe_node(node_view, worker, time.time())
    metric = f'mcc_drain_err{{node="{node}"}} 1.0'
    wait_for(lambda: metric in server.session().get(server.url("/metrics"), timeout=10).text, "mcc_drain_err 1")

    def drained_condition():
        conds = (api(kube, f"/apis/machineconfiguration.openshift.io/v1/machineconfignodes/{node}").get("status")
                 or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Drained" and "blocked/app" in c["message"]), None)
    cond = wait_for(drained_condition, "the MachineConfigNode's Drained condition")
    assert cond["status"] == "Unknown" and cond["reason"] == "UpdateExecutedDrained"

    # node-agent gives up after its update.drainTimeout: the lease goes, the drain stays in sight
    r = ask.delete(server.url(f"/api/v1/nodes/{node}/drain"), timeout=10)
    assert r.status_code == 200 and r.json()["released"], r.text
    assert r.json()["actions"] == [] and "the Node stays cordoned" in r.json()["effect"]  # it said "uncordon"
    assert api(kube, f"/api/v1/nodes/{node}")["spec"]["unschedulable"] is True  # as the answer says
    items = server.session().get(server.url("/api/v1/pools"), timeout=10).json()["items"]
    worker = next(p for p in items if p["metadata"]["name"] == "worker")["status"]["drain"]
    assert node not in worker["holders"] and worker["nodes"][node]["failing"]

    kube.kubectl("delete", "pdb", "app", "-n", ns)  # unblocked: the next attempt evicts

    def granted():
        r = ask.post(server.url(f"/api/v1/nodes/{node}/drain"), json={"pool": "worker", "config": target},
                     timeout=30)
        pod = kube.get(f"/api/v1/namespaces/{ns}/pods/app")
        if pod.status_code == 200 and pod.json()["metadata"].get("deletionTimestamp"):  # the kubelet's part
            kube.session().delete(f"{kube.url}/api/v1/namespaces/{ns}/pods/app", json={"gracePeriodSeconds": 0},
                                  timeout=10)
        return r.status_code == 200 and r.json()
    answer = wait_for(granted, "the lease once the PDB is gone", timeout=60)
    assert answer["granted"] and answer["drain"]["done"]
    assert kube.get(f"/api/v1/namespaces/{ns}/pods/app").status_code == 404
    assert drain_annotations(kube, node) == {}  # the drain and its failure are over

    def condition_types():  # kube_sync rewrites the MCN once the Node's drain annotations are gone
        status = api(kube, f"/apis/machineconfiguration.openshift.io/v1/machineconfignodes/{node}").get("status") or {}
        by_type = {c["type"]: c for c in status.get("conditions") or []}
        return by_type if by_type.get("Drained", {}).get("status") == "True" else None
    # Drained True once drained, still cordoned (drain_controller.go drainNode)
    drained = wait_for(condition_types, "the Drained condition True once drained")
    assert drained["Drained"]["message"].startswith("Drained node.") and drained["Cordoned"]["status"] == "True"
    wait_for(lambda: "mcc_drain_err{" not in server.session().get(server.url("/metrics"), timeout=10).text,
             "mcc_drain_err gone once drained")
    report(server, node, {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target})
    # uncordoned by the time the Done is answered (as the MCD uncordons before it says Done), not by
    # the write-back loop later: until then the Node is unavailable and holds a slot of its pool
    assert not api(kube, f"/api/v1/nodes/{node}")["spec"].get("unschedulable")
    # Its Node goes: no kubelet posts its status, and a Node not Ready would hold worker's one slot
    # in the tests after (a CI run's loaded machine got there once the node lifecycle controller,
    # then run with its default grace periods, marked it NotReady; the single-node test's drain
    # was refused).
    kube.kubectl("delete", "node", node)


class StaleOnce:
    """A replica that read the Node just before another replica wrote it: its first GET of the
    Node answers the older object."""

    def __init__(self, client, node, stale):
        self.client, self.path, self.stale = client, f"/api/v1/nodes/{node}", stale

    def get(self, path, *a, **kw):
        if path == self.path and self.stale is not None:
            stale, self.stale = self.stale, None
            return stale
        return self.client.get(path, *a, **kw)

    def __getattr__(self, name):
        return getattr(self.client, name)


class NodeWrites:
    """A client that keeps the Node patches the API server took through it (``patches``) apart from
    those it refused (``refused``: a 409, another writer first). ``meddle`` runs once, just before
    the first Node patch: another writer's change (a fresh Node's first write meets the controller
    manager's on a busy machine, which a CI run saw)."""

    def __init__(self, client, meddle=None):
        self.client, self.patches, self.refused, self.meddle = client, [], [], meddle

    def merge_patch(self, path, body, *a, **kw):
        node = path.startswith("/api/v1/nodes/")
        if node and self.meddle is not None:
            meddle, self.meddle = self.meddle, None
            meddle()
        try:
            written = self.client.merge_patch(path, body, *a, **kw)
        except KubeError:
            if node:
                self.refused.append(body)
            raise
        if node:
            self.patches.append(body)
        return written

    def __getattr__(self, name):
        return getattr(self.client, name)


def test_a_drain_with_nothing_to_evict_is_one_node_write_the_cordon_and_our_mark(kube):
    """Issue 53: a first attempt wrote the cordon with the drain's state, and its round, finding
    nothing to evict, wrote again to remove that state: two Node writes. The state now follows only
    a round that leaves pods; an ask again on the drained Node writes nothing. A write refused
    because another writer changed the Node first is read again and written once."""
    node = "w-empty"
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": node, "labels": {"node-role.kubernetes.io/worker": ""}}}))
    client = NodeWrites(KubeClient(load_kubeconfig(kube.kubeconfig_for(USER))),
                        meddle=lambda: kube.kubectl("annotate", "node", node, "example.com/another-writer=1"))
    drainer = Drainer(client)
    try:
        paced = paced_drain(drainer, node, "rendered-x")
        assert paced is not None and paced.done and not paced.state.active
        assert client.refused and all(p["metadata"]["resourceVersion"] for p in client.refused)  # 409, read again
        assert len(client.patches) == 1 and client.patches[0]["spec"] == {"unschedulable": True}
        obj = api(kube, f"/api/v1/nodes/{node}")
        assert obj["spec"].get("unschedulable") is True and drain_annotations(kube, node) == {}
        assert obj["metadata"]["annotations"]["node-config-server.openshift.io/drained-for"] == "rendered-x"
        again = paced_drain(drainer, node, "rendered-x")
        assert again is not None and again.done and len(client.patches) == 1
    finally:
        client.close()
        kube.kubectl("delete", "node", node)  # cordoned, it would hold one of worker's maxUnavailable


def test_two_replicas_start_one_attempt_and_emit_one_event(kube):
    ns, node = "replicas", "w-replicas"
    blocked_node(kube, ns, node)
    client = KubeClient(load_kubeconfig(kube.kubeconfig_for(USER)))
    cadence = Cadence(attempt_timeout=2, retry=1, slow_retry=1, slow_after=3, fail_after=4)
    a = Drainer(client, cadence=cadence)
    t0 = float(int(time.time()))
    first = paced_drain(a, node, "rendered-x", now=t0)
    assert first is not None and not first.done and first.state.attempts == 1 and first.result is not None
    assert "PodDisruptionBudget replicas/app" in first.state.last_error
    # The attempt's 2 s are up: it failed, no round runs, the node waits for the next one at 3 s.
    between = paced_drain(a, node, "rendered-x", now=t0 + 2)
    assert between.result is None and not between.done and between.wait == 1
    assert between.state.next_attempt == t0 + 3 and between.state.attempt_started is None
    assert drain_annotations(kube, node)[dc.NEXT_ATTEMPT] == dc.iso(t0 + 3)
    # Well past the hour of this cadence, with the attempt timed out: the next attempt is due and
    # starts with a DrainFailed. Replica B read the Node before replica A wrote the new attempt.
    stale = client.get(f"/api/v1/nodes/{node}")
    by_a = paced_drain(a, node, "rendered-x", now=t0 + 10)
    b = Drainer(StaleOnce(client, node, stale), cadence=cadence)
    by_b = paced_drain(b, node, "rendered-x", now=t0 + 10)
    assert by_a.events == ["DrainFailed"] and by_b.events == []  # B got 409, read again, followed A's attempt
    assert by_b.state.attempts == by_a.state.attempts == 2
    assert len(events(kube, node, "DrainFailed")) == 1
    # The next attempt past the hour fails again: the same Event counts up (client-go's series),
    # with the newest message, rather than one more object every retry.
    paced_drain(a, node, "rendered-x", now=t0 + 12)  # the attempt's 2 s are up
    again = paced_drain(a, node, "rendered-x", now=t0 + 13)
    assert again.events == ["DrainFailed"]
    series = events(kube, node, "DrainFailed")
    assert len(series) == 1 and series[0]["count"] == 2, series
    assert series[0]["lastTimestamp"] == dc.iso(t0 + 13) and series[0]["firstTimestamp"] == dc.iso(t0 + 10)
    client.close()
    # Its Node, cordoned and never reported on, is unavailable to the pool (getUnavailableMachines):
    # it goes, so that it holds none of worker's maxUnavailable in the next test.
    kube.kubectl("delete", "node", node)


def test_a_single_node_cluster_never_drains(kube):
    ns, node = "single", "w-single"
    blocked_node(kube, ns, node)
    call(kube, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", INFRA_CRD)
    wait_for(lambda: kube.get("/apis/config.openshift.io/v1/infrastructures").status_code == 200,
             "the Infrastructure CRD served")
    call(kube, "POST", "/apis/config.openshift.io/v1/infrastructures", {
        "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure", "metadata": {"name": "cluster"},
        "status": {"controlPlaneTopology": "SingleReplica", "infrastructureTopology": "SingleReplica"}})
    try:
        with kubelet_heartbeat(kube, node), start_server(kube, *TINY) as srv:  # the topology is read once per process
            r = srv.node_session(node).post(srv.url(f"/api/v1/nodes/{node}/drain"),
                                            json={"pool": "worker", "config": "rendered-next"}, timeout=30)
        assert r.status_code == 200 and r.json()["granted"], r.text
        drain = r.json()["drain"]
        assert drain["required"] is False and "controlPlaneTopology SingleReplica" in drain["reason"]
        assert "drainRequired" in drain["reason"]
        assert not api(kube, f"/api/v1/nodes/{node}")["spec"].get("unschedulable")  # not even cordoned
        assert not api(kube, f"/api/v1/namespaces/{ns}/pods/app")["metadata"].get("deletionTimestamp")
        assert drain_annotations(kube, node) == {}
    finally:
        kube.kubectl("delete", "infrastructure", "cluster", check=False)
        kube.kubectl("delete", "node", node, check=False)
