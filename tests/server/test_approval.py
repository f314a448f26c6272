"""Approval of registered nodes (issue 28), against the real server process (the CLI, gunicorn).

The bootstrap token is in every node's pointer config. Before approval existed, its holder could
register any number of names and steer rollouts with them: one ghost reporting Done on the
unproven target had it served to every new node; a ghost with master labels took the master
pool's only drain lease; 21 ghosts raised the worker pool's maxUnavailable (25%) from 1 to 5.
On any server with a token a new name now counts for nothing until approved (by the admin,
``node-config-server approve node NAME``, or by ``--auto-approve REGEX``, an explicit choice
serve logs at start), a Done proves only a config served to that node, only an admin-approved
node joins the master pool, at most ``--max-pending`` names wait and ``--max-unvetted`` exist
that no admin approved, and registrations are rate-limited. docs/security.md "Identity".
These servers run with serve's own approval default (``auto_approve=None``), not the harness's.
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

BOOT, ADMIN = "approval-boot", "approval-admin"
MASTER = {"node-role.kubernetes.io/master": ""}
WORKER = {"node-role.kubernetes.io/worker": ""}


def start(tmp_path, *extra, admin=True):
    state = tmp_path / "state"
    if not state.exists():
        shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    args = list(extra)
    if admin:
        (tmp_path / "admin-token").write_text(ADMIN + "\n")
        args += ["--admin-token-file", str(tmp_path / "admin-token")]
    return ServerProcess(str(state), token=BOOT, extra_args=args, auto_approve=None)


def as_admin(srv):
    s = srv.session(token=False)
    s.headers["Authorization"] = f"Bearer {ADMIN}"
    return s


def register(srv, node, approve=False):
    r = srv.session().post(srv.url(f"/api/v1/nodes/{node}/register"))
    assert r.status_code == 201, r.text
    srv.credentials[node] = r.json()["credential"]
    if approve:
        a = as_admin(srv).post(srv.url(f"/api/v1/nodes/{node}/approve"))
        assert a.status_code == 200, a.text
    return r.json()


def report(srv, node, **body):
    r = srv.node_session(node).post(srv.url(f"/api/v1/nodes/{node}/report"), json=dict({"pool": "worker"}, **body))
    assert r.status_code == 200, r.text
    return r.json()


def pool(srv, name):
    r = srv.session().get(srv.url(f"/api/v1/pools/{name}"))  # the bootstrap token reads the API
    assert r.status_code == 200, r.text
    return r.json()


def drain(srv, node, pool_name, config):
    """A lease for ``config``, the node's desired config (a node is drained only for that)."""
    return srv.node_session(node).post(srv.url(f"/api/v1/nodes/{node}/drain"), json={"pool": pool_name, "config": config})


def new_worker_target(srv, state):
    old = pool(srv, "worker")["spec"]["configuration"]["name"]
    mc = state / "machineconfigs" / "99-worker-new.yaml"
    mc.write_text("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
                  "  name: 99-worker-new\n  labels: {machineconfiguration.openshift.io/role: worker}\n"
                  "spec:\n  config:\n    ignition: {version: 3.4.0}\n    storage:\n      files:\n"
                  "      - {path: /etc/new-file, contents: {source: 'data:,new'}}\n")
    srv.wait_state_read()
    new = wait_for(lambda: (lambda name: name if name != old else None)(
        pool(srv, "worker")["spec"]["configuration"]["name"]), "the server picks up the new MachineConfig", 15)
    return old, new


def test_a_ghost_done_on_the_unproven_target_does_not_open_the_gate(tmp_path):
    with start(tmp_path) as srv:
        register(srv, "worker-0", approve=True)
        c0 = pool(srv, "worker")["spec"]["configuration"]["name"]
        report(srv, "worker-0", state="Done", currentConfig=c0, labels=WORKER)
        old, t1 = new_worker_target(srv, tmp_path / "state")
        assert old == c0 and pool(srv, "worker")["status"]["served"]["config"] == c0
        # A ghost (the bootstrap token only) reports Done on the unproven target: pending, nothing.
        assert register(srv, "ghost-1")["approval"] == "Pending"
        out = report(srv, "ghost-1", state="Done", currentConfig=t1, desiredConfig=t1, labels=WORKER)
        assert out["approval"] == "Pending" and out["counted"] is False
        view = pool(srv, "worker")
        assert view["status"]["served"]["config"] == c0 and view["status"]["updatedMachineCount"] == 0
        assert view["status"]["machineCount"] == 1
        new = srv.session().get(srv.url("/config/worker"))  # what a new node gets
        assert new.status_code == 200 and new.headers["X-Served-Config"] == c0
        # Approved, a node still proves only a config the server served to it as itself.
        assert as_admin(srv).post(srv.url("/api/v1/nodes/ghost-1/approve")).status_code == 200
        view = pool(srv, "worker")
        assert view["status"]["served"]["config"] == c0 and view["status"]["machineCount"] == 2
        out = report(srv, "ghost-1", state="Done", currentConfig=t1, labels=WORKER)
        assert out["proof"] is False and pool(srv, "worker")["status"]["served"]["config"] == c0
        # The real node fetches as itself (a member gets the target), runs it, reports Done: proof.
        got = srv.node_session("worker-0").get(srv.url("/config/worker"))
        assert got.status_code == 200 and got.headers["X-Served-Config"] == t1
        out = report(srv, "worker-0", state="Done", currentConfig=t1, labels=WORKER)
        assert "proof" not in out
        assert pool(srv, "worker")["status"]["served"]["config"] == t1
        # what it was served is noted once the answer went out (approval.py remember_served)
        reg = wait_for(lambda: (lambda r: r if t1 in r["served"] else None)(
            as_admin(srv).get(srv.url("/api/v1/nodes/worker-0/registration")).json()), "t1 noted as served to worker-0")
        assert reg["state"] == "Approved" and reg["approvedBy"] == "admin"


def test_a_ghost_with_master_labels_takes_no_master_drain_lease(tmp_path):
    with start(tmp_path, "--auto-approve", "auto-[0-9]+") as srv:
        register(srv, "master-0", approve=True)
        c0 = pool(srv, "master")["spec"]["configuration"]["name"]
        report(srv, "master-0", pool="master", state="Done", currentConfig=c0, labels=MASTER)
        assert pool(srv, "master")["status"]["machineCount"] == 1
        # A pending ghost claiming master: counted nowhere, no lease.
        register(srv, "ghost-m")
        report(srv, "ghost-m", pool="master", state="Working", labels=MASTER)
        refused = drain(srv, "ghost-m", "master", c0)
        assert refused.status_code == 403 and "waits for approval" in refused.text
        # A ghost the --auto-approve rule let in: still no master membership without the admin.
        assert register(srv, "auto-7")["approval"] == "Approved"
        out = report(srv, "auto-7", pool="master", state="Working", labels=MASTER)
        assert out["pool"] == "" and "admin approved" in out["degradedReason"]
        assert drain(srv, "auto-7", "master", c0).status_code == 409
        assert pool(srv, "master")["status"]["machineCount"] == 1
        assert pool(srv, "master")["status"]["drain"]["holders"] == []
        # The real master-0 gets the pool's only lease.
        granted = drain(srv, "master-0", "master", c0)
        assert granted.status_code == 200, granted.text
        # Labels the admin vouches for decide the pool, not the reported ones.
        register(srv, "infra-0")
        a = as_admin(srv).post(srv.url("/api/v1/nodes/infra-0/approve"),
                               json={"labels": {"node-role.kubernetes.io/infra": ""}})
        assert a.status_code == 200, a.text
        assert report(srv, "infra-0", pool="master", state="Done", labels=MASTER)["pool"] == "infra"


def test_pending_ghosts_do_not_raise_max_unavailable(tmp_path):
    with start(tmp_path, "--max-pending", "25", "--max-pending-per-address", "25") as srv:
        c0 = pool(srv, "worker")["spec"]["configuration"]["name"]
        for i in range(4):
            register(srv, f"worker-{i}", approve=True)
            report(srv, f"worker-{i}", state="Done", currentConfig=c0, labels=WORKER)
        assert pool(srv, "worker")["status"]["drain"]["maxUnavailable"] == 1
        for i in range(21):
            register(srv, f"ghost-{i}")
            report(srv, f"ghost-{i}", state="Done", labels=WORKER)
        view = pool(srv, "worker")
        assert view["status"]["machineCount"] == 4 and view["status"]["drain"]["maxUnavailable"] == 1
        assert drain(srv, "ghost-0", "worker", c0).status_code == 403
        assert drain(srv, "worker-0", "worker", c0).status_code == 200
        assert drain(srv, "worker-1", "worker", c0).status_code == 429  # maxUnavailable is still 1
        # Approving one counts its kept report at once.
        assert as_admin(srv).post(srv.url("/api/v1/nodes/ghost-0/approve")).json()["pool"] == "worker"
        assert pool(srv, "worker")["status"]["machineCount"] == 5


def test_max_pending_and_the_registration_rate_limit(tmp_path):
    with start(tmp_path, "--max-pending", "3") as srv:
        for i in range(3):
            register(srv, f"ghost-{i}")
        full = srv.session().post(srv.url("/api/v1/nodes/ghost-3/register"))
        assert full.status_code == 429 and "--max-pending" in full.text and full.headers["Retry-After"]
        # The admin may still register (approved at once); approving one frees a place.
        assert as_admin(srv).post(srv.url("/api/v1/nodes/admin-made/register")).json()["approval"] == "Approved"
        assert as_admin(srv).post(srv.url("/api/v1/nodes/ghost-0/approve")).status_code == 200
        register(srv, "ghost-3")
        listed = as_admin(srv).get(srv.url("/api/v1/nodes?approval=pending")).json()
        assert [i["node"] for i in listed["items"]] == ["ghost-1", "ghost-2", "ghost-3"] and listed["pending"] == 3
    # 2,000 names in 4.5 s before: now a token bucket per server process (two workers here).
    with start(tmp_path / "rate", "--register-rate", "0.01", "--register-burst", "3", admin=False) as srv:
        codes = []
        for i in range(10):
            r = srv.session().post(srv.url(f"/api/v1/nodes/n-{i}/register"))
            codes.append(r.status_code)
            if r.status_code == 429:
                assert int(r.headers["Retry-After"]) >= 1 and "too many registrations" in r.text
        assert set(codes) == {201, 429} and 3 <= codes.count(201) <= 6, codes


def test_approve_command(tmp_path):
    tokens = {}
    for who, secret in (("boot", BOOT), ("admin", ADMIN)):
        tokens[who] = tmp_path / f"{who}-token"
        tokens[who].write_text(secret + "\n")
    with start(tmp_path) as srv:
        register(srv, "node-x")
        report(srv, "node-x", state="Done", labels=WORKER)

        def ncs(*args, who="admin"):
            return subprocess.run([sys.executable, "-m", "agent.server.cli", "approve", "node", *args, "--server",
                                   srv.base_url, "--token-file", str(tokens[who])],
                                  capture_output=True, text=True, timeout=60, cwd=REPO)

        listed = ncs("--pending")
        assert listed.returncode == 0, listed.stderr
        head, row = listed.stdout.splitlines()
        assert head.split() == ["NAME", "REGISTERED", "ADDRESS", "NODE"]
        assert row.split()[0] == "node-x" and row.split()[2] == "127.0.0.1" and row.split()[3] == "-"
        refused = ncs("node-x", who="boot")
        assert refused.returncode == 77 and "admin token" in refused.stderr
        ok = ncs("node-x")
        assert ok.returncode == 0 and "node node-x approved; it counts in pool worker" in ok.stdout, ok.stderr
        assert pool(srv, "worker")["status"]["machineCount"] == 1
        assert ncs("never-was").returncode == 1
        bad = ncs("node-x", "--label", "nolabel")
        assert bad.returncode == 2 and "NAME=VALUE" in bad.stderr


def test_without_an_admin_token_a_new_name_is_pending_and_every_answer_says_how_to_approve(tmp_path):
    with start(tmp_path, admin=False) as srv:
        out = register(srv, "ghost-0")
        assert out["approval"] == "Pending"
        assert "--admin-token-file" in out["note"] and "--auto-approve" in out["note"]
        answer = report(srv, "ghost-0", state="Done", labels=WORKER)
        assert answer["counted"] is False and "--admin-token-file" in answer["note"]
        assert pool(srv, "worker")["status"]["machineCount"] == 0
        refused = drain(srv, "ghost-0", "worker", "c")
        assert refused.status_code == 403 and "--auto-approve" in refused.text
        assert "approval: a newly registered name counts for nothing until approved" in srv.log_text()


def test_auto_approve_every_name_is_an_explicit_choice_serve_logs_once(tmp_path):
    with start(tmp_path, "--auto-approve", ".*", admin=False) as srv:
        assert register(srv, "plain-0")["approval"] == "Approved"
        report(srv, "plain-0", state="Done", labels=WORKER)
        assert pool(srv, "worker")["status"]["machineCount"] == 1
        assert srv.log_text().count("approval: --auto-approve '.*' approves every newly registered name") == 1


def test_max_unvetted_caps_rule_approved_names_with_a_429_naming_the_cap(tmp_path):
    with start(tmp_path, "--auto-approve", ".*", "--max-unvetted", "2") as srv:
        register(srv, "auto-0")
        register(srv, "auto-1")
        full = srv.session().post(srv.url("/api/v1/nodes/auto-2/register"))
        assert full.status_code == 429 and "--max-unvetted" in full.text and full.headers["Retry-After"]
        assert as_admin(srv).post(srv.url("/api/v1/nodes/auto-0/approve")).status_code == 200  # now vetted
        register(srv, "auto-2")


@pytest.mark.parametrize("flags, words", [
    (["--auto-approve", "("], "not a regular expression"), (["--max-pending", "-1"], "--max-pending"),
    (["--register-rate", "0"], "--register-rate"), (["--max-unvetted", "-1"], "--max-unvetted")])
def test_serve_refuses_bad_approval_flags(tmp_path, flags, words):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    (tmp_path / "admin").write_text(ADMIN)
    r = subprocess.run([sys.executable, "-m", "agent.server.cli", "serve", "--state", str(state),
                        "--admin-token-file", str(tmp_path / "admin"), *flags], capture_output=True, text=True,
                       timeout=60, cwd=REPO)
    assert r.returncode == 2 and words in r.stderr, r.stderr
