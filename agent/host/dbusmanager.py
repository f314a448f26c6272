"""The D-Bus plumbing systemd and logind share: a lazily opened system bus and a manager proxy.

pydbus is imported only when a bus is first needed (``node-agent --version`` must start fast
and must not need D-Bus at all). Tests hand in a bus of their own (python-dbusmock).
"""

from typing import Any

from agent.errors import HostError


def dbus_error_text(exc: BaseException) -> str:
    """``GDBus.Error:org.x.Y: message`` -> ``org.x.Y: message``."""
    text = getattr(exc, "message", None) or str(exc)
    return text.replace("GDBus.Error:", "", 1)


def import_pydbus() -> Any:
    """pydbus: the installed one, else the copy the RHEL 9 RPM bundles in ``agent._vendor``
    (neither RHEL 9 nor EPEL 9 carries python3-pydbus)."""
    try:
        import pydbus
    except ImportError:
        try:
            from agent._vendor import pydbus  # type: ignore[no-redef]
        except ImportError:
            raise ImportError("pydbus is not installed (pip install pydbus; on RHEL 9 the node-agent "
                              "RPM bundles it)") from None
    return pydbus


class ManagerClient:
    SERVICE = ""
    PATH = ""
    MANAGER = ""
    WHAT = ""  # who answers, for error messages ("systemd", "systemd-logind")

    def __init__(self, bus: Any = None):
        self._bus = bus
        self._manager: Any = None

    @property
    def bus(self) -> Any:
        if self._bus is None:
            try:
                self._bus = import_pydbus().SystemBus()
            except Exception as exc:
                raise HostError(f"cannot connect to the system D-Bus: {dbus_error_text(exc)}") from None
        return self._bus

    @property
    def manager(self) -> Any:
        if self._manager is None:
            try:
                self._manager = self.bus.get(self.SERVICE, self.PATH)[self.MANAGER]
            except Exception as exc:
                raise HostError(f"cannot reach {self.WHAT} over D-Bus: {dbus_error_text(exc)}") from None
        return self._manager
