"""The etcd node store against a real three-member cluster: two store instances stand for two
replicas; what one writes the other sees through its watch."""

import time

import pytest

from agent.server.rollout.progress import Membership
from agent.server.store.etcd.client import (
    EtcdClient,
    EtcdError,
    EtcdNoSpace,
    EtcdUnavailable,
    parse_store_url,
)
from agent.server.store.etcd.heartbeat import Compactor, Heartbeat
from agent.server.store.etcd.nodestore import EtcdNodeStore
from agent.server.store.nodestore import PoolRow
from tests.helpers.etcd_cluster import EtcdCluster, have_etcd
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.skipif(not have_etcd(), reason="etcd-server is not installed (make test installs it)")


@pytest.fixture
def replicas(etcd_cluster, request):
    url = parse_store_url(etcd_cluster.url)
    prefix = f"/t-{request.node.name}/"
    stores = [EtcdNodeStore(EtcdClient(url.endpoints[i:] + url.endpoints[:i], timeout=10), prefix)
              for i in range(2)]
    yield stores
    for s in stores:
        s.close()
        s.client.close()


def worker(why="selector"):
    return Membership("worker", why)


def test_a_report_through_one_replica_counts_on_the_other(replicas):
    a, b = replicas
    a.record_report("n1", {"pool": "worker", "state": "Done", "currentConfig": "rendered-worker-1"}, worker(), 1.0)
    assert a.counts("worker").machine == 1  # read-your-writes on the replica that took it
    wait_for(lambda: b.proof("worker", "rendered-worker-1").updated == 1, "replica B sees the proof", 30)
    assert b.node("n1").report["currentConfig"] == "rendered-worker-1"
    # A newer report replaces the old contribution everywhere.
    b.record_report("n1", {"pool": "worker", "state": "Working", "currentConfig": "rendered-worker-1"}, worker(), 2.0)
    wait_for(lambda: a.counts("worker").working == 1 and a.counts("worker").done == 0, "replica A sees Working", 30)
    assert a.proof("worker", "rendered-worker-1").updated == 0


def test_pool_rows_are_compare_and_swap(replicas):
    a, b = replicas
    row = a.update_pool("infra", lambda old: PoolRow("infra", "r-2", "r-1"))
    assert row.target == "r-2"
    wait_for(lambda: "infra" in b.pools(), "replica B sees the pool row", 30)
    # decide() sees the row as etcd has it, not as the caller last saw it.
    seen = []
    b.update_pool("infra", lambda old: seen.append(old) or PoolRow("infra", "r-2", "r-2"))
    assert seen[0] == PoolRow("infra", "r-2", "r-1")
    assert [h["field"] for h in a.history("infra")] == ["target", "current", "current"]


def test_rendered_configs_are_written_once_and_read_anywhere(replicas):
    a, b = replicas
    a.put_rendered("worker", "rendered-worker-abc", {"config": {"ignition": {"version": "3.4.0"}}}, ["00-worker"])
    a.put_rendered("worker", "rendered-worker-abc", {"config": "overwritten?"}, [])
    assert b.rendered_spec("rendered-worker-abc") == {"config": {"ignition": {"version": "3.4.0"}}}
    assert b.rendered_pool("rendered-worker-abc") == "worker"


def test_serving_snapshot_is_one_memory_read(replicas):
    a, b = replicas
    a.update_pool("worker", lambda old: PoolRow("worker", "r-2", "r-1"))
    a.set_meta("state_signature", "sig-1")
    a.record_report("n2", {"pool": "worker", "state": "Done", "currentConfig": "r-2", "currentImage": "img@sha256:1"},
                    worker(), 3.0)
    wait_for(lambda: b.serving("worker", "n2").node is not None, "replica B has the node", 30)
    s = b.serving("worker", "n2")
    assert (s.state_signature, s.pool.target, s.target_proof("img@sha256:1").updated) == ("sig-1", "r-2", 1)


def test_done_on_the_leased_config_releases_the_lease(replicas):
    a, b = replicas
    assert a.acquire_lease("n3", "worker", "r-9", 1, 60, time.time()).granted
    assert not b.acquire_lease("n4", "worker", "r-9", 1, 60, time.time()).granted
    rec = b.record_report("n3", {"pool": "worker", "state": "Done", "currentConfig": "r-9"}, worker(), 4.0)
    assert rec.released
    assert b.acquire_lease("n4", "worker", "r-9", 1, 60, time.time()).granted
    assert [e["action"] for e in a.drain_events("n3")] == ["cordon", "drain", "uncordon"]


def test_done_releases_a_lease_this_replicas_watch_has_not_delivered_yet(replicas):
    a, _ = replicas
    lagging = EtcdNodeStore(a.client, a.prefix, watch=False)  # a watch any amount behind
    assert a.acquire_lease("n6", "worker", "r-9", 1, 60, time.time()).granted
    rec = lagging.record_report("n6", {"pool": "worker", "state": "Done", "currentConfig": "r-9"}, worker(), 6.0)
    assert rec.released
    assert a.leases("worker") == []


def test_membership_rebuild_is_local(replicas):
    a, b = replicas
    a.record_report("n5", {"pool": "worker", "state": "Done", "currentConfig": "r-1",
                           "labels": {"node-role.kubernetes.io/infra": ""}}, worker(), 5.0)
    wait_for(lambda: b.node("n5") is not None, "replica B has n5", 30)

    def assign(report):
        return Membership("infra", "label") if "node-role.kubernetes.io/infra" in (report.get("labels") or {}) \
            else Membership("worker", "selector")

    assert b.rebuild("pools-v2", assign) >= 1
    assert b.node("n5").pool == "infra" and b.counts("infra").machine == 1
    assert b.membership_signature() == "pools-v2"


def test_reads_keep_answering_and_writes_fail_clearly_when_etcd_is_away(etcd_cluster, replicas):
    a, _ = replicas
    a.record_report("n6", {"pool": "worker", "state": "Done", "currentConfig": "r-1"}, worker(), 6.0)
    a.client.endpoints = ["http://127.0.0.1:9"]  # as if every member were gone
    a.client.timeout = 0.5
    assert a.node("n6") is not None and a.counts("worker").machine >= 1
    with pytest.raises(EtcdUnavailable):
        a.record_report("n7", {"pool": "worker", "state": "Working"}, worker(), 7.0)
    assert a.node("n7") is None  # nothing acknowledged, nothing counted


# -- the NodeStore contract (tests/etcd/test_nodestore.py), run on the etcd store -----------------------

CONTRACT = ["test_counters_equal_a_full_recount_after_random_reports", "test_rebuild_reassigns_every_node_and_recounts",
            "test_paging_by_pool", "test_done_report_releases_the_lease_on_that_config",
            "test_serving_is_one_snapshot", "test_update_pool_keeps_history_and_skips_no_change",
            "test_open_first_boots_are_those_not_done_by_pool"]


@pytest.mark.parametrize("name", CONTRACT)
def test_contract_holds_on_etcd(name, etcd_cluster, tmp_path, monkeypatch):
    from tests.etcd import test_nodestore as contract

    url = parse_store_url(etcd_cluster.url)
    opened = []

    def make_store(_tmp):
        store = EtcdNodeStore(EtcdClient(url.endpoints, timeout=10), f"/contract-{name}/", watch=False)
        store.client.delete(f"/contract-{name}/", prefix=True)
        store._load()
        opened.append(store)
        return store

    monkeypatch.setattr(contract, "make_store", make_store)
    try:
        getattr(contract, name)(tmp_path)
    finally:
        for s in opened:
            s.close()
            s.client.close()


# -- compaction (issue 28): etcd's history stays bounded ----------------------------------------------

@pytest.fixture
def small_etcd(tmp_path):
    """A one-member cluster of its own (compaction is cluster-wide: the shared one is left alone)."""
    with EtcdCluster(str(tmp_path / "etcd"), size=1, quota_bytes=4 << 20) as c:
        yield c


def test_one_process_compacts_per_interval_keeping_a_window(small_etcd):
    url = parse_store_url(small_etcd.url)
    client = EtcdClient(url.endpoints, timeout=5)
    try:
        compactors = [Compactor(client, "/c/compaction", interval=0.2, keep=10, who=f"p{i}") for i in range(3)]
        first = client.put("/c/k", "0")
        for i in range(30):
            client.put("/c/k", str(i))
        done = []
        for _ in range(4):  # four rounds: every process ticks once per round
            time.sleep(0.2)
            done.append([c.tick() for c in compactors])
        compacted = [r for rnd in done for r in rnd if r is not None]
        assert compacted, done
        # At most one process compacts per round (the others lost the turn to it).
        assert all(sum(r is not None for r in rnd) <= 1 for rnd in done), done
        _, current = client.range("/c/k")
        assert max(compacted) >= current - 10 - 2  # the window: current revision minus keep
        with pytest.raises(EtcdError, match="compacted"):
            client.range("/c/k", revision=first)
        assert client.range("/c/k", revision=current - 5)[0]  # inside the window: still readable
    finally:
        client.close()


def test_history_no_longer_fills_the_quota_and_replicas_follow_compactions(small_etcd):
    """A 4 MiB quota and 60 KiB reports (the largest a report may be is 64 KiB): 300 reports of
    the same node are 18 MiB of history, which filled the quota (NOSPACE) when nothing compacted.
    With the heartbeat's compaction (every 0.2 s, 20 revisions kept) they all go in, and the
    other replica, whose watch may fall behind a compaction, still sees the last one."""
    url = parse_store_url(small_etcd.url)
    stores = [EtcdNodeStore(EtcdClient(url.endpoints, timeout=10), "/q/") for _ in range(2)]
    beats = [Heartbeat(s, f"r{i}", lambda: {}, compact_interval=0.2, compact_keep=20) for i, s in enumerate(stores)]
    try:
        a, b = stores
        for i in range(300):
            a.record_report("n1", {"pool": "worker", "state": "Working", "reason": f"{i} " + "p" * (60 << 10)},
                            worker(), float(i))
            time.sleep(0.01)
        wait_for(lambda: (b.node("n1").report["reason"] or "").startswith("299 "), "replica B sees the last report", 30)
        assert a.client.alarms() == []
        assert max(h.compactor.compacted for h in beats) > 0
    finally:
        for s in stores:
            s.close()
            s.client.close()


def test_compaction_goes_on_under_nospace_and_the_store_names_the_alarm(small_etcd):
    url = parse_store_url(small_etcd.url)
    store = EtcdNodeStore(EtcdClient(url.endpoints, timeout=10), "/ns/")
    try:
        compactor = Compactor(store.client, store._k("compaction"), interval=0.1, keep=5)
        compactor.tick()  # the first look
        with pytest.raises(EtcdNoSpace):
            for i in range(200):
                store.record_report("n1", {"pool": "worker", "state": "Working", "reason": "p" * (60 << 10)},
                                    worker(), float(i))
        assert [a["alarm"] for a in store.alarms()] == ["NOSPACE"]
        time.sleep(0.1)
        assert compactor.tick() is not None  # the claim (a write) is refused; the compaction is not
    finally:
        store.close()
        store.client.close()
