"""The agent side of per-node identity, against the real server (TLS, bootstrap + admin tokens):
first boot registers the node and keeps its credential 0600 under ``--root``; reports,
drain leases and day-2 member fetches carry it; a reinstalled machine reusing a registered name
is refused until the admin deletes the old node, and then registers again.
"""

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root
from tests.helpers.server_proc import REPO, ServerProcess
from tests.kube.test_identity import PULL_SECRET

TOKEN, ADMIN = "agent-identity-boot", "agent-identity-admin"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("identity-agent")
    state = top / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    (state / "machineconfigs" / "99-worker-pull-secret.yaml").write_text(PULL_SECRET)
    admin = top / "admin-token"
    admin.write_text(ADMIN + "\n")
    with ServerProcess(str(state), tls=make_tls(str(top / "tls")), token=TOKEN,
                       extra_args=["--admin-token-file", str(admin)]) as srv:
        yield srv


def firstboot(server, tmp_path, name, dirname=None):
    root = make_node_root(str(tmp_path / (dirname or name)), server.base_url, "worker", ca_pem=server.tls.ca_pem(),
                          token=TOKEN, node_name=name, fetch_budget=10)
    r = subprocess.run([sys.executable, "-m", "agent.cli", "firstboot", "--root", root], capture_output=True,
                       text=True, timeout=120, cwd=REPO,
                       env=dict(os.environ, NODE_AGENT_JOURNAL_SOCKET="/nonexistent/journal"))
    return root, r


def test_first_boot_registers_keeps_its_credential_0600_and_only_it_reports_as_the_node(server, tmp_path):
    root, r = firstboot(server, tmp_path, "id-node-1")
    assert r.returncode == 0, r.stderr
    assert "registered" in r.stderr
    path = os.path.join(root, "var/lib/node-agent/node-credential")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        kept = json.load(f)
    assert kept["node"] == "id-node-1" and kept["server"] == server.base_url
    # the pull secret came (the pointer's httpHeaders carried the bootstrap token) and is 0600
    assert stat.S_IMODE(os.stat(os.path.join(root, "var/lib/kubelet/config.json")).st_mode) == 0o600
    node = server.session().get(server.url("/api/v1/nodes/id-node-1")).json()
    assert node["report"]["state"] in ("Done", "Working")
    # Its credential is the only thing that reports as it: the bootstrap token is refused.
    forged = server.session().post(server.url("/api/v1/nodes/id-node-1/report"), json={"pool": "worker",
                                                                                      "state": "Degraded"})
    assert forged.status_code == 403
    own = server.session(token=False)
    own.headers["Authorization"] = f"Bearer {kept['credential']}"
    assert own.get(server.url("/config/worker"), headers={"X-Node-Name": "id-node-1"}).status_code == 200


def test_a_reinstalled_machine_needs_the_admin_to_delete_the_old_node(server, tmp_path):
    assert firstboot(server, tmp_path, "id-node-2")[1].returncode == 0
    root, r = firstboot(server, tmp_path, "id-node-2", dirname="reinstalled")
    assert r.returncode == 0, r.stderr  # provisioning is never blocked by a report
    assert "already registered" in r.stderr
    with open(os.path.join(root, "var/lib/node-agent/node-credential")) as f:
        assert json.load(f)["registered"] is False  # made and kept, never taken by the server
    # node-config-server delete node NAME (the admin's client): 77 with the bootstrap token,
    # 0 with the admin token, 1 when there is nothing left to delete.
    tokens = {}
    for who, secret in (("boot", TOKEN), ("admin", ADMIN)):
        tokens[who] = tmp_path / f"{who}-token"
        tokens[who].write_text(secret + "\n")

    def delete(who):
        return subprocess.run([sys.executable, "-m", "agent.server.cli", "delete", "node", "id-node-2", "--server",
                               server.base_url, "--ca", server.tls.ca_cert, "--token-file", str(tokens[who])],
                              capture_output=True, text=True, timeout=60, cwd=REPO)

    refused = delete("boot")
    assert refused.returncode == 77 and "admin token" in refused.stderr, refused.stderr
    gone = delete("admin")
    assert gone.returncode == 0 and "node id-node-2 deleted from pool worker" in gone.stdout, gone.stderr
    assert delete("admin").returncode == 1
    root, r = firstboot(server, tmp_path, "id-node-2", dirname="reinstalled-again")
    assert r.returncode == 0 and "registered" in r.stderr, r.stderr
    assert os.path.exists(os.path.join(root, "var/lib/node-agent/node-credential"))


def admin_delete(server, node):
    s = server.session(token=False)
    r = s.delete(server.url(f"/api/v1/nodes/{node}"), headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200, r.text


def test_a_node_the_admin_deleted_registers_again_on_its_next_run(server, tmp_path):
    # Deleted by the admin, a node still holds a credential the server no longer knows. Kept, it
    # made every report, lease and member fetch fail with 401 for ever: the node forgets it and
    # registers again with the bootstrap token, on day 2 and on a first boot run again.
    root, r = firstboot(server, tmp_path, "id-node-3")
    assert r.returncode == 0, r.stderr
    path = os.path.join(root, "var/lib/node-agent/node-credential")
    with open(path) as f:
        stale = json.load(f)
    admin_delete(server, "id-node-3")

    update = subprocess.run([sys.executable, "-m", "agent.cli", "update", "--once", "--root", root],
                            capture_output=True, text=True, timeout=120, cwd=REPO,
                            env=dict(os.environ, NODE_AGENT_JOURNAL_SOCKET="/nonexistent/journal"))
    assert update.returncode == 0, update.stderr
    assert "no longer accepts node id-node-3's credential" in update.stderr
    with open(path) as f:
        renewed = json.load(f)
    assert renewed["credential"] != stale["credential"] and stale_mode_ok(path)
    s = server.session(token=False)  # the new credential is the node's own again
    r = s.post(server.url("/api/v1/nodes/id-node-3/report"), json={"pool": "worker", "state": "Done"},
               headers={"Authorization": f"Bearer {renewed['credential']}"})
    assert r.status_code == 200, r.text

    # A first boot run again with a credential the server deleted: it fetches as a new node.
    admin_delete(server, "id-node-3")
    again = make_node_root(str(tmp_path / "again"), server.base_url, "worker", ca_pem=server.tls.ca_pem(),
                           token=TOKEN, node_name="id-node-3", fetch_budget=10)
    kept = os.path.join(again, "var/lib/node-agent/node-credential")
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    shutil.copy(path, kept)
    r = subprocess.run([sys.executable, "-m", "agent.cli", "firstboot", "--root", again], capture_output=True,
                       text=True, timeout=120, cwd=REPO, env=dict(os.environ, NODE_AGENT_JOURNAL_SOCKET="/nonexistent/journal"))
    assert r.returncode == 0, r.stderr
    assert "fetching as a new node" in r.stderr and "registered" in r.stderr
    with open(kept) as f:
        assert json.load(f)["credential"] != renewed["credential"]


def stale_mode_ok(path):
    return stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_registration_survives_a_kill_between_the_servers_answer_and_saving_it(server, tmp_path):
    """Issue 28: a kill after the server's 201 and before the node kept its credential left every
    later run with 403 "already registered". Now the node makes its credential and keeps it
    (0600, marked unregistered) before it asks: the rerun registers again with the same one, the
    server answers it as done, and the run completes without an admin."""
    from agent.node.report import new_credential

    name = "id-node-killed"
    root = make_node_root(str(tmp_path / name), server.base_url, "worker", ca_pem=server.tls.ca_pem(),
                          token=TOKEN, node_name=name, fetch_budget=10)
    secret = new_credential()
    path = os.path.join(root, "var/lib/node-agent/node-credential")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:  # what the killed run kept before it asked
        json.dump({"server": server.base_url, "node": name, "credential": secret, "registered": False}, f)
    os.chmod(path, 0o600)
    # The server took it and answered; the answer was lost with the killed run.
    first = server.session().post(server.url(f"/api/v1/nodes/{name}/register"), json={"credential": secret})
    assert first.status_code == 201 and "credential" not in first.json(), first.text
    # Registering again with the bootstrap token and another credential is still refused.
    other = server.session().post(server.url(f"/api/v1/nodes/{name}/register"), json={"credential": new_credential()})
    assert other.status_code == 403 and "already registered" in other.text

    r = subprocess.run([sys.executable, "-m", "agent.cli", "firstboot", "--root", root], capture_output=True,
                       text=True, timeout=120, cwd=REPO, env=dict(os.environ, NODE_AGENT_JOURNAL_SOCKET="/nonexistent/journal"))
    assert r.returncode == 0, r.stderr
    assert "already registered" not in r.stderr and "registered with" in r.stderr, r.stderr
    with open(path) as f:
        kept = json.load(f)
    assert kept["credential"] == secret and kept["registered"] is True and stale_mode_ok(path)
    node = server.session().get(server.url(f"/api/v1/nodes/{name}")).json()
    assert node["report"]["state"] in ("Done", "Working")  # the report went through, as the node itself
    st = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--root", root, "--json"], capture_output=True,
                        text=True, timeout=60, cwd=REPO)
    assert "refused" not in st.stdout, st.stdout


def test_a_kill_before_the_request_reached_the_server_registers_on_the_rerun(server, tmp_path):
    from agent.node.report import new_credential

    name = "id-node-killed-early"
    root = make_node_root(str(tmp_path / name), server.base_url, "worker", ca_pem=server.tls.ca_pem(),
                          token=TOKEN, node_name=name, fetch_budget=10)
    secret = new_credential()
    path = os.path.join(root, "var/lib/node-agent/node-credential")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"server": server.base_url, "node": name, "credential": secret, "registered": False}, f)
    r = subprocess.run([sys.executable, "-m", "agent.cli", "firstboot", "--root", root], capture_output=True,
                       text=True, timeout=120, cwd=REPO, env=dict(os.environ, NODE_AGENT_JOURNAL_SOCKET="/nonexistent/journal"))
    assert r.returncode == 0 and "registered with" in r.stderr, r.stderr
    with open(path) as f:
        assert json.load(f) == {"server": server.base_url, "node": name, "credential": secret, "registered": True}


def _agent(root, *args):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args, "--root", root], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=dict(os.environ, NODE_AGENT_JOURNAL_SOCKET="/nonexistent/journal"))


def test_update_after_firstboot_with_node_name_reports_under_that_name_not_the_host_name(server, tmp_path):
    """Issue 39: ``update`` has no --node-name; it took the host name, and a second identity
    registered and counted in the pool. The first boot's name is recorded and kept."""
    from agent.core.settings import default_node_name

    root = make_node_root(str(tmp_path / "n"), server.base_url, "worker", ca_pem=server.tls.ca_pem(), token=TOKEN,
                          fetch_budget=10)  # no nodeName in agent.yaml: only the flag names the node
    r = _agent(root, "firstboot", "--node-name", "id-node-named")
    assert r.returncode == 0, r.stderr
    with open(os.path.join(root, "var/lib/node-agent/node-name")) as f:
        assert f.read().strip() == "id-node-named"
    r = _agent(root, "update", "--once")
    assert r.returncode == 0, r.stderr
    assert server.session().get(server.url(f"/api/v1/nodes/{default_node_name()}")).status_code == 404
    assert server.session().get(server.url("/api/v1/nodes/id-node-named")).status_code == 200
    with open(os.path.join(root, "etc/node-agent/agent.yaml"), "a") as f:
        f.write("nodeName: id-node-renamed\n")
    r = _agent(root, "update", "--once")
    assert r.returncode == 65, r.stderr
    assert "first booted as 'id-node-named'" in r.stderr and "'id-node-renamed'" in r.stderr
