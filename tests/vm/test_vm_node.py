"""The cluster's side of the VM scenario (scenario.py, run once: conftest.py): the guest's real
kubelet registers its Node, the server labels it into its pool, the real scheduler places the
workloads there, and the day-2 drain goes through the Eviction API, a PodDisruptionBudget and the
kubelet stopping containers before the node reboots. Asserted from the API server's own records
(tests/vm/kube.py Recorder: every watch event with its resourceVersion, one etcd revision for
Node, Pod and pool writes, and the host time it arrived), the guest's journal and the serial
console; nothing in the test writes the Node or a pod.

Reboot times, on the host's clock: the guest's clock is a TCG guest's (it drifts and is set from
the host only at boot), so nothing of the guest's is compared with the host's. On the serial
console, each stamped when the host read it (SerialMarks, at most 0.1 s late): "shutdown"
(systemd stopping multi-user.target: the first lines of the shutdown logind began for the agent's
reboot), "reset" (the kernel's "reboot: Restarting system") and "kernel-start" ("Linux
version"). "announced" is the server's record (reportedAt, the host's clock, cut to the second)
of the report the agent sends just before it asks logind to reboot: cut to the second, it only
bounds the reboot from below.
"""

import itertools
import os

import pytest

from tests.vm import scenario
from tests.vm.kube import APP, DAEMONSET
from tests.vm.summary import (
    changes,
    epoch,
    first,
    node_flips,
    of_kind,
    pods_by_uid,
    ready_changes,
    serial_marks,
    stopped,
    summary,
    timeline,
)

pytestmark = pytest.mark.vm
NODE = scenario.NODE


def report_seen(run, state: str, config: str):
    """The first report the scenario saw with ``state`` on ``config`` (the server's view)."""
    return next((v for v in run.reports if v["report"].get("state") == state
                 and v["report"].get("currentConfig") == config), None)


def reboot_marks(run):
    """(boot 2's shutdown, its reset, boot 3's kernel start) on the serial console."""
    resets, starts = serial_marks(run, "reset"), serial_marks(run, "kernel-start")
    assert len(resets) == 2 and len(starts) == 3, run.serial_marks  # first boot's reboot, the day-2 one
    reset, boot3 = resets[1], starts[2]
    # First boot reboots before multi-user.target is reached: no shutdown line of its own.
    shutdowns = [m for m in serial_marks(run, "shutdown") if starts[1]["at"] < m["at"] < reset["at"]]
    assert len(shutdowns) == 1 and reset["at"] < boot3["at"], run.serial_marks
    return shutdowns[0], reset, boot3


def app_pods(run):
    """The ReplicaSet's pods, each as its events in the API's order, oldest pod first."""
    pods = [events for events in pods_by_uid(run).values() if events[0]["app"] == APP]
    return sorted(pods, key=lambda events: events[0]["rv"])


def test_the_real_kubelet_registers_the_node_and_the_server_adds_the_pool_label(run):
    """The guest's kubelet registers its Node (the API's managedFields name the kubelet; it reports
    its own version and containerd's) with no role label: an upstream kubelet refuses role labels
    in --node-labels and NodeRestriction forbids it to set them. The server adds the pool's
    (MCO-650), from the report of a node whose first boot fetched that pool's config."""
    nodes = of_kind(run, "Node")
    assert nodes and nodes[0]["type"] == "ADDED" and nodes[0]["roles"] == [], nodes[:2]
    assert "kubelet" in nodes[0]["managers"], nodes[0]
    info = run.kube["nodeAtEnd"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.20.2" and info["containerRuntimeVersion"].startswith("containerd://1.6"), info
    first_report = run.reports[0]
    assert first_report["seenAt"] < nodes[0]["at"], (first_report, nodes[0])  # first boot came first
    labelled = next((e for e in nodes if "vm" in e["roles"]), None)
    assert labelled and labelled["roles"] == ["vm"], nodes
    labels = run.kube["nodeAtEnd"]["labels"]
    assert labels["node-role.kubernetes.io/vm"] == "" and labels["kubernetes.io/hostname"] == NODE, labels
    assert run.node["pool"] == scenario.POOL


def test_workloads_land_only_once_the_node_is_in_its_pool_and_run_in_containerd(run):
    """The admin's workloads were created before any node existed; the real scheduler bound each
    pod only after the server had labelled the Node into pool vm (their nodeSelector), and the
    kubelet ran each in a containerd container."""
    labelled = next(e for e in of_kind(run, "Node") if "vm" in e["roles"])
    pods = pods_by_uid(run)
    assert {events[0]["app"] for events in pods.values()} == {APP, DAEMONSET}
    # The ReplicaSet's 2 pods waited, Pending; the DaemonSet made its pod once a node matched.
    waited = [events[0]["app"] for events in pods.values() if events[0]["rv"] < labelled["rv"]]
    assert waited == [APP, APP], pods
    first_three = sorted(pods.values(), key=lambda events: events[0]["rv"])[:3]
    for events in first_three:
        bound = next((e for e in events if e["nodeName"]), None)
        assert bound and bound["nodeName"] == NODE and bound["rv"] > labelled["rv"], (bound, labelled)
        running = first(events, phase="Running", ready=True)
        assert running and running["containerIDs"][0].startswith("containerd://"), events


def test_the_drain_evicts_waits_on_the_pdb_naming_it_and_never_breaks_it(run):
    """Cordon, then the Eviction API: one ReplicaSet pod goes at once; the other is held by the
    PDB (minAvailable 1: its replacement cannot run on the only, cordoned, node) and the Node names
    the PDB; that pod stays until the admin lowers minAvailable. The DaemonSet's pod is left."""
    flips = node_flips(run)
    assert len(flips) == 2, flips
    cordon = flips[0]
    early = app_pods(run)[:2]
    evictions = sorted((first(events, deleting=True) for events in early), key=lambda e: e["rv"])
    assert all(evictions) and evictions[0]["rv"] > cordon["rv"], (cordon, evictions)
    blocked = run.kube["blocked"]
    assert f"PodDisruptionBudget {scenario.WORKLOAD}/{APP}:" in blocked["message"], blocked
    # In the API's order (resourceVersions: one etcd's revisions), not the times a watch and a
    # poll read them: the first pod evicted before the Node named the PDB, the second only after
    # the admin's change, which came after the block was seen and two drain rounds more.
    assert evictions[0]["rv"] < blocked["rv"], (evictions[0], blocked)
    assert evictions[1]["rv"] > run.kube["pdbRelaxedRv"] > blocked["rv"], (evictions[1], run.kube)
    assert run.kube["pdbRelaxedAt"] > blocked["at"] + 9, run.kube
    daemon = [events for events in pods_by_uid(run).values() if events[0]["app"] == DAEMONSET]
    assert len(daemon) == 1 and not first(daemon[0], deleting=True), daemon


def test_the_kubelet_stops_the_containers_before_the_node_reboots(run, journal):
    """Each evicted pod's containers were stopped by the kubelet (the API: their status, then the
    pod's removal; the guest: the kubelet's StopContainer to containerd for the IDs of those its
    status showed running, and each container's processes gone, its scope deactivated) before the
    guest began to shut down for its reboot; the agent announced that reboot before the reset.
    (A container whose start failed is not stopped: a fresh-clone CI run's loaded guest had
    containerd's StartContainer time out, and the kubelet made another. A StopContainer may fail
    after the container exited: on a loaded guest containerd's kill at the grace period's end met
    the exited container's shim closing, "ttrpc: closed", and the kubelet saw the container die.)"""
    shutdown, reset, _ = reboot_marks(run)
    rebooting = journal.first_time(2, "System is rebooting", SYSLOG_IDENTIFIER="systemd-logind")
    for events in app_pods(run)[:2]:
        gone = stopped(events)
        assert gone and gone["at"] < shutdown["at"], (events[-3:], shutdown)
        ids = {i.split("://", 1)[1] for e in events for i in e["runningIDs"]}
        assert ids, events
        for cid in ids:
            asked = journal.first_time(2, f'StopContainer for \\"{cid}\\" with timeout', _SYSTEMD_UNIT="containerd.service")
            exited = journal.first_time(2, "Deactivated successfully", UNIT=f"cri-containerd-{cid}.scope")
            assert asked < exited < rebooting, (asked, exited, rebooting)
    announced = report_seen(run, "Working", run.targets["reboot"])
    assert announced and announced["report"].get("reason") == "reboot pending", run.reports
    assert epoch(announced["reportedAt"]) <= reset["at"], (announced["reportedAt"], reset)


def test_the_node_goes_unknown_while_down_and_ready_after_the_reboot(run):
    """The node lifecycle controller's own view (nothing writes the Node's status but the kubelet
    and the controller): Ready turns Unknown while the guest is down, True again in boot 3."""
    shutdown, _, boot3 = reboot_marks(run)
    down = [e for e in ready_changes(run) if e["ready"] != "True" and e["at"] > shutdown["at"]]
    assert down and down[0]["ready"] == "Unknown", ready_changes(run)
    up = next((e for e in ready_changes(run) if e["ready"] == "True" and e["rv"] > down[0]["rv"]), None)
    assert up and up["at"] > boot3["at"], (up, boot3)


def test_done_uncordons_in_the_same_write_and_the_replacements_run_there(run):
    flips = node_flips(run)  # one cordon, one uncordon in the whole run
    assert [e["unschedulable"] for e in flips] == [True, False], flips
    cordon, uncordon = flips
    assert cordon["at"] > run.phase_started["reboot"], (cordon, run.phase_started)
    _, _, boot3 = reboot_marks(run)
    done = report_seen(run, "Done", run.targets["reboot"])
    assert done and uncordon["at"] >= epoch(done["reportedAt"]) and uncordon["at"] > boot3["at"], (uncordon, done)
    # In the API's own record the uncordon is the write of that Done report (one patch).
    assert (uncordon["state"], uncordon["currentConfig"]) == ("Done", run.targets["reboot"]), uncordon
    # Nothing of the workload was placed on the node while it was cordoned (kube-scheduler's
    # NodeUnschedulable filter); the replacements ran there after.
    for events in pods_by_uid(run).values():
        bound = next((e for e in events if e["nodeName"]), None)
        assert not bound or not cordon["rv"] < bound["rv"] < uncordon["rv"], bound
    end = [p for p in run.kube["podsAtEnd"] if p["nodeName"] == NODE and p["ready"] and not p["deleting"]]
    assert sorted(p["app"] for p in end) == [APP, APP, DAEMONSET], run.kube["podsAtEnd"]
    before = {e["uid"] for events in app_pods(run)[:2] for e in events}
    assert not before & {p["uid"] for p in end if p["app"] == APP}
    # The DaemonSet's pod was not evicted; the reboot stopped its container and the kubelet
    # started a new one.
    daemon = next(events for events in pods_by_uid(run).values() if events[0]["app"] == DAEMONSET)
    assert len({i for e in daemon for i in e["containerIDs"]}) >= 2, daemon[-3:]


def test_the_pool_counts_follow_the_node_as_kubectl_get_mcp_shows(run):
    """Pool vm's status as the API holds it: nothing counted before the Node existed (a report
    alone counts for nothing), the node updated and ready after boot 2, unavailable from its
    targeting through the drain, updated and ready again after the uncordon."""
    # Until the host pressed the power button at the end: a power-off slower than the node
    # monitor's grace period (25 s under load) turns the Node Unknown, and the pool with it.
    off = serial_marks(run, "shutdown")[-1]["at"]
    pools = [e for e in of_kind(run, "MachineConfigPool") if e["machineCount"] is not None and e["at"] < off]
    registered = of_kind(run, "Node")[0]
    before = [e for e in pools if e["rv"] < registered["rv"]]
    assert before and all(e["machineCount"] == 0 for e in before), pools[:3]
    counts = [e["c"] for e in changes([dict(e, c=scenario.machine_counts(e)) for e in pools], "c")]
    cordon, uncordon = node_flips(run)[:2]
    # The server targets the node before it cordons, and the node is unavailable from then on. The
    # pool's status is written once a second by the pool loop, from the store as its round found
    # it: the cordon may come before the first status that counts the targeting (the node, told
    # at once by its held fetch, asked for its drain first; seen: cordon 0.28 s before it). Such
    # stale statuses read as before the new rendering (1, 1, 1, 0), or as the new rendering not
    # targeted yet (1, 0, 0, 0: not updated, not unavailable, as the MCO's status reads between
    # its render and node controllers; a fresh-clone CI run's did), in that order. From the first
    # that counts the node unavailable until the uncordon: never ready nor available. (Updated may
    # turn 1 before the uncordon: the node's Done is in the store a moment before the Node patch
    # that uncordons it; a fresh clone's run saw (1, 1, 0, 1) there.)
    stale_kinds = ((1, 1, 1, 0), (1, 0, 0, 0))
    at_cordon = [scenario.machine_counts(e) for e in pools if e["rv"] < cordon["rv"]][-1]
    during = [scenario.machine_counts(e) for e in pools if cordon["rv"] < e["rv"] < uncordon["rv"]]
    if at_cordon in stale_kinds:
        stale = [at_cordon, *itertools.takewhile(lambda c: c in stale_kinds, during)]
        unavailable = during[len(stale) - 1:]
    else:
        stale, unavailable = [], [at_cordon, *during]
    assert stale == sorted(stale, reverse=True) and unavailable and unavailable[0] == (1, 0, 0, 1), (
        at_cordon, during, counts)
    assert all((c[0], c[2], c[3]) == (1, 0, 1) for c in unavailable), (at_cordon, during, counts)
    assert (1, 1, 1, 0) in counts[:counts.index((1, 0, 0, 1))] and counts[-1] == (1, 1, 1, 0), counts
    # kubectl get mcp as an admin reads it (printer columns of OpenShift's CRD).
    # UPDATED UPDATING DEGRADED MACHINECOUNT READYMACHINECOUNT UPDATEDMACHINECOUNT DEGRADEDMACHINECOUNT
    for key, row in (("mcpAfterSecondBoot", "True False False 1 1 1 0"), ("mcpWhileDraining", "False True False 1 0 0 0"),
                     ("mcpAtEnd", "True False False 1 1 1 0")):
        line = next(ln for ln in run.kube[key].splitlines() if ln.startswith("vm "))
        assert " ".join(row.split()) in " ".join(line.split()), run.kube[key]


def test_the_summary_lists_the_node_the_pods_and_the_events_in_time_order(run):
    s = summary(run)
    assert s["node"]["kubeletVersion"] == "v1.20.2" and s["node"]["containerRuntimeVersion"]
    assert {p["app"] for p in s["pods"]} == {APP, DAEMONSET}
    assert all(p["containerIDs"] and p["phases"] for p in s["pods"] if p["node"] == NODE)
    whats = [e["what"] for e in timeline(run)]
    times = [e["at"] for e in s["events"]]
    assert times == sorted(times)
    # (the lifecycle controller may call the node Unknown before or after boot 3's kernel starts)
    order = ["Node registered", "Node labelled", "pod app-", "cordon", "evicted", "drain blocked", "admin:",
             "containers stopped", "shutdown begins", "Node Ready=Unknown", "Node Ready=True", "pod app-"]
    positions = []
    for what in order:
        hits = [i for i, w in enumerate(whats) if what in w and (not positions or i > positions[-1])]
        assert hits, f"no {what!r} after {order[len(positions) - 1]!r} in the timeline:\n" + "\n".join(
            f"{e['at']:.3f} {e['what']}" for e in timeline(run))  # whole: a tuple's repr is cut to 6 items
        positions.append(hits[0])
    assert s["wallTime"] and s["wallTime"] > 0


def test_the_node_is_pending_with_nothing_on_its_node_until_its_kubelets_certificate_proves_it(run, journal):
    """Issue 45, with the real kubelet's certificate: first boot registers with the bootstrap token
    alone (pending: nothing it reports is written to a Node); in boot 2 the kubelet's TLS
    bootstrap leaves its client certificate in /var/lib/kubelet/pki, node-agent presents it and
    the server proves the name (approvedBy kubelet); only then does the Node get the MCD's
    annotations and the pool's label, still before any workload is bound to it (the test above)."""
    regs = run.registrations
    assert regs and regs[0]["state"] == "Pending" and not regs[0].get("approvedBy"), regs
    proven = next((r for r in regs if r.get("approvedBy") == "kubelet"), None)
    assert proven is not None and proven["state"] == "Approved", regs
    last_pending = max(r["seenAt"] for r in regs if r["state"] == "Pending")
    nodes = of_kind(run, "Node")
    before = [e for e in nodes if e["at"] <= last_pending]
    assert all(e["state"] is None and e["currentConfig"] is None and "vm" not in e["roles"] for e in before), before
    labelled = next(e for e in nodes if "vm" in e["roles"])
    assert labelled["at"] > last_pending and any(e["state"] for e in nodes), (labelled, last_pending)
    # the standard layout a bootstrapped kubelet leaves, and node-agent presenting it in boot 2
    pki = os.path.join(run.readback, "pki")
    assert os.path.islink(pki + "/kubelet-client-current.pem"), os.listdir(pki)
    presented = journal.messages(contains="presenting the kubelet's client certificate "
                                          "/var/lib/kubelet/pki/kubelet-client-current.pem")
    assert presented, "node-agent never presented the kubelet's certificate"
    assert not journal.messages(1, "presenting the kubelet's client certificate")  # first boot: the kubelet has none
