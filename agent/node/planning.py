"""Glue between the stages: the target config from what was served, the booted OS, the plan.

Pure where it can be (target_from_served, with_pool_files' merge, the first-boot baseline); the
few reads of the node (booted OS, kubelet-env) go through the root.
"""

import json
import logging
import os
from dataclasses import dataclass, replace
from typing import Optional, Tuple

from agent.core.nodeconfig import NodeConfig
from agent.core.pool import KUBELET_ENV_PATH, PoolIdentity, merge_kubelet_env, resolve_pool
from agent.core.served import Served, node_config_from_served, read_served, unrenderable
from agent.errors import ConfigError
from agent.host.root import Root

log = logging.getLogger(__name__)

ALEPH = "/sysroot/.coreos-aleph-version.json"


@dataclass(frozen=True)
class Booted:
    image: str = ""  # "" when unknown
    kargs: Tuple[str, ...] = ()
    known: bool = False


def target_from_served(ignition: dict, source: str, validated: bool = False) -> Tuple[NodeConfig, Served]:
    """Validate the served Ignition config and build the full target (Ignition + OS-level fields).

    ``validated``: all but its ``ignition`` section is one fetched config the fetch validated
    whole (pointer.ResolvedConfig.validated): only that section is checked again."""
    from agent.core.loadconfig import load_node_config

    # raises ConfigError with every problem's path
    load_node_config({"ignition": ignition.get("ignition")} if validated else ignition, source=source)
    served = read_served(ignition)
    problem = unrenderable(served)
    if problem is not None:
        raise ConfigError(problem.message.split(". What to do")[0], [problem], source)
    return node_config_from_served(ignition, served), served


def identity_of(served: Served) -> PoolIdentity:
    return resolve_pool(None, served)


def with_pool_files(root: Root, target: NodeConfig, identity: PoolIdentity) -> NodeConfig:
    """The target plus ``/etc/kubernetes/kubelet-env`` carrying the pool's labels.

    Written by the same transaction as the rest of the config, so kubelet can never start with
    the files of one pool and the labels of another.
    """
    if not identity.labels:
        return target
    try:
        existing = root.read_text(KUBELET_ENV_PATH)
    except FileNotFoundError:
        existing = ""
    text = merge_kubelet_env(existing, identity.labels)
    from urllib.parse import quote

    entry = {"path": KUBELET_ENV_PATH, "mode": 0o644, "overwrite": True,
             "contents": {"source": "data:," + quote(text, safe="")}}
    ignition = json.loads(json.dumps(target.ignition))
    files = ignition.setdefault("storage", {}).setdefault("files", [])
    files[:] = [f for f in files if f.get("path") != KUBELET_ENV_PATH] + [entry]
    return replace(target, ignition=ignition)


def booted_os(root: Root, rpmostree=None) -> Booted:
    """What the node runs now. Live: rpm-ostree. Another root: the aleph file's image and the
    root's /proc/cmdline if there is one (a first boot runs the boot image's own OS)."""
    if root.is_live:
        from agent.host.rpmostree import booted_os as live_booted

        found = live_booted(root, rpmostree)
        return Booted(found[0], tuple(found[1]), True) if found else Booted()
    image = ""
    try:
        aleph = json.loads(root.read_text(ALEPH))
        image = str(((aleph or {}).get("container-image") or {}).get("image") or "")
    except (OSError, ValueError, AttributeError):
        pass
    try:
        kargs = tuple(root.read_text("/proc/cmdline").split())
    except OSError:
        kargs = ()
    return Booted(image, kargs, bool(image))


def boot_id(root: Root) -> Optional[str]:
    """The kernel's id of this boot (changes at every boot); None where the root has none."""
    try:
        return root.read_text("/proc/sys/kernel/random/boot_id").strip() or None
    except OSError:
        return None


def node_fips(root: Root) -> Optional[bool]:
    """FIPS mode as the kernel reports it; None where the root has no such file (another root)."""
    from agent.core.reconcilable import FIPS_PATH

    try:
        return root.read_text(FIPS_PATH).strip() == "1"
    except OSError:
        return None


def check_reconcilable(root: Root, current: Optional[NodeConfig], target: NodeConfig, *, firstboot: bool,
                       policy_text: Optional[str] = None) -> list:
    """Refuse, before anything is written, what a running node cannot take (FIPS flip, day-2
    storage): ConfigError, exit 65. ``policy_text``: the served MachineConfiguration, whose
    ``irreconcilableValidationOverrides.storage`` lets storage changes through; returns those
    (the sections changed and kept as installed)."""
    from agent.core.reconcilable import check, storage_overrides_text

    overrides = storage_overrides_text(policy_text) if policy_text and not firstboot else ()
    return check(current, target, node_fips(root), firstboot=firstboot, overrides=overrides)


def installed_ignition(config: NodeConfig) -> dict:
    """The Ignition the node was installed with: the MachineConfig the server served at first
    boot (/etc/mcs-machine-config-content.json, kept on day 2; the MCD reads the same file for
    its irreconcilable differences), else ``config``'s own."""
    from agent.core.served import MCS_CONTENT_PATH, file_bytes

    try:
        raw = file_bytes(config.ignition, MCS_CONTENT_PATH)
        mc = json.loads(raw.decode("utf-8")) if raw else None
        found = ((mc or {}).get("spec") or {}).get("config")
    except (ConfigError, ValueError, UnicodeDecodeError, AttributeError):
        found = None
    return found if isinstance(found, dict) else config.ignition


_ENTRY_LISTS = (("storage", "files"), ("storage", "directories"), ("storage", "links"),
                ("systemd", "units"), ("passwd", "users"), ("passwd", "groups"))


def already_on_disk(target: NodeConfig, changed_where) -> dict:
    """The target's Ignition without the entries the apply would change (``changed_where``: JSON
    paths of the changed operations, from a dry run against the disk). What remains is what
    Ignition already laid, byte for byte: no change, so no reboot for it."""
    changed = tuple(changed_where)
    out = json.loads(json.dumps(target.ignition))
    for section, key in _ENTRY_LISTS:
        entries = (out.get(section) or {}).get(key)
        if not isinstance(entries, list):
            continue
        prefix = f"$.{section}.{key}."
        out[section][key] = [e for i, e in enumerate(entries)
                             if not any(w == f"{prefix}{i}" or w.startswith(f"{prefix}{i}.") for w in changed)]
    return out


def on_disk_baseline(root: Root, current: NodeConfig, fetcher, state_dir: str) -> NodeConfig:
    """``current`` without the entries that differ on disk (a dry run of its apply): the plan of a
    forced update from it to the target covers the drifted paths, as first boot plans from what is laid."""
    from agent.node.apply import apply_config

    preview = apply_config(root, current, current, fetcher=fetcher, state_dir=state_dir, dry_run=True)
    if preview.changed_where:
        log.warning("re-applying %s where the disk differs: %s", current.name, ", ".join(preview.changed_where))
    return replace(current, ignition=already_on_disk(current, preview.changed_where))


def firstboot_baseline(target: NodeConfig, booted: Booted, changed_where=None) -> NodeConfig:
    """The config a first boot starts from: what the disk already holds of the target (every
    entry when ``changed_where`` is None: nothing known, nothing assumed present) and the OS the
    boot image runs: its image, the kernel arguments it booted with, the default kernel, no
    extensions. Unknown OS facts count as different (a pivot is the safe assumption). The MCD
    does the same: no reboot at first boot when the booted image and kernel arguments already are
    the target (daemon.go:1255-1285), since Ignition laid the files."""
    present = tuple(a for a in target.kernel_arguments if a in booted.kargs)
    if changed_where is not None:
        return NodeConfig(ignition=already_on_disk(target, changed_where), os_image_url=booted.image,
                          kernel_arguments=present, fips=target.fips, name="(boot image)")
    # FIPS was checked against the node already (check_reconcilable): it is what the node runs.
    return NodeConfig(ignition={"ignition": {"version": target.ignition.get("ignition", {}).get("version", "3.4.0")}},
                      os_image_url=booted.image, kernel_arguments=present, fips=target.fips, name="(boot image)")


def make_plan(current: NodeConfig, target: NodeConfig, policy_text: Optional[str], *, firstboot: bool):
    from agent.core.disruption import effective_policy, load_policy_text, plan_disruption

    user = load_policy_text(policy_text, source="served disruption policy") if policy_text else None
    return plan_disruption(current, target, effective_policy(user), firstboot=firstboot)


def carry_out(plan, root: Root, systemd, logind, *, firstboot: bool):
    """Reloads, restarts and daemon-reloads of the plan; the reboot is the caller's, last."""
    from agent.node.actions import carry_out as run_actions

    actions = [a for a in plan.actions if a.type != "Reboot"]
    result = run_actions(actions, systemd, logind, firstboot=firstboot, live=root.is_live)
    for line in getattr(result, "not_performed", []) or []:
        log.info("not performed on %s: %s", root.top, line)
    return result


def reboot(root: Root, logind) -> None:
    """One reboot, through logind, once everything is on disk."""
    os.sync()
    if not root.is_live or logind is None:
        log.warning("reboot needed; not performed on %s (not the running system)", root.top)
        return
    # Not only OS updates: files or units no policy entry covers need the reboot too.
    log.warning("rebooting now through logind: the applied changes need a reboot")
    logind.reboot()
