"""The MachineConfigNode write-back decides a report's status from the object the node store's
record write returned (kube/freshmcn.py, kube_mcn.McnWriter._fresh) instead of reading it again:
the same status as after a read, one request fewer; an object another process moved since costs
a refused write and a read, never a wrong status. Against tests/helpers/fakekube.py, which
refuses a JSON patch whose ``test`` fails (422) as the API server does."""

import copy
import types

import pytest

from agent.server.cluster import kube_mcn
from agent.server.store.kube.freshmcn import FreshObjects, slim
from agent.server.store.kube.mcnrecord import REPORT
from tests.helpers.fakekube import PREFIX, FakeCache, FakeKube

MCD = "machineconfiguration.openshift.io/"
A, B = "rendered-worker-" + "a" * 32, "rendered-worker-" + "b" * 32


def node(current, desired):
    return {"metadata": {"name": "n1", "uid": "uid-n1",
                         "annotations": {MCD + "currentConfig": current, MCD + "desiredConfig": desired}},
            "spec": {}}


def report(state, current, desired, at=1.8e9):
    return {"pool": "worker", "state": state, "currentConfig": current, "desiredConfig": desired, "_at": at}


class FrozenCache(FakeCache):
    """The watch's view as it was when ``freeze`` was called: a watch behind the API."""

    def freeze(self):
        self.frozen = copy.deepcopy(self.kube.objects)

    def get(self, name):
        obj = getattr(self, "frozen", self.kube.objects).get(name)
        return self.transform(copy.deepcopy(obj)) if obj is not None else None


def writer(kube, fresh=None, cache=FakeCache):
    store = types.SimpleNamespace(fresh_mcn=fresh.take) if fresh is not None else types.SimpleNamespace()
    w = kube_mcn.McnWriter(types.SimpleNamespace(spec_of=lambda name: None, store=store,
                                                 first_boot_decision=lambda report, pool: None), kube)
    w.cache = cache(kube, kube_mcn.slim_mcn)
    return w


def record(kube, fresh, body):
    """The node store's record write (its report annotation), and what it hands to the write-back."""
    obj = kube.merge_patch(f"{PREFIX}/n1", {"metadata": {"annotations": {REPORT: repr(body)}}})
    fresh.put("n1", obj)
    return obj


def started(fresh=None, cache=FakeCache):
    """n1's MCN written for its Done on A, then its Working report on B recorded."""
    kube = FakeKube()
    w = writer(kube, fresh, cache)
    w.write("n1", node(A, A), "worker", report("Done", A, A))
    record(kube, fresh if fresh is not None else FreshObjects(), report("Working", A, B))
    kube.calls.clear()
    return kube, w


def test_a_reports_status_written_from_the_record_writes_object_is_the_one_written_after_a_read():
    read_kube, read_writer = started()
    read_writer.write("n1", node(A, B), "worker", report("Working", A, B, at=1.8e9 + 5))
    fresh = FreshObjects()
    kube, w = started(fresh)
    w.write("n1", node(A, B), "worker", report("Working", A, B, at=1.8e9 + 5))
    assert kube.objects["n1"]["status"] == read_kube.objects["n1"]["status"]
    assert read_kube.calls == [("GET", "n1"), ("PATCH", "n1"), ("JSONPATCH/status", "n1")]
    assert kube.calls == [("PATCH", "n1"), ("JSONPATCH/status", "n1")]  # the spec's B, the status: no read
    assert fresh.take("n1") is None  # taken once


def moved_by_another_process(fresh):
    """n1 Working on B, its Done on B recorded (``fresh`` gets the object), then another process
    writes its status from an earlier Degraded report, which this process's watch has not shown yet."""
    kube = FakeKube()
    writer(kube).write("n1", node(A, B), "worker", report("Working", A, B))
    w = writer(kube, fresh, FrozenCache)
    record(kube, fresh, report("Done", B, B, at=1.8e9 + 5))
    w.cache.freeze()
    degraded = dict(report("Degraded", A, B, at=1.8e9 + 3), reason="disk full")
    writer(kube).write("n1", node(A, B), "worker", degraded)
    kube.calls.clear()
    return kube, w


def test_an_object_moved_by_another_process_since_the_record_costs_a_refused_write_and_a_read_not_a_wrong_status():
    read_kube, read_writer = moved_by_another_process(FreshObjects())
    read_writer.cluster.store = types.SimpleNamespace()  # no record object: it reads first
    read_writer.write("n1", node(B, B), "worker", report("Done", B, B, at=1.8e9 + 5))
    kube, w = moved_by_another_process(FreshObjects())
    w.write("n1", node(B, B), "worker", report("Done", B, B, at=1.8e9 + 5))
    assert kube.calls == [("JSONPATCH/status", "n1"), ("GET", "n1"), ("JSONPATCH/status", "n1")]  # 422, read, write
    assert kube.objects["n1"]["status"] == read_kube.objects["n1"]["status"]


def test_a_record_object_older_than_the_watchs_is_not_used():
    fresh = FreshObjects()
    kube, w = started(fresh)
    kube.merge_patch(f"{PREFIX}/n1", {"metadata": {"labels": {"x": "y"}}})  # newer, and the watch shows it
    kube.calls.clear()
    w.write("n1", node(A, B), "worker", report("Working", A, B, at=1.8e9 + 5))
    assert kube.calls[0] == ("GET", "n1") and ("JSONPATCH/status", "n1") in kube.calls


def test_a_record_object_that_already_holds_the_status_is_read_again_before_nothing_is_written():
    fresh = FreshObjects()
    kube, w = started(fresh)
    w.write("n1", node(A, B), "worker", report("Working", A, B, at=1.8e9 + 5))
    record(kube, fresh, report("Working", A, B))  # the same report again: its status is held already
    kube.calls.clear()
    w.write("n1", node(A, B), "worker", report("Working", A, B, at=1.8e9 + 5))
    assert kube.calls == [("GET", "n1")]


def test_the_status_write_tests_the_generation_its_observed_generation_was_read_from():
    kube, _ = started()
    obj = kube.get(f"{PREFIX}/n1")
    status = kube_mcn.mcn_status(obj, kube_mcn.node_facts("n1", node(A, B), report("Working", A, B), None),
                                 node(A, B), "2027-01-15T08:00:00Z")
    kube.merge_patch(f"{PREFIX}/n1", {"spec": dict(obj["spec"], configVersion={"desired": B})})  # generation 2
    ops = kube_mcn.status_ops(obj["status"]["conditions"], status, obj["metadata"]["generation"])
    assert ops[0] == {"op": "test", "path": "/metadata/generation", "value": 1}
    with pytest.raises(kube_mcn.KubeError) as refused:
        kube.json_patch(f"{PREFIX}/n1/status", ops)
    assert refused.value.status == 422


def test_fresh_objects_keep_the_newest_nodes_only_and_no_annotations():
    fresh = FreshObjects(limit=2)
    for name in ("n1", "n2", "n3"):
        fresh.put(name, {"metadata": {"name": name, "resourceVersion": "7", "annotations": {REPORT: "x" * 60000}},
                         "spec": {"pool": {"name": "worker"}}, "status": {"conditions": []}})
    assert fresh.take("n1") is None and len(fresh) == 2
    assert fresh.take("n3") == {"metadata": {"name": "n3", "resourceVersion": "7"},
                                "spec": {"pool": {"name": "worker"}}, "status": {"conditions": []}}
    assert fresh.take("n3") is None  # once
    assert slim({}) == {"metadata": {}, "spec": {}, "status": {}}
