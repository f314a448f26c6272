"""What the kube backend writes, rendered by its pure functions from the examples' state,
validates against OpenShift's CRDs (deploy/crds/: structural schema and x-kubernetes-validations
CEL rules, tests/helpers/crd_validate.py): MachineConfigPool status
(``kube_sync.pool_status``), rendered MachineConfig (``kube_sync.rendered_object``) and every
MachineConfigNode write (kube_mcn.McnWriter's creates, spec and status patches; the node store's
annotation patches and its create without --backend kubernetes), each stored version validated
against the one before it, as the API server judges a transition (the rules with ``oldSelf``).
The MCNs are held by tests/helpers/fakekube.py; tests/kube/ checks the same objects as a real API
server stores them.
"""

import functools
import json
import os
import shutil
import threading
import types

import pytest
import yaml

pytestmark = pytest.mark.cel  # cel-python; the RHEL 9 run (Python 3.9) does not collect this module

from agent.server.cluster import kube_mcn, kube_pools, kube_sync  # noqa: E402
from agent.server.cluster.kube_drain import DRAINED_FOR  # noqa: E402
from agent.server.cluster.service import validate_report  # noqa: E402
from agent.server.http.app import App  # noqa: E402
from agent.server.rollout import draincadence, firstboots, mcnconditions  # noqa: E402
from agent.server.rollout.draincadence import DrainState  # noqa: E402
from agent.server.store.kube import drainlog, nodestore  # noqa: E402
from agent.server.store.kube.mcnrecord import DRAIN_LOG, REPORT, report_annotation  # noqa: E402
from agent.server.store.nodestore import NodeRecord  # noqa: E402
from tests.helpers import crd_validate, paths  # noqa: E402
from tests.helpers.fakekube import FakeCache, FakeKube, merge_patch  # noqa: E402

EXAMPLE = os.path.join(paths.REPO, "examples", "state")
NOW = "2026-11-27T04:00:00Z"
WORKER = {"node-role.kubernetes.io/worker": ""}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    state = tmp_path_factory.mktemp("crd-written") / "state"
    shutil.copytree(EXAMPLE, state)
    a = App(str(state), reload_interval=0.0)
    a.warm()
    yield a
    a.close()


def pool_object(name):
    with open(os.path.join(EXAMPLE, "machineconfigpools", f"{name}.yaml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def target(app, pool):
    return app.cluster.store.pools()[pool].target


def report(app, node, **body):
    app.cluster.record_report(node, validate_report(dict({"pool": "worker", "labels": WORKER}, **body)))


def test_the_status_of_every_example_pool_validates_against_the_crd(app):
    report(app, "w-done", state="Done", currentConfig=target(app, "worker"), desiredConfig=target(app, "worker"))
    report(app, "w-degraded", state="Degraded", reason="disk full", currentConfig=target(app, "worker"),
           desiredConfig=target(app, "worker"))
    views = app.cluster.pool_views(pending=False, nodes=0)
    assert sorted(views) == ["infra", "master", "worker"]  # every example pool, not an empty loop
    for name, view in views.items():
        obj = dict(pool_object(name), status=kube_sync.pool_status(view, 1, None, NOW))
        assert crd_validate.problems(obj) == [], name


def test_every_pools_spec_and_status_configuration_with_its_source_validates_against_the_crd(app):
    """kube_pools: spec.configuration (render_controller.go syncGeneratedMachineConfig) and
    status.configuration, name and source, as KubeSync patches them onto the pool."""
    for name, view in app.cluster.pool_views(pending=False, nodes=0).items():
        obj = pool_object(name)
        config = view["spec"]["configuration"]["name"]
        merge_patch(obj, kube_pools.spec_patch(obj, config, app.cluster.sources_of(config)))
        status = kube_sync.pool_status(view, 2, None, NOW)
        status["configuration"] = kube_pools.configuration(status["configuration"]["name"],
                                                           app.cluster.sources_of(status["configuration"]["name"]), obj)
        obj["status"] = status
        assert obj["spec"]["configuration"]["source"] and obj["status"]["configuration"]["source"], name
        assert crd_validate.problems(obj) == [], name


def test_every_rendered_machineconfig_validates_against_the_crd(app):
    for pool in ("master", "worker", "infra"):
        name = target(app, pool)
        obj = kube_sync.rendered_object(name, pool, "uid-" + pool, app.cluster.spec_of(name), "node-config-server 1")
        assert crd_validate.problems(obj) == [], name




# -- MachineConfigNodes: every write path, each stored version against the one before -------------

MCD = "machineconfiguration.openshift.io/"


def writer(kube, specs=None, first_boot=None):
    cluster = types.SimpleNamespace(spec_of=lambda name: (specs or {}).get(name),
                                    first_boot_decision=first_boot or (lambda report, pool: None),
                                    store=types.SimpleNamespace())
    w = kube_mcn.McnWriter(cluster, kube)
    w.cache = FakeCache(kube, kube_mcn.slim_mcn)
    return w


def node(name, current="", desired="", cordoned=False, drain=None, drained_for="", phase=""):
    annotations = {MCD + k: v for k, v in (("currentConfig", current), ("desiredConfig", desired)) if v}
    annotations.update({k: v for k, v in draincadence.annotations(drain or DrainState()).items() if v})
    if drained_for:
        annotations[DRAINED_FOR] = drained_for
    obj = {"metadata": {"name": name, "uid": "uid-" + name, "annotations": annotations},
           "spec": {"unschedulable": True} if cordoned else {}}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def every_write_valid(kube):
    """Each stored version against the CRD, judged as a transition from the one before it."""
    assert kube.history, "nothing was written"
    for old, new in kube.history:
        assert crd_validate.problems(new, old=old) == [], (old, new)


def report_of(state, current, desired, **more):
    return dict({"pool": "worker", "state": state, "currentConfig": current, "desiredConfig": desired,
                 "_at": 1.8e9}, **more)


def test_every_machineconfignode_write_of_an_update_validates_against_the_crd_as_a_transition(app):
    a = target(app, "worker")
    b = "rendered-worker-" + "b" * 32
    kube = FakeKube()
    w = writer(kube, {a: app.cluster.spec_of(a), b: dict(app.cluster.spec_of(a), osImageURL="quay.io/x@sha256:1")})
    w.write("w1", node("w1"), "worker")  # a Node node-agent does not report for (yet): the defaults
    w.write("w1", node("w1", a, a), "worker", report_of("Done", a, a))
    draining = DrainState(started=1.8e9, attempts=2, last_error="ns/app: refused by PodDisruptionBudget ns/app")
    w.write("w1", node("w1", a, b, cordoned=True, drain=draining, drained_for=b), "worker", report_of("Done", a, b))
    w.write("w1", node("w1", a, b, cordoned=True, drained_for=b), "worker", report_of("Done", a, b))
    w.write("w1", node("w1", a, b, cordoned=True, drained_for=b), "worker", report_of("Working", a, b), base=a)
    pending = report_of("Working", b, b, reason="reboot pending")
    w.write("w1", node("w1", a, b, cordoned=True, drained_for=b), "worker", pending, base=a)
    w.write("w1", node("w1", b, b), "worker", report_of("Done", b, b), base=a)
    w.write("w1", node("w1", b, b), "worker", report_of("Degraded", b, b, reason="on-disk drift: /etc/x"))
    every_write_valid(kube)
    old, new = kube.history[-1]  # the transition rules are judged: a status going back is refused
    assert any("must not decrease" in p for p in crd_validate.problems(
        dict(new, status=dict(new["status"], observedGeneration=1)), old=old))
    mcn = kube.objects["w1"]
    assert mcn["status"]["observedGeneration"] == mcn["metadata"]["generation"] == 3  # desired: none, a, b
    assert mcn["status"]["configVersion"] == {"desired": b, "current": b}
    assert [o["uid"] for o in mcn["metadata"]["ownerReferences"]] == ["uid-w1"]
    statuses = [(old or {}).get("status", {}).get("configVersion") for old, _ in kube.history]
    assert {"desired": "not-yet-set"} in statuses  # current omitted until the Node has one


def test_the_machineconfignode_during_a_drain_validates_and_says_cordoned_and_draining(app):
    a, kube = target(app, "worker"), FakeKube()
    w = writer(kube)
    w.write("w2", node("w2", a, a), "worker", report_of("Done", a, a))
    w.write("w2", node("w2", a, "rendered-x", cordoned=True, drain=DrainState(started=1.8e9, attempts=1),
                       drained_for="rendered-x"), "worker", report_of("Done", a, "rendered-x"))
    every_write_valid(kube)
    conds = {c["type"]: c["status"] for c in kube.objects["w2"]["status"]["conditions"]}
    assert (conds["Cordoned"], conds["Drained"], conds["UpdateExecuted"]) == ("True", "Unknown", "Unknown")


def test_the_machineconfignode_of_a_node_that_selects_no_pool_validates_against_the_crd():
    kube = FakeKube()
    writer(kube).write("lonely", node("lonely"), None)
    every_write_valid(kube)
    assert kube.objects["lonely"]["spec"]["pool"] == {"name": "not-yet-set"}  # GetPrimaryPoolNameForMCN


def test_no_machineconfignode_is_made_without_its_node_nor_for_a_pending_or_provisioning_one(app):
    """No path makes one before its Node exists: the writer needs the Node, and the node store does
    not make one with --backend kubernetes (makes_mcns False: the report is kept in the registration)."""
    kube = FakeKube()
    w = writer(kube)
    assert w.write("ghost", None, "worker", report_of("Done", "a", "a")) is None
    assert w.write("new", node("new", phase="Pending"), "worker") is None
    assert w.write("new", node("new", phase="Provisioning"), "worker") is None
    store = store_on(kube, makes_mcns=False)
    with pytest.raises(nodestore.NoMachineConfigNode):
        nodestore.KubeNodeStore._patch_mcn(store, "ghost", {"metadata": {"annotations": {REPORT: "{}"}}}, "worker", {})
    assert kube.calls == [("PATCH", "ghost")] and kube.objects == {}


def store_on(kube, makes_mcns=True):
    """The node store's MCN writes (``_patch_mcn``/``_create_mcn``) on ``kube``, without its watches."""
    store = types.SimpleNamespace(client=kube, namespace="node-config-server", makes_mcns=makes_mcns)
    store._create_mcn = functools.partial(nodestore.KubeNodeStore._create_mcn, store)
    return store


def test_the_node_stores_writes_on_a_machineconfignode_validate_against_the_crd(app):
    """Its report and drain-log annotations and store label on the MCN kube_mcn made; and, without
    --backend kubernetes (node state in the API, objects from a directory), the MCN it makes."""
    a, kube = target(app, "worker"), FakeKube()
    writer(kube).write("w3", node("w3", a, a), "worker", report_of("Done", a, a))
    store = store_on(kube)
    value = report_annotation(NodeRecord("w3", "worker", "labels", "", report_of("Done", a, a), 1.8e9))
    nodestore.KubeNodeStore._patch_mcn(store, "w3", {"metadata": {"annotations": {REPORT: value}}}, "worker", {})
    version = kube.objects["w3"]["metadata"]["resourceVersion"]
    nodestore.KubeNodeStore._patch_mcn(store, "w3", {"metadata": {"annotations": {nodestore.DRAIN_LOG: "[]"},
                                                                  "resourceVersion": version}}, "worker", {})
    nodestore.KubeNodeStore._patch_mcn(store, "dir-node", {"metadata": {"annotations": {REPORT: value}}}, "worker",
                                       {"desiredConfig": a})
    every_write_valid(kube)
    assert kube.calls[-2:] == [("PATCH", "dir-node"), ("CREATE", "dir-node")]


def test_a_nodes_first_drain_log_entries_are_no_compare_and_swap_so_a_status_write_meanwhile_is_no_conflict(app):
    """Issue 53: the grant's entries, the first on the MCN, were a merge patch carrying the
    resourceVersion read, and a status or spec write landing between the read and the patch (the
    sweep's at targeting) made it a 409 and a read more. There is no log yet to lose."""
    a, kube = target(app, "worker"), FakeKube()
    writer(kube).write("w3", node("w3", a, a), "worker", report_of("Done", a, a))
    store = store_on(kube)
    store.__dict__.update(_lock=threading.RLock(), _mcn_note=lambda obj, deleted: None, _wrote=lambda version: None,
                          _patch_mcn=functools.partial(nodestore.KubeNodeStore._patch_mcn, store))
    read = kube.get

    def read_then_a_status_write(path, params=None):
        obj = read(path, params)
        kube.merge_patch(path + "/status", {"status": {"observedGeneration": 1}})  # kube_sync's, meanwhile
        return obj

    kube.get = read_then_a_status_write
    del kube.calls[:]
    drainlog.KubeDrainLog._log_drain(store, "w3", "worker", ("cordon", a), ("drain", "granted"))
    assert [c for c in kube.calls if c[0] == "PATCH"] == [("PATCH", "w3")]
    assert [e["action"] for e in json.loads(kube.objects["w3"]["metadata"]["annotations"][DRAIN_LOG])] == \
        ["cordon", "drain"]


def test_the_sweep_makes_one_for_every_node_and_deletes_orphans_every_write_valid(app):
    a, kube = target(app, "worker"), FakeKube()
    w = writer(kube)
    kube.create(kube_mcn.MACHINE_CONFIG_NODES.path(), {
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigNode",
        "metadata": {"name": "gone"}, "spec": kube_mcn.wanted_spec("gone", "worker", "")})
    nodes = {"plain": node("plain"), "mine": node("mine", a, a), "boot": node("boot", phase="Pending")}
    counted = {"mine": (report_of("Done", a, a), "worker")}
    wrote = w.sweep(nodes, {"plain": "worker", "mine": "worker"}, counted.get, 1.8e9 + 3600)
    assert wrote == 3 and sorted(kube.objects) == ["mine", "plain"]  # "boot" is Pending; "gone" has no Node
    every_write_valid(kube)
    assert w.sweep(nodes, {"plain": "worker", "mine": "worker"}, counted.get, 1.8e9 + 3601) == 0  # as wanted


def test_a_sweep_writes_at_most_its_batch_and_says_more_is_waiting(app, monkeypatch):
    monkeypatch.setattr(kube_mcn, "SWEEP_BATCH", 1)
    kube = FakeKube()
    w = writer(kube)
    nodes = {"a": node("a"), "b": node("b")}
    pools = {"a": "worker", "b": "worker"}
    assert w.sweep(nodes, pools, {}.get, 1.8e9) == 1 and w.waiting and sorted(kube.objects) == ["a"]
    assert w.sweep(nodes, pools, {}.get, 1.8e9) == 1 and sorted(kube.objects) == ["a", "b"]
    assert w.sweep(nodes, pools, {}.get, 1.8e9) == 0 and not w.waiting
    every_write_valid(kube)


FIRST_BOOT = {"run": "5b0c6c1e4d0a4f6c9a8f0c2d1e3b4a59", "startedAt": "2027-01-15T08:00:00.120Z", "result": "running",
              "stage": "fetch", "elapsed": 2.5, "stages": [{"name": "fetch", "startedAt": "2027-01-15T08:00:00.120Z",
                                                             "seconds": 2.4, "result": "ok"}]}


@pytest.mark.parametrize("outcome", ["Running", "Failed", "Stalled", "Done"])
def test_the_machineconfignode_of_a_first_boot_validates_against_the_crd_with_its_condition(app, outcome):
    """Our FirstBootComplete condition (a type in our own domain, as the CRD's pattern admits)
    in every outcome, beside upstream's types: the list stays within the CRD's 20."""
    sent = dict(FIRST_BOOT, result="failed", stage="apply", exitCode=75, hint="the node is as before") \
        if outcome == "Failed" else FIRST_BOOT
    body = {"pool": "worker", "state": "Done" if outcome == "Done" else "Degraded" if outcome == "Failed" else
            "Working", "reason": "applying failed: No space left on device", "firstBoot": sent}
    now = 1.8e9
    record = firstboots.record(None, body, now)
    later = now + (120 if outcome == "Stalled" else 1)
    kube = FakeKube()

    def decide(report, pool):
        return firstboots.decide(report.get(firstboots.KEY), later, 60.0)
    writer(kube, first_boot=decide).write("worker-fb", node("worker-fb"), "worker", dict(body, firstBoot=record))
    every_write_valid(kube)
    mcn = kube.objects["worker-fb"]
    condition = [c for c in mcn["status"]["conditions"] if c["type"] == mcnconditions.FIRST_BOOT]
    assert [(c["status"], c["reason"]) for c in condition] == \
        [(mcnconditions.FIRST_BOOT_STATUS[outcome], firstboots.REASONS[outcome])]
