"""The health planner (agent/core/health.py): which units an update is checked on, how a unit's
state reads, a check's own time limit, the pool's limit, and the report's words."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core import health
from agent.core.health import RUNNING, STOPPED, CheckResult, HealthResult, UnitCheck
from agent.core.rolloutpolicy import HEALTH_TIMEOUT, health_header, policy_problems, rollout_policy


def test_without_a_reboot_only_the_units_the_update_restarted_are_checked_running():
    before = [{"name": "a.service", "enabled": True}]
    after = [{"name": "a.service", "enabled": False}, {"name": "b.service", "mask": True}]
    assert health.unit_checks(before, after, ["probe.service", "crio.service"], rebooted=False) == [
        UnitCheck("crio.service", RUNNING, "restarted by the update"),
        UnitCheck("probe.service", RUNNING, "restarted by the update")]


def test_after_a_reboot_every_changed_unit_entry_is_checked_as_the_config_says():
    before = [{"name": "same.service", "enabled": True}, {"name": "off.service", "enabled": True}]
    after = [{"name": "same.service", "enabled": True}, {"name": "off.service", "enabled": False},
             {"name": "debug.service", "mask": True}, {"name": "new.service", "enabled": True, "contents": "x"},
             {"name": "dropin.service", "dropins": [{"name": "a.conf", "contents": "y"}]}]
    assert health.unit_checks(before, after, [], rebooted=True) == [
        UnitCheck("debug.service", STOPPED, "masked in the config"),
        UnitCheck("new.service", RUNNING, "enabled in the config"),
        UnitCheck("off.service", STOPPED, "disabled in the config")]


def test_a_running_unit_fails_only_when_failed_and_waits_between_states():
    verdicts = {s: health.unit_verdict(s, RUNNING) for s in ("active", "inactive", "failed", "activating", "reloading")}
    assert verdicts == {"active": "ok", "inactive": "ok", "failed": "fail", "activating": "wait", "reloading": "wait"}


def test_a_stopped_unit_fails_when_active():
    assert [health.unit_verdict(s, STOPPED) for s in ("inactive", "failed", "active", "deactivating")] == [
        "ok", "ok", "fail", "wait"]


def test_a_checks_timeout_line_sets_its_limit():
    assert health.check_timeout(b"#!/bin/sh\n# node-agent-health-timeout: 2m\nexit 0\n", 60.0) == (120.0, "")
    assert health.check_timeout(b"#!/bin/sh\nexit 0\n", 60.0) == (60.0, "")


def test_a_bad_timeout_line_keeps_the_default_and_says_why():
    seconds, problem = health.check_timeout(b"# node-agent-health-timeout: soon\n", 60.0)
    assert seconds == 60.0 and "soon" in problem and "using 60 s" in problem
    seconds, problem = health.check_timeout(b"# node-agent-health-timeout: 0\n", 60.0)
    assert seconds == 60.0 and "not a positive duration" in problem


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=6000))
def test_any_check_head_gives_a_positive_limit(head):
    seconds, problem = health.check_timeout(head, 60.0)
    assert 0 < seconds <= 7 * 24 * 3600 and isinstance(problem, str)


def test_the_pool_limit_from_the_header():
    assert health.parse_timeout(None) == (health.DEFAULT_TIMEOUT, "")
    assert health.parse_timeout("90") == (90.0, "")
    for bad in ("soon", "-1", "0", "nan", "1e9"):
        seconds, problem = health.parse_timeout(bad)
        assert seconds == health.DEFAULT_TIMEOUT and "X-Health-Timeout" in problem, bad


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_header_value_gives_a_limit_in_range(value):
    seconds, _ = health.parse_timeout(value)
    assert not math.isnan(seconds) and 0 < seconds <= health.MAX_TIMEOUT


def test_the_pool_annotation_is_checked_and_served_as_a_header():
    pool = {"metadata": {"name": "worker", "annotations": {HEALTH_TIMEOUT: "10m"}}}
    assert rollout_policy(pool).health_timeout == 600.0
    assert health_header(pool) == [("X-Health-Timeout", "600")]
    assert health_header({"metadata": {"name": "worker"}}) == []
    assert HEALTH_TIMEOUT in policy_problems({HEALTH_TIMEOUT: "2h"})
    assert HEALTH_TIMEOUT in policy_problems({HEALTH_TIMEOUT: "later"})


def test_the_degraded_reason_says_the_revert_first_then_the_check_and_is_bounded():
    failed = CheckResult(health.REQUIRED, "50-probe", False, "exit code 1: " + "x" * 5000)
    reason = health.failure_reason(failed, "rendered-b", "reverted to rendered-a")
    assert reason.startswith("reverted to rendered-a after a failed health check of rendered-b: required check 50-probe")
    assert len(reason) == health.REASON_MAX


def test_a_failed_wanted_check_is_a_warning_not_a_failure():
    result = HealthResult((CheckResult(health.UNIT, "a.service", True, "active"),
                           CheckResult(health.WANTED, "90-disk", False, "exit code 1: disk 91% full")))
    assert result.ok and result.failed is None
    assert health.warning_text(result) == "wanted health check(s) failed: wanted check 90-disk: exit code 1: disk 91% full"
    assert health.warning_text(HealthResult()) is None


def test_the_output_kept_is_its_end():
    assert health.tail("a" * 10 + "END", 8) == "...aaEND"
