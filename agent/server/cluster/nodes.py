"""The node list of ``GET /api/v1/nodes`` (and one node's entry), from the node store.

Each item: ``{"name", "pool", "membership", "degradedReason"?, "approval"?, "updated", "reportedAt",
"report", "firstBoot"?}`` (``approval: Pending``: a name waiting for approval, counted in nothing): ``updated`` as the pool counts it (its target config, and its layered image where
the pool has one: agent/server/rollout/progress.py); ``reportedAt`` when the server received the last
report (RFC 3339, UTC). The list is paged as Kubernetes lists are: ``?limit=N`` (default and
maximum below) and ``metadata.continue`` to pass back as ``?continue=`` for the next page.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.server.cluster.members import counted, member_of_record
from agent.server.cluster.poolview import pending
from agent.server.rollout import nodestatus, progress, rolloutstatus, targeting
from agent.server.store.nodestore import NodeRecord, PoolRow

DEFAULT_LIMIT = 500
MAX_LIMIT = 5000


def rfc3339(epoch: Any) -> str:
    """``2026-11-22T20:30:00Z`` from epoch seconds, or from an RFC 3339 time already (idempotent:
    the store's times were epoch floats, and old ones stay so)."""
    return "" if epoch is None else progress.iso8601(epoch)


def targets(views: Dict[str, Dict[str, Any]]) -> Dict[str, Tuple[str, Optional[str]]]:
    """pool -> (target config, layered image or None), from Cluster.pool_views()."""
    return {name: (v["spec"]["configuration"]["name"], v["status"].get("layeredImage") or None)
            for name, v in views.items()}


def node_item(rec: NodeRecord, pool_targets: Dict[str, Tuple[str, Optional[str]]],
              rows: Optional[Dict[str, PoolRow]] = None, first_boot: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One node of the list; ``rows``: the pools' rows (where the server's rollout has the node);
    ``first_boot``: its first boot as decided now (firstbootview.py), shown as ``firstBoot`` in
    place of the stored record under ``report``."""
    target = pool_targets.get(rec.pool)
    item = {"name": rec.node, "pool": rec.pool, "membership": rec.why,
            "updated": bool(target) and progress.is_updated(rec.report, target[0], target[1]),
            "reportedAt": rfc3339(rec.received), "report": {k: v for k, v in rec.report.items() if k != "firstBoot"}}
    if rec.degraded:
        item["degradedReason"] = rec.degraded
    if pending(rec):  # kept, counted in nothing: never "updated" in a list beside the pool's counts
        item.update(approval="Pending", updated=False)
    row = (rows or {}).get(rec.pool)
    if target and row is not None and counted(rec):  # where the server's rollout has the node: its turn
        state, why = rolloutstatus.node_state(member_of_record(rec, 0.0), row.rollout, target[0], target[1])
        desired = targeting.desired_of(rec.report, targeting.entry_of(row.rollout, rec.node))[0]
        item["rollout"] = {"state": state, "desiredConfig": desired, **({"reason": why} if why else {})}
    if first_boot is not None:
        item["firstBoot"] = first_boot
    return item


def node_list(records: List[NodeRecord], pool_targets: Dict[str, Tuple[str, Optional[str]]],
              limit: int, rows: Optional[Dict[str, PoolRow]] = None,
              first_boot: Callable[[NodeRecord], Optional[Dict[str, Any]]] = lambda rec: None) -> Dict[str, Any]:
    items = [node_item(r, pool_targets, rows, first_boot(r)) for r in records]
    meta = {"continue": items[-1]["name"]} if len(items) == limit and items else {}
    return {"apiVersion": "v1", "kind": "NodeList", "metadata": meta, "items": items}


def unmanaged_item(node: Tuple[str, Optional[str], str, Dict[str, Any]],
                   pool_targets: Dict[str, Tuple[str, Optional[str]]]) -> Dict[str, Any]:
    """The list's item of a Node with no node-agent record (``--backend kubernetes``): its pool by
    its labels, its state from its own MCD annotations, as the pool counts it; ``node``:
    kube_nodes.NodeTruth.unreported's. Ours: ``get nodes`` lists every Node the pools count, as
    ``oc get nodes`` does (a Node left out read as a pool of fewer machines than its count)."""
    name, pool, membership, annotations = node
    report = nodestatus.report_from_annotations(annotations) or {}
    target = pool_targets.get(pool or "")
    return {"name": name, "pool": pool or "", "membership": membership, "reportedAt": "", "report": report,
            "updated": bool(target) and progress.is_updated(report, target[0], target[1]),
            "rollout": {"state": "Unmanaged", "reason": rolloutstatus.UNMANAGED_WHY}}


def merged_page(items: List[Dict[str, Any]], unreported: List[Dict[str, Any]], limit: int) -> List[Dict[str, Any]]:
    """One page of the list by name: the store's ``items`` (a page of ``limit`` from the same
    ``continue``) and the Nodes with no record ``unreported`` (kube_nodes.NodeTruth.unreported)."""
    return sorted(items + unreported, key=lambda item: item["name"])[:limit]


def with_readiness(truth: Any, items: List[Dict[str, Any]]) -> None:
    """``ready`` of each node item from its Node object (``--backend kubernetes``): "True", or
    "False" with ``notReady``, why (layered_node_state.go CheckNodeReady: NotReady, DiskPressure,
    NetworkUnavailable, cordoned); nothing without Node objects or for a name with no Node."""
    if truth is None or not truth.ready():
        return
    for item in items:
        why = truth.not_ready(str(item.get("name") or ""))
        if why is not None:
            item["ready"] = "False" if why else "True"
            if why:
                item["notReady"] = why
