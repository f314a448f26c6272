"""carry_out: a plan's actions reach systemd and logind over D-Bus, in order (python-dbusmock)."""

import pytest

from agent.core.diff import Changes, FileChange, OSChange
from agent.core.disruption import compute_actions, effective_policy, parse_policy
from agent.node import actions as act
from tests.helpers import dbus as dbus_fixtures

systemd_mock = dbus_fixtures.systemd_mock
logind_mock = dbus_fixtures.logind_mock
dbus_calls = dbus_fixtures.dbus_calls

KUBELET_DROPIN = "/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf"


def changed(*paths):
    return Changes(files=tuple(FileChange(p, "file", "changed", ("contents",)) for p in paths))


def plan_for(*paths, policy=None, firstboot=False):
    return compute_actions(changed(*paths), policy, firstboot=firstboot)


def effects(calls):
    """Only the calls that change something (not Subscribe/GetUnit look-ups)."""
    return [(who, m, a) for who, m, a in calls if m not in ("Subscribe", "GetUnit")]


def test_daemon_reload_then_restart_kubelet(systemd_mock, logind_mock, dbus_calls):
    systemd_mock.add_unit("kubelet.service", "active")
    plan = plan_for(KUBELET_DROPIN)
    result = act.carry_out(plan.actions, systemd_mock.client(), logind_mock.client())
    assert effects(dbus_calls()) == [
        ("systemd", "Reload", []),
        ("systemd", "RestartUnit", ["kubelet.service", "replace"]),
    ]
    assert [o.status for o in result.outcomes] == ["done", "done"]
    assert result.ok and not result.rebooting


def test_reboot_goes_to_logind_after_sync(systemd_mock, logind_mock, dbus_calls, monkeypatch):
    synced = []
    monkeypatch.setattr(act.os, "sync", lambda: synced.append(len(logind_mock.calls("Reboot"))))
    plan = compute_actions(Changes(os=(OSChange("osImageURL", "a", "b"),)))
    result = act.carry_out(plan.actions, systemd_mock.client(), logind_mock.client())
    assert effects(dbus_calls()) == [("logind", "Reboot", [False])]
    assert synced == [0]  # sync ran before logind was asked
    assert result.rebooting


def test_actions_in_plan_order_and_special_reloads_crio(systemd_mock, logind_mock, dbus_calls):
    for unit in ("crio.service", "coreos-update-ca-trust.service"):
        systemd_mock.add_unit(unit, "active")
    plan = plan_for("/etc/containers/registries.conf",
                    "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt")
    assert [a.type for a in plan.actions] == ["Special", "Restart", "Restart"]
    act.carry_out(plan.actions, systemd_mock.client(), logind_mock.client())
    assert effects(dbus_calls()) == [
        ("systemd", "ReloadUnit", ["crio.service", "replace"]),
        ("systemd", "RestartUnit", ["coreos-update-ca-trust.service", "replace"]),
        ("systemd", "RestartUnit", ["crio.service", "replace"]),
    ]


def test_reload_after_restart_of_same_unit_is_skipped(systemd_mock, logind_mock):
    systemd_mock.add_unit("app.service", "active")
    policy = effective_policy(parse_policy({"files": [
        {"path": "/etc/a", "actions": [{"type": "Restart", "restart": {"serviceName": "app.service"}}]},
        {"path": "/etc/b", "actions": [{"type": "Reload", "reload": {"serviceName": "app.service"}}]},
    ]}))
    result = act.carry_out(plan_for("/etc/a", "/etc/b", policy=policy).actions, systemd_mock.client(),
                           logind_mock.client())
    assert systemd_mock.method_names("RestartUnit", "ReloadUnit") == ["RestartUnit"]
    assert [o.status for o in result.outcomes] == ["done", "skipped"]


def test_failed_job_stops_and_names_the_result(systemd_mock, logind_mock):
    systemd_mock.add_unit("coreos-update-ca-trust.service", "active")
    systemd_mock.add_unit("crio.service", "active")
    systemd_mock.set_next_job_result("coreos-update-ca-trust.service", "failed")
    plan = plan_for("/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt")
    with pytest.raises(act.ActionFailed) as info:
        act.carry_out(plan.actions, systemd_mock.client(), logind_mock.client())
    assert "coreos-update-ca-trust.service" in str(info.value) and "'failed'" in str(info.value)
    assert [o.status for o in info.value.result.outcomes] == ["failed"]
    assert systemd_mock.method_names("RestartUnit") == ["RestartUnit"]  # crio was not restarted
    assert info.value.exit_code == 70


def test_firstboot_skips_inactive_units(systemd_mock, logind_mock, dbus_calls):
    systemd_mock.add_unit("crio.service", "inactive")
    systemd_mock.add_unit("coreos-update-ca-trust.service", "active")
    plan = plan_for("/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt", firstboot=True)
    result = act.carry_out(plan.actions, systemd_mock.client(), logind_mock.client(), firstboot=True)
    assert [(o.action.unit, o.status) for o in result.outcomes] == [
        ("coreos-update-ca-trust.service", "done"), ("crio.service", "skipped")]
    assert [c for c in dbus_calls() if c[1] == "RestartUnit"] == [
        ("systemd", "RestartUnit", ["coreos-update-ca-trust.service", "replace"])]
    # an unknown unit counts as inactive
    plan = plan_for("/etc/kubernetes/credential-providers/x.yaml", firstboot=True)
    out = act.carry_out(plan.actions, systemd_mock.client(), logind_mock.client(), firstboot=True)
    assert out.outcomes[0].status == "skipped"


def test_drain_and_none_are_reported_only(systemd_mock, logind_mock, dbus_calls):
    policy = effective_policy(parse_policy({"files": [{"path": "/etc/a", "actions": [{"type": "Drain"}]}]}))
    result = act.carry_out(plan_for("/etc/a", policy=policy).actions, systemd_mock.client(), logind_mock.client())
    assert [o.status for o in result.outcomes] == ["skipped"]
    none = act.carry_out(compute_actions(Changes()).actions, systemd_mock.client(), logind_mock.client())
    assert [o.status for o in none.outcomes] == ["done"]
    assert dbus_calls() == []


def test_not_live_root_performs_nothing(systemd_mock, logind_mock, dbus_calls):
    plan = plan_for(KUBELET_DROPIN)
    result = act.carry_out(plan.actions, systemd_mock.client(), logind_mock.client(), live=False)
    assert [o.status for o in result.outcomes] == ["not-performed", "not-performed"]
    reboot = compute_actions(Changes(os=(OSChange("fips", False, True),)))
    result = act.carry_out(reboot.actions, systemd_mock.client(), logind_mock.client(), live=False)
    assert [o.status for o in result.outcomes] == ["not-performed"] and not result.rebooting
    assert dbus_calls() == []
    assert result.to_dict()["outcomes"][0]["action"]["type"] == "Reboot"


def test_not_performed_lines(systemd_mock, logind_mock):
    result = act.carry_out(plan_for(KUBELET_DROPIN).actions, systemd_mock.client(), logind_mock.client(),
                           live=False)
    assert result.not_performed == ["DaemonReload: not-performed (the root is not the running system)",
                                    "Restart kubelet.service: not-performed (the root is not the running system)"]
