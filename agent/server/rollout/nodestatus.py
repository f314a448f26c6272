"""A pool's numbers from the cluster's Node objects joined with the nodes' reports (pure), as the
MCO's node controller computes them (``--backend kubernetes``).

A Node exists only once its kubelet's certificate was approved, so deciding from Nodes keeps a
bootstrap credential from steering a pool: a name that reports but has no Node counts for
nothing. Upstream, with the functions each rule mirrors:

- membership: openshift/machine-config-operator pkg/helpers/helpers.go ``GetPoolsForNode`` /
  ``GetPrimaryPoolForNode`` / ``GetNodesForPool`` / ``IsWindows`` (``pool_for_node``,
  ``nodes_for_pool``);
- counts: pkg/controller/node/status.go ``calculateStatus`` with ``getUpdatedMachines``,
  ``getReadyMachines``, ``getUnavailableMachines``, ``getDegradedMachines``
  (``calculate_status``), on pkg/controller/common/layered_node_state.go ``IsDone``,
  ``IsNodeDone``, ``CheckNodeReady``, ``IsUnavailableForUpdate``, ``IsNodeMCDFailing``;
- maxUnavailable: node_controller.go ``maxUnavailable`` on apimachinery's
  ``intstr.GetScaledValueFromIntOrPercent`` (agent/core/objectchecks.py
  ``parse_max_unavailable``, shared with the pool's checks), and the candidates' capacity of
  ``getAllCandidateMachines`` (``drain_capacity``).

The MCD's annotations the upstream rules read (currentConfig, desiredConfig, state,
currentImage, desiredImage) are read here from the node's report, which is what the server
writes them from: the same facts, without waiting for the write-back.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from agent.server.rollout.progress import SERVER_KEY
from agent.server.rollout.render import selector_matches

MCD = "machineconfiguration.openshift.io/"
NODE_CONDITIONS = ("Ready", "DiskPressure", "NetworkUnavailable")  # what CheckNodeReady reads
BASE_POOLS = ("master", "worker")
OS_LABEL = "kubernetes.io/os"  # helpers.go OSLabel: a Windows Node is in no pool (IsWindows)
FAILING = ("Degraded", "Unreconcilable")
KEPT_ANNOTATIONS = (MCD, "node-config-server.openshift.io/")  # the only annotations anyone here reads


def slim_node(obj: Dict[str, Any]) -> Dict[str, Any]:
    """A Node as the server keeps it: name, uid, resourceVersion, creationTimestamp, labels, the
    annotations of the MCD and of our drain, ``spec.unschedulable`` and ``spec.taints``, the type
    and status of the three conditions ``check_node_ready`` reads, and a Pending or Provisioning
    phase. A kubelet's Node is about 8 KB of JSON (images, addresses, capacity, managedFields); none
    of the rest is read, so none of it is kept."""
    meta = obj.get("metadata") or {}
    out_meta: Dict[str, Any] = {"name": meta.get("name", "")}
    # uid: the MachineConfigNode's owner (kube_sync); creationTimestamp: upstream's update order
    # (candidates.sort_node_list)
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        if meta.get(key):
            out_meta[key] = meta[key]
    if meta.get("labels"):
        out_meta["labels"] = dict(meta["labels"])
    kept = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(KEPT_ANNOTATIONS)}
    if kept:
        out_meta["annotations"] = kept
    out: Dict[str, Any] = {"metadata": out_meta}
    spec = obj.get("spec") or {}
    if spec.get("unschedulable"):
        out["spec"] = {"unschedulable": True}
    if spec.get("taints"):  # all of them: a taint is written back as the whole list (kube_sync)
        out.setdefault("spec", {})["taints"] = [dict(t) for t in spec["taints"] if isinstance(t, dict)]
    conds = [{"type": c.get("type"), "status": c.get("status")}
             for c in (obj.get("status") or {}).get("conditions") or []
             if isinstance(c, dict) and c.get("type") in NODE_CONDITIONS]
    if conds:
        out["status"] = {"conditions": conds}
    phase = (obj.get("status") or {}).get("phase")
    if phase in ("Pending", "Provisioning"):  # no MachineConfigNode yet (sync.go syncMachineConfigNodes)
        out.setdefault("status", {})["phase"] = phase
    return out


def check_node_ready(node: Dict[str, Any]) -> str:
    """Why the Node may not take workloads ("" when it may): layered_node_state.go
    ``CheckNodeReady``: Ready must be True, DiskPressure and NetworkUnavailable False, and the Node
    not cordoned. A condition the kubelet has not posted does not count against it, as upstream."""
    name = (node.get("metadata") or {}).get("name", "")
    for cond in (node.get("status") or {}).get("conditions") or []:
        kind, status = cond.get("type"), cond.get("status")
        if kind == "Ready" and status != "True":
            return f"node {name} is reporting NotReady={status}"
        if kind == "DiskPressure" and status != "False":
            return f"node {name} is reporting OutOfDisk={status}"
        if kind == "NetworkUnavailable" and status != "False":
            return f"node {name} is reporting NetworkUnavailable={status}"
    if (node.get("spec") or {}).get("unschedulable"):
        return f"node {name} is reporting Unschedulable"
    return ""


def pool_for_node(pools: Mapping[str, Dict[str, Any]], labels: Mapping[str, str]) -> Tuple[Optional[str], str]:
    """(the Node's pool or None, why not): pkg/helpers/helpers.go ``GetPoolsForNode`` then
    ``GetPrimaryPoolForNode`` (``ListPools``). A Windows Node (``kubernetes.io/os=windows``,
    ``IsWindows``) is in no pool; a pool whose selector is empty selects nothing; master with
    worker is master; one custom pool wins over worker, and master with one custom pool is master
    ("defaulting to master": the Node gets none of the custom pool's configuration); two custom
    pools is no pool (upstream refuses to proceed with such a Node) and the reason says so."""
    if labels.get(OS_LABEL) == "windows":
        return None, "it is a Windows node (kubernetes.io/os=windows): the MCO manages no Windows node"
    matched = [name for name in sorted(pools) if _selects(pools[name], labels)]
    if not matched:
        return None, "its labels match no pool's nodeSelector"
    custom = [p for p in matched if p not in BASE_POOLS]
    if len(custom) > 1:
        return None, f"it belongs to {len(custom)} custom roles ({', '.join(custom)}), cannot proceed with this Node"
    if "master" in matched:
        return "master", ""
    if custom:
        return custom[0], ""
    return "worker", ""


def master_over_custom(pools: Mapping[str, Dict[str, Any]], labels: Mapping[str, str]) -> str:
    """The custom pool a master Node also matches ("" when none): GetPoolsForNode's "Found master
    node that matches selector for custom pool X, defaulting to master" (what ``describe node``
    says of such a Node)."""
    if labels.get(OS_LABEL) == "windows":
        return ""
    matched = [name for name in sorted(pools) if _selects(pools[name], labels)]
    custom = [p for p in matched if p not in BASE_POOLS]
    return custom[0] if "master" in matched and len(custom) == 1 else ""


def _selects(pool: Dict[str, Any], labels: Mapping[str, str]) -> bool:
    # An empty selector matches nothing (selector_matches), as upstream: "If a pool with a nil or
    # empty selector creeps in, it should match nothing, not everything."
    return selector_matches((pool.get("spec") or {}).get("nodeSelector"), dict(labels))


def nodes_for_pool(pool: str, pools: Mapping[str, Dict[str, Any]],
                   nodes: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The Nodes whose primary pool is ``pool`` (node_controller.go ``getNodesForPool``)."""
    return [n for n in nodes
            if pool_for_node(pools, (n.get("metadata") or {}).get("labels") or {})[0] == pool]


def group_by_pool(pools: Mapping[str, Dict[str, Any]], nodes: Iterable[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """``nodes_for_pool`` of every pool in one pass: pool -> its Nodes (a Node in no pool is left out)."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    # Only the label keys some selector reads decide a pool, and a fleet has few distinct values of
    # them (every Node has its own hostname label, which no pool reads): match each value set once.
    read = sorted(_selector_keys(pools) | {OS_LABEL})
    by_labels: Dict[Tuple, Optional[str]] = {}
    for n in nodes:
        labels = (n.get("metadata") or {}).get("labels") or {}
        key = tuple(labels.get(k) for k in read)
        if key not in by_labels:
            by_labels[key] = pool_for_node(pools, labels)[0]
        pool = by_labels[key]
        if pool is not None:
            out.setdefault(pool, []).append(n)
    return out


def _selector_keys(pools: Mapping[str, Dict[str, Any]]) -> set:
    keys = set()
    for pool in pools.values():
        selector = (pool.get("spec") or {}).get("nodeSelector") or {}
        keys.update(str(k) for k in (selector.get("matchLabels") or {}))
        keys.update(str(e.get("key")) for e in selector.get("matchExpressions") or [] if isinstance(e, dict))
    return keys


# -- one node, from its report (the MCD's annotations) --------------------------------------------

MCD_FIELDS = ("currentConfig", "desiredConfig", "state", "reason", "currentImage", "desiredImage")


def report_from_annotations(annotations: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The MCD's annotations of a Node as a report (None without a ``state``): what upstream's
    rules read, for a Node whose report this server does not hold."""
    if not annotations.get(MCD + "state"):
        return None
    return {k: str(annotations[MCD + k]) for k in MCD_FIELDS if MCD + k in annotations}


def is_node_done(report: Optional[Mapping[str, Any]]) -> bool:
    """layered_node_state.go ``IsNodeDone``: current == desired (both set), the image done, state Done."""
    if not report:
        return False
    current, desired = str(report.get("currentConfig") or ""), str(report.get("desiredConfig") or "")
    if not current or current != desired or report.get("state") != "Done":
        return False
    cur_image, want_image = report.get("currentImage"), report.get("desiredImage")
    if not want_image:
        # isNodeImageDone: no desired image, not layered. Upstream also wants no currentImage
        # then; node-agent reports the image it booted as currentImage on every pool (the
        # gate's proof with image), so a current image alone does not make a node not done.
        return True
    return bool(cur_image) and want_image == cur_image


def is_done(report: Optional[Mapping[str, Any]], target: str, image: Optional[str]) -> bool:
    """layered_node_state.go ``IsDone``: done, desiring the pool's target, and on a layered pool
    desiring its image (a non-layered pool: no desired image at all)."""
    if not is_node_done(report) or str(report.get("desiredConfig") or "") != target:  # type: ignore[union-attr]
        return False
    want_image = report.get("desiredImage") or None  # type: ignore[union-attr]
    return want_image == image if image else want_image is None


def is_mcd_failing(report: Optional[Mapping[str, Any]]) -> bool:
    """layered_node_state.go ``IsNodeMCDFailing``: configs differ and the state is Degraded or Unreconcilable."""
    if not report or report.get("currentConfig") == report.get("desiredConfig"):
        return False
    return report.get("state") in FAILING


def is_unavailable_for_update(not_ready: str, report: Optional[Mapping[str, Any]]) -> bool:
    """layered_node_state.go ``IsUnavailableForUpdate``: not ready, or not done and not failing
    (a node working, or not started on a config it desires, may go unschedulable any moment)."""
    if not_ready:
        return True
    if is_node_done(report):
        return False
    return not is_mcd_failing(report)


def is_degraded(report: Optional[Mapping[str, Any]]) -> bool:
    """status.go ``getDegradedMachines``: a desired config and state Degraded or Unreconcilable."""
    return bool(report) and bool(report.get("desiredConfig")) and report.get("state") in FAILING  # type: ignore


# -- a pool ------------------------------------------------------------------------------------------

@dataclass
class NodeStatus:
    """A pool's counts as status.go ``calculateStatus`` computes them, with who is in each."""
    machine: int = 0
    updated: int = 0
    proven: int = 0  # updated, on a config the server served the node (the rollout gate's proof)
    ready: int = 0
    unavailable: int = 0
    degraded: int = 0
    working: int = 0
    refused: int = 0
    nodes: List[str] = field(default_factory=list)
    unavailable_nodes: List[str] = field(default_factory=list)
    unavailable_reasons: List[str] = field(default_factory=list)  # ours: why each is unavailable, for the conditions
    degraded_reasons: List[str] = field(default_factory=list)


def calculate_status(members: Sequence[Tuple[Dict[str, Any], Optional[Mapping[str, Any]]]], target: str,
                     image: Optional[str]) -> NodeStatus:
    """``members``: the pool's Nodes (``nodes_for_pool``), each with its report (None: none).
    updated = ``IsDone`` on the target; ready = updated and ``CheckNodeReady``; unavailable =
    ``IsUnavailableForUpdate``; degraded = ``getDegradedMachines``, each named as upstream names
    it in NodeDegraded's message (``Node X is reporting: "reason"``)."""
    out = NodeStatus()
    for node, report in sorted(members, key=lambda m: (m[0].get("metadata") or {}).get("name", "")):
        name = (node.get("metadata") or {}).get("name", "")
        share = node_share(name, node, report, target, image)
        out.machine += 1
        out.nodes.append(name)
        out.updated += share.updated
        out.ready += share.ready
        out.proven += share.proven
        if share.unavailable is not None:
            out.unavailable += 1
            out.unavailable_nodes.append(name)
            out.unavailable_reasons.append(share.unavailable)
        out.degraded += share.degraded
        if share.degraded_reason:
            out.degraded_reasons.append(share.degraded_reason)
        out.working += share.working
        out.refused += share.refused
    return out


@dataclass(frozen=True)
class Share:
    """What one Node adds to its pool's numbers (``calculate_status``; ours, so that
    statustally.StatusTally keeps them per Node and changes only a changed Node's)."""
    updated: bool  # IsDone on the target
    ready: bool  # updated and CheckNodeReady
    proven: bool  # updated, on a config the server served it
    unavailable: Optional[str]  # IsUnavailableForUpdate: why (the NotReady reason, else what it is doing)
    degraded: bool
    degraded_reason: str  # its NodeDegraded line ("" when it gave no reason)
    working: bool
    refused: bool


def node_share(name: str, node: Dict[str, Any], report: Optional[Mapping[str, Any]], target: str,
               image: Optional[str]) -> Share:
    not_ready = check_node_ready(node)
    updated = is_done(report, target, image)
    mark = report.get(SERVER_KEY) if report else None
    degraded = is_degraded(report)
    reason = str(report.get("reason") or "") if degraded and report else ""
    return Share(updated=updated, ready=updated and not not_ready,
                 proven=updated and not (isinstance(mark, dict) and mark.get("proof") is False),
                 unavailable=(not_ready or f"node {name} is {_not_done(report)}")
                 if is_unavailable_for_update(not_ready, report) else None,
                 degraded=degraded, degraded_reason=reporting(name, reason) if reason else "",
                 working=bool(report) and report.get("state") == "Working",  # type: ignore[union-attr]
                 refused=bool(report) and report.get("skew") == "refuse")  # type: ignore[union-attr]


def _not_done(report: Optional[Mapping[str, Any]]) -> str:
    """Why a ready Node is unavailable (IsUnavailableForUpdate): it is not done on its desired config."""
    if not report:
        return "not reporting (no node-agent report, no MCD annotations)"
    reason = f": {report['reason']}" if report.get("reason") else ""
    return f"{report.get('state') or 'not done'} on {report.get('desiredConfig') or report.get('currentConfig') or '?'}{reason}"


REVERTED, REVERT_FAILED = "NodeReverted", "NodeRevertFailed"  # ours: the Events of a node's health check revert


def revert_event(node: str, before: Optional[Mapping[str, Any]], report: Mapping[str, Any]) -> Optional[Tuple[str, str, str]]:
    """The pool's Event for a node that reverted an update after a failed health check (ours;
    agent/node/revert.py words its reason "reverted to A after a failed health check of B: ..." or
    "could not revert ..."): (type, reason, message), once per new reason; None otherwise."""
    reason = str(report.get("reason") or "")
    if report.get("state") != "Degraded" or (before or {}).get("reason") == reason:
        return None
    if reason.startswith(("reverted to ", "reverting to ")):
        return "Warning", REVERTED, f"Node {node} {reason}"
    if reason.startswith("could not revert"):
        return "Warning", REVERT_FAILED, f"Node {node} {reason}"
    return None


def reporting(name: str, reason: str) -> str:
    """One degraded node in NodeDegraded's message, as upstream's status.go names it:
    ``Node <name> is reporting: "<reason>"``."""
    return f"Node {name} is reporting: {_go_quote(reason)}"


def _go_quote(text: str) -> str:
    """Go's ``%q`` of a printable string: double quotes, backslash and quote escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def drain_capacity(limit: int, unavailable: Sequence[str], holders: Sequence[str], asking: str,
                   targeted: Sequence[str] = ()) -> int:
    """How many drain slots the pool has for lease holders (``getAllCandidateMachines``:
    capacity = maxUnavailable - unavailable Nodes). Lease holders are counted by the lease store
    itself, the asking node is the candidate, and the nodes the server targeted (``targeted``:
    the rollout's entries) took their slot when they were targeted (a lease is only for a node's
    desired config), so only the other unavailable Nodes are subtracted here: a Node a user
    cordoned, one NotReady, one working on its own. Ours: counting a targeted node here too
    counted it twice once it held a lease this replica's list of holders did not show yet (the
    lease store's does), and refused the rest of its wave for the lease's Retry-After (30 s)."""
    others = {n for n in unavailable if n != asking} - set(holders) - set(targeted)
    return max(0, limit - len(others))
