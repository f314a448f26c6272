"""The Kubernetes node store (agent/server/store/kube/nodestore.py) against a real kube-apiserver
1.20.2 with OpenShift's CRDs (tests/helpers/kube_cluster.py): the NodeStore contract of
tests/etcd/test_nodestore.py, two store instances standing for two replicas on one namespace, and the
API server going away. Each test has a namespace of its own; the MachineConfigNodes it wrote
(cluster-scoped) are deleted after it, by the store label that keeps them apart.
"""

import os
import threading
import time
import types

import pytest

from agent.server.cli.main import build_parser
from agent.server.cli.storecmds import check_serve_args, store_config
from agent.server.rollout.progress import Membership
from agent.server.store.errors import StoreUnavailable, TooManyUnvetted
from agent.server.store.kube import leases as kube_leases
from agent.server.store.kube.client import KubeClient, KubeError, KubeUnavailable, load_kubeconfig
from agent.server.store.kube.nodestate import CONFIGMAP_MAX
from agent.server.store.kube.nodestore import REPORT, STORE_LABEL, KubeNodeStore
from agent.server.store.nodestore import PoolRow
from tests.etcd.test_nodestore import IDENTITY_CONTRACT
from tests.etcd.test_nodestore_etcd import CONTRACT
from tests.helpers.kube_cluster import unique
from tests.helpers.wait import wait_for

MCN = "/apis/machineconfiguration.openshift.io/v1/machineconfignodes"


def open_store(kc, namespace: str) -> KubeNodeStore:
    return KubeNodeStore(KubeClient(load_kubeconfig(kc.admin_kubeconfig), timeout=10), namespace)


@pytest.fixture
def namespace(kube_cluster):
    ns = unique("ncs-store")
    kube_cluster.kubectl("create", "namespace", ns)
    yield ns
    kube_cluster.kubectl("delete", "machineconfignodes", "-l", f"{STORE_LABEL}={ns}", "--wait=false", check=False)
    kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture
def replicas(kube_cluster, namespace):
    stores = [open_store(kube_cluster, namespace) for _ in range(2)]
    yield stores
    for s in stores:
        s.close()
        s.client.close()


@pytest.fixture
def workers(replicas, tmp_path):
    """Two workers of one replica: two stores on one namespace sharing serve's per-run directory."""
    for s in replicas:
        s.share_worker_turns(str(tmp_path))
    return replicas


def worker(why="selector"):
    return Membership("worker", why)


# -- the NodeStore contract (tests/etcd/test_nodestore.py), run on the API store ------------------------

@pytest.mark.parametrize("name", CONTRACT + IDENTITY_CONTRACT)
def test_contract_holds_on_the_api(name, kube_cluster, namespace, tmp_path, monkeypatch):
    from tests.etcd import test_nodestore as contract

    opened = []

    def make_store(_tmp):
        opened.append(open_store(kube_cluster, namespace))
        return opened[-1]

    monkeypatch.setattr(contract, "make_store", make_store)
    if name == "test_done_report_releases_the_lease_on_that_config":
        # KubeLeases measures a lease's expiry with the wall clock (release and held_by take no
        # ``now``), while this contract test grants it at t=100 with a TTL of 600: its clock
        # is the test's, as for the grant.
        monkeypatch.setattr(kube_leases, "time", types.SimpleNamespace(time=lambda: 102.0))
    try:
        getattr(contract, name)(tmp_path)
    finally:
        for s in opened:
            s.close()
            s.client.close()


# -- two replicas on one namespace -----------------------------------------------------------------

def test_what_one_replica_writes_the_other_sees(replicas):
    a, b = replicas
    generation = b.generation()
    a.record_report("n1", {"pool": "worker", "state": "Done", "currentConfig": "rendered-worker-1"}, worker(), 1.0)
    assert a.counts("worker").machine == 1 and a.node("n1") is not None  # read-your-writes, no watch needed
    wait_for(lambda: b.proof("worker", "rendered-worker-1").updated == 1, "replica B counts the proof", 30)
    assert b.node("n1").report["currentConfig"] == "rendered-worker-1"
    b.record_report("n1", {"pool": "worker", "state": "Working", "currentConfig": "rendered-worker-1"}, worker(), 2.0)
    wait_for(lambda: a.counts("worker").working == 1 and a.counts("worker").done == 0, "replica A sees Working", 30)
    assert a.proof("worker", "rendered-worker-1").updated == 0
    a.set_meta("state_signature", "s1")
    a.update_pool("worker", lambda old: PoolRow("worker", "r2", "r1"))
    wait_for(lambda: b.meta("state_signature") == "s1" and "worker" in b.pools(), "replica B sees meta and pool", 30)
    assert b.serving("worker", "n1").pool.target == "r2" and b.history("worker")[0]["config"] == "r2"
    a.put_rendered("worker", "rendered-worker-abc", {"config": {"ignition": {"version": "3.4.0"}}}, ["00-worker"])
    a.put_rendered("worker", "rendered-worker-abc", {"config": "overwritten?"}, [])  # immutable: no change
    assert b.rendered_spec("rendered-worker-abc") == {"config": {"ignition": {"version": "3.4.0"}}}
    assert b.rendered_pool("rendered-worker-abc") == "worker" and b.rendered_spec("nope") is None
    a.delete_node("n1", 3.0)
    wait_for(lambda: b.node("n1") is None and b.counts("worker").machine == 0, "replica B drops the node", 30)
    assert b.generation() != generation  # what B keeps for fetches (fetchmemo.py) is dropped


def test_a_pool_row_another_replica_wrote_is_announced_by_the_watch_with_the_row_already_readable(replicas):
    """``on_pool_rows``: the pool queue's cue to ring the held fetches of the nodes another
    process targeted (poolqueue.PoolQueue.look), called from the watch once the row is in memory."""
    a, b = replicas
    heard = []
    b.on_pool_rows(lambda: heard.append(b.pools().get("worker")))
    a.update_pool("worker", lambda old: PoolRow("worker", "r2", "r1"))
    wait_for(lambda: any(r is not None and r.target == "r2" for r in heard), "replica B told of the row", 30)


def test_max_unvetted_counts_the_secrets_every_replica_watches(replicas):
    """The registration caps are the store's, not a process's: what replica A registered counts
    against replica B's cap once B's watch has it (docs/security.md "Identity", Limits)."""
    a, b = replicas
    assert a.put_credential("cap-0", "h-cap-0", 1.0, False, approved=True, by="rule", max_unvetted=2)
    assert a.put_credential("cap-1", "h-cap-1", 2.0, False, approved=False, max_unvetted=2)
    wait_for(lambda: b.unvetted_count() == 2, "replica B counts A's registrations", 30)
    with pytest.raises(TooManyUnvetted):
        b.put_credential("cap-2", "h-cap-2", 3.0, False, approved=True, by="rule", max_unvetted=2)
    assert b.put_credential("cap-2", "h-cap-2", 3.0, False, approved=True, by="admin", max_unvetted=2)


def test_a_report_that_counts_for_nothing_stays_off_the_mcn_until_it_counts(kube_cluster, replicas):
    """Issue 45: a pending report (or, with --backend kubernetes, one of a name neither proven nor
    approved) is kept in the node's registration Secret, never on a MachineConfigNode; every
    replica lists it; once it counts, the next write moves it onto the MCN and off the Secret."""
    a, b = replicas
    name = unique("pend")
    assert a.put_credential(name, f"h-{name}", 1.0, False, approved=False)
    body = {"pool": "worker", "state": "Done", "currentConfig": "r-1"}
    a.record_report(name, dict(body, _server={"pending": True}), worker(), 2.0)
    assert a.node(name) is not None and a.counts("worker").machine == 0
    wait_for(lambda: b.node(name) is not None, "replica B lists the kept report", 30)
    assert [r.node for r in b.nodes()] == [name]
    assert kube_cluster.get(f"{MCN}/{name}").status_code == 404
    a.approve(name, 3.0, "kubelet")
    a.record_report(name, dict(body, _server={"approvedBy": "kubelet"}), worker(), 2.0)
    assert REPORT in kube_cluster.get(f"{MCN}/{name}").json()["metadata"]["annotations"]
    wait_for(lambda: b.counts("worker").machine == 1 and b.credentials.pending_report(name) is None,
             "replica B counts it from the MCN, and the Secret's copy is gone", 30)
    a.delete_node(name, 4.0)
    wait_for(lambda: b.node(name) is None, "replica B drops it", 30)


def test_concurrent_pool_updates_from_two_replicas_lose_nothing(replicas):
    """Each replica adds one to the row's target 15 times from 2 threads at once: every add lands
    (a 409 re-reads the ConfigMap and decides again), and the history has every one of them."""
    a, b = replicas
    a.update_pool("infra", lambda old: PoolRow("infra", "0", "0"))
    wait_for(lambda: "infra" in b.pools(), "replica B sees the pool row", 30)
    errors = []

    def add(store):
        try:
            for _ in range(15):
                store.update_pool("infra", lambda old: PoolRow("infra", str(int(old.target) + 1), old.current))
        except Exception as exc:  # reported below, with the assertion
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(s,)) for s in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and not any(t.is_alive() for t in threads)
    wait_for(lambda: a.pools()["infra"].target == "60" and b.pools()["infra"].target == "60", "both see 60", 30)
    targets = [h["config"] for h in a.history("infra") if h["field"] == "target"]
    assert targets == [str(i) for i in range(61)]


def test_workers_taking_turns_read_the_row_the_other_wrote_where_their_watch_lags_and_none_is_refused(
        workers, monkeypatch):
    """Two workers of one replica (serve shares its per-run directory with both): each takes the
    pool's turn and finds the resourceVersion the other wrote, so B, whose watch brings no pool
    row at all, reads the row A wrote instead of having its write refused with 409."""
    a, b = workers
    a.update_pool("infra", lambda old: PoolRow("infra", "0", "0"))
    wait_for(lambda: "infra" in b.pools(), "worker B sees the pool row", 30)
    monkeypatch.setattr(b.cm, "_note", lambda obj, deleted: None)  # B's watch lags, for good
    refused = []
    for s in (a, b):
        monkeypatch.setattr(s.client, "replace", _counting_409(s.client.replace, refused))
    for _ in range(5):
        for s in (a, b):
            s.update_pool("infra", lambda old: PoolRow("infra", str(int(old.target) + 1), old.current))
    assert refused == []
    wait_for(lambda: a.pools()["infra"].target == "10", "A sees all ten adds", 30)


def _counting_409(replace, refused):
    def counted(path, body):
        try:
            return replace(path, body)
        except KubeError as exc:
            if exc.status == 409:
                refused.append(path)
            raise
    return counted


def test_only_mcns_with_our_report_are_node_records(kube_cluster, replicas):
    """An MCN the MCO (or kube_sync) made, with no report annotation, is no node; the store writes
    its report onto it rather than failing to create it."""
    a, _ = replicas
    name = unique("mcn")
    spec = {"node": {"name": name}, "pool": {"name": "worker"}, "configVersion": {"desired": ""}}
    body = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigNode",
            "metadata": {"name": name, "labels": {STORE_LABEL: a.namespace}}, "spec": spec}
    r = kube_cluster.session().post(kube_cluster.url + MCN, json=body, timeout=10)
    assert r.status_code == 201, r.text
    wait_for(lambda: a.revision >= int(r.json()["metadata"]["resourceVersion"]), "the watch saw it", 30)
    assert a.node(name) is None and a.nodes() == []
    a.record_report(name, {"pool": "worker", "state": "Done"}, worker(), 1.0)
    obj = kube_cluster.get(f"{MCN}/{name}").json()
    assert obj["spec"] == spec and REPORT in obj["metadata"]["annotations"]
    kube_cluster.session().delete(f"{kube_cluster.url}{MCN}/{name}", timeout=10)


def test_a_hand_edited_record_or_pool_row_is_ignored_and_replaced_not_fatal(kube_cluster, replicas):
    """Someone edits the report annotation or a pool ConfigMap into garbage: the watch goes on
    (other nodes stay counted), the node counts once it reports again, and the pool's next
    update replaces the unreadable row."""
    a, b = replicas
    for n in ("good", "edited"):
        a.record_report(n, {"pool": "worker", "state": "Done"}, worker(), 1.0)
    a.update_pool("worker", lambda old: PoolRow("worker", "r1", "r1"))
    wait_for(lambda: b.counts("worker").machine == 2 and "worker" in b.pools(), "replica B has both", 30)
    kube_cluster.kubectl("annotate", "--overwrite", "machineconfignode", "edited", f"{REPORT}={{not json")
    kube_cluster.kubectl("patch", "configmap", "-n", a.namespace, "node-config-server-pool-worker", "--type=merge",
                         "-p", '{"data": {"row": "[1, 2"}}')
    wait_for(lambda: b.node("edited") is None and "worker" not in b.pools(), "replica B drops what it cannot read", 30)
    assert b.node("good") is not None and b.counts("worker").machine == 1
    b.record_report("edited", {"pool": "worker", "state": "Done"}, worker(), 2.0)
    b.update_pool("worker", lambda old: PoolRow("worker", "r2", "r1") if old is None else old)
    wait_for(lambda: a.counts("worker").machine == 2 and a.pools().get("worker") == PoolRow("worker", "r2", "r1"),
             "both are readable again", 30)


def test_api_away_writes_fail_as_store_unavailable_and_reads_keep_answering(replicas):
    a, _ = replicas
    a.record_report("n6", {"pool": "worker", "state": "Done", "currentConfig": "r-1"}, worker(), 6.0)
    a.update_pool("worker", lambda old: PoolRow("worker", "r-1", "r-1"))
    a.client.server = "https://127.0.0.1:9"  # as if the API server were gone
    a.client.timeout = 0.5
    assert a.node("n6") is not None and a.counts("worker").machine == 1
    assert a.serving("worker", "n6").pool.target == "r-1"
    with pytest.raises(KubeUnavailable) as err:
        a.record_report("n7", {"pool": "worker", "state": "Working"}, worker(), 7.0)
    assert isinstance(err.value, StoreUnavailable) and "unreachable" in str(err.value)
    assert a.node("n7") is None  # nothing acknowledged, nothing counted
    with pytest.raises(StoreUnavailable):
        a.update_pool("worker", lambda old: PoolRow("worker", "r-2", "r-1"))
    assert a.pools()["worker"].target == "r-1"


def mcn_writes(store):
    """The MachineConfigNode writes ``store`` makes from now on: (verb, name), in order."""
    calls = []

    def counting(verb, orig):
        def counted(path, *args, **kw):
            if "/machineconfignodes" in path:
                calls.append((verb, path.rsplit("/", 1)[-1]))
            return orig(path, *args, **kw)
        return counted

    for verb in ("merge_patch", "json_patch", "create"):
        setattr(store.client, verb, counting(verb, getattr(store.client, verb)))
    return calls


def test_a_done_that_ends_a_drain_writes_its_record_and_the_uncordon_in_one_mcn_write(kube_cluster, replicas):  # noqa: F811
    """Issue 53: the Done's record, then the drain log's uncordon, were two writes of the MCN; the
    log read is now the precondition of one JSON patch carrying both (the lease released after)."""
    a, b = replicas
    a.record_report("n1", {"pool": "worker", "state": "Working", "currentConfig": "r1", "desiredConfig": "r2"},
                    worker(), 1.0)
    assert a.acquire_lease("n1", "worker", "r2", 1, 600, time.time()).granted
    wait_for(lambda: a.drain_leases.held_by("n1") is not None, "the lease in this replica's watch", 30)
    calls = mcn_writes(a)
    rec = a.record_report("n1", {"pool": "worker", "state": "Done", "currentConfig": "r2", "desiredConfig": "r2"},
                          worker(), 2.0)
    assert rec.released and calls == [("json_patch", "n1")]
    assert [e["action"] for e in a.drain_events("n1")] == ["cordon", "drain", "uncordon"]
    wait_for(lambda: [e["action"] for e in b.drain_events("n1")] == ["cordon", "drain", "uncordon"]
             and b.node("n1").report["state"] == "Done", "replica B reads the record and the log", 30)
    wait_for(lambda: b.drain_leases.held_by("n1") is None, "the release through replica B's watch", 30)


def test_a_report_of_a_targeted_node_carries_the_mcn_spec_desired_in_its_record_write(kube_cluster, replicas):  # noqa: F811
    """Issue 53: kube_mcn patched the MCN's spec for every targeted node after its Working report's
    record; the record write now sets spec.configVersion.desired to the server's target for the node,
    as the MCD sets the spec when it takes up an update (upgrade_monitor.go)."""
    a, _ = replicas
    a.record_report("n2", {"pool": "worker", "state": "Done", "currentConfig": "r1", "desiredConfig": "r1"},
                    worker(), 1.0)
    assert kube_cluster.kubectl("get", "machineconfignode", "n2", "-o",
                                "jsonpath={.spec.configVersion.desired}").stdout.strip() == "r1"
    a.update_pool("worker", lambda old: PoolRow("worker", "r2", "r1", "", "r2",
                                                {"config": "r2", "targets": {"n2": {"config": "r2", "at": 1.0}}}))
    calls = mcn_writes(a)
    a.record_report("n2", {"pool": "worker", "state": "Working", "currentConfig": "r1", "desiredConfig": "r2"},
                    worker(), 2.0)
    assert calls == [("merge_patch", "n2")]
    assert kube_cluster.kubectl("get", "machineconfignode", "n2", "-o",
                                "jsonpath={.spec.configVersion.desired}").stdout.strip() == "r2"


def test_a_non_ascii_report_within_the_report_limit_is_stored_whole_and_read_back(replicas):
    """About 28,000 x "é" (issue 39): written ASCII-escaped it was 6x longer, failed the
    annotation size check and answered 500; now it is kept as sent (UTF-8) and read back."""
    a, b = replicas
    body = {"pool": "worker", "state": "Degraded", "reason": "é" * 4096, "currentImage": "é" * 4096,
            "bootImage": "é" * 4096, "labels": {f"k{i}": "é" * 63 for i in range(256)}}
    a.record_report("n-utf8", body, worker(), 1.0)
    wait_for(lambda: b.node("n-utf8") is not None, "replica B reads the report", 30)
    assert b.node("n-utf8").report["labels"]["k255"] == "é" * 63 and b.node("n-utf8").report["reason"] == "é" * 4096


def test_an_api_403_on_a_report_write_is_store_unavailable_naming_the_grant(kube_cluster, replicas):
    """A starting kube-apiserver answers 403 until its RBAC cache is filled (and a missing grant
    does for ever): nothing recorded, StoreUnavailable (503 with Retry-After), the message says
    what to apply. The store's writes made as an account with no grant stand in for either."""
    a, _ = replicas
    admin, a.client = a.client, KubeClient(load_kubeconfig(kube_cluster.kubeconfig_for("nobody-i39")), timeout=10)
    try:
        with pytest.raises(StoreUnavailable) as err:
            a.record_report("n-403", {"pool": "worker", "state": "Done"}, worker(), 1.0)
    finally:
        a.client.close()
        a.client = admin
    assert err.value.status == 403 and "deploy/rbac.yaml" in str(err.value)
    assert a.node("n-403") is None


def test_a_rendered_config_too_large_for_a_configmap_is_refused_by_name(replicas):
    a, _ = replicas
    noise = os.urandom(CONFIGMAP_MAX).hex()  # random: zlib cannot shrink it
    with pytest.raises(ValueError) as err:
        a.put_rendered("worker", "rendered-worker-big", {"config": noise}, [])
    assert "rendered-worker-big" in str(err.value) and "1 MiB" in str(err.value)
    assert a.rendered_spec("rendered-worker-big") is None


# -- the command line ----------------------------------------------------------------------------

def test_serve_in_a_namespace_that_does_not_exist_stops_with_one_line_saying_what_to_apply(kube_cluster):
    """It exited 70, "internal error: KubeError: ... namespaces "node-config-server" not found"."""
    import subprocess
    import sys

    from tests.helpers.server_proc import free_port

    missing = unique("no-such-ns")
    proc = subprocess.run([sys.executable, "-m", "agent.server.cli", "serve", "--backend", "kubernetes",
                           "--kubeconfig", kube_cluster.admin_kubeconfig, "--namespace", missing,
                           "--listen", f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, NODE_AGENT_DEBUG=""))
    assert proc.returncode == 2, proc.stderr
    said = [line for line in proc.stderr.splitlines() if missing in line]
    assert len(said) == 1, proc.stderr
    assert said[0].startswith("node-config-server: serve: namespace ") and "does not exist" in said[0]
    assert "kubectl apply -f deploy/rbac.yaml" in said[0] and "--namespace" in said[0]
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


def _serve(*argv):
    args = build_parser().parse_args(["serve", *argv])
    return args, store_config(args)


def test_the_api_store_is_the_default_with_the_kubernetes_backend(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    args, cfg = _serve("--backend", "kubernetes", "--kubeconfig", str(kubeconfig))
    assert cfg.is_kube_store and cfg.shared and check_serve_args(args, cfg) is None
    assert cfg.kube_namespace(str(tmp_path / "no-such-file")) == "node-config-server"
    (tmp_path / "ns").write_text("from-the-pod\n")
    assert cfg.kube_namespace(str(tmp_path / "ns")) == "from-the-pod"
    _, cfg = _serve("--backend", "kubernetes", "--store", "sqlite")
    assert not cfg.shared  # as before: node state in --data-dir
    args, cfg = _serve("--state", str(tmp_path), "--store", "kubernetes", "--namespace", "ncs",
                       "--kubeconfig", str(kubeconfig))
    assert check_serve_args(args, cfg) is None and cfg.kube_namespace() == "ncs"


@pytest.mark.parametrize("argv,words", [
    (["--state", ".", "--namespace", "ncs"], "--namespace goes with --store kubernetes"),
    (["--store", "kubernetes"], "--state DIR is required"),
    (["--state", ".", "--store", "kubernetes", "--namespace", "Not_A_Name"], "not a namespace name"),
    (["--state", ".", "--store", "mongodb://x"], "expected sqlite, kubernetes or etcd://"),
    (["--state", ".", "--kubeconfig", "k"], "--kubeconfig goes with --backend kubernetes or --store kubernetes"),
])
def test_store_usage_errors_name_the_flag(argv, words):
    from agent.server.cli.main import main

    args, cfg = _serve(*argv)
    assert words in (check_serve_args(args, cfg) or "")
    assert main(["serve", *argv]) == 2


def test_replica_heartbeats_list_the_live_drop_the_stopped_and_sweep_the_dead(kube_cluster, namespace,
                                                                                   monkeypatch):
    """kube_heartbeat.KubeHeartbeat: each process's Lease announces its view; a stopped one takes
    its Lease away, an expired one is not listed, and one dead for SWEEP_AFTER is deleted by the
    others (a process killed without stopping)."""
    from agent.server.store.kube import heartbeat as kube_heartbeat
    from agent.server.store.kube.heartbeat import KubeHeartbeat

    client = KubeClient(load_kubeconfig(kube_cluster.admin_kubeconfig), timeout=10)
    a = KubeHeartbeat(client, namespace, "replica-a:22623", lambda: {"stateSignature": "s"}, start=False)
    b = KubeHeartbeat(client, namespace, "Replica_B", lambda: {"stateSignature": "s"}, start=False)
    a.beat()
    b.beat()
    a.beat()
    assert [(r["replica"], r["stateSignature"]) for r in a.replicas()] == [("Replica_B", "s"), ("replica-a:22623", "s")]
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    names = {i["metadata"]["name"] for i in kube_cluster.get(leases).json()["items"]}
    assert names == {a.lease, b.lease} and all(n.startswith("replica-") for n in names)
    b.stop()  # never started: stop only takes its Lease away
    a.beat()
    assert [r["replica"] for r in a.replicas()] == ["replica-a:22623"]
    # A dead process's Lease: expired (not listed), then past SWEEP_AFTER (deleted by a's beat).
    ghost = KubeHeartbeat(client, namespace, "ghost", lambda: {}, ttl=1, start=False)
    ghost.beat()
    real = kube_heartbeat.time.time
    monkeypatch.setattr(kube_heartbeat, "time", types.SimpleNamespace(time=lambda: real() + 5))  # its 1 s is over
    a.beat()
    assert [r["replica"] for r in a.replicas()] == ["replica-a:22623"]
    assert ghost.lease in {i["metadata"]["name"] for i in kube_cluster.get(leases).json()["items"]}
    monkeypatch.setattr(kube_heartbeat, "time", types.SimpleNamespace(time=lambda: real() + kube_heartbeat.SWEEP_AFTER + 5))
    a.beat()
    assert ghost.lease not in {i["metadata"]["name"] for i in kube_cluster.get(leases).json()["items"]}
    a.stop()
    client.close()


def test_a_rendered_config_both_workers_made_is_asked_for_once(workers, namespace, monkeypatch):
    """Every worker renders a pool's new config; sharing their turns, only the first asks the API
    server to make its ConfigMap, and the other asks nothing (it was refused with 409), yet reads it."""
    a, b = workers
    asked = []
    for s in (a, b):
        monkeypatch.setattr(s.client, "create", _recording(s.client.create, asked))
    spec = {"config": {"ignition": {"version": "3.4.0"}}}
    for s in (a, b, a):
        s.put_rendered("worker", "rendered-worker-1", spec, ["00-worker"])
    assert [p for p in asked if p.endswith("/configmaps")] == [f"/api/v1/namespaces/{namespace}/configmaps"]
    assert b.rendered_spec("rendered-worker-1") == spec


def _recording(create, asked):
    def recorded(path, body):
        asked.append(path)
        return create(path, body)
    return recorded
