"""The pools' work queue (agent/server/cluster/poolqueue.py): a report queues its pool and is
answered at once; one thread steps each queued pool once per batch; a held fetch is woken by the
bell the step rings, not by its next look at the store."""

import gc
import json
import threading
import time

from agent.server.cluster.poolqueue import Bell, PoolQueue
from tests.campaigns.test_hostile_campaign import wsgi
from tests.helpers.wait import wait_for
from tests.unit.test_held_fetch_inputs import MC, two_members_done_on_a


class FakeStore:
    def __init__(self) -> None:
        self.gen = 0
        self.rows = {"worker": ("A", "A")}

    def generation(self):
        return self.gen

    def pools(self):
        return dict(self.rows)


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


def test_the_bell_rings_when_another_process_changed_a_pool_row_in_the_store():
    owner, bell = Owner(), Bell()
    queue = PoolQueue(owner, None, bell).start()
    try:
        wait_for(lambda: queue._thread.is_alive(), "the queue runs", 30)
        seen = bell.rung
        time.sleep(0.2)  # looks at an unchanged store ring nothing
        assert bell.rung == seen
        owner.store.rows["worker"] = ("B", "A")
        owner.store.gen += 1
        assert bell.wait(seen, 30) != seen
    finally:
        queue.stop()


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
