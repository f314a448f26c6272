"""First boot planned from what is on disk (MCD daemon.go:1255-1285): files Ignition already laid
are no change, so a node whose boot image and kernel arguments already are the target applies
nothing and does not reboot; one whose image differs reboots exactly once."""

import json
import os
import shutil

import pytest

from agent.cli import main as agent_main
from agent.core.served import node_config_from_served
from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root
from tests.helpers.server_proc import ServerProcess

REPO = paths.REPO
EXAMPLES = os.path.join(REPO, "examples", "state")
TOKEN = "disk-token"
# A file no disruption policy covers: written at first boot it needs the reboot.
EXTRA = """apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 60-worker-extra
  labels: {machineconfiguration.openshift.io/role: worker}
spec:
  config:
    ignition: {version: 3.2.0}
    storage:
      files:
      - {path: /etc/extra.conf, mode: 420, contents: {source: 'data:,laid%20by%20ignition'}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("fromdisk")
    state = str(top / "state")
    shutil.copytree(EXAMPLES, state)
    with open(os.path.join(state, "machineconfigs", "60-worker-extra.yaml"), "w") as f:
        f.write(EXTRA)
    with ServerProcess(state, tls=make_tls(str(top / "tls")), token=TOKEN) as srv:
        yield srv


def _node(server, top, name, image, kargs):
    return make_node_root(str(top / name), server.base_url, "worker", ca_pem=server.tls.ca_pem(), token=TOKEN,
                          node_name=name, booted_image=image, cmdline=" ".join(kargs))


def _status(root):
    with open(os.path.join(root, "var/lib/node-agent/status.json")) as f:
        return json.load(f)


def _lay_like_ignition(src, dst):
    """Copy what the first node's config put on disk (its /etc and home), not the agent's state."""
    for sub in ("etc", "var/home"):
        for base, _dirs, files in os.walk(os.path.join(src, sub)):
            rel = os.path.relpath(base, src)
            if rel.startswith("etc/node-agent"):
                continue
            os.makedirs(os.path.join(dst, rel), exist_ok=True)
            for name in files:
                s, d = os.path.join(base, name), os.path.join(dst, rel, name)
                if os.path.lexists(d):
                    os.unlink(d)
                if os.path.islink(s):
                    os.symlink(os.readlink(s), d)
                else:
                    shutil.copy2(s, d)
        for base, dirs, _files in os.walk(os.path.join(src, sub)):  # links to directories too
            for name in dirs:
                s = os.path.join(base, name)
                if os.path.islink(s) and not os.path.lexists(os.path.join(dst, os.path.relpath(s, src))):
                    os.symlink(os.readlink(s), os.path.join(dst, os.path.relpath(s, src)))


def test_files_laid_by_ignition_and_the_target_os_booted_mean_nothing_to_do(server, tmp_path):
    served = server.session().get(server.url("/config/worker"),
                                  headers={"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"}).json()
    target = node_config_from_served(served)
    assert target.os_image_url and target.kernel_arguments

    # A node that must write the files itself: the uncovered file needs the one reboot.
    writer = _node(server, tmp_path, "writer", target.os_image_url, target.kernel_arguments)
    assert agent_main(["firstboot", "--root", writer]) == 0
    assert _status(writer)["rebootPending"] is True

    # The same files already there (Ignition laid them), the target OS booted: nothing to do.
    laid = _node(server, tmp_path, "laid", target.os_image_url, target.kernel_arguments)
    _lay_like_ignition(writer, laid)
    before = os.stat(os.path.join(laid, "etc/extra.conf"))
    assert agent_main(["firstboot", "--root", laid]) == 0
    status = _status(laid)
    assert status["rebootPending"] is False and status["result"] == "done"
    after = os.stat(os.path.join(laid, "etc/extra.conf"))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten
    assert not os.path.exists(os.path.join(laid, "var/lib/node-agent/pending-os.json"))

    # The same files, another boot image: one reboot pending (the pivot), and a second run
    # finds first boot done and leaves that one pending reboot as it was (adds none).
    pivot = _node(server, tmp_path, "pivot", "quay.io/example/older-boot-image:1", target.kernel_arguments)
    _lay_like_ignition(writer, pivot)
    assert agent_main(["firstboot", "--root", pivot]) == 0
    assert _status(pivot)["rebootPending"] is True
    pending = json.load(open(os.path.join(pivot, "var/lib/node-agent/pending-os.json")))
    assert pending["osImageURL"] == target.os_image_url
    before = open(os.path.join(pivot, "var/lib/node-agent/pending-os.json")).read()
    assert agent_main(["firstboot", "--root", pivot]) == 0  # already done
    assert _status(pivot)["rebootPending"] is True
    assert open(os.path.join(pivot, "var/lib/node-agent/pending-os.json")).read() == before
