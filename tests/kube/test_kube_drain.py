"""The drain (agent/server/cluster/kube_drain.py) against the real control plane, side by side
with ``kubectl drain``.

No kubelet or scheduler runs in tests/helpers/kube_cluster.py, so **the test plays both**: the
``Kubelet`` thread below heartbeats the test's Node objects (Ready), binds each unbound pod of the
test's namespaces to its node (to a spare node once that node is cordoned, as the scheduler
would), writes each bound pod's status Running/Ready through the status subresource, and finishes
graceful deletions (a pod with ``deletionTimestamp`` is deleted with ``gracePeriodSeconds: 0``, as
a kubelet does once it has stopped the containers). The API server, the ReplicaSet and DaemonSet
controllers and the disruption controller (PodDisruptionBudget status) are the real ones. The
drainer runs as a user bound only to deploy/rbac.yaml's ClusterRole.
"""

import json
import os
import re
import threading
import time

import pytest

from agent.server.cluster.kube_drain import Drainer
from agent.server.rollout import drainplan
from agent.server.rollout.drainplan import DrainSettings
from agent.server.store.kube.client import KubeClient, KubeError, KubeUnavailable, load_kubeconfig
from tests.helpers import paths
from tests.helpers.kube_cluster import kubelet_ready_status, unique
from tests.helpers.wait import wait_for

REPO = paths.REPO
NO_FLAGS = DrainSettings(force=False, ignore_all_daemonsets=False, delete_emptydir_data=False)
KUBECTL_FLAGS = ["--ignore-daemonsets", "--delete-emptydir-data", "--force"]


# --- the pure plan (kubectl's filters), no cluster needed

def pod(name, owner=None, phase="Running", volumes=(), annotations=None, deleting=None):
    meta = {"name": name, "namespace": "ns", "uid": name + "-uid", "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = deleting
    return {"metadata": meta, "spec": {"volumes": list(volumes)}, "status": {"phase": phase}}


def test_the_plan_follows_kubectls_filters_in_order():
    def exists(namespace, name):
        return (namespace, name) == ("ns", "ds")
    pods = [pod("ds-live", ("DaemonSet", "ds")), pod("ds-orphan", ("DaemonSet", "gone")),
            pod("ds-done", ("DaemonSet", "ds"), phase="Succeeded"),
            pod("mirror", annotations={drainplan.MIRROR_ANNOTATION: "x"}),
            pod("scratch", ("ReplicaSet", "rs"), volumes=[{"name": "v", "emptyDir": {}}]),
            pod("bare"), pod("bare-done", phase="Failed"), pod("web", ("ReplicaSet", "rs")),
            pod("old", ("ReplicaSet", "rs"), deleting="2020-01-01T00:00:00Z")]
    mco = {p.name: (p.action, p.message) for p in drainplan.plan_drain(pods, DrainSettings(), exists).pods}
    assert mco == {"ds-live": ("skip", drainplan.DAEMONSET_WARNING),
                   "ds-orphan": ("evict", ""),  # kubectl's warning is dropped by the later filters
                   "ds-done": ("evict", ""), "mirror": ("skip", ""), "scratch": ("evict", ""),
                   "bare": ("evict", drainplan.UNMANAGED_WARNING), "bare-done": ("evict", ""),
                   "web": ("evict", ""), "old": ("evict", "")}
    strict = drainplan.plan_drain(pods, DrainSettings(force=False, ignore_all_daemonsets=False,
                                                      delete_emptydir_data=False, skip_wait_for_delete_timeout=5),
                                  exists)
    got = {p.name: (p.action, p.message) for p in strict.pods}
    assert (got["ds-live"], got["ds-orphan"], got["scratch"], got["bare"]) == (
        ("refuse", drainplan.DAEMONSET_FATAL), ("refuse", 'daemonsets.apps "gone" not found'),
        ("refuse", drainplan.LOCAL_STORAGE_FATAL), ("refuse", drainplan.UNMANAGED_FATAL))
    assert got["old"] == ("skip", "") and got["ds-done"] == ("evict", "") and got["bare-done"] == ("evict", "")
    assert strict.refused and sorted(strict.errors()) == sorted([
        "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): ns/ds-live",
        'cannot delete daemonsets.apps "gone" not found: ns/ds-orphan',
        "cannot delete Pods with local storage (use --delete-emptydir-data to override): ns/scratch",
        "cannot delete Pods that declare no controller (use --force to override): ns/bare"])


def test_pdb_selectors_match_as_the_api_does():
    sel = {"matchLabels": {"app": "a"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]}
    assert drainplan.selector_matches(sel, {"app": "a", "tier": "x"})
    assert not drainplan.selector_matches(sel, {"app": "a", "tier": "y"})
    assert not drainplan.selector_matches(None, {"app": "a"})
    assert drainplan.selector_matches({}, {"app": "a"}) and not drainplan.selector_matches({}, {}, False)
    assert drainplan.selector_matches({"matchExpressions": [{"key": "k", "operator": "DoesNotExist"}]}, {})


class FakeAPI:
    """The calls a round makes, answered from ``pods`` and ``answers`` (pod name -> exception)."""

    def __init__(self, pods, answers):
        self.pods, self.answers, self.evictions = pods, answers, []

    def list(self, path, params=None):
        return (self.pods, "1") if path == "/api/v1/pods" else ([{"metadata": {"name": "guard"}, "spec": {
            "selector": {}}, "status": {"currentHealthy": 2, "desiredHealthy": 2}}], "1")

    def get(self, path, params=None):
        return {"resources": [{"name": "pods/eviction", "group": "policy", "version": "v1"}]}

    def create(self, path, body):
        self.evictions.append((body["apiVersion"], body["metadata"]["name"], body["deleteOptions"]["preconditions"]))
        if body["metadata"]["name"] in self.answers:
            raise self.answers.pop(body["metadata"]["name"])


def test_a_round_answers_each_eviction_outcome_and_waits_for_uids():
    pods = [pod(n, ("ReplicaSet", "rs")) for n in ("ok", "gone", "pdb", "two-pdbs")]
    api = FakeAPI(pods, {"gone": KubeError(404, "NotFound", "", "x"), "two-pdbs": KubeUnavailable("500 InternalError"),
                         "pdb": KubeError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                                                  "disruption budget.", "x")})
    drainer = Drainer(api)
    first = drainer.drain_once("n")
    assert (first.evicted, first.too_many_requests, first.failed[0][0]) == (["ns/ok"], 1, "ns/two-pdbs")
    assert first.blocked[0][0] == "ns/pdb" and "PodDisruptionBudget ns/guard: 2 healthy" in first.blocked[0][1]
    assert first.still_running == ["ns/ok", "ns/pdb", "ns/two-pdbs"] and not first.done
    assert api.evictions[0] == ("policy/v1", "ok", {"uid": "ok-uid"})  # discovery's version; the UID
    api.pods = [pods[0], pods[2]]  # "ok" still terminating: not evicted again; "pdb" now allowed
    assert drainer.drain_once("n").evicted == ["ns/pdb"] and len(api.evictions) == 5
    api.pods = [dict(pods[0], metadata=dict(pods[0]["metadata"], uid="new"))]  # a new pod of that name
    assert drainer.drain_once("n").evicted == ["ns/ok"]
    api.pods = []
    assert drainer.drain_once("n").done


def test_an_api_without_eviction_fails_each_pod_saying_to_drain_by_hand_and_deletes_nothing():
    """kubectl falls back to a pod DELETE, which deploy/rbac.yaml never grants: ours says so."""
    api = FakeAPI([pod("a", ("ReplicaSet", "rs"))], {})
    api.get = lambda path, params=None: {"resources": [{"name": "pods", "version": "v1"}]}
    deleted = []
    api.delete = lambda path, body=None: deleted.append(path)
    result = Drainer(api).drain_once("n")
    assert not result.done and result.evicted == [] and deleted == [] and api.evictions == []
    assert result.failed[0][0] == "ns/a" and "no pods/eviction subresource" in result.failed[0][1]
    assert "drain this node by hand" in result.failed[0][1]


# --- the cluster: the test's kubelet and scheduler

class Kubelet(threading.Thread):
    """Plays the scheduler and the kubelet for ``nodes`` (namespace -> node); see the module
    docstring. A pod named in ``held`` that is already terminating is finished only once another
    pod of its namespace has been deleted (a drain has begun: it listed the node first)."""

    def __init__(self, kc, spare):
        super().__init__(daemon=True)
        self.kc, self.spare = kc, spare
        self.nodes, self.held, self.started = {}, set(), set()  # namespace -> node; (ns, pod); ns
        self.halt, self.s, self._beat = threading.Event(), kc.session(), 0.0
        self.errors = []  # every failure of a step: the fixture fails the test on any

    def run(self):
        while not self.halt.is_set():
            try:
                self.step()
            except Exception as exc:  # kept, not swallowed: the fixture's teardown asserts there is none
                self.errors.append(f"{type(exc).__name__}: {exc}")
                if len(self.errors) > 20:
                    return
            self.halt.wait(0.2)

    def call(self, method, path, body=None, merge=False):
        headers = {"Content-Type": "application/merge-patch+json"} if merge else {}
        return self.s.request(method, self.kc.url + path, json=body, headers=headers, timeout=10)

    def step(self):
        if time.monotonic() - self._beat > 3:
            for node in {*self.nodes.values(), self.spare}:
                self.call("PATCH", f"/api/v1/nodes/{node}/status", kubelet_ready_status(), merge=True)
            self._beat = time.monotonic()
        for ns, node in list(self.nodes.items()):
            cordoned = self.call("GET", f"/api/v1/nodes/{node}").json()["spec"].get("unschedulable")
            for p in self.call("GET", f"/api/v1/namespaces/{ns}/pods").json()["items"]:
                self.tend(ns, node, cordoned, p)

    def tend(self, ns, node, cordoned, p):
        meta, base = p["metadata"], f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}"
        if meta.get("deletionTimestamp"):
            if (ns, meta["name"]) in self.held and ns not in self.started:
                return
            self.started.add(ns)
            self.call("DELETE", base, {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
        elif not p["spec"].get("nodeName"):
            target = self.spare if cordoned else node
            self.call("POST", base + "/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {
                "name": meta["name"]}, "target": {"apiVersion": "v1", "kind": "Node", "name": target}})
        elif not any(c.get("type") == "Ready" and c.get("status") == "True"
                     for c in p.get("status", {}).get("conditions", [])):
            self.call("PATCH", base + "/status", {"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"}]}}, merge=True)


@pytest.fixture(scope="module")
def drainer_client(kube_cluster):
    """A client for a user bound only to deploy/rbac.yaml's ClusterRole."""
    kube_cluster.kubectl("apply", "-f", os.path.join(REPO, "deploy", "rbac.yaml"))
    user = unique("drainer")
    kube_cluster.kubectl("create", "clusterrolebinding", user, "--clusterrole=node-config-server", f"--user={user}")
    cfg = kube_cluster.kubeconfig_for(user)
    wait_for(lambda: kube_cluster.kubectl("auth", "can-i", "create", "pods", "--subresource=eviction", f"--as={user}",
                                          check=False).stdout.strip() == "yes", "the binding in effect")
    client = KubeClient(load_kubeconfig(cfg))
    yield client
    client.close()
    kube_cluster.kubectl("delete", "clusterrolebinding", user, check=False)


@pytest.fixture
def kubelet(kube_cluster):
    spare = unique("spare")
    made = {"nodes": [spare], "namespaces": []}
    kube_cluster.kubectl("create", "-f", "-", input=node_doc(spare))
    k = Kubelet(kube_cluster, spare)
    k.made = made  # what the fixture deletes afterwards
    k.start()
    yield k
    k.halt.set()
    k.join(10)
    assert not k.errors, f"the test's kubelet failed: {k.errors[:5]}"
    for ns in made["namespaces"]:
        kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    kube_cluster.kubectl("delete", "node", *made["nodes"], "--wait=false", check=False)


def node_doc(name):
    return json.dumps({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": name, "labels": {"drain-test/node": name}}})


def post(kc, path, body):
    r = kc.session().post(kc.url + path, json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()


def pod_spec(volumes=(), node=None):
    spec = {"automountServiceAccountToken": False, "containers": [{"name": "c", "image": "registry.invalid/pause:1"}],
            "volumes": list(volumes), "nodeName": node}
    return {k: v for k, v in spec.items() if v}


def replicaset(name, replicas, role, volumes=()):
    labels = {"role": role}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod_spec(volumes)}}}


def pdb(name, role, min_available):
    return {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"role": role}}}}


def pods_on(kc, node):
    return kc.get("/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"}).json()["items"]


def ready(p):
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in p.get("status", {}).get("conditions", []))


def new_node(kc, kubelet, tag):
    """A Node and a namespace whose pods the test's kubelet runs on it."""
    node, ns = unique(f"{tag}-node"), unique(tag)
    kc.kubectl("create", "-f", "-", input=node_doc(node))
    kubelet.made["nodes"].append(node)
    kubelet.made["namespaces"].append(kc.create_namespace(ns))
    kubelet.nodes[ns] = node
    return ns, node


def pdb_status(kc, ns, name, **want):
    def check():
        got = kc.get(f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/{name}").json()
        status = got.get("status", {})
        if status.get("observedGeneration") != got["metadata"]["generation"]:
            return None
        return status if all(status.get(k) == v for k, v in want.items()) else None
    return wait_for(check, f"PodDisruptionBudget {name} status {want}")


ROLES = {"ds": 1, "mirror": 1, "scratch": 1, "bare": 1, "web": 2, "leaving": 1}


def build_copy(kc, kubelet, tag):
    """One node's worth of the side-by-side state: a DaemonSet pod, a mirror pod, an emptyDir pod
    of a ReplicaSet, an unreplicated pod, two ReplicaSet pods under a PDB (minAvailable 1), and an
    unreplicated pod already terminating (its deletion held until a drain has begun)."""
    ns, node = new_node(kc, kubelet, tag)
    api = f"/apis/apps/v1/namespaces/{ns}"
    ds_labels = {"role": "ds"}
    post(kc, api + "/daemonsets", {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds"}, "spec": {
        "selector": {"matchLabels": ds_labels}, "updateStrategy": {"type": "OnDelete"},
        "template": {"metadata": {"labels": ds_labels}, "spec": dict(
            pod_spec(), nodeSelector={"drain-test/node": node}, tolerations=[{"operator": "Exists"}])}}})
    post(kc, api + "/replicasets", replicaset("scratch", 1, "scratch", [{"name": "tmp", "emptyDir": {}}]))
    post(kc, api + "/replicasets", replicaset("web", 2, "web"))
    post(kc, f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets", pdb("web", "web", 1))
    for name, annotations in (("bare", {}), ("mirror", {drainplan.MIRROR_ANNOTATION: "hash"}), ("leaving", {})):
        post(kc, f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "labels": {"role": name}, "annotations": annotations}, "spec": pod_spec(node=node)})
    kubelet.held.add((ns, "leaving"))

    def all_running():
        pods = [p for p in pods_on(kc, node) if ready(p)]
        roles = [p["metadata"]["labels"].get("role") for p in pods]
        return pods if {r: roles.count(r) for r in set(roles)} == ROLES else None
    wait_for(all_running, f"the pods of {node} running")
    r = kc.session().delete(f"{kc.url}/api/v1/namespaces/{ns}/pods/leaving", timeout=10)
    assert r.status_code == 200 and r.json()["metadata"].get("deletionTimestamp"), r.text  # held for now
    pdb_status(kc, ns, "web", currentHealthy=2, disruptionsAllowed=1)
    return ns, node


def outcomes(before, evicted, refused):
    """role -> sorted outcomes of its pods: evicted, refused, skipped (left when the drain refused)."""
    out = {}
    for p in before:
        name, role = p["metadata"]["name"], p["metadata"]["labels"]["role"]
        state = "evicted" if name in evicted else "refused" if name in refused else \
            "left" if refused else "skipped"
        out.setdefault(role, []).append(state)
    return {r: sorted(v) for r, v in out.items()}


def warning_roles(text, before):
    """kubectl's warning text as {message: sorted roles of the pods it names}."""
    role = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["labels"]["role"] for p in before}
    out = {}
    for part in text.split("; "):
        message, names = part.split(": ", 1)
        out[message] = sorted(role[n] for n in names.split(", "))
    return out


def kubectl_drain(kc, ns, node, flags):
    before = pods_on(kc, node)
    out = kc.kubectl("drain", node, *flags, "--timeout=60s", check=False, timeout=120)
    text = out.stdout + out.stderr
    evicted = set(re.findall(rf"evicting pod {re.escape(ns)}/(\S+)", text))
    errors = "\n".join(line for line in out.stderr.splitlines() if line.startswith("error:"))
    refused = set(re.findall(rf"{re.escape(ns)}/([a-z0-9.-]+)", errors))
    return outcomes(before, evicted, refused), out, before


def drain_until_done(drainer, node, timeout=60):
    """Rounds of ``drain_once`` 0.5 s apart (the retry cadence) until one is done or refused."""
    rounds = []

    def next_round():
        rounds.append(drainer.drain_once(node))
        return rounds[-1].done or bool(rounds[-1].refused)

    wait_for(next_round, f"a drain round of {node} done or refused", timeout, interval=0.5)
    return rounds


def our_drain(kc, client, node, settings):
    before = pods_on(kc, node)
    drainer = Drainer(client, settings)
    drainer.cordon(node)
    rounds = drain_until_done(drainer, node)
    evicted = {name.split("/", 1)[1] for r in rounds for name in r.evicted}
    refused = {p.name for p in rounds[0].refused}
    return outcomes(before, evicted, refused), rounds, before


def test_side_by_side_with_kubectl_drain_mco_flags(kube_cluster, kubelet, drainer_client):
    kc = kube_cluster
    ns_a, node_a = build_copy(kc, kubelet, "kubectl")
    ns_b, node_b = build_copy(kc, kubelet, "ours")
    theirs, out, before_a = kubectl_drain(kc, ns_a, node_a, KUBECTL_FLAGS)
    assert out.returncode == 0, out.stderr
    ours, rounds, before_b = our_drain(kc, drainer_client, node_b, DrainSettings())
    assert rounds[-1].done, rounds[-1].to_dict()
    expected = {"ds": ["skipped"], "mirror": ["skipped"], "scratch": ["evicted"], "bare": ["evicted"],
                "web": ["evicted", "evicted"], "leaving": ["evicted"]}
    assert theirs == expected, out.stdout + out.stderr
    assert ours == expected
    # the same warnings kubectl prints, for the same kinds of pods
    kubectl_warning = [line for line in out.stderr.splitlines() if line.lower().startswith("warning: ")]
    assert len(kubectl_warning) == 1, out.stderr
    assert warning_roles(kubectl_warning[0].split(": ", 1)[1], before_a) == \
        warning_roles(rounds[0].warnings, before_b) == \
        {drainplan.DAEMONSET_WARNING: ["ds"], drainplan.UNMANAGED_WARNING: ["bare", "leaving"]}
    # and nothing evictable is left on either node
    for node in (node_a, node_b):
        left = {p["metadata"]["labels"]["role"] for p in pods_on(kc, node)}
        assert left == {"ds", "mirror"}, (node, left)


def test_side_by_side_with_kubectl_drain_no_flags_refuses_the_same_pods(kube_cluster, kubelet,
                                                                       drainer_client):
    kc = kube_cluster
    ns_a, node_a = build_copy(kc, kubelet, "kubectl-strict")
    ns_b, node_b = build_copy(kc, kubelet, "ours-strict")
    theirs, out, _ = kubectl_drain(kc, ns_a, node_a, [])
    assert out.returncode != 0
    ours, rounds, _ = our_drain(kc, drainer_client, node_b, NO_FLAGS)
    expected = {"ds": ["refused"], "mirror": ["left"], "scratch": ["refused"], "bare": ["refused"],
                "web": ["left", "left"], "leaving": ["refused"]}
    assert theirs == expected, out.stderr
    assert ours == expected
    for line in rounds[0].errors:  # kubectl's error texts, each naming the same kind of pods
        assert line.split(f": {ns_b}/", 1)[0] in out.stderr, (line, out.stderr)
    assert not rounds[0].evicted and not rounds[0].done
    for node in (node_a, node_b):  # nothing was evicted on either
        roles = [p["metadata"]["labels"]["role"] for p in pods_on(kc, node)]
        assert {r: roles.count(r) for r in set(roles)} == ROLES


def test_a_pdb_blocks_until_a_replacement_is_ready(kube_cluster, kubelet, drainer_client):
    kc = kube_cluster
    ns, node = new_node(kc, kubelet, "pdb")
    post(kc, f"/apis/apps/v1/namespaces/{ns}/replicasets", replicaset("guarded", 2, "guarded"))
    post(kc, f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets", pdb("guard", "guarded", 2))
    wait_for(lambda: len([p for p in pods_on(kc, node) if ready(p)]) == 2, "two guarded pods running")
    pdb_status(kc, ns, "guard", currentHealthy=2, desiredHealthy=2, disruptionsAllowed=0)
    originals = {p["metadata"]["name"] for p in pods_on(kc, node)}

    drainer = Drainer(drainer_client)
    assert drainer.cordon(node)
    first = drainer.drain_once(node)
    assert not first.done and not first.evicted
    assert first.too_many_requests == 2 and len(first.blocked) == 2
    for _, why in first.blocked:
        assert "disruption budget" in why and f"PodDisruptionBudget {ns}/guard" in why, why
    assert set(first.still_running) == {f"{ns}/{n}" for n in originals}

    # A replacement: the ReplicaSet scaled up; its new pod lands on the spare node (this one is
    # cordoned) and becomes Ready; the disruption controller then allows one disruption.
    r = kc.session().patch(f"{kc.url}/apis/apps/v1/namespaces/{ns}/replicasets/guarded", json={"spec": {"replicas": 3}},
                           headers={"Content-Type": "application/merge-patch+json"}, timeout=10)
    assert r.status_code == 200, r.text
    pdb_status(kc, ns, "guard", currentHealthy=3, disruptionsAllowed=1)
    rounds = drain_until_done(drainer, node)
    assert rounds[-1].done, rounds[-1].to_dict()
    assert rounds[0].evicted  # the first round after the PDB allowed it evicted a pod
    assert {n.split("/", 1)[1] for r in rounds for n in r.evicted} == originals
    assert not [p for p in pods_on(kc, node)]


def test_cordon_is_idempotent_and_uncordon_clears_it(kube_cluster, kubelet, drainer_client):
    kc = kube_cluster
    _, node = new_node(kc, kubelet, "cordon")
    drainer = Drainer(drainer_client)
    assert drainer.eviction_version() == "policy/v1beta1"  # from discovery: a 1.20 API server
    assert drainer.cordon(node) is True
    assert drainer.cordon(node) is False  # already cordoned: no write
    assert kc.get(f"/api/v1/nodes/{node}").json()["spec"]["unschedulable"] is True
    assert drainer.uncordon(node) is True and drainer.uncordon(node) is False
    assert "unschedulable" not in kc.get(f"/api/v1/nodes/{node}").json()["spec"]
