"""The server's rollout in the operator views (pure): who updates, who waits and why, who failed
or was deferred, and when it should end (``status.rollout`` of a pool, ``rollout`` of a node:
agent/server/rollout/targeting.py ``summary`` and ``node_state``)."""

from typing import Any, Dict, List

from agent.server.rollout.blockingpods import listed


def _names(names: List[str], count: int) -> str:
    more = count - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _about(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def pool_rollout_lines(status: Dict[str, Any], paused: bool = False) -> List[str]:
    """``describe pool``'s Rollout block: one line of counts, then why the others wait, what
    halted the rollout, and each failed or deferred node with its reason. A ``paused`` pool has
    no end estimate: nothing moves until it is unpaused."""
    r = status.get("rollout") or {}
    counts = r.get("counts") or {}
    if not r or not counts:
        return []
    parts = []
    for state, key in (("Updating", "updating"), ("Waiting", "waiting"), ("Failed", "failed"), ("Deferred", "deferred")):
        if counts.get(state):
            parts.append(f"{counts[state]} {state.lower()} ({_names(r.get(key) or [], counts[state])})")
    done = counts.get("Done", 0)
    head = f"Rollout:             to {r.get('target', '')}: {done} done" + "".join(f", {p}" for p in parts)
    estimate = r.get("estimate") or {}
    if paused and any(counts.get(k) for k in ("Updating", "Waiting", "Failed", "Deferred")):
        head += "; paused: no end estimate (nothing updates until spec.paused is false)"
    elif (r.get("window") or {}).get("open") is False and any(counts.get(k) for k in ("Waiting", "Deferred")):
        head += "; outside its maintenance window: no end estimate (nothing is newly targeted until it opens)"
    elif estimate and not paused:
        head += f"; ends in about {_about(float(estimate.get('seconds', 0)))} ({estimate.get('from', '')})"
    lines = [head]
    if r.get("halted"):
        lines.append(f"  Halted:            {r['halted']}")
    elif r.get("waitReason") and counts.get("Waiting"):
        lines.append(f"  Waiting because:   {r['waitReason']}")
    for node, why in sorted((r.get("reasons") or {}).items()):
        lines.append(f"  {node}: {why}")
    for node, why in sorted((r.get("notReady") or {}).items()):  # a NotReady, cordoned or pressured Node
        lines.append(f"  Not ready:         {node} ({why})")
    return lines


def window_line(status: Dict[str, Any], now: float) -> List[str]:
    """``describe pool``'s Maintenance window line (agent/server/rollout/windows.py): the schedule
    and until when it is open, or when it opens and who waits for it; an invalid annotation, why."""
    r = status.get("rollout") or {}
    w = r.get("window") or {}
    if not w:
        return []
    if w.get("invalid"):
        return [f"Maintenance window:  INVALID, nothing is newly targeted until it is fixed: {w['invalid']}"]
    if w.get("open"):
        return [f"Maintenance window:  {w.get('schedule', '')}: open until {w.get('closesAt', '')}"]
    return [f"Maintenance window:  {w.get('schedule', '')}: {_closed(r, now)}"]


def _closed(r: Dict[str, Any], now: float) -> str:
    """"closed, opens at T (in about D); N node(s) wait for it (names)"."""
    import datetime

    w = r.get("window") or {}
    try:
        opens = datetime.datetime.fromisoformat(str(w.get("opensAt", "")).replace("Z", "+00:00")).timestamp()
        within = f" (in {_about(max(0.0, opens - now))})"
    except ValueError:
        within = ""
    waiting = (r.get("counts") or {}).get("Waiting", 0)
    who = f"{waiting} node(s) wait for it ({_names(r.get('waiting') or [], waiting)})" if waiting else "no node waits"
    return f"closed, opens at {w.get('opensAt', '')}{within}; {who}"


def window_lines(pools: List[Dict[str, Any]], now: float) -> List[str]:
    """Under ``get pools``: each pool outside its maintenance window, when it opens and who waits,
    and each pool whose window annotation is invalid (it holds too): a rollout that does not move
    is never out of sight."""
    out = []
    for p in pools:
        name = (p.get("metadata") or {}).get("name", "")
        r = (p.get("status") or {}).get("rollout") or {}
        w = r.get("window") or {}
        if w.get("invalid"):
            out.append(f"{name}: maintenance window INVALID, nothing is newly targeted until it is fixed: "
                       f"{w['invalid']}")
        elif w and not w.get("open"):
            out.append(f"{name}: OUTSIDE its maintenance window ({w.get('schedule', '')}): {_closed(r, now)}")
    return out


def _alerts_text(a: Dict[str, Any]) -> str:
    """What the pool's alert gate (agent/server/rollout/alertgate.py) says now."""
    if a.get("invalid"):
        return f"INVALID, nothing is newly targeted until it is fixed: {a['invalid']}"
    if a.get("unanswered"):
        then = "the rollout goes on (" + str(a.get("override")) + ")" if a.get("override") else \
            "nothing is newly targeted (fail closed)"
        return f"{a.get('pattern', '')}: {a['unanswered']}; {then}"
    if a.get("holding"):
        return f"{a.get('pattern', '')}: HOLDING, {a.get('count', 0)} alert(s) fire: " \
               f"{_names(a.get('firing') or [], int(a.get('count') or 0))}"
    return f"{a.get('pattern', '')}: no matching alert fires"


def alerts_line(status: Dict[str, Any]) -> List[str]:
    """``describe pool``'s Alert gate line: the pattern and the alerts it waits for."""
    a = (status.get("rollout") or {}).get("alerts") or {}
    return [f"Alert gate:          {_alerts_text(a)}"] if a else []


def alerts_lines(pools: List[Dict[str, Any]]) -> List[str]:
    """Under ``get pools``: each pool its alert gate holds, and why."""
    out = []
    for p in pools:
        a = ((p.get("status") or {}).get("rollout") or {}).get("alerts") or {}
        if a.get("holding") or a.get("override"):
            out.append(f"{(p.get('metadata') or {}).get('name', '')}: HOLDING on alerts: {_alerts_text(a)}"
                       if a.get("holding") else
                       f"{(p.get('metadata') or {}).get('name', '')}: alert gate: {_alerts_text(a)}")
    return out


def blocking_pods_lines(status: Dict[str, Any]) -> List[str]:
    """``describe pool``'s Blocking pods line (ours: agent/server/rollout/blockingpods.py): the
    selector and each node waiting for its pods; an invalid annotation, a failed list, or the
    directory backend (no pods: no effect), said as such."""
    b = (status.get("rollout") or {}).get("blockingPods") or {}
    if not b:
        return []
    if b.get("invalid"):
        return [f"Blocking pods:       INVALID, nothing is newly targeted until it is fixed: {b['invalid']}"]
    head = f"Blocking pods:       selector {b.get('selector', '')!r}: "
    if b.get("unavailable"):
        return [head + f"the pods could not be listed, nothing is newly targeted until they can: {b['unavailable']}"]
    if b.get("ignored"):
        return [head + str(b["ignored"])]
    nodes = b.get("nodes") or {}
    count = int(b.get("waiting") or 0)
    lines = [head + (f"{count} node(s) wait for their pods (the next nodes go in their place)" if count
                     else "no node waiting for its turn runs a matching pod")]
    lines += [f"  {node}: {listed(pods)}" for node, pods in sorted(nodes.items())]
    if count > len(nodes):
        lines.append(f"  and {count - len(nodes)} more node(s)")
    return lines


def blocking_pods_holds(pools: List[Dict[str, Any]]) -> List[str]:
    """Under ``get pools``: each pool whose blocking-pod selector holds it (invalid, or the pods
    could not be listed): a rollout that does not move is never out of sight."""
    out = []
    for p in pools:
        b = ((p.get("status") or {}).get("rollout") or {}).get("blockingPods") or {}
        name = (p.get("metadata") or {}).get("name", "")
        if b.get("invalid"):
            out.append(f"{name}: blocking-pod selector INVALID, nothing is newly targeted until it is fixed: "
                       f"{b['invalid']}")
        elif b.get("unavailable"):
            out.append(f"{name}: blocking pods could not be listed, nothing is newly targeted: {b['unavailable']}")
    return out


def node_rollout_line(node: Dict[str, Any]) -> List[str]:
    """``describe node``'s Rollout line: its state in the pool's rollout, its desired config, why."""
    r = node.get("rollout") or {}
    if not r:
        return []
    why = f" ({r['reason']})" if r.get("reason") else ""
    return [f"Rollout:             {r.get('state', '')}{why}", f"Desired (server):    {r.get('desiredConfig') or '<none>'}"]


def node_rollout_cell(node: Dict[str, Any]) -> str:
    """The ROLLOUT column: the node's turn; ``AwaitingApproval`` for a name that waits for approval
    (it has no turn: counted in nothing)."""
    if node.get("approval") == "Pending":
        return "AwaitingApproval"
    return str((node.get("rollout") or {}).get("state") or "-")


def review_lines(status: Dict[str, Any]) -> List[str]:
    """``describe pool``'s review (agent/server/rollout/review.py): what the next update removes,
    the validator warnings of the pool's inputs, and a rendering held for the admin's
    acknowledgement with what it does."""
    lines = []
    pending = status.get("pendingDisruption") or {}
    if pending.get("removes") and pending.get("from") != pending.get("to"):
        lines.append(f"  Removes:           {', '.join(pending['removes'])}")
    held = status.get("review") or {}
    if held.get("held"):
        what = [f"removes {', '.join(held['removes'])}" if held.get("removes") else "removes nothing",
                ("reboot" if held.get("reboot") else "no reboot") + (", drain" if held.get("drain") else ""),
                f"{len(held.get('warnings') or [])} validator warning(s)"]
        lines.append(f"Held for review:     {held.get('config', '')} from {held.get('from', '')}: {'; '.join(what)} "
                     f"(node-config-server ack pool NAME takes it)")
    warnings = status.get("renderWarnings") or []
    if warnings:
        lines.append(f"Render warnings:     {len(warnings)} (condition RenderWarnings)")
        lines += [f"  {w}" for w in warnings]
    return lines
