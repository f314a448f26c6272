"""A MachineConfigNode's status conditions from a node's report (pure), as the MCO's
pkg/upgrademonitor/upgrade_monitor.go ``generateAndApplyMachineConfigNodes`` writes them: every
condition type of the MachineConfigNode API is present, those the node has not reached with
upstream's default (status False, reason ``NotYetOccured`` as upstream spells it, message "This
node has not yet entered the <type> phase"), so that ``oc describe mcn`` reads as on OpenShift.

From the report: Updated (Done on its desired config), UpdateExecuted (working on it),
NodeDegraded (with the node's reason); from the Node's drain annotations: Drained (the MCO drain
controller's child condition, draincadence.drain_condition). The other phases (prepared,
post-action, cordoned, rebooted ...) are steps inside node-agent that its report does not
separate: they stay at the default (docs/kubernetes.md, "How this differs from the MCO").

Ours, beside them: ``node-agent.openshift.io/FirstBootComplete`` (``first_boot_condition``), the
node's first boot as the server follows it (agent/server/rollout/firstboots.py): True once Done,
False while it runs or after it failed, Unknown once it has stalled (the server cannot know what
a silent node does, as a Node's Ready is Unknown once its kubelet stops posting).
"""

from typing import Any, Dict, List, Optional

from agent.server.rollout import draincadence, firstboots
from agent.server.rollout.progress import iso8601

# openshift/api machineconfiguration/v1 StateProgress values of a MachineConfigNode (upgrade_monitor.go
# allConditionTypes, with NodeDegraded and the PinnedImageSets pair). At most 20 (the CRD's maxItems).
CONDITION_TYPES = ("UpdatePrepared", "UpdateExecuted", "UpdatePostActionComplete", "UpdateComplete", "Resumed",
                   "UpdateCompatible", "Drained", "AppliedFilesAndOS", "Cordoned", "RebootedNode", "Uncordoned",
                   "Updated", "NodeDegraded", "PinnedImageSetsProgressing", "PinnedImageSetsDegraded")
NOT_YET = "NotYetOccured"  # upstream's reason, spelling included
NOT_YET_SET = "not-yet-set"  # upstream's config name while none is known: the CRD's CEL rules need a subdomain
# A type of ours, in our own domain ("foo.example.com/CamelCase", as the CRD admits): never one of
# upstream's (a later upstream type of the same name would mean something else).
FIRST_BOOT = "node-agent.openshift.io/FirstBootComplete"
FIRST_BOOT_STATUS = {firstboots.DONE: "True", firstboots.RUNNING: "False", firstboots.FAILED: "False",
                     firstboots.STALLED: "Unknown"}


def default_condition(kind: str, at: str) -> Dict[str, str]:
    return {"type": kind, "status": "False", "reason": NOT_YET,
            "message": f"This node has not yet entered the {kind} phase", "lastTransitionTime": at}


def node_conditions(body: Dict[str, Any], at: str, annotations: Optional[Dict[str, Any]] = None,
                    first_boot: Optional[firstboots.Decision] = None) -> List[Dict[str, str]]:
    """Every condition type, each with the time the report was recorded (the CRD requires all
    five fields); while the Node's ``annotations`` say a drain is under way, Drained names what
    blocks it, so that a report written during a drain keeps it; with ``first_boot`` (the node's
    first boot decided now), ours last."""
    state, desired = body.get("state"), str(body.get("desiredConfig") or "")
    done = state == "Done" and body.get("currentConfig") == desired
    reason = str(body.get("reason") or "")
    known = {}
    if done:
        known["Updated"] = ("NodeUpdated", f"Node is on {desired}")
    if state == "Working":
        known["UpdateExecuted"] = ("Updating", f"Node is applying {desired}")
    if state == "Degraded":
        known["NodeDegraded"] = ("NodeDegraded", reason or "the node reported Degraded")
    out = []
    drained = draincadence.drain_condition(draincadence.from_annotations(annotations or {}), at)
    for kind in CONDITION_TYPES:
        if kind == "Drained" and drained:
            out.append(drained)
        elif kind in known:
            out.append({"type": kind, "status": "True", "reason": known[kind][0], "message": known[kind][1],
                        "lastTransitionTime": at})
        else:
            out.append(default_condition(kind, at))
    if first_boot is not None:
        out.append(first_boot_condition(first_boot))
    return out


def first_boot_condition(decision: firstboots.Decision) -> Dict[str, str]:
    """The node's first boot as a condition of ours (the module's docstring); its transition time
    is when the first boot came to this outcome (a stall: the deadline after its last report)."""
    return {"type": FIRST_BOOT, "status": FIRST_BOOT_STATUS[decision.outcome], "reason": decision.reason,
            "message": decision.message[:32768], "lastTransitionTime": iso8601(decision.since)}


def config_name(name: Any) -> str:
    """A config name for the MCN's configVersion fields: upstream's placeholder while none is known."""
    return str(name or "") or NOT_YET_SET
