"""A misspelled key cannot reboot a pool unseen (issue 49): a MachineConfig with ``storge:`` for
``storage:`` is admitted (as the MCO admits it) and renders a config without the file it held;
the server says so everywhere an admin looks (its log, /healthz, /api/v1/cluster and ``status``,
``describe pool``, the pool's RenderWarnings condition) and names what the nodes would do (the
file removed, the reboot). With the pool annotation ``require-ack`` that rendering waits for the
admin (RenderHeld, AwaitingAcknowledgement; no node is targeted) until ``ack pool``."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root, not_layered, reboot
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

REPO = paths.REPO
TOKEN, ADMIN = "review-token", "review-admin"
MOTD = ("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 60-motd\n"
        "  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n  config:\n    ignition: {version: 3.4.0}\n"
        "    STORAGE:\n      files:\n      - {path: /etc/motd, mode: 420, contents: {source: 'data:,hello'}}\n")
WARNING = "MachineConfig 60-motd: $.spec.config.storge: unused key storge"


def agent(*args):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def ncs(srv, tmp_path, *args):
    client = tmp_path / "client.yaml"
    client.write_text(f"server: {srv.base_url}\ncertificateAuthority: {srv.tls.ca_cert}\n"
                      f"tokenFile: {tmp_path / 'admin-token'}\n")
    return subprocess.run([sys.executable, "-m", "agent.server.cli", *args, "--config", str(client)],
                          capture_output=True, text=True, cwd=REPO, timeout=60, env=dict(os.environ, COLUMNS="200"))


def pool(srv):
    return srv.session().get(srv.url("/api/v1/pools/worker")).json()


def condition(view, kind):
    return next(c for c in view["status"]["conditions"] if c["type"] == kind)


def cluster_with(tmp_path, annotations=""):
    """A server on examples/state with 60-motd (/etc/motd), worker w0 Done on it."""
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    not_layered(str(state))
    worker = state / "machineconfigpools" / "worker.yaml"
    worker.write_text(worker.read_text().replace("  name: worker\n", f"  name: worker\n{annotations}"))
    (state / "machineconfigs" / "60-motd.yaml").write_text(MOTD.replace("STORAGE", "storage"))
    (tmp_path / "admin-token").write_text(ADMIN + "\n")
    srv = ServerProcess(str(state), tls=make_tls(str(tmp_path / "tls")), token=TOKEN,
                        extra_args=["--admin-token-file", str(tmp_path / "admin-token")])
    srv.start()
    root = make_node_root(str(tmp_path / "w0"), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(), token=TOKEN,
                          node_name="w0")
    assert agent("firstboot", "--root", root).returncode == 0
    reboot(root)
    assert agent("update", "--once", "--root", root).returncode == 0
    assert open(os.path.join(root, "etc/motd")).read() == "hello"
    return srv, state, root, pool(srv)["spec"]["configuration"]["name"]


@pytest.fixture
def plain(tmp_path):
    srv, state, root, first = cluster_with(tmp_path)
    yield srv, state, root, first
    srv.stop()


@pytest.fixture
def held(tmp_path):
    srv, state, root, first = cluster_with(
        tmp_path, "  annotations:\n    node-config-server.openshift.io/require-ack: warnings,file-removal,reboot\n")
    yield srv, state, root, first
    srv.stop()


def typo(state):
    (state / "machineconfigs" / "60-motd.yaml").write_text(MOTD.replace("STORAGE", "storge"))


def test_a_misspelled_key_is_named_by_the_server_with_the_file_its_rendering_removes(plain, tmp_path):
    srv, state, root, first = plain
    typo(state)
    srv.wait_state_read()
    view = wait_for(lambda: (lambda v: v["spec"]["configuration"]["name"] != first and v)(pool(srv)),
                    "the pool's new target (no hold without require-ack)", 30)
    assert view["status"]["renderWarnings"] == [WARNING]
    assert condition(view, "RenderWarnings")["status"] == "True" and WARNING in condition(view, "RenderWarnings")["message"]
    assert view["status"]["pendingDisruption"]["removes"] == ["/etc/motd"]
    health = srv.session().get(srv.url("/healthz")).json()
    assert WARNING in health["warnings"] and health["state"]["warnings"][0]["object"] == "MachineConfig/60-motd"
    assert WARNING in srv.session().get(srv.url("/api/v1/cluster")).json()["warnings"]
    # Said once, by the worker that claimed the saying (agent/server/http/saidonce.py), which may
    # still be writing it while the other worker already serves the new state.
    wait_for(lambda: "state: $.spec.config.storge: warning: unused key storge" in srv.log_text(),
             "the warning in the server's log", 60)
    described = ncs(srv, tmp_path, "describe", "pool", "worker")
    assert described.returncode == 0, described.stderr
    assert "  Removes:           /etc/motd" in described.stdout
    assert f"Render warnings:     1 (condition RenderWarnings)\n  {WARNING}" in described.stdout


def test_with_require_ack_the_rendering_waits_for_the_admin_then_ack_pool_makes_it_the_target(held, tmp_path):
    srv, state, root, first = held
    typo(state)
    srv.wait_state_read()
    view = wait_for(lambda: (lambda v: v["status"].get("review") and v)(pool(srv)), "the rendering held for review", 30)
    assert view["spec"]["configuration"]["name"] == first  # the target stays
    review = view["status"]["review"]
    assert (review["from"], review["removes"], review["reboot"], review["warnings"]) == \
        (first, ["/etc/motd"], True, [WARNING])
    held_cond = condition(view, "RenderHeld")
    assert (held_cond["status"], held_cond["reason"]) == ("True", "AwaitingAcknowledgement")
    assert "removes /etc/motd" in held_cond["message"] and "ack pool worker" in held_cond["message"]
    # The node is not targeted: its pass changes nothing.
    assert agent("update", "--once", "--root", root).returncode == 0
    assert open(os.path.join(root, "etc/motd")).read() == "hello"
    described = ncs(srv, tmp_path, "describe", "pool", "worker").stdout
    assert f"Held for review:     {review['config']} from {first}: removes /etc/motd; reboot, drain; 1 validator warning(s)" \
        in described
    other = ncs(srv, tmp_path, "ack", "pool", "worker", "--rendered", "rendered-worker-0")
    assert other.returncode == 1 and f"{review['config']} does" in other.stderr
    acked = ncs(srv, tmp_path, "ack", "pool", "worker")
    assert acked.returncode == 0, acked.stderr
    assert wait_for(lambda: pool(srv)["spec"]["configuration"]["name"] == review["config"],
                    "the acknowledged rendering as the target", 30)
    assert condition(pool(srv), "RenderHeld")["status"] == "False"
    assert agent("update", "--once", "--root", root).returncode == 0
    assert not os.path.exists(os.path.join(root, "etc/motd"))
    again = ncs(srv, tmp_path, "ack", "pool", "worker")
    assert again.returncode == 1 and "no rendering of pool worker waits" in again.stderr
