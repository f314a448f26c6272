"""The registrations list (``GET /api/v1/nodes?approval=pending|approved|all``, ``approve node
--pending``): what an admin needs to decide on a name (issue 45): when it registered, from which
address, and with the Kubernetes backend whether a Node of that name exists and is already
managed (the machine-config-daemon's annotations on it: a real MCD, another server, or a node
this server counted before), so that approving a squatted real name is not a blind click.

With the Kubernetes backend a name is listed as pending until the admin approves it or its
kubelet's certificate proves it (a rule's approval binds no Node: service.Approval.unbound).
"""

from typing import Any, Dict, List, Optional

from agent.server.store.nodestore import Registration

MCD = "machineconfiguration.openshift.io/"
SCAN_PAGE = 5000


def node_object(truth: Any, name: str) -> Dict[str, Any]:
    """Whether a Node ``name`` exists and who manages it, from the Node cache (pure on its input)."""
    node = truth.node(name) if truth is not None and truth.ready() else None
    if node is None:
        return {"exists": False}
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    out: Dict[str, Any] = {"exists": True}
    if annotations.get(MCD + "state") or annotations.get(MCD + "currentConfig"):
        out["managed"] = (f"its Node carries the machine-config-daemon's annotations (state "
                          f"{annotations.get(MCD + 'state') or '-'}, currentConfig "
                          f"{annotations.get(MCD + 'currentConfig') or '-'}): a real MCD, another server or a node "
                          f"counted here before manages it; approving this name hands that Node to whoever holds it")
    return out


def item(cluster: Any, reg: Registration) -> Dict[str, Any]:
    out = reg.to_dict()
    why = cluster.unbound(reg)
    if why:
        out["state"] = "Pending"
        out["pendingBecause"] = why
    if cluster.node_truth is not None:
        out["nodeObject"] = node_object(cluster.node_truth, reg.node)
    return out


def listing(cluster: Any, which: str, after: str, limit: int) -> Dict[str, Any]:
    """The RegistrationList for ``which`` (pending, approved or all), ``limit`` items after ``after``."""
    store = cluster.store
    if cluster.node_truth is None:  # a name counts once approved: the store's own filter
        regs = store.registrations({"pending": True, "approved": False}.get(which), after, limit)
        out: Dict[str, Any] = {"kind": "RegistrationList", "items": [item(cluster, r) for r in regs],
                               "pending": store.pending_count()}
        if len(regs) == limit:
            out["continue"] = regs[-1].node
        return out
    # --backend kubernetes: pending is "counts for nothing", which the store does not index.
    wanted = {"pending": True, "approved": False}.get(which)
    found: List[Registration] = []
    cursor, more = after, True
    while more and len(found) < limit:
        page = store.registrations(None, cursor, SCAN_PAGE)
        more = len(page) == SCAN_PAGE
        cursor = page[-1].node if page else cursor
        found += [r for r in page if wanted is None or bool(cluster.unbound(r)) == wanted]
    found = found[:limit]
    out = {"kind": "RegistrationList", "items": [item(cluster, r) for r in found], "pending": unbound_count(cluster)}
    if len(found) == limit:
        out["continue"] = found[-1].node
    return out


def unbound_count(cluster: Any, after: Optional[str] = "") -> int:
    total, cursor = 0, after or ""
    while True:
        page = cluster.store.registrations(None, cursor, SCAN_PAGE)
        total += sum(1 for r in page if cluster.unbound(r))
        if len(page) < SCAN_PAGE:
            return total
        cursor = page[-1].node
