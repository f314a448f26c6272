"""The Kubernetes backend's pure parts: kubeconfig and in-cluster credentials, object admission
into a State, and what is written back (pool status, Node patches, rendered configs). The same
code against a real API server: tests/kube/test_kube_backend.py."""

import base64
import os

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.server.cluster import kube_sync
from agent.server.cluster.backends import StoreConfig
from agent.server.store.kube import client as kube_client
from agent.server.store.kube import state as kube_state
from agent.server.store.kube import watch as kube_watch
from agent.server.store.kube.client import KubeConfigError
from agent.server.store.kube.mcnrecord import DRAIN_LOG, REPORT, STORE_LABEL, node_object, record_ops

POOL = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
        "metadata": {"name": "infra", "uid": "u-1", "resourceVersion": "7", "generation": 3,
                     "managedFields": [{"manager": "kubectl"}], "creationTimestamp": "2026-11-20T10:00:00Z"},
        "spec": {"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "infra"}},
                 "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/infra": ""}}}}
MC = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
      "metadata": {"name": "50-infra", "resourceVersion": "8",
                   "labels": {"machineconfiguration.openshift.io/role": "infra"}},
      "spec": {"config": {"ignition": {"version": "3.2.0"}}}}


def kubeconfig(tmp_path, cluster=None, user=None, name="kc"):
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
           "clusters": [{"name": "k", "cluster": cluster if cluster is not None else
                         {"server": "https://127.0.0.1:6443",
                          "certificate-authority-data": base64.b64encode(b"CA PEM").decode()}}],
           "users": [{"name": "u", "user": user if user is not None else {"token": "abc"}}]}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


# -- credentials ---------------------------------------------------------------------------------

def test_kubeconfig_data_fields_land_in_a_private_directory(tmp_path):
    key = base64.b64encode(b"KEY").decode()
    creds = kube_client.load_kubeconfig(kubeconfig(tmp_path, user={
        "client-certificate-data": base64.b64encode(b"CERT").decode(), "client-key-data": key}))
    try:
        assert creds.server == "https://127.0.0.1:6443"
        assert open(creds.ca_file, "rb").read() == b"CA PEM"
        assert open(creds.key_file, "rb").read() == b"KEY"
        assert os.stat(creds.scratch).st_mode & 0o777 == 0o700
        assert os.stat(creds.key_file).st_mode & 0o777 == 0o600
    finally:
        kube_client.KubeClient(creds).close()
    assert not os.path.exists(creds.scratch)  # close() removes the written key


def test_kubeconfig_relative_files_are_relative_to_the_kubeconfig(tmp_path):
    creds = kube_client.load_kubeconfig(kubeconfig(tmp_path, cluster={
        "server": "https://h:6443", "certificate-authority": "ca.crt"}, user={"tokenFile": "tok"}))
    assert creds.ca_file == str(tmp_path / "ca.crt") and creds.token_file == str(tmp_path / "tok")


@pytest.mark.parametrize("cluster,user,words", [
    ({"server": "https://h:6443", "insecure-skip-tls-verify": True}, None, "insecure-skip-tls-verify: refused"),
    ({"server": "http://h:8080"}, None, "expected an https:// URL"),
    (None, {"client-certificate": "c.crt"}, "client-certificate and client-key go together"),
])
def test_kubeconfig_refusals_name_the_field(tmp_path, cluster, user, words):
    with pytest.raises(KubeConfigError) as exc:
        kube_client.load_kubeconfig(kubeconfig(tmp_path, cluster, user))
    assert words in str(exc.value) and str(tmp_path / "kc") in str(exc.value)


def test_kubeconfig_unknown_context_and_unreadable_files(tmp_path):
    with pytest.raises(KubeConfigError, match=r"\$\.contexts: no context named 'other'"):
        kube_client.load_kubeconfig(kubeconfig(tmp_path), context="other")
    with pytest.raises(KubeConfigError, match="cannot read"):
        kube_client.load_kubeconfig(str(tmp_path / "missing"))
    big = tmp_path / "big"
    big.write_bytes(b"a" * (kube_client.MAX_KUBECONFIG_BYTES + 1))
    with pytest.raises(KubeConfigError, match="larger than"):
        kube_client.load_kubeconfig(str(big))


@pytest.mark.parametrize("text", ["contexts: 5", "[1, 2]", "current-context: c\ncontexts: [{name: c, context: 3}]",
                                  "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                                  "clusters: [{name: k, cluster: {server: 'https://h', "
                                  "certificate-authority-data: '%%%'}}]"])
def test_odd_kubeconfigs_are_refused_naming_the_file(tmp_path, text):
    path = tmp_path / "kc"
    path.write_text(text)
    with pytest.raises(KubeConfigError) as exc:
        kube_client.load_kubeconfig(str(path))
    assert str(path) in str(exc.value)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300)))
def test_any_kubeconfig_text_is_read_or_refused_clearly(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("kc") / "kubeconfig"
    path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    try:
        kube_client.load_kubeconfig(str(path))
    except KubeConfigError as exc:
        assert str(path) in str(exc)


def test_in_cluster_reads_the_service_account(tmp_path):
    creds = kube_client.in_cluster(str(tmp_path), {"KUBERNETES_SERVICE_HOST": "fd00::1",
                                                   "KUBERNETES_SERVICE_PORT": "443"})
    assert creds.server == "https://[fd00::1]:443"
    assert creds.ca_file == str(tmp_path / "ca.crt") and creds.token_file == str(tmp_path / "token")
    with pytest.raises(KubeConfigError, match="pass --kubeconfig FILE"):
        kube_client.in_cluster(str(tmp_path), {})


def test_in_cluster_at_an_explicit_apiserver_url_takes_the_service_accounts_token_and_ca(tmp_path):
    """serve --apiserver-url (the MCS's flag): a hostNetwork pod names its API server; the
    environment's KUBERNETES_SERVICE_HOST/PORT (the Service's ClusterIP) is not used."""
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    creds = kube_client.in_cluster(str(tmp_path), env, server="https://api-int.example.test:6443/")
    assert creds.server == "https://api-int.example.test:6443"
    assert creds.ca_file == str(tmp_path / "ca.crt") and creds.token_file == str(tmp_path / "token")
    assert creds.source == f"in-cluster ({tmp_path})"
    assert kube_client.in_cluster(str(tmp_path), {}, server="https://[fd00::2]:6443").server == "https://[fd00::2]:6443"


@pytest.mark.parametrize("url, says", [
    ("http://10.0.2.2:6443", "not https"),
    ("10.0.2.2:6443", "not https"),
    ("https://", "no host"),
    ("https://h:0", "no host (or port 0)"),
    ("https://h:99999", "not a URL"),
    ("https://user:pw@h:6443", "user information"),
    ("https://h:6443/api", "a path, query or fragment"),
    ("https://h:6443?x=1", "a path, query or fragment"),
    ("https://h:6443#", "a path, query or fragment"),
    ("https://h :6443", "spaces, control or non-ASCII"),
    ("https://h\n:6443", "spaces, control or non-ASCII"),
    ("https://" + "h" * 3000, "longer than 2048"),
])
def test_an_apiserver_url_that_is_not_https_host_port_is_refused_naming_the_flag(url, says):
    with pytest.raises(KubeConfigError) as exc:
        kube_client.check_apiserver_url(url)
    assert str(exc.value).startswith("--apiserver-url ") and says in str(exc.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_apiserver_url_text_is_an_https_url_or_refused_clearly(text):
    try:
        url = kube_client.check_apiserver_url(text)
    except KubeConfigError as exc:
        assert str(exc).startswith("--apiserver-url ")
        return
    assert url.startswith("https://") and len(url) <= len(text)


@pytest.mark.parametrize("cfg, says", [
    (StoreConfig(apiserver_url="https://h:6443"), "--apiserver-url goes with --backend kubernetes"),
    (StoreConfig(url="kubernetes", backend="kubernetes", kubeconfig="/nonexistent", apiserver_url="https://h:6443"),
     "--apiserver-url and --kubeconfig exclude each other"),
    (StoreConfig(url="kubernetes", backend="kubernetes", apiserver_url="http://h:6443"), "not https"),
])
def test_serve_refuses_apiserver_url_without_the_api_with_a_kubeconfig_or_not_https(cfg, says):
    assert says in (cfg.check() or "")


def test_serve_apiserver_url_reaches_the_store_config_and_passes_its_check():
    from agent.server.cli.main import build_parser
    from agent.server.cli.storecmds import store_config

    args = build_parser().parse_args(["serve", "--backend", "kubernetes", "--apiserver-url", "https://10.0.2.2:6443"])
    cfg = store_config(args)
    assert cfg.apiserver_url == "https://10.0.2.2:6443" and cfg.kubeconfig is None and cfg.check() is None


def test_a_rotated_service_account_token_is_read_again(tmp_path):
    token = tmp_path / "token"
    token.write_text("one\n")
    client = kube_client.KubeClient(kube_client.Credentials(server="https://h", token_file=str(token)))
    assert client._auth() == {"Authorization": "Bearer one"}
    token.write_text("two\n")
    os.utime(token, (1, 1))
    assert client._auth() == {"Authorization": "Bearer two"}


def test_resource_paths():
    assert kube_client.NODES.path("n1") == "/api/v1/nodes/n1"
    assert kube_client.MACHINE_CONFIG_POOLS.path("w", sub="status") == \
        "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/w/status"
    assert kube_client.LEASES.path("l", namespace="ns") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"


# -- admission of API objects ---------------------------------------------------------------------

def test_api_objects_are_admitted_as_the_state_directory_admits_them():
    bad = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
           "metadata": {"name": "99-bad", "resourceVersion": "9"}, "spec": {"config": {"ignition": {}}}}
    rendered = dict(MC, metadata={"name": "rendered-infra-1", "resourceVersion": "10",
                                  "ownerReferences": [{"kind": "MachineConfigPool", "name": "infra"}]})
    state = kube_state.build_state({"machineconfigpools": {"infra": POOL},
                                    "machineconfigs": {"50-infra": MC, "99-bad": bad, "rendered-infra-1": rendered}},
                                   None)
    assert set(state.pools) == {"infra"} and set(state.machine_configs) == {"50-infra"}
    assert state.problems and all("machineconfigs/99-bad (API)" in str(p) for p in state.problems)
    meta = state.pools["infra"]["metadata"]
    assert "resourceVersion" not in meta and "managedFields" not in meta and "uid" not in meta
    assert meta["creationTimestamp"] == "2026-11-20T10:00:00Z"  # the object's age (AGE)


def test_the_state_signature_moves_with_any_objects_version_only():
    one = kube_state.build_state({"machineconfigpools": {"infra": POOL}, "machineconfigs": {"50-infra": MC}}, None)
    same = kube_state.build_state({"machineconfigpools": {"infra": dict(POOL)}, "machineconfigs": {"50-infra": MC}},
                                  None)
    newer = kube_state.build_state({"machineconfigpools": {"infra": POOL}, "machineconfigs": {"50-infra": dict(
        MC, metadata=dict(MC["metadata"], resourceVersion="70"))}}, None)
    assert one.signature == same.signature != newer.signature


def test_a_pools_status_or_configuration_write_is_not_a_new_state_but_its_spec_labels_and_annotations_are():
    """A status write moves a pool's resourceVersion (ours, once a second while nodes report), a
    spec.configuration write (ours, each new target: kube_pools.py) its generation: for pools the
    signature takes the spec the server reads and its labels and annotations instead, so that
    neither is a new state in every replica, nor part of what is rendered."""
    def pool(spec=None, **meta):
        return dict(POOL, metadata=dict(dict(POOL["metadata"], generation=3), **meta),
                    spec=dict(POOL["spec"], **(spec or {})), status={"machineCount": int(meta.get("generation", 3))})

    def sig(spec=None, **meta):
        return kube_state.build_state({"machineconfigpools": {"infra": pool(spec, **meta)}}, None).signature

    base = sig(resourceVersion="70")
    assert sig(resourceVersion="71") == base  # the status subresource written
    configured = {"configuration": {"name": "rendered-infra-1", "source": [{"kind": "MachineConfig", "name": "a"}]}}
    assert sig(configured, resourceVersion="72", generation=4) == base  # the render controller's spec.configuration
    assert sig({"maxUnavailable": 2}, resourceVersion="72", generation=4) != base  # the spec changed
    assert sig(resourceVersion="73", annotations={"node-agent.io/force-rollout": "true"}) != base
    assert sig(resourceVersion="74", labels={"custom": ""}) != base
    doc = kube_state.build_state({"machineconfigpools": {"infra": pool(configured)}}, None).pools["infra"]
    assert "status" not in doc and "configuration" not in doc["spec"]


def test_the_machineconfiguration_is_checked_as_the_file_is():
    cluster = {"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
               "metadata": {"name": "cluster", "resourceVersion": "3"},
               "spec": {"nodeDisruptionPolicy": "reboot always"}}
    state = kube_state.build_state({}, cluster)
    assert state.cluster == {} and any("nodeDisruptionPolicy" in str(p) for p in state.problems)


# -- what is written back ---------------------------------------------------------------------------

def test_pool_status_keeps_only_the_crds_fields():
    view = {"status": {"configuration": {"name": "rendered-infra-a", "extra": 1}, "machineCount": 2,
                       "updatedMachineCount": 1, "readyMachineCount": 1, "unavailableMachineCount": 1,
                       "degradedMachineCount": 0, "nodes": {"n": {}}, "served": {}, "history": [],
                       "conditions": [{"type": "Updated", "status": "False", "reason": "Updating", "message": "m",
                                       "lastTransitionTime": "2026-11-22T09:00:00Z"}]}}
    status = kube_sync.pool_status(view, 3)
    assert set(status) == set(kube_sync.STATUS_FIELDS)
    assert status["configuration"] == {"name": "rendered-infra-a"} and status["observedGeneration"] == 3
    assert status["conditions"][0]["lastTransitionTime"] == "2026-11-22T09:00:00Z"


def test_every_condition_written_has_a_transition_time_kept_while_its_status_stays():
    view = {"status": {"conditions": [{"type": "Updated", "status": "True", "lastTransitionTime": "2026-11-22T09:00:00Z"},
                                      {"type": "Degraded", "status": "False"}, {"type": "RenderHeld", "status": "True"}]}}
    first = {c["type"]: c for c in kube_sync.pool_status(view, 1, None, "2026-11-25T10:00:00Z")["conditions"]}
    assert first["Updated"]["lastTransitionTime"] == "2026-11-22T09:00:00Z"  # dated by our history
    assert first["Degraded"]["lastTransitionTime"] == "2026-11-25T10:00:00Z"
    held = [{"type": "Degraded", "status": "False", "lastTransitionTime": "2026-11-25T10:00:00Z"},
            {"type": "RenderHeld", "status": "False", "lastTransitionTime": "2026-11-25T10:00:00Z"}]
    later = {c["type"]: c for c in kube_sync.pool_status(view, 1, held, "2026-11-25T11:00:00Z")["conditions"]}
    assert later["Degraded"]["lastTransitionTime"] == "2026-11-25T10:00:00Z"  # same status: kept
    assert later["RenderHeld"]["lastTransitionTime"] == "2026-11-25T11:00:00Z"  # changed: now


def test_node_patch_carries_the_mcd_annotations_as_the_mcd_writes_them():
    body = {"pool": "infra", "state": "Degraded", "currentConfig": "rendered-infra-a",
            "desiredConfig": "rendered-infra-b", "reason": "x" * 3000, "desiredImage": "quay.io/x@sha256:1"}
    ann = kube_sync.node_patch(body, POOL)["metadata"]["annotations"]
    assert ann["machineconfiguration.openshift.io/state"] == "Degraded"
    assert ann["machineconfiguration.openshift.io/reason"] == "x" * 2000  # capped as the MCD caps it
    assert ann["machineconfiguration.openshift.io/desiredImage"] == "quay.io/x@sha256:1"
    # An empty image is removed (null in a merge patch): a stale desiredImage keeps IsDone false upstream.
    assert ann["machineconfiguration.openshift.io/currentImage"] is None


def test_a_report_patch_is_a_change_only_where_the_node_as_kept_differs():
    """kube_nodepatch.patch_changes (issue 53): a rewrite of a kept report, or a report sent again,
    finds the Node already so and is not sent (a no-op merge patch is still a write)."""
    body = {"pool": "worker", "state": "Done", "currentConfig": "rendered-worker-b", "desiredConfig": "rendered-worker-b"}
    patch = kube_sync.node_patch(body, POOL)
    kept = {"metadata": {"name": "w1", "annotations": {k: v for k, v in patch["metadata"]["annotations"].items()
                                                        if v is not None}}}
    assert not kube_sync.patch_changes(patch, kept)
    assert kube_sync.patch_changes(kube_sync.node_patch(dict(body, state="Working"), POOL), kept)
    assert kube_sync.patch_changes(dict(patch, spec={"unschedulable": None}), dict(kept, spec={"unschedulable": True}))
    assert not kube_sync.patch_changes(dict(patch, spec={"unschedulable": None}), kept)
    assert kube_sync.patch_changes({"metadata": {"labels": {"node-role.kubernetes.io/infra": ""}}}, kept)


def test_node_patch_SetWorking_keeps_the_reason_and_SetDone_writes_currentImage_only_on_a_layered_pool():
    """pkg/daemon/writer.go: SetWorking writes the state alone (a Degraded's reason stays until
    Done clears it); SetDone writes currentImage only with an image on disk (image mode) and
    deletes it otherwise: a real MCO reading it on a plain pool takes the node as not done."""
    working = {"state": "Working", "currentConfig": "rendered-infra-a", "desiredConfig": "rendered-infra-b",
               "reason": "", "currentImage": "quay.io/os@sha256:1"}
    ann = kube_sync.node_patch(working, POOL)["metadata"]["annotations"]
    assert "machineconfiguration.openshift.io/reason" not in ann
    assert ann["machineconfiguration.openshift.io/state"] == "Working"
    done = dict(working, state="Done", desiredConfig="rendered-infra-a")
    plain = kube_sync.node_patch(done, POOL)["metadata"]["annotations"]
    assert plain["machineconfiguration.openshift.io/reason"] == "" and \
        plain["machineconfiguration.openshift.io/currentImage"] is None
    layered = kube_sync.node_patch(done, POOL, layered=True)["metadata"]["annotations"]
    assert layered["machineconfiguration.openshift.io/currentImage"] == "quay.io/os@sha256:1"


def test_applyCustomPoolLabels_once_for_a_node_booted_into_the_custom_pool():
    """node_controller.go isCustomPoolBootedNode: only the owner of the firstPivotConfig, only
    while the guard annotation is absent; the patch sets it."""
    body = {"pool": "infra", "state": "Done", "currentConfig": "rendered-infra-a", "desiredConfig": "rendered-infra-a",
            "firstPivotConfig": "rendered-infra-a"}
    patch = kube_sync.node_patch(body, POOL, {}, "infra")
    assert patch["metadata"]["labels"] == {"node-role.kubernetes.io/infra": ""}
    assert patch["metadata"]["annotations"][kube_sync.LABELS_APPLIED] == ""
    assert "labels" not in kube_sync.node_patch(body, POOL, {kube_sync.LABELS_APPLIED: ""}, "infra")["metadata"]
    assert "labels" not in kube_sync.node_patch(body, POOL, {}, "worker")["metadata"]  # claimed, not booted into it
    assert "labels" not in kube_sync.node_patch(body, POOL, {}, None)["metadata"]
    worker = dict(POOL, metadata={"name": "worker"})
    assert "labels" not in kube_sync.node_patch(body, worker, {}, "worker")["metadata"]  # base roles: the kubelet's
    exprs = dict(POOL, spec={"nodeSelector": {"matchExpressions": [
        {"key": "node-role.kubernetes.io/infra", "operator": "Exists"}, {"key": "zone", "operator": "In",
                                                                          "values": ["a"]}]}})
    assert kube_sync.pool_labels(exprs) == {"node-role.kubernetes.io/infra": "", "zone": "a"}


def test_a_machineconfignode_with_no_known_config_or_pool_says_not_yet_set():
    """upgrade_monitor.go NotYetSet: the CRD's CEL rules want an RFC 1123 subdomain, never ""."""
    obj = node_object("n1", {"desiredConfig": ""}, "")
    assert obj["spec"]["configVersion"]["desired"] == "not-yet-set" and obj["spec"]["pool"]["name"] == "not-yet-set"


def test_a_record_with_the_drain_logs_uncordon_is_one_json_patch_testing_the_log_read():
    """Issue 53: a Done that ends a drain writes its record, the log and (targeted) the spec's
    desired config in one write, on the condition that the log is as read."""
    def key(k):
        return k.replace("~", "~0").replace("/", "~1")

    ops = record_ops("[1]", "[1,2]", "{}", "", "ns")
    assert ops == [{"op": "test", "path": f"/metadata/annotations/{key(DRAIN_LOG)}", "value": "[1]"},
                   {"op": "add", "path": f"/metadata/annotations/{key(DRAIN_LOG)}", "value": "[1,2]"},
                   {"op": "add", "path": f"/metadata/annotations/{key(REPORT)}", "value": "{}"},
                   {"op": "add", "path": f"/metadata/labels/{key(STORE_LABEL)}", "value": "ns"}]
    assert {"op": "add", "path": "/spec/configVersion/desired", "value": "r2"} in record_ops("[1]", "[1,2]", "{}", "r2", "ns")


def test_a_report_that_waits_for_its_reboot_leaves_the_nodes_currentConfig_as_it_is():
    """pkg/daemon/writer.go: the daemon writes the new currentConfig with SetDone once the node has
    booted it; until then the Node keeps naming what it runs."""
    body = {"pool": "worker", "state": "Working", "currentConfig": "rendered-b", "desiredConfig": "rendered-b",
            "reason": "reboot pending"}
    annotations = kube_sync.node_patch(body, None)["metadata"]["annotations"]
    assert kube_sync.ANNOTATION + "currentConfig" not in annotations
    assert annotations[kube_sync.ANNOTATION + "state"] == "Working"
    done = kube_sync.node_patch(dict(body, state="Done", reason=None), None)["metadata"]["annotations"]
    assert done[kube_sync.ANNOTATION + "currentConfig"] == "rendered-b"


def test_a_rendered_config_is_owned_by_its_pool():
    obj = kube_sync.rendered_object("rendered-infra-a", "infra", "u-1", {"config": {}}, "node-config-server 1")
    owner = obj["metadata"]["ownerReferences"][0]
    assert owner == {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
                     "name": "infra", "uid": "u-1", "controller": True, "blockOwnerDeletion": True}
    assert kube_state.is_rendered(obj)


# -- the watch cache's rules -----------------------------------------------------------------------

class _Events:
    """A client whose list and watch answer from fixed data (the watch rules in isolation; the
    real API server's are exercised in tests/kube/test_kube_backend.py)."""

    def __init__(self, events):
        self.events = events

    def list(self, path, params, metadata_only=False):
        return [dict(MC, metadata=dict(MC["metadata"], resourceVersion="5"))], "5"

    def watch(self, path, version, timeout, params, metadata_only=False):
        yield from self.events


def test_watch_events_update_the_cache_and_a_410_asks_for_a_relist():
    changes = []
    r = kube_watch.Reflector(_Events([]), kube_client.MACHINE_CONFIGS, lambda: changes.append(1))
    r._relist()
    assert set(r.snapshot()) == {"50-infra"} and r.version == "5" and r.synced.is_set()
    added = {"type": "ADDED", "object": {"metadata": {"name": "x", "resourceVersion": "6"}}}
    r._apply(added)
    r._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    assert set(r.snapshot()) == {"50-infra", "x"} and r.version == "9"
    r._apply({"type": "DELETED", "object": {"metadata": {"name": "50-infra", "resourceVersion": "10"}}})
    assert set(r.snapshot()) == {"x"}
    assert len(changes) == 3  # the list, the add and the delete; not the bookmark
    with pytest.raises(kube_watch.Gone):
        r._apply({"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}})


KEYS = ["current-context", "contexts", "clusters", "users", "name", "context", "cluster", "user", "server",
        "certificate-authority", "certificate-authority-data", "client-certificate-data", "client-key",
        "client-key-data", "token", "tokenFile", "insecure-skip-tls-verify"]
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(["c", "k", "u", "https://h:1", "QUE="]),
                   st.text(max_size=8))
SHAPES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                      max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), SHAPES, max_size=5))
def test_any_kubeconfig_shape_is_read_or_refused_clearly(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("kc") / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    try:
        creds = kube_client.load_kubeconfig(str(path))
    except KubeConfigError as exc:
        assert str(path) in str(exc)
    else:
        assert creds.server.startswith("https://")
        kube_client.KubeClient(creds).close()


def test_a_metadata_only_cache_keeps_no_managed_fields():
    r = kube_watch.Reflector(_Events([]), kube_client.NODES, metadata_only=True)
    r._apply({"type": "ADDED", "object": {"kind": "PartialObjectMetadata", "metadata": {
        "name": "n1", "resourceVersion": "3", "labels": {"a": "b"}, "managedFields": [{"manager": "kubelet"}]}}})
    assert r.snapshot()["n1"]["metadata"] == {"name": "n1", "resourceVersion": "3", "labels": {"a": "b"}}


def test_done_on_the_drained_for_config_ends_our_cordon_only():
    from agent.server.cluster.kube_drain import DRAINED_FOR, uncordon_patch

    done = {"state": "Done", "currentConfig": "rendered-b"}
    assert uncordon_patch({DRAINED_FOR: "rendered-b"}, done) == {
        "spec": {"unschedulable": None}, "metadata": {"annotations": {DRAINED_FOR: None}}}
    assert uncordon_patch({DRAINED_FOR: "rendered-b"}, dict(done, currentConfig="rendered-a")) == {}
    assert uncordon_patch({DRAINED_FOR: "rendered-b"}, dict(done, state="Working")) == {}
    assert uncordon_patch({}, done) == {}  # cordoned by someone else, or not at all: left as it is
