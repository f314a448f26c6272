"""A report's writes on its Node (pure), as the MCD and the MCO's node controller write them
(kube_sync applies them): the MCD's annotations (pkg/daemon/writer.go), a custom pool's labels
(node_controller.go ``applyCustomPoolLabels``), and whether a patch changes the Node at all."""

from typing import Any, Dict, Optional

from agent.server.rollout.mcnconditions import reboot_pending

ANNOTATION = "machineconfiguration.openshift.io/"
NODE_FIELDS = ("currentConfig", "desiredConfig", "state", "reason", "currentImage", "desiredImage")
BASE_ROLES = ("master", "worker")
REASON_MAX = 2000  # characters of the reason annotation (the MCD's cap, pkg/daemon/writer.go, per issue 38)
LABELS_APPLIED = ANNOTATION + "customPoolLabelsApplied"  # node_controller.go applyCustomPoolLabels' guard


def node_patch(body: Dict[str, Any], pool: Optional[Dict[str, Any]], annotations: Optional[Dict[str, Any]] = None,
               pivot_pool: Optional[str] = None, layered: bool = False) -> Dict[str, Any]:
    """The merge patch of a Node for a report (pure): the MCD's annotations as pkg/daemon/writer.go
    writes them (the reason cut to ``REASON_MAX`` characters; a Working report leaves the reason
    as it is, as ``SetWorking`` writes the state only; currentImage only on a ``layered`` pool, as
    ``SetDone`` writes it only with an image on disk, and removed otherwise, as is an empty
    desiredImage: a stale one keeps upstream's IsDone false), and a custom pool's selector
    labels once, as node_controller.go ``isCustomPoolBootedNode``/``applyCustomPoolLabels``: only
    when the node first booted into a rendered config of that pool (``pivot_pool``, the owner of
    its firstPivotConfig) and the Node does not carry the guard annotation yet (``annotations``:
    the Node's), which the same patch sets; an admin who removes the label later is obeyed."""
    reason = str(body.get("reason") or "")[:REASON_MAX]
    out: Dict[str, Any] = {ANNOTATION + k: str(body.get(k) or "") for k in NODE_FIELDS[:3]}
    if body.get("state") != "Working":
        out[ANNOTATION + "reason"] = reason
    for k in NODE_FIELDS[4:]:
        out[ANNOTATION + k] = str(body[k]) if body.get(k) and (layered or k != "currentImage") else None
    if reboot_pending(body):  # writer.go: the new currentConfig only after its reboot (SetDone on the booted node)
        del out[ANNOTATION + "currentConfig"]
    meta: Dict[str, Any] = {"annotations": out}
    name = (pool or {}).get("metadata", {}).get("name")
    labels = pool_labels(pool) if name and name == pivot_pool else {}
    if labels and LABELS_APPLIED not in (annotations or {}):
        meta["labels"] = labels
        out[LABELS_APPLIED] = ""
    return {"metadata": meta}


def pool_labels(pool: Optional[Dict[str, Any]]) -> Dict[str, str]:
    """A custom pool's nodeSelector as labels (what puts a Node in it): matchLabels, and from
    matchExpressions an ``In`` with one value and an ``Exists`` (as ""); none for master/worker."""
    if not pool or (pool.get("metadata") or {}).get("name") in BASE_ROLES:
        return {}
    selector = (pool.get("spec") or {}).get("nodeSelector") or {}
    out = {str(k): str(v) for k, v in (selector.get("matchLabels") or {}).items()}
    for expr in selector.get("matchExpressions") or []:
        values = expr.get("values") or []
        if expr.get("operator") == "In" and len(values) == 1:
            out[str(expr.get("key"))] = str(values[0])
        elif expr.get("operator") == "Exists":
            out[str(expr.get("key"))] = ""
    return out


def patch_changes(patch: Dict[str, Any], node: Dict[str, Any]) -> bool:
    """Whether a report's merge patch (``node_patch``, with the uncordon) changes the Node as the
    watch keeps it (pure): its annotations, labels or cordon."""
    meta, want = node.get("metadata") or {}, patch.get("metadata") or {}
    for field in ("annotations", "labels"):
        have = meta.get(field) or {}
        if any(have.get(k) != v for k, v in (want.get(field) or {}).items()):
            return True
    spec = patch.get("spec")
    return spec is not None and bool(spec.get("unschedulable")) != bool((node.get("spec") or {}).get("unschedulable"))
