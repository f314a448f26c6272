"""systemd over D-Bus (org.freedesktop.systemd1.Manager), through pydbus.

Jobs (reload/restart) are waited for: we subscribe to ``JobRemoved`` *before* queueing the job,
so a job that finishes at once is not missed, then run the GLib main loop until our job's
signal arrives or the timeout passes. A result other than "done" is an error naming the unit
and the result, as ``systemctl`` reports it.

pydbus and GLib are imported only when a bus is first needed (``node-agent --version`` must
start fast and must not need D-Bus at all).
"""

import logging
import time
from typing import Any, List, Optional, Sequence

from agent.errors import HostError
from agent.host.dbusmanager import ManagerClient, dbus_error_text

log = logging.getLogger(__name__)

SERVICE = "org.freedesktop.systemd1"
PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
UNIT = "org.freedesktop.systemd1.Unit"
_NO_SUCH_UNIT = ("org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.LoadFailed")


class Systemd(ManagerClient):
    SERVICE, PATH, MANAGER, WHAT = SERVICE, PATH, MANAGER, "systemd"

    def __init__(self, bus: Any = None):
        super().__init__(bus)
        self._subscribed = False

    def _call(self, what: str, method: str, *args: Any) -> Any:
        try:
            return getattr(self.manager, method)(*args)
        except HostError:
            raise
        except Exception as exc:
            raise HostError(f"systemd {method} failed for {what}: {dbus_error_text(exc)}") from None

    # --- manager -------------------------------------------------------------------------------

    def daemon_reload(self) -> None:
        """``systemctl daemon-reload``: systemd re-reads unit files (synchronous on the bus)."""
        log.info("systemd daemon-reload")
        self._call("the manager", "Reload")

    def enable_unit_files(self, names: Sequence[str], *, runtime: bool = False, force: bool = False) -> List[Any]:
        """``systemctl enable``: the [Install] symlinks; returns systemd's list of changes."""
        names = list(names)
        if not names:
            return []
        log.info("systemd enable %s", " ".join(names))
        _carries_install_info, changes = self._call(", ".join(names), "EnableUnitFiles", names, runtime, force)
        return [tuple(c) for c in changes]

    def disable_unit_files(self, names: Sequence[str], *, runtime: bool = False) -> List[Any]:
        names = list(names)
        if not names:
            return []
        log.info("systemd disable %s", " ".join(names))
        return [tuple(c) for c in self._call(", ".join(names), "DisableUnitFiles", names, runtime)]

    def mask_unit_files(self, names: Sequence[str], *, runtime: bool = False, force: bool = True) -> List[Any]:
        """``systemctl mask`` (force: replace a unit file or link already at the mask's place)."""
        names = list(names)
        if not names:
            return []
        log.info("systemd mask %s", " ".join(names))
        return [tuple(c) for c in self._call(", ".join(names), "MaskUnitFiles", names, runtime, force)]

    def unmask_unit_files(self, names: Sequence[str], *, runtime: bool = False) -> List[Any]:
        names = list(names)
        if not names:
            return []
        log.info("systemd unmask %s", " ".join(names))
        return [tuple(c) for c in self._call(", ".join(names), "UnmaskUnitFiles", names, runtime)]

    # --- units ---------------------------------------------------------------------------------

    def active_state(self, name: str) -> str:
        """The unit's ActiveState ("active", "inactive", "failed", ...); "inactive" if unknown."""
        try:
            path = self.manager.GetUnit(name)
        except HostError:
            raise
        except Exception as exc:
            text = dbus_error_text(exc)
            if any(e in text for e in _NO_SUCH_UNIT):
                return "inactive"
            raise HostError(f"systemd GetUnit failed for {name}: {text}") from None
        try:
            return str(self.bus.get(SERVICE, path)[UNIT].ActiveState)
        except Exception as exc:
            raise HostError(f"cannot read ActiveState of {name}: {dbus_error_text(exc)}") from None

    def restart_unit(self, name: str, timeout: float = 300.0) -> str:
        """``systemctl restart NAME``; waits for the job. Returns "done" or raises HostError."""
        return self._run_job("RestartUnit", "restart", name, timeout)

    def reload_unit(self, name: str, timeout: float = 300.0) -> str:
        """``systemctl reload NAME``; waits for the job. Returns "done" or raises HostError."""
        return self._run_job("ReloadUnit", "reload", name, timeout)

    def start_unit(self, name: str, timeout: float = 300.0) -> str:
        return self._run_job("StartUnit", "start", name, timeout)

    def stop_unit(self, name: str, timeout: float = 300.0) -> str:
        return self._run_job("StopUnit", "stop", name, timeout)

    def _subscribe(self) -> None:
        # systemd sends job signals only while some client is subscribed.
        if self._subscribed:
            return
        try:
            self.manager.Subscribe()
        except Exception as exc:  # e.g. already subscribed on this connection: harmless
            log.debug("systemd Subscribe: %s", dbus_error_text(exc))
        self._subscribed = True

    def _run_job(self, method: str, verb: str, name: str, timeout: float) -> str:
        from gi.repository import GLib

        self._subscribe()
        results = {}
        loop = GLib.MainLoop()
        wanted: List[Optional[str]] = [None]

        def on_removed(_sender, _path, _iface, _signal, params) -> None:
            _job_id, job_path, _unit, result = params
            results[str(job_path)] = str(result)
            if wanted[0] is not None and str(job_path) == wanted[0]:
                loop.quit()

        subscription = self.bus.subscribe(iface=MANAGER, signal="JobRemoved", object=PATH,
                                          signal_fired=on_removed)
        try:
            log.info("systemd %s %s", verb, name)
            job = str(self._call(name, method, name, "replace"))
            wanted[0] = job
            deadline = time.monotonic() + timeout
            while job not in results:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HostError(f"systemd {verb} of {name}: job {job} did not finish within {timeout:g} s")
                fired: List[bool] = []
                timer = GLib.timeout_add(max(1, int(min(remaining, 1.0) * 1000)), _quit_once, loop, fired)
                loop.run()
                if not fired:
                    GLib.source_remove(timer)
        finally:
            subscription.unsubscribe()
        result = results[job]
        if result != "done":
            raise HostError(f"systemd {verb} of {name} failed: job result {result!r} "
                            f"(see 'journalctl -u {name}')")
        return result



def _quit_once(loop: Any, fired: List[bool]) -> bool:
    fired.append(True)
    loop.quit()
    return False  # a one-shot timer
