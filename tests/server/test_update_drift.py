"""Day 2 as the MCD does it (issue 32), end to end against a real node-config-server: a file of
the current config edited by hand is Degraded, named in ``node-agent status`` and in the
server's ``describe node``; an update is not applied over it (exit 79, saying why); ``update
--force`` and the force file re-apply through the normal apply and policy (no reboot: the
policy restarts systemd-sysctl for /etc/sysctl.d) and the node is Done again.
"""

import io
import json
import os
import shutil
from contextlib import redirect_stdout

import pytest

from agent.cli import main as agent_main
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root, reboot
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for
from tests.server.test_mco_corpus import EXAMPLES

TOKEN = "t0ken"
DRIFTED = "/etc/sysctl.d/99-inotify.conf"
ORIGINAL = b"fs.inotify.max_user_watches = 65536\n"


def status(top):
    out = io.StringIO()
    with redirect_stdout(out):
        code = agent_main(["status", "--root", top, "--json"])
    return code, json.loads(out.getvalue())


def describe(srv, tmp_path, name):
    from agent.server.cli.main import main as ncs_main

    token_file = tmp_path / "client-token"
    token_file.write_text(TOKEN + "\n")
    out = io.StringIO()
    with redirect_stdout(out):
        code = ncs_main(["describe", "node", name, "--server", srv.base_url, "--ca", srv.tls.ca_cert,
                         "--token-file", str(token_file)])
    assert code == 0
    return out.getvalue()


def wait_for_new_target(api, srv, old):
    srv.wait_state_read()

    def moved():
        name = api.get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]
        return name if name != old else None

    return wait_for(moved, "the server picks up the change (a new target)", 30)


@pytest.fixture
def cluster(tmp_path):
    state = str(tmp_path / "state")
    shutil.copytree(EXAMPLES, state)
    with ServerProcess(state, tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        top = make_node_root(str(tmp_path / "w"), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(), token=TOKEN,
                             node_name="w-drift")
        assert agent_main(["firstboot", "--root", top]) == 0
        reboot(top)  # the reboot its first boot asked for: the node is Done, then the server targets it
        yield srv, state, top


def test_drift_is_degraded_refuses_an_update_and_force_recovers(cluster, tmp_path, capsys):
    srv, state, top = cluster
    api = srv.session()
    path = os.path.join(top, DRIFTED.lstrip("/"))
    assert open(path, "rb").read() == ORIGINAL
    assert agent_main(["update", "--once", "--root", top]) == 0
    current = api.get(srv.url("/api/v1/nodes/w-drift")).json()["report"]["currentConfig"]

    # The server targets the node to a new config; meanwhile a file of its current config changes.
    with open(os.path.join(state, "machineconfigs", "90-day2.yaml"), "w") as f:
        f.write("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
                "  name: 90-day2\n  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n"
                "  osImageURL: quay.io/openshift-release-dev/rhel-coreos-9:9.6.20250121-0\n"
                "  config:\n    ignition: {version: 3.4.0}\n    storage:\n      files:\n"
                "      - path: /etc/sysctl.d/90-day2.conf\n        mode: 420\n"
                "        contents: {source: 'data:,vm.swappiness%3D10'}\n")
    target = wait_for_new_target(api, srv, current)
    assert api.get(srv.url("/api/v1/pools/worker")).json()["status"]["rollout"]["updating"] == ["w-drift"]
    with open(path, "w") as f:
        f.write("fs.inotify.max_user_watches = 1\n")

    # Detected on the next pass (Degraded, naming the path and what differs), and the target is not
    # applied over the drift (the MCD's rule): exit 79, saying why.
    capsys.readouterr()
    assert agent_main(["update", "--once", "--root", top]) == 79
    err = capsys.readouterr().err
    assert f"{target} was not applied: unexpected on-disk state validating against {current}: {DRIFTED}" in err
    assert "what to do:" in err and "--force" in err
    assert not os.path.exists(os.path.join(top, "etc/sysctl.d/90-day2.conf"))
    code, st = status(top)
    assert code == 2 and st["result"] == "degraded" and st["exitCode"] == 79
    assert [d["path"] for d in st["drift"]["drifted"]] == [DRIFTED]
    assert st["drift"]["drifted"][0]["differences"][0].startswith("content differs (sha256 ")
    report = api.get(srv.url("/api/v1/nodes/w-drift")).json()["report"]
    assert report["state"] == "Degraded"
    assert report["reason"].startswith(f"unexpected on-disk state validating against {current}")
    text = describe(srv, tmp_path, "w-drift")
    assert f"State:               Degraded (unexpected on-disk state validating against {current}" in text
    assert f"{DRIFTED}: content differs (sha256 " in text

    # Forced: validation skipped once, the target applied, the drifted file rewritten, no reboot.
    assert agent_main(["update", "--once", "--force", "--root", top]) == 0
    assert open(path, "rb").read() == ORIGINAL
    assert open(os.path.join(top, "etc/sysctl.d/90-day2.conf"), "rb").read() == b"vm.swappiness=10"
    code, st = status(top)
    assert code == 0 and st["result"] == "done" and st["config"] == target and not st["rebootPending"]
    assert st["drift"]["drifted"] == []
    report = api.get(srv.url("/api/v1/nodes/w-drift")).json()["report"]
    assert report["state"] == "Done" and report["currentConfig"] == target


def test_the_force_file_reapplies_the_current_config_under_the_policy(cluster, caplog):
    srv, _state, top = cluster
    api = srv.session()
    path = os.path.join(top, DRIFTED.lstrip("/"))
    os.chmod(path, 0o600)
    assert agent_main(["update", "--once", "--root", top]) == 0
    code, st = status(top)
    assert code == 2 and st["drift"]["drifted"][0]["differences"] == ["mode 0600, expected 0644"]
    os.makedirs(os.path.join(top, "run"), exist_ok=True)
    force = os.path.join(top, "run/node-agent-force")
    open(force, "w").close()
    with caplog.at_level("INFO"):
        assert agent_main(["update", "--once", "--root", top]) == 0
    assert not os.path.exists(force)  # taken once, as the MCD's
    assert os.stat(path).st_mode & 0o7777 == 0o644
    messages = "\n".join(r.getMessage() for r in caplog.records)
    # the policy's action for /etc/sysctl.d, and no reboot
    assert "Restart systemd-sysctl.service" in messages and "No reboot." in messages
    code, st = status(top)
    assert code == 0 and st["result"] == "done" and not st["rebootPending"]
    assert [s["name"] for s in st["stages"]] == ["fetch", "validate", "plan", "apply", "act", "health", "report"]
    assert st["stages"][1]["result"] == "skipped"
    assert api.get(srv.url("/api/v1/nodes/w-drift")).json()["report"]["state"] == "Done"


def test_a_storage_change_with_the_override_is_recorded_and_reported_not_refused(cluster):
    srv, state, top = cluster
    api = srv.session()
    current = api.get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]
    with open(os.path.join(state, "machineconfiguration.yaml"), "a") as f:
        f.write("  irreconcilableValidationOverrides:\n    storage:\n    - Disks\n")
    with open(os.path.join(state, "machineconfigs", "90-disk.yaml"), "w") as f:
        f.write("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
                "  name: 90-disk\n  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n"
                "  config:\n    ignition: {version: 3.4.0}\n    storage:\n      disks:\n"
                "      - device: /dev/vdb\n        wipeTable: false\n")
    target = wait_for_new_target(api, srv, current)
    assert agent_main(["update", "--once", "--root", top]) == 0  # not refused (65 without the override)
    code, st = status(top)
    assert code == 0 and st["config"] == target
    assert st["irreconcilable"] == {"config": target, "differences": ["storage.disks"]}
    report = api.get(srv.url("/api/v1/nodes/w-drift")).json()["report"]
    assert report["state"] == "Done" and report["currentConfig"] == target
    assert report["reason"].startswith("irreconcilable differences kept (storage.disks differ")


@pytest.mark.skipif(not __import__("agent.host.inotify", fromlist=["x"]).available(), reason="no inotify")
def test_the_service_sees_a_change_at_once_and_the_force_file_recovers(cluster):
    import subprocess
    import sys

    from tests.server.test_mco_corpus import REPO

    srv, _state, top = cluster
    api = srv.session()
    path = os.path.join(top, DRIFTED.lstrip("/"))
    drift_json = os.path.join(top, "var/lib/node-agent/drift.json")
    # the loop with a long interval: only inotify can notice the edit within the deadline
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "update", "--root", top, "--interval", "600"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # The first check's record: the monitor sets its watch up before that check, so an edit
        # from now on is an event (found once under load: an edit between a check and a watch set
        # up after it went unseen until the next pass, 600 s away).
        wait_for(lambda: os.path.exists(drift_json), "the first check", 30)
        assert proc.poll() is None
        with open(path, "w") as f:
            f.write("edited\n")

        def degraded():
            report = api.get(srv.url("/api/v1/nodes/w-drift")).json().get("report") or {}
            return report.get("state") == "Degraded" and DRIFTED in (report.get("reason") or "")
        wait_for(degraded, "the Degraded report", 30)
        os.makedirs(os.path.join(top, "run"), exist_ok=True)
        open(os.path.join(top, "run/node-agent-force"), "w").close()
        wait_for(lambda: open(path, "rb").read() == ORIGINAL, "the forced re-apply", 30)

        def done():
            return api.get(srv.url("/api/v1/nodes/w-drift")).json()["report"]["state"] == "Done"
        wait_for(done, "the Done report", 30)
        assert not os.path.exists(os.path.join(top, "run/node-agent-force"))
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_pass_that_cannot_reach_the_server_leaves_the_force_file_for_the_next(cluster):
    srv, _state, top = cluster
    os.makedirs(os.path.join(top, "run"), exist_ok=True)
    force = os.path.join(top, "run/node-agent-force")
    open(force, "w").close()
    settings = os.path.join(top, "etc/node-agent/agent.yaml")
    with open(settings) as f:
        text = f.read()
    assert "totalTimeout: 20" in text
    with open(settings, "w") as f:
        f.write(text.replace("totalTimeout: 20.0", "totalTimeout: 2").replace("totalTimeout: 20", "totalTimeout: 2"))
    srv.stop()
    assert agent_main(["update", "--once", "--root", top]) == 69
    assert os.path.exists(force)  # not taken: nothing was re-applied
