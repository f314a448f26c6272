"""SELinux labels: every path the agent writes is relabelled where SELinux is on (as Ignition's
setfiles -vF0 -r ROOT file_contexts -f -), nothing happens where it is off. No policy exists on
the test machine, so a fake setfiles records what it is asked to label."""

import os
import stat

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.host import files, selinux
from agent.host.root import Root
from agent.node.apply import apply_config


def fake_setfiles(tmp_path, exit_code=0):
    """A setfiles stand-in: records its argv and the NUL-separated paths it gets on stdin."""
    log = tmp_path / "setfiles.log"
    script = tmp_path / "setfiles"
    script.write_text("#!/bin/sh\n"
                      f"printf '%s\\n' \"$*\" >> '{log}.argv'\n"
                      f"cat >> '{log}'\n"
                      + (f"echo 'setfiles: cannot label' >&2; exit {exit_code}\n" if exit_code else ""))
    script.chmod(0o755)
    return str(script), log


def recorded(log):
    return [p.decode() for p in log.read_bytes().split(b"\0") if p] if log.exists() else []


def node_root(tmp_path, enforcing=True, policy="targeted"):
    top = tmp_path / "node"
    (top / "etc").mkdir(parents=True)
    (top / "etc/passwd").write_text("root:x:0:0::/root:/bin/bash\ncore:x:1000:1000::/home/core:/bin/bash\n")
    (top / "etc/group").write_text("root:x:0:\ncore:x:1000:\n")
    if enforcing:
        (top / "sys/fs/selinux").mkdir(parents=True)
        (top / "sys/fs/selinux/enforce").write_text("1")
        (top / "etc/selinux" / policy / "contexts/files").mkdir(parents=True)
        (top / "etc/selinux" / policy / "contexts/files/file_contexts").write_text("/etc(/.*)? system_u:object_r:etc_t:s0\n")
        (top / "etc/selinux/config").write_text(f"SELINUX=enforcing\nSELINUXTYPE={policy}\n")
    return Root(str(top))


CONFIG = NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {
    "files": [{"path": "/etc/kubernetes/kubeconfig", "contents": {"source": "data:,kube"}, "mode": 0o600}],
    "directories": [{"path": "/etc/kubernetes/manifests", "mode": 0o755}],
    "links": [{"path": "/etc/localtime", "target": "/usr/share/zoneinfo/UTC"}]}})


@pytest.fixture(autouse=True)
def _no_labeller():
    yield
    files.use_labeller(None)


def test_every_written_path_is_relabelled_through_setfiles(tmp_path):
    root = node_root(tmp_path)
    script, log = fake_setfiles(tmp_path)
    labeller = selinux.labeller_for(root.top, setfiles=script)
    assert labeller is not None
    files.use_labeller(labeller)
    apply_config(root, CONFIG, state_dir="/var/lib/node-agent")
    paths = recorded(log)
    for config_path in ("/etc/kubernetes/kubeconfig", "/etc/kubernetes/manifests", "/etc/localtime",
                        "/etc/kubernetes"):
        assert root.path(config_path, follow_last=False) in paths, (config_path, paths)
    # Every labelled path is inside the root.
    assert all(p.startswith(root.top + "/") for p in paths)
    argv = (tmp_path / "setfiles.log.argv").read_text().splitlines()[0].split()
    contexts = os.path.join(root.top, "etc/selinux/targeted/contexts/files/file_contexts")
    assert argv == ["-F0", "-r", root.top, contexts, "-f", "-"]  # Ignition's RelabelFiles, -v aside
    # No temporary name is ever handed over: labels are set on the final names.
    assert not [p for p in paths if files.TMP_PREFIX in p]


def test_nothing_happens_where_selinux_is_off(tmp_path):
    root = node_root(tmp_path, enforcing=False)
    assert selinux.labeller_for(root.top) is None
    script, log = fake_setfiles(tmp_path)
    files.use_labeller(selinux.labeller_for(root.top, setfiles=script))
    apply_config(root, CONFIG, state_dir="/var/lib/node-agent")
    assert not log.exists() and not (tmp_path / "setfiles.log.argv").exists()
    assert stat.S_ISREG(os.stat(root.path("/etc/kubernetes/kubeconfig")).st_mode)


def test_a_labelling_failure_is_an_error_naming_the_path(tmp_path):
    root = node_root(tmp_path)
    script, _ = fake_setfiles(tmp_path, exit_code=1)
    labeller = selinux.Labeller(root.top, setfiles=script)
    with pytest.raises(selinux.LabelError, match=r"setfiles failed \(exit 1\).*/etc/x.*cannot label"):
        labeller.label([os.path.join(root.top, "etc/x")])


def test_policy_type_comes_from_the_roots_selinux_config(tmp_path):
    root = node_root(tmp_path, policy="mls")
    assert selinux.policy_type(root.top) == "mls"
    (tmp_path / "node/etc/selinux/config").write_text("SELINUX=enforcing\n")
    with pytest.raises(selinux.LabelError, match="names no SELINUXTYPE"):
        selinux.policy_type(root.top)


def test_live_root_uses_the_libselinux_bindings_when_present():
    calls = []

    class Bindings:
        @staticmethod
        def restorecon(path, force=False):
            calls.append((path, force))

    labeller = selinux.Labeller("/", bindings=Bindings())
    labeller.label(["/etc/a", "/etc/b"])
    assert calls == [("/etc/a", True), ("/etc/b", True)]
