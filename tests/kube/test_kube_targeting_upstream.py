"""The node controller's targeting rules (openshift/machine-config-operator 7ff337a4,
pkg/controller/node/node_controller.go and pkg/controller/common/layered_node_state.go; ours in
agent/server/rollout/candidates.py) on a real kube-apiserver (``serve --backend kubernetes``, node
state in the API: the default ``--store kubernetes``):

- a layered pool (a MachineOSConfig and a succeeded MachineOSBuild of its rendered config) is
  updated to the build's image one Node at a time and finishes: a Node Done on the build keeps its
  desiredImage annotation and is never targeted again (``CheckNodeCandidacyForUpdate`` with
  ``IsDesiredEqualToBuild``; one ``SetDesiredConfigAndOSImage`` Event per Node);
- a paused pool is frozen (``syncMachineConfigPool`` returns before its targeting and its taint
  loop): a newer rendering retargets nobody, no annotation or taint is written, and once unpaused
  the rollout goes on to it;
- a Node that is not ready (cordoned by the admin, or its Ready condition False) is no candidate
  and counts as unavailable, holding a slot of maxUnavailable (``getAllCandidateMachines``,
  ``IsUnavailableForUpdate``, ``CheckNodeReady``); the pool's ``status.rollout`` says why;
- ours: a Node running a pod that the pool's blocking-pod selector matches (Pod objects bound to it
  by ``spec.nodeName``; no kubelet) is not targeted, named with its pod, while the next Node is, and
  is targeted in its turn once the pod is deleted (agent/server/rollout/blockingpods.py).

The tests play node-agent over HTTP (fetch as a member, report) and the kubelet (the Node objects,
their Ready condition); each test has a pool and Nodes of its own. Every version of a test's Nodes
is recorded from a watch (``NodeHistory``), so what the tests assert about the Nodes holds at every
moment, not only when they look. "Several sync rounds" are proved by ``rounds``: Nodes added to a
pool of their own (``tick``) and counted in its MachineConfigPool's status, which the server's pool
loop writes in the same round as it writes the Nodes' targeting. Modelled on test_kube_rollout.py;
the module finds its worker's control plane as a new one (``kube_cluster_reset``,
tests/conftest.py), whose controller manager never marks a Node NotReady by itself
(``NO_NODE_LIFECYCLE``, tests/helpers/kube_cluster.py).
"""

import datetime
import json
import threading

import pytest
import requests
import yaml

from agent.core.served import ANN, read_served
from tests.helpers.certs import make_tls
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

MCO = "/apis/machineconfiguration.openshift.io/v1"
MCD = "machineconfiguration.openshift.io/"
USER = "node-config-server-targeting"
EVENTS = "/api/v1/namespaces/node-config-server/events"  # the server's namespace
IMG = "registry.example.com/layered/os-image@sha256:" + "c" * 64


def role(pool):
    return f"node-role.kubernetes.io/{pool}"


def pool_object(name, max_unavailable):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": name},
            "spec": {"machineConfigSelector": {"matchExpressions": [{
                "key": "machineconfiguration.openshift.io/role", "operator": "In", "values": ["worker", name]}]},
                "nodeSelector": {"matchLabels": {role(name): ""}}, "maxUnavailable": max_unavailable}}


def machine_config(pool, name, path):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": pool}},
            "spec": {"config": {"ignition": {"version": "3.4.0"},
                                "storage": {"files": [{"path": path, "contents": {"source": "data:,x"}}]}}}}


def apply(kube, obj):
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))


@pytest.fixture(scope="module")
def kube(kube_cluster_reset):
    return kube_cluster_reset.ready_for_server(USER, pool_object("tick", 1))


@pytest.fixture(scope="module")
def server(kube):
    """The server as deploy/rbac.yaml's user, node state in the API (--store kubernetes, the
    backend's default); each node presents its kubelet's client certificate."""
    with ServerProcess(None, tls=make_tls(f"{kube.base_dir}/server-tls"), token="b00tstrap", workers=1,
                       kubelet=kube.kubelet_cert,
                       extra_args=["--backend", "kubernetes", "--kubeconfig", kube.kubeconfig_for(USER)]) as srv:
        yield srv


def api(kube, path):
    r = kube.get(path)
    assert r.status_code == 200, r.text
    return r.json()


def patch(kube, path, body):
    r = kube.session().patch(kube.url + path, data=json.dumps(body),
                             headers={"Content-Type": "application/merge-patch+json"}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def make_nodes(kube, pool, names):
    """Node objects as their kubelets register them, in this order (sortNodeList: oldest first, the
    name breaking a tie of creationTimestamp's second, so this order either way)."""
    for name in names:
        apply(kube, {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"node-role.kubernetes.io/worker": "", role(pool): ""}}})


def pool_view(srv, pool):
    r = srv.session().get(srv.url(f"/api/v1/pools/{pool}"), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def target(srv, pool):
    return pool_view(srv, pool)["spec"]["configuration"]["name"]


def rollout(srv, pool):
    return pool_view(srv, pool)["status"]["rollout"]


def mcp(kube, pool):
    return api(kube, f"{MCO}/machineconfigpools/{pool}")


def fetch(srv, pool, node):
    """What node-agent is served as a member: the response (X-Rollout, X-Served-Config, the doc)."""
    r = srv.node_session(node).get(srv.url(f"/config/{pool}"), timeout=10)
    assert r.status_code == 200, r.text
    return r


def served(srv, pool, node):
    r = fetch(srv, pool, node)
    return r.headers["X-Served-Config"], r.headers["X-Rollout"]


def report(srv, pool, node, state, current, desired=None, **images):
    body = {"pool": pool, "state": state, "currentConfig": current, "desiredConfig": desired or current, **images}
    r = srv.node_session(node).post(srv.url(f"/api/v1/nodes/{node}/report"), timeout=10, data=json.dumps(body))
    assert r.status_code == 200, r.text


def node(kube, name):
    return api(kube, f"/api/v1/nodes/{name}")


def annotations(obj):
    return (obj.get("metadata") or {}).get("annotations") or {}


def targeting_of(obj):
    """What the node controller writes on a Node: desiredConfig, desiredImage and the taints."""
    ann = annotations(obj)
    return {"desiredConfig": ann.get(MCD + "desiredConfig"), "desiredImage": ann.get(MCD + "desiredImage"),
            "taints": sorted(json.dumps(t, sort_keys=True) for t in (obj.get("spec") or {}).get("taints") or [])}


def tainted(obj):
    return any(t.get("key") == "UpdateInProgress" and t.get("effect") == "PreferNoSchedule"
               for t in (obj.get("spec") or {}).get("taints") or [])


def events(kube, pool, reason):
    return [e for e in api(kube, EVENTS)["items"]
            if e["reason"] == reason and e["involvedObject"]["name"] == pool]


def all_done(srv, pool, count):
    wait_for(lambda: rollout(srv, pool).get("counts") == {"Done": count}, f"every node of pool {pool} Done")


def pool_done_on_its_first_target(kube, srv, pool, nodes, max_unavailable):
    """A pool of its own with ``nodes`` (the oldest first), every one reporting Done on the pool's
    first target, which is returned, and those reports written back to the Nodes (their
    desiredConfig: a test that records the Nodes' versions from here on sees no write-back of
    this, which the server does after it answers)."""
    apply(kube, pool_object(pool, max_unavailable))
    make_nodes(kube, pool, nodes)
    a = wait_for(lambda: target(srv, pool), "the pool's first target")
    for name in nodes:
        report(srv, pool, name, "Done", a)
    all_done(srv, pool, len(nodes))
    for name in nodes:
        wait_for(lambda name=name: annotations(node(kube, name)).get(MCD + "desiredConfig") == a,
                 f"{name}'s Done on A written back to its Node")
    return a


class NodeHistory:
    """Every version of the Nodes with label ``selector``, in the API server's order: a list, then
    watches from its resourceVersion (each ends after a few seconds and the next goes on from the
    last version seen). ``versions``: (name, the Node) in order."""

    def __init__(self, kube, selector):
        self.kube, self.selector = kube, selector
        self.versions, self.errors = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-history", daemon=True)

    def __enter__(self):
        listed = api(self.kube, f"/api/v1/nodes?labelSelector={self.selector}")
        for obj in listed["items"]:
            self.versions.append((obj["metadata"]["name"], obj))
        self._rv = listed["metadata"]["resourceVersion"]
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the Node watch did not end"

    def _run(self):
        session = self.kube.session()
        while not self._stop.is_set():
            params = {"watch": "1", "labelSelector": self.selector, "resourceVersion": self._rv, "timeoutSeconds": "3"}
            try:
                with session.get(self.kube.url + "/api/v1/nodes", params=params, stream=True, timeout=(10, 30)) as r:
                    for line in r.iter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # e.g. 410 Gone: a gap in the history, which the test refuses
                            self.errors.append(event["object"])
                            self._stop.set()
                            return
                        obj = event["object"]
                        self._rv = obj["metadata"]["resourceVersion"]
                        self.versions.append((obj["metadata"]["name"], obj))
            except requests.RequestException as exc:  # the watch is opened again from the last version
                if not self._stop.is_set():
                    self.errors.append(repr(exc))
                    return

    def states(self):
        """Each moment's Nodes: (the resourceVersion that made it, name -> the Node), one per
        recorded version."""
        assert not self.errors, self.errors
        now = {}
        for name, obj in list(self.versions):
            now[name] = obj
            yield revision(obj), dict(now)


def revision(obj):
    """An object's or a list's resourceVersion: etcd's revision, which orders every write of the
    API server (kube-apiserver 1.20 with etcd 3; the tests compare them, a client should not)."""
    return int(obj["metadata"]["resourceVersion"])


def rounds(kube, n):
    """Wait for ``n`` more of the server's pool rounds to end: each adds a Node to pool ``tick`` and
    waits for its MachineConfigPool's status.machineCount, which the pool loop writes before it
    writes the Nodes' targeting (kube_sync.sync_pools). Seeing count k+1 means the round that wrote
    count k has ended, its targeting writes included."""
    have = len(api(kube, f"/api/v1/nodes?labelSelector={role('tick')}")["items"])
    for i in range(have, have + n):
        make_nodes(kube, "tick", [f"tick-{i}"])
        wait_for(lambda i=i: (mcp(kube, "tick").get("status") or {}).get("machineCount") == i + 1,
                 f"pool tick counts {i + 1} Node(s) (a round of the server's pool loop)")


# -- 1. a layered pool finishes ---------------------------------------------------------------------

def layered(kube, pool, rendered):
    """The pool's MachineOSConfig with status.currentImagePullSpec and a succeeded MachineOSBuild
    of ``rendered`` (examples/state/machineosconfigs, machineosbuilds), as the build controller
    leaves them: spec by the admin (kubectl apply), status through the status subresource."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    apply(kube, {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSConfig",
                 "metadata": {"name": pool},
                 "spec": {"machineConfigPool": {"name": pool}, "imageBuilder": {"imageBuilderType": "Job"},
                          "renderedImagePushSecret": {"name": "push-secret"},
                          "renderedImagePushSpec": "registry.example.com/layered/os-image:latest",
                          "containerFile": [{"content": "FROM configs AS final\nRUN dnf install -y tcpdump\n"}]}})
    patch(kube, f"{MCO}/machineosconfigs/{pool}/status", {"status": {"currentImagePullSpec": IMG}})
    build = f"{pool}-{rendered.rsplit('-', 1)[1]}"
    apply(kube, {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSBuild",
                 "metadata": {"name": build},
                 "spec": {"machineOSConfig": {"name": pool}, "machineConfig": {"name": rendered},
                          "renderedImagePushSpec": "registry.example.com/layered/os-image:latest"}})
    conditions = [{"type": kind, "status": status, "reason": kind, "message": kind, "lastTransitionTime": now}
                  for kind, status in (("Building", "False"), ("Succeeded", "True"), ("Failed", "False"))]
    patch(kube, f"{MCO}/machineosbuilds/{build}/status",
          {"status": {"conditions": conditions, "digestedImagePushSpec": IMG}})


@pytest.mark.parametrize("pool,reports_image", [("layered", True), ("layeredold", False)],
                         ids=["node-reports-desired-image", "node-reports-no-desired-image"])
def test_a_layered_pool_targets_each_node_to_the_build_one_at_a_time_finishes_updated_and_never_retargets_a_done_node(
        kube, server, pool, reports_image):
    """``reports_image``: node-agent reports the desiredImage it was targeted to (as it does now);
    without it (a node-agent from before), the server's own record keeps the Node's annotation."""
    nodes = [f"{pool}-{i}" for i in range(3)]
    apply(kube, pool_object(pool, 1))
    make_nodes(kube, pool, nodes)
    a = wait_for(lambda: target(server, pool), "the layered pool's first target")
    base = wait_for(lambda: kube.get(f"{MCO}/machineconfigs/{a}").ok and
                    api(kube, f"{MCO}/machineconfigs/{a}")["spec"]["osImageURL"], f"the rendered {a} in the API")
    for name in nodes:  # the nodes run A on the base image before the pool is layered
        report(server, pool, name, "Done", a, currentImage=base)
    all_done(server, pool, 3)

    with NodeHistory(kube, role(pool)) as history:
        layered(kube, pool, a)
        order, reported = [], {}
        for _ in nodes:
            def one_updating():
                got = {n: served(server, pool, n) for n in nodes if n not in order}
                up = [n for n, s in got.items() if s[1] == "updating"]
                assert len(up) <= 1, got
                return up and (up[0], got)
            name, got = wait_for(one_updating, f"node {len(order) + 1} of 3 served 'updating'")
            assert got[name][0] == a, got
            wait_for(lambda name=name: (lambda ann: ann.get(MCD + "desiredConfig") == a and
                                        ann.get(MCD + "desiredImage") == IMG)(annotations(node(kube, name))),
                     f"{name}'s desiredConfig and desiredImage annotations")
            rest = [n for n in nodes if n not in order and n != name]
            assert [served(server, pool, n) for n in rest] == [(a, "waiting")] * len(rest)
            # What node-agent reads: the image in the headers, the served annotations, osImageURL.
            r = fetch(server, pool, name)
            doc = read_served(r.json())
            assert (r.headers["X-Served-Config"], r.headers["X-Served-Image"]) == (a, IMG)
            assert doc.annotations[ANN + "desiredImage"] == IMG and doc.encapsulated["spec"]["osImageURL"] == IMG
            desired = {"desiredImage": IMG} if reports_image else {}  # the served annotations' desiredImage
            report(server, pool, name, "Working", a, **desired)
            # Any write after this revision comes after the Done report was sent.
            reported[name] = revision(api(kube, "/api/v1/nodes?limit=1"))
            report(server, pool, name, "Done", a, currentImage=IMG, **desired)
            wait_for(lambda name=name: annotations(node(kube, name)).get(MCD + "currentImage") == IMG,
                     f"{name} Done on the build on its Node")
            order.append(name)
        assert order == nodes  # oldest first (sortNodeList)
        all_done(server, pool, 3)
        status = wait_for(lambda: (lambda st: st.get("updatedMachineCount") == 3 and st)(mcp(kube, pool).get("status") or {}),
                          "kubectl get mcp: updatedMachineCount 3")
        assert {c["type"]: c["status"] for c in status["conditions"]}["Updated"] == "True"
        assert (status["machineCount"], status["configuration"]["name"]) == (3, a)
        rounds(kube, 3)  # the server goes on deciding: nobody is targeted again

    # Never two Nodes targeted to the build and not Done on it at once. Done: its Node says so, or
    # its Done report was sent before this version (the server writes the Node's Done and the next
    # Node's targeting in separate loops: the first may trail the second by a few milliseconds).
    for rv, moment in history.states():
        busy = [n for n, obj in moment.items() if annotations(obj).get(MCD + "desiredImage") == IMG
                and not (annotations(obj).get(MCD + "state") == "Done"
                         and annotations(obj).get(MCD + "currentImage") == IMG)
                and not rv > reported.get(n, rv)]
        assert len(busy) <= 1, (busy, rv, reported, {n: annotations(o) for n, o in moment.items()})
    for name in nodes:  # desiredImage set once and kept
        seen = [annotations(obj).get(MCD + "desiredImage") for n, obj in history.versions if n == name]
        first = seen.index(IMG)
        assert set(seen[:first]) == {None} and set(seen[first:]) == {IMG}, (name, seen)
        assert annotations(node(kube, name)).get(MCD + "desiredImage") == IMG
    got = sorted(e["message"] for e in events(kube, pool, "SetDesiredConfigAndOSImage"))
    assert got == [f"Targeted node {n} to MachineConfig: {a} / Image: {IMG}" for n in nodes]
    assert rollout(server, pool)["counts"] == {"Done": 3}


# -- 2. paused means frozen --------------------------------------------------------------------------

def test_a_paused_pool_writes_no_node_and_retargets_nobody_to_a_newer_rendering_and_goes_on_to_it_once_unpaused(
        kube, server):
    pool, nodes = "paused", ["p-0", "p-1", "p-2"]
    a = pool_done_on_its_first_target(kube, server, pool, nodes, 1)
    apply(kube, machine_config(pool, "60-paused-b", "/etc/paused-b"))
    b = wait_for(lambda: (lambda t: t != a and t)(target(server, pool)), "B is the target")
    # p-0 is targeted to B and has not started (it reports Done on A); the others wait, tainted.
    wait_for(lambda: served(server, pool, "p-0") == (b, "updating"), "p-0 served B, updating")
    assert [served(server, pool, n) for n in nodes[1:]] == [(a, "waiting")] * 2
    objs = wait_for(lambda: (lambda o: annotations(o["p-0"]).get(MCD + "desiredConfig") == b and not tainted(o["p-0"])
                             and tainted(o["p-1"]) and tainted(o["p-2"]) and o)({n: node(kube, n) for n in nodes}),
                    "p-0 desires B; the UpdateInProgress taint on p-1 and p-2")
    before = {n: targeting_of(o) for n, o in objs.items()}

    with NodeHistory(kube, role(pool)) as history:
        kube.kubectl("patch", "mcp", pool, "--type", "merge", "-p", json.dumps({"spec": {"paused": True}}))
        wait_for(lambda: "the pool is paused" in rollout(server, pool).get("waitReason", ""), "the pause seen")
        apply(kube, machine_config(pool, "61-paused-c", "/etc/paused-c"))
        c = wait_for(lambda: (lambda t: t not in (a, b) and t)(target(server, pool)), "C is the pool's rendering")
        why = wait_for(lambda: (lambda w: f"nothing is targeted to {c}" in w and w)(rollout(server, pool).get(
            "waitReason", "")), "the rollout paused with C as its target")
        wait_for(lambda: mcp(kube, pool)["spec"]["configuration"]["name"] == c,
                 "kubectl get mcp: spec.configuration C (the server's pool loop wrote it)")
        rounds(kube, 3)  # the pool loop's rounds that follow: their targeting writes are done too
        after = {n: targeting_of(node(kube, n)) for n in nodes}
        p0 = fetch(server, pool, "p-0")
        others = [served(server, pool, n) for n in nodes[1:]]
        status = rollout(server, pool)

    assert after == before
    for name, obj in history.versions:  # no write of desiredConfig, desiredImage or a taint meanwhile
        assert targeting_of(obj) == before[name], (name, targeting_of(obj), before[name])
    assert len(history.versions) >= 3  # the listed versions at least: the watch ran
    assert (p0.headers["X-Served-Config"], p0.headers["X-Rollout"]) == (b, "updating")  # still B, not C
    assert "an earlier target" in p0.headers["X-Rollout-Reason"]
    assert others == [(a, "waiting")] * 2  # nothing new served 'updating'
    assert why.startswith(f"the pool is paused: nothing is targeted to {c}")
    assert "3 node(s) wait for it: p-0, p-1, p-2" in why
    assert status["counts"] == {"Updating": 1, "Waiting": 2} and status["waiting"] == ["p-1", "p-2"]
    assert status["target"] == c
    assert [e["message"] for e in events(kube, pool, "SetDesiredConfig")] == [f"Targeted node p-0 to MachineConfig: {b}"]

    # Unpaused: p-0 (not started on B) takes C in its slot, then each node in turn.
    kube.kubectl("patch", "mcp", pool, "--type", "merge", "-p", json.dumps({"spec": {"paused": False}}))
    for name in nodes:
        wait_for(lambda name=name: served(server, pool, name) == (c, "updating"), f"{name} served C, updating")
        wait_for(lambda name=name: annotations(node(kube, name)).get(MCD + "desiredConfig") == c,
                 f"{name}'s desiredConfig C")
        report(server, pool, name, "Working", a, c)
        report(server, pool, name, "Done", c)
    all_done(server, pool, 3)
    wait_for(lambda: (mcp(kube, pool).get("status") or {}).get("updatedMachineCount") == 3
             and not any(tainted(node(kube, n)) for n in nodes), "pool paused Updated on C, no taint left")


# -- 3. a node that is not ready is not picked --------------------------------------------------------

def cordon(kube, name):
    kube.kubectl("cordon", name)  # the admin's: spec.unschedulable


def not_ready(kube, name):
    """The kubelet's: the Ready condition False."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch(kube, f"/api/v1/nodes/{name}/status", {"status": {"conditions": [{
        "type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "container runtime is down",
        "lastHeartbeatTime": now, "lastTransitionTime": now}]}})


@pytest.mark.parametrize("pool,make_unready,why", [
    ("cordoned", cordon, "node cordoned-0 is reporting Unschedulable"),
    ("notready", not_ready, "node notready-0 is reporting NotReady=False"),
], ids=["cordoned", "notready"])
def test_a_node_not_ready_is_not_targeted_and_holds_a_slot_of_max_unavailable_and_the_pool_says_why(
        kube, server, pool, make_unready, why):
    nodes = [f"{pool}-{i}" for i in range(3)]  # the oldest first
    a = pool_done_on_its_first_target(kube, server, pool, nodes, 2)
    make_unready(kube, nodes[0])
    wait_for(lambda: rollout(server, pool).get("notReady", {}).get(nodes[0]) == why, f"{nodes[0]} seen not ready")

    with NodeHistory(kube, role(pool)) as history:
        apply(kube, machine_config(pool, f"60-{pool}-b", f"/etc/{pool}-b"))
        b = wait_for(lambda: (lambda t: t != a and t)(target(server, pool)), "B is the target")
        # maxUnavailable 2, the not-ready node holds one: the oldest ready one only is targeted.
        wait_for(lambda: served(server, pool, nodes[1]) == (b, "updating"), f"{nodes[1]} served B, updating")
        wait_for(lambda: annotations(node(kube, nodes[1])).get(MCD + "desiredConfig") == b,
                 f"{nodes[1]}'s desiredConfig B")
        rounds(kube, 3)
        status = rollout(server, pool)
        answers = [served(server, pool, n) for n in (nodes[0], nodes[2])]
        desired = {n: annotations(node(kube, n)).get(MCD + "desiredConfig") for n in nodes}

    assert answers == [(a, "waiting")] * 2
    assert desired == {nodes[0]: a, nodes[1]: b, nodes[2]: a}
    for name, obj in history.versions:  # neither waiting Node ever desired B
        assert name == nodes[1] or annotations(obj).get(MCD + "desiredConfig") == a, (name, annotations(obj))
    assert status["updating"] == [nodes[1]] and status["waiting"] == [nodes[0], nodes[2]], status
    assert why in status["waitReason"] and status["notReady"] == {nodes[0]: why}, status
    assert [e["message"] for e in events(kube, pool, "SetDesiredConfig")] == [
        f"Targeted node {nodes[1]} to MachineConfig: {b}"]


# -- 4. a node running a blocking pod waits (ours) ------------------------------------------------------

BLOCKING = "app in (batch-job),!may-interrupt"


def pod_on(kube, ns, name, node, labels):
    """A Pod bound to ``node`` (spec.nodeName set as the scheduler's binding sets it; no kubelet
    runs it, so its phase stays Pending, which counts as running as kured counts it)."""
    r = kube.session().post(f"{kube.url}/api/v1/namespaces/{ns}/pods", timeout=10, json={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "automountServiceAccountToken": False,
                 "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}})
    assert r.status_code == 201, r.text


def node_row(srv, name):
    r = srv.session().get(srv.url(f"/api/v1/nodes/{name}"), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_node_running_a_blocking_pod_waits_named_while_the_next_one_goes_and_goes_in_its_turn_once_it_is_gone(
        kube, server):
    pool = "blocking"
    nodes = [f"{pool}-{i}" for i in range(3)]  # the oldest first
    a = pool_done_on_its_first_target(kube, server, pool, nodes, 1)
    ns = kube.create_namespace("blocking-jobs")
    pod_on(kube, ns, "batch-0", nodes[0], {"app": "batch-job"})
    pod_on(kube, ns, "batch-1", nodes[1], {"app": "batch-job", "may-interrupt": ""})  # the selector lets it go
    pod_on(kube, ns, "done-1", nodes[1], {"app": "batch-job"})
    patch(kube, f"/api/v1/namespaces/{ns}/pods/done-1/status", {"status": {"phase": "Succeeded"}})  # ended
    patch(kube, f"{MCO}/machineconfigpools/{pool}", {"metadata": {"annotations": {
        "node-config-server.openshift.io/blocking-pod-selector": BLOCKING}}})
    wait_for(lambda: rollout(server, pool).get("blockingPods", {}).get("selector") == BLOCKING,
             "the pool reads its blocking-pod selector")

    apply(kube, machine_config(pool, f"60-{pool}-b", f"/etc/{pool}-b"))
    b = wait_for(lambda: (lambda t: t != a and t)(target(server, pool)), "B is the target")
    # maxUnavailable 1: the oldest node runs a blocking pod, so the next one is targeted instead
    wait_for(lambda: served(server, pool, nodes[1]) == (b, "updating"), f"{nodes[1]} served B, updating")
    status = wait_for(lambda: (lambda r: r.get("blockingPods", {}).get("waiting") and r)(rollout(server, pool)),
                      f"{nodes[0]} named as waiting for its blocking pod")
    assert status["blockingPods"] == {"selector": BLOCKING, "waiting": 1, "nodes": {nodes[0]: [f"{ns}/batch-0"]}}
    assert status["updating"] == [nodes[1]] and status["waiting"] == [nodes[0], nodes[2]], status
    assert f"{nodes[0]} ({ns}/batch-0)" in status["waitReason"], status
    row = node_row(server, nodes[0])["rollout"]
    assert row["state"] == "Waiting" and row["reason"].startswith(f"blocking pod(s) {ns}/batch-0 run on it"), row
    assert served(server, pool, nodes[0]) == (a, "waiting")
    assert annotations(node(kube, nodes[0])).get(MCD + "desiredConfig") == a

    report(server, pool, nodes[1], "Done", b)  # its slot is free: the next candidate is the third node
    wait_for(lambda: served(server, pool, nodes[2]) == (b, "updating"), f"{nodes[2]} served B, updating")
    assert served(server, pool, nodes[0]) == (a, "waiting")

    r = kube.session().delete(f"{kube.url}/api/v1/namespaces/{ns}/pods/batch-0", params={"gracePeriodSeconds": 0},
                              timeout=10)
    assert r.status_code == 200, r.text
    wait_for(lambda: rollout(server, pool)["blockingPods"].get("waiting") == 0, "the pod is gone: nobody waits for it")
    assert served(server, pool, nodes[0]) == (a, "waiting")  # maxUnavailable 1 is still taken
    report(server, pool, nodes[2], "Done", b)
    wait_for(lambda: served(server, pool, nodes[0]) == (b, "updating"), f"{nodes[0]} served B in its turn")
    wait_for(lambda: annotations(node(kube, nodes[0])).get(MCD + "desiredConfig") == b, f"{nodes[0]}'s desiredConfig B")
