"""Pieces of the MachineConfigPool view that need no store (pure): conditions, the pending
disruption of the next update, one node's entry."""

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence

from agent.server.rollout import nodestatus, progress, renderstatus
from agent.server.store.nodestore import NodeRecord

log = logging.getLogger(__name__)


TIMES = "conditionTimes"  # ours, in a pool row's rollout record: {type: [status, when it last changed]}


def conditions(counts: progress.Counts, target: str, current: str, row: Dict[str, Any],
               history: Optional[List[Dict[str, Any]]] = None, problems: Sequence[Any] = (),
               paused: bool = False, pool: str = "") -> List[Dict[str, str]]:
    """status.conditions (agent.server.rollout.progress.conditions), each with the time the pool's
    step recorded when its status last changed (``condition_times``, in the row's rollout record):
    the time of its last transition, also for Updated and Updating, which change with the nodes
    (a node Degraded then Done again) as well as with the target; ``history``, the pool's
    target/current changes in the store, gives those two a time only where the step recorded none
    for their status (a row written before the step recorded times); ``problems``:
    why ``pool`` cannot be rendered (agent/server/rollout/renderstatus.py: its target holds on its
    last good rendering, RenderDegraded)."""
    render = renderstatus.failure_message(pool or str(row.get("name") or ""), [str(p) for p in problems])
    paused_for = str(row.get("rendered") or target) if paused else ""  # what a paused pool will not update to
    out = progress.conditions(counts, target, current, str(row.get("held") or ""), history, render, paused_for)
    for c in out:
        add_recorded_time(c, row.get("rollout") or {})
    return out


def add_recorded_time(cond: Dict[str, str], rollout: Dict[str, Any]) -> None:
    """``cond`` with the lastTransitionTime the pool's step recorded (``condition_times``), if it
    recorded one for this status."""
    kept = (rollout.get(TIMES) or {}).get(cond["type"])
    if isinstance(kept, list) and len(kept) == 2 and kept[0] == cond["status"]:
        cond["lastTransitionTime"] = str(kept[1])


def condition_times(rollout: Dict[str, Any], conds: List[Dict[str, str]], now: float) -> Dict[str, Any]:
    """``rollout`` (a pool row's record) with when each of ``conds`` took its status: kept while
    the status stays, ``now`` when it changed (as the MCO's SetMachineConfigPoolCondition keeps
    lastTransitionTime); the same object when nothing changed, so that the row is not written."""
    old = rollout.get(TIMES) or {}
    new = {}
    for c in conds:
        kept = old.get(c["type"])
        same = isinstance(kept, list) and len(kept) == 2 and kept[0] == c["status"]
        new[c["type"]] = list(kept) if same else [c["status"], progress.iso8601(now)]
    return rollout if new == old else dict(rollout, **{TIMES: new})


def metadata(pool: Dict[str, Any], history: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    """The pool's metadata; ``creationTimestamp`` (oc's AGE): the object's own (the API's, or one
    written in its YAML), else when the store first recorded the pool (its first target in
    ``history``). Never a file's mtime: that is when the file was copied or cloned, not when the
    pool came to be (a seconds-old demo showed 13m, the checkout's age)."""
    meta = dict(pool.get("metadata") or {})
    if not meta.get("creationTimestamp"):
        first = progress.epoch_of(history[0].get("at")) if history else None
        if first:
            meta["creationTimestamp"] = progress.iso8601(first)
    elif not isinstance(meta["creationTimestamp"], str):  # YAML reads an unquoted time as a datetime
        meta["creationTimestamp"] = progress.iso8601(meta["creationTimestamp"]) or str(meta["creationTimestamp"])
    return meta


def pending_disruption(spec_of: Callable[[str], Optional[Dict[str, Any]]], cluster_spec: Dict[str, Any],
                       current: str, target: str) -> Optional[Dict[str, Any]]:
    """Actions a node on ``current`` takes to reach ``target`` (agent.core.disruption), if
    available, and the paths it removes (``removes``: a change that deletes a file is named)."""
    if current == target:
        return {"from": current, "to": target, "actions": [{"type": "None"}], "reboot": False, "drain": False}
    out = plan_between(spec_of, cluster_spec, current, target)
    if out is None:
        return None
    from agent.server.rollout.review import LISTED, removed_paths

    removes = removed_paths(out.pop("changes", None) or {})  # the action list is the point; the full diff can be large
    if removes:
        out["removes"] = removes[:LISTED]
    return {"from": current, "to": target, **out}


def plan_between(spec_of: Callable[[str], Optional[Dict[str, Any]]], cluster_spec: Dict[str, Any],
                 current: str, target: str) -> Optional[Dict[str, Any]]:
    """The disruption plan (agent.core.disruption.Plan.to_dict(), its changes included) of a node
    on ``current`` taking ``target``; None when it cannot be made (a config unknown here)."""
    try:
        from agent.core.disruption import merge_policy, plan_disruption
        from agent.core.nodeconfig import NodeConfig
    except ImportError:
        return None
    a, b = spec_of(current), spec_of(target)
    if a is None or b is None:
        return None

    def nc(spec: Dict[str, Any], name: str) -> NodeConfig:
        return NodeConfig(ignition=spec.get("config") or {}, os_image_url=spec.get("osImageURL", ""),
                          kernel_arguments=tuple(spec.get("kernelArguments") or ()),
                          kernel_type=spec.get("kernelType", ""), extensions=tuple(spec.get("extensions") or ()),
                          fips=bool(spec.get("fips")), name=name)
    try:
        policy = merge_policy(cluster_spec.get("nodeDisruptionPolicy"), source="machineconfiguration.yaml")
        plan = plan_disruption(nc(a, current), nc(b, target), policy)
    except Exception as exc:  # an optional view: never fail the pool object for it
        log.warning("pending disruption of %s -> %s not computed: %s", current, target, exc)
        return None
    return plan.to_dict()


def degraded_reasons(entries: Dict[str, Dict[str, Any]], degraded: int) -> List[str]:
    """NodeDegraded's message parts from the node store's entries (``node_entry``), as upstream's
    status.go names them (``Node <name> is reporting: "<reason>"``): each degraded node, by the
    server's reason (an ambiguous pool) else its own; ``degraded``: how many the counters have,
    those not among ``entries`` said as "and N more"."""
    out = []
    for name, entry in sorted(entries.items()):
        if entry.get("approval") == "Pending":  # counted in nothing, degraded in no count either
            continue
        if entry.get("state") == "Degraded" or entry.get("degradedReason"):
            reason = str(entry.get("degradedReason") or entry.get("reason") or "no reason given")
            out.append(nodestatus.reporting(name, reason.split("\n", 1)[0]))
    if out and degraded > len(out):
        out.append(f"and {degraded - len(out)} more: `node-config-server get nodes`")
    return out


def node_entry(rec: NodeRecord) -> Dict[str, Any]:
    rep = rec.report
    return {"state": rep.get("state"), "currentConfig": rep.get("currentConfig", ""),
            "currentImage": rep.get("currentImage", ""), "skew": rep.get("skew", ""),
            "membership": rec.why, **({"degradedReason": rec.degraded} if rec.degraded else {}),
            **({"approval": "Pending"} if pending(rec) else {}),
            **({"reason": rep["reason"]} if rep.get("reason") else {})}


def pending(rec: NodeRecord) -> bool:
    """Whether the name waits for approval (the server's mark on its report: approval.py), so that
    its report counts for nothing: no pool count, no proof, no drain slot, no turn."""
    mark = rec.report.get(progress.SERVER_KEY)
    return isinstance(mark, dict) and bool(mark.get("pending"))
