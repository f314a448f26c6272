"""``serve --backend kubernetes`` against a real kube-apiserver 1.20.2 with OpenShift's CRDs
(tests/helpers/kube_cluster.py): objects read by list + watch, rendered configs, pool status and
Node annotations written back, invalid objects refused, as a user bound only to the ClusterRole
in deploy/rbac.yaml. No kubelet runs: where a test creates a Node object, it plays the kubelet
registering its node.

The module has a control plane of its own: MachineConfigPools are cluster-scoped, and what the
server counts must not depend on other modules' objects.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from agent.host.root import Root
from agent.node.report import Reporter
from tests.helpers import rbac_list
from tests.helpers.certs import make_tls
from tests.helpers.kube_cluster import KUBECTL, KubeCluster, find_kube_bin
from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

EXAMPLES = os.path.join(REPO, "examples", "state")
MCO = "/apis/machineconfiguration.openshift.io/v1"
IGNITION = {"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"}


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    if not find_kube_bin():
        pytest.skip("kube-apiserver 1.20.2 is not built: run make kube-bin (make test does)")
    with KubeCluster(str(tmp_path_factory.mktemp("kube-backend"))) as kc:
        kc.apply_examples()
        # Node state is in the API by default with this backend (--store kubernetes): the
        # namespaced Role of deploy/rbac.yaml too, for the same user.
        kc.bind_server_user("node-config-server-test")
        yield kc


@pytest.fixture(scope="module")
def server(kube, tmp_path_factory):
    """The server as a user bound only to deploy/rbac.yaml's ClusterRole, never as admin; over
    TLS, where each node presents its kubelet's client certificate from this control plane's CA:
    with this backend a report is about its Node only once the name is proven (or approved)."""
    kubeconfig = kube.kubeconfig_for("node-config-server-test")
    srv = ServerProcess(None, tls=make_tls(str(tmp_path_factory.mktemp("tls"))), token="b00tstrap", workers=1,
                        kubelet=kube.kubelet_cert, extra_args=["--backend", "kubernetes", "--kubeconfig", kubeconfig])
    with srv:
        yield srv


def api(kube, path):
    r = kube.get(path)
    assert r.status_code == 200, r.text
    return r.json()


def our_pools(srv):
    r = srv.session().get(srv.url("/api/v1/pools"), timeout=10)
    assert r.status_code == 200, r.text
    return {p["metadata"]["name"]: p for p in r.json()["items"]}


def test_pools_and_configs_come_from_the_api(server):
    pools = our_pools(server)
    assert set(pools) == {"master", "worker", "infra"}
    r = server.session().get(server.url("/config/worker"), headers=IGNITION, timeout=10)
    assert r.status_code == 200 and r.json()["ignition"]["version"].startswith("3.")
    assert pools["worker"]["metadata"]["creationTimestamp"].endswith("Z")  # the object's own (AGE)


def test_rendered_configs_are_written_back_owned_by_their_pool(kube, server):
    target = our_pools(server)["infra"]["spec"]["configuration"]["name"]
    obj = wait_for(lambda: kube.get(f"{MCO}/machineconfigs/{target}").ok and
                   api(kube, f"{MCO}/machineconfigs/{target}"), f"MachineConfig {target}")
    pool = api(kube, f"{MCO}/machineconfigpools/infra")
    owner = obj["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == \
        ("MachineConfigPool", "infra", pool["metadata"]["uid"], True)
    # Served config and written object are the same rendering.
    assert obj["spec"]["config"]["ignition"]["version"].startswith("3.")
    assert our_pools(server)["infra"]["spec"]["configuration"]["name"] == target  # not rendered again from it


COLUMNS = ["NAME", "CONFIG", "UPDATED", "UPDATING", "DEGRADED", "MACHINECOUNT", "READYMACHINECOUNT",
           "UPDATEDMACHINECOUNT", "DEGRADEDMACHINECOUNT", "AGE"]
# get pools' short headers (they fit 100 columns; agent/server/cli/views.py) for oc's
OURS = {"MACHINES": "MACHINECOUNT", "READY": "READYMACHINECOUNT", "UPDATED-M": "UPDATEDMACHINECOUNT",
        "DEGRADED-M": "DEGRADEDMACHINECOUNT"}


def _table(text):
    """{name: {column: cell}} of a table with one-word cells (both tools' MCP columns)."""
    lines = text.strip().splitlines()
    head = [OURS.get(h, h) for h in lines[0].split()]
    return {cells[0]: {h: c for h, c in zip(head, cells) if h in COLUMNS} for cells in map(str.split, lines[1:])}


def _mcp_columns(kube):
    return _table(kube.kubectl("get", "mcp").stdout)


def _our_columns(server):
    r = subprocess.run([sys.executable, "-m", "agent.server.cli", "get", "pools", "--server", server.base_url,
                        "--ca", server.tls.ca_cert, "--token-file", server._token_file, "-o", "wide"],
                       capture_output=True, text=True, timeout=30, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return _table(r.stdout)


def _same_but_age(theirs, ours):
    """``ours`` when both tables hold the same cells, AGE left out: the two commands run a moment
    apart (seconds under load), so the ages may differ by that moment."""
    def cut(table):
        return {name: {h: c for h, c in row.items() if h != "AGE"} for name, row in table.items()}

    return ours if cut(theirs) == cut(ours) else None


def test_kubectl_get_mcp_shows_what_get_pools_shows(kube, server):
    ours = wait_for(lambda: _same_but_age(_mcp_columns(kube), _our_columns(server)), "pool status written", 60)
    assert set(ours) == {"master", "worker", "infra"}
    assert set(ours["worker"]) == set(COLUMNS)  # every column of `oc get mcp`, AGE included
    status = api(kube, f"{MCO}/machineconfigpools/worker")["status"]
    assert {c["type"] for c in status["conditions"]} >= {"Updated", "Updating", "Degraded", "NodeDegraded",
                                                         "RenderDegraded"}
    assert status["observedGeneration"] == api(kube, f"{MCO}/machineconfigpools/worker")["metadata"]["generation"]


def _node(name, labels):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _report(server, node, body):
    r = server.node_session(node).post(server.url(f"/api/v1/nodes/{node}/report"), data=json.dumps(body), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def _mcn_with_status(kube, node, config):
    """The node's MachineConfigNode once its status says the report on ``config``. The server makes
    the object for the Node (its defaults), then writes what the report says through the status
    subresource: writes apart, so a reader may come between them."""
    def written():
        r = kube.get(f"{MCO}/machineconfignodes/{node}")
        status = r.json().get("status") or {} if r.ok else {}
        return status.get("conditions") and (status.get("configVersion") or {}).get("current") == config and r.json()

    return wait_for(written, f"MachineConfigNode {node} with its status on {config}")


def test_a_report_lands_on_the_node_object_as_the_mcd_writes_it(kube, server):
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(_node("w-report", {"node-role.kubernetes.io/worker": ""})))
    target = our_pools(server)["worker"]["spec"]["configuration"]["name"]
    _report(server, "w-report", {"pool": "worker", "state": "Done", "currentConfig": target,
                                 "desiredConfig": target, "labels": {"node-role.kubernetes.io/worker": ""}})
    ann = wait_for(lambda: (api(kube, "/api/v1/nodes/w-report")["metadata"].get("annotations") or {})
                   .get("machineconfiguration.openshift.io/state") and
                   api(kube, "/api/v1/nodes/w-report")["metadata"]["annotations"], "annotations")
    assert ann["machineconfiguration.openshift.io/state"] == "Done"
    assert ann["machineconfiguration.openshift.io/currentConfig"] == target
    assert ann["machineconfiguration.openshift.io/desiredConfig"] == target
    assert ann["machineconfiguration.openshift.io/reason"] == ""
    mcn = _mcn_with_status(kube, "w-report", target)
    assert mcn["spec"] == {"node": {"name": "w-report"}, "pool": {"name": "worker"},
                           "configVersion": {"desired": target}}
    conds = {c["type"]: c["status"] for c in mcn["status"]["conditions"]}
    assert (conds["Updated"], conds["UpdateExecuted"], conds["NodeDegraded"]) == ("True", "False", "False")
    assert len(conds) == 14  # allConditionTypes and the PinnedImageSets pair (upgrade_monitor.go; tests/kube/test_kube_mcn.py)
    assert mcn["status"]["configVersion"] == {"current": target, "desired": target}


# -- what the server writes, against OpenShift's CRDs (schema and CEL: the 1.20 API server checks
# neither; tests/helpers/crd_validate.py does, as a current API server would) -----------------------

def _crd_validate():
    from tests.helpers import crd_validate  # cel-python: the marker cel (pyproject.toml)

    return crd_validate


def _written_mcn(kube, server, node, body):
    """(the MCN made for the Node, the MCN once the report is on it)."""
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(_node(node, {"node-role.kubernetes.io/worker": ""})))
    made = _mcn_with_status(kube, node, None)
    _report(server, node, dict(body, pool="worker", labels={"node-role.kubernetes.io/worker": ""}))
    return made, _mcn_with_status(kube, node, body.get("currentConfig"))


@pytest.mark.cel
def test_every_pools_status_written_validates_against_the_machineconfigpool_crd(kube, server):
    crd_validate = _crd_validate()
    def written(name):
        obj = api(kube, f"{MCO}/machineconfigpools/{name}")
        return (obj.get("status") or {}).get("conditions") and obj

    for name in ("master", "worker", "infra"):
        obj = wait_for(what=f"pool {name}'s status", check=lambda: written(name))  # noqa: B023 - called at once
        assert crd_validate.problems(obj) == [], name


@pytest.mark.cel
def test_a_rendered_machineconfig_written_validates_against_the_machineconfig_crd(kube, server):
    crd_validate = _crd_validate()
    target = our_pools(server)["worker"]["spec"]["configuration"]["name"]
    obj = wait_for(what=f"MachineConfig {target}", check=lambda: kube.get(f"{MCO}/machineconfigs/{target}").ok and
                   api(kube, f"{MCO}/machineconfigs/{target}"))
    assert crd_validate.problems(obj) == []


@pytest.mark.cel
def test_the_machineconfignode_of_a_node_done_on_its_config_validates_against_the_crd(kube, server):
    crd_validate = _crd_validate()
    target = our_pools(server)["worker"]["spec"]["configuration"]["name"]
    made, mcn = _written_mcn(kube, server, "w-crd-done", {"state": "Done", "currentConfig": target,
                                                          "desiredConfig": target})
    assert crd_validate.problems(made) == [] and crd_validate.problems(mcn, old=made) == []


@pytest.mark.cel
def test_the_machineconfignode_of_a_node_still_on_its_first_config_validates_against_the_crd(kube, server):
    """A node working towards its first config reports no currentConfig yet: status.configVersion
    has no current (upstream omits it until the Node has one), never "", which the CRD's CEL rule
    refuses (issue 38)."""
    crd_validate = _crd_validate()
    target = our_pools(server)["worker"]["spec"]["configuration"]["name"]
    made, _ = _written_mcn(kube, server, "w-crd-first", {"state": "Working", "desiredConfig": target})
    mcn = wait_for(lambda: (lambda o: o if {c["type"]: c["status"] for c in o["status"]["conditions"]}[
        "UpdateExecuted"] == "Unknown" else None)(api(kube, f"{MCO}/machineconfignodes/w-crd-first")),
        "the MachineConfigNode applying its first config")
    assert "current" not in mcn["status"]["configVersion"]
    assert crd_validate.problems(made) == [] and crd_validate.problems(mcn, old=made) == []


def test_a_node_registered_after_its_report_gets_its_custom_pool_label_with_no_further_report(kube, server):
    """MCO-650: the node reported as infra from first boot; its kubelet registers the Node with
    only the worker role; the infra role label follows from the report already kept (the test
    sends none after the Node appears), with no second pool."""
    target = our_pools(server)["infra"]["spec"]["configuration"]["name"]
    _report(server, "infra-late", {"pool": "infra", "state": "Working", "currentConfig": "", "desiredConfig": target,
                                   "firstPivotConfig": target, "labels": {"node-role.kubernetes.io/infra": ""}})
    kube.kubectl("create", "-f", "-", input=yaml.safe_dump(_node("infra-late", {"node-role.kubernetes.io/worker": ""})))
    labels = wait_for(lambda: "node-role.kubernetes.io/infra" in (
        api(kube, "/api/v1/nodes/infra-late")["metadata"].get("labels") or {}) and
        api(kube, "/api/v1/nodes/infra-late")["metadata"]["labels"], "infra role label", 60)
    assert labels["node-role.kubernetes.io/worker"] == ""
    # The server's pools and node view read the Node from its own watch cache, which sees the
    # label after the API holds it: wait for the server's view, not only the API's.
    node = wait_for(lambda: (lambda n: n if n.get("pool") == "infra" else None)(
        server.session().get(server.url("/api/v1/nodes/infra-late"), timeout=10).json()),
        "the server's node view puts infra-late in infra")
    assert node["pool"] == "infra"
    pools = wait_for(lambda: (lambda p: p if "infra-late" in p["infra"]["status"]["nodes"] else None)(
        our_pools(server)), "the server's infra pool lists infra-late")
    assert "infra-late" in pools["infra"]["status"]["nodes"]
    assert "infra-late" not in pools["worker"]["status"]["nodes"]  # no second pool


def test_a_machineconfignode_is_owned_by_its_node_and_goes_with_it(kube, server):
    """upgrade_monitor.go makes each MCN with an ownerReference to its Node: the garbage collector
    (kube-controller-manager runs in this module) deletes it with the Node: no orphan."""
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(_node("w-owned", {"node-role.kubernetes.io/worker": ""})))
    target = our_pools(server)["worker"]["spec"]["configuration"]["name"]
    _report(server, "w-owned", {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target})
    uid = api(kube, "/api/v1/nodes/w-owned")["metadata"]["uid"]
    wait_for(what="owned by its Node", check=lambda: kube.get(f"{MCO}/machineconfignodes/w-owned").ok and [
        o["uid"] for o in api(kube, f"{MCO}/machineconfignodes/w-owned")["metadata"].get("ownerReferences") or []]
        == [uid])
    kube.kubectl("delete", "node", "w-owned")
    wait_for(what="the MachineConfigNode gone with its Node", check=lambda: kube.get(f"{MCO}/machineconfignodes/w-owned")
             .status_code == 404, timeout=60)


BAD_MC = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
          "metadata": {"name": "99-worker-bad", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
          "spec": {"config": {"ignition": {"version": "3.2.0"},
                              "storage": {"files": [{"path": "relative/path", "contents": {"source": "data:,x"}}]}}}}


def test_an_invalid_object_is_refused_and_the_last_render_keeps_serving(kube, server):
    before = server.session().get(server.url("/config/worker"), headers=IGNITION, timeout=10).content
    target = our_pools(server)["worker"]["spec"]["configuration"]["name"]
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(BAD_MC))
    try:
        cond = wait_for(lambda: {c["type"]: c for c in (api(kube, f"{MCO}/machineconfigpools/worker")
                                                                          .get("status") or {}).get("conditions", [])}
                        .get("RenderDegraded", {}).get("status") == "True" and
                        {c["type"]: c for c in api(kube, f"{MCO}/machineconfigpools/worker")["status"]["conditions"]}, "RenderDegraded")
        assert "99-worker-bad" in cond["RenderDegraded"]["message"] and cond["Degraded"]["status"] == "True"
        assert our_pools(server)["worker"]["spec"]["configuration"]["name"] == target
        after = server.session().get(server.url("/config/worker"), headers=IGNITION, timeout=10).content
        assert json.loads(after) == json.loads(before) and b"relative/path" not in after
    finally:
        kube.kubectl("delete", "machineconfig", "99-worker-bad")
    wait_for(lambda: {c["type"]: c["status"] for c in api(
        kube, f"{MCO}/machineconfigpools/worker")["status"]["conditions"]}["RenderDegraded"] == "False", "RenderDegraded cleared")


def test_a_new_machineconfig_renders_a_new_config_written_back(kube, server):
    old = our_pools(server)["master"]["spec"]["configuration"]["name"]
    mc = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
          "metadata": {"name": "60-master-motd", "labels": {"machineconfiguration.openshift.io/role": "master"}},
          "spec": {"config": {"ignition": {"version": "3.2.0"},
                              "storage": {"files": [{"path": "/etc/motd", "mode": 420,
                                                     "contents": {"source": "data:,hello"}}]}}}}
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(mc))
    new = wait_for(lambda: (lambda n: n if n != old else None)(
        our_pools(server)["master"]["spec"]["configuration"]["name"]), "a new target")
    wait_for(lambda: kube.get(f"{MCO}/machineconfigs/{new}").ok, f"MachineConfig {new}")
    served = server.session().get(server.url("/config/master"), headers=IGNITION, timeout=10).json()
    assert "/etc/motd" in [f["path"] for f in served["storage"]["files"]]


def _stop_apiserver(kube):
    import signal

    proc = kube.procs.pop("kube-apiserver")
    os.killpg(proc.pid, signal.SIGKILL)  # a crash: a graceful stop waits a minute for our open watches
    proc.wait(30)


def _start_apiserver(kube):
    kube._spawn("kube-apiserver", kube._apiserver_cmd())
    kube._wait("kube-apiserver /readyz", lambda: kube._healthy(kube.url, "/readyz"), 90)


def test_an_api_server_outage_loses_nothing(kube, server, tmp_path):
    """The API server stops under reports: configs keep being served from the watch caches; a
    report cannot be stored (node state is in the API: --store kubernetes, the default with this
    backend), so it is answered 503 with Retry-After, nothing acknowledged; once the API server
    is back the node's retry lands on its Node; the watches resume; nothing is rendered twice."""
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(_node("w-outage", {"node-role.kubernetes.io/worker": ""})))
    before = server.session().get(server.url("/config/worker"), headers=IGNITION, timeout=10)
    target = our_pools(server)["worker"]["spec"]["configuration"]["name"]
    rendered_before = sorted(m["metadata"]["name"] for m in api(kube, f"{MCO}/machineconfigs")["items"]
                             if m["metadata"]["name"].startswith("rendered-"))
    # The agent's Reporter (registered before: its credential is a Secret in the API), on a
    # session carrying its credential and its kubelet's certificate.
    agent = Reporter(server.base_url, "w-outage", Root(str(tmp_path)), "/var/lib/node-agent",
                     session=server.node_session("w-outage"))
    done = {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target}
    _stop_apiserver(kube)
    try:
        during = server.session().get(server.url("/config/worker"), headers=IGNITION, timeout=10)
        assert during.status_code == 200 and during.content == before.content
        assert agent.send(done) is False  # the agent's own send: 503, kept for its next pass
        kept = agent.kept()
        assert kept["report"] == done and "HTTP 503" in kept["error"] and "nothing was recorded" in kept["error"]
        assert "refused" not in kept
        health = wait_for(lambda: (lambda h: h if h["store"].get("error") else None)(
            server.session().get(server.url("/healthz"), timeout=10).json()), "the outage seen")
        assert "Kubernetes API" in health["store"]["error"]
    finally:
        _start_apiserver(kube)
    # The agent's passes (update's loop flushes the kept report on each): it lands once the API is back.
    wait_for(agent.flush, "the agent's kept report delivered by its own retry", 30)
    assert agent.kept() is None
    wait_for(lambda: (api(kube, "/api/v1/nodes/w-outage")["metadata"].get("annotations") or {}).get(
        "machineconfiguration.openshift.io/state") == "Done", "the Node's state annotation says Done", 30)
    wait_for(lambda: not server.session().get(server.url("/healthz"), timeout=10)
             .json()["store"].get("error"), "the watches resumed", 30)
    rendered_after = sorted(m["metadata"]["name"] for m in api(kube, f"{MCO}/machineconfigs")["items"]
                            if m["metadata"]["name"].startswith("rendered-"))
    assert rendered_after == rendered_before


# The MCO's own documents that it refuses (../shared/mco-corpus, as tests/server/test_mco_corpus.py reads it).
CORPUS = os.environ.get("NODE_AGENT_MCO_CORPUS") or os.path.join(
    os.environ.get("NODE_AGENT_SHARED_DIR") or os.path.join(os.path.dirname(REPO), "shared"), "mco-corpus")


@pytest.mark.skipif(not os.path.exists(os.path.join(CORPUS, "index.json")),
                    reason=f"MCO corpus not found at {CORPUS} (CI checks out shared/ beside the repository)")
def test_the_documents_the_mco_refuses_are_reported_and_never_served(kube, server):
    refused = [e for e in json.load(open(os.path.join(CORPUS, "index.json"))) if not e["upstream_accepts"]]
    assert len(refused) == 8
    before = {p: server.session().get(server.url(f"/config/{p}"), headers=IGNITION, timeout=10).json()
              for p in ("worker", "master", "infra")}
    created, api_refused = [], []
    for entry in refused:
        doc = yaml.safe_load(open(os.path.join(CORPUS, entry["file"])))
        meta = doc.setdefault("metadata", {})
        meta["name"] = f"{meta.get('name', 'doc')}-{entry['file'][:3]}"  # three share test-machine-config
        out = kube.kubectl("create", "-f", "-", "-o", "name", input=yaml.safe_dump(doc), check=False)
        (created if out.returncode == 0 else api_refused).append((entry, out.stdout.strip()))
    try:
        # v1alpha1 is not served by OpenShift's CRDs: the API server itself refuses those three.
        assert sorted(e["file"] for e, _ in api_refused) == ["015-MachineOSConfig.yaml", "016-MachineOSConfig.yaml",
                                                              "017-MachineOSBuild.yaml"]
        names = [ref.split("/", 1)[1] for _, ref in created]

        def all_reported():
            problems = server.session().get(server.url("/healthz"), timeout=10).json()["state"]["problems"]
            text = json.dumps(problems)
            return all(f"machineconfigs/{n} (API)" in text for n in names) and problems

        wait_for(all_reported, "every refused object reported")
        for pool, config in before.items():
            now = server.session().get(server.url(f"/config/{pool}"), headers=IGNITION, timeout=10).json()
            assert now == config, f"{pool}: the served config changed while refused objects exist"
    finally:
        for _, ref in created:
            kube.kubectl("delete", ref)
    wait_for(lambda: not server.session().get(server.url("/healthz"), timeout=10)
             .json()["state"]["problems"], "the problems gone")


SA = "system:serviceaccount:node-config-server:node-config-server"
DEPLOY = os.path.join(REPO, "deploy")  # kustomization.yaml: rbac.yaml, daemonset.yaml
OVERLAY_1_20 = os.path.join(REPO, "deploy-overlays", "kube-1.20")  # the budget as policy/v1beta1
# The apiVersion every Kubernetes from 1.25 on serves for each kind deploy/ ships (or may: ConfigMap,
# Secret, DaemonSet): the GA group/versions of the Kubernetes API reference for 1.25 to 1.32
# (kubernetes.io/docs/reference/kubernetes-api/), none of which the Deprecated API Migration Guide
# (kubernetes.io/docs/reference/using-api/deprecation-guide/) lists as removed; that guide is where
# policy/v1beta1 PodDisruptionBudget went, in 1.25 (policy/v1 is served from 1.21). A kind added
# to deploy/ needs its row here, read from those two pages.
SERVED_FROM_1_25 = {
    "Namespace": "v1", "ServiceAccount": "v1", "Service": "v1", "ConfigMap": "v1", "Secret": "v1",
    "Deployment": "apps/v1", "DaemonSet": "apps/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
}


def _kustomize(directory):
    """The objects `kubectl apply -k DIRECTORY` applies: kubectl's own kustomize (no cluster)."""
    if not os.access(KUBECTL, os.X_OK):
        pytest.skip("kubectl is not installed")
    out = subprocess.run([KUBECTL, "kustomize", directory], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def _ref(obj):
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def test_kubectl_kustomize_deploy_renders_its_two_files_with_a_policy_v1_pdb_and_apiversions_served_from_1_25():
    """`kubectl apply -k deploy/` on a current cluster: deploy/kustomization.yaml renders every
    object of rbac.yaml and daemonset.yaml and no other, each in the apiVersion Kubernetes 1.25
    and later serve for its kind (SERVED_FROM_1_25); the PodDisruptionBudget is policy/v1, with
    minAvailable 1 (a DaemonSet has no scale: the disruption controller computes maxUnavailable
    only for a scalable controller's pods) and an explicit selector of the DaemonSet's pods
    (policy/v1 reads an empty selector as every pod of the namespace, v1beta1 as none: only an
    explicit one means the same in both)."""
    objs = _kustomize(DEPLOY)
    files = []
    for name in ("rbac.yaml", "daemonset.yaml"):
        with open(os.path.join(DEPLOY, name), encoding="utf-8") as f:
            files += [o for o in yaml.safe_load_all(f) if o]
    assert sorted(map(_ref, objs), key=str) == sorted(map(_ref, files), key=str)
    assert [(_ref(o), o["apiVersion"]) for o in objs if SERVED_FROM_1_25.get(o["kind"]) != o["apiVersion"]] == []
    pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    daemonsets = [o for o in objs if o["kind"] == "DaemonSet"]
    assert [p["apiVersion"] for p in pdbs] == ["policy/v1"] and len(daemonsets) == 1
    spec, pods = pdbs[0]["spec"], daemonsets[0]["spec"]["template"]["metadata"]["labels"]
    assert spec["minAvailable"] == 1 and "maxUnavailable" not in spec
    assert set(spec["selector"]) == {"matchLabels"} and spec["selector"]["matchLabels"]
    assert spec["selector"]["matchLabels"].items() <= pods.items()


def test_the_kube_1_20_overlay_renders_deploy_unchanged_but_the_pdb_as_policy_v1beta1():
    """deploy-overlays/kube-1.20 is deploy/ with one change: the PodDisruptionBudget's apiVersion
    (everything else, the budget's spec too, as deploy/ renders it)."""
    base = _kustomize(DEPLOY)
    expected = [dict(o, apiVersion="policy/v1beta1") if o["kind"] == "PodDisruptionBudget" else o for o in base]
    assert _kustomize(OVERLAY_1_20) == expected
    assert expected != base


def test_the_kube_1_20_overlay_is_admitted_by_the_1_20_api_server_which_refuses_the_policy_v1_pdb(kube):
    """`kubectl apply -k deploy-overlays/kube-1.20` as an admin runs it, with --dry-run=server:
    the 1.20 API server itself decodes, validates and admits every object, the DaemonSet,
    Service and policy/v1beta1 PodDisruptionBudget included (no volume: the replicas keep no
    state), and stores none (this module's cluster runs a scheduler, and Nodes no kubelet runs
    that the DaemonSet's pods would be bound to; tests/vm runs them on a real kubelet). deploy/
    itself is refused by this server for its budget alone: 1.20 serves no policy/v1 PodDisruptionBudget, which is why the overlay is."""
    out = kube.kubectl("apply", "-k", OVERLAY_1_20, "--dry-run=server")
    for ref in ("daemonset.apps/node-config-server", "service/node-config-server",
                "poddisruptionbudget.policy/node-config-server"):
        assert f"{ref} created (server dry run)" in out.stdout, out.stdout
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(_kustomize(OVERLAY_1_20)) and all("(server dry run)" in line for line in lines), lines
    assert "persistentvolumeclaim" not in out.stdout
    refused = kube.kubectl("apply", "-k", DEPLOY, "--dry-run=server", check=False)
    assert refused.returncode != 0
    assert 'no matches for kind "PodDisruptionBudget" in version "policy/v1"' in refused.stderr, refused.stderr
    assert "daemonset.apps/node-config-server created (server dry run)" in refused.stdout, refused.stdout


def test_the_deploy_service_account_may_do_what_the_server_does_and_nothing_more_asked_here(kube):
    """deploy/rbac.yaml applied (the module's fixture): the service account may do what the
    server does (docs/kubernetes.md, "What it reads" and "What it writes") and nothing else asked
    here."""
    allowed = [("list", "machineconfigpools.machineconfiguration.openshift.io"),
               ("watch", "machineconfigs.machineconfiguration.openshift.io"),
               ("create", "machineconfigs.machineconfiguration.openshift.io"),
               ("patch", "machineconfigpools.machineconfiguration.openshift.io", "status"),
               ("patch", "machineconfigpools.machineconfiguration.openshift.io"),  # spec.configuration (render)
               ("watch", "machineconfigurations.operator.openshift.io"),
               ("watch", "machineosbuilds.machineconfiguration.openshift.io"),
               ("create", "machineconfignodes.machineconfiguration.openshift.io"),
               ("delete", "machineconfignodes.machineconfiguration.openshift.io"),  # one it made, with its node
               ("get", "configmaps/extension-apiserver-authentication", None, "kube-system"),  # the client CA
               ("patch", "machineconfignodes.machineconfiguration.openshift.io", "status"),
               ("patch", "nodes"), ("watch", "nodes"),
               ("list", "pods"), ("create", "pods", "eviction")]  # the drain: evictions only
    denied = [("delete", "pods"), ("delete", "pods", None, "default"),  # no pod DELETE: the drain never falls back
              ("delete", "machineconfigs.machineconfiguration.openshift.io"),
              ("update", "machineconfigs.machineconfiguration.openshift.io"),
              ("update", "machineconfigpools.machineconfiguration.openshift.io"),  # the spec is the admin's
              ("patch", "machineconfigurations.operator.openshift.io"),
              ("get", "secrets"), ("delete", "nodes"), ("create", "pods"), ("create", "clusterrolebindings"),
              ("create", "events")]  # Events only in its own namespace (below), never cluster-wide

    def can(verb, resource, sub=None, namespace=None):
        args = ["auth", "can-i", verb, resource, f"--as={SA}"] + ([f"--subresource={sub}"] if sub else [])
        return kube.kubectl(*args, *([f"--namespace={namespace}"] if namespace else []), check=False) \
            .stdout.strip() == "yes"

    assert [a for a in allowed if not can(*a)] == []
    assert [d for d in denied if can(*d)] == []
    # Node state (--store kubernetes): ConfigMaps, Secrets and Leases of its own namespace only
    # (the Role), never deleting a ConfigMap (a Lease: a dead replica's heartbeat); reports on
    # MachineConfigNodes (above).
    ns, creds = "node-config-server", "node-config-server-credentials"
    allowed = [(v, r, None, ns) for v, r in (
        ("watch", "configmaps"), ("create", "configmaps"), ("update", "configmaps"), ("patch", "configmaps"),
        ("watch", "leases.coordination.k8s.io"), ("create", "leases.coordination.k8s.io"),
        ("update", "leases.coordination.k8s.io"), ("delete", "leases.coordination.k8s.io"),
        ("create", "events"), ("patch", "events"))] + [(v, "secrets", None, creds) for v in (
            "get", "list", "watch", "create", "update", "delete")] + [
        ("patch", "machineconfignodes.machineconfiguration.openshift.io")]
    denied = [("delete", "configmaps", None, ns), ("delete", "leases.coordination.k8s.io", None, "kube-system"),
              ("list", "secrets", None, "kube-system"), ("create", "configmaps", None, "default"),
              ("update", "leases.coordination.k8s.io", None, "kube-system"),
              ("get", "configmaps", None, "kube-system"),  # that one ConfigMap of kube-system only
              # its own TLS and token Secrets: not readable, not listable, not watchable
              ("get", "secrets", None, ns), ("list", "secrets", None, ns), ("watch", "secrets", None, ns),
              ("create", "events", None, "default"), ("create", "events", None, "openshift-machine-config-operator")]
    assert [a for a in allowed if not can(*a)] == []
    assert [d for d in denied if can(*d)] == []


def test_kubectl_auth_can_i_list_shows_the_service_account_exactly_what_rbac_yaml_grants_and_every_account_has(kube):
    """``kubectl auth can-i --list`` as the server's ServiceAccount, in each namespace it works in
    and in one it has nothing to do with, is deploy/rbac.yaml's grants and what the cluster gives
    every authenticated service account (discovery, self reviews), nothing else: no binding
    outside rbac.yaml reaches the account (the test above asks one grant at a time). The VM test
    asks the same of the account its pod runs as (tests/vm/test_vm_server_pod.py)."""
    seen = rbac_list.against_rbac_yaml(kube.kubectl, os.path.join(DEPLOY, "rbac.yaml"), rbac_list.NAMESPACES)
    assert {ns: (v["extra"], v["missing"]) for ns, v in seen.items()} == {ns: ([], []) for ns in rbac_list.NAMESPACES}
    default = {tuple(g) for g in seen["default"]["shown"]}
    assert ("secrets", "", "", "get") not in default and ("pods/eviction", "", "", "create") in default


def test_the_servers_user_cannot_read_its_own_tls_and_token_secrets_but_registers_nodes(kube, server):
    """deploy/rbac.yaml keeps node credentials in a namespace of their own: the server's user
    gets 403 from the real API server on the TLS and token Secrets daemonset.yaml mounts, and
    still stores a node's credential (docs/security.md, "Kubernetes")."""
    ns, creds = "node-config-server", "node-config-server-credentials"
    kube.kubectl("create", "secret", "generic", "node-config-server-tokens", "-n", ns, "--from-literal=token=t0p",
                 "--from-literal=admin-token=adm1n", check=False)
    kube.kubectl("create", "secret", "generic", "node-config-server-tls", "-n", ns, "--from-literal=tls.key=k3y",
                 check=False)
    as_server = kube.kubeconfig_for("node-config-server-test")
    for args in (("get", "secret", "node-config-server-tls"), ("get", "secret", "node-config-server-tokens"),
                 ("get", "secrets")):
        out = kube.kubectl(*args, "-n", ns, kubeconfig=as_server, check=False)
        assert out.returncode != 0 and "forbidden" in out.stderr, (args, out.stdout, out.stderr)
    r = server.session().post(server.url("/api/v1/nodes/rbac-node-0/register"), timeout=10)
    assert r.status_code == 201, r.text
    stored = kube.get(f"/api/v1/namespaces/{creds}/secrets/node-credential-rbac-node-0")
    assert stored.status_code == 200 and r.json()["credential"] not in stored.text


def _kubelet_finishes_deletions(kube, ns):
    """The kubelet's part (none runs here): a pod marked for deletion is stopped and removed."""
    for p in api(kube, f"/api/v1/namespaces/{ns}/pods")["items"]:
        if p["metadata"].get("deletionTimestamp"):
            kube.session().delete(f"{kube.url}/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}",
                                  json={"gracePeriodSeconds": 0}, timeout=10)


def test_a_drain_lease_cordons_and_evicts_before_it_is_granted_and_done_uncordons(kube, server):
    """The node asks for its drain lease; the server cordons its Node and evicts its pod, and
    grants the lease only once the pod is gone (the test plays the kubelet: it binds the pod,
    marks it Running and Ready, and finishes its deletion). The node's Done report on the config
    it drained for uncordons the Node."""
    ns, node = "drain-lease", "w-drain"
    kube.create_namespace(ns)
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(_node(node, {"node-role.kubernetes.io/worker": ""})))
    s = kube.session()
    r = s.post(f"{kube.url}/api/v1/namespaces/{ns}/pods", timeout=10, json={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": ns},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.example/app:1"}]}})
    assert r.status_code == 201, r.text
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    r = s.patch(f"{kube.url}/api/v1/namespaces/{ns}/pods/app/status", json={"status": status}, timeout=10,
                headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    target = our_pools(server)["worker"]["spec"]["configuration"]["name"]
    _report(server, node, {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target})
    ask = server.node_session(node)
    # Other tests' worker Nodes in this session's cluster are unavailable (never done) and, as
    # upstream counts them, use up maxUnavailable (getAllCandidateMachines): this test's own slot
    # comes from a maxUnavailable of 100%, restored afterwards. A "wait" answer cordons nothing.
    before = (api(kube, f"{MCO}/machineconfigpools/worker").get("spec") or {}).get("maxUnavailable")
    kube.kubectl("patch", "mcp", "worker", "--type", "merge", "-p", json.dumps({"spec": {"maxUnavailable": "100%"}}))
    try:
        first, = wait_for(what="a drain slot once maxUnavailable is 100%", check=lambda: (lambda r: (r,) if r.json().get(
            "status") != "wait" else None)(ask.post(server.url(f"/api/v1/nodes/{node}/drain"), timeout=30,
                                                    json={"pool": "worker", "config": target})))
    finally:
        kube.kubectl("patch", "mcp", "worker", "--type", "merge", "-p", json.dumps({"spec": {"maxUnavailable": before}}))
    assert first.status_code == 429 and first.json()["status"] == "draining", first.text
    assert first.headers["Retry-After"] == "5" and "1 pod(s) still on it" in first.json()["reason"]
    assert api(kube, f"/api/v1/nodes/{node}")["spec"]["unschedulable"] is True
    assert api(kube, f"/api/v1/namespaces/{ns}/pods/app")["metadata"].get("deletionTimestamp")  # evicted
    _kubelet_finishes_deletions(kube, ns)

    def granted():
        r = ask.post(server.url(f"/api/v1/nodes/{node}/drain"), json={"pool": "worker", "config": target},
                     timeout=30)
        return r.status_code == 200 and r.json()
    answer = wait_for(granted, "the lease, once drained")
    assert answer["granted"] and answer["drain"]["done"]
    assert kube.get(f"/api/v1/namespaces/{ns}/pods/app").status_code == 404  # gone before the lease
    _report(server, node, {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target})
    wait_for(lambda: not api(kube, f"/api/v1/nodes/{node}")["spec"].get("unschedulable"), "uncordoned after Done")
    assert "node-config-server.openshift.io/drained-for" not in api(kube, f"/api/v1/nodes/{node}")["metadata"].get(
        "annotations", {})
