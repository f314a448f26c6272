"""The pool's members from the Node cache and the node store (kube_nodes.NodeTruth.members): a
Member is made again only for a Node or a record that changed since the pool's last read, and
what it says is what a fresh read says."""

import types

import pytest

from agent.server.cluster import kube_nodes
from agent.server.store.nodestore import NodeRecord
from tests.unit.test_nodestatus import POOLS, node, report


class Cache:
    """A Node cache as the Reflector keeps one: an object is replaced when it changes."""

    def __init__(self, nodes):
        self.objects = dict(nodes)
        self.changes = 0

    def snapshot(self):
        return dict(self.objects)

    def get(self, name):
        return self.objects.get(name)

    def put(self, obj):
        self.objects[obj["metadata"]["name"]] = obj
        self.changes += 1

    def drop(self, name):
        del self.objects[name]
        self.changes += 1


def record(name, **fields):
    return NodeRecord(name, "worker", "labels", "", report("rendered-worker-a", **fields), 1.0)


@pytest.fixture
def fleet(monkeypatch):
    cache = Cache({f"w{i}": node(f"w{i}") for i in range(4)})
    records = {f"w{i}": record(f"w{i}") for i in range(3)}  # w3 runs no node-agent: its annotations
    truth = kube_nodes.NodeTruth(cache, types.SimpleNamespace(node=records.get, generation=lambda: None))
    made = []
    real = kube_nodes.member_of
    monkeypatch.setattr(kube_nodes, "member_of", lambda n, rec: made.append(n["metadata"]["name"]) or real(n, rec))
    return cache, records, truth, made


def fresh(cache, records):
    """What a read with no memo makes."""
    return [kube_nodes.member_of(n, records.get(name)) for name, n in cache.snapshot().items()]


def test_a_second_read_with_nothing_changed_makes_no_member_and_says_the_same(fleet):
    cache, records, truth, made = fleet
    first = truth.members("worker", POOLS)
    assert sorted(made) == ["w0", "w1", "w2", "w3"]
    made.clear()
    again = truth.members("worker", POOLS)
    assert made == [] and again == first == fresh(cache, records)


def test_a_cordoned_node_and_a_new_report_are_made_again_and_only_they(fleet):
    cache, records, truth, made = fleet
    truth.members("worker", POOLS)
    made.clear()
    cache.put(node("w1", unschedulable=True))
    records["w2"] = record("w2", state="Working", desiredConfig="rendered-worker-b")
    got = {m.name: m for m in truth.members("worker", POOLS)}
    assert sorted(made) == ["w1", "w2"]
    assert got["w1"].not_ready == "node w1 is reporting Unschedulable"
    assert got["w2"].report["desiredConfig"] == "rendered-worker-b"
    assert list(got.values()) == fresh(cache, records)


def test_a_node_that_left_the_pool_is_not_a_member_nor_kept(fleet):
    cache, records, truth, made = fleet
    truth.members("worker", POOLS)
    cache.put(node("w0", labels={"node-role.kubernetes.io/infra": ""}))
    cache.drop("w3")
    assert [m.name for m in truth.members("worker", POOLS)] == ["w1", "w2"]
    assert set(truth._members["worker"]) == {"w1", "w2"}
    assert [m.name for m in truth.members("infra", POOLS)] == ["w0"]
