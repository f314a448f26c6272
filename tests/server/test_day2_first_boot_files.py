"""Day 2 keeps what the server wrote for the first boot only (the node annotations, whose
firstPivotConfig names the config the node first pivoted to, and the MCS content file), as the
MCO: the MCS serves them to a booting node only (openshift/machine-config-operator
pkg/server/server.go:49-66 getAppenders, :156 appendNodeAnnotations) and the MCD reads
node-annotations.json only while the node has no currentConfig annotation
(pkg/daemon/node.go:13-25). They used to be re-applied by every update."""

import copy
import json
import os
import shutil
import subprocess
import sys

from agent.core.served import ANN, ANNOTATIONS_PATH, MCS_CONTENT_PATH, keep_first_boot_files
from agent.resource.fetch import IGNITION_ACCEPT
from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root, not_layered, reboot
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

REPO = paths.REPO
EXAMPLES = os.path.join(REPO, "examples", "state")
TOKEN = "day2-token"


def entry(path, text):
    return {"path": path, "mode": 420, "overwrite": True, "contents": {"source": "data:," + text}}


def config(*files):
    return {"ignition": {"version": "3.4.0"}, "storage": {"files": list(files)}}


def test_keep_first_boot_files_takes_them_from_the_current_config():
    current = config(entry(ANNOTATIONS_PATH, "first"), entry("/etc/a", "1"), entry(MCS_CONTENT_PATH, "first-mc"))
    target = config(entry("/etc/a", "2"), entry(ANNOTATIONS_PATH, "second"), entry(MCS_CONTENT_PATH, "second-mc"),
                    entry("/etc/b", "new"))
    before = copy.deepcopy(target), copy.deepcopy(current)
    got = keep_first_boot_files(target, current)
    assert [f["contents"]["source"] for f in got["storage"]["files"]] == [
        "data:,2", "data:,first", "data:,first-mc", "data:,new"]  # in place, everything else served
    assert (target, current) == before  # neither argument changed
    # the current config has none (first boot from a config without them): none is written now
    assert keep_first_boot_files(target, config(entry("/etc/a", "1")))["storage"]["files"] == [
        entry("/etc/a", "2"), entry("/etc/b", "new")]
    plain = config(entry("/etc/a", "2"))
    assert keep_first_boot_files(plain, current) is plain
    assert keep_first_boot_files({"ignition": {"version": "3.4.0"}}, current) == {"ignition": {"version": "3.4.0"}}


def agent(*args):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def read(root, path):
    with open(os.path.join(root, path.lstrip("/")), "rb") as f:
        return f.read()


def test_an_update_keeps_the_first_pivot_config_on_the_node_and_the_etag_it_was_served(tmp_path):
    state = str(tmp_path / "state")
    shutil.copytree(EXAMPLES, state)
    not_layered(state)
    with ServerProcess(state, tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        api = srv.session()
        root = make_node_root(str(tmp_path / "infra-d2"), srv.base_url, "infra", ca_pem=srv.tls.ca_pem(),
                              token=TOKEN, node_name="infra-d2", fetch_budget=20)
        first = agent("firstboot", "--root", root)
        assert first.returncode == 0, first.stderr
        annotations, content = read(root, ANNOTATIONS_PATH), read(root, MCS_CONTENT_PATH)
        first_pivot = json.loads(annotations)[ANN + "firstPivotConfig"]
        assert first_pivot.startswith("rendered-infra-")

        # A day-2 change (a sysctl file: the example policy restarts systemd-sysctl, no drain).
        mc = os.path.join(state, "machineconfigs", "50-infra.yaml")
        with open(mc) as f:
            text = f.read()
        assert "      files:\n" in text
        text = text.replace("      files:\n", "      files:\n      - path: /etc/sysctl.d/90-day2.conf\n"
                            "        mode: 420\n        contents:\n          source: data:,vm.swappiness%3D10\n", 1)
        with open(mc + ".tmp", "w") as f:
            f.write(text)
        os.replace(mc + ".tmp", mc)
        srv.wait_state_read()
        new_target = wait_for(lambda: (lambda name: name if name != first_pivot else None)(
            api.get(srv.url("/api/v1/pools/infra")).json()["spec"]["configuration"]["name"]),
            "the server picks up the change", 30)  # the watcher's interval and settle time, with room

        reboot(root)  # the reboot its first boot asked for: the node is Done, then the server targets it
        update = agent("update", "--once", "--root", root)
        assert update.returncode == 0, update.stderr
        assert read(root, "/etc/sysctl.d/90-day2.conf") == b"vm.swappiness=10"
        assert read(root, ANNOTATIONS_PATH) == annotations  # firstPivotConfig names the first config still
        assert read(root, MCS_CONTENT_PATH) == content
        with open(os.path.join(root, "var/lib/node-agent/current-config.json")) as f:
            recorded = json.load(f)
        assert recorded["name"] == new_target
        status = json.loads(agent("status", "--root", root, "--json").stdout)
        assert status["command"] == "update" and status["config"] == new_target
        # a second pass changes nothing: the kept files are part of the recorded current config
        again = agent("update", "--once", "--root", root)
        assert again.returncode == 0, again.stderr
        assert read(root, ANNOTATIONS_PATH) == annotations
        # The update kept the ETag it was served: the node's next fetch, If-None-Match it, is answered
        # 304, not the whole config again (and the day-2 loop's fetch is held until its turn).
        with open(os.path.join(root, "var/lib/node-agent/node-credential")) as f:
            credential = json.load(f)["credential"]
        as_node = srv.session(token=False)
        as_node.headers.update({"Authorization": f"Bearer {credential}", "X-Node-Name": "infra-d2",
                                "Accept": IGNITION_ACCEPT})
        assert recorded["etag"], recorded
        assert as_node.get(srv.url("/config/infra"), headers={"If-None-Match": recorded["etag"]}).status_code == 304
