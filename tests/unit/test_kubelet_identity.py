"""The pure parts of issue 45's node identity: what a verified peer certificate proves, when a
server can approve nobody, where a registration came from, what the 429 drain answer says, what
the admin's delete takes back from a Node, the pending list's view of a Node, and node-agent's
reading of the kubelet's certificate file (docs/security.md "Identity")."""

import io
import os
import time

import pytest

from agent.host.root import Root
from agent.node.kubeletcert import KubeletCert
from agent.node.kubeletid import KubeletIdentity
from agent.server.cluster.kube_undo import undo_patch
from agent.server.cluster.registrations import node_object
from agent.server.http.httpio import MAX_REPORT, client_address, finish_body
from agent.server.rollout.drains import DrainAnswer
from agent.server.rollout.identity import Admission, Auth, Caller, Denied, kubelet_node
from agent.server.store.nodestore import Registration
from tests.helpers.certs import ClientCA


def subject(*pairs):
    return {"subject": tuple(((k, v),) for k, v in pairs)}


@pytest.mark.parametrize("cert, node", [
    (subject(("organizationName", "system:nodes"), ("commonName", "system:node:worker-0")), "worker-0"),
    (subject(("commonName", "system:node:w.example.com"), ("organizationName", "system:nodes"),
             ("organizationName", "other")), "w.example.com"),
    (subject(("commonName", "system:node:worker-0")), ""),  # no O system:nodes: not a kubelet
    (subject(("organizationName", "system:masters"), ("commonName", "system:node:worker-0")), ""),
    (subject(("organizationName", "system:nodes"), ("commonName", "system:admin")), ""),
    (subject(("organizationName", "system:nodes"), ("commonName", "system:node:")), ""),
    (subject(("organizationName", "system:nodes"), ("commonName", "system:node:Bad_Name")), ""),
    (subject(("organizationName", "system:nodes"), ("commonName", "system:node:a"), ("commonName", "x")), ""),
    (None, ""), ({}, ""),
])
def test_only_a_kubelets_certificate_names_a_node(cert, node):
    assert kubelet_node(cert) == node


def test_a_certificate_acts_only_for_the_node_it_names():
    Caller("node", "a", kubelet="a").check_acting_for("a")
    Caller("node", "a").check_acting_for("b")  # no certificate: the credential's rules decide
    with pytest.raises(Denied) as err:
        Caller("node", "a", kubelet="b").check_acting_for("a")
    assert err.value.code == 403 and "node b's kubelet" in err.value.message and "acts for node a" in err.value.message
    assert Auth("boot").approval_of(Caller("bootstrap", kubelet="n1"), "n1") == (True, "kubelet")
    assert Auth("boot").approval_of(Caller("bootstrap", kubelet="n2"), "n1") == (False, "")


def test_a_server_that_can_approve_nobody_is_named_for_what_it_lacks():
    import re

    token_only = Auth("boot")
    assert "nobody can be approved" in token_only.nobody_approved(real_nodes=False)
    ruled = Auth("boot", admission=Admission(auto_approve=re.compile(".*")))
    assert ruled.nobody_approved(real_nodes=False) == ""  # the rule approves
    assert "binds no name to its Node" in ruled.nobody_approved(real_nodes=True)
    assert Auth("boot", "admin").nobody_approved(real_nodes=True) == ""
    proven = Auth("boot")
    proven.kubelet_proof = True
    assert proven.nobody_approved(real_nodes=True) == ""
    assert Auth().nobody_approved(real_nodes=True) == ""  # an open server approves every name


@pytest.mark.parametrize("environ, trusted, address", [
    ({"REMOTE_ADDR": "10.0.0.5"}, ("127.0.0.1",), "10.0.0.5"),
    ({"REMOTE_ADDR": "10.0.0.5", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}, ("127.0.0.1",), "10.0.0.5"),  # not a proxy
    ({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "9.9.9.9, 1.2.3.4"}, ("127.0.0.1",), "1.2.3.4"),
    ({"REMOTE_ADDR": "10.0.0.7", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}, ("*",), "1.2.3.4"),
    ({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": " "}, ("127.0.0.1",), "127.0.0.1"),
])
def test_a_registrations_address_is_the_peers_unless_a_trusted_proxy_forwarded_it(environ, trusted, address):
    assert client_address(environ, trusted) == address


def test_the_429_drain_answer_names_max_unavailable_and_the_slots_apart():
    held = DrainAnswer(False, "w-2", "worker", limit=1, retry_after=5, holders=["w-1"], max_unavailable=3).to_dict()
    assert (held["maxUnavailable"], held["slots"], held["free"]) == (3, 1, 0)
    assert "all 1 drain slot(s)" in held["reason"] and "2 of its maxUnavailable 3 taken by unavailable Nodes" in \
        held["reason"]
    none = DrainAnswer(False, "w-2", "worker", limit=0, retry_after=5, max_unavailable=2).to_dict()
    assert none["maxUnavailable"] == 2 and none["slots"] == 0 and "use up all of its maxUnavailable 2" in none["reason"]
    plain = DrainAnswer(True, "w-1", "worker", limit=2, holders=["w-1"]).to_dict()  # other backends: one number
    assert (plain["maxUnavailable"], plain["slots"], plain["free"]) == (2, 2, 1)


MCD = "machineconfiguration.openshift.io/"
OURS = "node-config-server.openshift.io/"
POOL = {"metadata": {"name": "infra"}, "spec": {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/infra": ""}}}}


def test_the_admins_delete_takes_back_what_a_counted_name_wrote_and_nothing_else():
    node = {"metadata": {"labels": {"node-role.kubernetes.io/infra": "", "node-role.kubernetes.io/worker": "",
                                    "kubernetes.io/hostname": "n"},
                         "annotations": {MCD + "currentConfig": "c", MCD + "state": "Done", MCD + "reason": "",
                                         MCD + "customPoolLabelsApplied": "", OURS + "drained-for": "c",
                                         OURS + "drain-started": "t", "other/keep": "1"}},
            "spec": {"unschedulable": True}}
    patch = undo_patch(node, counted=True, pivot_pool=POOL)
    assert patch["spec"] == {"unschedulable": None}
    assert patch["metadata"]["labels"] == {"node-role.kubernetes.io/infra": None}
    assert set(patch["metadata"]["annotations"]) == {MCD + "currentConfig", MCD + "state", MCD + "reason",
                                                      MCD + "customPoolLabelsApplied", OURS + "drained-for",
                                                      OURS + "drain-started"}
    # A name whose reports never counted wrote no MCD annotation or label: only our drain's marks go.
    assert set(undo_patch(node, counted=False, pivot_pool=POOL)["metadata"]["annotations"]) == {
        OURS + "drained-for", OURS + "drain-started"}
    # A cordon someone else made stays; a label the admin changed stays.
    other = {"metadata": {"labels": {"node-role.kubernetes.io/infra": "x"},
                          "annotations": {MCD + "customPoolLabelsApplied": ""}}, "spec": {"unschedulable": True}}
    assert undo_patch(other, counted=True, pivot_pool=POOL) == {
        "metadata": {"annotations": {MCD + "customPoolLabelsApplied": None}}}
    assert undo_patch({"metadata": {}}, counted=True, pivot_pool=None) == {}


class Truth:
    def __init__(self, nodes):
        self.nodes = nodes

    def ready(self):
        return True

    def node(self, name):
        return self.nodes.get(name)


def test_the_pending_list_says_whether_a_node_of_the_name_exists_and_who_manages_it():
    truth = Truth({"plain": {"metadata": {}},
                   "mcd": {"metadata": {"annotations": {MCD + "state": "Done", MCD + "currentConfig": "c1"}}}})
    assert node_object(truth, "none") == {"exists": False}
    assert node_object(truth, "plain") == {"exists": True}
    managed = node_object(truth, "mcd")
    assert managed["exists"] and "state Done" in managed["managed"] and "c1" in managed["managed"]
    assert node_object(None, "x") == {"exists": False}
    assert Registration("n", 1.0, 2.0, "kubelet").binds_node and Registration("n", 1.0, 2.0, "admin").binds_node
    assert not Registration("n", 1.0, 2.0, "rule").binds_node and not Registration("n", 1.0).binds_node


def test_an_early_refusal_reads_what_is_left_of_the_body(monkeypatch):
    small = io.BytesIO(b'{"pool": "worker"}')
    finish_body({"wsgi.input": small, "CONTENT_LENGTH": "18", "PATH_INFO": "/api/v1/nodes/n/register"})
    assert small.read() == b""  # read whole: the connection is kept
    closed = []

    class Sock:
        def close_after_response(self):
            closed.append(True)

    big = io.BytesIO(b" " * (MAX_REPORT + 10))
    finish_body({"wsgi.input": big, "CONTENT_LENGTH": str(MAX_REPORT + 10), "gunicorn.socket": Sock(),
                 "PATH_INFO": "/api/v1/nodes/n/report"})
    assert closed == [True] and big.read() == b""  # past its limit: dropped, then a lingering close
    finish_body({"PATH_INFO": "/healthz"})  # no body: nothing to do


def test_the_kubelets_certificate_file_is_presented_only_whole_and_valid(tmp_path):
    ca = ClientCA(str(tmp_path / "ca"))
    root = Root(str(tmp_path / "root"))
    path = "/var/lib/kubelet/pki/kubelet-client-current.pem"
    cert = KubeletCert(root, path)
    assert cert.current() is None  # no file yet: the kubelet has no certificate
    ca.kubelet("n1", root.path(path))
    first = cert.current()
    assert first is not None and first.path == root.path(path)
    ca.kubelet("n1", root.path(path))  # rotated: another certificate
    assert cert.current().fingerprint != first.fingerprint
    ca.kubelet("n1", root.path(path), expired=True)
    assert cert.current() is None
    with open(root.path(path), "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n")
    assert cert.current() is None
    other = ClientCA(str(tmp_path / "other")).kubelet("n1")
    mixed = open(ca.kubelet("n1")).read().split("-----BEGIN PRIVATE KEY-----")[0] + \
        "-----BEGIN PRIVATE KEY-----" + open(other).read().split("-----BEGIN PRIVATE KEY-----")[1]
    with open(root.path(path), "w") as f:
        f.write(mixed)  # a key that is not the certificate's
    assert cert.current() is None
    os.unlink(root.path(path))
    assert cert.current() is None


class Waiting(KubeletIdentity):
    def __init__(self, root, path):
        self.root, self.state_dir, self.base_url, self.node = root, "/var/lib/node-agent", "https://s:1", "n1"
        self.sent = []
        self._kubelet_setup(path, None)
        self._probe = lambda: True
        self._mount = lambda p: None

    def send(self, body):
        self.sent.append(body)
        self._delivered(body)
        return True


def test_the_day2_wait_sends_the_last_report_again_once_the_certificate_appears(tmp_path):
    ca = ClientCA(str(tmp_path / "ca"))
    root = Root(str(tmp_path / "root"))
    path = "/var/lib/kubelet/pki/kubelet-client-current.pem"
    agent = Waiting(root, path)
    agent.send({"pool": "worker", "state": "Done"})  # first boot's report, without a certificate
    slept = []

    def idle(seconds):
        slept.append(seconds)
        if len(slept) == 3:
            ca.kubelet("n1", root.path(path))  # the kubelet's CSR is approved meanwhile

    agent.wait(60.0, idle)
    assert slept == [2.0, 2.0, 2.0]  # looked every 2 s, and ended the wait when it appeared
    assert agent.sent[-1] == {"pool": "worker", "state": "Done"} and len(agent.sent) == 2
    assert agent.upgrade_identity() is None  # sent with this certificate already
    slept.clear()
    agent.wait(60.0, idle)
    assert slept == [60.0]  # presenting it now: the loop's own wait


def test_a_fake_clock_is_not_needed_to_leave_the_wait(tmp_path):
    agent = Waiting(Root(str(tmp_path)), "")  # no certificate configured
    started = time.monotonic()
    agent.wait(3600.0, lambda s: None)
    assert time.monotonic() - started < 1
