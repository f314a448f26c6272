"""A real boot: the RPM's units under a real systemd in a QEMU guest, against the real
node-config-server on the host's loopback (TLS, token), itself on a real Kubernetes control plane
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler), with the guest's own kubelet and
containerd. One combined scenario (scenario.py, run once: conftest.py); each test here asserts
one part of it from the guest's journal and files (read back from its disk) and the server's API;
test_vm_node.py asserts the cluster's side. Run alone with ``make vm-test``; docs/vm-test.md has
the details.
"""

import json
import os
import subprocess

import pytest

from tests.vm import scenario
from tests.vm.journal import journalctl

pytestmark = pytest.mark.vm
KUBELET_START = "vm-kubelet-start: /usr/bin/kubelet"  # the kubelet's start line (vm-kubelet-start)


def readback(run, path: str) -> str:
    with open(os.path.join(run.readback, path), encoding="utf-8") as f:
        return f.read()


def test_three_boots_one_reboot_each_for_first_boot_and_the_day2_change(run, journal):
    assert len(journal.boots) == 3, f"boots: {journal.boots}; serial log:\n{run.serial[-5000:]}"
    # Each reboot went through logind (the agent's D-Bus call), once per boot that asked for one.
    for boot in (1, 2):
        assert len(journal.messages(boot, "System is rebooting", SYSLOG_IDENTIFIER="systemd-logind")) == 1
    assert journal.messages(3, "System is rebooting", SYSLOG_IDENTIFIER="systemd-logind") == []
    assert journal.messages(1, "rebooting through systemd-logind", SYSLOG_IDENTIFIER="node-agent",
                            _SYSTEMD_UNIT="node-agent-firstboot.service")


def test_first_boot_runs_once_fetches_checks_skew_joins_the_pool_and_applies(run, journal):
    firstboot = journal.select(SYSLOG_IDENTIFIER="node-agent", NODE_AGENT_COMMAND="firstboot")
    assert firstboot and {journal.boot_of(e) for e in firstboot} == {1}
    assert len({e["NODE_AGENT_RUN"] for e in firstboot}) == 1, "first boot ran more than once"
    stages = {e.get("NODE_AGENT_STAGE") for e in firstboot}
    assert {"fetch", "skew", "pool", "apply", "act", "report"} <= stages, stages
    assert not [e for e in firstboot if int(e["PRIORITY"]) <= 3], "first boot logged errors"
    # Later boots skip it by its condition on the done-stamp.
    for boot in (2, 3):
        assert journal.messages(boot, "ConditionPathExists=!/var/lib/node-agent/firstboot.done",
                                UNIT="node-agent-firstboot.service")
    # Skew: the planted aleph file passed the served rules.
    assert journal.select(1, NODE_AGENT_STAGE="skew", NODE_AGENT_COMMAND="firstboot")
    # The custom pool: labels in kubelet-env (what was there kept), the server agrees.
    env = readback(run, "kubernetes/kubelet-env")
    assert "KUBELET_LOG_LEVEL=2" in env and "CUSTOM_KUBELET_LABELS=node-role.kubernetes.io/vm=" in env
    assert run.node["pool"] == scenario.POOL
    first_reports = [v["report"] for v in run.reports if v["report"].get("firstPivotConfig")]
    assert first_reports and first_reports[0]["firstPivotConfig"] == run.targets["first"], run.reports
    # Files and a unit enabled over systemd's D-Bus API (daemon-reload first, then started at boot 2).
    assert readback(run, "node-agent-vm/first-boot-file") == "written at first boot\n"
    wants = os.path.join(run.readback, "system", "multi-user.target.wants", "vm-agent-unit.service")
    assert os.path.islink(wants), "vm-agent-unit.service was not enabled"
    assert journal.messages(1, "Reloading", _PID="1") or journal.messages(1, "Reloading", SYSLOG_IDENTIFIER="systemd")
    assert journal.messages(2, "vm-agent-unit ran")


def test_kubelet_waits_for_first_boot_and_survives_its_restart_and_disable(run, journal):
    stamp_written = max(int(e["__REALTIME_TIMESTAMP"]) for e in journal.select(1, NODE_AGENT_COMMAND="firstboot"))
    kubelet_in_boot1 = journal.messages(1, KUBELET_START)
    if kubelet_in_boot1:  # it may start during the shutdown logind began; never before first boot ended
        assert journal.first_time(1, KUBELET_START) > stamp_written
    assert journal.messages(2, KUBELET_START, _SYSTEMD_UNIT="kubelet.service")
    # The pool's role label node-agent wrote to kubelet-env is one an upstream kubelet refuses:
    # left out of --node-labels (the server labels the Node, test_vm_node.py), said once a start.
    left_out = journal.messages(2, "left out of --node-labels", _SYSTEMD_UNIT="kubelet.service")
    assert left_out and "node-role.kubernetes.io/vm" in left_out[0], left_out
    assert not [m for m in journal.messages(2, KUBELET_START) if "node-role.kubernetes.io" in m]
    checks = {m.split()[1]: m for m in journal.messages(2, "vm-kubelet-check:")}
    assert set(checks) >= {"before", "after-restart", "after-disable", "enabled-twice"}, checks
    pids = {step: checks[step].split("pid=")[1].split()[0] for step in ("before", "after-restart", "after-disable")}
    assert len(set(pids.values())) == 1 and pids["before"] not in ("", "0"), checks
    assert all("state=active" in checks[s] for s in pids), checks
    assert checks["enabled-twice"].endswith("enabled"), checks


def test_containerd_runs_with_the_locally_made_images_imported_before_kubelet_on_cgroup_v1(run, journal):
    # vm-images.service lists containerd's k8s.io images once it has imported the tarballs that
    # tools/image_archive.py wrote: ctr read them, containerd's CRI namespace holds them.
    for boot in (1, 2):
        listed = journal.messages(boot, "", _SYSTEMD_UNIT="vm-images.service")
        assert "localhost/pause:3.4" in listed and "localhost/busybox:1.35" in listed, listed
    imported = journal.first_time(2, "localhost/busybox:1.35", _SYSTEMD_UNIT="vm-images.service")
    assert imported < journal.first_time(2, KUBELET_START)
    assert journal.messages(2, "containerd successfully booted", _SYSTEMD_UNIT="containerd.service")
    assert journal.messages(1, "systemd.unified_cgroup_hierarchy=0", _TRANSPORT="kernel")


def test_second_boot_reports_done_and_the_pool_counts_the_node(run, journal):
    assert journal.messages(2, "reported Done", _SYSTEMD_UNIT="node-agent.service")
    status = run.pool_after_second_boot["status"]
    assert status["machineCount"] == 1 and status["updatedMachineCount"] == 1, status
    final = run.pool["status"]
    assert final["machineCount"] == 1 and final["updatedMachineCount"] == 1, final


def test_day2_restart_without_reboot_then_drain_lease_and_one_reboot(run, journal):
    probe = journal.messages(contains="vm-probe started:")
    assert [journal.boot_of(e) for e in journal.select() if "vm-probe started: v2" in str(e.get("MESSAGE"))][0] == 2
    in_boot2 = journal.messages(2, "vm-probe started:")
    assert in_boot2[:2] == ["vm-probe started: v1", "vm-probe started: v2"], probe  # restarted, same boot
    # The server's record of the lease: taken for the reboot change only (a restart needs no drain),
    # ended by the Done report. What the lease did on the API is the next test's.
    events = [(e["action"], e.get("detail") or e.get("config")) for e in run.node["drainEvents"]]
    actions = [a for a, _ in events]
    assert actions == ["cordon", "drain", "uncordon"], events
    assert events[0] == ("cordon", run.targets["reboot"]), events
    report = run.node["report"]
    assert report["state"] == "Done" and report["currentConfig"] == run.targets["reboot"]
    assert readback(run, "node-agent-vm/needs-a-reboot") == "day 2\n"
    assert journal.messages(3, "vm-probe started: v2")


def test_journal_fields_are_queryable_with_journalctl(run):
    directory = os.path.join(run.readback, "journal")
    fetch = journalctl(directory, "NODE_AGENT_STAGE=fetch")
    assert fetch and all(e.get("NODE_AGENT_RUN") and e.get("NODE_AGENT_COMMAND") for e in fetch)
    assert {e["NODE_AGENT_COMMAND"] for e in fetch} >= {"firstboot"}
    warnings = journalctl(directory, "-p", "warning", "SYSLOG_IDENTIFIER=node-agent")
    assert any("rebooting" in str(e.get("MESSAGE")) for e in warnings), [e.get("MESSAGE") for e in warnings]
    assert all(int(e["PRIORITY"]) <= 4 for e in warnings)
    plain = subprocess.run(["journalctl", "-D", directory, "--no-pager", "NODE_AGENT_STAGE=fetch"],
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and "node-agent" in plain.stdout


def test_a_config_that_breaks_a_service_is_reverted_by_the_node_and_the_service_runs_again(run, journal):
    good, broken = run.targets["reboot"], run.targets["broken"]
    report = run.kube["revertReport"]
    assert report["currentConfig"] == good and report["desiredConfig"] == broken, report
    assert report["reason"].startswith(f"reverted to {good} after a failed health check of {broken}: unit "
                                       "vm-probe.service"), report
    # In boot 3, no reboot: vm-probe refused the shipped file, then ran again with the file put back.
    assert journal.messages(3, f"vm-probe refuses /etc/vm-probe.conf: '{scenario.BROKEN_PROBE}'")
    refused_at = journal.first_time(3, "vm-probe refuses")
    again = [e for e in journal.select(3) if "vm-probe started: v2" in str(e.get("MESSAGE"))
             and int(e["__REALTIME_TIMESTAMP"]) > refused_at]
    assert again, journal.messages(3, "vm-probe")
    assert len(journal.boots) == 3  # the revert needed no reboot
    # The node's own words, structured: the failed check (health) and the revert.
    assert journal.select(3, NODE_AGENT_STAGE="health", NODE_AGENT_CHECK="vm-probe.service")
    assert any(f"reverted to {good}" in str(e.get("MESSAGE")) for e in journal.select(3, NODE_AGENT_STAGE="revert"))
    # The server's Event on the pool and the MachineConfigNode's NodeDegraded say which check failed and that it reverted.
    events = run.kube["revertEvents"]
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "NodeReverted")], events
    assert events[0]["message"].startswith(f"Node {scenario.NODE} reverted to {good}"), events
    degraded = [c for c in run.kube["mcnAfterRevert"].get("conditions") or [] if c["type"] == "NodeDegraded"]
    assert degraded and "vm-probe.service" in degraded[0]["message"] and f"reverted to {good}" in degraded[0]["message"]
    # The admin took the MachineConfig back (the same rendered config as before): Done on it, no node step.
    assert run.targets["fixed"] == good
    after = run.kube["nodeAfterFix"]["report"]
    assert (after["state"], after["currentConfig"]) == ("Done", good), after
    assert json.loads(readback(run, "node-agent/current-config.json"))["name"] == good
