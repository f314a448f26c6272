"""After an update that fails on a node and is rolled back (issue 57, item 4), every view says
so, end to end on the directory backend: ``node-agent status`` names the config the node runs and
the failure; ``describe node`` keeps the node's current image and shows its ended first boot with
no stage "running"; the pool's Degraded message names the node as upstream's status.go does; and
``node-config-server status`` exits 1 naming it."""

import os
import shutil
import subprocess
import sys

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root, not_layered, reboot
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

TOKEN = "failed-update-token"
BAD_FILE = "/etc/nmstate/openshift/bond0.yml"  # the default policy: None (no drain, no reboot)
BAD_MC = ("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 60-bond\n"
          "  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n  config:\n"
          "    ignition: {version: 3.4.0}\n    storage:\n      files:\n"
          f"      - {{path: {BAD_FILE}, mode: 420, contents: {{source: 'data:,x'}}}}\n")


def run(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=paths.REPO,
                          timeout=120)


def test_every_view_tells_the_truth_after_a_failed_rolled_back_update(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(paths.REPO, "examples", "state"), state)
    not_layered(str(state))
    (tmp_path / "token").write_text(TOKEN + "\n")
    with ServerProcess(str(state), tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        client = ["--server", srv.base_url, "--ca", srv.tls.ca_cert, "--token-file", str(tmp_path / "token")]
        root = make_node_root(str(tmp_path / "w0"), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(), token=TOKEN,
                              node_name="w0")
        assert run("agent.cli", "firstboot", "--root", root).returncode == 0
        reboot(root)
        assert run("agent.cli", "update", "--once", "--root", root).returncode == 0
        pool = srv.session().get(srv.url("/api/v1/pools/worker")).json()
        a = pool["spec"]["configuration"]["name"]
        image = srv.session().get(srv.url("/api/v1/nodes/w0")).json()["report"]["currentImage"]
        assert image

        os.makedirs(os.path.join(root, BAD_FILE.lstrip("/"), "sub"))  # B's file cannot be written there
        (state / "machineconfigs" / "60-bond.yaml").write_text(BAD_MC)
        srv.wait_state_read()
        b = wait_for(lambda: (lambda t: t != a and t)(
            srv.session().get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]),
            "the failing config is the pool's target", 30)
        failed = run("agent.cli", "update", "--once", "--root", root)
        assert failed.returncode == 75 and "exists and is a directory" in failed.stderr, failed.stderr

        status = run("agent.cli", "status", "--root", root)
        assert status.returncode == 1, status.stdout
        assert f"config: {b} (NOT applied: the update failed; the node runs {a})" in status.stdout, status.stdout
        assert f"its update FAILED: the node runs {a}" in status.stdout and "targeted, updating" not in status.stdout

        node = run("agent.server.cli", "describe", "node", "w0", *client).stdout
        assert "State:               Degraded" in node and f"Current image:       {image}\n" in node, node
        stages = node.split("  Stages:\n", 1)[1].split("\n")
        assert stages[0].split() == ["STAGE", "STARTED", "SECONDS", "RESULT"]
        assert not any(line.split()[-1:] == ["running"] for line in stages if line.startswith("    ")), node

        described = run("agent.server.cli", "describe", "pool", "worker", *client).stdout
        degraded = [line for line in described.splitlines() if line.split()[:2] == ["Degraded", "True"]]
        assert degraded and 'Node w0 is reporting: "' in degraded[0], described
        cluster = run("agent.server.cli", "status", *client)
        assert cluster.returncode == 1 and "DEGRADED (worker)" in cluster.stdout, cluster.stdout
        assert "  worker: degraded: 1 node(s) degraded: Node w0 is reporting: " in cluster.stdout, cluster.stdout
