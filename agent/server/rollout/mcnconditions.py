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
"""

from typing import Any, Dict, List, Optional

from agent.server.rollout import draincadence

# openshift/api machineconfiguration/v1 StateProgress values of a MachineConfigNode (upgrade_monitor.go
# allConditionTypes, with NodeDegraded and the PinnedImageSets pair). At most 20 (the CRD's maxItems).
CONDITION_TYPES = ("UpdatePrepared", "UpdateExecuted", "UpdatePostActionComplete", "UpdateComplete", "Resumed",
                   "UpdateCompatible", "Drained", "AppliedFilesAndOS", "Cordoned", "RebootedNode", "Uncordoned",
                   "Updated", "NodeDegraded", "PinnedImageSetsProgressing", "PinnedImageSetsDegraded")
NOT_YET = "NotYetOccured"  # upstream's reason, spelling included
NOT_YET_SET = "not-yet-set"  # upstream's config name while none is known: the CRD's CEL rules need a subdomain


def default_condition(kind: str, at: str) -> Dict[str, str]:
    return {"type": kind, "status": "False", "reason": NOT_YET,
            "message": f"This node has not yet entered the {kind} phase", "lastTransitionTime": at}


def node_conditions(body: Dict[str, Any], at: str, annotations: Optional[Dict[str, Any]] = None) -> List[Dict[str, str]]:
    """Every condition type, each with the time the report was recorded (the CRD requires all
    five fields); while the Node's ``annotations`` say a drain is under way, Drained names what
    blocks it, so that a report written during a drain keeps it."""
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
    return out


def config_name(name: Any) -> str:
    """A config name for the MCN's configVersion fields: upstream's placeholder while none is known."""
    return str(name or "") or NOT_YET_SET
