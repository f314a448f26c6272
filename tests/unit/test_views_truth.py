"""The operator views tell the truth (issue 57, item 4): a Degraded pool's reason under ``get
pools``, ``status``'s headline and reasons, no end estimate while a pool is paused."""

from agent.server.cli import rolloutview, viewcmds, views
from agent.server.rollout import progress

NOW = views.parse_time("2026-11-22T10:00:00Z")
TARGET = "rendered-worker-c7f50b7fa4545f0bbd8222ee6d0f9201"
RENDER_FAILED = "Failed to render configuration for pool worker: machineconfigs/bad.yaml: not an object"


def pool(name="worker", degraded="", render="", paused=False, rollout=None):
    conds = [{"type": "Updated", "status": "True"}, {"type": "Updating", "status": "False"},
             {"type": "NodeDegraded", "status": str(bool(degraded)), "message": degraded},
             {"type": "RenderDegraded", "status": str(bool(render)), "message": render},
             {"type": "Degraded", "status": str(bool(degraded or render)), "message": degraded}]
    return {"metadata": {"name": name, "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {"configuration": {"name": TARGET}, "paused": paused},
            "status": {"configuration": {"name": TARGET}, "machineCount": 2, "updatedMachineCount": 2,
                       "readyMachineCount": 2, "degradedMachineCount": 1 if degraded else 0, "conditions": conds,
                       "rollout": rollout or {}}}


def test_get_pools_names_why_each_degraded_pool_is_under_the_table():
    text = views.pools_table([pool("infra"), pool("worker", render=RENDER_FAILED),
                              pool("gpu", degraded='Node g1 is reporting: "disk full"')], NOW, width=200)
    under = text.splitlines()[4:]
    assert under == [f"worker: RenderDegraded: {RENDER_FAILED}", 'gpu: NodeDegraded: Node g1 is reporting: "disk full"']


def test_a_render_degraded_pool_keeps_the_cluster_update_from_complete_and_is_named_degraded():
    out = progress.cluster_progress({"worker": pool(render=RENDER_FAILED), "infra": pool("infra")})
    assert out["complete"] is False and out["degraded"] == ["worker"]
    assert out["blocking"] == [{"pool": "worker", "reason": f"degraded: {RENDER_FAILED}"}]


def test_a_state_problem_keeps_the_cluster_update_from_complete_once():
    named = "machineconfigs/bad.yaml: not an object"
    out = progress.cluster_progress({"worker": pool(render=RENDER_FAILED)}, problems=[named, "stale: old state"])
    assert out["degraded"] == ["state", "worker"]
    assert [b["reason"] for b in out["blocking"]] == [f"degraded: {RENDER_FAILED}", "state: stale: old state"]


def test_status_says_degraded_first_and_each_reason_under_it_not_under_the_table():
    pools = [pool(degraded='Node w2 is reporting: "disk full"')]
    text = viewcmds.render_status(progress.cluster_progress({"worker": pools[0]}), pools, NOW)
    assert "\ncluster update: NOT complete, DEGRADED (worker): what to fix is named below\n" \
           '  worker: degraded: 1 node(s) degraded: Node w2 is reporting: "disk full"\n' in text, text
    assert text.count("disk full") == 1


def test_a_paused_pool_shows_no_end_estimate():
    rollout = {"target": TARGET, "counts": {"Done": 1, "Waiting": 3}, "waiting": ["w2", "w3", "w4"],
               "estimate": {"seconds": 48, "from": "2 updates, 24 s each"}}
    running = rolloutview.pool_rollout_lines({"rollout": rollout})
    assert running[0].endswith("; ends in about 48 s (2 updates, 24 s each)")
    paused = rolloutview.pool_rollout_lines({"rollout": rollout}, paused=True)
    assert "ends in" not in "\n".join(paused)
    assert paused[0].endswith("; paused: no end estimate (nothing updates until spec.paused is false)")
    assert "ends in" not in views.describe_pool(pool(paused=True, rollout=rollout), NOW)


def test_a_degraded_report_without_an_image_keeps_the_image_of_the_config_it_still_runs():
    from agent.server.cluster.firstbootfacts import with_current_image

    before = {"state": "Done", "currentConfig": "rendered-worker-1", "currentImage": "quay.io/os@sha256:1"}
    failed = {"state": "Degraded", "currentConfig": "rendered-worker-1", "reason": "disk full"}
    assert with_current_image(before, failed)["currentImage"] == "quay.io/os@sha256:1"
    moved = dict(failed, currentConfig="rendered-worker-2")  # another config: its image is not known
    assert "currentImage" not in with_current_image(before, moved)
    assert "currentImage" not in with_current_image(before, dict(failed, state="Working"))


def test_the_degraded_nodes_named_leave_out_a_name_waiting_for_approval():
    from agent.server.cluster.poolview import degraded_reasons

    entries = {"w1": {"state": "Degraded", "reason": "disk full"},
               "w2": {"state": "Degraded", "reason": "ghost", "approval": "Pending"},
               "w3": {"state": "Done", "degradedReason": "node matches more than one custom pool"}}
    assert degraded_reasons(entries, 2) == ['Node w1 is reporting: "disk full"',
                                            'Node w3 is reporting: "node matches more than one custom pool"']
    assert degraded_reasons(entries, 3)[-1] == "and 1 more: `node-config-server get nodes`"
