"""The etcd gateway client against a real three-member etcd cluster on loopback."""

import threading

import pytest

from agent.server.store.etcd.client import (
    EtcdClient,
    EtcdError,
    EtcdNoSpace,
    EtcdUnavailable,
    cmp_absent,
    cmp_unchanged_since,
    op_put,
    parse_store_url,
    prefix_end,
)
from tests.helpers.etcd_cluster import EtcdCluster, have_etcd
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.skipif(not have_etcd(), reason="etcd-server is not installed (make test installs it)")


@pytest.fixture
def client(etcd_cluster):
    url = parse_store_url(etcd_cluster.url)
    c = EtcdClient(url.endpoints, timeout=3)
    yield c
    c.close()


def test_store_url_forms():
    u = parse_store_url("etcd://127.0.0.1:2379,127.0.0.2:2379")
    assert u.endpoints == ("http://127.0.0.1:2379", "http://127.0.0.2:2379") and u.prefix == "/node-agent/"
    assert parse_store_url("etcd+https://h:1/x/y").endpoints == ("https://h:1",)
    assert parse_store_url("etcd+https://h:1/x/y").prefix == "/x/y/"
    for bad in ("http://h:1", "etcd://", "etcd://h", "etcd://h:port"):
        with pytest.raises(ValueError):
            parse_store_url(bad)


def test_prefix_end():
    assert prefix_end(b"a/") == b"a0"
    assert prefix_end(b"a\xff") == b"b"


def test_put_get_range_delete(client):
    client.put("/t1/a", "1")
    client.put("/t1/b", b"2")
    assert client.get("/t1/a").value == b"1"
    kvs, rev = client.range("/t1/", prefix=True)
    assert [kv.key for kv in kvs] == [b"/t1/a", b"/t1/b"] and rev >= kvs[-1].mod_revision
    assert client.delete("/t1/", prefix=True) == 2
    assert client.get("/t1/a") is None


def test_txn_create_only_once(client):
    ok1, _ = client.txn([cmp_absent("/t2/k")], [op_put("/t2/k", "first")])
    ok2, _ = client.txn([cmp_absent("/t2/k")], [op_put("/t2/k", "second")])
    assert (ok1, ok2) == (True, False)
    assert client.get("/t2/k").value == b"first"


def test_txn_guard_on_a_prefix(client):
    _, rev = client.range("/t3/", prefix=True)
    assert client.txn([cmp_unchanged_since("/t3/", rev)], [op_put("/t3/a", "x")])[0]
    # Someone else wrote under the prefix after `rev`: the guarded write must fail.
    assert not client.txn([cmp_unchanged_since("/t3/", rev)], [op_put("/t3/b", "y")])[0]


def test_lease_expiry_deletes_keys(client):
    lease = client.grant(1)
    client.put("/t4/held", "n1", lease=lease)
    assert client.get("/t4/held").lease == lease
    wait_for(lambda: client.get("/t4/held") is None, "a 1 s lease expires", 30)


def test_watch_sees_changes_in_order(client):
    _, rev = client.range("/t5/", prefix=True)
    seen, stop, done = [], threading.Event(), threading.Event()

    def on_events(events, _rev):
        seen.extend((e.type, e.kv.key, e.kv.value) for e in events)
        if len(seen) >= 3:
            done.set()

    client.watch("/t5/", rev, on_events, stop)
    client.put("/t5/a", "1")
    client.put("/t5/a", "2")
    client.delete("/t5/a")
    assert done.wait(10)
    stop.set()
    assert seen == [("PUT", b"/t5/a", b"1"), ("PUT", b"/t5/a", b"2"), ("DELETE", b"/t5/a", b"")]


def test_fails_over_when_a_member_dies(etcd_cluster):
    url = parse_store_url(etcd_cluster.url)
    # A write waits for a leader: if the killed member led, the others elect one first (about
    # a second, longer on a loaded machine), so the call's deadline is generous.
    c = EtcdClient(url.endpoints, timeout=20)
    try:
        c.put("/t6/k", "before")
        etcd_cluster.kill(0)
        try:
            assert c.put("/t6/k", "after") > 0
            assert c.get("/t6/k").value == b"after"
            health = c.endpoint_status()
            assert [h["healthy"] for h in health] == [False, True, True]
        finally:
            etcd_cluster.start(0)
    finally:
        c.close()


def test_unreachable_store_says_so():
    c = EtcdClient(["http://127.0.0.1:9"], timeout=0.5)
    with pytest.raises(EtcdUnavailable, match="127.0.0.1:9"):
        c.get("/x")


# -- drain leases across replicas --------------------------------------------------------------

def test_concurrent_drains_never_exceed_max_unavailable(etcd_cluster):
    """30 nodes ask at once through three clients (one per member, as three replicas would)."""
    from concurrent.futures import ThreadPoolExecutor

    from agent.server.store.etcd import drains

    url = parse_store_url(etcd_cluster.url)
    clients = [EtcdClient([url.endpoints[i]] + [e for e in url.endpoints if e != url.endpoints[i]], timeout=5)
               for i in range(3)]
    prefix = "/drain-test/"
    clients[0].delete(prefix, prefix=True)
    peak, lock, granted = [0], threading.Lock(), []

    def ask(n):
        ans = drains.request_drain(clients[n % 3], prefix, f"node-{n}", "worker", "rendered-worker-2", 3, 60)
        if ans.granted:
            with lock:
                granted.append(f"node-{n}")
                live = len(drains.holders(clients[0], prefix, "worker"))
                peak[0] = max(peak[0], live)
        return ans

    with ThreadPoolExecutor(max_workers=30) as pool:
        answers = list(pool.map(ask, range(30)))
    assert len(granted) == 3 and peak[0] <= 3
    assert sorted(h["node"] for h in drains.holders(clients[1], prefix, "worker")) == sorted(granted)
    waiting = [a for a in answers if not a.granted]
    assert all(a.retry_after >= 1 and len(a.holders) == 3 for a in waiting)
    # A holder asking again renews; releasing frees a slot for the next node.
    again = drains.request_drain(clients[2], prefix, granted[0], "worker", "rendered-worker-2", 3, 60)
    assert again.granted and again.renewed
    assert drains.release(clients[1], prefix, granted[0]) == "worker"
    assert drains.request_drain(clients[0], prefix, "node-late", "worker", "c", 3, 60).granted
    for c in clients:
        c.close()


def test_expired_drain_lease_frees_its_slot(client):
    from agent.server.store.etcd import drains

    prefix = "/drain-ttl/"
    assert drains.request_drain(client, prefix, "a", "infra", "c", 1, 1).granted
    assert not drains.request_drain(client, prefix, "b", "infra", "c", 1, 1).granted
    wait_for(lambda: drains.request_drain(client, prefix, "b", "infra", "c", 1, 1).granted,
             "an expired lease frees its slot", 10, interval=0.3)


# -- maintenance: compaction and alarms (issue 28) --------------------------------------------------

def test_compaction_makes_old_revisions_unreadable(client):
    first = client.put("/compact-test/k", "v1")
    last = client.put("/compact-test/k", "v2")
    assert client.range("/compact-test/k", revision=first)[0][0].value == b"v1"
    assert client.compact(last) is True
    with pytest.raises(EtcdError, match="compacted"):
        client.range("/compact-test/k", revision=first)
    assert client.get("/compact-test/k").value == b"v2"  # the current value stays
    assert client.compact(first) is False  # already compacted that far: said, not raised


def test_a_full_database_raises_nospace_and_the_alarm_api_names_it(tmp_path):
    """A one-member cluster with a 2 MiB quota, filled for real: the refused write says NOSPACE
    at once (EtcdNoSpace, a kind of EtcdUnavailable: 503 for the caller), and the alarm API
    names the alarm and its member."""
    with EtcdCluster(str(tmp_path / "small"), size=1, quota_bytes=2 << 20) as small:
        c = EtcdClient(parse_store_url(small.url).endpoints, timeout=5)
        try:
            assert c.alarms() == []
            with pytest.raises(EtcdNoSpace, match="NOSPACE"):
                for i in range(100):
                    c.put(f"/fill/{i}", b"x" * (200 << 10))
            assert [a["alarm"] for a in c.alarms_seen] == ["NOSPACE"]  # known before anyone asked
            alarms = c.alarms()
            assert [a["alarm"] for a in alarms] == ["NOSPACE"] and alarms[0]["member"] not in ("", "0", "?")
            assert c.range("/fill/0")[0]  # reads still work
        finally:
            c.close()
