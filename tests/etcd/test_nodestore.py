"""The node store's contract (agent/server/store/nodestore.py), checked on the SQLite store.

Counters and proofs are kept incrementally; after any sequence of reports they must equal what
a full recount over every stored report gives (the old, O(N) way: progress.count).
"""

import os
import random
import shutil
import sqlite3

import pytest

from agent.server.rollout import progress
from agent.server.store.errors import TooManyFromAddress, TooManyPending, TooManyUnvetted
from agent.server.store.nodestore import SERVER_KEY, VETTED_BY, NodeStore, PoolRow, Proof
from agent.server.store.sqlite.db import Database
from agent.server.store.sqlite.nodestore import SqliteNodeStore
from tests.helpers import paths

POOLS = ("master", "worker", "infra")
CONFIGS = ("rendered-a", "rendered-b", "")
IMAGES = ("", "quay.io/x@sha256:1", "quay.io/x@sha256:2")


def make_store(tmp_path) -> NodeStore:
    return SqliteNodeStore(Database(str(tmp_path / "nodes.db")))


def random_report(rng: random.Random):
    body = {"pool": rng.choice(POOLS), "state": rng.choice(progress.STATES)}
    if rng.random() < 0.9:
        body["currentConfig"] = rng.choice(CONFIGS)
    if rng.random() < 0.5:
        body["currentImage"] = rng.choice(IMAGES)
    if rng.random() < 0.2:
        body["skew"] = rng.choice(("ok", "warn", "refuse"))
    degraded = "two custom pools" if rng.random() < 0.1 else ""
    return body, progress.Membership(body["pool"], "reported pool", degraded)


def recount(reports, pool, config, image):
    members = {n: (b, m) for n, (b, m) in reports.items() if m.pool == pool}
    return progress.count(members, config, image)


def check_against_recount(store, reports):
    for pool in POOLS:
        pc = store.counts(pool)
        for config in CONFIGS:
            for image in (None,) + IMAGES[1:]:
                want = recount(reports, pool, config, image)
                got = store.proof(pool, config, image)
                assert (got.updated, got.ready) == (want.updated, want.ready), (pool, config, image)
                assert (pc.machine, pc.degraded, pc.working, pc.refused) == \
                    (want.machine, want.degraded, want.working, want.refused), pool


def test_counters_equal_a_full_recount_after_random_reports(tmp_path):
    store = make_store(tmp_path)
    rng = random.Random(19)
    reports = {}
    for i in range(400):
        node = f"n{rng.randrange(40)}"
        body, member = random_report(rng)
        store.record_report(node, body, member, float(i))
        reports[node] = (body, member)
        if i % 50 == 0:
            check_against_recount(store, reports)
    check_against_recount(store, reports)
    listed = store.nodes(limit=1000)
    assert [r.node for r in listed] == sorted(reports)
    assert sum(store.counts(p).machine for p in POOLS) == len(reports)


def test_rebuild_reassigns_every_node_and_recounts(tmp_path):
    store = make_store(tmp_path)
    for i in range(10):
        store.record_report(f"n{i}", {"pool": "worker", "state": "Done", "currentConfig": "rendered-a"},
                            progress.Membership("worker", "reported pool"), 1.0)
    assert store.membership_signature() is None
    moved = store.rebuild("sig-1", lambda rep: progress.Membership("infra", "labels match custom pool infra"))
    assert moved == 10 and store.membership_signature() == "sig-1"
    assert store.counts("worker").machine == 0 and store.counts("infra").machine == 10
    assert store.proof("infra", "rendered-a") == Proof(10, 10)
    assert store.node("n3").membership() == progress.Membership("infra", "labels match custom pool infra")


def test_open_first_boots_are_those_not_done_by_pool(tmp_path):
    """The first boots a view lists (running, failed, and by now perhaps stalled), from the index
    every store keeps of them (agent/server/rollout/firstboots.py is_open), in name order."""
    store = make_store(tmp_path)

    def report(node, pool, state, outcome=None, at=1.0):
        body = {"pool": pool, "state": state}
        if outcome:
            body["firstBoot"] = {"outcome": outcome, "stage": "fetch", "reportedAt": "2027-01-15T08:00:00.000Z"}
        store.record_report(node, body, progress.Membership(pool, "reported pool"), at)

    report("n-run", "worker", "Working", "Running")
    report("n-fail", "infra", "Degraded", "Failed")
    report("n-done", "worker", "Done", "Done")
    report("n-old", "worker", "Working")  # a first boot nobody reported: none to follow
    assert [r.node for r in store.open_first_boots()] == ["n-fail", "n-run"]
    assert [r.node for r in store.open_first_boots(pool="worker")] == ["n-run"]
    report("n-run", "worker", "Done", "Done", at=2.0)
    store.delete_node("n-fail", 3.0)
    assert store.open_first_boots() == []


def test_paging_by_pool(tmp_path):
    store = make_store(tmp_path)
    for i in range(25):
        store.record_report(f"n{i:02d}", {"pool": "worker", "state": "Working"},
                            progress.Membership("worker" if i % 2 else "infra", "x"), 1.0)
    page1 = store.nodes(pool="worker", limit=5)
    page2 = store.nodes(pool="worker", after=page1[-1].node, limit=5)
    assert [r.node for r in page1 + page2] == [f"n{i:02d}" for i in range(1, 20, 2)]


def test_done_report_releases_the_lease_on_that_config(tmp_path):
    store = make_store(tmp_path)
    assert store.acquire_lease("n1", "worker", "rendered-b", 1, 600, 100.0).granted
    assert not store.acquire_lease("n2", "worker", "rendered-b", 1, 600, 100.0).granted
    rec = store.record_report("n1", {"pool": "worker", "state": "Done", "currentConfig": "rendered-a"},
                              progress.Membership("worker", "x"), 101.0)
    assert not rec.released  # Done on another config: still updating
    rec = store.record_report("n1", {"pool": "worker", "state": "Done", "currentConfig": "rendered-b"},
                              progress.Membership("worker", "x"), 102.0)
    assert rec.released and rec.previous_pool == "worker"
    assert store.acquire_lease("n2", "worker", "rendered-b", 1, 600, 103.0).granted
    assert [e["action"] for e in store.drain_events("n1")] == ["cordon", "drain", "uncordon"]


def test_serving_is_one_snapshot(tmp_path):
    store = make_store(tmp_path)
    store.set_meta("state_signature", "s1")
    store.update_pool("worker", lambda old: PoolRow("worker", "rendered-b", "rendered-a", "", "rendered-b"))
    for i, image in enumerate(("", "img1", "img1")):
        store.record_report(f"n{i}", {"pool": "worker", "state": "Done", "currentConfig": "rendered-b",
                                      "currentImage": image}, progress.Membership("worker", "x"), 1.0)
    snap = store.serving("worker", "n1")
    assert snap.state_signature == "s1" and snap.pool.target == "rendered-b"
    assert snap.target_proof(None).updated == 3 and snap.target_proof("img1").updated == 2
    assert snap.node.node == "n1" and snap.node.pool == "worker"
    empty = store.serving("nope", None)
    assert empty.pool is None and empty.node is None and empty.target_proof(None) == Proof()


def test_update_pool_keeps_history_and_skips_no_change(tmp_path):
    store = make_store(tmp_path)
    store.update_pool("worker", lambda old: PoolRow("worker", "r1", "r1"))
    store.update_pool("worker", lambda old: None)
    store.update_pool("worker", lambda old: PoolRow("worker", "r2", old.current))
    assert [(h["field"], h["config"]) for h in store.history("worker")] == \
        [("target", "r1"), ("current", "r1"), ("target", "r2")]


def test_old_schema_is_migrated_and_rebuilt(tmp_path):
    """A nodes.db of schema 1 (reports without membership columns) opens, and the service's
    first reconcile fills the counters (no membership signature yet)."""
    path = str(tmp_path / "nodes.db")
    from agent.server.store.sqlite.db import MIGRATIONS

    conn = sqlite3.connect(path)
    for stmt in MIGRATIONS[0].split(";"):
        if stmt.strip():
            conn.execute(stmt)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO reports (node, pool, body, received) VALUES ('n1', 'worker', "
                 "'{\"pool\": \"worker\", \"state\": \"Done\", \"currentConfig\": \"r1\"}', 1)")
    conn.commit()
    conn.close()
    store = SqliteNodeStore(Database(path))
    assert store.membership_signature() is None
    store.rebuild("s", lambda rep: progress.Membership(rep["pool"], "reported pool"))
    assert store.proof("worker", "r1") == Proof(1, 1)


@pytest.mark.parametrize("n", [3])
def test_abstract_interface_is_complete(tmp_path, n):
    """Every abstract method of the interface is implemented (an etcd store must do the same)."""
    assert not getattr(SqliteNodeStore, "__abstractmethods__", set())
    assert len(NodeStore.__abstractmethods__) > n


def test_render_claims_let_one_worker_render(tmp_path):
    store = make_store(tmp_path)
    assert store.claim_render("k", 100.0, stale_after=30)
    assert not store.claim_render("k", 101.0, stale_after=30)  # another worker is on it
    assert store.claim_render("k", 131.0, stale_after=30)  # the claimant died: take over
    store.put_rendered("worker", "rendered-worker-1", {"config": {}}, ["00-worker"], inputs="k")
    assert store.rendered_for("k") == ("rendered-worker-1", {"config": {}}, ["00-worker"])
    assert not store.claim_render("k", 500.0, stale_after=30)  # done: nothing to claim


def test_workers_share_one_render(tmp_path, monkeypatch):
    """A second worker (another Cluster on the same state and database) reads the first one's
    rendering instead of rendering again."""
    from agent.server.cluster import service

    state = tmp_path / "state"
    shutil.copytree(os.path.join(paths.REPO, "examples", "state"),
                    state)
    calls = []
    real = service.render_pool
    monkeypatch.setattr(service, "render_pool", lambda *a: calls.append(a[0]["metadata"]["name"]) or real(*a))
    first = service.Cluster(str(state))
    rendered = len(calls)
    assert rendered == len(first.state().pools) > 0
    second = service.Cluster(str(state))
    assert len(calls) == rendered  # nothing rendered again
    assert {n: r.name for n, r in second._rendered.items()} == {n: r.name for n, r in first._rendered.items()}
    assert second._rendered["worker"].spec == first._rendered["worker"].spec


# -- identity and approval (issue 28): also on etcd, below ------------------------------------------

def test_registrations_and_approval(tmp_path):
    store = make_store(tmp_path)
    assert store.put_credential("a", "h-a", 1.0, False, approved=False, max_pending=2)
    assert store.put_credential("b", "h-b", 2.0, False, approved=False, max_pending=2)
    with pytest.raises(TooManyPending):
        store.put_credential("c", "h-c", 3.0, False, approved=False, max_pending=2)
    assert store.credential("c") is None and store.credential_owner("h-c") is None  # nothing stored
    assert store.put_credential("c", "h-c", 3.0, False, approved=True, by="rule", max_pending=2)  # approved: no limit
    assert not store.put_credential("c", "h-other", 3.5, False)  # registered: only a replace
    assert store.pending_count() == 2
    reg = store.registration("a")
    assert reg.pending and reg.managed and reg.served == () and reg.labels is None and reg.created == 1.0
    assert [r.node for r in store.registrations(pending=True)] == ["a", "b"]
    assert [r.node for r in store.registrations(pending=False)] == ["c"]
    assert [r.node for r in store.registrations(after="a", limit=1)] == ["b"]
    c = store.registration("c")
    assert c.by == "rule" and c.approved == 3.0 and c.managed
    approved = store.approve("a", 5.0, "admin", {"x": "y"})
    assert (approved.approved, approved.by, approved.labels, approved.pending) == (5.0, "admin", {"x": "y"}, False)
    assert store.approve("a", 9.0, "admin").approved == 5.0  # approving again keeps the time and the labels
    assert store.registration("a").labels == {"x": "y"}
    assert store.approve("nope", 5.0, "admin") is None and store.pending_count() == 1
    # A new credential (the admin registers the node again) keeps its approval.
    assert store.put_credential("a", "h-a2", 6.0, True)
    assert store.registration("a").approved == 5.0 and store.credential_owner("h-a2") == "a"
    assert store.credential_owner("h-a") is None
    for i in range(10):
        store.note_served("a", f"cfg-{i}")
    store.note_served("a", "cfg-9")  # already the newest: no change
    assert store.registration("a").served == tuple(f"cfg-{i}" for i in range(2, 10))
    store.note_served("nope", "x")  # no such node: nothing
    # An open or bootstrap-only server's registrations are approved and carry no approval rules.
    assert store.put_credential("d", "h-d", 7.0, False, approved=True, by="bootstrap")
    assert not store.registration("d").managed
    store.delete_node("b", 8.0)
    assert store.registration("b") is None and store.pending_count() == 0


def test_max_unvetted_bounds_the_names_no_admin_approved(tmp_path):
    store = make_store(tmp_path)
    assert store.put_credential("p", "h-p", 1.0, False, approved=False, max_unvetted=2)  # pending: unvetted
    assert store.put_credential("r", "h-r", 2.0, False, approved=True, by="rule", max_unvetted=2)  # a rule: unvetted
    with pytest.raises(TooManyUnvetted):
        store.put_credential("x", "h-x", 3.0, False, approved=True, by="rule", max_unvetted=2)
    with pytest.raises(TooManyUnvetted):
        store.put_credential("x", "h-x", 3.0, False, approved=False, max_unvetted=2)
    assert store.credential("x") is None and store.unvetted_count() == 2  # nothing stored
    assert store.put_credential("a", "h-a", 4.0, False, approved=True, by="admin", max_unvetted=2)  # the admin's
    assert store.put_credential("r", "h-r2", 5.0, True, max_unvetted=2)  # a new credential: not a new name
    assert store.approve("p", 6.0, "admin") is not None and store.unvetted_count() == 1  # approving frees a place
    assert store.put_credential("x", "h-x", 7.0, False, approved=True, by="rule", max_unvetted=2)


def test_max_unvetted_is_counted_in_the_sqlite_file_every_worker_shares(tmp_path):
    one, other = make_store(tmp_path), make_store(tmp_path)  # two workers' connections to one nodes.db
    assert one.put_credential("p", "h-p", 1.0, False, approved=False, max_unvetted=1)
    with pytest.raises(TooManyUnvetted):
        other.put_credential("q", "h-q", 2.0, False, approved=True, by="rule", max_unvetted=1)


def test_a_pending_report_counts_for_nothing_and_an_unproven_done_proves_nothing(tmp_path):
    store = make_store(tmp_path)
    member = progress.Membership("worker", "reported pool")
    done = {"pool": "worker", "state": "Done", "currentConfig": "c"}
    for node in ("p", "q"):  # a report that counts for nothing is kept with the node's registration
        assert store.put_credential(node, f"h-{node}", 0.5, False, approved=False)
    store.record_report("p", dict(done, **{SERVER_KEY: {"pending": True}}), member, 1.0)
    assert store.counts("worker").machine == 0 and store.proof("worker", "c") == Proof()
    assert store.node("p") is not None and [r.node for r in store.nodes(pool="worker")] == ["p"]  # listed, kept
    store.record_report("u", dict(done, **{SERVER_KEY: {"approvedBy": "admin", "proof": False}}), member, 1.0)
    pc = store.counts("worker")
    assert (pc.machine, pc.done) == (1, 1) and store.proof("worker", "c") == Proof()
    store.record_report("p", dict(done, **{SERVER_KEY: {"approvedBy": "admin"}}), member, 2.0)  # approved
    assert store.counts("worker").machine == 2 and store.proof("worker", "c") == Proof(1, 1)
    store.rebuild("sig", lambda rep: progress.Membership(rep["pool"], "reported pool"))
    assert store.counts("worker").machine == 2 and store.proof("worker", "c") == Proof(1, 1)
    store.delete_node("p", 3.0)
    assert store.counts("worker").machine == 1 and store.proof("worker", "c") == Proof()
    store.record_report("q", dict(done, **{SERVER_KEY: {"pending": True}}), member, 4.0)
    store.delete_node("q", 5.0)  # a pending node's report took nothing: deleting it takes nothing
    assert store.counts("worker").machine == 1


def test_credentials_of_an_older_schema_stay_approved(tmp_path):
    path = str(tmp_path / "nodes.db")
    c = sqlite3.connect(path)
    from agent.server.store.sqlite import db as dbmod

    for i in range(4):  # the schema before approval
        for stmt in dbmod.MIGRATIONS[i].split(";"):
            if stmt.strip():
                c.execute(stmt)
    c.execute("PRAGMA user_version = 4")
    c.execute("INSERT INTO credentials (node, hash, created) VALUES ('old', 'h-old', 42.0)")
    c.commit()
    c.close()
    store = SqliteNodeStore(Database(path))
    reg = store.registration("old")
    assert (reg.pending, reg.by, reg.approved, reg.managed) == (False, "upgrade", 42.0, False)


def test_registrations_keep_their_address_and_pending_names_are_capped_per_address(tmp_path):
    store = make_store(tmp_path)
    for node in ("a1", "a2"):
        assert store.put_credential(node, f"h-{node}", 1.0, False, approved=False, address="192.0.2.1",
                                    max_per_address=2)
    with pytest.raises(TooManyFromAddress):  # a TooManyPending: the HTTP layer answers 429 naming it
        store.put_credential("a3", "h-a3", 2.0, False, approved=False, address="192.0.2.1", max_per_address=2)
    assert store.credential("a3") is None
    assert store.put_credential("b1", "h-b1", 2.0, False, approved=False, address="192.0.2.9", max_per_address=2)
    # approved names (a kubelet's certificate, the admin) are never held by it
    assert store.put_credential("k1", "h-k1", 2.0, False, approved=True, by="kubelet", address="192.0.2.1",
                                max_per_address=2)
    assert store.registration("a1").address == "192.0.2.1" and store.registration("a1").to_dict()["address"] == \
        "192.0.2.1"
    k1 = store.registration("k1")
    assert k1.binds_node and not k1.pending and k1.by in VETTED_BY and store.unvetted_count() == 3
    store.approve("a1", 3.0, "admin")  # approving one frees a place at its address
    assert store.put_credential("a3", "h-a3", 4.0, False, approved=False, address="192.0.2.1", max_per_address=2)


IDENTITY_CONTRACT = ["test_registrations_and_approval", "test_max_unvetted_bounds_the_names_no_admin_approved",
                     "test_a_pending_report_counts_for_nothing_and_an_unproven_done_proves_nothing",
                     "test_registrations_keep_their_address_and_pending_names_are_capped_per_address"]


@pytest.mark.parametrize("name", IDENTITY_CONTRACT)
def test_identity_contract_holds_on_etcd(name, etcd_cluster, tmp_path, monkeypatch):
    from tests.etcd import test_nodestore_etcd as on_etcd

    on_etcd.test_contract_holds_on_etcd(name, etcd_cluster, tmp_path, monkeypatch)
