"""node-agent firstboot on a node root where SELinux is on: every path it creates (the config's
files, directories and links, and its own state files) is handed to setfiles (a stand-in that
records, since no policy exists here); on the same node with SELinux off, setfiles never runs."""

import os
import shutil

import pytest

from tests.helpers.certs import make_tls
from tests.helpers.server_proc import ServerProcess
from tests.server.test_e2e import EXAMPLES, TOKEN, agent, node


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("selinux-e2e")
    state = str(top / "state")
    shutil.copytree(EXAMPLES, state)
    with ServerProcess(state, tls=make_tls(str(top / "tls")), token=TOKEN) as srv:
        yield srv


def fake_setfiles_dir(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "labelled"
    script = bindir / "setfiles"
    script.write_text(f"#!/bin/sh\ncat >> '{log}'\n")
    script.chmod(0o755)
    return str(bindir), log


def every_path(root):
    found = set()
    for dirpath, dirs, names in os.walk(root):
        for name in dirs + names:
            found.add(os.path.join(dirpath, name))
    return found


@pytest.mark.parametrize("selinux_on", [True, False])
def test_firstboot_labels_every_path_it_creates(server, tmp_path, selinux_on):
    root = node(server, tmp_path, "worker-selinux", "worker")
    if selinux_on:
        os.makedirs(os.path.join(root, "sys/fs/selinux"))
        open(os.path.join(root, "sys/fs/selinux/enforce"), "w").write("1")
        os.makedirs(os.path.join(root, "etc/selinux/targeted/contexts/files"))
        open(os.path.join(root, "etc/selinux/targeted/contexts/files/file_contexts"), "w").write("")
        open(os.path.join(root, "etc/selinux/config"), "w").write("SELINUXTYPE=targeted\n")
    # On a node systemd creates (and labels) the state directory: StateDirectory=node-agent.
    os.makedirs(os.path.join(root, "var/lib/node-agent"), exist_ok=True)
    bindir, log = fake_setfiles_dir(tmp_path)
    before = every_path(root)
    proc = agent("firstboot", "--root", root, env={"PATH": bindir + os.pathsep + os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    if not selinux_on:
        assert not log.exists()
        return
    labelled = {p.decode() for p in log.read_bytes().split(b"\0") if p}
    created = every_path(root) - before
    assert created, "first boot created nothing?"
    missing = sorted(p for p in created if p not in labelled)
    assert not missing, f"created but never labelled: {missing}"
    assert os.path.join(root, "var/lib/node-agent/firstboot.done") in labelled
