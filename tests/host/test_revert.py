"""A failed health check reverts the update (agent/node/revert.py), on a scratch root that claims to
be live, with the real Systemd client on a private bus (python-dbusmock) and the admin's checks as
real processes: the files come back, the policy's restart runs again, the previous config is the
current one again, the report says which check failed and that the node reverted; a node that
cannot revert says so and keeps the target whole; a reverted target is not applied again."""

import base64
import json

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.errors import ApplyError, UpdateReverted
from agent.node import nodestate, planning, revert
from agent.node.apply import apply_config
from tests.helpers import dbus as dbus_fixtures
from tests.helpers.healthdoubles import Clock, LiveRoot, Reporter

systemd_mock = dbus_fixtures.systemd_mock
logind_mock = dbus_fixtures.logind_mock

STATE = "/var/lib/node-agent"
URL = "https://server/config/worker"
POLICY = """\
apiVersion: operator.openshift.io/v1
kind: MachineConfiguration
spec:
  nodeDisruptionPolicy:
    files:
    - path: /etc/probe.conf
      actions:
      - type: Restart
        restart:
          serviceName: probe.service
"""
CHECK = b"""#!/bin/sh
conf="$NODE_AGENT_ROOT/etc/probe.conf"
grep -qx good "$conf" || { echo "probe refuses $conf: $(cat "$conf")"; exit 1; }
"""
UNIT = "[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n"


def config(name, conf, extra=(), check=CHECK):
    files = [("/etc/probe.conf", conf, 420), ("/etc/node-agent/health/required.d/50-probe", check, 493)] + list(extra)
    ign = {"ignition": {"version": "3.4.0"},
           "storage": {"files": [{"path": p, "mode": m, "overwrite": True,
                                  "contents": {"source": "data:;base64," + base64.b64encode(d).decode()}}
                                 for p, d, m in files]},
           "systemd": {"units": [{"name": "probe.service", "enabled": True, "contents": UNIT}]}}
    return NodeConfig(ignition=json.loads(json.dumps(ign)), name=name)


@pytest.fixture
def node(tmp_path, systemd_mock, logind_mock):
    """A node at rendered-a (a good probe.conf and the check that reads it), probe.service running."""
    root = LiveRoot(str(tmp_path))
    systemd_mock.add_unit("probe.service", "active")
    a = config("rendered-a", b"good\n")
    apply_config(root, a, systemd=systemd_mock.client(), state_dir=STATE)
    nodestate.save_current(root, STATE, a, "etag-a", URL)
    return root, a


def update_to(root, systemd_mock, logind_mock, a, b):
    """What the update loop does up to its health check: apply, the policy's restart, then verify."""
    apply_config(root, b, a, systemd=systemd_mock.client(), state_dir=STATE)
    plan = planning.make_plan(a, b, POLICY, firstboot=False)
    failed = revert.carry_out(plan, root, systemd_mock.client(), logind_mock.client())
    clock = Clock()
    after = revert.AfterUpdate(root, STATE, systemd=systemd_mock.client(), logind=logind_mock.client(),
                               timeout=60.0, policy_text=POLICY, clock=clock, sleep=clock.sleep)
    return revert.verify(after, a, b, plan, failed, "etag-b", URL, nodestate.load_current(root, STATE))


def test_a_failed_required_check_puts_the_previous_config_back_and_restarts_its_service(node, tmp_path, systemd_mock,
                                                                                         logind_mock):
    root, a = node
    b = config("rendered-b", b"colour = blue\n")
    with pytest.raises(UpdateReverted) as err:
        update_to(root, systemd_mock, logind_mock, a, b)
    assert err.value.reason == ("reverted to rendered-a after a failed health check of rendered-b: required check "
                                f"50-probe: exit code 1: probe refuses {tmp_path}/etc/probe.conf: colour = blue")
    assert err.value.exit_code == 75 and err.value.undone and err.value.runs == "rendered-a"
    assert (tmp_path / "etc/probe.conf").read_bytes() == b"good\n"
    assert systemd_mock.method_names("RestartUnit") == ["RestartUnit", "RestartUnit"]  # the update's, the revert's
    assert nodestate.load_current(root, STATE)["name"] == "rendered-a"
    assert nodestate.load_current(root, STATE)["etag"] == "etag-a"
    assert nodestate.load_reverted(root, STATE)["config"] == "rendered-b"


def test_a_restart_that_fails_with_the_new_config_is_reverted_as_a_failed_unit(node, tmp_path, systemd_mock,
                                                                                logind_mock):
    root, a = node
    systemd_mock.set_next_job_result("probe.service", "failed")
    with pytest.raises(UpdateReverted) as err:
        update_to(root, systemd_mock, logind_mock, a, config("rendered-b", b"good\n# a comment\n"))
    assert err.value.reason.startswith("reverted to rendered-a after a failed health check of rendered-b: unit "
                                       "probe.service: Restart probe.service failed: systemd restart of "
                                       "probe.service failed: job result 'failed'")
    assert (tmp_path / "etc/probe.conf").read_bytes() == b"good\n"
    assert systemd_mock.active_state("probe.service") == "active"  # the revert's restart brought it back


def test_a_node_that_cannot_revert_says_so_and_keeps_the_target_whole(node, tmp_path, systemd_mock, logind_mock,
                                                                      monkeypatch):
    root, a = node
    b = config("rendered-b", b"colour = blue\n")

    def refused(*_args, **_kwargs):
        raise ApplyError("applying rendered-a failed at write /etc/probe.conf: No space left on device; "
                         "every change was rolled back")

    apply_config(root, b, a, systemd=systemd_mock.client(), state_dir=STATE)  # the update's own apply ...
    monkeypatch.setattr("agent.node.apply.apply_config", refused)  # ... and the revert's fails
    plan = planning.make_plan(a, b, POLICY, firstboot=False)
    after = revert.AfterUpdate(root, STATE, systemd=systemd_mock.client(), logind=logind_mock.client(),
                               timeout=60.0, policy_text=POLICY)
    with pytest.raises(UpdateReverted) as err:
        revert.verify(after, a, b, plan, None, "etag-b", URL, nodestate.load_current(root, STATE))
    assert err.value.reason.startswith("could not revert to rendered-a (applying rendered-a failed at write "
                                       "/etc/probe.conf: No space left on device; every change was rolled back); "
                                       "it keeps rendered-b after a failed health check of rendered-b: required "
                                       "check 50-probe")
    assert not err.value.undone and err.value.exit_code == 70 and err.value.runs == "rendered-b"
    assert (tmp_path / "etc/probe.conf").read_bytes() == b"colour = blue\n"  # the target whole, not half
    assert nodestate.load_current(root, STATE)["name"] == "rendered-b"


def test_a_failed_wanted_check_is_the_done_reports_warning(node, systemd_mock, logind_mock):
    root, a = node
    wanted = ("/etc/node-agent/health/wanted.d/90-disk", b"#!/bin/sh\necho 'disk 91% full'\nexit 1\n", 493)
    warning = update_to(root, systemd_mock, logind_mock, a, config("rendered-b", b"good\n", [wanted]))
    assert warning == "wanted health check(s) failed: wanted check 90-disk: exit code 1: disk 91% full"


def test_a_reverted_target_is_reported_degraded_once_and_not_applied_again(node, systemd_mock, logind_mock):
    root, a = node
    b = config("rendered-b", b"colour = blue\n")
    with pytest.raises(UpdateReverted):
        update_to(root, systemd_mock, logind_mock, a, b)
    reporter = Reporter(root)
    assert revert.report_reverted(reporter, root, STATE, "worker", a, b)
    assert revert.report_reverted(reporter, root, STATE, "worker", a, b)
    assert [(s["state"], s["currentConfig"], s["desiredConfig"]) for s in reporter.sent] == [
        ("Degraded", "rendered-a", "rendered-b")]
    assert reporter.sent[0]["reason"].startswith("reverted to rendered-a after a failed health check of rendered-b")
    # a new target (the admin's fix) is applied: the record of the revert goes
    assert not revert.report_reverted(reporter, root, STATE, "worker", a, config("rendered-c", b"good\n"))
    assert nodestate.load_reverted(root, STATE) is None


def test_a_node_the_server_parked_and_lets_retry_applies_the_reverted_target_again(node, systemd_mock, logind_mock):
    root, a = node
    b = config("rendered-b", b"colour = blue\n")
    with pytest.raises(UpdateReverted):
        update_to(root, systemd_mock, logind_mock, a, b)
    revert.parked(root, STATE)  # served "waiting" (the failure budget parks it), then its target again
    assert not revert.report_reverted(Reporter(root), root, STATE, "worker", a, b)
    assert nodestate.load_reverted(root, STATE) is None


def test_a_revert_whose_restart_fails_says_the_files_are_back_and_stays_degraded(node, tmp_path, systemd_mock,
                                                                                 logind_mock):
    root, a = node
    b = config("rendered-b", b"colour = blue\n")
    apply_config(root, b, a, systemd=systemd_mock.client(), state_dir=STATE)
    plan = planning.make_plan(a, b, POLICY, firstboot=False)
    assert revert.carry_out(plan, root, systemd_mock.client(), logind_mock.client()) is None
    systemd_mock.set_next_job_result("probe.service", "failed")  # the revert's restart fails
    after = revert.AfterUpdate(root, STATE, systemd=systemd_mock.client(), logind=logind_mock.client(),
                               timeout=60.0, policy_text=POLICY)
    with pytest.raises(UpdateReverted) as err:
        revert.verify(after, a, b, plan, None, "etag-b", URL, nodestate.load_current(root, STATE))
    assert err.value.reason.startswith("could not revert to rendered-a: its files are back, but Restart "
                                       "probe.service failed"), err.value.reason
    assert not err.value.undone and err.value.runs == "rendered-a"
    assert (tmp_path / "etc/probe.conf").read_bytes() == b"good\n"
    assert nodestate.load_current(root, STATE)["name"] == "rendered-a"


def test_a_reverted_target_forced_again_and_healthy_is_not_reported_reverted_any_more(node, tmp_path, systemd_mock,
                                                                                     logind_mock):
    root, a = node
    down = b'#!/bin/sh\n[ ! -e "$NODE_AGENT_ROOT/run/probe-down" ] || { echo "probe is down"; exit 1; }\n'
    b = config("rendered-b", b"good\n# b\n", check=down)
    (tmp_path / "run").mkdir()
    (tmp_path / "run/probe-down").write_text("")  # a cause outside the config
    with pytest.raises(UpdateReverted):
        update_to(root, systemd_mock, logind_mock, a, b)
    (tmp_path / "run/probe-down").unlink()  # the cause fixed, the admin re-applies b (--force)
    assert update_to(root, systemd_mock, logind_mock, a, b) is None
    assert nodestate.load_reverted(root, STATE) is None
    assert not revert.report_reverted(Reporter(root), root, STATE, "worker", a, b)
