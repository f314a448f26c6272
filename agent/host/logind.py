"""systemd-logind over D-Bus: the reboot, as kured and the Flatcar update operator do it.

The caller makes everything durable before calling ``reboot()`` (the journal, staged files,
``os.sync()``): logind starts the shutdown at once.
"""

import logging

from agent.errors import HostError
from agent.host.dbusmanager import ManagerClient, dbus_error_text

log = logging.getLogger(__name__)

SERVICE = "org.freedesktop.login1"
PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"


class Logind(ManagerClient):
    SERVICE, PATH, MANAGER, WHAT = SERVICE, PATH, MANAGER, "systemd-logind"

    def reboot(self) -> None:
        """Ask logind to reboot now (not interactive: no polkit prompt; we run as root)."""
        log.warning("rebooting through systemd-logind")
        try:
            self.manager.Reboot(False)
        except Exception as exc:
            raise HostError(f"logind Reboot failed: {dbus_error_text(exc)}") from None
