"""A node proves its name with its kubelet's client certificate (issue 45), against the real
server process (gunicorn, the gevent worker, TLS with ``--kubelet-client-ca``) and real X.509
client certificates from a throw-away cluster client CA (tests/helpers/certs.py ClientCA).

The bootstrap token is in every node's pointer config: its holder may register any name, which
then waits (pending). A certificate the cluster's CA signed for ``system:node:<name>`` in
``system:nodes`` is the cluster's own proof of the name: registering with it is approved at once
(approvedBy kubelet) past every cap and the rate limit and replaces a squatter's registration;
a pending node's next request with it proves it; a certificate for another node is a 403 naming
both; any other certificate proves nothing. docs/security.md "Identity".
"""

import os
import shutil
import socket
import ssl
import subprocess
import sys

import pytest
import requests

from tests.helpers.certs import ClientCA, make_tls
from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

BOOT, ADMIN = "kubelet-id-boot", "kubelet-id-admin"
WORKER = {"node-role.kubernetes.io/worker": ""}


def start(top, *extra, client_ca=None, admin=True, workers=1, **kw):
    state = top / "state"
    if not state.exists():
        shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    args = list(extra)
    if admin:
        (top / "admin-token").write_text(ADMIN + "\n")
        args += ["--admin-token-file", str(top / "admin-token")]
    if client_ca is not None:
        args += ["--kubelet-client-ca", client_ca.ca_cert]
    kubelet = (lambda node: client_ca.kubelet(node, str(top / "kubelet" / f"{node}.pem"))) if client_ca else None
    return ServerProcess(str(state), tls=make_tls(str(top / "tls")), token=BOOT, workers=workers,
                         extra_args=args, auto_approve=None, kubelet=kubelet, **kw)


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return ClientCA(str(tmp_path_factory.mktemp("client-ca")))


@pytest.fixture(scope="module")
def server(tmp_path_factory, ca):
    with start(tmp_path_factory.mktemp("kubelet-id"), client_ca=ca) as srv:
        yield srv


def as_admin(srv):
    s = srv.session(token=False)
    s.headers["Authorization"] = f"Bearer {ADMIN}"
    return s


def registration(srv, node):
    return as_admin(srv).get(srv.url(f"/api/v1/nodes/{node}/registration")).json()


def report(session, srv, node, **body):
    return session.post(srv.url(f"/api/v1/nodes/{node}/report"), json=dict({"pool": "worker", "state": "Done",
                                                                            "labels": WORKER}, **body))


def machines(srv, pool="worker"):
    return srv.session().get(srv.url(f"/api/v1/pools/{pool}")).json()["status"]["machineCount"]


def register(srv, node, cert=None, forwarded=None):
    s = srv.session()
    s.cert = cert
    if forwarded:
        s.headers["X-Forwarded-For"] = forwarded
    return s.post(srv.url(f"/api/v1/nodes/{node}/register"))


def test_a_kubelet_certificate_proves_the_name_at_once_past_the_caps_and_the_rate_limit(tmp_path, ca):
    with start(tmp_path, "--max-pending", "1", "--register-rate", "0.001", "--register-burst", "2",
               client_ca=ca) as srv:
        assert register(srv, "ghost-0").json()["approval"] == "Pending"
        assert register(srv, "ghost-1").status_code == 429  # --max-pending
        assert register(srv, "ghost-2").status_code == 429  # the rate limit: its burst is spent
        r = register(srv, "worker-0", cert=ca.kubelet("worker-0"))
        assert r.status_code == 201, r.text
        assert r.json()["approval"] == "Approved" and r.json()["approvedBy"] == "kubelet"
        reg = registration(srv, "worker-0")
        assert (reg["state"], reg["approvedBy"], reg["address"]) == ("Approved", "kubelet", "127.0.0.1")
        own = srv.session(token=False)
        own.headers["Authorization"] = f"Bearer {r.json()['credential']}"
        assert report(own, srv, "worker-0").json().get("counted", True) is True
        assert machines(srv) == 1
        assert "verified against" in srv.log_text() and "proves its name at once" in srv.log_text()


def test_a_pending_name_is_proven_by_its_next_request_with_its_kubelet_certificate(server, ca):
    plain = server.node_session("late-0", kubelet=False)
    assert registration(server, "late-0")["state"] == "Pending"
    out = report(plain, server, "late-0").json()
    assert out["approval"] == "Pending" and out["counted"] is False
    before = machines(server)
    proving = server.node_session("late-0", kubelet=False)  # a new connection: the certificate is in its handshake
    proving.cert = ca.kubelet("late-0")  # the kubelet got its certificate: the next request proves the name
    got = proving.get(server.url("/config/worker"))
    assert got.status_code == 200
    reg = registration(server, "late-0")
    assert (reg["state"], reg["approvedBy"]) == ("Approved", "kubelet")
    assert machines(server) == before + 1  # its kept report counts at once
    assert "late-0 proved its name with its kubelet's client certificate" in server.log_text()


def test_a_certificate_naming_another_node_is_a_403_naming_both(server, ca):
    s = server.node_session("both-a", kubelet=False)
    s.cert = ca.kubelet("both-b")
    for r in (report(s, server, "both-a"),
              s.post(server.url("/api/v1/nodes/both-a/drain"), json={"pool": "worker", "config": "c"}),
              s.get(server.url("/config/worker"))):
        assert r.status_code == 403, r.text
        message = r.json()["error"]["message"]
        assert "node both-b's kubelet" in message and "acts for node both-a" in message
    r = register(server, "both-c", cert=ca.kubelet("both-d"))
    assert r.status_code == 403 and "both-d" in r.text and "both-c" in r.text
    assert registration(server, "both-a")["state"] == "Pending"  # proven by nothing


def test_the_kubelet_replaces_a_squatters_registration_and_what_it_kept(server, ca):
    squatter = server.node_session("squat-0", kubelet=False)
    assert report(squatter, server, "squat-0", state="Degraded", reason="squatted").status_code == 200
    real = register(server, "squat-0", cert=ca.kubelet("squat-0"))
    assert real.status_code == 201 and real.json()["approvedBy"] == "kubelet", real.text
    assert report(squatter, server, "squat-0").status_code == 401  # the squatter's credential is gone
    assert server.session().get(server.url("/api/v1/nodes/squat-0")).status_code == 404  # and its report
    assert "squat-0: its kubelet's certificate proves the name" in server.log_text()
    # A name the admin approved is not taken over by a certificate: the admin decides.
    register(server, "adm-0")
    assert as_admin(server).post(server.url("/api/v1/nodes/adm-0/approve")).status_code == 200
    r = register(server, "adm-0", cert=ca.kubelet("adm-0"))
    assert r.status_code == 403 and "approved by the admin" in r.text


def test_certificates_the_cluster_ca_did_not_sign_or_that_are_no_kubelets_prove_nothing(server, ca, tmp_path):
    other = ClientCA(str(tmp_path / "other"), name="another CA")
    for cert in (other.kubelet("fake-0"), ca.kubelet("fake-0", expired=True), ca.kubelet("fake-0", server_only=True)):
        with pytest.raises(requests.exceptions.ConnectionError):  # the handshake fails (SSLError, reset)
            register(server, "fake-0", cert=cert)
    for cn, orgs in (("alice", ["system:nodes"]), ("system:node:fake-0", ["system:masters"])):
        r = register(server, "fake-0" if cn != "alice" else "fake-1", cert=ca.issue(cn, orgs))
        assert r.status_code == 201 and r.json()["approval"] == "Pending", r.text
    # Without a certificate a client still connects (CERT_OPTIONAL): new nodes, stock Ignition.
    assert server.session().get(server.url("/config/worker")).status_code == 200


def test_the_429_drain_answer_names_max_unavailable_and_the_slots_apart(server):
    sessions = {}
    view = server.session().get(server.url("/api/v1/pools/worker")).json()
    c = view["spec"]["configuration"]["name"]  # what the nodes run: a lease is only for a node's desired config
    for n in ("slot-0", "slot-1"):
        sessions[n] = server.node_session(n)
        assert report(sessions[n], server, n, currentConfig=c, desiredConfig=c).status_code == 200
    limit = server.session().get(server.url("/api/v1/pools/worker")).json()["status"]["drain"]["maxUnavailable"]
    for i in range(limit):  # whatever other tests of the module left: fill the pool's slots
        sessions["slot-0"].post(server.url("/api/v1/nodes/slot-0/drain"), json={"pool": "worker", "config": c})
        server.node_session(f"slot-x{i}").post(server.url(f"/api/v1/nodes/slot-x{i}/drain"),
                                               json={"pool": "worker", "config": c})
    r = sessions["slot-1"].post(server.url("/api/v1/nodes/slot-1/drain"), json={"pool": "worker", "config": c})
    assert r.status_code == 429, r.text
    out = r.json()
    assert out["maxUnavailable"] == limit and out["slots"] == limit and out["free"] == 0
    assert f"all {limit} drain slot(s) of pool worker are held" in out["reason"]
    assert f"maxUnavailable is {limit}" in out["reason"]


def test_a_flood_from_one_address_leaves_room_for_others_and_the_list_says_when_and_whence(tmp_path, ca):
    with start(tmp_path, "--max-pending-per-address", "2", client_ca=ca) as srv:
        for i in range(2):
            assert register(srv, f"flood-{i}", forwarded="192.0.2.7").status_code == 201
        full = register(srv, "flood-2", forwarded="192.0.2.7")
        assert full.status_code == 429 and "from 192.0.2.7" in full.text and "--max-pending-per-address" in full.text
        assert register(srv, "real-0", forwarded="198.51.100.3").status_code == 201  # another address: room
        items = {i["node"]: i for i in as_admin(srv).get(srv.url("/api/v1/nodes?approval=pending")).json()["items"]}
        assert items["real-0"]["address"] == "198.51.100.3" and items["real-0"]["registered"].endswith("Z")
        assert items["flood-1"]["address"] == "192.0.2.7"
        (tmp_path / "admin.tok").write_text(ADMIN + "\n")
        listed = subprocess.run([sys.executable, "-m", "agent.server.cli", "approve", "node", "--pending", "--server",
                                 srv.base_url, "--ca", srv.tls.ca_cert, "--token-file",
                                 str(tmp_path / "admin.tok")], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert listed.returncode == 0, listed.stderr
        line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("real-0"))
        assert "198.51.100.3" in line


def _raw_post(srv, path, body, headers=""):
    """A POST over TLS sent whole before reading: what the client sees while the server answers."""
    host, port = "127.0.0.1", srv.port
    ctx = ssl.create_default_context(cafile=srv.tls.ca_cert)
    with socket.create_connection((host, port), timeout=30) as raw, ctx.wrap_socket(raw, server_hostname=host) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{headers}"
                  f"Content-Length: {len(body)}\r\n\r\n".encode())
        try:
            s.sendall(body)
        except OSError:
            pass  # the server stopped reading: what it answered is what counts
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer.decode("latin-1")


def test_an_unauthenticated_oversized_body_gets_its_401_and_a_lingering_close_as_a_413(server):
    answer = _raw_post(server, "/api/v1/nodes/n1/report", b" " * (3 << 20))
    assert answer.startswith("HTTP/1.1 401"), answer[:300]
    assert "connection: close" in answer.lower()


def test_a_server_that_can_approve_nobody_says_so_at_start_and_in_healthz(tmp_path):
    with start(tmp_path, "--worker-class", "gthread", admin=False) as srv:
        log = srv.log_text()
        assert "nobody can be approved" in log
        assert "--worker-class gthread: no kubelet client certificate can prove a node's name" in log
        warnings = requests.get(srv.url("/healthz"), verify=srv.verify, timeout=10).json()["warnings"]
        assert any("nobody can be approved" in w for w in warnings), warnings


def test_a_rule_approved_name_gets_no_master_drain_slot_target_or_proof(tmp_path):
    with start(tmp_path, "--auto-approve", "auto-[0-9]+") as srv:
        ghost = srv.node_session("auto-1")
        assert registration(srv, "auto-1")["approvedBy"] == "rule"
        r = ghost.post(srv.url("/api/v1/nodes/auto-1/drain"), json={"pool": "master", "config": "c"})
        assert r.status_code == 409 and "only a node the admin approved" in r.text  # not even before it reported
        old = srv.session().get(srv.url("/api/v1/pools/master")).json()["spec"]["configuration"]["name"]
        master = srv.node_session("master-0")  # the real master (the admin approves it), Done on the current config
        assert as_admin(srv).post(srv.url("/api/v1/nodes/master-0/approve")).status_code == 200
        assert report(master, srv, "master-0", pool="master", currentConfig=old,
                      labels={"node-role.kubernetes.io/master": ""}).status_code == 200
        mc = tmp_path / "state" / "machineconfigs" / "99-master-new.yaml"
        mc.write_text("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
                      "  name: 99-master-new\n  labels: {machineconfiguration.openshift.io/role: master}\n"
                      "spec:\n  config:\n    ignition: {version: 3.4.0}\n    storage:\n      files:\n"
                      "      - {path: /etc/new-master-file, contents: {source: 'data:,new'}}\n")
        srv.wait_state_read()
        new = wait_for(lambda: (lambda t: t if t != old else None)(
            srv.session().get(srv.url("/api/v1/pools/master")).json()["spec"]["configuration"]["name"]),
            "the new master rendering", 15)
        got = ghost.get(srv.url("/config/master"))  # as itself: what a new node gets, never the unproven target
        assert got.status_code == 200 and got.headers["X-Served-Config"] == old
        out = report(ghost, srv, "auto-1", pool="master", currentConfig=new,
                     labels={"node-role.kubernetes.io/master": ""}).json()
        assert out["pool"] == "" and "admin approved" in out["degradedReason"]
        view = srv.session().get(srv.url("/api/v1/pools/master")).json()["status"]
        assert view["served"]["config"] == old and view["machineCount"] == 1 and view["drain"]["holders"] == []


def _agent(*args, **kw):
    return [sys.executable, "-m", "agent.cli", *args], dict(
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env=dict(os.environ, NODE_AGENT_JOURNAL_SOCKET="/nonexistent/journal"), **kw)


def _first_booted(server, tmp_path, name):
    from tests.helpers.noderoot import make_node_root

    root = make_node_root(str(tmp_path / name), server.base_url, "worker", ca_pem=server.tls.ca_pem(), token=BOOT,
                          node_name=name, fetch_budget=10)
    cmd, kw = _agent("firstboot", "--root", root)
    r = subprocess.run(cmd, **kw)
    assert r.returncode == 0, r.stderr
    assert registration(server, name)["state"] == "Pending"  # the bootstrap token alone: it waits
    return root


def test_the_day2_loop_presents_the_kubelets_certificate_within_seconds_of_its_appearance(server, ca, tmp_path):
    """First boot ends before the kubelet starts: the node registers with the bootstrap token and
    waits. The day-2 loop (its interval 60 s here) looks for the kubelet's certificate every few
    seconds; once the kubelet has one, the node's last report goes again with it and the server
    proves the name at once."""
    root = _first_booted(server, tmp_path, "agent-k0")
    cmd, kw = _agent("update", "--root", root, "--interval", "60")
    kw.pop("capture_output"), kw.pop("timeout")
    log = open(tmp_path / "update.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **{k: v for k, v in kw.items() if k != "text"})
    try:
        # its first pass is done once it fetched as itself (the server remembers what it served it)
        wait_for(lambda: registration(server, "agent-k0").get("served"), "the loop's first pass", 30)
        pem = os.path.join(root, "var/lib/kubelet/pki/kubelet-client-current.pem")
        ca.kubelet("agent-k0", pem)  # the kubelet's CSR was approved: its certificate and key, one PEM
        wait_for(lambda: registration(server, "agent-k0").get("approvedBy") == "kubelet",
                 "the name proven by the certificate, long before the 60 s interval", 15)
        view = as_admin(server).get(server.url("/api/v1/nodes/agent-k0")).json()
        assert not (view["report"].get("_server") or {}).get("pending"), view["report"]
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    said = (tmp_path / "update.log").read_text()
    assert "presenting the kubelet's client certificate" in said and "sending node agent-k0's last report" in said


def test_a_certificate_the_server_refuses_is_dropped_and_the_request_made_without_it(server, ca, tmp_path):
    root = _first_booted(server, tmp_path, "agent-k1")
    other = ClientCA(str(tmp_path / "other"), name="not the cluster's CA")
    other.kubelet("agent-k1", os.path.join(root, "var/lib/kubelet/pki/kubelet-client-current.pem"))
    cmd, kw = _agent("update", "--once", "--root", root)
    r = subprocess.run(cmd, **kw)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("refused the TLS connection with the kubelet's client certificate") == 1, r.stderr
    assert registration(server, "agent-k1")["state"] == "Pending"  # nothing proven, the node still served
