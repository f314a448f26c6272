"""A MachineConfigNode's status conditions (pure), as the MCO writes them: the condition types,
defaults and transitions of pkg/upgrademonitor/upgrade_monitor.go ``generateAndApplyMachineConfigNodes``
(openshift/machine-config-operator 7ff337a4), fed with the phases its writers report
(pkg/daemon/update.go ``update``, ``performPostConfigChangeNodeDisruptionAction``;
pkg/controller/drain/drain_controller.go ``syncNode``/``drainNode``).

Upstream each phase is one write of a parent condition and, for some, a child, applied to the
conditions the object holds:

- the first write creates every type of ``allConditionTypes`` (12, and the two PinnedImageSets
  ones; no ``UpdateCompatible``: it is not in the v1 API) not written by it as status False,
  reason ``NotYetOccurred`` (spelt so since upstream feb8d94a), "This node has not yet entered
  the <type> phase";
- a parent whose status and message are those it already has changes nothing at all;
- any other parent while ``Updated`` is True first turns ``Updated`` False ("This node is not
  updated, sensed disruption via a manual update.");
- the ``Updated`` parent turns every other condition that is not False to False, its message
  prefixed "Action during update to <spec desired>: ".

Ours is decided from what the server knows rather than called at each step of a daemon: the
node's report (Working: applying; Working with "reboot pending": applied, waiting for its reboot;
Done on its desired config; Degraded), our drain's state on its Node (cordoned, draining, drained)
and the conditions the object holds. ``phases`` says which of upstream's writes those facts imply,
in the order upstream makes them; ``node_conditions`` applies them to the stored conditions as
upstream does. A condition whose status does not change keeps its lastTransitionTime (the CRD:
"the last time the condition transitioned from one status to another"). A Node node-agent does not
report for gets no phase: its conditions stay as they are (upstream's defaults when new).

Ours, beside them: ``node-agent.openshift.io/FirstBootComplete`` (``first_boot_condition``), the
node's first boot as the server follows it (agent/server/rollout/firstboots.py): True once Done,
False while it runs or after it failed, Unknown once it has stalled. It is never reset by
``Updated`` (upstream's reset is for its own phases).
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from agent.server.rollout import draincadence, firstboots
from agent.server.rollout.draincadence import DrainState
from agent.server.rollout.progress import iso8601

# upgrade_monitor.go allConditionTypes, then its singletonConditionTypes (the PinnedImageSets pair).
CONDITION_TYPES = ("UpdatePrepared", "UpdateExecuted", "UpdatePostActionComplete", "UpdateComplete", "Resumed",
                   "Drained", "AppliedFilesAndOS", "Cordoned", "RebootedNode", "Updated", "Uncordoned",
                   "NodeDegraded", "PinnedImageSetsDegraded", "PinnedImageSetsProgressing")
SINGLETONS = ("PinnedImageSetsDegraded", "PinnedImageSetsProgressing")
MAX_CONDITIONS = 20  # the CRD's maxItems
NOT_YET = "NotYetOccurred"  # upstream's reason since feb8d94a (2025-03); "NotYetOccured" before
NOT_YET_SET = "not-yet-set"  # upgrade_monitor.go NotYetSet: the CRD's CEL rules need a subdomain, never ""
MANUAL = "This node is not updated, sensed disruption via a manual update."
REBOOT_PENDING = "reboot pending"  # node-agent's reason for a config applied that waits for its reboot
# A type of ours, in our own domain ("foo.example.com/CamelCase", as the CRD admits): never one of
# upstream's (a later upstream type of the same name would mean something else).
FIRST_BOOT = "node-agent.openshift.io/FirstBootComplete"
FIRST_BOOT_STATUS = {firstboots.DONE: "True", firstboots.RUNNING: "False", firstboots.FAILED: "False",
                     firstboots.STALLED: "Unknown"}

Entry = Tuple[str, str, str, str]  # (type, status, reason, message): one condition as a phase writes it
Phase = Tuple[Entry, Optional[Entry]]  # upstream's (parent, child)


@dataclass(frozen=True)
class Facts:
    """What the server knows of a node for its MCN: ``report``, node-agent's counted report with
    the desired config the server decided (None: node-agent does not speak for this Node),
    ``desired`` (the MCN's spec.configVersion.desired), the Node cordoned, our drain's state and
    the config our cordon was for (kube_drain ``drained-for``), and what the change needs
    (``needs``: OS, SSH keys; None when the server cannot tell)."""
    node: str
    desired: str
    report: Optional[Mapping[str, Any]] = None
    cordoned: bool = False
    drain: DrainState = field(default_factory=DrainState)
    drained_for: str = ""
    needs: Optional[Tuple[bool, bool]] = None


def default_condition(kind: str, at: str) -> Dict[str, str]:
    """upgrade_monitor.go's "sane default" for a type no phase has written yet."""
    return {"type": kind, "status": "False", "reason": NOT_YET,
            "message": f"This node has not yet entered the {kind} phase", "lastTransitionTime": at}


def reboot_pending(report: Optional[Mapping[str, Any]]) -> bool:
    """Whether ``report`` says its config is applied and waits for the reboot it needs: node-agent
    reports Working with that config as current and the reason "reboot pending" (update.py,
    firstboot.py; a first boot's record also says ``rebootPending``). Upstream the daemon writes
    the new currentConfig only after that reboot (``SetDone`` on the booted node)."""
    if not report or report.get("state") != "Working" or not report.get("currentConfig"):
        return False
    first = report.get(firstboots.KEY)
    return report.get("reason") == REBOOT_PENDING or (
        isinstance(first, dict) and bool(first.get("rebootPending")) and not first.get("rebooted"))


def update_needs(old: Optional[Mapping[str, Any]], new: Optional[Mapping[str, Any]]) -> Optional[Tuple[bool, bool]]:
    """(OS, SSH keys) a change from rendered spec ``old`` to ``new`` needs, as update.go's
    ``updatesNeeded`` reads its diff: an OS update for another osImageURL, extensions or
    kernelType; SSH keys for other users. None when either spec is unknown."""
    if not old or not new:
        return None
    os_update = any(old.get(k) != new.get(k) for k in ("osImageURL", "extensions", "kernelType"))

    def users(spec: Mapping[str, Any]) -> Any:
        return ((spec.get("config") or {}).get("passwd") or {}).get("users")

    return os_update, users(old) != users(new)


def _files(facts: Facts, before: Mapping[str, Dict[str, str]], done: bool) -> str:
    """AppliedFilesAndOS's message (update.go): what the change needs, "will" while applying, "did"
    once applied; from the one written while applying when the server cannot tell now."""
    if facts.needs is not None:
        os_word, ssh_word = ("" if need else "not" for need in facts.needs)
        verb = "did" if done else "will"
        head = "Applied files and new OS config to node." if done else \
            "Applying files and new OS config to node."
        return f"{head} OS {verb} {os_word} need an update. SSH Keys {verb} {ssh_word} need an update"
    said = (before.get("AppliedFilesAndOS") or {}).get("message", "")
    if done and said.startswith("Applying files and new OS config to node."):
        return said.replace("Applying", "Applied", 1).replace(" will ", " did ")
    return said if said.startswith(("Applying", "Applied")) else \
        f"{'Applied' if done else 'Applying'} files and new OS config to node."


def _drain_phases(f: Facts, working: bool) -> List[Phase]:
    """drain_controller.go's writes for our drain (cordon, drain under way or failing, drained), or
    update.go's "Node Drain Not required" for an update that applies with none."""
    out: List[Phase] = []
    ours = f.drain.active or bool(f.drained_for)
    if ours and f.cordoned:
        out.append((("UpdateExecuted", "Unknown", "Cordoned", "Cordoned Node as part of update executed phase"),
                    ("Cordoned", "True", "UpdateExecutedCordoned",
                     "Cordoned node. The node is reporting Unschedulable = true")))
    if f.drain.active:
        child = draincadence.drain_condition(f.drain, "") or {}
        parent = "Node Drain has not succeeded" if f.drain.last_error else \
            "Draining Node as part of update executed phase"
        out.append((("UpdateExecuted", "Unknown", "Drained", parent),
                    ("Drained", "Unknown", "UpdateExecutedDrained", child.get("message", "Draining node"))))
    elif f.drained_for:
        out.append((("UpdateExecuted", "Unknown", "Drained", "Drained Node as part of update executed phase"),
                    ("Drained", "True", "UpdateExecutedDrained", "Drained node. The drain is complete as the desired "
                     f"drainer matches current drainer: drain-{f.drained_for}")))
    elif working:
        out.append((("UpdateExecuted", "Unknown", "Drained", "Node Drain Not required for this update."),
                    ("Drained", "False", "UpdateExecutedDrained", "Node Drain Not required for this update.")))
    return out


def phases(f: Facts, before: Mapping[str, Dict[str, str]]) -> List[Phase]:
    """Upstream's writes the facts imply, in upstream's order (``before``: the conditions the object
    holds, by type). An update is under way once our drain began for the node, or it reports
    Working, or Degraded on another config than its desired one; it ends with Done on it."""
    r = f.report
    if r is None:
        return []
    state, current = r.get("state"), str(r.get("currentConfig") or "")
    rebooting = reboot_pending(r)
    working = state == "Working" and not rebooting
    failed = state == "Degraded" and current != f.desired
    done = state == "Done" and bool(f.desired) and current == f.desired
    drained = f.drain.active or bool(f.drained_for)
    out: List[Phase] = []
    if not done and (drained or state == "Working" or failed):
        out.append((("UpdatePrepared", "True", "UpdatePrepared",
                      f"Update Compatible. Post Cfg Actions: [] Drain Required: {'true' if drained else 'false'}"),
                    None))
        out += _drain_phases(f, working or failed or rebooting)
        if working or failed:
            out.append((("UpdateExecuted", "Unknown", "AppliedFilesAndOS",
                         "Updating the Files and OS on disk as a part of the in progress phase"),
                        ("AppliedFilesAndOS", "Unknown", "UpdateExecutedAppliedFilesAndOS", _files(f, before, False))))
        if rebooting:
            out.append(_applied(f, before))
            out.append((("RebootedNode", "Unknown", "RebootedNode", "Upgrade requires a reboot."), None))
    if done:
        out += _completed(f, before)
    if state == "Degraded":  # update.go reportMachineNodeDegradeStatus
        out.append((("NodeDegraded", "True", "NodeDegraded",
                     f"Node {f.node} upgrade failure. {r.get('reason') or 'the node reported Degraded'}"), None))
    return out


def _applied(f: Facts, before: Mapping[str, Dict[str, str]]) -> Phase:
    return (("UpdateExecuted", "True", "AppliedFilesAndOS",
             "Updated the Files and OS on disk as a part of the in progress phase"),
            ("AppliedFilesAndOS", "True", "UpdateExecutedAppliedFilesAndOS", _files(f, before, True)))


def _completed(f: Facts, before: Mapping[str, Dict[str, str]]) -> List[Phase]:
    """Done on the desired config: the phases of an update that ended (rebooted, or no reboot
    needed; uncordoned; resumed), then ``Updated``, whose reset leaves the others False with
    "Action during update to ..." (upstream's e2e: "all conditions other than Updated are False")."""
    def status(kind: str) -> str:
        return (before.get(kind) or {}).get("status", "False")

    out: List[Phase] = []
    if status("UpdateExecuted") != "False" or status("AppliedFilesAndOS") != "False":
        if status("AppliedFilesAndOS") == "Unknown":
            out.append(_applied(f, before))
        if status("RebootedNode") == "Unknown":  # ours: the daemon's own words were not in the sources at hand
            out.append((("RebootedNode", "True", "RebootedNode", f"Node has rebooted into {f.desired}"), None))
        else:  # performPostConfigChangeNodeDisruptionAction: no reboot was needed
            out.append((("UpdatePostActionComplete", "True", "None", "Changes do not require a reboot"), None))
        if status("Cordoned") == "True" and not f.cordoned:  # drain_controller.go: the uncordon
            out.append((("UpdateComplete", "True", "Uncordoned", "Uncordoned Node as part of completing upgrade phase"),
                        ("Uncordoned", "True", "UpdateCompleteUncordoned",
                         "UnCordoned node. The node is reporting Unschedulable = false")))
        out.append((("Resumed", "True", "Resumed", f"In desired config {f.desired}. Resumed normal operations."),
                    None))
    out.append((("Updated", "True", "Updated", f"Node {f.node} is on its desired config {f.desired}"), None))
    return out


def _as_dict(entry: Entry) -> Dict[str, str]:
    return {"type": entry[0], "status": entry[1], "reason": entry[2], "message": entry[3][:32768]}


def _apply(work: Dict[str, Dict[str, str]], phase: Phase, desired: str) -> None:
    """One phase as upgrade_monitor.go applies it to the conditions held (``work``, by type)."""
    parent, child = phase
    held = work.get(parent[0])
    if held is not None and (held.get("status"), held.get("message")) == (parent[1], parent[3][:32768]) \
            and parent[0] not in SINGLETONS:
        return  # isParentConditionChanged is false: nothing is written
    for kind, cond in work.items():
        if kind == "Updated" and cond.get("status") == "True" and parent[0] != "Updated":
            work[kind] = {"type": kind, "status": "False", "reason": "Updated", "message": MANUAL}
        elif parent[0] == "Updated" and kind not in (parent[0], child and child[0]) and cond.get("status") != "False":
            work[kind] = dict(cond, status="False",
                              message=f"Action during update to {desired}: {cond.get('message', '')}"[:32768])
    if child is not None:
        work[child[0]] = _as_dict(child)
    work[parent[0]] = _as_dict(parent)


def phase_times(facts: Facts) -> Dict[str, str]:
    """When the phases our drain implies began, by condition type (pure): the cordon that began the
    drain under way (its ``drain-started``) for Cordoned and Drained. Upstream writes each phase
    as it happens (pkg/upgrademonitor/upgrade_monitor.go ``generateAndApplyMachineConfigNodes``,
    one ApplyStatus per phase stamped ``metav1.Now()``); ours comes in one write per report, so a
    condition that changed in it is dated by its own phase where the server knows when that was."""
    if not facts.drain.active or facts.drain.started is None:
        return {}
    at = draincadence.iso(facts.drain.started)
    return {"Cordoned": at, "Drained": at}


def node_conditions(previous: Optional[List[Mapping[str, Any]]], facts: Facts, now: str,
                    first_boot: Optional[firstboots.Decision] = None) -> List[Dict[str, str]]:
    """The conditions to hold after this write: every type of ``CONDITION_TYPES`` (the held one,
    else the default), the phases the facts imply applied to them, ours last; a condition whose
    status is the held one keeps its lastTransitionTime, one that changed gets its phase's time
    (``phase_times``), else ``now`` (the report's receipt). Types someone else wrote (a newer
    upstream's) are kept as they are, within the CRD's 20."""
    held = {str(c.get("type")): {k: v for k, v in c.items() if v is not None}
            for c in previous or [] if isinstance(c, Mapping) and c.get("type")}
    work = {kind: dict(held.get(kind) or default_condition(kind, now)) for kind in CONDITION_TYPES}
    before = {kind: dict(c) for kind, c in work.items()}
    for phase in phases(facts, before):
        _apply(work, phase, facts.desired)
    out = []
    times = phase_times(facts)
    for kind in CONDITION_TYPES:
        cond, old = work[kind], before[kind]
        same = cond.get("status") == old.get("status") and old.get("lastTransitionTime")
        out.append(dict(cond, lastTransitionTime=old["lastTransitionTime"] if same else times.get(kind) or now))
    if first_boot is not None:
        out.append(first_boot_condition(first_boot))
    others = [c for kind, c in held.items() if kind not in CONDITION_TYPES and kind != FIRST_BOOT]
    return out + others[:max(0, MAX_CONDITIONS - len(out))]


def first_boot_condition(decision: firstboots.Decision) -> Dict[str, str]:
    """The node's first boot as a condition of ours (the module's docstring); its transition time
    is when the first boot came to this outcome (a stall: the deadline after its last report)."""
    return {"type": FIRST_BOOT, "status": FIRST_BOOT_STATUS[decision.outcome], "reason": decision.reason,
            "message": decision.message[:32768], "lastTransitionTime": iso8601(decision.since)}


def config_name(name: Any) -> str:
    """A config name for the MCN's spec and status ``desired``: upstream's placeholder while none is known."""
    return str(name or "") or NOT_YET_SET
