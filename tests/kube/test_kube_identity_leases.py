"""Node credentials as Secrets (agent/server/store/kube/identity.py) and drain leases as
coordination.k8s.io Leases (agent/server/store/kube/leases.py), against the real control plane
(tests/helpers/kube_cluster.py), with the same semantics as the etcd versions (etcd/identity.py,
etcd/drains.py; tests/etcd/test_nodestore.py::test_registrations_and_approval is mirrored here).

Each test runs in a namespace of its own, as a user bound there only to the rules of the
namespaced Role deploy/rbac.yaml ships for the server's namespace (copied into a ClusterRole so
that a RoleBinding can grant them in the test's namespace); were that Role missing, ``RULES``
(exactly the verbs these two classes use) stand in. A "replica" is another instance with a
client of its own.
"""

import base64
import json
import os
import socket
import threading
import time

import pytest
import yaml

from agent.server.rollout.identity import credential_hash
from agent.server.store.errors import TooManyPending
from agent.server.store.kube import identity as kube_identity
from agent.server.store.kube import leases as kube_leases
from agent.server.store.kube.client import KubeClient, KubeError, KubeUnavailable, load_kubeconfig
from agent.server.store.kube.identity import KubeCredentials
from agent.server.store.kube.leases import KubeLeases
from agent.server.store.kube.watch import KubeForbidden, NewestObjects
from agent.server.store.kube.workerturns import WorkerTurns
from tests.helpers import paths
from tests.helpers.kube_cluster import unique
from tests.helpers.wait import wait_for

ROLE = "test-node-config-server-identity-leases"
RULES = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "create", "update", "delete"]},
         {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list", "watch", "create", "update"]}]
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/{}/leases"
RBAC = os.path.join(paths.REPO, "deploy", "rbac.yaml")


def shipped_rules():
    """The rules of deploy/rbac.yaml's Roles for node state and for node credentials (two
    namespaces there; one per test here, so both Roles' rules apply in it)."""
    with open(RBAC) as f:
        rules = [rule for doc in yaml.safe_load_all(f) if doc and doc.get("kind") == "Role"
                 and doc["metadata"]["name"] in ("node-config-server", "node-config-server-credentials")
                 for rule in doc["rules"]]
    return rules or RULES


# -- pure rules: names, times, the newest-version merge ------------------------------------------

def test_names_fit_the_api_limits():
    long_node = "n" * 240
    assert kube_identity.secret_name("w1") == "node-credential-w1"
    assert kube_identity.secret_name(long_node).startswith("node-credential-") and len(
        kube_identity.secret_name(long_node)) == 16 + 40
    digest = credential_hash("s3cret")
    assert kube_identity.hash_label(digest) == digest[:63]
    assert len(kube_identity.hash_label("h-a")) == 63 and kube_identity.hash_label("h-a") != "h-a"
    assert kube_leases.slot_name("worker", 1) == "drain-worker-1"
    assert len(kube_leases.slot_name("p" * 250, 3)) == len("drain-") + 40 + 2
    assert kube_leases.pool_label("worker") == "worker" and len(kube_leases.pool_label("p" * 64)) == 40
    t = 1764118000.123456
    assert abs(kube_leases.parse_time(kube_leases.micro_time(t)) - t) < 1e-6
    assert kube_leases.micro_time(t) == "2025-11-26T00:46:40.123456Z"  # metav1.MicroTime's RFC3339Micro
    assert kube_leases.parse_time("2025-11-26T00:46:40Z") == 1764118000.0 and kube_leases.parse_time(None) == 0.0


def obj(name, version, **extra):
    return dict({"metadata": {"name": name, "resourceVersion": str(version)}}, **extra)


def test_newest_objects_keep_own_writes_against_late_events_and_relists():
    c = NewestObjects()
    assert c.put(obj("a", 10, v="mine")) == (None, obj("a", 10, v="mine"))
    assert c.event("MODIFIED", obj("a", 7, v="late")) is None  # older than this process's write
    assert c.objects["a"]["v"] == "mine"
    assert c.event("MODIFIED", obj("a", 12, v="newer"))[1]["v"] == "newer"
    c.put(obj("b", 20), deleted=True)  # deleted here (no copy before: nothing to report)
    assert c.event("ADDED", obj("b", 19)) is None and "b" not in c.objects  # must not come back
    c.put(obj("d", 30, v="d"))
    c.resync([obj("a", 12, v="newer"), obj("e", 5)], "25")  # a list read before "d" was written
    assert set(c.objects) == {"a", "d", "e"}
    c.put(obj("e", 40), deleted=True)
    c.resync([obj("a", 12, v="newer"), obj("d", 30, v="d"), obj("e", 5)], "35")  # e: listed before its delete
    assert set(c.objects) == {"a", "d"}
    c.resync([obj("a", 12, v="newer")], "50")  # "d" is gone from a later list: deleted elsewhere
    assert set(c.objects) == {"a"}


class FixedAPI:
    """A list and a watch answering from fixed data (the hook in isolation)."""

    def list(self, path, params, metadata_only=False):
        return [obj("a", 5)], "5"

    def watch(self, path, version, timeout, params, metadata_only=False):
        yield from ()


def test_the_watch_hook_hands_over_lists_and_events_and_can_keep_no_copy():
    from agent.server.store.kube import client as kube_client
    from agent.server.store.kube import watch as kube_watch

    seen = []
    r = kube_watch.Reflector(FixedAPI(), kube_client.SECRETS, namespace="ns", keep_objects=False,
                             on_event=lambda kind, o: seen.append((kind, o)))
    r._relist()
    assert seen == [("RELIST", {"items": [obj("a", 5)], "metadata": {"resourceVersion": "5"}})]
    assert r.synced.is_set() and r.snapshot() == {} and r.version == "5"
    r._apply({"type": "MODIFIED", "object": obj("a", 6)})
    r._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}})
    r._apply({"type": "DELETED", "object": obj("a", 9)})
    assert seen[1:] == [("MODIFIED", obj("a", 6)), ("DELETED", obj("a", 9))] and r.snapshot() == {}
    assert r.version == "9"
    kept = kube_watch.Reflector(FixedAPI(), kube_client.SECRETS, namespace="ns")  # the default: unchanged
    kept._relist()
    assert kept.snapshot() == {"a": obj("a", 5)}


# -- the cluster: a namespace and a least-privilege user per test --------------------------------

@pytest.fixture(scope="module")
def role(kube_cluster):
    doc = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE},
           "rules": shipped_rules()}
    kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    yield ROLE
    kube_cluster.kubectl("delete", "clusterrole", ROLE, check=False)


class Env:
    def __init__(self, kc, namespace, kubeconfig):
        self.kc, self.ns, self.kubeconfig = kc, namespace, kubeconfig
        self.clients = []
        self.closers = []

    def client(self):
        c = KubeClient(load_kubeconfig(self.kubeconfig))
        self.clients.append(c)
        return c

    def creds(self, watch=True, client=None):
        c = KubeCredentials(client or self.client(), self.ns, watch)
        self.closers.append(c)
        assert c.wait_synced(30)
        return c

    def leases(self, watch=True, client=None):
        c = KubeLeases(client or self.client(), self.ns, watch)
        self.closers.append(c)
        assert c.wait_synced(30)
        return c

    def api(self, path):
        r = self.kc.get(path)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture
def env(kube_cluster, role):
    ns = unique("hb")
    user = unique("hb-user")
    kube_cluster.kubectl("create", "namespace", ns)
    kube_cluster.kubectl("create", "rolebinding", "ncs", f"--clusterrole={role}", f"--user={user}", "-n", ns)
    wait_for(lambda: kube_cluster.kubectl("auth", "can-i", "update", "leases.coordination.k8s.io", "-n", ns,
                                          f"--as={user}", check=False).stdout.strip() == "yes", "the binding in effect")
    e = Env(kube_cluster, ns, kube_cluster.kubeconfig_for(user))
    yield e
    for c in e.closers:
        c.close()
    for c in e.clients:
        c.close()
    kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_stopped_watch_ends_its_thread_and_connection_at_once_not_at_the_api_servers_timeout(env):
    """Reflector.stop() cuts the open watch (its timeout is WATCH_SECONDS, minutes): the thread
    ends, a later event is not seen, and nothing holds the API server's graceful stop."""
    from agent.server.store.kube import watch as kube_watch
    from agent.server.store.kube.client import LEASES

    seen = []
    r = kube_watch.Reflector(env.client(), LEASES, namespace=env.ns, on_event=lambda kind, o: seen.append(kind))
    r.start()
    assert r.wait_synced(30)
    wait_for(lambda: r._stream is not None, "the watch open", 30)
    r.stop()
    wait_for(lambda: not r._thread.is_alive(), "the watch thread ended", 30)
    before = list(seen)
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "after-stop"}}
    env.kc.kubectl("apply", "-n", env.ns, "-f", "-", input=json.dumps(lease))
    assert seen == before


class Counting:
    """A client that counts the requests made through it (and can run a hook before a write)."""

    def __init__(self, client, before_write=None):
        self.client, self.calls, self.before_write = client, [], before_write
        self.refused = []  # (verb, HTTP status) of each write the API server refused

    def __getattr__(self, name):
        return getattr(self.client, name)

    def _call(self, verb, *args, **kw):
        self.calls.append(verb)
        if verb in ("create", "replace") and self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()
        try:
            return getattr(self.client, verb)(*args, **kw)
        except KubeError as exc:
            self.refused.append((verb, exc.status))
            raise

    def get(self, *a, **kw):
        return self._call("get", *a, **kw)

    def list(self, *a, **kw):
        return self._call("list", *a, **kw)

    def create(self, *a):
        return self._call("create", *a)

    def replace(self, *a):
        return self._call("replace", *a)


# -- credentials -------------------------------------------------------------------------------

def test_credentials_put_lookup_owner_replace_and_forget(env):
    a = env.creds()
    h1, h2 = credential_hash("first-secret"), credential_hash("second-secret")
    assert a.put_credential("w1", h1, 1.0, False)
    assert a.credential("w1") == h1 and a.credential_owner(h1) == "w1"
    assert not a.put_credential("w1", h2, 2.0, False)  # registered: only a replace
    assert a.credential("w1") == h1
    assert a.put_credential("w1", h2, 3.0, True)
    assert a.credential("w1") == h2 and a.credential_owner(h2) == "w1"
    assert a.credential_owner(h1) is None  # the rotated credential's old hash owns nothing
    assert a.registration("w1").created == 3.0 and a.registration("w1").approved == 1.0  # same approval
    secret = env.api(f"/api/v1/namespaces/{env.ns}/secrets/node-credential-w1")
    assert secret["metadata"]["labels"][kube_identity.HASH_LABEL] == h2[:63]
    assert a.forget("w1") and not a.forget("w1")
    assert a.credential("w1") is None and a.credential_owner(h2) is None and a.registration("w1") is None
    assert env.kc.get(f"/api/v1/namespaces/{env.ns}/secrets/node-credential-w1").status_code == 404


def test_registrations_approval_pending_and_max_pending(env):
    store = env.creds()
    assert store.put_credential("a", "h-a", 1.0, False, approved=False, max_pending=2)
    assert store.put_credential("b", "h-b", 2.0, False, approved=False, max_pending=2)
    with pytest.raises(TooManyPending):
        store.put_credential("c", "h-c", 3.0, False, approved=False, max_pending=2)
    assert store.credential("c") is None and store.credential_owner("h-c") is None  # nothing stored
    assert not store.put_credential("a", "h-a", 3.0, False, approved=False, max_pending=2)  # taken, not "too many"
    assert store.put_credential("c", "h-c", 3.0, False, approved=True, by="rule", max_pending=2)
    assert not store.put_credential("c", "h-other", 3.5, False)
    assert store.pending_count() == 2
    reg = store.registration("a")
    assert reg.pending and reg.managed and reg.served == () and reg.labels is None and reg.created == 1.0
    assert [r.node for r in store.registrations(pending=True)] == ["a", "b"]
    assert [r.node for r in store.registrations(pending=False)] == ["c"]
    assert [r.node for r in store.registrations(after="a", limit=1)] == ["b"]
    assert store.registration("c").by == "rule" and store.registration("c").approved == 3.0
    approved = store.approve("a", 5.0, "admin", {"x": "y"})
    assert (approved.approved, approved.by, approved.labels, approved.pending) == (5.0, "admin", {"x": "y"}, False)
    assert store.approve("a", 9.0, "admin").approved == 5.0  # approving again keeps the time and the labels
    assert store.registration("a").labels == {"x": "y"}
    assert store.approve("nope", 5.0, "admin") is None and store.pending_count() == 1
    assert store.put_credential("a", "h-a2", 6.0, True)  # a new credential keeps its approval
    assert store.registration("a").approved == 5.0 and store.credential_owner("h-a2") == "a"
    assert store.credential_owner("h-a") is None
    for i in range(10):
        store.note_served("a", f"cfg-{i}")
    store.note_served("a", "cfg-9")  # already the newest: no change
    assert store.registration("a").served == tuple(f"cfg-{i}" for i in range(2, 10))
    store.note_served("nope", "x")  # no such node: nothing
    assert store.forget("b") and store.registration("b") is None and store.pending_count() == 0
    # Without a watch (a one-shot tool), the same answers come from the API.
    cold = env.creds(watch=False)
    assert [r.node for r in cold.registrations()] == ["a", "c"] and cold.pending_count() == 0
    assert cold.registration("a").served == tuple(f"cfg-{i}" for i in range(2, 10))


def test_a_replica_sees_a_registration_through_the_watch_and_before_it_with_one_read(env):
    a, b = env.creds(), env.creds()
    digest = credential_hash("s")
    assert a.put_credential("w2", digest, 1.0, False, approved=False)
    # Through the watch: registrations() and pending_count() read memory only, never the API.
    wait_for(lambda: [r.node for r in b.registrations()] == ["w2"] and b.pending_count() == 1,
             "the registration through the other replica's watch", timeout=20)
    assert b.credential_owner(digest) == "w2"
    # Before its watch delivers it: a replica without one finds the owner with one list by the
    # hash label, the credential and the registration with one read each.
    counted = Counting(env.client())
    c = env.creds(watch=False, client=counted)
    assert c.credential_owner(digest) == "w2" and counted.calls == ["list"]
    assert c.credential_owner(digest) == "w2" and counted.calls == ["list"]  # remembered
    assert c.credential_owner(credential_hash("unknown")) is None and counted.calls == ["list", "list"]
    # Misses are rationed: made-up credentials cannot make every request a list of all Secrets.
    c.lookup_rate, c.lookup_burst, c._lookups = 0.0, 2, (2.0, time.monotonic())
    assert [c.credential_owner(credential_hash(f"made-up-{i}")) for i in range(5)] == [None] * 5
    assert counted.calls == ["list"] * 4  # two before, two of the five
    counted2 = Counting(env.client())
    d = env.creds(watch=False, client=counted2)
    assert d.credential("w2") == digest and counted2.calls == ["get"]
    assert d.registration("w2").pending and counted2.calls == ["get"]  # noted with the first read
    # A replica that registers the node again without replace loses to the first (409).
    assert not b.put_credential("w2", credential_hash("other"), 2.0, False)
    assert a.credential("w2") == digest


def test_a_registration_change_writes_from_the_followed_copy_and_reads_only_after_a_conflict(env):
    """A config served to a node for the first time is noted with one request (the replace, from
    the Secret as this replica follows it), not a read and a write; another replica's write
    in between is refused (409), read, and kept beside this one."""
    counted = Counting(env.client())
    a, b = env.creds(client=counted), env.creds()
    assert a.put_credential("w1", credential_hash("s"), 1.0, False)
    del counted.calls[:], counted.refused[:]
    a.note_served("w1", "cfg-1")
    assert counted.calls == ["replace"] and counted.refused == []  # (the watch lists only when it starts)
    wait_for(lambda: b.registration("w1").served == ("cfg-1",), "the note through the other replica's watch")
    del counted.calls[:]
    counted.before_write = lambda: b.note_served("w1", "cfg-2")  # lands before a's write
    a.note_served("w1", "cfg-3")
    assert counted.calls == ["replace", "get", "replace"] and counted.refused == [("replace", 409)]
    assert a.registration("w1").served == ("cfg-1", "cfg-2", "cfg-3")
    # "Nothing to write" is never decided from a copy: the pending report a replica keeps
    # already, read to be sure (another replica may have changed it).
    kept = json.dumps({"pool": "worker", "report": {"state": "Done"}, "received": 1.0})
    assert a.keep_report("w1", kept)
    del counted.calls[:]
    assert a.keep_report("w1", kept) and counted.calls == ["get"]
    # Without a watch (a one-shot tool): a read, then the write, as before.
    counted_cold = Counting(env.client())
    cold = env.creds(watch=False, client=counted_cold)
    cold.note_served("w1", "cfg-4")
    assert counted_cold.calls == ["get", "replace"]  # its registration read, then the write from that copy
    assert wait_for(lambda: a.registration("w1").served[-1] == "cfg-4", "the cold write through the watch")


def test_only_the_hash_is_stored_in_a_typed_labelled_secret(env):
    a = env.creds()
    secret_text = "this-is-the-node-credential"
    assert a.put_credential("w3", credential_hash(secret_text), 1.0, False)
    secret = env.api(f"/api/v1/namespaces/{env.ns}/secrets/node-credential-w3")
    dump = json.dumps(secret)
    assert secret_text not in dump and base64.b64encode(secret_text.encode()).decode() not in dump
    record = json.loads(base64.b64decode(secret["data"]["record"]))
    assert record == {"hash": credential_hash(secret_text), "created": 1.0, "approved": 1.0, "by": ""}
    assert secret_text not in base64.b64decode(secret["data"]["record"]).decode()
    assert secret["type"] == "node-agent.openshift.io/credential"
    assert secret["metadata"]["annotations"] == {"node-agent.openshift.io/node": "w3"}
    assert secret["metadata"]["labels"] == {
        "app.kubernetes.io/name": "node-config-server", "node-agent.openshift.io/kind": "credential",
        "node-agent.openshift.io/credential-hash": credential_hash(secret_text)[:63]}


def test_concurrent_registrations_of_one_node_through_three_replicas_store_one(env):
    replicas = [env.creds() for _ in range(3)]
    results, errors = {}, []

    def register(i):
        try:
            results[i] = replicas[i % 3].put_credential("w4", f"h-{i}", float(i), False)
        except Exception as exc:  # reported below, with its cause
            errors.append(f"{i}: {exc!r}")

    threads = [threading.Thread(target=register, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and not any(t.is_alive() for t in threads), errors
    winners = [i for i, ok in results.items() if ok]
    assert len(results) == 9 and len(winners) == 1
    assert all(r.credential("w4") == f"h-{winners[0]}" for r in replicas)


def test_rbac_refusal_names_the_verb_the_resource_and_deploy_rbac(env):
    stranger = KubeClient(load_kubeconfig(env.kc.kubeconfig_for(unique("nobody"))))
    env.clients.append(stranger)
    creds = KubeCredentials(stranger, env.ns, watch=False)
    with pytest.raises(KubeForbidden) as err:
        creds.put_credential("w5", "h", 1.0, False)
    assert "get secrets.core in namespace " + env.ns in str(err.value) and "deploy/rbac.yaml" in str(err.value)
    with pytest.raises(KubeForbidden) as err:
        KubeLeases(stranger, env.ns, watch=False).acquire("w5", "worker", "c", 1, 60, time.time())
    assert "list leases.coordination.k8s.io in namespace " + env.ns in str(err.value)
    assert "deploy/rbac.yaml" in str(err.value) and err.value.status == 403


def test_an_unreachable_api_server_is_kube_unavailable(env):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    creds = load_kubeconfig(env.kubeconfig)
    creds.server = f"https://127.0.0.1:{port}"
    away = KubeClient(creds, timeout=2)
    env.clients.append(away)
    for call in (lambda: KubeCredentials(away, env.ns, watch=False).put_credential("w6", "h", 1.0, False),
                 lambda: KubeCredentials(away, env.ns, watch=False).credential_owner("h"),
                 lambda: KubeLeases(away, env.ns, watch=False).acquire("w6", "worker", "c", 1, 60, time.time()),
                 lambda: KubeLeases(away, env.ns, watch=False).release("w6")):
        with pytest.raises(KubeUnavailable, match="unreachable"):
            call()


# -- drain leases ------------------------------------------------------------------------------

def api_holders(env, pool):
    """Live holders of ``pool`` from the API's own Lease objects (read as admin, not our cache)."""
    items = env.api(LEASES_PATH.format(env.ns) + f"?labelSelector=node-agent.openshift.io/pool={pool}")["items"]
    now = time.time()
    return sorted((o["metadata"]["name"], o["spec"]["holderIdentity"]) for o in items
                  if o["spec"].get("holderIdentity") and kube_leases.parse_time(o["spec"]["renewTime"])
                  + o["spec"]["leaseDurationSeconds"] >= now)


def test_limit_renew_release_and_holders_order(env):
    a, b = env.leases(), env.leases()
    t = time.time()
    g1 = a.acquire("n1", "worker", "c1", 2, 60, t)
    g2 = b.acquire("n2", "worker", "c1", 2, 60, t + 0.5)
    assert g1.granted and not g1.renewed and g1.expires == t + 60 and g1.holders == ["n1"]
    assert g2.granted and g2.holders == ["n1", "n2"]
    w = a.acquire("n3", "worker", "c1", 2, 60, time.time())
    assert not w.granted and w.holders == ["n1", "n2"] and 1 <= w.retry_after <= 30
    # Which slot a grant takes is a hash of the node's name (leases.spread): only the slots below
    # the limit, one node each.
    slots = dict((node, slot) for slot, node in api_holders(env, "worker"))
    assert sorted(slots) == ["n1", "n2"] and sorted(slots.values()) == ["drain-worker-0", "drain-worker-1"]
    lease = env.api(LEASES_PATH.format(env.ns) + "/" + slots["n1"])
    assert lease["spec"]["leaseDurationSeconds"] == 60 and lease["spec"]["acquireTime"].endswith("Z")
    assert lease["metadata"]["annotations"]["node-agent.openshift.io/config"] == "c1"
    # Renewal by the holder (through the other replica): the same slot, the grant time kept.
    r = b.acquire("n1", "worker", "c2", 2, 90, t + 10)
    assert r.granted and r.renewed and r.expires == t + 100 and r.holders == ["n1", "n2"]
    assert api_holders(env, "worker") == sorted((slot, node) for node, slot in slots.items())
    wait_for(lambda: [(h["node"], h["config"], h["granted"]) for h in a.holders("worker")]
             == [("n1", "c2", t), ("n2", "c1", t + 0.5)], "the renewal through the watch", timeout=20)
    assert a.held_by("n2") == {"node": "n2", "pool": "worker", "config": "c1", "granted": t + 0.5,
                               "expires": t + 60.5}
    assert a.holders("infra") == [] and a.held_by("n3") is None
    # Release: with a config, only the leased one; without, always.
    assert b.release("n1", current_config="other") is None and a.held_by("n1") is not None
    assert b.release("n1", current_config="c2") == "worker"
    assert b.held_by("n1") is None  # this replica's own write, at once
    assert a.release("n1") is None  # nothing held any more
    g3 = a.acquire("n3", "worker", "c1", 2, 60, t + 20)
    assert g3.granted and g3.holders == ["n2", "n3"]
    assert api_holders(env, "worker") == sorted([(slots["n1"], "n3"), (slots["n2"], "n2")])  # n1's slot, freed
    assert a.release("n2") == "worker" and a.release("n3") == "worker" and api_holders(env, "worker") == []


def test_an_expired_lease_frees_its_slot(env):
    a, b = env.leases(), env.leases()
    t = time.time()
    assert a.acquire("n1", "worker", "c", 1, 1, t).granted  # a TTL of one second
    assert not b.acquire("n2", "worker", "c", 1, 60, t).granted  # at the same instant: held
    granted = wait_for(lambda: b.acquire("n2", "worker", "c", 1, 60, time.time()).granted,
                       "the expired lease's slot", timeout=15)
    assert granted and api_holders(env, "worker") == [("drain-worker-0", "n2")]
    assert a.release("n1") is None  # its lease expired: nothing to release


def test_a_node_that_moves_pools_drops_its_old_lease(env):
    a = env.leases()
    assert a.acquire("n1", "worker", "c", 1, 60, time.time()).granted
    assert a.acquire("n9", "infra", "c", 1, 60, time.time()).granted
    assert not a.acquire("n1", "infra", "c", 1, 60, time.time()).granted  # infra is full: worker kept
    assert a.held_by("n1")["pool"] == "worker"
    assert a.release("n9") == "infra"
    moved = a.acquire("n1", "infra", "c2", 1, 60, time.time())
    assert moved.granted and not moved.renewed
    assert a.held_by("n1")["pool"] == "infra" and a.holders("worker") == []
    assert api_holders(env, "worker") == [] and api_holders(env, "infra") == [("drain-infra-0", "n1")]


def test_what_each_lease_call_costs(env):
    counted = Counting(env.client())
    cold = env.leases(watch=False, client=counted)
    t = time.time()

    def calls(fn):
        del counted.calls[:]
        fn()
        return list(counted.calls)

    assert calls(lambda: cold.acquire("n1", "worker", "c", 1, 60, t)) == ["list", "create", "list"]  # count, take, check
    assert calls(lambda: cold.acquire("n1", "worker", "c", 1, 60, t + 1)) == ["list", "replace"]  # a renewal
    assert calls(lambda: cold.acquire("n2", "worker", "c", 1, 60, t + 1)) == ["list"]  # a refusal
    assert calls(lambda: cold.held_by("n1")) == [] and cold.held_by("n1")["node"] == "n1"  # memory
    assert calls(lambda: cold.holders("worker")) == ["list"]  # no watch: read afresh
    watched = env.leases()
    wait_for(lambda: [h["node"] for h in watched.holders("worker")] == ["n1"], "the grant through the watch")
    assert calls(lambda: cold.release("n1")) == ["list", "replace"]
    assert calls(lambda: cold.acquire("n2", "worker", "c", 1, 60, time.time())) == ["list", "replace", "list"]


def test_a_watching_replica_counts_a_grant_from_memory_and_checks_it_with_one_list_outside_its_turn(env):
    """Issue 53: a grant read every drain Lease from the API before its write, in the pool's turn:
    at 1,000 nodes a wave of 100 drain asks waited 7 s for its median grant. A replica that
    follows the Leases counts from memory; only the check after the write reads the API."""
    counted = Counting(env.client())
    watched = env.leases(client=counted)
    t = time.time()

    def calls(fn):
        del counted.calls[:]
        out = fn()
        return out, [c for c in counted.calls if c not in ("watch", "list_watch")]

    granted, made = calls(lambda: watched.acquire("n1", "worker", "c", 1, 60, t))
    assert granted.granted and granted.holders == ["n1"] and made == ["create", "list"]  # take, check
    renewed, made = calls(lambda: watched.acquire("n1", "worker", "c", 1, 60, t + 1))
    assert renewed.granted and renewed.renewed and made == ["replace"]
    refused, made = calls(lambda: watched.acquire("n2", "worker", "c", 1, 60, t + 1))
    assert not refused.granted and refused.holders == ["n1"] and made == ["list"]  # a refusal: from the API
    released, made = calls(lambda: watched.release("n1", "c"))
    assert released == "worker" and made == ["replace"] and api_holders(env, "worker") == []


def test_what_memory_misses_is_read_from_the_api_a_grant_is_never_refused_nor_a_release_skipped_from_memory(env):
    """Memory may miss a release or a grant another process made meanwhile."""
    watched, other = env.leases(), env.leases(watch=False)
    assert watched.acquire("n1", "worker", "c", 1, 60, time.time()).granted
    watched.reflector.stop()  # what it follows stays as it is now: n1 holds the only slot
    assert other.release("n1") == "worker"
    answer = watched.acquire("n2", "worker", "c", 1, 60, time.time())
    assert answer.granted and answer.holders == ["n2"] and api_holders(env, "worker") == [("drain-worker-0", "n2")]
    assert other.acquire("n3", "infra", "c", 1, 60, time.time()).granted  # never seen by ``watched``
    assert watched.release("n3", "c") == "infra" and api_holders(env, "infra") == []
    assert other.acquire("n4", "infra", "c2", 1, 60, time.time()).granted
    assert watched.release("n4", "c") is None and api_holders(env, "infra") == [("drain-infra-0", "n4")]  # not c


def test_the_next_worker_reads_the_api_when_its_watch_has_not_brought_the_last_grant_of_its_turn(env, tmp_path):
    """Two workers of one replica take turns at a pool's drains (workerturns.py); one whose watch
    has not brought the other's last grant counts from the API, so its write is not refused."""
    first, second = env.leases(), Counting(env.client())
    late = env.leases(client=second)
    first.turns = late.turns = WorkerTurns(str(tmp_path))
    late.reflector.stop()  # its watch brings nothing more
    assert first.acquire("n1", "worker", "c", 2, 60, time.time()).granted
    del second.calls[:]
    answer = late.acquire("n2", "worker", "c", 2, 60, time.time())
    assert answer.granted and answer.holders == ["n1", "n2"], answer
    assert [c for c in second.calls if c in ("list", "create", "replace")] == ["list", "create", "list"]
    assert second.refused == []


def test_a_grant_made_over_a_lowered_limit_is_taken_back_before_it_is_answered(env):
    """Slots below the limit alone do not see a holder above a lowered limit granted meanwhile
    by a replica that still has the old limit: the check after the write undoes such a grant.

    The interleaving: a stale replica (limit 3) counted n0 and y (slots 0 and 1) and is about to
    take slot 2; y releases slot 1; this replica (limit 2) counts n0 alone and takes slot 1; the
    stale replica's write lands first. Both compare-and-swaps succeed: 3 holders, limit 2. (n0
    and y are written to slots 0 and 1 as the stale replica's grants: which free slot a grant
    takes is a hash of the node's name, leases.spread.)"""
    other = env.leases(watch=False)
    t = time.time()
    for i, node in enumerate(("n0", "y")):
        body = kube_leases.lease_body(f"drain-worker-{i}", env.ns, "worker", node, "c", t, t, 60)
        assert env.kc.session().post(env.kc.url + LEASES_PATH.format(env.ns), json=body, timeout=10).status_code == 201
    assert other.release("y") == "worker"

    def stale_replica_write_lands():  # after this replica counted, before its own write
        body = kube_leases.lease_body("drain-worker-2", env.ns, "worker", "x2", "c", t, t, 60)
        r = env.kc.session().post(env.kc.url + LEASES_PATH.format(env.ns), json=body, timeout=10)
        assert r.status_code == 201, r.text

    counted = Counting(env.client(), before_write=stale_replica_write_lands)
    mine = env.leases(watch=False, client=counted)
    answer = mine.acquire("n1", "worker", "c", 2, 60, time.time())
    assert not answer.granted and answer.holders == ["n0", "x2"]
    assert counted.calls == ["list", "replace", "list", "list", "replace", "list"]  # write, check, undo, count
    assert api_holders(env, "worker") == [("drain-worker-0", "n0"), ("drain-worker-2", "x2")]
    assert mine.held_by("n1") is None


def test_a_wave_of_grants_through_one_replica_writes_no_conflicting_lease(env):
    """Issue 53: a wave of nodes asking at once took the lowest free slot on its first try, so all
    but one of a replica's grants lost the race (409) and listed again. One grant of a pool at a
    time per process, each counting the slots the one before took: ten asks at once, ten slots,
    no write refused."""
    counted = Counting(env.client())
    one = env.leases(watch=False, client=counted)
    start, answers, errors = threading.Barrier(10), {}, []

    def ask(name):
        try:
            start.wait(30)
            answers[name] = one.acquire(name, "worker", "c", 10, 60, time.time())
        except Exception as exc:  # reported below: a thread's assertion would vanish otherwise
            errors.append(f"{name}: {exc!r}")

    threads = [threading.Thread(target=ask, args=(f"worker-{i}",), daemon=True) for i in range(10)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors and all(a.granted for a in answers.values()) and len(answers) == 10, (errors, answers)
    assert counted.refused == []
    assert sorted(slot for slot, _ in api_holders(env, "worker")) == sorted(f"drain-worker-{i}" for i in range(10))


def test_thirty_concurrent_acquires_through_three_replicas_never_exceed_the_limit(env):
    replicas = [env.leases() for _ in range(3)]
    limit, peaks, refusals, errors = 2, [], [], []
    someone_waited = threading.Event()
    done = threading.Event()

    def node(i):
        me, name = replicas[i % 3], f"n{i:02d}"
        try:
            while not done.is_set():
                answer = me.acquire(name, "worker", "c", limit, 60, time.time())
                assert len(answer.holders) <= limit, answer
                if answer.granted:
                    # Every grant, checked with a fresh list from the API's own objects.
                    peaks.append(len(api_holders(env, "worker")))
                    someone_waited.wait(30)  # the first holders keep their slots until a refusal
                    assert replicas[(i + 1) % 3].release(name) == "worker"  # released through another
                    return
                refusals.append(name)
                someone_waited.set()
                done.wait(0.05)  # a node's retry back-off, not a synchronisation
        except Exception as exc:  # reported below: a thread's assertion would vanish otherwise
            errors.append(f"{name}: {exc!r}")

    samples = []

    def sample():  # the API's objects, read independently while the acquires run
        try:
            while not done.is_set():
                samples.append(len(api_holders(env, "worker")))
                done.wait(0.01)  # pacing (2 shared cores), not a synchronisation
        except Exception as exc:  # reported below: a sampler that died would check only its first samples
            errors.append(f"sampler: {exc!r}")

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    done.set()
    sampler.join(30)
    assert not errors and not any(t.is_alive() for t in threads + [sampler]), errors
    assert len(peaks) == 30 and max(peaks) <= limit and refusals
    assert samples and max(samples) <= limit
    names = {o["metadata"]["name"] for o in env.api(LEASES_PATH.format(env.ns))["items"]}
    assert names <= {"drain-worker-0", "drain-worker-1"}  # no slot at or above the limit ever existed
    assert api_holders(env, "worker") == []
    wait_for(lambda: all(r.holders() == [] for r in replicas), "the releases through every watch", timeout=20)
