"""What ``node-config-server get`` and ``describe`` print (pure: objects in, text out).

Tables follow ``oc get mcp``: NAME, CONFIG, UPDATED, UPDATING, DEGRADED, MACHINECOUNT,
READYMACHINECOUNT, UPDATEDMACHINECOUNT, DEGRADEDMACHINECOUNT, AGE (upstream:
openshift/machine-config-operator install/0000_80_machine-config_01_machineconfigpools.crd.yaml,
additionalPrinterColumns). Upstream's table is about 190 columns wide; ours takes the terminal's
width (``terminal_width``: COLUMNS, else the terminal's; on a pipe, as kubectl, every value whole),
so the count columns carry short headers (MACHINES, READY, UPDATED-M, DEGRADED-M). When a table
does not fit, it gives up, in this order: the optional columns (``POOL_OPTIONAL``,
``NODE_OPTIONAL``: counts other columns already imply), then the length of a rendered config name
(``rendered-worker-c7f50b7f…``, ``worker-c7f50b7f…``, ``c7f50b7f…``), then the widest cells of the
other columns; a pool or node name is cut last of all. ``-o wide`` prints every column and every
value whole; ``-o json|yaml`` the objects as the API returns them.
"""

import datetime
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

from agent.server.cli import firstbootviews, rolloutview
from agent.server.cli.rolloutview import node_rollout_cell, node_rollout_line, pool_rollout_lines

WIDTH = 100
GAP = "  "
ELLIPSIS = "…"

POOL_COLUMNS = ("NAME", "CONFIG", "UPDATED", "UPDATING", "DEGRADED", "MACHINES", "READY", "UPDATED-M",
                "DEGRADED-M", "AGE")
NODE_COLUMNS = ("NAME", "POOL", "READY", "STATE", "UPDATED", "ROLLOUT", "CONFIG", "FIRSTBOOT", "SKEW", "REPORTED",
                "REASON")
POOL_OPTIONAL = ("DEGRADED-M", "UPDATED-M", "READY")  # left out first, in this order, when a table does not fit
NODE_OPTIONAL = ("SKEW", "REPORTED", "FIRSTBOOT")  # FIRSTBOOT last: REASON also names a failed or stalled one
MIN_CELL = 12  # a cut cell keeps at least this many characters (its header's, when longer)


def terminal_width(stream: Any = None) -> Optional[int]:
    """The width a table may take: $COLUMNS, else the terminal ``stream`` (stdout) is; None (no
    limit, every value whole, as ``kubectl get`` prints to a pipe) when it is no terminal."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        fd = (stream if stream is not None else sys.stdout).fileno()
        return os.get_terminal_size(fd).columns if os.isatty(fd) else None
    except (AttributeError, ValueError, OSError):
        return None


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


def shorten_config(name: str, keep: int, drop: str = "") -> str:
    """``rendered-worker-<32 hex>`` -> ``rendered-worker-<keep hex>…``; other names unchanged.

    ``drop="prefix"`` also leaves out ``rendered-`` (``worker-c7f50b7f…``), ``drop="name"`` all
    but the hash (``c7f50b7f…``: the NAME column already says which pool's config it is).
    """
    head, sep, digest = name.rpartition("-")
    if not sep or len(digest) <= keep or not all(c in "0123456789abcdef" for c in digest):
        return name
    short = digest[:keep] + ELLIPSIS
    if drop == "name":
        return short
    if drop == "prefix" and head.startswith("rendered-"):
        head = head[len("rendered-"):]
    return f"{head}-{short}"


def _condition(obj: Dict[str, Any], kind: str) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status", "Unknown"))
    return "Unknown"


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join(GAP.join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)


SHORTER = ((64, ""), (12, ""), (8, ""), (8, "prefix"), (8, "name"))


def fit(build: Callable[[Callable[[str], str]], List[List[str]]], width: Optional[int] = WIDTH, wide: bool = False,
        optional: Sequence[str] = (), free: str = "") -> str:
    """The table ``build(short)`` that fits in ``width`` giving up least. Whole config names come
    first: the ``optional`` columns go (in their order) while that makes them fit; else the
    names are shortened (``SHORTER``) with every column kept, and only at their shortest do the
    optional columns go. At each step the ``free`` column (a reason: prose) may be cut before
    anything else; at the end the widest cells of any column, a name last. ``wide`` or no
    ``width``: every column and value whole."""
    if wide or not width:
        return table(build(lambda name: name))
    whole = build(lambda name: name)
    steps = [without(whole, optional[:n]) for n in range(len(optional) + 1)]
    for keep, drop in SHORTER:
        steps.append(build(lambda name, keep=keep, drop=drop: shorten_config(name, keep, drop)))
    steps += [without(steps[-1], optional[:n]) for n in range(1, len(optional) + 1)]
    for rows in steps:
        for candidate in (rows, cut_column(rows, free, width)):
            if candidate is not None and _fits(candidate, width):
                return table(candidate)
    return table(cut_rows(steps[-1], width))


def cut_column(rows: List[List[str]], header: str, width: int) -> Optional[List[List[str]]]:
    """``rows`` with the cells of the column ``header`` cut as far as a line must shrink to fit
    ``width``, not below ``MIN_CELL``; None when there is no such column or it cannot give enough."""
    if header not in rows[0]:
        return None
    i = rows[0].index(header)
    excess = max(len(line) for line in table(rows).splitlines()) - width
    limit = max(len(r[i]) for r in rows) - excess
    if limit < max(MIN_CELL, len(header)):
        return None
    return [rows[0]] + [r[:i] + [cut(r[i], limit)] + r[i + 1:] for r in rows[1:]]


def without(rows: List[List[str]], columns: Sequence[str]) -> List[List[str]]:
    """``rows`` (a header first) without the columns headed ``columns``."""
    keep = [i for i, h in enumerate(rows[0]) if h not in columns]
    return [[r[i] for i in keep] for r in rows]


def _fits(rows: List[List[str]], width: int) -> bool:
    return max(len(line) for line in table(rows).splitlines()) <= width


def cut(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[:max(limit - 1, 0)] + ELLIPSIS


def cut_rows(rows: List[List[str]], width: int) -> List[List[str]]:
    """``rows`` (a header first) with the widest columns' cells cut until a line fits ``width``."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    floors = [max(MIN_CELL, len(h)) for h in rows[0]]
    floors[0] = widths[0]  # the name stays whole while another column can give
    if sum(floors) + len(GAP) * (len(widths) - 1) > width:
        floors[0] = max(MIN_CELL, len(rows[0][0]))
    while sum(widths) + len(GAP) * (len(widths) - 1) > width:
        cuttable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not cuttable:
            break
        widths[max(cuttable, key=lambda k: (widths[k], k))] -= 1  # the widest; of equals, the rightmost
    return [rows[0]] + [[cut(c, w) for c, w in zip(r, widths)] for r in rows[1:]]


# -- pools --------------------------------------------------------------------------------------

def pool_age(pool: Dict[str, Any], now: float) -> Optional[float]:
    created = parse_time((pool.get("metadata") or {}).get("creationTimestamp"))
    return None if created is None else now - created


def pools_table(pools: List[Dict[str, Any]], now: float, wide: bool = False, width: Optional[int] = WIDTH,
                draining: bool = True) -> str:
    def build(short: Callable[[str], str]) -> List[List[str]]:
        rows = [list(POOL_COLUMNS)]
        for p in pools:
            st = p.get("status") or {}
            current = (st.get("configuration") or {}).get("name", "")
            rows.append([
                (p.get("metadata") or {}).get("name", ""), short(current),
                _condition(p, "Updated"), _condition(p, "Updating"), _condition(p, "Degraded"),
                str(st.get("machineCount", 0)), str(st.get("readyMachineCount", 0)),
                str(st.get("updatedMachineCount", 0)), str(st.get("degradedMachineCount", 0)),
                age(pool_age(p, now)),
            ])
        return rows

    text = fit(build, width, wide, POOL_OPTIONAL)
    under = draining_lines(pools, now) + firstbootviews.pool_lines(pools)  # failed and stalled first boots too
    return text + "".join(line + "\n" for line in under) if draining else text


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
        f"{st.get('skewRefusedMachineCount', 0)})",
        f"Max unavailable:     {drain.get('maxUnavailable', '')} (draining: "
        f"{', '.join(drain.get('holders') or []) or 'none'})",
        *(f"  {node}: {_drain_text(d, now)}" for node, d in sorted((drain.get("nodes") or {}).items())),
        *pool_rollout_lines(st),
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
            rows.append([name, str(n.get("state", "")), n.get("currentConfig", ""), n.get("skew", "") or "-",
                         str(n.get("reason") or n.get("degradedReason") or "").split("\n", 1)[0]])
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
        rows = [list(NODE_COLUMNS)]
        for n in nodes:
            rep = n.get("report") or {}
            reported = parse_time(n.get("reportedAt"))
            rows.append([n.get("name", ""), n.get("pool", "") or "<none>", str(n.get("ready") or "-"),
                         str(rep.get("state", "")),
                         str(bool(n.get("updated"))), node_rollout_cell(n), short(rep.get("currentConfig", "") or "-"),
                         firstbootviews.cell(n), rep.get("skew", "") or "-", age(None if reported is None else now - reported),
                         node_reason(n)])
        # READY is the Node object's (--backend kubernetes); without Node objects there is none to show
        return rows if any("ready" in n for n in nodes) else without(rows, ("READY",))

    return fit(build, width, wide, NODE_OPTIONAL, free="REASON")


def node_reason(node: Dict[str, Any]) -> str:
    """Why a node is not simply Done: the server's degraded reason, else the node's own; its
    first line in a table (a node's on-disk drift names each path on a line of its own:
    ``describe node`` shows them all)."""
    text = str(node.get("degradedReason") or firstbootviews.reason(node) or node.get("notReady")
               or (node.get("report") or {}).get("reason") or (node.get("rollout") or {}).get("reason") or "")
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
        *([f"Ready:               {node['ready']}" + (f" ({node['notReady']})" if node.get("notReady") else "")]
          if node.get("ready") else []),  # the Node's (--backend kubernetes)
        *_state_lines(rep),
        f"Last report:         {age(None if reported is None else now - reported)} ago",
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


# -- machine output -----------------------------------------------------------------------------

POOL_RESOURCE = "machineconfigpool.machineconfiguration.openshift.io"  # kubectl get mcp -o name


def as_list(items: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A list as ``kubectl get -o json|yaml`` prints one (its List of the items it got)."""
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def kind_name(item: Dict[str, Any], pool: bool) -> str:
    """``-o name``: ``machineconfigpool.machineconfiguration.openshift.io/worker`` as kubectl
    names a pool, ``node/worker-0`` for a node."""
    if pool:
        return f"{POOL_RESOURCE}/{(item.get('metadata') or {}).get('name', '')}"
    return f"node/{item.get('name') or item.get('node', '')}"


def dump(obj: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(obj, indent=2, sort_keys=True) + "\n"
    import yaml

    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False)
