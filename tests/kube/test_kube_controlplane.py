"""The tests' real Kubernetes control plane (tests/helpers/kube_cluster.py) behaves the way
node-config-server will rely on: OpenShift's CRDs served and validated (with the kube-openapi fix
of tools/kube: "" and false are values, not null), `kubectl get mcp` printing the MCO's columns,
the controller manager writing PodDisruptionBudget status, the Eviction API honouring it, and RBAC
refusing a user nobody granted anything."""

import json

import pytest

from tests.helpers.kube_cluster import unique
from tests.helpers.wait import wait_for

MCO = "/apis/machineconfiguration.openshift.io/v1"
CRD_NAMES = {
    "machineconfigs.machineconfiguration.openshift.io",
    "machineconfigpools.machineconfiguration.openshift.io",
    "machineconfignodes.machineconfiguration.openshift.io",
    "machineosconfigs.machineconfiguration.openshift.io",
    "machineosbuilds.machineconfiguration.openshift.io",
    "pinnedimagesets.machineconfiguration.openshift.io",
    "machineconfigurations.operator.openshift.io",
}


def pool(name, **spec):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": name},
            "spec": {"machineConfigSelector": {"matchLabels": {
                         "machineconfiguration.openshift.io/role": name}},
                     "nodeSelector": {"matchLabels": {f"node-role.kubernetes.io/{name}": ""}}, **spec}}


def test_the_crds_are_established(kube_cluster):
    r = kube_cluster.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    assert r.status_code == 200, r.text
    established = {c["metadata"]["name"] for c in r.json()["items"]
                   if any(x["type"] == "Established" and x["status"] == "True"
                          for x in c.get("status", {}).get("conditions", []))}
    assert CRD_NAMES <= established
    pools = kube_cluster.get(MCO + "/machineconfigpools")  # served, not only registered
    assert pools.status_code == 200 and pools.json()["kind"] == "MachineConfigPoolList", pools.text


def test_an_infra_pool_with_empty_label_value_and_paused_false_is_accepted(kube_cluster):
    # Refused with "Invalid value: \"null\"" by a 1.20 apiserver built with Go >= 1.18 unpatched.
    s = kube_cluster.session()
    body = pool("infra", paused=False)
    body["spec"]["nodeSelector"]["matchLabels"] = {"node-role.kubernetes.io/infra": ""}
    r = s.post(kube_cluster.url + MCO + "/machineconfigpools", json=body, timeout=10)
    assert r.status_code == 201, r.text
    got = s.get(kube_cluster.url + MCO + "/machineconfigpools/infra", timeout=10).json()
    assert got["spec"]["nodeSelector"]["matchLabels"] == {"node-role.kubernetes.io/infra": ""}
    assert got["spec"]["paused"] is False
    # ... and the schema is still enforced: a string is no boolean.
    bad = pool(unique("bad"), paused="no")
    r = s.post(kube_cluster.url + MCO + "/machineconfigpools", json=bad, timeout=10)
    assert r.status_code == 422 and "spec.paused" in r.text, r.text


def test_a_machineconfig_is_stored_as_written(kube_cluster):
    name = unique("99-worker-test")
    mc = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
          "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": "worker"}},
          "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [{
                       "path": "/etc/test.conf", "mode": 420, "overwrite": True,
                       "contents": {"source": "data:,hello%0A"}}]}},
                   "kernelArguments": ["quiet"]}}
    s = kube_cluster.session()
    r = s.post(kube_cluster.url + MCO + "/machineconfigs", json=mc, timeout=10)
    assert r.status_code == 201, r.text
    got = s.get(kube_cluster.url + MCO + f"/machineconfigs/{name}", timeout=10).json()
    assert got["spec"]["config"] == mc["spec"]["config"]  # preserved, unknown fields and all
    assert got["spec"]["kernelArguments"] == ["quiet"]


def test_kubectl_get_mcp_prints_the_mco_columns(kube_cluster):
    name = unique("cols")
    kube_cluster.kubectl("create", "-f", "-", input=json.dumps(pool(name)))
    out = kube_cluster.kubectl("get", "mcp", name).stdout.splitlines()
    assert out[0].split() == ["NAME", "CONFIG", "UPDATED", "UPDATING", "DEGRADED", "MACHINECOUNT",
                              "READYMACHINECOUNT", "UPDATEDMACHINECOUNT", "DEGRADEDMACHINECOUNT", "AGE"]
    assert out[1].split()[0] == name  # status is empty: nothing writes it yet


@pytest.fixture
def namespace(kube_cluster):
    """A namespace of the test's own, once its default ServiceAccount exists (the controller
    manager creates it; pods are refused until then)."""
    ns = unique("t")
    kube_cluster.create_namespace(ns)
    yield ns
    kube_cluster.kubectl("delete", "namespace", ns, "--wait=false")


def make_pod(kc, ns, name, running):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "guarded"}},
           "spec": {"automountServiceAccountToken": False,
                    "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}}
    s = kc.session()
    r = s.post(f"{kc.url}/api/v1/namespaces/{ns}/pods", json=pod, timeout=10)
    assert r.status_code == 201, r.text
    if running:  # what a kubelet would report; none runs here
        status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        r = s.patch(f"{kc.url}/api/v1/namespaces/{ns}/pods/{name}/status", json=status, timeout=10,
                    headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text


def make_pdb(kc, ns, min_available=1):
    pdb = {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "guard"},
           "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "guarded"}}}}
    r = kc.session().post(f"{kc.url}/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets",
                          json=pdb, timeout=10)
    assert r.status_code == 201, r.text


def pdb_status(kc, ns, **want):
    """The PDB's status once the controller has observed its generation and it has ``want``."""
    def check():
        got = kc.get(f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/guard").json()
        status = got.get("status", {})
        if status.get("observedGeneration") != got["metadata"]["generation"]:
            return None
        return status if all(status.get(k) == v for k, v in want.items()) else None
    return wait_for(check, f"PodDisruptionBudget status {want}")


def test_the_controller_manager_writes_pdb_status(kube_cluster, namespace):
    make_pod(kube_cluster, namespace, "pending", running=False)  # no kubelet: it stays Pending
    make_pdb(kube_cluster, namespace)
    status = pdb_status(kube_cluster, namespace, expectedPods=1)
    assert status["observedGeneration"] == 1
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (0, 1, 0)


def eviction_version(kc):
    """The group/version of pods/eviction, from discovery (policy/v1beta1 on 1.20)."""
    resources = kc.get("/api/v1").json()["resources"]
    sub = [r for r in resources if r["name"] == "pods/eviction"]
    assert sub, "no pods/eviction in discovery"
    return f"{sub[0]['group']}/{sub[0]['version']}"


def test_an_eviction_the_pdb_forbids_answers_429(kube_cluster, namespace):
    kc = kube_cluster
    for name in ("a", "b"):
        make_pod(kc, namespace, name, running=True)
    make_pdb(kc, namespace, min_available=1)
    pdb_status(kc, namespace, currentHealthy=2, disruptionsAllowed=1)
    version = eviction_version(kc)
    assert version == "policy/v1beta1"

    def evict(name):
        body = {"apiVersion": version, "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        return kc.session().post(f"{kc.url}/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                                 json=body, timeout=10)
    r = evict("a")
    assert r.status_code == 201, r.text
    r = evict("b")
    assert r.status_code == 429, r.text
    assert "disruption budget" in r.json()["message"]
    assert kc.get(f"/api/v1/namespaces/{namespace}/pods/b").status_code == 200


def test_a_user_without_a_binding_is_forbidden(kube_cluster):
    user = unique("nobody")
    cfg = kube_cluster.kubeconfig_for(user, ["testers"])
    out = kube_cluster.kubectl("get", "mcp", kubeconfig=cfg, check=False)
    assert out.returncode != 0 and "forbidden" in out.stderr.lower(), out.stderr
    assert f'User "{user}"' in out.stderr  # authenticated by its certificate, refused by RBAC
    # Granted list on pools, the same user can; nothing else.
    kube_cluster.kubectl("create", "clusterrole", user, "--verb=get,list",
                         "--resource=machineconfigpools.machineconfiguration.openshift.io")
    kube_cluster.kubectl("create", "clusterrolebinding", user, f"--clusterrole={user}", f"--user={user}")
    wait_for(lambda: kube_cluster.kubectl("get", "mcp", kubeconfig=cfg, check=False).returncode == 0,
             "list allowed by the new binding")
    out = kube_cluster.kubectl("get", "mc", kubeconfig=cfg, check=False)
    assert out.returncode != 0 and "forbidden" in out.stderr.lower(), out.stderr


def test_a_bootstrap_token_gets_a_kubelet_its_client_certificate_as_a_real_cluster_does(kube_cluster):
    """The TLS bootstrap the VM test's kubelet goes through (KubeCluster(tls_bootstrap=True)): with
    a bootstrap token a kubelet creates a CSR for system:node:<name> (signer
    kubernetes.io/kube-apiserver-client-kubelet), the controller manager approves it (the
    nodeclient binding, the machine-approver's stand-in) and signs it with the cluster's CA, the
    API server's client CA, which it publishes for node-config-server to verify the certificate."""
    import base64

    import requests
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    token, node = kube_cluster.bootstrap_token(), unique("boot")
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
        x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")])).sign(key, hashes.SHA256()))
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": "csr-"},
            "spec": {"request": base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode(),
                     "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                     "usages": ["digital signature", "key encipherment", "client auth"]}}
    r = requests.post(kube_cluster.url + "/apis/certificates.k8s.io/v1/certificatesigningrequests", json=body,
                      headers={"Authorization": f"Bearer {token}"}, verify=kube_cluster.ca_path, timeout=10)
    assert r.status_code == 201, r.text
    name = r.json()["metadata"]["name"]

    def issued():
        got = kube_cluster.get(f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}").json()
        return (got.get("status") or {}).get("certificate")
    cert = x509.load_pem_x509_certificate(base64.b64decode(wait_for(issued, "the CSR approved and signed", 30)))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{node}"
    published = kube_cluster.get("/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication")
    ca = x509.load_pem_x509_certificate(published.json()["data"]["client-ca-file"].encode())
    assert cert.issuer == ca.subject
