"""A node's first boot as the server follows it (agent/server/rollout/firstboots.py, pure): the
report's object checked and bounded, the record each report folds into, the decision at a given
moment (Stalled past the deadline), a pool's deadline, and what the views print of it."""

import pytest

from agent.core.objectchecks import FIRSTBOOT_DEADLINE_ANNOTATION, check_pool, parse_deadline
from agent.server.cli import firstbootviews, views
from agent.server.cluster.reports import ReportInvalid, validate_report
from agent.server.rollout import firstboots
from agent.server.rollout.progress import epoch_of

NOW = 1.8e9
RUN, RUN2 = "5b0c6c1e4d0a4f6c9a8f0c2d1e3b4a59", "0123456789abcdef0123456789abcdef"
SENT = {"run": RUN, "startedAt": "2027-01-15T08:00:00.120Z", "stage": "fetch", "result": "running", "elapsed": 2.5,
        "stages": [{"name": "fetch", "startedAt": "2027-01-15T08:00:00.120Z", "seconds": 2.4, "result": "ok"}]}


def report(state="Working", reason=None, **sent):
    body = {"pool": "worker", "state": state, "firstBoot": dict(SENT, **sent)}
    if reason:
        body["reason"] = reason
    return validate_report(body)


@pytest.mark.parametrize("change,field", [
    ({"color": "red"}, "$.firstBoot.color"),
    ({"run": "not-hex"}, "$.firstBoot.run"),
    ({"stage": "Fetch!"}, "$.firstBoot.stage"),
    ({"result": "maybe"}, "$.firstBoot.result"),
    ({"startedAt": "yesterday"}, "$.firstBoot.startedAt"),
    ({"exitCode": 256}, "$.firstBoot.exitCode"),
    ({"exitCode": True}, "$.firstBoot.exitCode"),
    ({"hint": "x" * 4097}, "$.firstBoot.hint"),
    ({"elapsed": -1}, "$.firstBoot.elapsed"),
    ({"rebootPending": "yes"}, "$.firstBoot.rebootPending"),
    ({"stages": [{"name": "fetch", "result": "ok"}] * 33}, "$.firstBoot.stages"),
    ({"stages": [{"name": "fetch", "result": "done"}]}, "$.firstBoot.stages.0.result"),
    ({"stages": [{"name": "fetch", "result": "ok", "detail": "x"}]}, "$.firstBoot.stages.0"),
])
def test_a_first_boot_object_out_of_bounds_is_refused_naming_the_field(change, field):
    with pytest.raises(ReportInvalid) as err:
        validate_report({"pool": "worker", "state": "Working", "firstBoot": dict(SENT, **change)})
    assert err.value.field == field


def test_the_first_report_begins_the_record_the_nodes_elapsed_time_before_it_arrived():
    rec = firstboots.record(None, report(), NOW)
    assert rec["outcome"] == "Running" and rec["runs"] == 1 and rec["stage"] == "fetch"
    assert epoch_of(rec["began"]) == pytest.approx(NOW - 2.5, abs=0.001)  # the node's monotonic clock, not its wall
    assert epoch_of(rec["reportedAt"]) == pytest.approx(NOW, abs=0.001)


def test_a_registration_before_the_first_report_begins_it_earlier():
    rec = firstboots.record(None, report(), NOW, registered=NOW - 60)
    assert epoch_of(rec["began"]) == pytest.approx(NOW - 60, abs=0.001)


def test_a_failed_run_keeps_its_stage_exit_code_error_and_what_to_do_until_the_next_run():
    first = firstboots.record(None, report(), NOW)
    failed = firstboots.record(first, report("Degraded", "apply failed: disk full", stage="apply", result="failed",
                                             exitCode=75, hint="try again"), NOW + 5)
    assert (failed["outcome"], failed["stage"], failed["exitCode"], failed["hint"], failed["error"]) == \
        ("Failed", "apply", 75, "try again", "apply failed: disk full")
    assert failed["began"] == first["began"] and failed["endedAt"]
    again = firstboots.record(failed, report(run=RUN2), NOW + 60)
    assert (again["outcome"], again["runs"]) == ("Running", 2)
    assert not {"exitCode", "hint", "error", "endedAt"} & set(again)


def test_a_day2_report_after_the_first_boots_reboot_ends_it_done_or_failed():
    pending = firstboots.record(None, report(stage="report", result="done", rebootPending=True), NOW)
    done = firstboots.record(pending, {"pool": "worker", "state": "Done"}, NOW + 90)
    assert done["outcome"] == "Done" and done["rebooted"] and firstboots.duration(done) == pytest.approx(92.5, 0.01)
    pivot = firstboots.record(pending, {"pool": "worker", "state": "Degraded", "reason": "booted X, needs Y"}, NOW + 90)
    assert (pivot["outcome"], pivot["stage"], pivot["error"]) == ("Failed", "reboot", "booted X, needs Y")
    assert firstboots.record(done, {"pool": "worker", "state": "Degraded"}, NOW + 900) == done  # over: carried


def test_no_record_without_a_first_boot_and_a_new_first_boot_after_a_done_one():
    assert firstboots.record(None, {"pool": "worker", "state": "Done"}, NOW) is None
    done = firstboots.record(None, report("Done", stage="report", result="done"), NOW)
    again = firstboots.record(done, report(run=RUN2), NOW + 86400)  # reinstalled
    assert again["runs"] == 1 and again["began"] != done["began"] and again["outcome"] == "Running"


def test_a_first_boot_is_stalled_from_its_deadline_after_its_last_report_not_before():
    rec = firstboots.record(None, report(), NOW)
    assert firstboots.decide(rec, NOW + 29.9, 30).outcome == "Running"
    stalled = firstboots.decide(rec, NOW + 30, 30)
    assert (stalled.outcome, stalled.reason, stalled.stage, stalled.since) == ("Stalled", "FirstBootStalled", "fetch",
                                                                                pytest.approx(NOW + 30, abs=0.001))
    assert "its last report was stage fetch" in stalled.message and stalled.warning


def test_a_reboot_pending_that_never_comes_back_is_stalled_saying_so():
    rec = firstboots.record(None, report(stage="report", result="done", rebootPending=True), NOW)
    d = firstboots.decide(rec, NOW + 3600, 1800)
    assert d.outcome == "Stalled" and "has not come back from that reboot" in d.message and d.reboot_pending


def test_failed_and_done_stay_whatever_the_time():
    failed = firstboots.record(None, report("Degraded", "x", result="failed", exitCode=69), NOW)
    done = firstboots.record(None, report("Done", result="done"), NOW)
    assert firstboots.decide(failed, NOW + 1e6, 30).outcome == "Failed"
    assert firstboots.decide(done, NOW + 1e6, 30).outcome == "Done"
    assert firstboots.is_open({"firstBoot": failed}) and not firstboots.is_open({"firstBoot": done})


def test_a_pools_annotation_sets_its_deadline_else_the_servers():
    pool = {"metadata": {"name": "infra", "annotations": {FIRSTBOOT_DEADLINE_ANNOTATION: "45m"}}}
    assert firstboots.deadline_of(pool, 1800) == 2700
    assert firstboots.deadline_of({"metadata": {"name": "worker"}}, 1800) == 1800
    assert [parse_deadline(v) for v in ("90", "90s", "30m", "1h30m")] == [90, 90, 1800, 5400]
    for bad in ("0", "", "7d", "1h30", "-5", "1" * 40):
        with pytest.raises(ValueError):
            parse_deadline(bad)
    problems = check_pool({"metadata": {"name": "w", "annotations": {FIRSTBOOT_DEADLINE_ANNOTATION: "soon"}}}, "p")
    assert [p.path for p in problems] == [f"$.metadata.annotations['{FIRSTBOOT_DEADLINE_ANNOTATION}']"]


def test_a_pools_summary_counts_by_outcome_and_stage_and_names_the_failed_and_stalled():
    running = firstboots.record(None, report(), NOW)
    failed = firstboots.record(None, report("Degraded", "disk full", stage="apply", result="failed", exitCode=75), NOW)
    decided = [(n, firstboots.decide(r, NOW + t, 30), r) for n, r, t in
               (("a", running, 1), ("b", failed, 1), ("c", running, 31))]
    s = firstboots.summary(decided)
    assert (s["running"], s["failed"], s["stalled"]) == (1, 1, 1)
    assert s["stages"] == {"Running": {"fetch": 1}, "Failed": {"apply": 1}, "Stalled": {"fetch": 1}}
    assert sorted(s["nodes"]) == ["b", "c"] and s["nodes"]["b"]["exitCode"] == 75


def test_the_views_show_the_outcome_and_stage_as_kubectl_shows_a_pods_init_phase():
    assert [firstbootviews.cell(n) for n in ({}, {"firstBoot": {"outcome": "Done", "stage": "report"}},
                                             {"firstBoot": {"outcome": "Stalled", "stage": "fetch"}})] == \
        ["-", "Done", "Stalled:fetch"]
    node = {"name": "w-1", "pool": "worker", "report": {"state": "Working"}, "reportedAt": "2027-01-15T08:00:00Z",
            "firstBoot": {"outcome": "Stalled", "reason": "FirstBootStalled", "message": "no report for 31m",
                          "stage": "fetch"}}
    for width in (80, 200):
        table = views.nodes_table([node], NOW, width=width)
        assert max(len(line) for line in table.splitlines()) <= width
        assert "Stalled:fetch" in table and "FirstBootStall" in table  # the reason cut first, at 80
    assert "FirstBootStalled: no report for 31m" in views.nodes_table([node], NOW, width=200)


def test_a_pools_first_boot_of_a_name_not_proven_yet_says_so():
    pool = {"metadata": {"name": "worker"}, "status": {"firstBoots": {"nodes": {
        "w-1": {"reason": "FirstBootFailed", "since": "2027-01-15T08:00:00Z", "message": "failed at stage skew"},
        "w-2": {"reason": "FirstBootFailed", "since": "2027-01-15T08:00:00Z", "message": "failed at stage skew",
                "pending": True}}}}}
    assert firstbootviews.pool_lines([pool]) == [
        "worker: node w-1: FirstBootFailed since 2027-01-15T08:00:00Z: failed at stage skew",
        "worker: node w-2: FirstBootFailed since 2027-01-15T08:00:00Z: failed at stage skew (not proven yet: its "
        "registration is pending)"]
