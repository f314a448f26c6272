"""The drain's cadence, state, Events, condition, views and metric, without a cluster (pure parts).

Upstream: machine-config-operator pkg/controller/drain/drain_controller.go (DefaultConfig(),
drainNode), pkg/controller/common/metrics.go (MCCDrainErr), pkg/daemon/drain.go
(drainRequired). The same against the real API server: tests/kube/test_kube_drain_cadence.py.
"""

import json
import subprocess
import sys

import pytest

from agent.core import disruption
from agent.server.cli import views
from agent.server.cli.main import build_parser
from agent.server.cli.serveargs import drain_cadence
from agent.server.cluster.drainpacer import Paced, blocker
from agent.server.cluster.kube_drain import DRAINED_FOR, DrainResult
from agent.server.cluster.kube_sync import drain_mark
from agent.server.http.metrics import RequestCounter, exposition
from agent.server.rollout import draincadence as dc
from agent.server.rollout.draincadence import Cadence, DrainState
from agent.server.rollout.mcnconditions import Facts, node_conditions

T0 = 1_700_000_000.0
SMALL = Cadence(attempt_timeout=90, retry=60, slow_retry=300, slow_after=600, fail_after=3600)
PDB = ("ns/app-1: Cannot evict pod as it would violate the pod's disruption budget. "
       "(PodDisruptionBudget ns/app: 1 healthy, 1 needed, 0 disruptions allowed)")


def test_the_defaults_are_the_mcos_default_config():
    # drain_controller.go DefaultConfig(): DrainHelperTimeout 90s, DrainRequeueDelay 1m,
    # DrainRequeueFailingDelay 5m, DrainRequeueFailingThreshold 10m, DrainTimeoutDuration 1h.
    assert Cadence() == SMALL


def run(state, now, cadence=SMALL, node="w1"):
    return dc.begin(state, cadence, node, now)


def test_an_attempt_runs_rounds_until_its_timeout_then_waits_a_minute():
    first = run(DrainState(), T0)
    assert first.run and first.changed and first.state.started == T0 and first.state.attempts == 1
    state, changed = dc.after_round(first.state, False, PDB)
    assert changed and state.last_error == PDB
    assert dc.after_round(state, False, PDB) == (state, False)  # the same blocker: nothing to write
    again = run(state, T0 + 89)
    assert again.run and not again.changed  # still the first attempt
    out = run(state, T0 + 90)  # timed out: failed, the next one a minute after the timeout
    assert not out.run and out.changed and out.wait == 60 and out.state.attempt_started is None
    assert out.state.next_attempt == T0 + 150 and out.events == ()
    assert run(out.state, T0 + 149).run is False
    second = run(out.state, T0 + 150)
    assert second.run and second.state.attempts == 2 and second.state.last_error == PDB


def walk(until, cadence=SMALL):
    """Attempt after attempt of a drain that never finishes, asked every 5 s; the Events."""
    state, events, now = DrainState(), [], T0
    while now <= until:
        step = run(state, now, cadence)
        events += [(now - T0, reason, message) for reason, message in step.events]
        state = step.state
        if step.run:
            state, _ = dc.after_round(state, False, PDB)
        now += 5
    return state, events


def test_retries_slow_down_after_ten_minutes_and_drain_failed_after_an_hour_still_retrying():
    state, events = walk(T0 + 3 * 3600)
    slow = [e for e in events if e[1] == "DrainThresholdExceeded"]
    failed = [e for e in events if e[1] == "DrainFailed"]
    assert slow and slow[0][0] > 600 and all(b[0] - a[0] == 390 for a, b in zip(slow, slow[1:]))  # 90 s + 5 min
    assert failed[0][0] > 3600 and failed[0][0] - 3600 <= 390  # the first attempt after the hour
    # each attempt after the hour emits it again, as upstream (90 s attempt + 5 min apart), still retrying
    assert all(b[0] - a[0] == 390 for a, b in zip(failed, failed[1:])) and len(failed) == 18
    assert state.failed is not None
    # drain_controller.go drainNode's texts, word for word
    assert failed[0][2] == "node w1: drain exceeded timeout: 1h0m0s. Will continue to retry."
    assert slow[0][2].startswith("Drain failed. Drain has been failing for more than 10 minutes. Waiting 5 minutes "
                                 "then retrying. Error message from drain: ")
    assert "PodDisruptionBudget ns/app" in slow[0][2]
    before = [e for e in events if e[0] < 600]
    assert before == []  # a minute apart before ten minutes: no Event


def test_a_finished_round_ends_the_drain_and_its_failure():
    state, _ = walk(T0 + 4000)
    assert state.failed is not None
    done, changed = dc.after_round(state, True, "")
    assert changed and done == DrainState() and not done.active
    assert set(dc.annotations(done).values()) == {None}  # the merge patch removes every key


def test_the_state_round_trips_through_annotations():
    state, _ = walk(T0 + 4000)
    written = {k: v for k, v in dc.annotations(state).items() if v is not None}
    assert set(written) <= set(dc.KEYS) and all(k.startswith("node-config-server.openshift.io/drain-") for k in written)
    assert dc.from_annotations(written) == state
    assert dc.from_annotations({dc.STARTED: "yesterday", dc.ATTEMPTS: "x"}) == DrainState()


def test_two_replicas_reading_the_same_state_start_the_same_attempt():
    state, _ = walk(T0 + 200)
    when = state.next_attempt or state.attempt_started
    a, b = run(state, when), run(state, when)
    assert a == b  # the Node's resourceVersion decides which one writes (drainpacer)


def test_small_thresholds_for_tests_and_checked_flags():
    tiny = Cadence(attempt_timeout=2, retry=1, slow_retry=1, slow_after=3, fail_after=4)
    _, events = walk(T0 + 30, tiny)
    assert any(e[1] == "DrainFailed" for e in events)
    args = build_parser().parse_args(["serve", "--drain-attempt-timeout", "2", "--drain-fail-after", "7200"])
    assert drain_cadence(args) == Cadence(attempt_timeout=2, fail_after=7200)
    assert drain_cadence(build_parser().parse_args(["serve"])) == Cadence()
    with pytest.raises(ValueError, match=r"--drain-retry 0: must be more than 0 seconds"):
        drain_cadence(build_parser().parse_args(["serve", "--drain-retry", "0"]))


def test_go_durations_as_the_mco_prints_them():
    assert [dc.duration(s) for s in (3600, 600, 90, 45, 5400)] == ["1h0m0s", "10m0s", "1m30s", "45s", "1h30m0s"]


def test_single_node_topology_never_drains():
    # pkg/daemon/drain.go drainRequired(): !isSingleNodeTopology(controlPlaneTopology)
    assert dc.drain_required("SingleReplica")[0] is False
    assert "SingleReplica" in dc.drain_required("SingleReplica")[1]
    assert dc.drain_required("HighlyAvailable") == (True, "")
    assert dc.drain_required(None) == (True, "")  # no Infrastructure object: plain Kubernetes drains


def test_the_mcn_drained_condition_names_the_blocker():
    state, _ = walk(T0 + 200)
    cond = dc.drain_condition(state, "now")
    assert cond["type"] == "Drained" and cond["status"] == "Unknown" and cond["reason"] == "UpdateExecutedDrained"
    assert cond["message"].startswith("Error: Node Drain has not succeeded. Error is: ns/app-1")
    assert "PodDisruptionBudget ns/app" in cond["message"] and cond["lastTransitionTime"] == dc.iso(T0)
    assert dc.drain_condition(DrainState(), "now") is None
    # kube_sync rewrites the MCN when the Node's drain state, our cordon's mark or the cordon moves
    assert drain_mark({}) == "" and drain_mark(dc.annotations(DrainState())) == ""
    assert drain_mark(dc.annotations(state)) != drain_mark(dc.annotations(dc.after_round(state, False, "x")[0]))
    assert drain_mark({DRAINED_FOR: "rendered-b"}) != drain_mark({DRAINED_FOR: "rendered-b"}, cordoned=True)
    report = {"state": "Working", "desiredConfig": "rendered-b", "currentConfig": "rendered-a"}
    facts = Facts(node="w1", desired="rendered-b", report=report, cordoned=True, drain=state, drained_for="rendered-b")
    drained = {c["type"]: c for c in node_conditions(None, facts, "2026-01-01T00:00:00Z")}["Drained"]
    assert drained["status"] == "Unknown" and drained["reason"] == "UpdateExecutedDrained"
    assert "PodDisruptionBudget ns/app" in drained["message"]
    idle = {c["type"]: c for c in node_conditions(None, Facts(node="w1", desired="rendered-b"), "t")}["Drained"]
    assert (idle["status"], idle["reason"]) == ("False", "NotYetOccurred")  # upstream's default, no drain


def test_the_blocker_names_the_pdb_else_the_pods_left():
    r = DrainResult(node="w1", done=False, blocked=[("ns/app-1", "429 ... (PodDisruptionBudget ns/app: ...)")],
                    still_running=["ns/app-1"])
    assert blocker(r) == "ns/app-1: 429 ... (PodDisruptionBudget ns/app: ...)"
    r = DrainResult(node="w1", done=False, still_running=["ns/a", "ns/b"])
    assert blocker(r) == "2 pod(s) still on the node: ns/a, ns/b"
    skipped = Paced(done=True, skipped="single-node cluster")
    assert skipped.to_dict() == {"required": False, "reason": "single-node cluster"}


def pool_view(drain_nodes):
    return {"metadata": {"name": "worker"}, "spec": {"configuration": {"name": "rendered-worker-b"}},
            "status": {"configuration": {"name": "rendered-worker-a"}, "machineCount": 2,
                       "nodeStates": {"Done": 1, "Working": 1},
                       "served": {"config": "rendered-worker-a", "image": ""},
                       "drain": {"maxUnavailable": 1, "holders": ["w1"], "nodes": drain_nodes}}}


def test_get_pools_describe_and_the_metric_show_a_failing_drain():
    state, _ = walk(T0 + 4000)
    d = state.to_dict()
    now = T0 + 4000
    table = views.pools_table([pool_view({"w1": d})], now)
    line = table.splitlines()[-1]
    assert line.startswith("worker: node w1 draining for 66m (since ") and "FAILING past the threshold" in line
    assert "blocked by ns/app-1" in line and "PodDisruptionBudget ns/app" in line
    text = views.describe_pool(pool_view({"w1": d}), now)
    assert "  w1: draining for 66m" in text
    node = {"name": "w1", "pool": "worker", "report": {"state": "Working"}, "drain": d}
    text = views.describe_node(node, None, now)
    assert "Drain:               draining for 66m" in text and "PodDisruptionBudget ns/app" in text
    metrics = exposition(RequestCounter(None), {"worker": pool_view({"w1": d, "w2": dict(d, failing=False)})}, 0,
                         False)
    assert "# HELP mcc_drain_err logs failed drain" in metrics
    assert 'mcc_drain_err{node="w1"} 1.0' in metrics and 'node="w2"' not in metrics
    assert 'mcc_drain_err{' not in exposition(RequestCounter(None), {"worker": pool_view({})}, 0, False)


def test_plan_says_a_single_node_cluster_does_not_drain(tmp_path):
    base = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "a"}, "spec": {"config": {"ignition": {"version": "3.4.0"}}}}
    new = json.loads(json.dumps(base))
    new["spec"]["kernelArguments"] = ["nosmt"]  # a reboot, so a drain
    (tmp_path / "a.json").write_text(json.dumps(base))
    (tmp_path / "b.json").write_text(json.dumps(new))

    def plan(*extra):
        return subprocess.run([sys.executable, "-m", "agent", "plan", "--from", str(tmp_path / "a.json"), "--to",
                               str(tmp_path / "b.json"), *extra], capture_output=True, text=True, check=True).stdout
    assert "Reboot (drain first: node-config-server cordons the Node and evicts its pods" in plan()
    single = plan("--control-plane-topology", "SingleReplica")
    assert single.rstrip().endswith(f"Reboot (no drain: {disruption.SINGLE_NODE}).")
    out = json.loads(plan("--control-plane-topology", "SingleReplica", "--json"))
    assert out["drain"] is False and out["reboot"] is True and "drainRequired" in out["drainSkipped"]
    assert json.loads(plan("--control-plane-topology", "HighlyAvailable", "--json"))["drain"] is True


def test_go_minutes_prints_a_float64_as_go_prints_it():
    assert [dc.go_minutes(s) for s in (600, 300, 3, 90)] == ["10", "5", "0.05", "1.5"]
