"""What a running node cannot take (pure): a FIPS flip and day-2 storage changes.

The MCD refuses the same before it touches anything (pkg/daemon/update.go:1640-1651
``checkFIPS``; ``reconcilable``: "ignition disks section contains changes"). FIPS mode is chosen
when the node is installed; disks, RAID arrays, LUKS volumes and filesystems are laid down by
Ignition in the initramfs at first boot only. Both callers (first boot, update) check before they
plan, so a refusal writes nothing and exits 65.

``MachineConfiguration.spec.irreconcilableValidationOverrides.storage`` (values ``Disks``,
``FileSystems``, ``Raid``; 1 to 3, no duplicates: the operator.openshift.io CRD) lets a day-2
change of those sections through, as upstream does (pkg/controller/common/reconcile.go
``IsRenderedConfigReconcilable`` with overrides; reconcile_test.go
``TestIsRenderedConfigReconcilable``: a disk, filesystem or raid change is reconcilable with
its override): new nodes get it at first boot, an existing node keeps what it was installed
with and reports the difference (upstream: MachineConfigNode ``status.irreconcilableChanges``,
computed against the install-time config /etc/mcs-machine-config-content.json,
pkg/daemon/irreconcilable_diff_reporter.go). ``luks`` has no override upstream; we keep refusing
its changes (upstream lets them through unreported: reconcile_test.go "LuksClevisTang").
"""

from typing import Any, Dict, List, Optional, Tuple

from agent.core.nodeconfig import NodeConfig
from agent.errors import ConfigError, Problem

FIPS_PATH = "/proc/sys/crypto/fips_enabled"
STORAGE_SECTIONS = ("disks", "raid", "luks", "filesystems")
OVERRIDES = {"Disks": "disks", "FileSystems": "filesystems", "Raid": "raid"}  # CRD enum -> Ignition section
OVERRIDES_PATH = "$.spec.irreconcilableValidationOverrides"


def fips_problem(target: NodeConfig, node_fips: Optional[bool]) -> Optional[Problem]:
    if node_fips is None or node_fips == bool(target.fips):
        return None
    have, want = ("on" if node_fips else "off"), ("on" if target.fips else "off")
    return Problem("$.spec.fips", f"FIPS mode is {have} on this node and the config wants it {want}: FIPS is "
                   "chosen when a node is installed and is never changed on a running node (the MCD refuses it "
                   "too); set fips back in the MachineConfig, or reinstall the node with the wanted setting",
                   "fips-change")


def force_file_problems(target: NodeConfig) -> List[Problem]:
    """A config may not write the force file (upstream refuses a MachineConfig that writes the
    MCD's: reconcile.go "cannot create %s via Ignition"): it would skip every validation."""
    from agent.core.drift import FORCE_FILE

    return [Problem(f"$.storage.files.{i}.path", f"{FORCE_FILE} cannot be written by a config: it is node-agent's "
                    "force file (it skips the on-disk validation); remove that file from the MachineConfig",
                    "force-file")
            for i, f in enumerate(target.files) if f.get("path") == FORCE_FILE]


def changed_sections(old_ignition: Dict[str, Any], new_ignition: Dict[str, Any]) -> List[str]:
    old = old_ignition.get("storage") or {}
    new = new_ignition.get("storage") or {}
    return [key for key in STORAGE_SECTIONS if (old.get(key) or []) != (new.get(key) or [])]


def storage_problems(current: NodeConfig, target: NodeConfig, overrides: Tuple[str, ...] = ()) -> List[Problem]:
    """The refused storage changes: every changed section but those ``overrides`` (CRD values) allow."""
    allowed = {OVERRIDES[o] for o in overrides if o in OVERRIDES}
    return [Problem(f"$.storage.{key}", f"the {key} section changed: disks, RAID arrays, LUKS volumes and "
                    "filesystems are laid down by Ignition at first boot only and are never changed on a running "
                    "node (the MCD refuses it too); revert the change, or reprovision the node to get it"
                    + ("" if key == "luks" else f", or allow it with {OVERRIDES_PATH}.storage "
                       f"[{_value_of(key)}] (new nodes get it, existing ones report the difference)"),
                    "storage-day2")
            for key in changed_sections(current.ignition, target.ignition) if key not in allowed]


def _value_of(section: str) -> str:
    return next(k for k, v in OVERRIDES.items() if v == section)


def override_problems(spec: Any, prefix: str = OVERRIDES_PATH) -> List[Problem]:
    """``irreconcilableValidationOverrides`` as the CRD admits it: an object with at least one
    property; ``storage`` a list of 1 to 3 of Disks, FileSystems, Raid without duplicates."""
    if spec is None:
        return []
    if not isinstance(spec, dict) or not spec:
        return [Problem(prefix, "must be an object with at least one property (storage)", "overrides")]
    out = [Problem(f"{prefix}.{k}", f"unknown field {k!r}; known: storage", "overrides")
           for k in sorted(spec, key=str) if k != "storage"]
    storage = spec.get("storage")
    where = f"{prefix}.storage"
    if "storage" not in spec:
        return out
    if not isinstance(storage, list) or not 1 <= len(storage) <= 3:
        return out + [Problem(where, "must be a list of 1 to 3 items", "overrides")]
    for i, v in enumerate(storage):
        if v not in OVERRIDES:
            out.append(Problem(f"{where}.{i}", f"must be one of {', '.join(OVERRIDES)}", "overrides", value=v))
        elif storage.index(v) != i:
            out.append(Problem(f"{where}.{i}", "duplicate value", "overrides", value=v))
    return out


def storage_overrides(doc: Any) -> Tuple[str, ...]:
    """The storage overrides a MachineConfiguration document (the served policy file) grants;
    ConfigError naming the field when the CRD would not admit them."""
    spec = (doc or {}).get("spec") if isinstance(doc, dict) else None
    raw = spec.get("irreconcilableValidationOverrides") if isinstance(spec, dict) else None
    problems = override_problems(raw)
    if problems:
        raise ConfigError(f"invalid {OVERRIDES_PATH}: {problems[0].message}", problems)
    return tuple((raw or {}).get("storage") or ())


def storage_overrides_text(text: Any) -> Tuple[str, ...]:
    """``storage_overrides`` of a MachineConfiguration's YAML or JSON text (the served policy
    file, ``plan --policy``); text that is not YAML grants none (its policy reader names it)."""
    from agent.ignition.yamlsafe import safe_load

    try:
        doc = safe_load(text)
    except Exception:  # yaml.YAMLError, whatever the text: the policy reader refuses it, naming it
        return ()
    return storage_overrides(doc)


def check(current: Optional[NodeConfig], target: NodeConfig, node_fips: Optional[bool], *, firstboot: bool,
          overrides: Tuple[str, ...] = ()) -> List[str]:
    """Raise ConfigError (exit 65) naming every refusal. ``node_fips`` is what the kernel says
    (None when unknown: then the previous config's setting stands for it on day 2). Returns the
    storage sections that changed and that ``overrides`` let through (recorded, not refused)."""
    if node_fips is None and current is not None and not firstboot:
        node_fips = bool(current.fips)
    problems = [p for p in [fips_problem(target, node_fips)] if p is not None]
    problems += force_file_problems(target)
    kept: List[str] = []
    if current is not None and not firstboot:
        problems += storage_problems(current, target, overrides)
        refused = {p.path for p in problems}
        kept = [k for k in changed_sections(current.ignition, target.ignition) if f"$.storage.{k}" not in refused]
    if problems:
        raise ConfigError(f"{target.name or 'the config'} cannot be applied to this node: "
                          + "; ".join(p.message.split(":")[0] for p in problems) + "; nothing was changed",
                          problems)
    return kept


def irreconcilable_differences(installed: Dict[str, Any], target: Dict[str, Any]) -> List[str]:
    """The storage sections (``storage.disks``...) in which ``target`` differs from the Ignition
    the node was installed with: what the node reports and keeps (upstream compares the same
    four sections with the install-time config, irreconcilable_diff_reporter.go
    ``patchDaemonManagedFields``)."""
    return [f"storage.{k}" for k in changed_sections(installed, target)]
