"""agent.host.systemd / agent.host.logind against python-dbusmock on a private system bus."""

import pytest

from agent.errors import HostError
from tests.helpers import dbus as dbus_fixtures

# pytest finds fixtures by module attribute; plain assignments keep linters quiet
systemd_mock = dbus_fixtures.systemd_mock
logind_mock = dbus_fixtures.logind_mock


def test_daemon_reload_calls_manager_reload(systemd_mock):
    systemd_mock.client().daemon_reload()
    assert systemd_mock.calls() == [("Reload", [])]


def test_restart_waits_for_job_and_returns_done(systemd_mock):
    systemd_mock.add_unit("kubelet.service", "inactive")
    client = systemd_mock.client()
    assert client.restart_unit("kubelet.service") == "done"
    assert systemd_mock.calls("RestartUnit") == [("RestartUnit", ["kubelet.service", "replace"])]
    # the job ran to its end before restart_unit returned
    assert systemd_mock.active_state("kubelet.service") == "active"


def test_reload_of_active_unit(systemd_mock):
    systemd_mock.add_unit("crio.service", "active")
    assert systemd_mock.client().reload_unit("crio.service") == "done"
    assert systemd_mock.calls("ReloadUnit") == [("ReloadUnit", ["crio.service", "replace"])]


def test_failed_job_raises_with_unit_and_result(systemd_mock):
    systemd_mock.add_unit("chronyd.service", "active")
    systemd_mock.set_next_job_result("chronyd.service", "failed")
    with pytest.raises(HostError) as info:
        systemd_mock.client().restart_unit("chronyd.service")
    assert "chronyd.service" in str(info.value) and "'failed'" in str(info.value)


def test_reload_of_inactive_unit_fails_as_systemd_does(systemd_mock):
    systemd_mock.add_unit("crio.service", "inactive")
    with pytest.raises(HostError, match="'invalid'"):
        systemd_mock.client().reload_unit("crio.service")


def test_unknown_unit_is_a_clear_error(systemd_mock):
    with pytest.raises(HostError) as info:
        systemd_mock.client().restart_unit("nosuch.service")
    text = str(info.value)
    assert "nosuch.service" in text and "NoSuchUnit" in text


def test_job_that_never_ends_times_out(systemd_mock):
    systemd_mock.add_unit("slow.service", "active")
    systemd_mock.set_next_job_result("slow.service", "")
    with pytest.raises(HostError, match="did not finish"):
        systemd_mock.client().restart_unit("slow.service", timeout=0.2)


def test_active_state_and_unknown_units(systemd_mock):
    systemd_mock.add_unit("a.service", "active")
    systemd_mock.add_unit("b.service", "failed")
    client = systemd_mock.client()
    assert client.active_state("a.service") == "active"
    assert client.active_state("b.service") == "failed"
    assert client.active_state("unknown.service") == "inactive"


def test_unit_file_operations(systemd_mock):
    client = systemd_mock.client()
    changes = client.enable_unit_files(["a.service", "b.timer"])
    assert changes and all(len(c) == 3 for c in changes)
    client.disable_unit_files(["c.service"])
    client.mask_unit_files(["d.service"])
    client.unmask_unit_files(["e.service"])
    assert client.enable_unit_files([]) == []  # nothing to do: no call
    assert systemd_mock.calls() == [
        ("EnableUnitFiles", [["a.service", "b.timer"], False, False]),
        ("DisableUnitFiles", [["c.service"], False]),
        ("MaskUnitFiles", [["d.service"], False, True]),
        ("UnmaskUnitFiles", [["e.service"], False]),
    ]
    assert systemd_mock.unit_file_state("a.service") == "enabled"
    assert systemd_mock.unit_file_state("d.service") == "masked"


def test_logind_reboot(logind_mock):
    logind_mock.client().reboot()
    assert logind_mock.calls("Reboot") == [("Reboot", [False])]


def test_no_bus_is_a_host_error():
    from agent.host.systemd import Systemd

    class Broken:
        def get(self, *_a):
            raise RuntimeError("GDBus.Error:org.freedesktop.DBus.Error.ServiceUnknown: no systemd")

    with pytest.raises(HostError, match="ServiceUnknown"):
        Systemd(Broken()).daemon_reload()


def test_imports_stay_lazy():
    import subprocess
    import sys

    code = ("import sys, agent.host.systemd, agent.host.logind, agent.node.actions, agent.core.disruption; "
            "print(any(m in sys.modules for m in ('pydbus', 'gi')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
