"""The day-2 loop follows the server the node's pointer config names (issue 49): a config server
that moved (another port, the same data: the reopened demo) is where ``update`` goes once the
pointer config says so, the node's saved config and credential with it; a fetch that fails says
what to do naming the file that holds what to fix."""

import json
import os
import shutil
import subprocess
import sys

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root, not_layered, pointer_config, reboot
from tests.helpers.server_proc import ServerProcess, free_port
from tests.helpers.wait import wait_for

REPO = paths.REPO
TOKEN = "follow-token"
POINTER = "etc/node-agent/pointer.ign"


def agent(*args):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def point_at(root, base_url, pool, tls):
    with open(os.path.join(root, POINTER), "w") as f:
        json.dump(pointer_config(base_url, pool, tls.ca_pem(), TOKEN), f)


def saved(root, name):
    with open(os.path.join(root, "var/lib/node-agent", name)) as f:
        return json.load(f)


def test_update_follows_the_pointer_config_to_the_server_that_moved_with_its_credential(tmp_path):
    state, data = tmp_path / "state", str(tmp_path / "data")
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    not_layered(str(state))
    tls = make_tls(str(tmp_path / "tls"))
    with ServerProcess(str(state), tls=tls, token=TOKEN, data_dir=data) as old:
        root = make_node_root(str(tmp_path / "w0"), old.base_url, "worker", ca_pem=tls.ca_pem(), token=TOKEN,
                              node_name="w0")
        assert agent("firstboot", "--root", root).returncode == 0
        reboot(root)
        assert agent("update", "--once", "--root", root).returncode == 0
        first = old.session().get(old.url("/api/v1/nodes/w0")).json()["report"]["currentConfig"]
        credential = saved(root, "node-credential")["credential"]
    # The same cluster (state and data) on another port; the admin changes the pointer config.
    mc = state / "machineconfigs" / "60-motd.yaml"
    mc.write_text("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
                  "  name: 60-motd\n  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n"
                  "  config:\n    ignition: {version: 3.4.0}\n    storage:\n      files:\n"
                  "      - {path: /etc/motd, mode: 420, contents: {source: 'data:,moved'}}\n")
    with ServerProcess(str(state), tls=tls, token=TOKEN, data_dir=data, port=free_port()) as new:
        target = wait_for(lambda: (lambda t: t != first and t)(
            new.session().get(new.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]),
            "the moved server's new target for pool worker", 30)
        point_at(root, new.base_url, "worker", tls)
        r = agent("update", "--once", "--root", root)
        assert r.returncode == 0, r.stderr
        assert "following the pointer config" in r.stderr and new.base_url in r.stderr
        assert open(os.path.join(root, "etc/motd")).read() == "moved"
        assert saved(root, "current-config.json")["url"] == f"{new.base_url}/config/worker"
        # The node kept its credential (no second registration): the moved server, the same store,
        # counts its report as before.
        assert saved(root, "node-credential") == {"server": new.base_url, "node": "w0", "credential": credential,
                                                   "registered": True}
        seen = new.session().get(new.url("/api/v1/nodes/w0")).json()["report"]
        assert (seen["currentConfig"], seen["state"], seen["reason"]) == (target, "Working", "reboot pending")
        reboot(root)  # /etc/motd is no file the policy names: a reboot
        assert agent("update", "--once", "--root", root).returncode == 0
        seen = new.session().get(new.url("/api/v1/nodes/w0")).json()["report"]
        assert (seen["currentConfig"], seen["state"]) == (target, "Done")


def test_an_unreachable_server_s_what_to_do_names_the_pointer_config_file(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    not_layered(str(state))
    tls = make_tls(str(tmp_path / "tls"))
    with ServerProcess(str(state), tls=tls, token=TOKEN) as srv:
        root = make_node_root(str(tmp_path / "w0"), srv.base_url, "worker", ca_pem=tls.ca_pem(), token=TOKEN,
                              node_name="w0", fetch_budget=2)
        assert agent("firstboot", "--root", root).returncode == 0
    point_at(root, f"https://127.0.0.1:{free_port()}", "worker", tls)  # nothing listens there
    r = agent("update", "--once", "--root", root)
    assert r.returncode == 69, r.stderr
    what = r.stderr.split("what to do:", 1)[1]
    assert os.path.join(root, POINTER) in what and "reachable" in what
