"""What a config change needs under the node disruption policy: actions, drain, reboot.

A change needs nothing, a service reload or restart, a daemon-reload, a drain, or a reboot
(MachineConfiguration ``spec.nodeDisruptionPolicy``, REFERENCE §4). The policy itself (parse,
validate, the built-in defaults in ``agent/data/disruption-defaults.yaml``, merge) is
``agent.core.nodedisruption``; its names are re-exported here.

``compute_actions(changes, policy)`` follows the MCO's rules, with two improvements: the
answer has a stable order (first appearance, an entry's own order kept, DaemonReload moved
before any Reload/Restart) and no duplicates. Each action carries the causes that produced it.

Special (only for ``/etc/containers/registries.conf``) stays ``Special`` in the plan, as in
the MCO's own action lists: it reloads crio.service, and drains first unless the change only
adds digest-only mirrors. The plan's ``drain`` flag carries that decision; no separate Drain
action is added (as a Reboot does not add one either).
"""

import dataclasses
import gc
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from agent.core import registries
from agent.core.diff import CHANGED, Changes
from agent.core.nodedisruption import (  # noqa: F401 (re-exported: the policy's names stay importable from here)
    ACTION_TYPES,
    BOOKKEEPING_PATHS,
    DAEMON_RELOAD,
    DEFAULTS_RESOURCE,
    DRAIN,
    MAX_ACTIONS,
    MAX_FILES,
    MAX_SERVICE_NAME,
    MAX_UNITS,
    NONE,
    POLICY_PATH,
    REBOOT,
    REGISTRIES_CONF,
    RELOAD,
    RESTART,
    SPECIAL,
    SPECIAL_UNIT,
    UNIT_SUFFIXES,
    USER_ACTION_TYPES,
    Policy,
    PolicyAction,
    PolicyEntry,
    default_policy,
    effective_policy,
    load_policy_text,
    merge,
    merge_policy,
    parse_policy,
    policy_from_document,
)

# --- computing actions -------------------------------------------------------------------------

@dataclass(frozen=True)
class Cause:
    change: str  # "/etc/chrony.conf changed (contents)"
    rule: str = ""  # "files[/etc/chrony.conf]", "units[x.service]", "sshkey"; "" when none covers it
    says: str = ""  # what the rule says, e.g. "Restart chronyd.service"
    note: str = ""  # for rules without an entry, why

    def __str__(self) -> str:
        if self.rule:
            return f"{self.change}; policy {self.rule} says {self.says}"
        return f"{self.change}; {self.note}"


@dataclass(frozen=True)
class Action:
    type: str
    unit: str = ""  # Reload / Restart
    causes: Tuple[Cause, ...] = ()
    conditional: bool = False  # first boot: only if the unit is already active
    drain: bool = False  # Special: whether the change needs a drain first
    drain_reason: str = ""

    @property
    def target_unit(self) -> str:
        """The unit this action reloads or restarts ("" for the others)."""
        return SPECIAL_UNIT if self.type == SPECIAL else self.unit

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"type": self.type}
        if self.type in (RELOAD, RESTART):
            out["unit"] = self.unit
        if self.type == SPECIAL:
            # what Special resolves to; "unit" stays reserved for Reload/Restart (the contract)
            out["reload"] = SPECIAL_UNIT
            out["drain"] = self.drain
            if self.drain_reason:
                out["drainReason"] = self.drain_reason
        if self.conditional:
            out["onlyIfActive"] = True
        out["causes"] = [str(c) for c in self.causes]
        return out

    def describe(self) -> str:
        if self.type == SPECIAL:
            text = f"Reload {SPECIAL_UNIT} (Special: registries.conf"
            text += f"; drains first: {self.drain_reason})" if self.drain else "; only digest-only mirrors added)"
        elif self.unit:
            text = f"{self.type} {self.unit}"
        else:
            text = self.type
        return text + (" (only if active)" if self.conditional else "")


@dataclass(frozen=True)
class Plan:
    actions: Tuple[Action, ...]
    drain: bool
    reboot: bool
    changes: Changes = field(default_factory=Changes)
    firstboot: bool = False
    drain_skipped: str = ""  # why a drain the actions call for does not happen (single-node cluster)

    def to_dict(self) -> Dict[str, Any]:
        out = {
            "actions": [a.to_dict() for a in self.actions],
            "drain": self.drain,
            "reboot": self.reboot,
            "changes": self.changes.to_dict(),
        }
        if self.drain_skipped:
            out["drainSkipped"] = self.drain_skipped
        return out

    def explain(self) -> str:
        lines = []
        described = _change_lines(self.changes)
        lines.append("Changes:" if described else "Changes: none")
        lines.extend(f"  {d}" for d in described)
        lines.append("Actions:")
        for action in self.actions:
            lines.append(f"  {action.describe()}")
            for cause in action.causes:
                lines.append(f"    because {cause}")
        # What a drain is: docs/drain.md. Only the Kubernetes backend has pods to evict.
        drain = ("drain first: node-config-server cordons the Node and evicts its pods as kubectl drain does "
                 "(Kubernetes backend; other backends have no pods: a drain lease only)")
        if self.reboot:
            lines.append("Reboot (no drain at first boot)." if self.firstboot else
                         f"Reboot (no drain: {self.drain_skipped})." if self.drain_skipped else f"Reboot ({drain}).")
        elif self.drain:
            lines.append(f"No reboot. {drain[0].upper()}{drain[1:]}.")
        elif self.drain_skipped:
            lines.append(f"No reboot. No drain: {self.drain_skipped}.")
        else:
            lines.append("No reboot. No drain." + (" (first boot: nothing runs yet)" if self.firstboot else ""))
        return "\n".join(lines)


SINGLE_NODE = ("single-node cluster (controlPlaneTopology SingleReplica): the pods have nowhere else to run, so "
               "nothing is cordoned or evicted, as the MCD's drainRequired (pkg/daemon/drain.go)")


def for_topology(plan: Plan, topology: Optional[str]) -> Plan:
    """The plan on a cluster of ``topology`` (the Infrastructure object's
    status.controlPlaneTopology): a single-node cluster never drains (the MCD's drainRequired is
    ``!isSingleNodeTopology``); node-config-server's lease answer says the same."""
    if topology != "SingleReplica" or not plan.drain:
        return plan
    return dataclasses.replace(plan, drain=False, drain_skipped=SINGLE_NODE)


def _change_lines(changes: Changes) -> List[str]:
    return [c.describe() for group in (changes.os, changes.files, changes.units, changes.ssh_keys, changes.users)
            for c in group]


def _collect(changes: Changes, policy: Policy) -> List[Tuple[PolicyAction, Cause, str]]:
    """(action, cause, drain reason for Special) for every change, in a fixed order."""
    out: List[Tuple[PolicyAction, Cause, str]] = []
    reboot = PolicyAction(REBOOT)
    for oc in changes.os:
        out.append((reboot, Cause(oc.describe(), note="OS-level changes always need a Reboot"), ""))
    for fc in changes.files:
        if fc.path in BOOKKEEPING_PATHS:
            out.append((PolicyAction(NONE), Cause(fc.describe(), note="first-boot bookkeeping of the config "
                                                                       "server; nothing to do"), ""))
            continue
        entry = policy.file_entry(fc.path)
        if entry is None:
            out.append((reboot, Cause(fc.describe(), note="no policy entry covers it, so Reboot"), ""))
            continue
        cause = Cause(fc.describe(), f"files[{entry.key}]", entry.says())
        for action in entry.actions:
            reason = ""
            if action.type == SPECIAL:
                if fc.change != CHANGED:
                    reason = f"registries.conf {fc.change}"
                else:
                    reason = registries.why_drain(fc.old_bytes(), fc.new_bytes()) or ""
            out.append((action, cause, reason))
    for uc in changes.units:
        entry = policy.unit_entry(uc.name)
        if entry is None:
            out.append((reboot, Cause(uc.describe(), note="no policy entry covers it, so Reboot"), ""))
            continue
        cause = Cause(uc.describe(), f"units[{entry.key}]", entry.says())
        out.extend((action, cause, "") for action in entry.actions)
    ssh_actions = policy.sshkey if policy.sshkey is not None else (PolicyAction(NONE),)
    ssh_says = ", ".join(str(a) for a in ssh_actions)
    for sc in changes.ssh_keys:
        out.extend((a, Cause(sc.describe(), "sshkey", ssh_says), "") for a in ssh_actions)
    for uc in changes.users:
        if uc.change == CHANGED and set(uc.fields) <= {"passwordHash"}:
            # as the MCO: a passwd change it can apply in place follows the sshkey policy
            out.extend((a, Cause(uc.describe(), "sshkey", ssh_says), "") for a in ssh_actions)
        else:
            out.append((reboot, Cause(uc.describe(), note="user changes other than ssh keys and password "
                                                          "need a Reboot"), ""))
    return out


def compute_actions(changes: Changes, policy: Optional[Policy] = None, *, firstboot: bool = False) -> Plan:
    """What ``changes`` need under ``policy`` (the effective, merged policy; defaults if None)."""
    policy = policy if policy is not None else effective_policy()
    collected = _collect(changes, policy)
    if not collected:
        return Plan((Action(NONE, causes=(Cause("no change", note="nothing to do"),)),), False, False, changes,
                    firstboot)

    reboots = [cause for action, cause, _ in collected if action.type == REBOOT]
    if reboots:
        action = Action(REBOOT, causes=tuple(_unique(reboots)))
        return Plan((action,), not firstboot, True, changes, firstboot)

    merged: Dict[Tuple[str, str], Dict[str, Any]] = {}
    nones: List[Cause] = []
    for action, cause, reason in collected:
        if action.type == NONE:
            nones.append(cause)
            continue
        slot = merged.setdefault((action.type, action.service), {"causes": [], "reasons": []})
        slot["causes"].append(cause)
        if reason:
            slot["reasons"].append(reason)
    actions = []
    for (kind, unit), slot in merged.items():
        if firstboot and kind == DRAIN:
            continue  # nothing runs yet: nothing to drain
        special = kind == SPECIAL
        actions.append(Action(
            kind, unit, tuple(_unique(slot["causes"])),
            conditional=firstboot and (kind in (RELOAD, RESTART) or special),
            drain=special and bool(slot["reasons"]) and not firstboot,
            drain_reason="; ".join(_unique(slot["reasons"])) if special and not firstboot else "",
        ))
    actions = _daemon_reload_first(actions)
    if not actions:
        causes = nones or [c for _, c, _ in collected]
        return Plan((Action(NONE, causes=tuple(_unique(causes))),), False, False, changes, firstboot)
    drain = not firstboot and any(a.type == DRAIN or (a.type == SPECIAL and a.drain) for a in actions)
    return Plan(tuple(actions), drain, False, changes, firstboot)


def _unique(items: List[Any]) -> List[Any]:
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def _daemon_reload_first(actions: List[Action]) -> List[Action]:
    """Move DaemonReload before the first Reload/Restart/Special (systemd must see new unit files
    before they are used); everything else keeps its order."""
    index = next((i for i, a in enumerate(actions) if a.type == DAEMON_RELOAD), None)
    if index is None:
        return actions
    first = next((i for i, a in enumerate(actions) if a.type in (RELOAD, RESTART, SPECIAL)), None)
    if first is None or first > index:
        return actions
    daemon_reload = actions[index]
    rest = actions[:index] + actions[index + 1:]
    return rest[:first] + [daemon_reload] + rest[first:]


def plan_disruption(old, new, policy: Optional[Policy] = None, *, firstboot: bool = False) -> Plan:
    """Diff two NodeConfigs and compute what the change needs."""
    from agent.core.diff import diff

    # No cyclic garbage collection while planning. A plan allocates a few objects per change,
    # none in a cycle, so a collection frees nothing; but each full collection walks every
    # object alive, the two configs' millions included: a quarter of a 50,000-file plan's time
    # (benchmarks/bench_plan.py). Reference counting frees everything as usual.
    paused = gc.isenabled()
    gc.disable()
    try:
        return compute_actions(diff(old, new), policy, firstboot=firstboot)
    finally:
        if paused:
            gc.enable()
