"""A health check that fails after an update's reboot (agent/node/rebooted.py): an OS change is
undone with rpm-ostree rollback and one reboot, then the node checks again and reports Degraded
"reverted to A"; a rollback that did not bring the previous image back is "could not revert".
Real Systemd and Logind clients on a private bus (python-dbusmock); rpm-ostree is a recording
stand-in (no rpm-ostree on a test machine), the boot id a file in the scratch root."""

import base64
import json
import os

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.node import nodestate, revert
from agent.node.apply import apply_config
from agent.node.rebooted import report_rebooted
from tests.helpers import dbus as dbus_fixtures
from tests.helpers.healthdoubles import LiveRoot, Reporter

systemd_mock = dbus_fixtures.systemd_mock
logind_mock = dbus_fixtures.logind_mock

STATE = "/var/lib/node-agent"
CHECK = b"""#!/bin/sh
grep -qx good "$NODE_AGENT_ROOT/etc/probe.conf" || { echo "probe refuses: $(cat "$NODE_AGENT_ROOT/etc/probe.conf")"; exit 1; }
"""


class RecordingRpmOstree:
    """What the node asks of rpm-ostree; ``booted`` is the image the next status shows."""

    def __init__(self, booted):
        self.booted, self.calls = booted, []

    def available(self):
        return True

    def status(self):
        return {"deployments": [{"booted": True, "container-image-reference": f"ostree-unverified-registry:{self.booted}"}]}

    def booted_kargs(self):
        return ("root=UUID=1",)

    def rebase(self, image):
        self.calls.append(("rebase", image))

    def rollback(self):
        self.calls.append(("rollback",))


def config(name, image, conf):
    files = [("/etc/probe.conf", conf, 420), ("/etc/node-agent/health/required.d/50-probe", CHECK, 493)]
    ign = {"ignition": {"version": "3.4.0"},
           "storage": {"files": [{"path": p, "mode": m, "overwrite": True,
                                  "contents": {"source": "data:;base64," + base64.b64encode(d).decode()}}
                                 for p, d, m in files]}}
    return NodeConfig(ignition=json.loads(json.dumps(ign)), os_image_url=image, name=name)


def boot(top, boot_id):
    os.makedirs(os.path.join(top, "proc/sys/kernel/random"), exist_ok=True)
    with open(os.path.join(top, "proc/sys/kernel/random/boot_id"), "w") as f:
        f.write(boot_id + "\n")


@pytest.fixture
def updated(tmp_path, systemd_mock, logind_mock):
    """A node that ran rendered-a on quay.io/os@a, applied rendered-b (image quay.io/os@b, a
    probe.conf its check refuses) and rebooted into it."""
    top = str(tmp_path)
    root = LiveRoot(top)
    boot(top, "boot-1")
    a, b = config("rendered-a", "quay.io/os@a", b"good\n"), config("rendered-b", "quay.io/os@b", b"colour = blue\n")
    ro = RecordingRpmOstree("quay.io/os@a")
    apply_config(root, a, systemd=systemd_mock.client(), rpmostree=ro, state_dir=STATE)
    nodestate.save_current(root, STATE, a, "etag-a", "https://server/config/worker")
    apply_config(root, b, a, systemd=systemd_mock.client(), rpmostree=ro, state_dir=STATE)
    revert.remember_previous(root, STATE)
    nodestate.save_current(root, STATE, b, "etag-b", "https://server/config/worker")
    nodestate.mark_reboot_pending(root, STATE, b, "boot-1", healthTimeout=60.0)
    boot(top, "boot-2")
    ro.booted = "quay.io/os@b"
    return root, a, b, ro


def after_for(root, ro, systemd_mock, logind_mock):
    return lambda pending: revert.AfterUpdate(root, STATE, systemd=systemd_mock.client(), logind=logind_mock.client(),
                                              rpmostree=ro, timeout=float(pending["healthTimeout"]))


def test_an_os_update_whose_check_fails_after_its_reboot_is_rolled_back_and_reported_after_one_more_reboot(
        updated, tmp_path, systemd_mock, logind_mock):
    root, a, b, ro = updated
    reporter = Reporter(root)
    checks = after_for(root, ro, systemd_mock, logind_mock)
    assert report_rebooted(root, STATE, ro, reporter, "worker", b, after_for=checks) is True  # rebooting again
    assert ro.calls[-1] == ("rollback",) and logind_mock.method_names("Reboot") == ["Reboot"]
    assert (tmp_path / "etc/probe.conf").read_bytes() == b"good\n"
    assert nodestate.load_current(root, STATE)["name"] == "rendered-a" and reporter.sent == []
    boot(str(tmp_path), "boot-3")
    ro.booted = "quay.io/os@a"
    assert report_rebooted(root, STATE, ro, reporter, "worker", a, after_for=checks) is False
    [sent] = reporter.sent
    assert (sent["state"], sent["currentConfig"], sent["desiredConfig"], sent["currentImage"]) == (
        "Degraded", "rendered-a", "rendered-b", "quay.io/os@a")
    assert sent["reason"] == ("reverted to rendered-a after a failed health check of rendered-b: required check "
                              "50-probe: exit code 1: probe refuses: colour = blue")
    assert nodestate.reboot_pending(root, STATE) is None
    assert nodestate.load_reverted(root, STATE)["config"] == "rendered-b"


def test_a_rollback_that_boots_the_wrong_image_is_reported_as_could_not_revert(updated, tmp_path, systemd_mock,
                                                                              logind_mock):
    root, a, b, ro = updated
    reporter = Reporter(root)
    checks = after_for(root, ro, systemd_mock, logind_mock)
    assert report_rebooted(root, STATE, ro, reporter, "worker", b, after_for=checks)
    boot(str(tmp_path), "boot-3")  # ro.booted stays quay.io/os@b: the rollback did not take
    report_rebooted(root, STATE, ro, reporter, "worker", a, after_for=checks)
    assert reporter.sent[0]["state"] == "Degraded"
    assert reporter.sent[0]["reason"].startswith("could not revert to rendered-a: booted quay.io/os@b after the "
                                                 "reboot, but rendered-a needs quay.io/os@a")
    assert nodestate.load_reverted(root, STATE)["undone"] is False


def test_an_update_whose_checks_pass_after_its_reboot_reports_done(updated, tmp_path, systemd_mock, logind_mock):
    root, a, b, ro = updated
    (tmp_path / "etc/probe.conf").write_bytes(b"good\n")
    reporter = Reporter(root)
    assert report_rebooted(root, STATE, ro, reporter, "worker", b,
                           after_for=after_for(root, ro, systemd_mock, logind_mock)) is False
    assert [(s["state"], s["currentConfig"], s.get("reason")) for s in reporter.sent] == [("Done", "rendered-b", None)]
    assert ro.calls == [("rebase", "quay.io/os@b")] and logind_mock.method_names("Reboot") == []


def test_a_check_failing_after_the_reboot_with_no_previous_config_kept_is_a_valid_degraded_report(
        updated, tmp_path, systemd_mock, logind_mock):
    """No previous-config.json (a node updated by an older agent): the checks run against an empty
    config named "(unknown)" (agent/node/rebooted.py), a name no report may carry (the server's
    CONFIG_NAMES rule): the Degraded report names the config the node runs, and the server's
    validation takes it (healthdoubles.Reporter)."""
    root, a, b, ro = updated
    os.unlink(root.path(os.path.join(STATE, revert.PREVIOUS)))
    reporter = Reporter(root)
    assert report_rebooted(root, STATE, ro, reporter, "worker", b,
                           after_for=after_for(root, ro, systemd_mock, logind_mock)) is False
    [sent] = reporter.sent
    assert (sent["state"], sent["currentConfig"], sent["desiredConfig"]) == ("Degraded", "rendered-b", "rendered-b")
    assert sent["reason"] == ("no previous config to revert to after a failed health check of rendered-b: "
                              "required check 50-probe: exit code 1: probe refuses: colour = blue")
    assert "(unknown)" not in json.dumps(sent) and ro.calls == [("rebase", "quay.io/os@b")]
