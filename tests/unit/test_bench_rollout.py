"""benchmarks/bench_rollout.py's figures from what it observes (the pure helpers; the benchmark itself
runs in ``make bench``, not here): the ideal, the peak of overlapping updates, the API server's
write counts, the delays from a targeting to the node's learning it and from a Done to the next
targeting, and the table rows of a run; the layered change's objects (read as the server reads
them) and its checks (benchmarks/rollout_layered.py)."""

from benchmarks import bench_rollout as br
from benchmarks import rollout_layered as layered
from benchmarks.common import table

METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 12
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="cluster",subresource="",verb="LIST",version="v1"} 40
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="eviction",verb="POST",version="v1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="machineconfiguration.openshift.io",resource="machineconfigs",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_duration_seconds_bucket{verb="PATCH",le="0.05"} 99
"""


def test_the_ideal_is_whole_waves_of_maxunavailable_nodes():
    assert br.ideal_seconds(1000, 100, 10.0) == 100.0
    assert br.ideal_seconds(999, 100, 10.0) == 100.0
    assert br.ideal_seconds(1001, 100, 10.0) == 110.0
    assert br.ideal_seconds(5, 0, 2.0) == 10.0  # maxUnavailable is at least 1


def test_peak_concurrency_counts_spans_open_at_one_instant_a_span_ending_as_another_starts_does_not_overlap():
    assert br.peak_concurrency([]) == 0
    assert br.peak_concurrency([(0, 10), (1, 2), (3, 4)]) == 2
    assert br.peak_concurrency([(0, 1), (1, 2), (2, 3)]) == 1
    assert br.peak_concurrency([(0, 5), (1, 5), (2, 5), (5, 6)]) == 3
    assert br.mean_concurrency([(0, 10), (0, 5), (5, 10)]) == 2.0
    assert br.mean_concurrency([]) == 0.0


def test_write_counts_keep_write_verbs_by_resource_subresource_and_code():
    counts = br.write_counts(METRICS)
    assert counts == {"nodes PATCH 200": 12.0, "nodes PATCH 409": 3.0, "pods/eviction POST 201": 1.0,
                      "machineconfigs POST 201": 2.0}
    later = dict(counts, **{"nodes PATCH 200": 20.0, "configmaps PUT 200": 4.0})
    writes = br.writes_between(counts, later, {"machineconfigs POST 201": 0, "configmaps PUT 200": 1})
    assert writes == {"configmaps PUT 200": 3, "nodes PATCH 200": 8}
    assert br.by_resource({"nodes PATCH 200": 8, "nodes PATCH 409": 2, "configmaps PUT 200": 3}) == {
        "nodes": 10, "configmaps": 3}


def events():
    """Two nodes of one wave: a learns at 1.2 and is Done at 6; b is deferred, told again later."""
    return [{"t": 1.2, "n": "a", "e": "learned", "c": "B"}, {"t": 1.3, "n": "a", "e": "working", "c": "B"},
            {"t": 1.5, "n": "b", "e": "learned", "c": "B"}, {"t": 4.0, "n": "b", "e": "deferred", "c": "B"},
            {"t": 6.0, "n": "a", "e": "done", "c": "B"}, {"t": 6.1, "n": "c", "e": "learned", "c": "A"},
            {"t": 9.0, "n": "b", "e": "learned", "c": "B"}, {"t": 14.0, "n": "b", "e": "done", "c": "B"}]


def test_spans_end_at_done_or_at_a_deferral_and_a_node_told_twice_has_both():
    spans = br.spans_of(events(), "B")
    assert spans == {"a": (1.2, 6.0), "b#deferred": (1.5, 4.0), "b": (9.0, 14.0)}
    assert br.peak_concurrency(spans.values()) == 2


def test_learning_is_timed_from_the_latest_targeting_before_it_and_handovers_from_the_last_done():
    targeted = {("a", "B"): [1.0], ("b", "B"): [1.0, 8.5], ("c", "A"): [6.0]}
    assert [round(x, 3) for x in br.learn_delays(targeted, events(), "B")] == [0.2, 0.5, 0.5]
    assert br.latest_before([1.0, 8.5], 0.5) is None
    # b's second targeting (8.5) came 2.5 s after a's Done (6.0); the first wave (1.0) is no handover
    assert br.handovers(targeted, events(), "B", first_wave_until=1.0) == [2.5]


def run(target, wall, peak, pinned=None):
    out = {"nodes": 10, "counted": 10 if pinned is None else 9, "maxUnavailable": 2, "update_s": 5.0,
           "target": target, "ideal_s": 25.0, "wall_s": wall, "target_s": 0.5, "first_targeted_s": 0.5,
           "first_learned_s": 0.9, "peak": peak, "mean_updating": 1.6, "view": {"updating_mean": 1.5}, "learn_s": br.quantiles([0.3, 0.4, 0.5]),
           "handover_s": br.quantiles([0.1]), "writes_by_resource": {"nodes": 60, "machineconfignodes": 40},
           "writes_total": 100, "writes_per_node": 10.0,
           "cpu_s": {"server": 3.0, "apiserver+etcd": 5.0, "agents": 0.5}}
    if pinned is not None:
        out["pinned"] = pinned
    return out


def test_rows_of_a_run_compare_each_rollout_with_its_ideal_and_say_whether_the_peak_stayed_within():
    pinned = {"deferred_after_s": 6.2, "named_in_status": True, "named_reason": "held by a PodDisruptionBudget",
              "pod_kept": True, "evictions": {"pods/eviction POST 429": 3}, "done_after_unblock_s": 4.0}
    doc = {"sizes": [10], "maxUnavailable": "10%", "runs": {"10": {
        "no_drain": [run("B", 30.0, 2), run("C", 28.0, 2)], "pinned": run("D", 40.0, 2, pinned)}}}
    rows = br.rows_from(doc)
    by_case = {r.case: r for r in rows}
    plain = by_case["10 nodes, no drain: every node Done"]
    assert plain.median_s == 29.0 and plain.samples == [30.0, 28.0] and plain.floor.startswith("ideal, 10 nodes")
    assert by_case["10 nodes: peak updating at once"].note.startswith("maxUnavailable 2: never above it")
    drained = by_case["10 nodes, drain + reboot, 1 pinned by a PDB: the 9 others Done"]
    assert "deferred 6.2 s" in drained.note and "0 evictions granted, 3 refused" in drained.note
    assert "| 1.16× ideal, 10 nodes: ceil(10/2) x 5 s |" in table(rows)
    doc["runs"]["10"]["pinned"]["peak"] = 3
    assert "ABOVE IT" in {r.case: r for r in br.rows_from(doc)}["10 nodes: peak updating at once"].note


def test_a_run_of_the_layered_change_alone_has_its_floor_its_row_and_the_peak_of_it():
    lay = dict(run("L", 35.0, 2), post_to_build_s=1.5, image="img@sha256:1",
               plans={"told": 10, "drain": 10, "reboot": 10})
    doc = {"sizes": [10], "maxUnavailable": "10%", "runs": {"10": {"layered": lay}}}
    by_case = {r.case: r for r in br.rows_from(doc)}
    row = by_case["10 nodes, layered (config + image), drain + reboot: every node Done"]
    assert row.median_s == 35.0 and row.floor == "ideal, 10 nodes: ceil(10/2) x 5 s" and row.floor in by_case
    assert "POSTed 1.5 s before" in row.note and "currentImage = desiredImage" in row.note
    assert "(10 of 10 turns drained, 10 rebooted)" in row.note
    assert by_case["10 nodes, layered: API writes per node"].median_s == 10.0
    assert by_case["10 nodes: peak updating at once"].note.startswith("maxUnavailable 2: never above it")
    assert "| 1.40× ideal, 10 nodes: ceil(10/2) x 5 s |" in table(br.rows_from(doc))
    lay["peak"] = 3
    assert "ABOVE IT" in {r.case: r for r in br.rows_from(doc)}["10 nodes: peak updating at once"].note


def test_every_change_shares_the_peak_row_and_the_layered_rows_come_last():
    pinned = {"deferred_after_s": 6.2, "named_in_status": True, "named_reason": "held", "pod_kept": True,
              "evictions": {}, "done_after_unblock_s": 4.0}
    doc = {"sizes": [10], "maxUnavailable": "10%", "runs": {"10": {
        "no_drain": [run("B", 30.0, 2)], "pinned": run("D", 40.0, 1, pinned),
        "layered": dict(run("L", 35.0, 3), post_to_build_s=0.4)}}}
    rows = br.rows_from(doc)
    cases = [r.case for r in rows]
    assert cases.count("ideal, 10 nodes: ceil(10/2) x 5 s") == 1
    assert cases[-2:] == ["10 nodes, layered (config + image), drain + reboot: every node Done",
                          "10 nodes, layered: API writes per node"]
    assert "ABOVE IT" in {r.case: r for r in rows}["10 nodes: peak updating at once"].note


def test_the_build_the_benchmark_writes_is_the_image_the_server_reads_for_the_rendered_config():
    from agent.server.rollout import gating

    mosc = layered.os_config("worker")
    build = layered.os_build("worker", "rendered-worker-abc")
    image = layered.image_for("rendered-worker-abc")
    builds = {build["metadata"]["name"]: build}
    assert gating.layered_image("worker", "rendered-worker-abc", {"worker": mosc}, builds) is None  # no image yet
    mosc["status"] = {"currentImagePullSpec": image}
    assert gating.layered_image("worker", "rendered-worker-abc", {"worker": mosc}, builds) is None  # not succeeded
    build["status"] = layered.build_status(image, now=0)
    assert gating.layered_image("worker", "rendered-worker-abc", {"worker": mosc}, builds) == image
    assert gating.layered_image("worker", "rendered-worker-other", {"worker": mosc}, builds) is None
    assert build["status"]["conditions"][1]["lastTransitionTime"] == "1970-01-01T00:00:00Z"
    assert image != layered.image_for("rendered-worker-abd") and "@sha256:" in image


def test_layered_problems_name_nodes_never_told_never_done_or_on_another_image():
    told = [{"t": 1, "n": n, "e": "learned", "c": "T", "img": "I"} for n in ("a", "b", "c")]
    done = [{"t": 2, "n": n, "e": "done", "c": "T", "img": "I"} for n in ("a", "b", "c")]
    assert layered.problems(told + done, ["a", "b", "c"], "T", "I") == []
    assert layered.plans([dict(told[0], drain=True, reboot=True), dict(told[1], reboot=True), told[2]] + done,
                         "T") == {"told": 3, "drain": 1, "reboot": 2}
    assert layered.problems(told + done[:1], ["a", "b", "c"], "T", "I") == ["2 node(s) never Done on T: b, c"]
    other = [dict(told[0], c="S"), told[1], dict(told[2], img=""), done[0], dict(done[1], img="J"), done[2]]
    assert layered.problems(other, ["a", "b", "c"], "T", "I") == [
        "1 node(s) never told its turn on T: a",
        "1 node(s) served without the build's image (want I): c (none)",
        "1 node(s) Done on another image (want I): b J"]


def test_a_rollout_stalls_once_no_done_came_for_the_limit_counted_from_the_build_before_the_first():
    assert layered.stalled_for([], since=100.0, now=130.0) == 30.0
    assert layered.stalled_for([105.0, 120.0], since=100.0, now=130.0) == 10.0
    assert layered.stalled_for([90.0], since=100.0, now=130.0) == 30.0  # a Done before the build counts not
    assert layered.stall_limit(5.0) == 80.0 and layered.stall_limit(10.0) > 3 * 10.0 + 30


def test_drain_refusals_count_the_asks_told_to_wait_and_the_long_waits_of_the_change_only():
    events = [{"e": "refused", "c": "b", "wait": 1.0}, {"e": "refused", "c": "b", "wait": 30.0},
              {"e": "refused", "c": "a", "wait": 30.0}, {"e": "granted", "c": "b"}]
    assert br.drain_refusals(events, "b") == {"n": 2, "long": 1, "max_s": 30.0}
    assert br.drain_refusals([], "b") == {"n": 0, "long": 0, "max_s": 0.0}


def test_conflicts_are_the_writes_refused_with_409_or_a_failed_json_patch_test_422():
    assert br.conflicts({"nodes PATCH 200": 5, "nodes PATCH 409": 2, "leases PUT 409": 1, "pods/eviction POST 429": 3,
                         "machineconfignodes/status PATCH 422": 4}) == 7
