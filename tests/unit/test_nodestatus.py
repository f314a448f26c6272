"""The pool's numbers from Node objects (agent/server/rollout/nodestatus.py), each test named after
the upstream function it mirrors (openshift/machine-config-operator pkg/controller/node/status.go,
node_controller.go, pkg/controller/common/layered_node_state.go)."""

import pytest

from agent.server.cluster import poolview
from agent.server.rollout import nodestatus, progress

WORKER = {"metadata": {"name": "worker"},
          "spec": {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}}
MASTER = {"metadata": {"name": "master"},
          "spec": {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/master": ""}}}}
INFRA = {"metadata": {"name": "infra"},
         "spec": {"nodeSelector": {"matchExpressions": [{"key": "node-role.kubernetes.io/infra",
                                                         "operator": "Exists"}]}}}
GPU = {"metadata": {"name": "gpu"}, "spec": {"nodeSelector": {"matchLabels": {"gpu": "yes"}}}}
EMPTY = {"metadata": {"name": "empty"}, "spec": {"nodeSelector": {}}}
POOLS = {"worker": WORKER, "master": MASTER, "infra": INFRA, "gpu": GPU, "empty": EMPTY}
W, M, INFRA_ROLE = "node-role.kubernetes.io/worker", "node-role.kubernetes.io/master", "node-role.kubernetes.io/infra"


def node(name, labels=None, ready="True", disk="False", network=None, unschedulable=False):
    conds = [{"type": "Ready", "status": ready}, {"type": "DiskPressure", "status": disk}]
    if network is not None:
        conds.append({"type": "NetworkUnavailable", "status": network})
    obj = {"metadata": {"name": name, "labels": {W: ""} if labels is None else labels}, "status": {"conditions": conds}}
    if unschedulable:
        obj["spec"] = {"unschedulable": True}
    return obj


def report(current, desired=None, state="Done", **more):
    return dict({"currentConfig": current, "desiredConfig": current if desired is None else desired,
                 "state": state}, **more)


@pytest.mark.parametrize("labels,want", [
    ({W: ""}, "worker"), ({M: "", W: ""}, "master"), ({W: "", INFRA_ROLE: ""}, "infra"), ({INFRA_ROLE: ""}, "infra"),
    ({"other": "x"}, None), ({W: "", INFRA_ROLE: "", "gpu": "yes"}, None), ({M: "", INFRA_ROLE: ""}, "master"),
    ({M: "", W: "", INFRA_ROLE: ""}, "master"), ({W: "", "kubernetes.io/os": "windows"}, None),
    ({W: "", "kubernetes.io/os": "linux"}, "worker")])
def test_GetPoolsForNode_GetPrimaryPoolForNode(labels, want):
    """pkg/helpers/helpers.go: master beats worker; one custom pool beats worker (matchExpressions
    Exists included); master with one custom pool is master ("defaulting to master"); two custom
    pools is no pool, with upstream's reason; a Windows Node is in no pool (IsWindows); an empty
    selector selects nothing."""
    pool, why = nodestatus.pool_for_node(POOLS, labels)
    assert pool == want
    assert bool(why) == (want is None)
    if labels == {W: "", INFRA_ROLE: "", "gpu": "yes"}:
        assert why == "it belongs to 2 custom roles (gpu, infra), cannot proceed with this Node"
    assert nodestatus.master_over_custom(POOLS, labels) == ("infra" if M in labels and INFRA_ROLE in labels else "")


def test_getNodesForPool_of_every_pool_in_one_pass_agrees_with_each():
    nodes = [node("a"), node("b", {W: "", INFRA_ROLE: ""}), node("c", {M: "", W: ""}), node("d", {"x": "y"}),
             node("e", {M: "", INFRA_ROLE: ""}), node("f", {W: "", "kubernetes.io/os": "windows"})]
    groups = nodestatus.group_by_pool(POOLS, nodes)
    for name in POOLS:
        assert groups.get(name, []) == nodestatus.nodes_for_pool(name, POOLS, nodes)
    assert {k: [n["metadata"]["name"] for n in v] for k, v in groups.items()} == {
        "worker": ["a"], "infra": ["b"], "master": ["c", "e"]}


def test_getNodesForPool_follows_the_labels():
    """Labelling a Node moves it; removing the label moves it back."""
    def names(pool):
        return [n["metadata"]["name"] for n in nodestatus.nodes_for_pool(pool, POOLS, nodes)]

    nodes = [node("a"), node("b", {W: "", INFRA_ROLE: ""})]
    assert (names("infra"), names("worker")) == (["b"], ["a"])
    nodes[1]["metadata"]["labels"] = {W: ""}
    assert (names("infra"), names("worker")) == ([], ["a", "b"])


@pytest.mark.parametrize("kwargs,why", [
    ({}, ""), ({"ready": "False"}, "node n is reporting NotReady=False"),
    ({"ready": "Unknown"}, "node n is reporting NotReady=Unknown"),
    ({"disk": "True"}, "node n is reporting OutOfDisk=True"),
    ({"network": "True"}, "node n is reporting NetworkUnavailable=True"),
    ({"unschedulable": True}, "node n is reporting Unschedulable")])
def test_CheckNodeReady(kwargs, why):
    assert nodestatus.check_node_ready(node("n", **kwargs)) == why


@pytest.mark.parametrize("rep,want", [
    (report("a"), True), (report("a", "b"), False), (report("a", state="Working"), False), (None, False),
    (report("a", currentImage="i", desiredImage="i"), True), (report("a", desiredImage="i"), False),
    # Ours, on purpose: node-agent reports the image it booted as currentImage on every pool; with
    # no desired image (not layered) that is done, where upstream's isNodeImageDone wants neither.
    (report("a", currentImage="i", desiredImage=""), True), (report("a", currentImage="i"), True)])
def test_IsNodeDone(rep, want):
    assert nodestatus.is_node_done(rep) is want


def test_IsDone_needs_the_pools_target_and_on_a_plain_pool_no_desired_image():
    assert nodestatus.is_done(report("t"), "t", None)
    assert not nodestatus.is_done(report("old"), "t", None)
    assert not nodestatus.is_done(report("t", currentImage="i", desiredImage="i"), "t", None)
    assert nodestatus.is_done(report("t", currentImage="i", desiredImage="i"), "t", "i")


@pytest.mark.parametrize("kwargs,rep,want", [
    ({}, report("a"), False),  # done on what it desires: available, even with a new target elsewhere
    ({}, report("a", "b", state="Working"), True),  # working
    ({}, report("a", "b"), True),  # not started on a config it desires
    ({}, report("a", "b", state="Degraded"), False),  # failing: may be retargeted
    ({}, report("a", "b", state="Unreconcilable"), False),
    ({"ready": "False"}, report("a"), True), ({"unschedulable": True}, report("a"), True),
    ({}, None, True)])  # a Node the MCD never ran on
def test_IsUnavailableForUpdate(kwargs, rep, want):
    n = node("n", **kwargs)
    assert nodestatus.is_unavailable_for_update(nodestatus.check_node_ready(n), rep) is want


def test_calculateStatus_three_nodes_on_the_old_config_none_started_are_available():
    """A new target, no node started: upstream 0 unavailable (machine - ready gave 3)."""
    members = [(node(n), report("old")) for n in "abc"]
    st = nodestatus.calculate_status(members, "new", None)
    assert (st.machine, st.updated, st.ready, st.unavailable, st.degraded) == (3, 0, 0, 0, 0)


def test_calculateStatus_getReadyMachines_needs_the_node_ready_and_not_cordoned():
    members = [(node("a"), report("t")), (node("b", unschedulable=True), report("t")),
               (node("c", ready="False"), report("t")), (node("d"), report("old", "t", state="Working"))]
    st = nodestatus.calculate_status(members, "t", None)
    assert (st.machine, st.updated, st.ready, st.unavailable) == (4, 3, 1, 3)
    assert st.unavailable_nodes == ["b", "c", "d"]


def test_calculateStatus_getDegradedMachines_and_the_NodeDegraded_message():
    members = [(node("a"), report("old", "t", state="Degraded", reason='bad "file"')),
               (node("b"), report("t", state="Unreconcilable", reason="no")), (node("c"), report("t"))]
    st = nodestatus.calculate_status(members, "t", None)
    assert st.degraded == 2
    assert st.degraded_reasons == ['Node a is reporting: "bad \\"file\\""', 'Node b is reporting: "no"']
    counts = progress.Counts(machine=3, updated=1, ready=1, degraded=2, unavailable=0,
                             degraded_reasons=st.degraded_reasons)
    conds = {c["type"]: c for c in progress.conditions(counts, "t", "t", "")}
    assert conds["NodeDegraded"]["reason"] == "2 nodes are reporting degraded status on sync"
    assert conds["NodeDegraded"]["message"] == ", ".join(st.degraded_reasons)


def test_calculateStatus_Updated_needs_ready_and_none_unavailable():
    counts = progress.Counts(machine=2, updated=2, ready=1, unavailable=1)
    conds = {c["type"]: c for c in progress.conditions(counts, "t", "t", "")}
    assert conds["Updated"]["status"] == "False" and conds["Updating"]["status"] == "True"


def test_calculateStatus_paused_pool_is_neither_updated_nor_updating():
    counts = progress.Counts(machine=2, updated=0, ready=0, unavailable=0)
    conds = {c["type"]: c for c in progress.conditions(counts, "t", "old", "", paused_for="t")}
    assert conds["Updated"]["status"] == "False" and conds["Updating"]["status"] == "False"
    assert conds["Updating"]["message"] == "Pool is paused; will not update to MachineConfig t"
    # All on the target, a new rendering waiting: upstream's target has moved, so not Updated either.
    done = progress.Counts(machine=2, updated=2, ready=2, unavailable=0)
    row = {"held": "pool is paused: the new rendered config new waits", "rendered": "new"}
    conds = {c["type"]: c for c in poolview.conditions(done, "t", "t", row, paused=True)}
    assert (conds["Updated"]["status"], conds["Updating"]["status"]) == ("False", "False")
    assert conds["Updating"]["message"] == "Pool is paused; will not update to MachineConfig new"
    unpaused = {c["type"]: c for c in poolview.conditions(done, "t", "t", {"held": ""})}
    assert unpaused["Updated"]["status"] == "True"


@pytest.mark.parametrize("limit,unavailable,holders,asking,want", [
    (1, [], [], "a", 1), (1, ["b"], [], "a", 0), (2, ["b"], [], "a", 1),
    (1, ["a"], [], "a", 1),  # the asking node itself is the candidate
    (1, ["b"], ["b"], "a", 1),  # a lease holder is counted by the lease store, not twice
    (75, [f"x{i}" for i in range(80)], [], "a", 0)])
def test_getAllCandidateMachines_capacity_subtracts_every_unavailable_node(limit, unavailable, holders, asking,
                                                                           want):
    assert nodestatus.drain_capacity(limit, unavailable, holders, asking) == want


def test_drain_capacity_counts_the_nodes_the_server_targeted_once_by_their_targeting():
    """A wave of 10 targeted nodes (all unavailable: not done) asking for their leases at once: one
    holds its lease already, which the asking replica's list of holders does not show yet. Each is
    granted (the lease store counts the holder); another unavailable Node still takes a slot."""
    wave = [f"t{i}" for i in range(10)]
    assert nodestatus.drain_capacity(10, wave, [], "t1", targeted=wave) == 10
    assert nodestatus.drain_capacity(10, wave, [], "t1") == 1  # before: t0, holding its lease, counted twice
    assert nodestatus.drain_capacity(10, wave + ["cordoned"], [], "t1", targeted=wave) == 9
    assert nodestatus.drain_capacity(10, wave[:9] + ["deferred"], [], "t1", targeted=wave[:9]) == 9


def test_slim_node_keeps_only_what_the_rules_read():
    full = node("n", {W: ""}, network="False", unschedulable=True)
    full["metadata"].update(resourceVersion="7", uid="u-1", annotations={"machineconfiguration.openshift.io/state": "Done",
                                                              "other.io/x": "y" * 1000},
                            managedFields=[{"manager": "kubelet"}])
    full["status"].update(images=[{"names": ["x"] * 10}], conditions=full["status"]["conditions"] + [
        {"type": "MemoryPressure", "status": "False", "message": "m"}])
    slim = nodestatus.slim_node(full)
    assert slim == {"metadata": {"name": "n", "uid": "u-1", "resourceVersion": "7", "labels": {W: ""},
                                 "annotations": {"machineconfiguration.openshift.io/state": "Done"}},
                    "spec": {"unschedulable": True},
                    "status": {"conditions": [{"type": "Ready", "status": "True"},
                                              {"type": "DiskPressure", "status": "False"},
                                              {"type": "NetworkUnavailable", "status": "False"}]}}
    assert nodestatus.check_node_ready(slim) == nodestatus.check_node_ready(full)


def test_IsNodeDone_reads_the_mcd_annotations_of_a_node_whose_report_is_not_held():
    ann = {"machineconfiguration.openshift.io/currentConfig": "t", "machineconfiguration.openshift.io/desiredConfig": "t",
           "machineconfiguration.openshift.io/state": "Done", "other.io/x": "y"}
    rep = nodestatus.report_from_annotations(ann)
    assert rep == {"currentConfig": "t", "desiredConfig": "t", "state": "Done"}
    assert nodestatus.is_node_done(rep) and nodestatus.report_from_annotations({}) is None


def test_IsDone_a_config_never_served_to_the_node_counts_as_updated_but_proves_nothing():
    """The server's own mark (proof: false, agent/server/store/nodestore.py contribution) keeps the
    MCO-1940 gate closed whatever the counts say."""
    members = [(node("a"), report("t", _server={"proof": False})), (node("b"), report("t"))]
    st = nodestatus.calculate_status(members, "t", None)
    assert (st.updated, st.proven) == (2, 1)



def test_describe_node_says_a_master_matching_a_custom_pool_is_defaulting_to_master():
    """GetPoolsForNode's "Found master node that matches selector for custom pool X, defaulting to
    master": what describe node says of the Node (kube_nodes.NodeTruth.describe)."""
    import types

    from agent.server.cluster.kube_nodes import NodeTruth

    nodes = {"m0": node("m0", {M: "", INFRA_ROLE: ""}), "m1": node("m1", {M: ""})}
    cache = types.SimpleNamespace(snapshot=lambda: nodes, get=nodes.get)
    truth = NodeTruth(cache, types.SimpleNamespace(node=lambda name: None))
    said = truth.describe("m0", POOLS)
    assert said["pool"] == "master" and "also matches custom pool infra, defaulting to master" in said["membership"]
    assert "defaulting" not in truth.describe("m1", POOLS)["membership"]
