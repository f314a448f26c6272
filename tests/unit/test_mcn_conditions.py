"""A MachineConfigNode's conditions through one update, as upstream writes them
(agent/server/rollout/mcnconditions.py; openshift/machine-config-operator 7ff337a4
pkg/upgrademonitor/upgrade_monitor.go ``generateAndApplyMachineConfigNodes`` applying the phases
of pkg/daemon/update.go and pkg/controller/drain/drain_controller.go): every type of
``allConditionTypes`` from the first write with upstream's default, the in-progress phases
Unknown, Cordoned and Drained True as the node is cordoned and drained, ``Updated`` resetting the
others to False with "Action during update to X: ...", a condition that does not change keeping
its lastTransitionTime, NodeDegraded's "Node X upgrade failure. <error>"."""

from agent.server.rollout import draincadence, firstboots
from agent.server.rollout import mcnconditions as mc
from agent.server.rollout.draincadence import DrainState
from agent.server.rollout.mcnconditions import Facts

A, B = "rendered-worker-a", "rendered-worker-b"
T = [f"2026-11-27T04:00:0{i}Z" for i in range(10)]
UPSTREAM_TYPES = ["UpdatePrepared", "UpdateExecuted", "UpdatePostActionComplete", "UpdateComplete", "Resumed",
                  "Drained", "AppliedFilesAndOS", "Cordoned", "RebootedNode", "Updated", "Uncordoned", "NodeDegraded",
                  "PinnedImageSetsDegraded", "PinnedImageSetsProgressing"]
DRAINING = DrainState(started=1.8e9, attempts=1, attempt_started=1.8e9)


def by_type(conds):
    return {c["type"]: c for c in conds}


def report(state, current, desired, **more):
    return dict({"pool": "worker", "state": state, "currentConfig": current, "desiredConfig": desired}, **more)


class Node:
    """One node's MCN conditions, carried from write to write as the API holds them."""

    def __init__(self):
        self.conds = None

    def write(self, at, **facts):
        self.conds = mc.node_conditions(self.conds, Facts(node="w1", **facts), at)
        return by_type(self.conds)


def test_allConditionTypes_every_one_from_the_first_write_with_upstreams_default():
    conds = mc.node_conditions(None, Facts(node="w1", desired=""), T[0])
    assert [c["type"] for c in conds] == UPSTREAM_TYPES  # 12 and the PinnedImageSets pair; no UpdateCompatible
    assert all(c == {"type": c["type"], "status": "False", "reason": "NotYetOccurred",
                     "message": f"This node has not yet entered the {c['type']} phase", "lastTransitionTime": T[0]}
               for c in conds)
    # a Node node-agent does not report for: no phase, the conditions held stay (a real MCD's)
    theirs = [dict(c, status="True", reason="X", message="theirs") for c in conds] + [
        {"type": "ImagePulledFromRegistry", "status": "True", "reason": "X", "message": "m", "lastTransitionTime": T[0]}]
    assert mc.node_conditions(theirs, Facts(node="w1", desired=A), T[1]) == theirs


def test_one_update_with_a_drain_and_a_reboot_through_every_phase():
    n = Node()
    c = n.write(T[0], desired=A, report=report("Done", A, A))
    assert (c["Updated"]["status"], c["Updated"]["reason"]) == ("True", "Updated")
    # drain_controller.go: cordoned, draining (the server targeted B; the node still Done on A)
    c = n.write(T[1], desired=B, report=report("Done", A, B), cordoned=True, drain=DRAINING, drained_for=B)
    assert c["UpdatePrepared"]["status"] == "True"
    assert c["UpdatePrepared"]["message"] == "Update Compatible. Post Cfg Actions: [] Drain Required: true"
    assert (c["Updated"]["status"], c["Updated"]["message"]) == ("False", mc.MANUAL)
    assert (c["Cordoned"]["status"], c["Cordoned"]["reason"], c["Cordoned"]["message"]) == (
        "True", "UpdateExecutedCordoned", "Cordoned node. The node is reporting Unschedulable = true")
    assert (c["Drained"]["status"], c["Drained"]["reason"]) == ("Unknown", "UpdateExecutedDrained")
    assert (c["UpdateExecuted"]["status"], c["UpdateExecuted"]["reason"], c["UpdateExecuted"]["message"]) == (
        "Unknown", "Drained", "Draining Node as part of update executed phase")
    # each phase dated by its own time (mcnconditions.phase_times): the cordon by the drain's start
    cordoned_at = draincadence.iso(DRAINING.started)
    assert c["Cordoned"]["lastTransitionTime"] == c["Drained"]["lastTransitionTime"] == cordoned_at
    assert c["UpdatePrepared"]["lastTransitionTime"] == T[1] and c["NodeDegraded"]["lastTransitionTime"] == T[0]
    # a failing attempt: still Unknown, naming what blocks it; the time of the transition kept
    failing = DrainState(started=1.8e9, attempts=2, last_error="ns/app: PodDisruptionBudget ns/app")
    c = n.write(T[2], desired=B, report=report("Done", A, B), cordoned=True, drain=failing, drained_for=B)
    assert c["Drained"]["message"].startswith("Error: Node Drain has not succeeded. Error is: ns/app")
    assert c["UpdateExecuted"]["message"] == "Node Drain has not succeeded"
    assert c["Drained"]["lastTransitionTime"] == cordoned_at
    # drained
    c = n.write(T[3], desired=B, report=report("Done", A, B), cordoned=True, drained_for=B)
    assert (c["Drained"]["status"], c["Drained"]["message"]) == (
        "True", f"Drained node. The drain is complete as the desired drainer matches current drainer: drain-{B}")
    # the node applies B (update.go): needs an OS update, not SSH keys
    c = n.write(T[4], desired=B, report=report("Working", A, B), cordoned=True, drained_for=B, needs=(True, False))
    assert (c["UpdateExecuted"]["status"], c["UpdateExecuted"]["reason"]) == ("Unknown", "AppliedFilesAndOS")
    assert (c["AppliedFilesAndOS"]["status"], c["AppliedFilesAndOS"]["reason"], c["AppliedFilesAndOS"]["message"]) == (
        "Unknown", "UpdateExecutedAppliedFilesAndOS",
        "Applying files and new OS config to node. OS will  need an update. SSH Keys will not need an update")
    assert c["Drained"]["lastTransitionTime"] == T[3]  # True since the drain ended
    # applied; waits for its reboot
    c = n.write(T[5], desired=B, report=report("Working", B, B, reason="reboot pending"), cordoned=True,
                drained_for=B)
    assert (c["UpdateExecuted"]["status"], c["UpdateExecuted"]["message"]) == (
        "True", "Updated the Files and OS on disk as a part of the in progress phase")
    assert c["AppliedFilesAndOS"]["message"] == \
        "Applied files and new OS config to node. OS did  need an update. SSH Keys did not need an update"
    assert (c["RebootedNode"]["status"], c["RebootedNode"]["message"]) == ("Unknown", "Upgrade requires a reboot.")
    # Done on B after the reboot, uncordoned: Updated, the others False "Action during update to B: ..."
    c = n.write(T[6], desired=B, report=report("Done", B, B))
    assert c["Updated"]["status"] == "True" and c["Updated"]["lastTransitionTime"] == T[6]
    assert all(x["status"] == "False" for t, x in c.items() if t != "Updated")
    prefix = f"Action during update to {B}: "
    assert c["Cordoned"]["message"] == prefix + "Cordoned node. The node is reporting Unschedulable = true"
    assert c["Uncordoned"]["message"] == prefix + "UnCordoned node. The node is reporting Unschedulable = false"
    assert c["UpdateComplete"]["message"] == prefix + "Uncordoned Node as part of completing upgrade phase"
    assert c["RebootedNode"]["message"].startswith(prefix) and c["Resumed"]["message"].startswith(prefix)
    assert c["Drained"]["message"].startswith(prefix + "Drained node.")
    for untouched in ("UpdatePostActionComplete", "NodeDegraded", "PinnedImageSetsDegraded"):
        assert c[untouched]["reason"] == "NotYetOccurred" and c[untouched]["lastTransitionTime"] == T[0]
    # the same facts again: nothing changes, no time moves
    before = n.conds
    assert n.write(T[9], desired=B, report=report("Done", B, B)) == by_type(before)


def test_an_update_with_no_drain_and_no_reboot():
    n = Node()
    n.write(T[0], desired=A, report=report("Done", A, A))
    c = n.write(T[1], desired=B, report=report("Working", A, B), needs=(False, True))
    assert c["UpdatePrepared"]["message"] == "Update Compatible. Post Cfg Actions: [] Drain Required: false"
    assert (c["Drained"]["status"], c["Drained"]["message"]) == ("False", "Node Drain Not required for this update.")
    assert c["Cordoned"]["reason"] == "NotYetOccurred"
    c = n.write(T[2], desired=B, report=report("Done", B, B))
    assert c["Updated"]["status"] == "True"
    assert c["UpdatePostActionComplete"]["message"] == f"Action during update to {B}: Changes do not require a reboot"
    assert c["AppliedFilesAndOS"]["message"] == (f"Action during update to {B}: Applied files and new OS config to "
                                                 "node. OS did not need an update. SSH Keys did  need an update")
    assert c["RebootedNode"]["reason"] == "NotYetOccurred"


def test_a_failed_update_is_NodeDegraded_with_upstreams_message_and_the_phase_it_stopped_in():
    n = Node()
    n.write(T[0], desired=A, report=report("Done", A, A))
    c = n.write(T[1], desired=B, report=report("Degraded", A, B, reason="applying failed: No space left on device"))
    assert (c["NodeDegraded"]["status"], c["NodeDegraded"]["reason"], c["NodeDegraded"]["message"]) == (
        "True", "NodeDegraded", "Node w1 upgrade failure. applying failed: No space left on device")
    # upstream's e2e (ValidateMCNConditionOnNodeDegrade): AppliedFilesAndOS and UpdateExecuted Unknown
    assert c["AppliedFilesAndOS"]["status"] == "Unknown" and c["UpdateExecuted"]["status"] == "Unknown"
    c = n.write(T[2], desired=B, report=report("Done", B, B))  # recovered: Updated resets it
    assert c["NodeDegraded"]["status"] == "False"
    assert c["NodeDegraded"]["message"].startswith(f"Action during update to {B}: Node w1 upgrade failure.")


def test_reboot_pending_is_what_node_agent_reports_before_the_reboot_a_config_needs():
    assert mc.reboot_pending(report("Working", B, B, reason="reboot pending"))
    first = {"run": "r", "rebootPending": True}
    assert mc.reboot_pending(report("Working", B, B, firstBoot=first))
    assert not mc.reboot_pending(report("Working", B, B, firstBoot=dict(first, rebooted="2026-11-27T04:00:00Z")))
    assert not mc.reboot_pending(report("Working", A, B))  # applying
    assert not mc.reboot_pending(report("Working", B, B))  # a forced re-apply of what it runs
    assert not mc.reboot_pending(report("Done", B, B, reason="reboot pending"))


def test_update_needs_reads_the_os_and_the_users_of_the_two_rendered_configs():
    old = {"osImageURL": "quay.io/os@sha256:1", "config": {"passwd": {"users": [{"name": "core"}]}}}
    assert mc.update_needs(old, dict(old, osImageURL="quay.io/os@sha256:2")) == (True, False)
    assert mc.update_needs(old, dict(old, config={"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k"]}]}})) \
        == (False, True)
    assert mc.update_needs(old, dict(old, kernelType="realtime")) == (True, False)
    assert mc.update_needs(None, old) is None


def test_our_first_boot_condition_is_last_and_never_reset_by_Updated():
    decision = firstboots.Decision(outcome=firstboots.DONE, stage="report", since=1.8e9, last_report=1.8e9,
                                   deadline=1.8e9 + 60, message="done")
    n = mc.node_conditions(None, Facts(node="w1", desired=A, report=report("Working", A, B)), T[0], decision)
    conds = mc.node_conditions(n, Facts(node="w1", desired=B, report=report("Done", B, B)), T[1], decision)
    assert conds[-1]["type"] == mc.FIRST_BOOT and conds[-1]["status"] == "True" and len(conds) <= 20
