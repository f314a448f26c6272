"""The health check runner (agent/node/health.py) on a scratch root that claims to be live: units
through the real Systemd client on a private bus (python-dbusmock), the admin's checks as real
processes, the kubelet's endpoint through an injected getter. Time is an injected clock: the
runner's sleeps move it, so no test waits for real seconds except a check killed at its limit."""

import logging
import os

from agent.core import health
from agent.core.health import RUNNING, STOPPED, UnitCheck
from agent.host.root import Root
from agent.node.health import Runner
from tests.helpers import dbus as dbus_fixtures
from tests.helpers.healthdoubles import Clock, LiveRoot

systemd_mock = dbus_fixtures.systemd_mock


def script(root_dir, kind, name, body, mode=0o755):
    where = os.path.join(str(root_dir), f"etc/node-agent/health/{kind}.d")
    os.makedirs(where, exist_ok=True)
    path = os.path.join(where, name)
    with open(path, "w") as f:
        f.write(body)
    os.chmod(path, mode)
    return path


def runner(tmp_path, systemd=None, timeout=60.0, kubelet_get=None, live=True):
    clock = Clock(1000.0)
    root = (LiveRoot if live else Root)(str(tmp_path))
    return Runner(root, systemd, timeout=timeout, clock=clock, sleep=clock.sleep, kubelet_get=kubelet_get)


def test_a_failed_required_check_fails_the_update_with_its_name_and_output(tmp_path):
    script(tmp_path, "required", "10-ok", "#!/bin/sh\necho fine\n")
    script(tmp_path, "required", "50-probe", "#!/bin/sh\necho 'probe.conf: unknown key \"colour\"'\nexit 3\n")
    script(tmp_path, "required", "90-never", "#!/bin/sh\ntouch \"$NODE_AGENT_ROOT/ran\"\n")
    result = runner(tmp_path, live=False).run([])
    assert [(r.name, r.ok) for r in result.results] == [("10-ok", True), ("50-probe", False)]
    assert result.failed.describe() == 'required check 50-probe: exit code 3: probe.conf: unknown key "colour"'
    assert not (tmp_path / "ran").exists()  # required checks stop at the first failure, as greenboot's


def test_a_failed_wanted_check_is_a_warning_and_the_rest_still_run(tmp_path):
    script(tmp_path, "wanted", "10-disk", "#!/bin/sh\necho 'disk 91% full' >&2\nexit 1\n")
    script(tmp_path, "wanted", "20-last", "#!/bin/sh\necho \"$NODE_AGENT_ROOT\"\n")
    result = runner(tmp_path, live=False).run([])
    assert result.ok
    assert [(r.name, r.ok) for r in result.results] == [("10-disk", False), ("20-last", True)]
    assert result.warnings[0].output == "exit code 1: disk 91% full"
    assert result.results[1].output == str(tmp_path)  # the check is told the root it is about


def test_a_check_that_is_not_executable_fails_closed_and_says_the_mode_to_give(tmp_path):
    script(tmp_path, "required", "50-probe", "#!/bin/sh\nexit 0\n", mode=0o644)
    result = runner(tmp_path, live=False).run([])
    assert "is not executable: give it mode 0755" in result.failed.output


def test_a_check_past_its_own_limit_is_killed_and_fails(tmp_path):
    script(tmp_path, "required", "50-slow", "#!/bin/sh\n# node-agent-health-timeout: 1s\necho started\nexec sleep 600\n")
    result = runner(tmp_path, live=False).run([])
    assert result.failed.name == "50-slow"
    assert result.failed.output.startswith("did not finish within 1 s (killed)")  # its output, if any, follows


def test_each_checks_output_goes_to_the_journal_with_its_name(tmp_path, caplog):
    script(tmp_path, "required", "50-probe", "#!/bin/sh\necho line one\necho line two\n")
    with caplog.at_level(logging.INFO, logger="agent.node.health"):
        runner(tmp_path, live=False).run([])
    said = [r for r in caplog.records if getattr(r, "NODE_AGENT_CHECK", None) == "50-probe"]
    assert any("line one\nline two" in r.getMessage() for r in said)
    assert all(getattr(r, "NODE_AGENT_STAGE", None) == "health" for r in said)


def test_a_unit_that_failed_after_its_restart_fails_the_update(tmp_path, systemd_mock):
    systemd_mock.add_unit("probe.service", "failed")
    result = runner(tmp_path, systemd_mock.client()).run([UnitCheck("probe.service", RUNNING, "restarted by the update")])
    assert result.failed.describe() == ("unit probe.service: failed (restarted by the update; "
                                        "see 'journalctl -u probe.service')")


def test_a_unit_that_stays_active_passes_and_a_masked_unit_still_active_fails(tmp_path, systemd_mock):
    systemd_mock.add_unit("probe.service", "active")
    systemd_mock.add_unit("debug.service", "active")
    ok = runner(tmp_path, systemd_mock.client()).run([UnitCheck("probe.service", RUNNING, "restarted")])
    assert ok.ok and ok.results[0].output == "active"
    bad = runner(tmp_path, systemd_mock.client()).run([UnitCheck("debug.service", STOPPED, "masked in the config")])
    assert bad.failed.name == "debug.service" and bad.failed.output.startswith("active")


def test_a_unit_still_activating_at_the_limit_fails(tmp_path, systemd_mock):
    systemd_mock.add_unit("probe.service", "activating")
    result = runner(tmp_path, systemd_mock.client(), timeout=30).run([UnitCheck("probe.service", RUNNING, "restarted")])
    assert result.failed.output == "still activating after 30 s (restarted)"


def test_the_kubelet_is_checked_only_on_a_node_that_runs_one(tmp_path, systemd_mock):
    asked = []
    no_kubelet = runner(tmp_path, systemd_mock.client(), kubelet_get=lambda t: asked.append(t) or "ok").run([])
    assert no_kubelet.ok and no_kubelet.results == () and asked == []
    systemd_mock.add_unit("kubelet.service", "active")
    with_kubelet = runner(tmp_path, systemd_mock.client(), kubelet_get=lambda t: "ok").run([])
    assert [(r.kind, r.name, r.ok) for r in with_kubelet.results] == [("kubelet", health.KUBELET_HEALTHZ, True)]


def test_a_kubelet_that_never_answers_ok_fails_at_the_limit(tmp_path, systemd_mock):
    systemd_mock.add_unit("kubelet.service", "active")

    def refused(_timeout):
        raise ConnectionRefusedError(111, "Connection refused")

    result = runner(tmp_path, systemd_mock.client(), timeout=20, kubelet_get=refused).run([])
    assert result.failed.kind == "kubelet"
    assert result.failed.output.startswith("no 'ok' within 20 s: [Errno 111] Connection refused")


def test_on_a_root_that_is_not_the_running_system_units_are_not_checked_and_it_says_so(tmp_path):
    result = runner(tmp_path, live=False).run([UnitCheck("probe.service", RUNNING, "restarted")])
    assert result.ok and result.not_performed == (
        "units probe.service and the kubelet (the root is not the running system)",)
