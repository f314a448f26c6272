"""What ``node-config-server get`` and ``describe`` print (pure: objects in, text out).

Tables follow ``oc get mcp``: NAME, CONFIG, UPDATED, UPDATING, DEGRADED, MACHINES, READY,
UPDATED-M, DEGRADED-M, AGE (upstream: openshift/machine-config-operator
install/0000_80_machine-config_01_machineconfigpools.crd.yaml, additionalPrinterColumns, whose
count columns are MACHINECOUNT, READYMACHINECOUNT, UPDATEDMACHINECOUNT, DEGRADEDMACHINECOUNT:
upstream's table is about 190 columns wide). How a table fits the terminal, and says which
columns it left out: tables.py. ``-o wide`` adds the wide-only columns (``POOL_WIDE``,
``NODE_WIDE``), as kubectl adds a resource's columns of priority > 0; ``-o json|yaml``:
objects.py.
"""

import datetime
from typing import Any, Callable, Dict, List, Optional

from agent.server.cli import firstbootviews, rolloutview
from agent.server.cli.objects import dump  # noqa: F401  (main.py's name for it)
from agent.server.cli.rolloutview import node_rollout_cell, node_rollout_line, pool_rollout_lines
from agent.server.cli.tables import WIDTH, fit, table, without

POOL_COLUMNS = ("NAME", "CONFIG", "UPDATED", "UPDATING", "DEGRADED", "MACHINES", "READY", "UPDATED-M",
                "DEGRADED-M", "AGE")
NODE_COLUMNS = ("NAME", "POOL", "READY", "STATE", "UPDATED", "ROLLOUT", "CONFIG", "FIRSTBOOT", "SKEW", "REPORTED",
                "REASON")
POOL_OPTIONAL = ("DEGRADED-M", "UPDATED-M", "READY")  # left out first, in this order, when a table does not fit
NODE_OPTIONAL = ("SKEW", "REPORTED", "FIRSTBOOT")  # FIRSTBOOT last: REASON also names a failed or stalled one
# -o wide only (kubectl's priority > 0 columns): the pool's target, what new nodes get, paused, its
# maxUnavailable; a node's desired config (the server's targeting), OS image and boot image
POOL_WIDE = ("TARGET", "SERVED", "IMAGE", "PAUSED", "MAXUNAVAILABLE")
NODE_WIDE = ("DESIRED", "IMAGE", "BOOTIMAGE")


# -- small helpers ------------------------------------------------------------------------------

def age(seconds: Optional[float]) -> str:
    """Kubernetes' short durations (``kubectl get`` AGE): 45s, 12m, 5h, 3d, 2y."""
    if seconds is None:
        return "<unknown>"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 2 * 3600:
        return f"{s // 60}m"
    if s < 2 * 86400:
        return f"{s // 3600}h"
    if s < 2 * 365 * 86400:
        return f"{s // 86400}d"
    return f"{s // (365 * 86400)}y"


def parse_time(value: Any) -> Optional[float]:
    """Epoch seconds from a number or an RFC 3339 timestamp (``2026-11-22T20:30:00Z``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value:
        text = value.replace("Z", "+00:00")
        try:
            return datetime.datetime.fromisoformat(text).timestamp()
        except ValueError:
            return None
    return None


def _condition(obj: Dict[str, Any], kind: str) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status", "Unknown"))
    return "Unknown"


# -- pools --------------------------------------------------------------------------------------

def pool_age(pool: Dict[str, Any], now: float) -> Optional[float]:
    created = parse_time((pool.get("metadata") or {}).get("creationTimestamp"))
    return None if created is None else now - created


def pools_table(pools: List[Dict[str, Any]], now: float, wide: bool = False, width: Optional[int] = WIDTH,
                draining: bool = True, degraded: bool = True) -> str:
    """``draining``: the lines under the table (degraded pools' reasons, drains, first boots);
    ``degraded``: their first part (``status`` names the reasons in its own list instead)."""
    def build(short: Callable[[str], str]) -> List[List[str]]:
        rows = [list(POOL_COLUMNS + POOL_WIDE)]
        for p in pools:
            spec, st = p.get("spec") or {}, p.get("status") or {}
            current = (st.get("configuration") or {}).get("name", "")
            served = st.get("served") or {}
            rows.append([
                (p.get("metadata") or {}).get("name", ""), short(current),
                _condition(p, "Updated"), _condition(p, "Updating"), _condition(p, "Degraded"),
                str(st.get("machineCount", 0)), str(st.get("readyMachineCount", 0)),
                str(st.get("updatedMachineCount", 0)), str(st.get("degradedMachineCount", 0)),
                age(pool_age(p, now)),
                (spec.get("configuration") or {}).get("name") or "-", served.get("config") or "-",
                served.get("image") or "-", str(bool(spec.get("paused"))), str(spec.get("maxUnavailable", 1)),
            ])
        return rows

    text = fit(build, width, wide, POOL_OPTIONAL, wide_only=POOL_WIDE)
    under = ((degraded_lines(pools) if degraded else []) + approval_lines(pools) + draining_lines(pools, now)
             + rolloutview.window_lines(pools, now) + rolloutview.blocking_pods_holds(pools)
             + rolloutview.alerts_lines(pools)
             + firstbootviews.pool_lines(pools))  # windows, blocking pods, alert gates, first boots too
    return text + "".join(line + "\n" for line in under) if draining else text


APPROVE = "node-config-server approve node --pending lists them, approve node NAME approves one"
PENDING_WHY = "waits for approval: its report counts for nothing (pool counts, proof, drain, turn) until approved"


def approval_lines(pools: List[Dict[str, Any]]) -> List[str]:
    """Under ``get pools``: how many names wait for approval in each pool, which no count
    column includes (a pool of three such first boots read MACHINES 0 beside nodes shown Done)."""
    out = []
    for p in pools:
        waiting = (p.get("status") or {}).get("waitingForApproval") or {}
        if waiting.get("count"):
            out.append(f"{(p.get('metadata') or {}).get('name', '')}: {_waiting_text(waiting)}")
    return out


def _waiting_text(waiting: Dict[str, Any]) -> str:
    names = list(waiting.get("nodes") or [])
    more = int(waiting.get("count", 0)) - len(names)
    listed = ", ".join(names) + (f" and {more} more" if more > 0 else "")
    return f"{waiting.get('count')} node(s) wait for approval, counted in no column ({listed}): {APPROVE}"


def degraded_lines(pools: List[Dict[str, Any]]) -> List[str]:
    """Under ``get pools``: why each Degraded pool is (NodeDegraded's nodes, RenderDegraded's
    object), so that a DEGRADED True never stands without its reason."""
    out = []
    for p in pools:
        conds = {c.get("type"): c for c in (p.get("status") or {}).get("conditions") or [] if isinstance(c, dict)}
        if (conds.get("Degraded") or {}).get("status") != "True":
            continue
        name = (p.get("metadata") or {}).get("name", "")
        for kind in ("NodeDegraded", "RenderDegraded"):
            c = conds.get(kind) or {}
            if c.get("status") == "True":
                out.append(f"{name}: {kind}: {c.get('message') or c.get('reason') or '(no message)'}")
        if not any((conds.get(k) or {}).get("status") == "True" for k in ("NodeDegraded", "RenderDegraded")):
            out.append(f"{name}: Degraded: {conds['Degraded'].get('message') or '(no message)'}")
    return out


def draining_lines(pools: List[Dict[str, Any]], now: float) -> List[str]:
    """Under ``get pools``: each node whose drain is under way (Kubernetes backend), since when and
    what blocks it, so that a drain that cannot finish is never out of sight."""
    out = []
    for p in pools:
        name = (p.get("metadata") or {}).get("name", "")
        for node, d in sorted((((p.get("status") or {}).get("drain") or {}).get("nodes") or {}).items()):
            out.append(f"{name}: node {node} {_drain_text(d, now)}")
    return out


def _drain_text(d: Dict[str, Any], now: float) -> str:
    since = parse_time(d.get("since"))
    text = (f"draining for {age(None if since is None else now - since)} (since {d.get('since', '')}, "
            f"attempt {d.get('attempts', 0)})")
    if d.get("failing"):
        text += ", FAILING past the threshold (DrainFailed events, mcc_drain_err 1)"
    return text + (f": blocked by {d['blockedBy']}" if d.get("blockedBy") else "")


def describe_pool(pool: Dict[str, Any], now: float) -> str:
    """``oc describe mcp``-like: what the pool is at, what new nodes get and why, conditions, nodes."""
    meta, spec, st = pool.get("metadata") or {}, pool.get("spec") or {}, pool.get("status") or {}
    served = st.get("served") or {}
    drain = st.get("drain") or {}
    lines = [
        f"Name:                {meta.get('name', '')}",
        f"Age:                 {age(pool_age(pool, now))}",
        f"Target config:       {(spec.get('configuration') or {}).get('name', '')}",
        f"Current config:      {(st.get('configuration') or {}).get('name', '')}",
        f"Layered image:       {st.get('layeredImage') or '<none>'}",
        f"Paused:              {bool(spec.get('paused'))}",
        f"Machines:            {st.get('machineCount', 0)} (ready {st.get('readyMachineCount', 0)}, updated "
        f"{st.get('updatedMachineCount', 0)}, degraded {st.get('degradedMachineCount', 0)}, skew refused "
        f"{st.get('skewRefusedMachineCount', 0)})" + (
            f"; {(st.get('waitingForApproval') or {}).get('count')} more wait for approval, not counted"
            if (st.get("waitingForApproval") or {}).get("count") else ""),
        *([f"Waiting approval:    {_waiting_text(st['waitingForApproval'])}"]
          if (st.get("waitingForApproval") or {}).get("count") else []),
        f"Max unavailable:     {drain.get('maxUnavailable', '')} (draining: "
        f"{', '.join(drain.get('holders') or []) or 'none'})",
        *(f"  {node}: {_drain_text(d, now)}" for node, d in sorted((drain.get("nodes") or {}).items())),
        *pool_rollout_lines(st, bool(spec.get("paused"))),
        *rolloutview.window_line(st, now),  # ours: the pool's maintenance window
        *rolloutview.blocking_pods_lines(st),  # ours: the pool's blocking pods
        *rolloutview.alerts_line(st),  # ours: the pool's alert gate
        "Served to new nodes:",
        f"  Config:            {served.get('config', '')}",
        f"  Image:             {served.get('image') or '<none>'}",
        f"  Why:               {served.get('reason', '')}",
    ]
    if st.get("held"):
        lines.append(f"Render held:         {st['held']}")
    pending = st.get("pendingDisruption")
    if pending and pending.get("from") != pending.get("to"):
        actions = ", ".join(_action(a) for a in pending.get("actions") or []) or "None"
        lines.append(f"Next update:         {actions} (drain: {'yes' if pending.get('drain') else 'no'})")
    lines += rolloutview.review_lines(st)  # what the next update removes, validator warnings, a rendering held for review
    lines += [firstbootviews.pool_counts(pool), *firstbootviews.pool_lines([pool], indent="  ")]
    lines += ["Conditions:"] + _indent(_conditions_table(st.get("conditions") or []))
    nodes = st.get("nodes") or {}
    lines.append("Nodes:" if nodes else "Nodes:               <none>")
    if nodes:
        rows = [["NAME", "STATE", "CONFIG", "SKEW", "REASON"]]
        for name, n in sorted(nodes.items()):
            why = str(n.get("reason") or n.get("degradedReason") or "").split("\n", 1)[0]
            if n.get("approval") == "Pending":  # listed, counted in nothing
                why = "PENDING approval, not counted" + (f"; {why}" if why else "")
            rows.append([name, str(n.get("state", "")), n.get("currentConfig", ""), n.get("skew", "") or "-", why])
        lines += _indent(table(rows))
    history = st.get("history") or []
    if history:
        rows = [["AT", "FIELD", "CONFIG"]]
        for h in history[-10:]:
            rows.append([_when(h.get("at")), str(h.get("field", "")), str(h.get("config", ""))])
        lines += ["History (last 10):"] + _indent(table(rows))
    return "\n".join(lines) + "\n"


def _action(a: Dict[str, Any]) -> str:
    unit = a.get("unit") or a.get("reload") or ""
    return f"{a.get('type', '')} {unit}".strip()


def _conditions_table(conditions: List[Dict[str, Any]]) -> str:
    """As ``oc describe mcp`` lists them: every field of each condition, values whole."""
    rows = [["TYPE", "STATUS", "LAST TRANSITION", "REASON", "MESSAGE"]]
    for c in conditions:
        rows.append([str(c.get("type", "")), str(c.get("status", "")), _when(c.get("lastTransitionTime")) or "-",
                     str(c.get("reason") or "-"), str(c.get("message") or "-")])
    return table(rows)


def _indent(text: str) -> List[str]:
    return ["  " + line for line in text.splitlines()]


def _when(at: Any) -> str:
    t = parse_time(at)
    if t is None:
        return str(at or "")
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- nodes --------------------------------------------------------------------------------------

def nodes_table(nodes: List[Dict[str, Any]], now: float, wide: bool = False, width: Optional[int] = WIDTH) -> str:
    def build(short: Callable[[str], str]) -> List[List[str]]:
        rows = [list(NODE_COLUMNS[:-1] + NODE_WIDE + NODE_COLUMNS[-1:])]  # the wide ones before REASON (prose)
        for n in nodes:
            rep = n.get("report") or {}
            reported = parse_time(n.get("reportedAt"))
            rows.append([n.get("name", ""), n.get("pool", "") or "<none>", str(n.get("ready") or "-"),
                         str(rep.get("state", "")),
                         str(bool(n.get("updated"))), node_rollout_cell(n), short(rep.get("currentConfig", "") or "-"),
                         firstbootviews.cell(n), rep.get("skew", "") or "-", _reported(reported, now),
                         (n.get("rollout") or {}).get("desiredConfig") or rep.get("desiredConfig") or "-",
                         rep.get("currentImage") or "-", rep.get("bootImage") or "-", node_reason(n)])
        # READY is the Node object's (--backend kubernetes); without Node objects there is none to show
        return rows if any("ready" in n for n in nodes) else without(rows, ("READY",))

    return fit(build, width, wide, NODE_OPTIONAL, free="REASON", wide_only=NODE_WIDE)


def _reported(at: Optional[float], now: float) -> str:
    """How long ago the last report came; "never" for a Node node-agent does not report for."""
    return "never" if at is None else age(now - at)


def node_reason(node: Dict[str, Any]) -> str:
    """Why a node is not simply Done: the server's degraded reason, else the node's own; its
    first line in a table (a node's on-disk drift names each path on a line of its own:
    ``describe node`` shows them all)."""
    text = str(node.get("degradedReason") or firstbootviews.reason(node) or node.get("notReady")
               or (node.get("report") or {}).get("reason") or (node.get("rollout") or {}).get("reason")
               or (PENDING_WHY if node.get("approval") == "Pending" else ""))
    return text.split("\n", 1)[0]


def _state_lines(rep: Dict[str, Any]) -> List[str]:
    """``State:`` with the node's reason; a reason of several lines (the paths of an on-disk
    drift, agent/core/drift.py ``reason``) continues indented, one line each."""
    lines = str(rep.get("reason") or "").split("\n")
    head = f"State:               {rep.get('state', '')}" + (f" ({lines[0]})" if lines[0] else "")
    return [head] + [f"                       {line}" for line in lines[1:] if line]


def describe_node(node: Dict[str, Any], pool: Optional[Dict[str, Any]], now: float) -> str:
    """The node's last report, its pool and why, and what its pool serves (config, image, why)."""
    rep = node.get("report") or {}
    reported = parse_time(node.get("reportedAt"))
    lines = [
        f"Name:                {node.get('name') or node.get('node', '')}",
        f"Pool:                {node.get('pool') or '<none>'}",
        f"Membership:          {node.get('membership') or ''}",
        *([f"Approval:            Pending: {PENDING_WHY} ({APPROVE})"] if node.get("approval") == "Pending" else []),
        *([f"Ready:               {node['ready']}" + (f" ({node['notReady']})" if node.get("notReady") else "")]
          if node.get("ready") else []),  # the Node's (--backend kubernetes)
        *_state_lines(rep),
        f"Last report:         {_reported(reported, now)}" + (" ago" if reported is not None else " (no node-agent report)"),
        f"Current config:      {rep.get('currentConfig') or '<none>'}",
        f"Desired config:      {rep.get('desiredConfig') or '<none>'}",
        *node_rollout_line(node),
        f"First pivot config:  {rep.get('firstPivotConfig') or '<none>'}",
        f"Current image:       {rep.get('currentImage') or '<none>'}",
        f"Boot image:          {rep.get('bootImage') or '<unknown>'}",
        f"Boot image skew:     {rep.get('skew') or '<not checked>'}",
    ]
    lines += firstbootviews.describe_lines(node)
    if node.get("counted") is False:
        lines.append(f"Counted:             no: {node.get('notCounted') or ''}")
    if node.get("degradedReason"):
        lines.append(f"Degraded because:    {node['degradedReason']}")
    if pool is not None:
        st = pool.get("status") or {}
        served = st.get("served") or {}
        target = ((pool.get("spec") or {}).get("configuration") or {}).get("name", "")
        lines += [
            f"Pool target config:  {target}",
            f"Updated:             {bool(node.get('updated'))}",
            "Served to new nodes of the pool:",
            f"  Config:            {served.get('config', '')}",
            f"  Image:             {served.get('image') or '<none>'}",
            f"  Why:               {served.get('reason', '')}",
        ]
    if node.get("drain"):
        d = node["drain"]
        lines.append(f"Drain:               {_drain_text(d, now)}")
        if d.get("nextAttempt"):
            lines.append(f"  Next attempt:      {d['nextAttempt']}")
    events = node.get("drainEvents") or []
    if events:
        rows = [["AT", "ACTION", "DETAIL"]]
        for e in events[-10:]:
            rows.append([_when(e.get("at")), str(e.get("action", "")), str(e.get("detail") or "")])
        lines += ["Drain events (last 10):"] + _indent(table(rows))
    return "\n".join(lines) + "\n"
