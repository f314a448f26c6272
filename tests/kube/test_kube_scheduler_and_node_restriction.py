"""What the tests' control plane (tests/helpers/kube_cluster.py) adds for a real kubelet (the VM
test's guest, issue 41): the real kube-scheduler places pods, the NodeRestriction admission
plugin keeps a kubelet to its own Node and off the node-role labels (so the server, not the
kubelet, labels a Node into its pool, as the MCO's node controller does), and the API server's
certificate names 10.0.2.2, where a QEMU guest reaches the host's loopback."""

import ipaddress

from cryptography import x509

from tests.helpers.kube_cluster import (
    GUEST_HOST_IP,
    unique,
    wait_for,
)

# A taint only this file's pods tolerate: the other tests' pods in the session's cluster (bound by
# the tests themselves) must never be placed on this file's Nodes by the real scheduler.
TAINT = {"key": "node-agent.test/scheduler", "value": "only-this-test", "effect": "NoSchedule"}


def node_with_room(kc, name, labels=None):
    """A Node as a registered kubelet leaves it: Ready, with allocatable pods, cpu and memory."""
    s = kc.session()
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": [TAINT]}}
    r = s.post(kc.url + "/api/v1/nodes", json=body, timeout=10)
    assert r.status_code == 201, r.text
    room = {"pods": "10", "cpu": "2", "memory": "2Gi"}
    status = {"status": {"capacity": room, "allocatable": room, "conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "this test's Node"}]}}
    r = s.patch(f"{kc.url}/api/v1/nodes/{name}/status", json=status, timeout=10,
                headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text


def test_the_real_scheduler_binds_a_pending_pod_to_the_node_with_room(kube_cluster):
    kc, node, ns = kube_cluster, unique("sched-node"), unique("sched")
    kc.create_namespace(ns)
    try:
        node_with_room(kc, node)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"automountServiceAccountToken": False, "tolerations": [dict(TAINT, operator="Equal")],
                        "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}}
        r = kc.session().post(f"{kc.url}/api/v1/namespaces/{ns}/pods", json=pod, timeout=10)
        assert r.status_code == 201, r.text
        # Nobody in this test binds it: only kube-scheduler can set its nodeName.
        bound = wait_for(lambda: kc.get(f"/api/v1/namespaces/{ns}/pods/p").json()["spec"].get("nodeName"),
                         "the pod bound by kube-scheduler", 60)
        assert bound == node
        # 1.20's scheduler records through events.k8s.io: core/v1 shows it as reportingComponent.
        # It records the event after the binding, through its asynchronous event broadcaster: wait for it.
        def scheduled():
            events = kc.get(f"/api/v1/namespaces/{ns}/events").json()["items"]
            return [e for e in events if e["reason"] == "Scheduled"
                    and e.get("reportingComponent") == "default-scheduler"]
        assert wait_for(scheduled, "the Scheduled event from default-scheduler", 30)
    finally:
        kc.kubectl("delete", "namespace", ns, "--wait=false")
        kc.kubectl("delete", "node", node, "--wait=false", check=False)


def kubelet_session(kc, node):
    """Requests as ``node``'s kubelet: the identity the Node authorizer and NodeRestriction know."""
    cfg_user = f"system:node:{node}"
    cert = kc.ca.issue(unique("kubelet"), cfg_user, orgs=["system:nodes"])
    return kc.session(cert)


def merge_patch(session, kc, path, body):
    return session.patch(kc.url + path, json=body, timeout=10,
                         headers={"Content-Type": "application/merge-patch+json"})


def test_node_restriction_refuses_a_kubelet_its_role_label_and_other_nodes(kube_cluster):
    kc = kube_cluster
    own, other = unique("nr-own"), unique("nr-other")
    kubelet = kubelet_session(kc, own)
    try:
        # Registering with a role label is refused (what an upstream kubelet with
        # --node-labels=node-role.kubernetes.io/worker= would ask, were it to start at all).
        r = kubelet.post(kc.url + "/api/v1/nodes", timeout=10, json={
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": own, "labels": {"node-role.kubernetes.io/worker": ""}}})
        assert r.status_code == 403 and "node-role.kubernetes.io/worker" in r.json()["message"], r.text
        # Registering without one is allowed, and so is a label outside kubernetes.io.
        r = kubelet.post(kc.url + "/api/v1/nodes", timeout=10, json={
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": own, "labels": {"example.com/zone": "a"}}})
        assert r.status_code == 201, r.text
        # Adding the role label later is refused too: the server (or an admin) labels the Node.
        r = merge_patch(kubelet, kc, f"/api/v1/nodes/{own}",
                        {"metadata": {"labels": {"node-role.kubernetes.io/vm": ""}}})
        assert r.status_code == 403 and "node-role.kubernetes.io/vm" in r.json()["message"], r.text
        r = merge_patch(kc.session(), kc, f"/api/v1/nodes/{own}",
                        {"metadata": {"labels": {"node-role.kubernetes.io/vm": ""}}})
        assert r.status_code == 200, r.text
        # Another node's Node is not this kubelet's to change.
        r = kc.session().post(kc.url + "/api/v1/nodes", timeout=10,
                              json={"apiVersion": "v1", "kind": "Node", "metadata": {"name": other}})
        assert r.status_code == 201, r.text
        r = merge_patch(kubelet, kc, f"/api/v1/nodes/{other}", {"metadata": {"labels": {"example.com/zone": "b"}}})
        assert r.status_code == 403 and other in r.json()["message"], r.text
    finally:
        kc.kubectl("delete", "node", own, other, "--wait=false", "--ignore-not-found")


def test_the_api_servers_certificate_names_the_host_as_a_qemu_guest_sees_it(kube_cluster):
    with open(kube_cluster.serving[0], "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address(GUEST_HOST_IP) in sans.get_values_for_type(x509.IPAddress)
    assert GUEST_HOST_IP == "10.0.2.2"  # QEMU's user network (slirp): the host's loopback
