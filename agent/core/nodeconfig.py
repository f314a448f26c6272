"""The one data shape every stage passes around: a node's full configuration.

An Ignition config alone, or a MachineConfig (``spec.config`` is Ignition, plus OS-level fields),
both become a ``NodeConfig``. The Ignition part stays a plain JSON-shaped dict (validated,
spec 3.x) so that pure functions (diff, plan, render, merge) work on data, not objects.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, Tuple


@dataclass(frozen=True)
class NodeConfig:
    ignition: Dict[str, Any] = field(default_factory=lambda: {"ignition": {"version": "3.4.0"}})
    os_image_url: str = ""
    kernel_arguments: Tuple[str, ...] = ()  # MachineConfig spec.kernelArguments, in order
    kernel_type: str = ""  # "", "default", "realtime" or "64k-pages"
    extensions: Tuple[str, ...] = ()
    fips: bool = False
    name: str = ""  # e.g. rendered-worker-<hash>, or the file name

    @property
    def files(self) -> list:
        return self.ignition.get("storage", {}).get("files", []) or []

    @property
    def directories(self) -> list:
        return self.ignition.get("storage", {}).get("directories", []) or []

    @property
    def links(self) -> list:
        return self.ignition.get("storage", {}).get("links", []) or []

    @property
    def units(self) -> list:
        return self.ignition.get("systemd", {}).get("units", []) or []

    @property
    def users(self) -> list:
        return self.ignition.get("passwd", {}).get("users", []) or []

    def os_fields(self) -> Dict[str, Any]:
        """OS-level fields: any change of these needs a reboot."""
        return {
            "osImageURL": self.os_image_url,
            "kernelArguments": list(self.kernel_arguments),
            "kernelType": self.kernel_type,
            "extensions": list(self.extensions),
            "fips": self.fips,
        }
