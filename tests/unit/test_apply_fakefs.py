"""File effects under pyfakefs: exact modes and owners, umask-proof, temp files never left."""

import base64
import os

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.host import files
from agent.host.root import Root
from agent.node.apply import apply_config


@pytest.fixture
def froot(fs):
    fs.create_file("/node/etc/passwd", contents="root:x:0:0::/root:/bin/bash\ncore:x:1000:1000::/home/core:/bin/bash\n")
    fs.create_file("/node/etc/group", contents="root:x:0:\ncore:x:1000:\n")
    return Root("/node")


def test_atomic_write_sets_mode_and_owner_whatever_the_umask(fs):
    fs.create_dir("/d")
    old = os.umask(0o077)
    try:
        files.atomic_write("/d/f", b"abc", 0o755, 1000, 1000)
    finally:
        os.umask(old)
    st = os.stat("/d/f")
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o755, 1000, 1000)
    assert open("/d/f", "rb").read() == b"abc"
    assert os.listdir("/d") == ["f"]


def test_makedirs_modes_and_replace_symlink(fs):
    # Group 0: pyfakefs 5 (the newest for Python 3.9) lets even root through a directory only by
    # its permission bits (6.x exempts root, as the kernel does); the fake user's group is 0.
    created = files.makedirs("/a/b/c", 0o750, 5, 0, stop="/")
    assert created == ["/a", "/a/b", "/a/b/c"]
    assert all(os.stat(d).st_mode & 0o7777 == 0o750 and (os.stat(d).st_uid, os.stat(d).st_gid) == (5, 0)
               for d in created)
    files.replace_symlink("/a/l", "/x")
    files.replace_symlink("/a/l", "/y")
    assert os.readlink("/a/l") == "/y"


def test_apply_under_fakefs_owner_mode_and_idempotence(froot):
    src = "data:;base64," + base64.b64encode(b"kube").decode()
    cfg = NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {
        "files": [{"path": "/etc/kubernetes/kubeconfig", "contents": {"source": src}, "mode": 0o600,
                   "user": {"name": "core"}, "group": {"name": "core"}}],
        "directories": [{"path": "/etc/kubernetes", "mode": 0o711}]}})
    r = apply_config(froot, cfg)
    st = os.stat("/node/etc/kubernetes/kubeconfig")
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o600, 1000, 1000)
    assert os.stat("/node/etc/kubernetes").st_mode & 0o7777 == 0o711
    assert r.changed == ["dir /etc/kubernetes", "file /etc/kubernetes/kubeconfig"]
    # Only a mode drift: the second apply fixes attributes without rewriting.
    os.chmod("/node/etc/kubernetes/kubeconfig", 0o644)
    ino = os.stat("/node/etc/kubernetes/kubeconfig").st_ino
    r2 = apply_config(froot, cfg)
    assert r2.changed == ["file /etc/kubernetes/kubeconfig"] and r2.unchanged == 1
    assert os.stat("/node/etc/kubernetes/kubeconfig").st_ino == ino
    assert os.stat("/node/etc/kubernetes/kubeconfig").st_mode & 0o777 == 0o600
    assert apply_config(froot, cfg).changed == []
    assert not os.path.exists("/node/var/lib/node-agent/journal.json")
