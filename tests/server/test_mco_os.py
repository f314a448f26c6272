"""kernelType and extensions through rpm-ostree as the MCD runs them (update.go:2005 switchKernel,
update.go:1814 generateExtensionsArgs), pending until the reboot; FIPS flips and day-2 storage
changes refused before anything is written (update.go:1640-1651, reconcilable)."""

import json

import pytest

from agent.core.applyplan.ospackages import extensions_command, kernel_switch_commands
from agent.core.nodeconfig import NodeConfig
from agent.core.reconcilable import check
from agent.errors import ConfigError
from agent.host.rpmostree import RpmOstree
from agent.node.apply import apply_config
from tests.helpers.wait import wait_for
from tests.unit.test_apply import FakeSystemd, LiveRoot, root  # noqa: F401 (fixture)
from tests.unit.test_rpmostree import fake  # noqa: F401 (fixture)

DEFAULT = "kernel kernel-core kernel-modules kernel-modules-core kernel-modules-extra"
RT = "--install kernel-rt-core --install kernel-rt-modules --install kernel-rt-modules-extra --install kernel-rt-kvm"


def nc(**kw):
    return NodeConfig(ignition={"ignition": {"version": "3.4.0"}}, name="rendered-x", **kw)


def test_kernel_switch_command_lines():
    assert [" ".join(c) for c in kernel_switch_commands("", "realtime")] == [f"override remove {DEFAULT} {RT}"]
    assert [" ".join(c) for c in kernel_switch_commands("realtime", "default")] == [
        f"override reset {DEFAULT} " + RT.replace("--install", "--uninstall")]
    to_64k = kernel_switch_commands("realtime", "64k-pages")
    assert [c[:2] for c in to_64k] == [["override", "reset"], ["override", "remove"]]
    assert "--install" in to_64k[1] and "kernel-64k-core" in to_64k[1]
    assert kernel_switch_commands("default", "") == []
    assert extensions_command(["usbguard", "kerberos"], ["sysstat"]) == [
        "update", "--install", "usbguard", "--install", "krb5-workstation", "--install", "libkadm5",
        "--uninstall", "sysstat"]
    assert extensions_command([], []) == []


def test_a_live_apply_runs_the_mcd_command_lines(fake, root):  # noqa: F811
    live = LiveRoot(root.top)
    ro = RpmOstree(wait_initial=0)
    r = apply_config(live, nc(kernel_type="realtime", extensions=("usbguard",)), rpmostree=ro, systemd=FakeSystemd())
    assert r.os_update_staged
    calls = [c for c in fake() if not c.startswith(("status", "kargs"))]
    assert calls == [f"override remove {DEFAULT} {RT}", "update --install usbguard"]
    # Day 2 back to the default kernel and without the extension: the reverse operations.
    apply_config(live, nc(), nc(kernel_type="realtime", extensions=("usbguard",)), rpmostree=ro, systemd=FakeSystemd())
    calls = [c for c in fake() if not c.startswith(("status", "kargs"))]
    assert calls[2:] == [f"override reset {DEFAULT} " + RT.replace("--install", "--uninstall"),
                         "update --uninstall usbguard"]


def test_an_offline_apply_records_them_pending(root):  # noqa: F811
    r = apply_config(root, nc(kernel_type="64k-pages", extensions=("usbguard",)))
    assert not r.os_update_staged
    assert any(s.startswith("kernel type default -> 64k-pages (offline root") for s in r.not_performed)
    pending = json.loads(root.read_text("/var/lib/node-agent/pending-os.json"))
    assert pending["kernelType"] == {"from": "default", "to": "64k-pages"}
    assert pending["extensions"] == {"install": ["usbguard"], "uninstall": []}
    assert ["rpm-ostree", "update", "--install", "usbguard"] in pending["commands"]


def test_fips_flip_refused_and_first_boot_follows_the_node():
    with pytest.raises(ConfigError, match="FIPS mode is off on this node and the config wants it on") as e:
        check(nc(), nc(fips=True), False, firstboot=False)
    assert e.value.problems[0].path == "$.spec.fips"
    with pytest.raises(ConfigError, match="FIPS"):
        check(nc(fips=True), nc(), None, firstboot=False)  # the kernel unknown: the previous config stands
    check(None, nc(fips=True), True, firstboot=True)  # installed in FIPS mode: fine
    check(None, nc(fips=True), None, firstboot=True)  # another root, nothing known: not refused
    with pytest.raises(ConfigError, match="FIPS mode is off on this node and the config wants it on"):
        check(None, nc(fips=True), False, firstboot=True)


def test_day2_disk_raid_filesystem_changes_refused():
    disks = {"storage": {"disks": [{"device": "/dev/vdb", "wipeTable": False}],
                         "filesystems": [{"device": "/dev/md/data", "format": "ext4", "path": "/var/lib/data"}]}}
    new = NodeConfig(ignition={"ignition": {"version": "3.4.0"}, **disks}, name="rendered-y")
    with pytest.raises(ConfigError, match="laid down by Ignition at first boot only") as e:
        check(nc(), new, None, firstboot=False)
    assert [p.path for p in e.value.problems] == ["$.storage.disks", "$.storage.filesystems"]
    check(None, new, None, firstboot=True)  # first boot: Ignition laid them in the initramfs
    check(new, new, None, firstboot=False)  # unchanged on day 2: fine


def _tree(top):
    import os

    out = {}
    for base, _dirs, files in os.walk(os.path.join(top, "etc")):
        for name in files:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                out[os.path.relpath(path, top)] = open(path, "rb").read()
    return out


@pytest.mark.parametrize("change,words", [
    ("  fips: true\n", "FIPS mode is off on this node"),
    ("  config:\n    ignition:\n      version: 3.4.0\n    storage:\n      disks:\n      - device: /dev/vdb\n"
     "        wipeTable: false\n", "laid down by Ignition at first boot only"),
])
def test_day2_refusal_end_to_end_exit_65_nothing_written(tmp_path, change, words, capsys):
    import os
    import shutil

    from agent.cli import main as agent_main
    from tests.helpers.certs import make_tls
    from tests.helpers.noderoot import make_node_root, reboot
    from tests.helpers.server_proc import ServerProcess
    from tests.server.test_mco_corpus import EXAMPLES

    state = str(tmp_path / "state")
    shutil.copytree(EXAMPLES, state)
    with ServerProcess(state, tls=make_tls(str(tmp_path / "tls")), token="t") as srv:
        api = srv.session()
        top = make_node_root(str(tmp_path / "w"), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(), token="t",
                             node_name="w")
        os.makedirs(os.path.join(top, "proc/sys/crypto"))
        open(os.path.join(top, "proc/sys/crypto/fips_enabled"), "w").write("0\n")
        assert agent_main(["firstboot", "--root", top]) == 0
        reboot(top)  # the reboot its first boot asked for: Done, the server then targets it
        before = _tree(top)
        old = api.get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]
        with open(os.path.join(state, "machineconfigs", "90-change.yaml"), "w") as f:
            f.write("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
                    "  name: 90-change\n  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n" + change)
        srv.wait_state_read()
        wait_for(lambda: api.get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"] != old,
                 "the server picks up the change", 20)
        capsys.readouterr()
        assert agent_main(["update", "--once", "--root", top]) == 65
        assert words in capsys.readouterr().err
        after = _tree(top)
        assert {k: v for k, v in after.items() if k != "etc/node-agent/agent.yaml"} == \
            {k: v for k, v in before.items() if k != "etc/node-agent/agent.yaml"}
