"""Credentials are written 0600 whatever the config says (the pull secret had Ignition's 0644)."""

import base64
import json
import os
import stat

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.core.secretfiles import SECRET_PATHS
from agent.host.root import Root
from agent.node.apply import apply_config

PULL = json.dumps({"auths": {"quay.io": {"auth": base64.b64encode(b"u:p").decode()}}}).encode()


@pytest.fixture
def root(tmp_path):
    top = tmp_path / "root"
    (top / "etc").mkdir(parents=True)
    (top / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (top / "etc/group").write_text("root:x:0:\n")
    return Root(str(top))


@pytest.mark.parametrize("mode", [None, 0o644, 0o666, 0o400])
def test_pull_secret_is_0600_whatever_the_config_says(root, mode):
    f = {"path": "/var/lib/kubelet/config.json",
         "contents": {"source": "data:;base64," + base64.b64encode(PULL).decode()}}
    if mode is not None:
        f["mode"] = mode
    other = {"path": "/etc/motd", "contents": {"source": "data:,hi"}, "mode": 0o644}
    apply_config(root, NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {"files": [f, other]}},
                                  name="rendered-1"))
    assert stat.S_IMODE(os.stat(root.path("/var/lib/kubelet/config.json")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root.path("/etc/motd")).st_mode) == 0o644  # others as the config says


def test_the_list_names_the_known_credentials():
    assert {"/var/lib/kubelet/config.json", "/etc/kubernetes/kubeconfig"} <= SECRET_PATHS
