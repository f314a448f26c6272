"""What a running node cannot take (pure): a FIPS flip and day-2 storage changes.

The MCD refuses the same before it touches anything (pkg/daemon/update.go:1640-1651
``checkFIPS``; ``reconcilable``: "ignition disks section contains changes"). FIPS mode is chosen
when the node is installed; disks, RAID arrays, LUKS volumes and filesystems are laid down by
Ignition in the initramfs at first boot only. Both callers (first boot, update) check before they
plan, so a refusal writes nothing and exits 65.
"""

from typing import List, Optional

from agent.core.nodeconfig import NodeConfig
from agent.errors import ConfigError, Problem

FIPS_PATH = "/proc/sys/crypto/fips_enabled"
STORAGE_SECTIONS = ("disks", "raid", "luks", "filesystems")


def fips_problem(target: NodeConfig, node_fips: Optional[bool]) -> Optional[Problem]:
    if node_fips is None or node_fips == bool(target.fips):
        return None
    have, want = ("on" if node_fips else "off"), ("on" if target.fips else "off")
    return Problem("$.spec.fips", f"FIPS mode is {have} on this node and the config wants it {want}: FIPS is "
                   "chosen when a node is installed and is never changed on a running node (the MCD refuses it "
                   "too); set fips back in the MachineConfig, or reinstall the node with the wanted setting",
                   "fips-change")


def storage_problems(current: NodeConfig, target: NodeConfig) -> List[Problem]:
    old = current.ignition.get("storage") or {}
    new = target.ignition.get("storage") or {}
    return [Problem(f"$.storage.{key}", f"the {key} section changed: disks, RAID arrays, LUKS volumes and "
                    "filesystems are laid down by Ignition at first boot only and are never changed on a running "
                    "node (the MCD refuses it too); revert the change, or reprovision the node to get it",
                    "storage-day2")
            for key in STORAGE_SECTIONS if (old.get(key) or []) != (new.get(key) or [])]


def check(current: Optional[NodeConfig], target: NodeConfig, node_fips: Optional[bool], *, firstboot: bool) -> None:
    """Raise ConfigError (exit 65) naming every refusal. ``node_fips`` is what the kernel says
    (None when unknown: then the previous config's setting stands for it on day 2)."""
    if node_fips is None and current is not None and not firstboot:
        node_fips = bool(current.fips)
    problems = [p for p in [fips_problem(target, node_fips)] if p is not None]
    if current is not None and not firstboot:
        problems += storage_problems(current, target)
    if problems:
        raise ConfigError(f"{target.name or 'the config'} cannot be applied to this node: "
                          + "; ".join(p.message.split(":")[0] for p in problems) + "; nothing was changed",
                          problems)
