"""A pool's numbers and its step's members on Node objects, kept by change (issue 53): the Node
cache's journal (kube.watch.Reflector), the node index's (store/nodeindex.py), the grouping's
(cluster/kube_groups.py) and the pool's tally (rollout/statustally.py) give, after any history of
Node, record and rollout changes, what a fresh pass over every Node gives; and a change costs
its own Node, not the pool."""

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.server.cluster import kube_nodes
from agent.server.cluster.kube_groups import NodeGroups
from agent.server.rollout import nodestatus, targeting
from agent.server.rollout.poolindex import PoolIndex
from agent.server.rollout.statustally import StatusTally
from agent.server.store.changejournal import ChangeJournal
from agent.server.store.kube import client as kube_client
from agent.server.store.kube import watch as kube_watch
from agent.server.store.nodeindex import IndexedReads, NodeIndex
from agent.server.store.nodestore import NodeRecord, PoolRow
from tests.unit.test_nodestatus import POOLS, node, report

NAMES = ["n0", "n1", "n2"]  # few: a history then changes the same Nodes again
ROLES = {"worker": {"node-role.kubernetes.io/worker": ""},
         "infra": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/infra": ""}, "none": {}}


class Listing:
    """A client whose list answers the Nodes it is given (the Reflector's events are applied
    by the test, in order, as its watch thread applies them)."""

    def __init__(self):
        self.nodes = {}

    def list(self, path, params, metadata_only=False, transform=None):
        items = [transform(n) if transform else n for n in self.nodes.values()]
        return items, str(len(items))


class Records(IndexedReads):
    """The node store's reads as the Kubernetes and etcd stores answer them (a NodeIndex), and
    its pool rows."""

    def __init__(self):
        self._lock = threading.RLock()
        self._index = NodeIndex()
        self.rows = {}

    def put(self, name, rec):
        with self._lock:
            self._index.apply(name, rec, 0)

    def pools(self):
        return dict(self.rows)


class Unnumbered:
    """A node store that numbers no change (as the SQLite one): only its generation moves."""

    def __init__(self, records):
        self.records = records

    def node(self, name):
        return self.records.node(name)

    def pools(self):
        return self.records.pools()

    def generation(self):
        return self.records._index.journal.seq


class World:
    def __init__(self, numbered=True):
        self.client = Listing()
        self.cache = kube_watch.Reflector(self.client, kube_client.NODES, transform=nodestatus.slim_node)
        self.cache._relist()
        self.store = Records()
        self.truth = kube_nodes.NodeTruth(self.cache, self.store if numbered else Unnumbered(self.store))
        self.version = 10

    def node_put(self, name, role, unschedulable, ready):
        self.version += 1
        obj = node(name, labels=ROLES[role], unschedulable=unschedulable, ready=ready)
        obj["metadata"]["resourceVersion"] = str(self.version)
        kind = "MODIFIED" if name in self.client.nodes else "ADDED"
        self.client.nodes[name] = obj
        self.cache._apply({"type": kind, "object": obj})

    def node_delete(self, name):
        if self.client.nodes.pop(name, None) is not None:
            self.version += 1
            self.cache._apply({"type": "DELETED", "object": {"metadata": {"name": name,
                                                                          "resourceVersion": str(self.version)}}})

    def record_put(self, name, current, state, pending):
        rep = report(current, state=state, reason="disk full" if state == "Degraded" else "")
        if pending:
            rep["_server"] = {"pending": True}
        self.store.put(name, NodeRecord(name, "worker", "labels", "", rep, 1.0))

    def record_delete(self, name):
        self.store.put(name, None)

    def entry(self, pool, name, config):
        row = self.store.rows.get(pool) or PoolRow(pool, "B", "A")
        targets = dict(row.rollout.get("targets") or {})
        if config is None:
            targets.pop(name, None)
        else:
            targets[name] = {"config": config}
        self.store.rows[pool] = PoolRow(pool, row.target, row.current, rollout={"targets": targets})

    def fresh_status(self, pool, target, image=None):
        rollout = self.store.rows[pool].rollout if pool in self.store.rows else {}
        grouped = nodestatus.group_by_pool(POOLS, self.cache.snapshot().values()).get(pool, [])
        return nodestatus.calculate_status(
            [(n, targeting.with_desired(kube_nodes.report_of(n, self.store.node(n["metadata"]["name"])),
                                        targeting.entry_of(rollout, n["metadata"]["name"]))) for n in grouped],
            target, image)

    def fresh_members(self, pool):
        grouped = nodestatus.group_by_pool(POOLS, self.cache.snapshot().values()).get(pool, [])
        return {n["metadata"]["name"]: kube_nodes.member_of(n, self.store.node(n["metadata"]["name"])) for n in grouped}


def file_members(truth, pool, index):
    """rolloutctl._file_members' Kubernetes path: the changes since the index's mark, else a whole read."""
    delta = truth.member_changes(pool, POOLS, index.cursor)
    if delta is not None:
        index.cursor = delta[0]
        index.apply(delta[1], delta[2])
    else:
        members, index.cursor = truth.read_members(pool, POOLS)
        index.sync(members)


ACTIONS = {"node": World.node_put, "node-gone": World.node_delete, "record": World.record_put,
           "record-gone": World.record_delete, "entry": World.entry}
name_ = st.sampled_from(NAMES)
op = st.one_of(
    st.tuples(st.just("node"), name_, st.sampled_from(sorted(ROLES)), st.booleans(), st.sampled_from(["True", "False"])),
    st.tuples(st.just("node-gone"), name_),
    st.tuples(st.just("record"), name_, st.sampled_from(["A", "B"]), st.sampled_from(["Done", "Working", "Degraded"]),
              st.booleans()),
    st.tuples(st.just("record-gone"), name_),
    st.tuples(st.just("entry"), st.sampled_from(["worker", "infra"]), name_, st.sampled_from([None, "A", "B"])),
    st.tuples(st.just("relist")),
    st.tuples(st.just("target"), st.sampled_from(["A", "B"])),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(op, max_size=30), st.booleans())
def test_numbers_and_members_kept_by_change_equal_a_fresh_pass_after_any_history(history, numbered):
    w = World(numbered)
    for name in NAMES:  # a pool at work to start from: every Node Done on A, the target B
        w.node_put(name, "worker", False, "True")
        w.record_put(name, "A", "Done", False)
    indexes = {"worker": PoolIndex(), "infra": PoolIndex()}
    target = "B"
    for step in history:
        kind, args = step[0], step[1:]
        if kind == "target":
            target = args[0]
        elif kind == "relist":
            w.cache._relist()
        else:
            ACTIONS[kind](w, *args)
        for pool, index in indexes.items():
            assert w.truth.status(pool, POOLS, target, None) == w.fresh_status(pool, target)
            file_members(w.truth, pool, index)
            assert index.members == w.fresh_members(pool)


def fleet_of(n):
    w = World()
    for i in range(n):
        w.node_put(f"w{i:04d}", "worker", False, "True")
        w.record_put(f"w{i:04d}", "A", "Done", False)
    return w


def test_after_one_node_changed_a_pools_numbers_and_step_make_that_node_alone_again(monkeypatch):
    w = fleet_of(200)
    index = PoolIndex()
    w.truth.status("worker", POOLS, "B", None)
    file_members(w.truth, "worker", index)
    made, tallied = [], []
    real_member, real_share = kube_nodes.member_of, StatusTally.put
    monkeypatch.setattr(kube_nodes, "member_of", lambda n, rec: made.append(n["metadata"]["name"]) or real_member(n, rec))
    monkeypatch.setattr(StatusTally, "put", lambda self, name, *a: tallied.append(name) or real_share(self, name, *a))
    w.node_put("w0007", "worker", True, "True")  # cordoned
    w.record_put("w0011", "B", "Done", False)
    status = w.truth.status("worker", POOLS, "B", None)
    file_members(w.truth, "worker", index)
    assert sorted(made) == ["w0007", "w0011"] and sorted(tallied) == ["w0007", "w0011"]
    assert status == w.fresh_status("worker", "B") and status.updated == 1 and status.unavailable_nodes == ["w0007"]
    assert index.members == w.fresh_members("worker")


def test_a_node_the_server_targets_counts_as_unavailable_though_its_node_and_report_did_not_change():
    w = fleet_of(3)
    assert w.truth.status("worker", POOLS, "B", None).unavailable == 0
    w.entry("worker", "w0001", "B")  # targeted: it desires B and is Done on A
    status = w.truth.status("worker", POOLS, "B", None)
    assert status.unavailable_nodes == ["w0001"] and status == w.fresh_status("worker", "B")
    w.entry("worker", "w0001", None)
    assert w.truth.status("worker", POOLS, "B", None).unavailable == 0


def test_the_numbers_on_the_current_config_read_between_steps_keep_the_targets_tally(monkeypatch):
    w = fleet_of(50)
    w.truth.status("worker", POOLS, "B", None)
    w.truth.status("worker", POOLS, "A", "quay.io/os@sha256:1")  # a layered pool's proof (serving._proof)
    tallied = []
    real = StatusTally.put
    monkeypatch.setattr(StatusTally, "put", lambda self, name, *a: tallied.append(name) or real(self, name, *a))
    w.record_put("w0003", "B", "Done", False)
    assert w.truth.status("worker", POOLS, "B", None).updated == 1
    assert w.truth.status("worker", POOLS, "A", "quay.io/os@sha256:1") == w.fresh_status("worker", "A", "quay.io/os@sha256:1")
    assert tallied == ["w0003", "w0003"]


def test_a_pool_keeps_its_three_last_read_tallies_and_another_pools_is_left_alone(monkeypatch):
    w = fleet_of(20)
    w.node_put("w0019", "infra", False, "True")
    w.truth.status("infra", POOLS, "B", None)
    for config in ("B", "C", "D", "E"):  # B is the least recently read of worker's four: dropped
        w.truth.status("worker", POOLS, config, None)
    tallied = []
    real = StatusTally.put
    monkeypatch.setattr(StatusTally, "put", lambda self, name, *a: tallied.append(name) or real(self, name, *a))
    w.truth.status("worker", POOLS, "E", None)
    w.truth.status("infra", POOLS, "B", None)
    assert tallied == []  # both kept: nothing changed since
    assert w.truth.status("worker", POOLS, "B", None) == w.fresh_status("worker", "B") and len(tallied) == 19


def test_a_node_relabelled_into_another_pool_leaves_the_first_pools_numbers_and_step():
    w = fleet_of(5)
    index = PoolIndex()
    file_members(w.truth, "worker", index)
    assert w.truth.status("worker", POOLS, "A", None).machine == 5
    w.node_put("w0002", "infra", False, "True")
    assert w.truth.status("worker", POOLS, "A", None).nodes == ["w0000", "w0001", "w0003", "w0004"]
    assert w.truth.status("infra", POOLS, "A", None).nodes == ["w0002"]
    file_members(w.truth, "worker", index)
    assert sorted(index.members) == ["w0000", "w0001", "w0003", "w0004"]


def test_a_relist_makes_the_step_read_its_pool_whole_once():
    w = fleet_of(5)
    index = PoolIndex()
    file_members(w.truth, "worker", index)
    mark = index.cursor
    assert w.truth.member_changes("worker", POOLS, mark) == (mark, [], [])
    w.cache._relist()  # the same Nodes: nothing changed, nothing to read
    assert w.truth.member_changes("worker", POOLS, mark) == (mark, [], [])
    w.client.nodes["w0001"] = node("w0001", labels=ROLES["worker"], ready="False")
    w.cache._relist()  # a Node changed while the watch was away: any of them may have
    assert w.truth.member_changes("worker", POOLS, mark) is None
    file_members(w.truth, "worker", index)
    assert index.members == w.fresh_members("worker") and index.members["w0001"].not_ready


def test_the_journal_answers_a_mark_it_holds_and_refuses_one_it_trimmed_reset_or_never_gave():
    j = ChangeJournal(keep=4)
    assert j.since(None) == (0, None) and j.since(0) == (0, set())
    for name in "abcde":
        j.note(name)
    assert j.since(3) == (5, {"d", "e"})
    assert j.since(1) == (5, None)  # trimmed: a and b are gone, so a change after 1 may be missing
    assert j.since(2) == (5, {"c", "d", "e"})
    assert j.since(9) == (5, None)  # not this journal's
    j.reset()
    assert j.since(5) == (6, None) and j.since(6) == (6, set())


def test_the_grouping_places_a_changed_node_without_regrouping_the_fleet(monkeypatch):
    w = fleet_of(50)
    groups = NodeGroups(w.cache)
    groups.update(POOLS)
    mark = groups.journal.seq
    monkeypatch.setattr(nodestatus, "group_by_pool", lambda *a: (_ for _ in ()).throw(AssertionError("regrouped")))
    w.node_put("w0003", "none", False, "True")
    w.node_delete("w0004")
    groups.update(POOLS)
    assert groups.changes(mark)[1] == {"w0003", "w0004"}
    assert len(groups.nodes("worker")) == 48 and groups.node("worker", "w0003") is None
    assert "w0003" not in groups.pool_of and "w0004" not in groups.pool_of
