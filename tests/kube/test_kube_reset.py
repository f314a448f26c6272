"""KubeCluster.reset (tests/helpers/kube_reset.py) leaves the worker's shared control plane as a new
one looks to the next module: what a module made is gone when it returns, what start() made and
RBAC's objects stay (issue 54: the modules under kube_cluster_reset rely on both)."""

import pytest

from tests.helpers.kube_cluster import unique

MCO = "/apis/machineconfiguration.openshift.io/v1"
WIDGETS = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Cluster",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object"}}}]},
}


def post(kc, path, obj):
    with kc.session() as s:
        r = s.post(kc.url + path, json=obj, timeout=10)
    assert r.status_code == 201, r.text


def status(kc, path):
    return kc.get(path).status_code


@pytest.fixture(scope="module")
def made(kube_cluster_reset):
    """One of each kind reset removes, as a module's tests leave them."""
    kc = kube_cluster_reset
    kc.bind_server_user("reset-test")  # deploy/rbac.yaml: the server's namespaces, its roles, a binding
    ns = kc.create_namespace(unique("reset"))
    meta = {"name": "x"}
    post(kc, f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "automountServiceAccountToken": False, "containers": [{"name": "c", "image": "registry.invalid/p:1"}]}})
    post(kc, f"/apis/apps/v1/namespaces/{ns}/daemonsets", {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": meta, "spec": {"selector": {"matchLabels": {"a": "x"}}, "template": {
             "metadata": {"labels": {"a": "x"}}, "spec": {"containers": [{"name": "c", "image": "r.invalid/p:1"}]}}}})
    post(kc, "/api/v1/namespaces/node-config-server/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                                   "metadata": meta})
    post(kc, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
         {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta})
    post(kc, "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": meta})
    post(kc, f"{MCO}/machineconfigpools", {"apiVersion": "machineconfiguration.openshift.io/v1",
                                            "kind": "MachineConfigPool", "metadata": meta, "spec": {}})
    post(kc, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGETS)
    kc._wait("widgets.example.com Established", lambda: kc._established("widgets.example.com"), 60)
    post(kc, "/apis/example.com/v1/widgets", {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta})
    kc.reset()
    return kc, ns


def test_reset_removes_pods_workloads_nodes_pools_leases_and_server_namespace_objects(made):
    kc, ns = made
    for path in (f"/api/v1/namespaces/{ns}/pods/x", f"/apis/apps/v1/namespaces/{ns}/daemonsets/x",
                 "/api/v1/namespaces/node-config-server/configmaps/x",
                 "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/x",
                 "/api/v1/nodes/x", f"{MCO}/machineconfigpools/x"):
        assert status(kc, path) == 404, path


def test_reset_removes_a_crd_a_test_added_with_its_objects_and_keeps_the_installed_ones(made):
    kc, _ = made
    assert status(kc, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com") == 404
    for name in kc.crd_names:
        assert status(kc, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") == 200, name


def test_reset_leaves_a_test_namespace_terminating_and_keeps_the_system_and_server_namespaces(made):
    kc, ns = made
    r = kc.get(f"/api/v1/namespaces/{ns}")
    assert r.status_code == 404 or r.json()["metadata"].get("deletionTimestamp"), r.text
    for kept in ("default", "kube-system", "node-config-server", "node-config-server-credentials"):
        assert not kc.get(f"/api/v1/namespaces/{kept}").json()["metadata"].get("deletionTimestamp"), kept


def test_reset_keeps_rbac_objects(made):
    kc, _ = made
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for path in (f"{rbac}/clusterrolebindings/kube-apiserver-kubelet-client", f"{rbac}/clusterroles/node-config-server",
                 f"{rbac}/clusterrolebindings/reset-test", f"{rbac}/namespaces/node-config-server/rolebindings/reset-test"):
        assert status(kc, path) == 200, path
