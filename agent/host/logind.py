"""systemd-logind over D-Bus: the reboot, as kured and the Flatcar update operator do it.

The caller makes everything durable before calling ``reboot()`` (the journal, staged files,
``os.sync()``): logind starts the shutdown at once.
"""

import logging
from typing import Any

from agent.errors import HostError
from agent.host.systemd import dbus_error_text

log = logging.getLogger(__name__)

SERVICE = "org.freedesktop.login1"
PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"


class Logind:
    def __init__(self, bus: Any = None):
        self._bus = bus
        self._manager: Any = None

    @property
    def bus(self) -> Any:
        if self._bus is None:
            try:
                from pydbus import SystemBus

                self._bus = SystemBus()
            except Exception as exc:
                raise HostError(f"cannot connect to the system D-Bus: {dbus_error_text(exc)}") from None
        return self._bus

    @property
    def manager(self) -> Any:
        if self._manager is None:
            try:
                self._manager = self.bus.get(SERVICE, PATH)[MANAGER]
            except Exception as exc:
                raise HostError(f"cannot reach systemd-logind over D-Bus: {dbus_error_text(exc)}") from None
        return self._manager

    def reboot(self) -> None:
        """Ask logind to reboot now (not interactive: no polkit prompt; we run as root)."""
        log.warning("rebooting through systemd-logind")
        try:
            self.manager.Reboot(False)
        except Exception as exc:
            raise HostError(f"logind Reboot failed: {dbus_error_text(exc)}") from None
