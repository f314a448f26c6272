"""What a pool's rollout looks like to an admin (pure): each member's state and why, and the pool's
``status.rollout`` summary, from the rollout record that agent/server/rollout/targeting.py keeps."""

import math
import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from agent.server.rollout import blockingpods, nodestatus
from agent.server.rollout.candidates import Member, is_desired_equal_to_pool
from agent.server.rollout.targeting import LISTED, desired_of, effective, entry_of

UNMANAGED_WHY = "no node-agent report: counted from the Node's own annotations, never targeted"


def node_state(member: Member, rollout: Optional[Mapping[str, Any]], target: str,
               image: Optional[str]) -> Tuple[str, str]:
    """(Done | Updating | Failed | Deferred | Waiting | Unmanaged, why) of one member."""
    entry = entry_of(rollout, member.name)
    eff = effective(member, entry)
    if not member.ours:
        return "Unmanaged", UNMANAGED_WHY
    if entry is not None and entry.get("deferred"):
        d = entry["deferred"]
        return "Deferred", f"{d.get('why', '')}; keeps {entry.get('config')}, tried again once the others are done"
    if nodestatus.is_done(eff, target, image):
        return "Done", ""
    if is_desired_equal_to_pool(eff, target, image):
        if nodestatus.is_mcd_failing(eff):
            parked = " (it waits for a free slot before it retries: the pool's failure budget)" \
                if entry is not None and entry.get("parked") else ""
            return "Failed", str((eff or {}).get("reason") or "") + parked
        return "Updating", f"targeted to {target}"
    desired = desired_of(member.report, entry)[0]
    if desired and desired != target and entry is not None and not nodestatus.is_node_done(eff):
        return "Updating", f"targeted to {desired} (an earlier target; the pool's is {target})"
    if member.not_ready:
        return "Waiting", f"{member.not_ready}: not targeted until it is ready (upstream skips it)"
    blocking = (rollout or {}).get("blockingPods") or {}
    pods = (blocking.get("nodes") or {}).get(member.name)
    if pods:  # ours: skipped for its blocking pods (blockingpods.py)
        return "Waiting", blockingpods.node_why(pods, str(blocking.get("selector") or ""))
    reason = str((rollout or {}).get("halted") or (rollout or {}).get("waiting") or "waiting for its turn")
    return "Waiting", reason


def summary(members: Sequence[Member], rollout: Optional[Mapping[str, Any]], target: str, image: Optional[str],
            max_unavailable: int, now: float) -> Dict[str, Any]:
    """The pool's ``status.rollout``: who updates, who waits and why, who failed, who is deferred,
    the pool's maintenance window (agent/server/rollout/windows.py ``state``), its blocking pods
    (blockingpods.py ``record``), and an estimate of
    the end from the measured durations (bounded: LISTED names per group; none while the window is
    closed)."""
    groups: Dict[str, List[str]] = {}
    reasons: Dict[str, str] = {}
    for m in members:
        state, why = node_state(m, rollout, target, image)
        groups.setdefault(state, []).append(m.name)
        if why and state in ("Failed", "Deferred"):
            reasons[m.name] = why
    out: Dict[str, Any] = {"target": target, "counts": {k: len(v) for k, v in sorted(groups.items())}}
    for state in ("Updating", "Waiting", "Failed", "Deferred"):
        names = sorted(groups.get(state, []))
        if names:
            out[state.lower()] = names[:LISTED]
    if reasons:
        out["reasons"] = {k: reasons[k] for k in sorted(reasons)[:LISTED]}
    not_ready = {m.name: m.not_ready for m in members if m.not_ready}  # ours: why a Node counts as unavailable
    if not_ready:
        out["notReady"] = {k: not_ready[k] for k in sorted(not_ready)[:LISTED]}
    for key, name in (("halted", "halted"), ("waiting", "waitReason"), ("started", "started"),
                      ("canaryAt", "canaryAt"), ("window", "window"), ("blockingPods", "blockingPods"),
                      ("alerts", "alerts")):
        if (rollout or {}).get(key):
            out[name] = rollout[key]  # type: ignore[index]
    left = len(members) - len(groups.get("Done", [])) - len(groups.get("Unmanaged", []))
    durations = list((rollout or {}).get("durations") or [])
    closed = "window" in out and not out["window"].get("open")  # ours: nothing moves until the window opens
    closed = closed or bool((out.get("alerts") or {}).get("holding"))  # ours: or while the alert gate holds
    if left and durations and not out.get("halted") and not closed:
        per = statistics.median(durations)
        out["estimate"] = {"seconds": round(math.ceil(left / max(1, max_unavailable)) * per),
                           "from": f"{len(durations)} measured update(s), median {per:g} s, "
                                   f"{left} node(s) left, {max_unavailable} at a time"}
    return out


# The pool's gates (ours: docs/rollout.md), by the names of their annotations' suffixes, and the key
# of each one's record in status.rollout.
GATES = (("maintenance-window", "window"), ("alert-gate", "alerts"), ("blocking-pods", "blockingPods"))


def gate_states(rollout: Optional[Mapping[str, Any]]) -> Dict[str, Tuple[bool, bool]]:
    """For each gate the pool has (its annotation is set): (whether it holds the pool's new
    targeting now, whether it holds because it cannot decide: an invalid annotation, no answer from
    Prometheus or no --prometheus-url, pods that could not be listed). Blocking pods hold the pool
    only when they cannot be read: matching pods keep their own node back, not the pool."""
    out: Dict[str, Tuple[bool, bool]] = {}
    for gate, key in GATES:
        record = (rollout or {}).get(key)
        if not isinstance(record, Mapping):
            continue
        failed_closed = "invalid" in record or (key == "alerts" and bool(record.get("holding"))
                                                and "unanswered" in record) or "unavailable" in record
        holding = failed_closed or (key == "window" and record.get("open") is False) or \
            (key == "alerts" and bool(record.get("holding")))
        out[gate] = (holding, failed_closed)
    return out
