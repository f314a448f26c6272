"""A private system D-Bus with python-dbusmock's systemd and logind templates, for host-layer tests.

One dbus-daemon and one mock process per template live for the whole test session (start-up is
the slow part); each test gets them reset (units, jobs, unit-file states, call logs).

The stock systemd template knows StartUnit/StopUnit/GetUnit only, so it is extended here with
what node-agent calls: Subscribe, Reload (daemon-reload), Enable/Disable/Mask/UnmaskUnitFiles,
Reload/RestartUnit (each queues a Job object and emits JobNew/JobRemoved after the reply, as
systemd does), LoadUnit, GetUnitFileState, and NoSuchUnit errors for unknown units. Mock-only
controls: ``SetMockUnitState(name, state)`` and ``SetNextJobResult(name, result)`` (the next
job of that unit ends with ``result``, e.g. "failed"; "" means it never ends).

Use in a test module::

    from tests.helpers import dbus as dbus_fixtures

    # plain assignments (not "import x as fixture") keep ruff's F811 quiet
    systemd_mock = dbus_fixtures.systemd_mock
    logind_mock = dbus_fixtures.logind_mock
    dbus_calls = dbus_fixtures.dbus_calls

    def test_restart(systemd_mock):
        systemd_mock.add_unit("kubelet.service", "active")
        Systemd(systemd_mock.bus).restart_unit("kubelet.service")
        assert systemd_mock.calls("RestartUnit") == [("RestartUnit", ["kubelet.service", "replace"])]

``calls()`` includes every call, e.g. the ``Subscribe`` that precedes the first job and the
``GetUnit`` of ``active_state``: filter by method name when only some matter.
``dbus_calls`` gives the calls both mocks received, in the order the bus delivered them.
"""

import atexit
import os
import shutil
import subprocess
import tempfile
from typing import Any, List, Optional, Tuple

import pytest

SYSTEMD_TEMPLATE = r'''
"""systemd mock: dbusmock's template plus the calls node-agent makes (tests/helpers/dbus.py)."""
import dbus
from gi.repository import GLib

from dbusmock import MOCK_IFACE, mockobject
from dbusmock.templates import systemd as _upstream
from dbusmock.templates.systemd import (  # noqa: F401  (re-exported: the mock picks them up)
    BUS_NAME, MAIN_IFACE, MAIN_OBJ, PATH_PREFIX, SYSTEM_BUS, UNIT_IFACE, AddMockUnit, StartTransientUnit,
    escape_unit_name,
)

JOB_IFACE = "org.freedesktop.systemd1.Job"
NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"


def load(mock, parameters):
    _upstream.load(mock, parameters)
    mock.next_results = {}
    mock.unit_file_states = {}


def _unit_path(self, name):
    name = str(name)
    if name not in self.units:
        raise dbus.exceptions.DBusException(f"Unit {name} not found.", name=NO_SUCH_UNIT)
    return self.units[name]


def _set_state(self, name, state):
    mockobject.objects[_unit_path(self, name)].UpdateProperties(UNIT_IFACE, {"ActiveState": state})


def _state(self, name):
    return str(mockobject.objects[_unit_path(self, name)].props[UNIT_IFACE]["ActiveState"])


def _queue_job(self, name, job_type, default_result, state_after):
    name = str(name)
    _unit_path(self, name)
    job_id = self.next_job_id
    self.next_job_id += 1
    job_path = f"{PATH_PREFIX}/job/{job_id}"
    self.AddObject(job_path, JOB_IFACE,
                   {"Id": dbus.UInt32(job_id), "JobType": job_type, "State": "running"}, [])
    result = self.next_results.pop(name, default_result)

    def finish():
        self.EmitSignal(MAIN_IFACE, "JobNew", "uos", [job_id, job_path, name])
        if result == "":
            return False  # a job that hangs
        if result == "done" and state_after:
            _set_state(self, name, state_after)
        elif result != "done":
            _set_state(self, name, "failed")
        self.RemoveObject(job_path)
        self.EmitSignal(MAIN_IFACE, "JobRemoved", "uoss", [job_id, job_path, name, result])
        return False

    GLib.idle_add(finish)
    return dbus.ObjectPath(job_path)


@dbus.service.method(MAIN_IFACE, in_signature="", out_signature="")
def Subscribe(self):
    pass


@dbus.service.method(MAIN_IFACE, in_signature="", out_signature="")
def Unsubscribe(self):
    pass


@dbus.service.method(MAIN_IFACE, in_signature="", out_signature="")
def Reload(self):
    pass


@dbus.service.method(MAIN_IFACE, in_signature="s", out_signature="o")
def GetUnit(self, name):
    return _unit_path(self, name)


@dbus.service.method(MAIN_IFACE, in_signature="s", out_signature="o")
def LoadUnit(self, name):
    if str(name) not in self.units:
        self.AddMockUnit(name)
        mockobject.objects[self.units[str(name)]].UpdateProperties(UNIT_IFACE, {"LoadState": "not-found"})
    return self.units[str(name)]


@dbus.service.method(MAIN_IFACE, in_signature="ss", out_signature="o")
def StartUnit(self, name, _mode):
    return _queue_job(self, name, "start", "done", "active")


@dbus.service.method(MAIN_IFACE, in_signature="ss", out_signature="o")
def StopUnit(self, name, _mode):
    return _queue_job(self, name, "stop", "done", "inactive")


@dbus.service.method(MAIN_IFACE, in_signature="ss", out_signature="o")
def RestartUnit(self, name, _mode):
    return _queue_job(self, name, "restart", "done", "active")


@dbus.service.method(MAIN_IFACE, in_signature="ss", out_signature="o")
def ReloadUnit(self, name, _mode):
    # as systemd: reloading a unit that is not running is an invalid job
    default = "done" if _state(self, name) in ("active", "reloading") else "invalid"
    return _queue_job(self, name, "reload", default, None)


def _file_changes(self, names, kind, state, dest):
    changes = []
    for name in names:
        self.unit_file_states[str(name)] = state
        changes.append((kind, f"/etc/systemd/system/{name}" if state == "masked"
                        else f"/etc/systemd/system/multi-user.target.wants/{name}", dest))
    return dbus.Array(changes, signature="(sss)")


@dbus.service.method(MAIN_IFACE, in_signature="asbb", out_signature="ba(sss)")
def EnableUnitFiles(self, names, _runtime, _force):
    return True, _file_changes(self, names, "symlink", "enabled", "/etc/systemd/system/x")


@dbus.service.method(MAIN_IFACE, in_signature="asb", out_signature="a(sss)")
def DisableUnitFiles(self, names, _runtime):
    return _file_changes(self, names, "unlink", "disabled", "")


@dbus.service.method(MAIN_IFACE, in_signature="asbb", out_signature="a(sss)")
def MaskUnitFiles(self, names, _runtime, _force):
    return _file_changes(self, names, "symlink", "masked", "/dev/null")


@dbus.service.method(MAIN_IFACE, in_signature="asb", out_signature="a(sss)")
def UnmaskUnitFiles(self, names, _runtime):
    return _file_changes(self, names, "unlink", "disabled", "")


@dbus.service.method(MAIN_IFACE, in_signature="s", out_signature="s")
def GetUnitFileState(self, name):
    return self.unit_file_states.get(str(name), "disabled")


@dbus.service.method(MOCK_IFACE, in_signature="ss", out_signature="")
def SetMockUnitState(self, name, state):
    if str(name) not in self.units:
        self.AddMockUnit(name)
    _set_state(self, name, str(state))


@dbus.service.method(MOCK_IFACE, in_signature="ss", out_signature="")
def SetNextJobResult(self, name, result):
    self.next_results[str(name)] = str(result)
'''

# Mock-side calls that are not what the code under test did.
_MOCK_CONTROL = {"AddMockUnit", "SetMockUnitState", "SetNextJobResult"}


def _plain(value: Any) -> Any:
    """dbus-python / GLib values -> plain Python (str, int, bool, list, tuple)."""
    try:
        import dbus
    except ImportError:  # pragma: no cover
        dbus = None
    if dbus is not None and isinstance(value, dbus.Boolean):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return tuple(items) if isinstance(value, tuple) and not isinstance(value, list) else items
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


class _PrivateBus:
    """The session-wide private system bus with both mocks on it."""

    def __init__(self) -> None:
        from dbusmock.testcase import BusType, PrivateDBus, SpawnedMock

        self._dir = tempfile.mkdtemp(prefix="node-agent-dbus-")
        self._old_env = os.environ.get("DBUS_SYSTEM_BUS_ADDRESS")
        self.daemon = PrivateDBus(BusType.SYSTEM)
        self.daemon.start()  # sets DBUS_SYSTEM_BUS_ADDRESS for child processes
        self.address = self.daemon.address
        template = os.path.join(self._dir, "systemd_node_agent.py")
        with open(template, "w", encoding="utf-8") as f:
            f.write(SYSTEMD_TEMPLATE)
        self._log = open(os.path.join(self._dir, "mocks.log"), "ab")  # noqa: SIM115
        self.systemd = SpawnedMock.spawn_with_template(template, {}, BusType.SYSTEM, self._log, subprocess.PIPE)
        self.logind = SpawnedMock.spawn_with_template("logind", {}, BusType.SYSTEM, self._log, subprocess.PIPE)
        import pydbus

        self.bus = pydbus.connect(self.address)
        self._seen: List[Tuple[str, str, list]] = []
        self._subs = [self.bus.subscribe(iface="org.freedesktop.DBus.Mock", signal="MethodCalled",
                                         signal_fired=self._on_called)]

    def _on_called(self, _sender, path, _iface, _signal, params) -> None:
        method, args = params
        label = "logind" if str(path).startswith("/org/freedesktop/login1") else "systemd"
        if method not in _MOCK_CONTROL:
            self._seen.append((label, str(method), _plain(list(args))))

    def drain_signals(self) -> None:
        """Make sure every MethodCalled signal sent so far has been handled.

        A round trip to each mock on our connection comes back after the signals it sent
        before; then the queued handlers run."""
        from gi.repository import GLib

        for name, path in (("org.freedesktop.systemd1", "/org/freedesktop/systemd1"),
                           ("org.freedesktop.login1", "/org/freedesktop/login1")):
            self.bus.con.call_sync(name, path, "org.freedesktop.DBus.Peer", "Ping", None, None, 0, 5000, None)
        ctx = GLib.MainContext.default()
        while ctx.pending():
            ctx.iteration(False)

    def reset(self) -> None:
        for mock in (self.systemd, self.logind):
            mock.obj.Reset(dbus_interface="org.freedesktop.DBus.Mock")
            mock.obj.ClearCalls(dbus_interface="org.freedesktop.DBus.Mock")
        self.drain_signals()
        self._seen.clear()

    def ordered_calls(self) -> List[Tuple[str, str, list]]:
        self.drain_signals()
        return list(self._seen)

    def stop(self) -> None:
        for sub in self._subs:
            sub.unsubscribe()
        for mock in (self.systemd, self.logind):
            mock.terminate()
        self.daemon.stop()
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        if self._old_env is None:
            os.environ.pop("DBUS_SYSTEM_BUS_ADDRESS", None)
        else:
            os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = self._old_env


class _MockHandle:
    """What a test holds: the pydbus bus to hand to the code under test, and the calls seen."""

    def __init__(self, private: _PrivateBus, spawned: Any, label: str):
        self._private = private
        self._spawned = spawned
        self.label = label
        self.bus = private.bus
        self.address = private.address

    @property
    def obj(self) -> Any:
        """The dbus-python proxy of the mock's main object (for AddMethod, EmitSignal, ...)."""
        return self._spawned.obj

    def calls(self, *methods: str) -> List[Tuple[str, list]]:
        """Calls this mock received, in order, as (method, [args]); only ``methods`` if given."""
        rows = self._spawned.obj.GetCalls(dbus_interface="org.freedesktop.DBus.Mock")
        out = [(str(name), _plain(list(args))) for _ts, name, args in rows if str(name) not in _MOCK_CONTROL]
        return [c for c in out if not methods or c[0] in methods]

    def method_names(self, *methods: str) -> List[str]:
        return [name for name, _ in self.calls(*methods)]


class SystemdMock(_MockHandle):
    def add_unit(self, name: str, active_state: str = "inactive") -> None:
        self.obj.SetMockUnitState(name, active_state, dbus_interface="org.freedesktop.DBus.Mock")

    def set_next_job_result(self, name: str, result: str) -> None:
        """The next job of ``name`` ends with ``result`` ("failed", "timeout"...; "" = never ends)."""
        self.obj.SetNextJobResult(name, result, dbus_interface="org.freedesktop.DBus.Mock")

    def active_state(self, name: str) -> str:
        path = self.obj.GetUnit(name, dbus_interface="org.freedesktop.systemd1.Manager")
        return str(self.bus.get("org.freedesktop.systemd1", str(path))["org.freedesktop.systemd1.Unit"].ActiveState)

    def unit_file_state(self, name: str) -> str:
        return str(self.obj.GetUnitFileState(name, dbus_interface="org.freedesktop.systemd1.Manager"))

    def client(self):
        from agent.host.systemd import Systemd

        return Systemd(self.bus)


class LogindMock(_MockHandle):
    def client(self):
        from agent.host.logind import Logind

        return Logind(self.bus)


_PRIVATE: Optional[_PrivateBus] = None


def private_system_bus() -> _PrivateBus:
    """The session's private bus with both mocks, started on first use, stopped at exit.

    (A module-level singleton rather than a session fixture, so that test modules only need to
    import the fixtures they use.)"""
    global _PRIVATE
    if _PRIVATE is None:
        if shutil.which("dbus-daemon") is None:
            pytest.skip("dbus-daemon is not installed (make sysdeps)")
        _PRIVATE = _PrivateBus()
        atexit.register(_PRIVATE.stop)
    return _PRIVATE


def _fresh() -> _PrivateBus:
    private = private_system_bus()
    private.reset()
    return private


@pytest.fixture
def systemd_mock() -> SystemdMock:
    """The systemd mock, reset for this test (unit states, pending job results, calls)."""
    private = _fresh()
    return SystemdMock(private, private.systemd, "systemd")


@pytest.fixture
def logind_mock(systemd_mock) -> LogindMock:
    """The logind mock (requesting it resets the systemd mock too: same bus)."""
    private = private_system_bus()
    return LogindMock(private, private.logind, "logind")


@pytest.fixture
def dbus_calls(systemd_mock):
    """A function returning [(mock, method, [args])] over both mocks, in bus order."""
    return private_system_bus().ordered_calls
