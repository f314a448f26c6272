"""Which nodes of a pool update, and when (pure): the MCO node controller's targeting, and ours
beside it. The server decides, the node carries out: a member is served only the config the
server targeted for it (its desired config), never the pool's target by itself.

Upstream (openshift/machine-config-operator at 006209bb, pkg/controller/node/node_controller.go):
``syncMachineConfigPool`` (nothing while the pool is paused; taint every Node whose desired config
is not the pool's; then target candidates), ``getAllCandidateMachines`` (capacity = maxUnavailable
minus the unavailable Nodes; Nodes already desiring the target and failing on it take capacity
too, "if the issue clears we don't want multiple to update at once"), ``updateCandidateMachines``
(the first ``capacity`` candidates in ``sortNodeList`` order: zone label, then oldest first) and
``setDesiredAnnotations`` (the Event). Mirrored here as ``get_all_candidate_machines``,
``sort_node_list``, ``is_desired_equal_to_pool``, ``needs_update_in_progress_taint``.

Ours, each named as ours (agent/core/rolloutpolicy.py reads the pool's and the Nodes' settings):

- ``failure_budget``: the rollout halts once that many nodes failed on the target, whatever the
  capacity (default: upstream's rule alone);
- ``canary``: the first N nodes of a new target, then a wait after they are Done and Ready;
- ``rollout_order``: a priority label first, then upstream's order; deferred nodes last;
- ``defer``: a node whose drain a PodDisruptionBudget holds past a time gives its slot back,
  keeps its config, and is tried again once every other node is done;
- only nodes with a node-agent report are targeted: a Node a real MCD (or nothing) manages is
  counted as upstream counts it, from its own annotations, but its desiredConfig is never written.

The state is the pool's ``rollout`` record, kept with the pool's row in the node store and
changed only by ``update_pool``'s compare-and-swap, so every replica and worker shares one
decision: ``{"config": the target it is about, "started", "canaryAt", "durations": [seconds of
the last updates], "targets": {node: {"config", "image"?, "at", "deferred"?: {"from", "why", "at"}}}}``.
A node without an entry desires what it reports (``desiredConfig``); an entry is dropped once the
node is Done on it, so the record holds only the nodes in flight.
"""

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from agent.core.rolloutpolicy import RolloutPolicy, node_priority
from agent.server.rollout import nodestatus

ZONE_LABEL = "topology.kubernetes.io/zone"  # node_controller.go zoneLabel
TAINT_KEY = "UpdateInProgress"  # pkg/constants NodeUpdateInProgressTaint: key UpdateInProgress,
TAINT_EFFECT = "PreferNoSchedule"  # effect PreferNoSchedule
DURATIONS_KEEP = 20
LISTED = 20  # names listed per group in a pool's rollout summary (its counts are whole)


@dataclass(frozen=True)
class Member:
    """One Node of the pool as targeting reads it. ``report``: what node-agent reported (or, for a
    Node without one, its MCD annotations: ``ours`` False); ``not_ready``: check_node_ready's
    reason ("" when ready); ``created``: the Node's creationTimestamp (or, without Node objects,
    when the node registered), Unix seconds."""
    name: str
    report: Optional[Mapping[str, Any]]
    ours: bool = True
    not_ready: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    created: float = 0.0


@dataclass(frozen=True)
class Candidates:
    nodes: List[Member]
    capacity: int
    unavailable: List[str]
    failing: List[str]  # desiring the target and failing on it
    room: int = 0  # maxUnavailable less the unavailable Nodes, before the failing ones take theirs


@dataclass
class Decision:
    rollout: Dict[str, Any]
    targeted: List[str] = field(default_factory=list)  # newly targeted by this step
    halted: str = ""  # why no node is targeted although some wait, when the rollout stopped itself
    waiting: str = ""  # why the waiting nodes wait (capacity, canary, paused)


def entry_of(rollout: Optional[Mapping[str, Any]], node: str) -> Optional[Dict[str, Any]]:
    entry = ((rollout or {}).get("targets") or {}).get(node)
    return entry if isinstance(entry, dict) else None


def desired_of(report: Optional[Mapping[str, Any]], entry: Optional[Mapping[str, Any]]) -> Tuple[str, Optional[str]]:
    """(config, image) the node desires: the server's entry, else what it reports it desires."""
    if entry is not None:
        return str(entry.get("config") or ""), entry.get("image") or None
    rep = report or {}
    return str(rep.get("desiredConfig") or rep.get("currentConfig") or ""), rep.get("desiredImage") or None


def effective(member: Member, entry: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """The node's report as upstream's rules read its Node: desiredConfig (and desiredImage) the
    server's decision, current config and state the node's own. A node-agent report that names
    no desired config desires what it runs (desired_of)."""
    out = with_desired(member.report, entry)
    if member.ours and out is not None and not out.get("desiredConfig") and out.get("currentConfig"):
        out["desiredConfig"] = out["currentConfig"]
    return out


def with_desired(report: Optional[Mapping[str, Any]], entry: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """``report`` with the server's desired config and image of ``entry`` (none: as it is)."""
    if entry is None:
        return dict(report) if report is not None else None
    out = dict(report or {})
    out["desiredConfig"] = str(entry.get("config") or "")
    if entry.get("image"):
        out["desiredImage"] = entry["image"]
    else:
        out.pop("desiredImage", None)
    return out


def is_desired_equal_to_pool(report: Optional[Mapping[str, Any]], target: str, image: Optional[str]) -> bool:
    """layered_node_state.go ``IsDesiredEqualToPool``: the desired config is the pool's (and, on a
    layered pool, the desired image its image)."""
    if not report or str(report.get("desiredConfig") or "") != target:
        return False
    return not image or report.get("desiredImage") == image


def get_all_candidate_machines(members: Sequence[Member], rollout: Optional[Mapping[str, Any]], target: str,
                               image: Optional[str], max_unavailable: int) -> Candidates:
    """node_controller.go ``getAllCandidateMachines``: no candidate while the unavailable Nodes
    (``IsUnavailableForUpdate``) use up maxUnavailable; the Nodes already desiring the target and
    failing on it (``isNodeMCDFailing``) take capacity too. Candidates are the Nodes not desiring
    the target yet; ours: only those node-agent reports for (see the module's docstring)."""
    unavailable, failing, nodes = [], [], []
    for m in members:
        eff = effective(m, entry_of(rollout, m.name))
        if nodestatus.is_unavailable_for_update(m.not_ready, eff):
            unavailable.append(m.name)
        if is_desired_equal_to_pool(eff, target, image):
            if nodestatus.is_mcd_failing(eff):
                failing.append(m.name)
            continue
        if m.ours:
            nodes.append(m)
    room = max(0, max_unavailable - len(unavailable))
    return Candidates(nodes, max(0, room - len(failing)), unavailable, failing, room)


def sort_node_list(members: Sequence[Member]) -> List[Member]:
    """node_controller.go ``sortNodeList``: Nodes with the zone label first, by zone, then oldest
    first; Nodes without it last, oldest first (the name breaks ties: ours, so the order is total)."""
    def key(m: Member) -> Tuple:
        zone = m.labels.get(ZONE_LABEL)
        return (0, zone, m.created, m.name) if zone is not None else (1, "", m.created, m.name)
    return sorted(members, key=key)


def rollout_order(members: Sequence[Member], deferred: Sequence[str] = ()) -> List[Member]:
    """Ours: deferred nodes last, then a higher rollout-priority label first, then upstream's order."""
    ordered = sort_node_list(members)
    rank = {m.name: i for i, m in enumerate(ordered)}
    return sorted(ordered, key=lambda m: (m.name in deferred, -node_priority(m.labels)[0], rank[m.name]))


def needs_update_in_progress_taint(report: Optional[Mapping[str, Any]], target: str, image: Optional[str]) -> bool:
    """syncMachineConfigPool: every Node of a pool that is not paused carries the
    UpdateInProgress:PreferNoSchedule taint while its desired config is not the pool's (the
    scheduler then prefers the Nodes already updated), and loses it once it desires it."""
    return not is_desired_equal_to_pool(report, target, image)


def _done_on(eff: Optional[Mapping[str, Any]], entry: Optional[Mapping[str, Any]]) -> bool:
    """The node is Done on its entry's config: the entry has served its purpose."""
    return entry is not None and not entry.get("deferred") and nodestatus.is_node_done(eff)


def _retarget_unstarted(members: Dict[str, Member], rollout: Dict[str, Any], target: str, image: Optional[str],
                        now: float) -> List[str]:
    """Ours: a node targeted to an earlier target that has not started on it (none of its reports
    desires it yet) takes the pool's target in its slot at once: a revert, a rollback or a newer
    change reaches it without its first going through the config being replaced (upstream lets it
    finish that one first). The slots in use do not change."""
    out = []
    for name, entry in sorted(rollout.get("targets", {}).items()):
        member = members.get(name)
        if member is None or entry.get("deferred") or entry.get("config") == target:
            continue
        if str((member.report or {}).get("desiredConfig") or "") == entry.get("config"):
            continue  # it started on it (Working or failing there): it goes on, as upstream
        new = {"config": target, "at": now, "retargetedFrom": entry.get("config")}
        if image:
            new["image"] = image
        rollout["targets"][name] = new
        out.append(name)
    return out


def _compact(members: Dict[str, Member], rollout: Dict[str, Any], target: str, now: float) -> None:
    """Drop entries of nodes gone from the pool and of nodes Done on their entry (then their own
    report says the same), keeping how long each update to the target took."""
    targets = rollout.setdefault("targets", {})
    durations = list(rollout.get("durations") or [])
    for name in sorted(targets):
        entry = targets[name]
        member = members.get(name)
        if member is None:
            del targets[name]
        elif _done_on(effective(member, entry), entry):
            if entry.get("config") == target and entry.get("at"):
                durations.append(round(max(0.0, now - float(entry["at"])), 3))
            del targets[name]
    if durations:
        rollout["durations"] = durations[-DURATIONS_KEEP:]


def _ready_on_target(members: Sequence[Member], rollout: Mapping[str, Any], target: str, image: Optional[str]) -> int:
    return sum(1 for m in members if not m.not_ready and nodestatus.is_done(effective(m, entry_of(rollout, m.name)),
                                                                           target, image))


def _canary_room(members: Sequence[Member], rollout: Dict[str, Any], target: str, image: Optional[str],
                 policy: RolloutPolicy, now: float) -> Tuple[Optional[int], str]:
    """Ours: how many more nodes the canary phase lets be targeted (None: no limit) and why the
    others wait. The first ``canary_nodes`` go; once that many are Done and Ready on the target
    the rest wait ``canary_wait`` seconds (``canaryAt`` records when)."""
    wanted = min(policy.canary_nodes, len(members))
    if wanted <= 0:
        return None, ""
    if not rollout.get("canaryAt"):
        if _ready_on_target(members, rollout, target, image) >= wanted:
            rollout["canaryAt"] = now
        else:
            on_target = sum(1 for m in members
                            if is_desired_equal_to_pool(effective(m, entry_of(rollout, m.name)), target, None))
            return max(0, wanted - on_target), (f"canary: the first {wanted} node(s) update first; the others wait "
                                                f"until they are Done and Ready")
    until = float(rollout["canaryAt"]) + policy.canary_wait
    if now < until:
        return 0, (f"canary: {wanted} node(s) Done and Ready on {target}; the others wait {policy.canary_wait:g} s "
                   f"after that, {math.ceil(until - now)} s more")
    return None, ""


def step(members: Sequence[Member], rollout: Optional[Mapping[str, Any]], target: str, image: Optional[str],
         max_unavailable: int, policy: RolloutPolicy, hold: str, now: float) -> Decision:
    """One sync of the pool: the new rollout record and the nodes targeted by it. ``hold``: why
    nobody is targeted now ("" when nothing holds): the pool is paused, or (a layered pool) the
    target's image is not built yet (``hold_reason``)."""
    out: Dict[str, Any] = {k: v for k, v in dict(rollout or {}).items() if k not in ("halted", "waiting")}
    out["targets"] = {k: dict(v) for k, v in (out.get("targets") or {}).items()}
    if out.get("config") != target:
        out.update(config=target, started=now)
        out.pop("canaryAt", None)
    by_name = {m.name: m for m in members}
    retargeted = _retarget_unstarted(by_name, out, target, image, now)
    _compact(by_name, out, target, now)
    if hold:
        return _decided(out, [], "", hold)  # nobody newly targeted: a node retargeted in its slot waits too
    deferred = [n for n, e in out["targets"].items() if e.get("deferred")]
    cands = get_all_candidate_machines(members, out, target, image, max_unavailable)
    eligible = _eligible(cands.nodes, deferred, members, out, target, image)
    halted = _halted(cands, policy) if eligible else ""
    if halted or not eligible:
        return _decided(out, [], halted, "")
    # A failure budget decides when failures halt the rollout; then they no longer take capacity.
    capacity = cands.capacity if policy.failure_budget is None else cands.room
    room, why = _canary_room(members, out, target, image, policy, now)
    capacity = capacity if room is None else min(capacity, room)
    chosen = rollout_order(eligible, deferred)[:capacity]
    for m in chosen:
        entry: Dict[str, Any] = {"config": target, "at": now}
        if image:
            entry["image"] = image
        out["targets"][m.name] = entry
    waiting = ""
    if len(chosen) < len(eligible):
        waiting = why or _capacity_reason(cands, chosen, max_unavailable)
    return _decided(out, [n for n in retargeted if n in out["targets"]] + [m.name for m in chosen], "", waiting)


def hold_reason(target: str, paused: bool, layered: bool, image: Optional[str], image_why: str) -> str:
    """Why syncMachineConfigPool targets nobody: a paused pool; a layered pool whose target's image
    is not built yet (``canLayeredPoolContinue``: the desired config and image are set together,
    once the build succeeded). "" when nothing holds."""
    if paused:
        return f"the pool is paused: nothing is targeted to {target}"
    if layered and not image:
        return f"the layered image of {target} is not ready ({image_why}): nothing is targeted until its build succeeds"
    return ""


def _halted(cands: Candidates, policy: RolloutPolicy) -> str:
    """Why the rollout stopped itself: nodes failing on the target (upstream: they take capacity;
    ours: the pool's failure budget), named."""
    if not cands.failing:
        return ""
    names = ", ".join(cands.failing[:LISTED])
    if policy.failure_budget is not None:
        if len(cands.failing) < policy.failure_budget:
            return ""
        return (f"rollout halted: {len(cands.failing)} node(s) failed on the target ({names}), the pool's failure "
                f"budget is {policy.failure_budget}; fix the cause or revert the MachineConfig "
                f"(node-config-server rollback pool NAME)")
    if cands.room > 0 and len(cands.failing) >= cands.room:
        return (f"rollout halted: {len(cands.failing)} node(s) failed on the target ({names}) and hold the pool's "
                f"capacity (maxUnavailable), as upstream holds it; fix the cause or revert the MachineConfig "
                f"(node-config-server rollback pool NAME)")
    return ""


def _eligible(nodes: List[Member], deferred: List[str], members: Sequence[Member], rollout: Mapping[str, Any],
              target: str, image: Optional[str]) -> List[Member]:
    """The candidates to target now: a deferred node only once every other node is done (ours)."""
    if not deferred:
        return nodes
    others_left = any(m.name not in deferred and not nodestatus.is_done(effective(m, entry_of(rollout, m.name)),
                                                                         target, image)
                      for m in members if m.ours)
    return [m for m in nodes if m.name not in deferred or not others_left]


def _capacity_reason(cands: Candidates, chosen: List[Member], max_unavailable: int) -> str:
    """Who holds the pool's maxUnavailable slots now, named: the unavailable nodes, the ones just
    targeted and (upstream's rule) the ones failing on the target."""
    holders = list(dict.fromkeys(cands.unavailable + [m.name for m in chosen] + cands.failing))
    shown = ", ".join(holders[:LISTED]) + (f" and {len(holders) - LISTED} more" if len(holders) > LISTED else "")
    return f"maxUnavailable {max_unavailable} is taken by {shown or 'none'}; the others wait their turn"


def _decided(rollout: Dict[str, Any], targeted: List[str], halted: str, waiting: str) -> Decision:
    if halted:
        rollout["halted"] = halted
    if waiting:
        rollout["waiting"] = waiting
    return Decision(rollout, targeted, halted, waiting)


def defer(rollout: Optional[Mapping[str, Any]], node: str, config: str, why: str, now: float) -> Dict[str, Any]:
    """Ours: ``node`` gives its slot back and keeps ``config`` (what it runs); it is tried again once
    every other node is done (``_eligible``)."""
    out = dict(rollout or {})
    targets = {k: dict(v) for k, v in (out.get("targets") or {}).items()}
    old = targets.get(node) or {}
    targets[node] = {"config": config, "at": now,
                     "deferred": {"from": str(old.get("config") or out.get("config") or ""), "why": why, "at": now}}
    out["targets"] = targets
    return out


# -- what the views show ------------------------------------------------------------------------------

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
            return "Failed", str((eff or {}).get("reason") or "")
        return "Updating", f"targeted to {target}"
    desired = desired_of(member.report, entry)[0]
    if desired and desired != target and entry is not None:
        return "Updating", f"targeted to {desired} (an earlier target; the pool's is {target})"
    reason = str((rollout or {}).get("halted") or (rollout or {}).get("waiting") or "waiting for its turn")
    return "Waiting", reason


def summary(members: Sequence[Member], rollout: Optional[Mapping[str, Any]], target: str, image: Optional[str],
            max_unavailable: int, now: float) -> Dict[str, Any]:
    """The pool's ``status.rollout``: who updates, who waits and why, who failed, who is deferred,
    and an estimate of the end from the measured durations (bounded: LISTED names per group)."""
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
                      ("canaryAt", "canaryAt")):
        if (rollout or {}).get(key):
            out[name] = rollout[key]  # type: ignore[index]
    left = len(members) - len(groups.get("Done", [])) - len(groups.get("Unmanaged", []))
    durations = list((rollout or {}).get("durations") or [])
    if left and durations and not out.get("halted"):
        per = statistics.median(durations)
        out["estimate"] = {"seconds": round(math.ceil(left / max(1, max_unavailable)) * per),
                           "from": f"{len(durations)} measured update(s), median {per:g} s, "
                                   f"{left} node(s) left, {max_unavailable} at a time"}
    return out
