"""Which nodes of a pool update, and when (pure): the MCO node controller's targeting, and ours
beside it. The server decides, the node carries out: a member is served only the config the
server targeted for it (its desired config), never the pool's target by itself.

Upstream (openshift/machine-config-operator at 7ff337a4, pkg/controller/node/node_controller.go
and pkg/controller/common/layered_node_state.go): ``syncMachineConfigPool`` returns before
touching any Node while the pool is paused or (``canLayeredContinue``) its build is not ready
(``step``'s hold); ``getAllCandidateMachines`` (capacity = maxUnavailable minus the unavailable
Nodes; Nodes that are no candidate and failing take capacity too; a candidate that is not ready is
skipped), ``CheckNodeCandidacyForUpdate``, ``updateCandidateMachines`` (the first ``capacity``
candidates in ``sortNodeList`` order) and ``setDesiredAnnotations`` (the Event). The rules
themselves are in agent/server/rollout/candidates.py, named after those functions; the views in
rolloutstatus.py.

Ours, each named as ours (agent/core/rolloutpolicy.py reads the pool's and the Nodes' settings):

- ``failure_budget``: the rollout halts once that many nodes failed on the target; a failed node
  then holds no slot and waits (``parked``) until a free slot lets it retry (``retry``), so never
  more than maxUnavailable nodes may work at once (default: upstream's rule alone);
- ``canary``: the first N nodes of a new target, then a wait after they are Done and Ready;
- ``rollout_order``: a priority label first, then upstream's order; deferred nodes last;
- ``defer``: a node whose drain a PodDisruptionBudget holds past a time gives its slot back,
  keeps its config, and is tried again once every other node is done;
- only nodes with a node-agent report are targeted: a Node a real MCD (or nothing) manages is
  counted as upstream counts it, from its own annotations, but its desiredConfig is never written;
- ``blocked``: a candidate running a pod the pool's blocking-pod selector matches is skipped, as a
  not-ready one is, without holding a slot; the next candidate goes (blockingpods.py).

The step reads the pool's members through ``poolindex.PoolIndex`` (ours): each member filed
once by what the rules above ask of it, and filed again only when it or its entry changed, so a
step costs what changed, not the pool.

The state is the pool's ``rollout`` record, kept with the pool's row in the node store and
changed only by ``update_pool``'s compare-and-swap, so every replica and worker shares one
decision: ``{"config": the target it is about, "started", "canaryAt", "durations": [seconds of
the last updates], "targets": {node: {"config", "image"?, "at", "deferred"?: {"from", "why", "at"},
"parked"?, "retry"?}}}``. A node without an entry desires what it reports (``desiredConfig``,
``desiredImage``); an entry is dropped once the node is Done on it and its own report desires the
same (config and image), so the record holds only the nodes in flight.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from agent.core.rolloutpolicy import RolloutPolicy, node_priority
from agent.server.rollout import blockingpods, candidates, nodestatus
from agent.server.rollout.candidates import (  # noqa: F401 (Member: the type step takes, named here too)
    Candidates,
    Member,
    check_node_candidacy_for_update,
    is_desired_equal_to_pool,
    sort_node_list,
)
from agent.server.rollout.entries import desired_of, effective, entry_of, with_desired  # noqa: F401 (named here too)
from agent.server.rollout.poolindex import Picked, PoolIndex

DURATIONS_KEEP = 20
LISTED = 20  # names listed per group in a pool's rollout summary (its counts are whole)


@dataclass
class Decision:
    rollout: Dict[str, Any]
    targeted: List[str] = field(default_factory=list)  # newly targeted by this step
    halted: str = ""  # why no node is targeted although some wait, when the rollout stopped itself
    waiting: str = ""  # why the waiting nodes wait (capacity, canary, paused)
    retried: List[str] = field(default_factory=list)  # ours: failed nodes let retry by this step (failure budget)
    blocked: List[str] = field(default_factory=list)  # ours: candidates skipped for their blocking pods


def get_all_candidate_machines(members: Sequence[Member], rollout: Optional[Mapping[str, Any]], target: str,
                               image: Optional[str], max_unavailable: int,
                               blocked: Mapping[str, Sequence[str]] = {}) -> Candidates:  # noqa: B006 (read only)
    """candidates.get_all_candidate_machines on the members as their Nodes read (``effective``),
    the failed nodes let retry (ours, under a failure budget) each holding a slot, the nodes
    running blocking pods (ours) skipped."""
    eff = {m.name: effective(m, entry_of(rollout, m.name)) for m in members}
    retrying = [n for n, e in ((rollout or {}).get("targets") or {}).items() if isinstance(e, dict) and e.get("retry")]
    return candidates.get_all_candidate_machines(members, eff, target, image, max_unavailable, retrying, blocked)


def rollout_order(members: Sequence[Member], deferred: Sequence[str] = ()) -> List[Member]:
    """Ours: deferred nodes last, then a higher rollout-priority label first, then upstream's order."""
    ordered = sort_node_list(members)
    rank = {m.name: i for i, m in enumerate(ordered)}
    return sorted(ordered, key=lambda m: (m.name in deferred, -node_priority(m.labels)[0], rank[m.name]))


def _done_on(member: Member, entry: Optional[Mapping[str, Any]]) -> bool:
    """The node is Done on its entry's config, and its own report desires what the entry says
    (config and image): the entry has served its purpose. Upstream the Node keeps its desiredImage
    annotation once set; here the entry is that annotation until the node's report carries it, so a
    Done layered node is never a candidate again (CheckNodeCandidacyForUpdate)."""
    if entry is None or entry.get("deferred") or not nodestatus.is_node_done(effective(member, entry)):
        return False
    return not entry.get("image") or (member.report or {}).get("desiredImage") == entry["image"]


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
        elif _done_on(member, entry):
            if entry.get("config") == target and entry.get("at"):
                durations.append(round(max(0.0, now - float(entry["at"])), 3))
            del targets[name]
    if durations:
        rollout["durations"] = durations[-DURATIONS_KEEP:]


def _canary_room(index: PoolIndex, rollout: Dict[str, Any], target: str, policy: RolloutPolicy,
                 now: float) -> Tuple[Optional[int], str]:
    """Ours: how many more nodes the canary phase lets be targeted (None: no limit) and why the
    others wait. The first ``canary_nodes`` go; once that many are Done and Ready on the target
    the rest wait ``canary_wait`` seconds (``canaryAt`` records when)."""
    wanted = min(policy.canary_nodes, len(index.members))
    if wanted <= 0:
        return None, ""
    if not rollout.get("canaryAt"):
        if index.ready_on_target >= wanted:
            rollout["canaryAt"] = now
        else:
            return max(0, wanted - index.on_target), (f"canary: the first {wanted} node(s) update first; the others "
                                                      f"wait until they are Done and Ready")
    until = float(rollout["canaryAt"]) + policy.canary_wait
    if now < until:
        return 0, (f"canary: {wanted} node(s) Done and Ready on {target}; the others wait {policy.canary_wait:g} s "
                   f"after that, {math.ceil(until - now)} s more")
    return None, ""


def step(members: Optional[Sequence[Member]], rollout: Optional[Mapping[str, Any]], target: str, image: Optional[str],
         max_unavailable: int, policy: RolloutPolicy, hold: str, now: float,
         blocked: Mapping[str, Sequence[str]] = {}, index: Optional[PoolIndex] = None) -> Decision:  # noqa: B006
    """One sync of the pool: the new rollout record and the nodes targeted by it. ``hold``: why
    nobody is targeted now ("" when nothing holds): the pool is paused, (a layered pool) the
    target's image is not built yet (``hold_reason``), the pool is invalid or an arbiter rule holds.
    ``blocked``: ours, node -> the blocking pods running on it (``namespace/name``): such a
    candidate is not targeted now; a node already targeted goes on.
    Upstream's ``syncMachineConfigPool`` then returns before touching any Node: nobody is targeted
    or retargeted (only the entries of nodes Done on them go), and only why, and who waits, is said.
    ``index``: ours, the pool's members filed by its last step (poolindex.py), so that the step
    costs what changed; ``members`` then may be None (the index holds them, as ``apply`` left them)."""
    if index is None:
        index = PoolIndex()
    if members is not None:
        index.sync(members)
    out: Dict[str, Any] = {k: v for k, v in dict(rollout or {}).items() if k not in ("halted", "waiting")}
    out["targets"] = {k: dict(v) for k, v in (out.get("targets") or {}).items()}
    by_name = index.members
    if hold:  # bookkeeping only: an entry whose node is Done on it goes (no Node desires anything else)
        _compact(by_name, out, str(out.get("config") or ""), now)
        index.classify(out, target, image)
        return _decided(out, [], "", hold + _who_waits(index))
    if out.get("config") != target:
        out.update(config=target, started=now)
        out.pop("canaryAt", None)
    retargeted = _retarget_unstarted(by_name, out, target, image, now)
    _compact(by_name, out, target, now)
    budget = policy.failure_budget is not None
    index.classify(out, target, image)
    retrying = [n for n, e in out["targets"].items() if e.get("retry")]
    cands = index.candidates(max_unavailable, retrying, blocked)
    deferred = [n for n, e in out["targets"].items() if e.get("deferred")]
    capacity = max(0, cands.room - len([n for n in cands.failing if not by_name[n].ours])) if budget \
        else cands.capacity  # under a budget a real MCD's failed Node still holds its slot: it retries as it will
    # the candidates in rollout order, read as get_all_candidate_machines listed them: deferred ones last
    front = index.first(capacity, set(deferred) | set(cands.blocked))
    deferred_ready = index.in_order(n for n in deferred if n not in cands.blocked)
    if budget:  # ours: a failed node holds no slot; it waits for one before it retries
        _park_failed([n for n in cands.failing if by_name[n].ours], out, target, image, now)
        index.classify(out, target, image)
    # ours: a deferred node goes once every other node is done
    last = [] if deferred_ready and _others_left(index, deferred) else deferred_ready
    eligible = cands.count - len(deferred_ready) + len(last)
    halted = _halted(cands, policy) if eligible or cands.failing else ""
    chosen: List[Member] = []
    why = ""
    if eligible and not halted:
        room, why = _canary_room(index, out, target, policy, now)
        chosen = (front + last)[:capacity if room is None else min(capacity, room)]
        for m in chosen:
            out["targets"][m.name] = {"config": target, "at": now, **({"image": image} if image else {})}
    retried = _grant_retries(by_name, out, capacity - len(chosen), deferred, now) if budget else []
    waiting = ""
    if len(chosen) < eligible:
        waiting = why or _capacity_reason(cands, chosen, max_unavailable)
    waiting += _not_ready_reason(cands, by_name) + _blocked_reason(cands, blocked)
    decision = _decided(out, [n for n in retargeted if n in out["targets"]] + [m.name for m in chosen], halted,
                        waiting.lstrip("; "))
    decision.retried, decision.blocked = retried, cands.blocked
    return decision


def _others_left(index: PoolIndex, deferred: Sequence[str]) -> bool:
    """Ours: a node node-agent reports for, not deferred, is not done on the target yet."""
    return index.ours_not_done > index.not_done_among(deferred)


def _who_waits(index: PoolIndex) -> str:
    """"; N node(s) wait: names" for the nodes of the pool not desiring its target yet."""
    if not index.waiting:
        return ""
    names = index.waiting.first(LISTED)
    more = len(index.waiting) - LISTED
    return f"; {len(index.waiting)} node(s) wait for it: " + ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _not_ready_reason(cands: Picked, by_name: Mapping[str, Member]) -> str:
    """Upstream skips a candidate that is not ready; the pool says who and why."""
    if not cands.not_ready:
        return ""
    named = "; ".join(by_name[n].not_ready or n for n in cands.not_ready[:LISTED])
    return (f"; not ready, so not targeted until they are (upstream skips them): {named}")


def _blocked_reason(cands: Picked, blocked: Mapping[str, Sequence[str]]) -> str:
    """Ours: the candidates skipped for their blocking pods, each with its pods named."""
    if not cands.blocked:
        return ""
    named = "; ".join(f"{n} ({blockingpods.named(blocked[n])})" for n in cands.blocked[:LISTED])
    more = f"; and {len(cands.blocked) - LISTED} more" if len(cands.blocked) > LISTED else ""
    return f"; blocking pods run on them, so not targeted while they do (the next nodes go): {named}{more}"


def _park_failed(failing: List[str], rollout: Dict[str, Any], target: str, image: Optional[str], now: float) -> None:
    """Ours, under a failure budget: a node failing on the target that was not let retry gives its
    slot back and waits (served ``waiting``) until ``_grant_retries`` lets it retry in a free slot,
    so that, when the cause clears, no more than maxUnavailable nodes update at once. Only nodes
    node-agent reports for: a real MCD retries as it will, as upstream."""
    for name in failing:
        entry = rollout["targets"].setdefault(name, {"config": target, "at": now, **({"image": image} if image else {})})
        if not entry.get("retry"):
            entry.setdefault("parked", now)


def _grant_retries(by_name: Mapping[str, Member], rollout: Dict[str, Any], free: int, deferred: Sequence[str],
                   now: float) -> List[str]:
    """Ours: the free slots left after the new candidates go to the parked failed nodes, in the
    rollout's order; a node let retry holds its slot until it is Done on the target."""
    parked = [by_name[n] for n, e in rollout["targets"].items() if e.get("parked") and n in by_name]
    out = []
    for m in rollout_order(parked, deferred)[:max(0, free)]:
        entry = rollout["targets"][m.name]
        entry.pop("parked", None)
        entry["retry"] = now
        out.append(m.name)
    return out


def hold_reason(target: str, paused: bool, layered: bool, image: Optional[str], image_why: str) -> str:
    """Why syncMachineConfigPool targets nobody: a paused pool; a layered pool whose target's image
    is not built yet (``canLayeredPoolContinue``: the desired config and image are set together,
    once the build succeeded). "" when nothing holds."""
    if paused:
        return f"the pool is paused: nothing is targeted to {target}"
    if layered and not image:
        return f"the layered image of {target} is not ready ({image_why}): nothing is targeted until its build succeeds"
    return ""


def _halted(cands: Picked, policy: RolloutPolicy) -> str:
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


def _capacity_reason(cands: Picked, chosen: List[Member], max_unavailable: int) -> str:
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
