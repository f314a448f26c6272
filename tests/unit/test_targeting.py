"""The server's node targeting (agent/server/rollout/targeting.py): upstream's node controller rules
(getAllCandidateMachines, sortNodeList) and ours (failure budget, canary, priority, deferral)."""

import pytest

from agent.core.rolloutpolicy import (
    PRIORITY_LABEL,
    RolloutPolicy,
    parse_duration,
    policy_problems,
    rollout_policy,
)
from agent.server.rollout import candidates, rolloutstatus, targeting
from agent.server.rollout.targeting import Member

A, B = "rendered-worker-a", "rendered-worker-b"
UPSTREAM = RolloutPolicy()


def done(config):
    return {"state": "Done", "currentConfig": config, "desiredConfig": config}


def failed(current, desired, reason="a directory stands at /etc/nmstate/openshift/x"):
    return {"state": "Degraded", "currentConfig": current, "desiredConfig": desired, "reason": reason}


def working(current, desired):
    return {"state": "Working", "currentConfig": current, "desiredConfig": desired}


def fleet(n, report=None, **kw):
    return [Member(f"w{i}", dict(report or done(A)), created=float(i), **kw) for i in range(n)]


def with_reports(members, **reports):
    return [Member(m.name, reports.get(m.name, m.report), m.ours, m.not_ready, m.labels, m.created) for m in members]


def test_candidates_and_capacity_are_getAllCandidateMachines():
    nodes = fleet(4)
    got = targeting.get_all_candidate_machines(nodes, {}, B, None, 2)
    assert ([m.name for m in got.nodes], got.capacity, got.unavailable, got.failing) == (["w0", "w1", "w2", "w3"], 2, [], [])
    # a working node is unavailable: it takes capacity
    got = targeting.get_all_candidate_machines(with_reports(nodes, w3=working(A, B)), {}, B, None, 2)
    assert (got.capacity, got.unavailable, [m.name for m in got.nodes]) == (1, ["w3"], ["w0", "w1", "w2"])
    # a node failing on the target takes capacity too ("if the issue clears we don't want multiple to update at once")
    got = targeting.get_all_candidate_machines(with_reports(nodes, w3=failed(A, B)), {}, B, None, 2)
    assert (got.capacity, got.unavailable, got.failing) == (1, [], ["w3"])
    # a NotReady node is unavailable whatever it reports
    got = targeting.get_all_candidate_machines([Member("w0", done(A), not_ready="NotReady")] + nodes[1:], {}, B, None, 1)
    assert (got.capacity, got.unavailable) == (0, ["w0"])


def test_a_change_reaches_only_maxUnavailable_nodes_and_a_failing_one_halts_the_rollout():
    nodes = fleet(4)
    first = targeting.step(nodes, {}, B, None, 1, UPSTREAM, "", 100.0)
    assert first.targeted == ["w0"] and set(first.rollout["targets"]) == {"w0"}
    assert "maxUnavailable 1" in first.waiting and "w0" in first.waiting
    # w0 tried B and failed: nobody else is targeted, and the pool says which node failed
    failing = with_reports(nodes, w0=failed(A, B))
    again = targeting.step(failing, first.rollout, B, None, 1, UPSTREAM, "", 110.0)
    assert again.targeted == [] and set(again.rollout["targets"]) == {"w0"}
    assert again.halted.startswith("rollout halted: 1 node(s) failed on the target (w0)")
    states = {m.name: rolloutstatus.node_state(m, again.rollout, B, None)[0] for m in failing}
    assert states == {"w0": "Failed", "w1": "Waiting", "w2": "Waiting", "w3": "Waiting"}


def test_a_revert_retargets_the_failing_node_at_once_and_touches_no_other():
    nodes = with_reports(fleet(4), w0=failed(A, B))
    halted = targeting.step(nodes, {"config": B, "targets": {"w0": {"config": B, "at": 100.0}}}, B, None, 1,
                            UPSTREAM, False, 110.0)
    reverted = targeting.step(nodes, halted.rollout, A, None, 1, UPSTREAM, "", 120.0)
    assert reverted.targeted == ["w0"] and reverted.rollout["targets"]["w0"]["config"] == A
    assert not reverted.halted and reverted.rollout["config"] == A
    # w0 reports Done on A: the entry goes (its report says the same), nothing is left to do
    back = targeting.step(with_reports(nodes, w0=done(A)), reverted.rollout, A, None, 1, UPSTREAM, "", 130.0)
    assert back.rollout["targets"] == {} and back.targeted == []


def test_each_node_done_frees_its_slot_for_the_next_and_its_time_is_kept():
    nodes = fleet(3)
    rollout = targeting.step(nodes, {}, B, None, 1, UPSTREAM, "", 100.0).rollout
    nodes = with_reports(nodes, w0=done(B))
    second = targeting.step(nodes, rollout, B, None, 1, UPSTREAM, "", 112.5)
    assert second.targeted == ["w1"] and second.rollout["durations"] == [12.5]
    assert set(second.rollout["targets"]) == {"w1"}


def test_a_failure_budget_halts_earlier_or_later_than_upstream():
    nodes = with_reports(fleet(10), w0=failed(A, B))
    rollout = {"config": B, "targets": {"w0": {"config": B, "at": 1.0}}}
    # maxUnavailable 5, budget 1: the first failure halts the rollout (upstream would go on with 4 more)
    one = targeting.step(nodes, rollout, B, None, 5, RolloutPolicy(failure_budget=1), "", 2.0)
    assert one.targeted == [] and "failure budget is 1" in one.halted
    upstream = targeting.step(nodes, rollout, B, None, 5, UPSTREAM, "", 2.0)
    assert len(upstream.targeted) == 4 and not upstream.halted
    # maxUnavailable 1, budget 3: a failure no longer takes the only slot (upstream halts)
    three = targeting.step(nodes, rollout, B, None, 1, RolloutPolicy(failure_budget=3), "", 2.0)
    assert three.targeted == ["w1"] and not three.halted
    assert targeting.step(nodes, rollout, B, None, 1, UPSTREAM, "", 2.0).halted


def test_order_is_zone_then_oldest_as_sortNodeList_with_the_priority_label_first():
    zone = "topology.kubernetes.io/zone"
    nodes = [Member("young-a", done(A), labels={zone: "a"}, created=50.0),
             Member("old-b", done(A), labels={zone: "b"}, created=1.0),
             Member("old-a", done(A), labels={zone: "a"}, created=10.0),
             Member("nozone-old", done(A), created=0.0),
             Member("canary", done(A), labels={PRIORITY_LABEL: "10"}, created=99.0)]
    assert [m.name for m in candidates.sort_node_list(nodes)] == ["old-a", "young-a", "old-b", "nozone-old", "canary"]
    assert [m.name for m in targeting.rollout_order(nodes)] == ["canary", "old-a", "young-a", "old-b", "nozone-old"]
    assert [m.name for m in targeting.rollout_order(nodes, deferred=["canary", "old-a"])][-2:] == ["canary", "old-a"]
    got = targeting.step(nodes, {}, B, None, 2, UPSTREAM, "", 1.0)
    assert got.targeted == ["canary", "old-a"]


def test_a_canary_goes_first_and_the_rest_waits_its_time_after_it_is_done():
    nodes = fleet(4)
    policy = RolloutPolicy(canary_nodes=1, canary_wait=600.0)
    first = targeting.step(nodes, {}, B, None, 2, policy, "", 100.0)
    assert first.targeted == ["w0"] and "canary" in first.waiting
    nodes = with_reports(nodes, w0=done(B))
    done_at = targeting.step(nodes, first.rollout, B, None, 2, policy, "", 200.0)
    assert done_at.targeted == [] and done_at.rollout["canaryAt"] == 200.0 and "600 s more" in done_at.waiting
    assert targeting.step(nodes, done_at.rollout, B, None, 2, policy, "", 799.0).targeted == []
    assert targeting.step(nodes, done_at.rollout, B, None, 2, policy, "", 800.0).targeted == ["w1", "w2"]


def test_a_paused_pool_or_a_layered_one_whose_image_is_not_built_targets_nobody():
    paused = targeting.hold_reason(B, True, False, None, "")
    got = targeting.step(fleet(3), {}, B, None, 3, UPSTREAM, paused, 1.0)
    assert got.targeted == [] and "paused" in got.waiting
    building = targeting.hold_reason(B, False, True, None, "no MachineOSBuild of MachineOSConfig infra for " + B)
    got = targeting.step(fleet(3), {}, B, None, 3, UPSTREAM, building, 1.0)
    assert got.targeted == [] and "not ready (no MachineOSBuild" in got.waiting
    assert targeting.hold_reason(B, False, True, "reg/infra@sha256:1", "") == ""


def test_a_node_nodeagent_does_not_speak_for_is_counted_but_never_targeted():
    nodes = fleet(2) + [Member("mcd", {"state": "Working", "currentConfig": A, "desiredConfig": B}, ours=False)]
    got = targeting.step(nodes, {}, B, None, 2, UPSTREAM, "", 1.0)
    assert got.targeted == ["w0"]  # mcd is unavailable (working on B): one slot left, and never its own
    assert rolloutstatus.node_state(nodes[2], got.rollout, B, None)[0] == "Unmanaged"


def test_a_deferred_node_keeps_its_config_gives_its_slot_and_is_tried_again_last():
    nodes = fleet(3)
    rollout = targeting.step(nodes, {}, B, None, 1, UPSTREAM, "", 1.0).rollout  # w0 targeted
    rollout = targeting.defer(rollout, "w0", A, "PodDisruptionBudget app/web held its drain", 2.0)
    assert rollout["targets"]["w0"]["config"] == A and rollout["targets"]["w0"]["deferred"]["from"] == B
    nxt = targeting.step(nodes, rollout, B, None, 1, UPSTREAM, "", 3.0)
    assert nxt.targeted == ["w1"] and rolloutstatus.node_state(nodes[0], nxt.rollout, B, None)[0] == "Deferred"
    nodes = with_reports(nodes, w1=done(B))
    nxt = targeting.step(nodes, nxt.rollout, B, None, 1, UPSTREAM, "", 4.0)
    assert nxt.targeted == ["w2"]
    nodes = with_reports(nodes, w2=done(B))
    last = targeting.step(nodes, nxt.rollout, B, None, 1, UPSTREAM, "", 5.0)
    assert last.targeted == ["w0"] and last.rollout["targets"]["w0"] == {"config": B, "at": 5.0}


def test_the_taint_marks_every_node_not_desiring_the_pools_config_yet():
    assert candidates.needs_update_in_progress_taint(done(A), B, None)
    assert not candidates.needs_update_in_progress_taint(working(A, B), B, None)
    assert not candidates.needs_update_in_progress_taint(done(B), B, None)


def test_the_summary_names_who_updates_waits_failed_and_estimates_the_end():
    nodes = with_reports(fleet(5), w0=done(B), w1=failed(A, B), w2=working(A, B))
    rollout = {"config": B, "durations": [10.0, 20.0, 30.0], "waiting": "maxUnavailable 2: ...",
               "targets": {"w1": {"config": B, "at": 1.0}, "w2": {"config": B, "at": 1.0}}}
    got = rolloutstatus.summary(nodes, rollout, B, None, 2, 50.0)
    assert got["counts"] == {"Done": 1, "Failed": 1, "Updating": 1, "Waiting": 2}
    assert got["updating"] == ["w2"] and got["waiting"] == ["w3", "w4"] and got["failed"] == ["w1"]
    assert "directory stands" in got["reasons"]["w1"]
    assert got["estimate"]["seconds"] == 40  # 4 left, 2 at a time, a median of 20 s


@pytest.mark.parametrize("text,seconds", [("600", 600.0), ("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0)])
def test_canary_wait_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("annotations,bad", [
    ({"node-config-server.openshift.io/failure-budget": "0"}, "failure-budget"),
    ({"node-config-server.openshift.io/failure-budget": "one"}, "failure-budget"),
    ({"node-config-server.openshift.io/canary-nodes": "-1"}, "canary-nodes"),
    ({"node-config-server.openshift.io/canary-wait": "10 minutes"}, "canary-wait"),
    ({"node-config-server.openshift.io/canary-wait": "9999h"}, "canary-wait"),
])
def test_a_bad_policy_annotation_is_named(annotations, bad):
    problems = policy_problems(annotations)
    assert list(problems) == [f"node-config-server.openshift.io/{bad}"]
    assert rollout_policy({"metadata": {"annotations": annotations}}) == RolloutPolicy()  # the default meanwhile
