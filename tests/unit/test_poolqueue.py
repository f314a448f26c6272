"""The pools' work queue (agent/server/cluster/poolqueue.py): a report queues its pool and is
answered at once; one thread steps each queued pool once per batch; a held fetch is woken by the
bell the step rings, not by its next look at the store."""

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

from agent.server.cluster.poolqueue import Bell, PoolQueue, changed_nodes
from agent.server.store.nodestore import PoolRow
from tests.campaigns.test_hostile_campaign import wsgi
from tests.helpers import paths
from tests.helpers.wait import wait_for
from tests.unit.test_held_fetch_inputs import MC, two_members_done_on_a


class FakeStore:
    def __init__(self) -> None:
        self.gen = 0
        self.rows = {"worker": row({"n1": {"config": "A", "at": 1.0}})}

    def generation(self):
        return self.gen

    def pools(self):
        return dict(self.rows)


def row(targets, target="B"):
    return PoolRow("worker", target, "A", "", target, {"config": target, "targets": targets})


class Owner:
    """What a PoolQueue steps: records each batch; the first step blocks until released."""

    def __init__(self) -> None:
        self.store = FakeStore()
        self.batches = []
        self.first_began = threading.Event()
        self.release = threading.Event()

    def step_queued(self, pools, everything):
        self.batches.append((set(pools), everything))
        self.first_began.set()
        assert self.release.wait(60)


def test_pools_queued_while_a_step_runs_are_stepped_once_each_in_the_next_batch():
    owner = Owner()
    queue = PoolQueue(owner, None, Bell()).start()
    try:
        queue.add(["worker"])
        assert owner.first_began.wait(30)
        tickets = [queue.add(["worker"]) for _ in range(100)] + [queue.add(["infra", ""])]
        owner.release.set()
        assert queue.wait_stepped(tickets[-1], 30)
        assert owner.batches == [({"worker"}, False), ({"worker", "infra"}, False)]
    finally:
        queue.stop()


def test_a_ticket_is_stepped_only_once_the_step_that_covers_it_is_over():
    owner = Owner()
    queue = PoolQueue(owner, None, Bell()).start()
    try:
        ticket = queue.add(["worker"])
        assert owner.first_began.wait(30)
        assert not queue.wait_stepped(ticket, 0.2)  # its step runs still
        owner.release.set()
        assert queue.wait_stepped(ticket, 30)
    finally:
        queue.stop()


def test_with_an_interval_every_pool_is_stepped_though_nothing_was_queued():
    owner = Owner()
    owner.release.set()
    queue = PoolQueue(owner, 0.1, Bell()).start()
    try:
        wait_for(lambda: (set(), True) in owner.batches, "a step of every pool", 30)
    finally:
        queue.stop()


def test_the_bell_rings_for_the_nodes_whose_targeting_another_process_changed_in_the_store():
    owner, bell = Owner(), Bell()
    queue = PoolQueue(owner, None, bell).start()
    try:
        wait_for(lambda: queue._thread.is_alive(), "the queue runs", 30)
        seen = {n: bell.seen(n) for n in ("n1", "n2")}
        time.sleep(0.2)  # looks at an unchanged store ring nothing
        assert {n: bell.seen(n) for n in seen} == seen
        owner.store.rows["worker"] = row({"n1": {"config": "A", "at": 1.0}, "n2": {"config": "B", "at": 2.0}})
        owner.store.gen += 1
        assert bell.wait("n2", seen["n2"], 30) != seen["n2"]
        assert bell.seen("n1") == seen["n1"]  # its targeting did not change: its held fetch sleeps on
    finally:
        queue.stop()


class RecordingBell(Bell):
    def __init__(self) -> None:
        super().__init__()
        self.rings = []

    def ring(self, nodes=None):
        self.rings.append(None if nodes is None else set(nodes))
        super().ring(nodes)


def test_rows_another_process_wrote_ring_the_retargeted_nodes_before_every_node():
    """One look sees two pools changed: the worker pool's step targeted n2 and another pool's
    current moved (which rings every node). n2's held fetch is woken first: woken with the
    others, it was answered after them."""
    owner, bell, looked = Owner(), RecordingBell(), []
    store = owner.store
    store.pools = lambda: looked.append(1) or dict(store.rows)
    queue = PoolQueue(owner, None, bell).start()
    try:
        wait_for(lambda: looked, "the queue's first look at the store", 30)
        seen = bell.seen("n2")
        owner.store.rows = {"worker": row({"n1": {"config": "A", "at": 1.0}, "n2": {"config": "B", "at": 2.0}}),
                            "infra": PoolRow("infra", "C", "C", "", "C", {})}
        owner.store.gen += 1
        bell.wait("n2", seen, 30)
        wait_for(lambda: len(bell.rings) >= 2, "both rings", 30)
        assert bell.rings == [{"n2"}, None]
    finally:
        queue.stop()


ALIVE_UNDER_GEVENT = """
from gevent import monkey
monkey.patch_all()
import gevent
from agent.server.cluster.poolqueue import Bell, PoolQueue

class Owner:
    class store:
        generation = staticmethod(lambda: 0)
        pools = staticmethod(dict)
    def step_queued(self, pools, everything):
        pass

owner = Owner()
queue = PoolQueue(owner, None, Bell()).start()
order = []
def asks():
    order.append("asks"); alive = queue.alive(); order.append(f"answered {alive}")
def other():
    order.append("other")
gevent.joinall([gevent.spawn(asks), gevent.spawn(other)])
print(order)
queue.stop()
"""


def test_asking_whether_the_queue_is_alive_never_lets_another_greenlet_run():
    """Every member's fetch asks (rolloutctl.caught_up); under gevent ``Thread.is_alive()``
    switches greenlets, so a thousand fetches woken at once each waited, half answered, for all
    the others. A process of its own: gevent patches the whole process."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(ALIVE_UNDER_GEVENT)], capture_output=True,
                         text=True, timeout=120, cwd=paths.REPO,
                         env=dict(os.environ, PYTHONPATH=paths.REPO + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['asks', 'answered True', 'other']", out.stdout + out.stderr


def test_a_ring_for_a_node_wakes_its_waiter_and_a_ring_for_all_wakes_every_waiter():
    bell, woken = Bell(), {}

    def waiter(node):
        woken[node] = bell.wait(node, bell.seen(node), 60)

    threads = {n: threading.Thread(target=waiter, args=(n,)) for n in ("n1", "n2")}
    for t in threads.values():
        t.start()
    wait_for(lambda: len(bell._waiters) == 2, "both wait", 30)
    bell.ring(["n1"])
    threads["n1"].join(30)
    assert "n1" in woken and "n2" not in woken
    bell.ring()
    threads["n2"].join(30)
    assert "n2" in woken


def test_the_nodes_changed_between_two_rows_are_those_whose_entry_differs_or_all_when_the_current_moved():
    a = row({"n1": {"config": "B", "at": 1.0}, "n2": {"config": "B", "at": 1.0}})
    b = row({"n1": {"config": "B", "at": 1.0}, "n3": {"config": "B", "at": 2.0}})
    assert changed_nodes(a, b) == {"n2", "n3"}
    assert changed_nodes(a, a) == set()
    assert changed_nodes(a, row({"n1": {"config": "C", "at": 3.0}}, target="C")) == {"n1", "n2"}  # retargeted
    moved = PoolRow("worker", "B", "B", "", "B", {"config": "B", "targets": {}})
    assert changed_nodes(a, moved) is None and changed_nodes(None, a) is None


def test_a_queue_whose_owner_is_dropped_stops():
    owner = Owner()
    queue = PoolQueue(owner, None, Bell()).start()
    del owner
    gc.collect()
    wait_for(lambda: not queue._thread.is_alive(), "the queue's thread ended", 30)


def test_a_report_is_answered_while_a_step_of_its_pool_runs(tmp_path, new_app):
    """The report's step runs on the queue's thread: a report made while a step of its pool blocks
    is answered all the same (stepped on its path, it would wait for the step to end)."""
    app, _, a = two_members_done_on_a(tmp_path, new_app)
    cluster, release, began = app.cluster, threading.Event(), threading.Event()
    inner = cluster._step_pool_now

    def slow_step(st, name):
        began.set()
        assert release.wait(60)
        inner(st, name)

    cluster._step_pool_now = slow_step
    answered = {}
    body = {"pool": "worker", "state": "Done", "currentConfig": a, "desiredConfig": a, "reason": "again"}
    report = threading.Thread(target=lambda: answered.setdefault(
        "status", wsgi(app, "POST", "/api/v1/nodes/n2/report", json.dumps(body).encode())[0]))
    try:
        cluster.wake_pools(["worker"])
        assert began.wait(30)
        report.start()
        report.join(30)
        assert answered.get("status") == 200  # while the step still blocks
    finally:
        release.set()
        report.join(30)
    assert cluster.pools_stepped()


def test_a_held_fetch_is_woken_by_the_targeting_not_by_its_next_look_at_the_store(tmp_path, new_app, monkeypatch):
    """HOLD_POLL made longer than the hold: only the bell the targeting step rings can end it before
    its 120 s, with n1's new config (a hold run out answers 304)."""
    import agent.server.http.app as app_module

    monkeypatch.setattr(app_module, "HOLD_POLL", 1000.0)
    app, state, a = two_members_done_on_a(tmp_path, new_app)
    app.max_hold = 120.0
    etag = app._config_answer(app.caller({}), "n1", "worker", None)[1]
    got = {}

    def held():
        got["status"], got["body"] = wsgi(app, "GET", "/config/worker", headers={
            "X-Node-Name": "n1", "If-None-Match": etag}, query="wait=120")

    t = threading.Thread(target=held)
    t.start()
    (state / "machineconfigs" / "60-held.yaml").write_text(MC)
    t.join(100)
    assert not t.is_alive() and got["status"] == 200, got.get("status")
    assert b"/etc/nmstate/openshift/held.yml" in got["body"]


def test_rows_another_process_wrote_ring_the_bell_while_the_queue_waits_out_its_spacing_after_a_step(monkeypatch):
    """After a step of T the queue waits 3T before the next (``SHARE``); at 1,000 nodes on a busy
    machine that was up to a second in which the nodes another process targeted were not told.
    Here the spacing is made to last minutes (SHARE tiny): the ring still comes."""
    from agent.server.cluster import poolqueue

    monkeypatch.setattr(poolqueue, "SHARE", 1e-6)
    owner, bell = Owner(), Bell()
    owner.release.set()
    original = owner.step_queued

    def step(pools, everything):  # a step that takes some time: the spacing after it is long
        time.sleep(0.01)
        original(pools, everything)

    owner.step_queued = step
    queue = PoolQueue(owner, None, bell).start()
    try:
        assert queue.wait_stepped(queue.add(["worker"]), 30)
        looks, generation = [], owner.store.generation
        owner.store.generation = lambda: looks.append(1) or generation()
        queue.add(["worker"])  # the next step waits out the spacing (hours with this SHARE)
        wait_for(lambda: len(looks) >= 3, "the queue looks at the store within its spacing", 30)
        seen = bell.seen("n2")
        owner.store.rows["worker"] = row({"n1": {"config": "A", "at": 1.0}, "n2": {"config": "B", "at": 2.0}})
        owner.store.gen += 1
        assert bell.wait("n2", seen, 30) != seen  # rung within the spacing
        assert len(owner.batches) == 1  # the second step still waits
    finally:
        queue.stop()


class ListeningStore(FakeStore):
    """A store that says when its watch brought the pools' rows (the Kubernetes store's
    ``on_pool_rows``)."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners = []

    def on_pool_rows(self, listener):
        self.listeners.append(listener)

    def watched(self, rows):
        self.rows["worker"] = rows
        self.gen += 1
        for listener in self.listeners:
            listener()


def test_rows_the_stores_watch_brings_ring_the_retargeted_nodes_when_they_come_not_at_the_queues_next_look(
        monkeypatch):
    """The queue's own look comes every TICK (made hours here): the ring for a node another
    process targeted comes with the watch event that brought its row, before the call returns."""
    from agent.server.cluster import poolqueue

    monkeypatch.setattr(poolqueue, "TICK", 3600.0)
    owner, bell = Owner(), Bell()
    owner.store = ListeningStore()
    queue = PoolQueue(owner, None, bell).start()
    try:
        queue.look()  # the rows as they are: what later rows are compared with
        seen = {n: bell.seen(n) for n in ("n1", "n2")}
        owner.store.watched(row({"n1": {"config": "A", "at": 1.0}, "n2": {"config": "B", "at": 2.0}}))
        assert bell.seen("n2") != seen["n2"]
        assert bell.seen("n1") == seen["n1"]  # its targeting did not change
        queue.stop()
        owner.store.watched(row({"n1": {"config": "B", "at": 3.0}, "n2": {"config": "B", "at": 2.0}}))
        assert bell.seen("n1") == seen["n1"]  # a stopped queue rings nothing
    finally:
        queue.stop()
