"""A real boot: the RPM's units under a real systemd in a QEMU guest, against the real
node-config-server on the host's loopback (TLS, token), itself on a real Kubernetes control plane
(etcd, kube-apiserver, kube-controller-manager; tests/vm/kube.py plays the guest's kubelet).
One combined scenario (scenario.py);
each test below asserts one part of it from the guest's journal and files (read back from its
disk) and the server's API. Run alone with ``make vm-test``; docs/vm-test.md has the details.
"""

import calendar
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from tests.helpers.etcd_cluster import ETCD
from tests.helpers.kube_cluster import KUBECTL, find_kube_bin
from tests.vm import scenario
from tests.vm.journal import Journal, journalctl

pytestmark = pytest.mark.vm

MISSING = [tool for tool in ("qemu-system-x86_64", "debootstrap", "debugfs", "mkfs.ext4", "journalctl",
                             "rpmbuild") if shutil.which(tool) is None]


@pytest.fixture(scope="module")
def run():
    kept = os.environ.get("NODE_AGENT_VM_RESULT")
    if kept:  # assertions only, on a run kept by `python -m tests.vm.scenario DIR`
        yield scenario.load(kept)
        return
    if os.environ.get("NODE_AGENT_VM_TEST") != "1":
        pytest.skip("the VM test (minutes of QEMU) runs under make test and make vm-test, which set "
                    "NODE_AGENT_VM_TEST=1; a bare pytest skips it")
    if MISSING:
        pytest.skip(f"the VM test needs {', '.join(MISSING)} (make sysdeps installs them as root)")
    if not find_kube_bin() or not os.access(ETCD, os.X_OK) or not os.access(KUBECTL, os.X_OK):
        pytest.skip("the VM test's server runs on a Kubernetes control plane: make kube-bin builds "
                    "kube-apiserver/kube-controller-manager; make sysdeps installs etcd-server and kubectl")
    if os.geteuid() != 0:
        pytest.skip("the VM test builds its guest image with debootstrap and rpm --root: run it as root")
    # Not under pytest's basetemp: concurrent pytest runs of the same user prune it (keeping 3),
    # which can take a 20-minute run's directory away under it.
    workdir = tempfile.mkdtemp(prefix="node-agent-vm-")
    try:
        result = scenario.run(workdir)
        print(f"VM scenario timings (s): {result.timings}")
        print(f"result: {scenario.save(result)}")
        yield result
    finally:
        if os.environ.get("NODE_AGENT_VM_KEEP") != "1":  # else kept for NODE_AGENT_VM_RESULT
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def journal(run):
    return Journal(os.path.join(run.readback, "journal"))


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
    kubelet_in_boot1 = journal.messages(1, "kubelet stand-in up")
    if kubelet_in_boot1:  # it may start during the shutdown logind began; never before first boot ended
        assert journal.first_time(1, "kubelet stand-in up") > stamp_written
    up = journal.messages(2, "kubelet stand-in up")
    assert up and "node-role.kubernetes.io/vm=" in up[0]
    checks = {m.split()[1]: m for m in journal.messages(2, "vm-kubelet-check:")}
    assert set(checks) >= {"before", "after-restart", "after-disable", "enabled-twice"}, checks
    pids = {step: checks[step].split("pid=")[1].split()[0] for step in ("before", "after-restart", "after-disable")}
    assert len(set(pids.values())) == 1 and pids["before"] not in ("", "0"), checks
    assert all("state=active" in checks[s] for s in pids), checks
    assert checks["enabled-twice"].endswith("enabled"), checks


def test_containerd_runs_with_the_locally_made_images_imported_before_kubelet_on_cgroup_v1(run, journal):
    # vm-images.service lists containerd's k8s.io images once it has imported the tarballs that
    # tests/vm/image_archive.py wrote: ctr read them, containerd's CRI namespace holds them.
    for boot in (1, 2):
        listed = journal.messages(boot, "", _SYSTEMD_UNIT="vm-images.service")
        assert "localhost/pause:3.4" in listed and "localhost/busybox:1.35" in listed, listed
    imported = journal.first_time(2, "localhost/busybox:1.35", _SYSTEMD_UNIT="vm-images.service")
    assert imported < journal.first_time(2, "kubelet stand-in up")
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


# --- the control plane's records (tests/vm/kube.py): the API server's own order (resourceVersion,
# one etcd revision for Node and Pod writes) and host times, set against the guest's reboot as the
# host saw it. Why those reboot times: the guest's clock is a TCG guest's (it drifts and is set
# from the host only at boot), so nothing of the guest's own is compared with the host's.
# - "shutdown", "reset", "kernel-start": on the serial console, systemd stopping multi-user.target
#   (the first lines of the shutdown logind began for the agent's reboot), the kernel's "reboot:
#   Restarting system" ending boot 2 and its "Linux version" starting boot 3, each stamped when
#   the host read it (SerialMarks: at most 0.1 s after QEMU wrote it);
# - "announced": the server's record (reportedAt, the host's clock, cut to the second) of the
#   report the agent sends just before it asks logind to reboot (Working on the new config,
#   "reboot pending"; agent/node/update.py _carry_out). Cut to the second it can only bound the
#   reboot from below, so it is set against the shutdown, not against the drain (the drain may
#   end under a second before it).

def epoch(rfc3339: str) -> float:
    return calendar.timegm(time.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ"))


def report_seen(run, state: str, config: str):
    """The first report the scenario saw with ``state`` on ``config`` (the server's view)."""
    return next((v for v in run.reports if v["report"].get("state") == state
                 and v["report"].get("currentConfig") == config), None)


def node_flips(run):
    """The Node's events where spec.unschedulable changed, in the API's order."""
    nodes = [e for e in run.api_events if e["kind"] == "Node"]
    assert nodes and nodes[0]["type"] in ("ADDED", "LISTED") and not nodes[0]["unschedulable"], nodes[:3]
    return [e for prev, e in zip(nodes, nodes[1:]) if e["unschedulable"] != prev["unschedulable"]]


def serial_marks(run, mark: str):
    return [m for m in run.serial_marks if m["mark"] == mark]


def test_the_node_registers_with_the_worker_role_and_the_server_adds_the_pool_label(run):
    """MCO-650: the guest reported as pool vm from first boot; the Node its kubelet registers (the
    test's, see tests/vm/kube.py) carries only the worker role; the server adds the vm role."""
    nodes = [e for e in run.api_events if e["kind"] == "Node"]
    assert nodes and nodes[0]["type"] == "ADDED" and nodes[0]["roles"] == ["worker"], nodes[:2]
    labelled = next((e for e in nodes if "vm" in e["roles"]), None)
    assert labelled, nodes
    assert labelled["roles"] == ["vm", "worker"] and labelled["at"] - nodes[0]["at"] < 5.0, (nodes[0], labelled)
    labels = run.kube["nodeAtEnd"]["labels"]
    assert labels["node-role.kubernetes.io/vm"] == "" and labels["node-role.kubernetes.io/worker"] == ""
    assert run.node["pool"] == scenario.POOL


def test_day2_drain_cordons_and_evicts_before_the_reboot_and_uncordons_after_done(run):
    flips = node_flips(run)
    # One cordon and one uncordon in the whole run: for the day-2 reboot change, not for first boot
    # (no drain there) nor the restart-only change.
    assert [e["unschedulable"] for e in flips] == [True, False], flips
    cordon, uncordon = flips
    assert cordon["at"] > run.phase_started["reboot"], (cordon, run.phase_started)

    pods = [e for e in run.api_events if e["kind"] == "Pod"]
    running = [e for e in pods if e["rv"] < cordon["rv"] and e["nodeName"] == scenario.NODE and e["ready"]
               and not e["deleting"]]
    assert running and running[-1]["owner"] == "ReplicaSet", pods  # the workload ran there before the drain
    uid = running[-1]["uid"]
    # Its deletionTimestamp is the eviction's: the server may not delete pods (deploy/rbac.yaml),
    # and the test's kubelet only finishes deletions begun by someone else.
    evicted = next(e for e in pods if e["uid"] == uid and e["deleting"])
    gone = next((e for e in pods if e["uid"] == uid and e["type"] == "DELETED"), None)
    assert gone, f"the workload's pod {running[-1]['name']} was never deleted: {pods}"
    assert cordon["rv"] < evicted["rv"] < gone["rv"] < uncordon["rv"], (cordon, evicted, gone, uncordon)

    announced = report_seen(run, "Working", run.targets["reboot"])
    assert announced and announced["report"].get("reason") == "reboot pending", run.reports
    resets, starts = serial_marks(run, "reset"), serial_marks(run, "kernel-start")
    assert len(resets) == 2 and len(starts) == 3, run.serial_marks  # first boot's reboot, the day-2 one
    reset, boot3 = resets[1], starts[2]
    # Boot 2's shutdown (first boot reboots before multi-user.target is reached: no such line there).
    shutdowns = [m for m in serial_marks(run, "shutdown") if starts[1]["at"] < m["at"] < reset["at"]]
    assert len(shutdowns) == 1 and reset["at"] < boot3["at"], run.serial_marks
    shutdown = shutdowns[0]
    # Cordoned and drained (the order of those two is the API's, above) before the guest began to
    # shut down for its reboot; the agent announced that reboot before the reset.
    assert max(cordon["at"], gone["at"]) < shutdown["at"], (cordon, gone, shutdown)
    assert epoch(announced["reportedAt"]) <= reset["at"], (announced["reportedAt"], reset)
    # While the node was cordoned no pod of the workload was placed on it: the replacement the
    # ReplicaSet controller made waited (the test's scheduler skips a cordoned node, as
    # kube-scheduler's NodeUnschedulable filter does).
    placed = [e for e in pods if gone["rv"] < e["rv"] < uncordon["rv"] and e["nodeName"] == scenario.NODE]
    assert placed == [], placed

    done = report_seen(run, "Done", run.targets["reboot"])
    assert done, run.reports
    assert uncordon["at"] >= epoch(done["reportedAt"]) and uncordon["at"] > boot3["at"], (uncordon, done, boot3)
    # In the API's own record the uncordon is the write of that Done report (one patch).
    assert (uncordon["state"], uncordon["currentConfig"]) == ("Done", run.targets["reboot"]), uncordon
    # And the workload runs on the node again (its replacement, bound once the node was schedulable).
    again = [p for p in run.kube["podsAtEnd"] if p["nodeName"] == scenario.NODE and p["ready"]]
    assert again and again[0]["uid"] != uid, run.kube["podsAtEnd"]
