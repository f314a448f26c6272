"""What the MCO's own functions compute for given Nodes and pools: reference functions for the tests
that compare what ``oc`` shows of node-config-server's writes (``kubectl get mcp``, ``get mcn -o
yaml``, ``describe node``, ``get events``) with what a real MCO would show for the same Nodes.

Written from openshift/machine-config-operator at 7ff337a4 (and the older files the functions did
not change in), independently of agent/server: a test that compared our code with itself would
prove nothing. Each function names the upstream function it mirrors. They read the Nodes as the
API holds them (the MCD's annotations, conditions, ``spec.unschedulable``): upstream's truth,
which node-config-server writes from the reports.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence

MCD = "machineconfiguration.openshift.io/"
FAILING = ("Degraded", "Unreconcilable")


# -- pkg/helpers/helpers.go ---------------------------------------------------------------------

def _requirement(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"operator {op!r}")


def selects(selector: Optional[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelectorAsSelector(s).Matches(labels)``, with ListPools' rule: "If a pool with
    a nil or empty selector creeps in, it should match nothing, not everything"."""
    if not selector or (not selector.get("matchLabels") and not selector.get("matchExpressions")):
        return False
    if any(labels.get(k) != str(v) for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_requirement(e, labels) for e in selector.get("matchExpressions") or [])


def primary_pool(pools: Mapping[str, Dict[str, Any]], node: Dict[str, Any]) -> Optional[str]:
    """``GetPrimaryPoolForNode`` (``GetPoolsForNode`` on ``ListPools``; ``IsWindows``): None for a
    Windows Node, a Node no pool selects, or one in two custom pools (an error upstream)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if labels.get("kubernetes.io/os") == "windows":
        return None
    matched = [name for name, p in pools.items() if selects((p.get("spec") or {}).get("nodeSelector"), labels)]
    custom = [p for p in matched if p not in ("master", "worker")]
    if len(custom) > 1:
        return None
    if "master" in matched:  # master alone, master with worker, or "defaulting to master" over one custom pool
        return "master"
    if custom:
        return custom[0]
    return "worker" if "worker" in matched else None


def nodes_for_pool(pools: Mapping[str, Dict[str, Any]], pool: str, nodes: Sequence[Dict[str, Any]]) -> List[Dict]:
    """``GetNodesForPool``."""
    return [n for n in nodes if primary_pool(pools, n) == pool]


# -- pkg/controller/common/layered_node_state.go ---------------------------------------------------

def _ann(node: Dict[str, Any]) -> Dict[str, str]:
    return (node.get("metadata") or {}).get("annotations") or {}


def is_node_done(node: Dict[str, Any]) -> bool:
    """``isNodeDone``: isNodeConfigDone, isNodeImageDone, state Done."""
    a = _ann(node)
    current, desired = a.get(MCD + "currentConfig", ""), a.get(MCD + "desiredConfig", "")
    if not current or not desired or current != desired:
        return False
    if MCD + "desiredImage" in a or MCD + "currentImage" in a:  # isNodeImageDone
        want, have = a.get(MCD + "desiredImage", ""), a.get(MCD + "currentImage", "")
        if not want or not have or want != have:
            return False
    return a.get(MCD + "state") == "Done"


def is_done_at(node: Dict[str, Any], target: str) -> bool:
    """``IsDoneAt`` of a pool that is not layered: done on the pool's target, and no image
    annotation (``isImageAnnotationEqualToPool``: "this annotation should not exist")."""
    a = _ann(node)
    return is_node_done(node) and a.get(MCD + "currentConfig") == target and not a.get(MCD + "desiredImage") \
        and not a.get(MCD + "currentImage")


def check_node_ready(node: Dict[str, Any]) -> bool:
    """``checkNodeReady``: Ready True, DiskPressure and NetworkUnavailable False, schedulable."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        want = {"Ready": "True", "DiskPressure": "False", "NetworkUnavailable": "False"}.get(cond.get("type"))
        if want is not None and cond.get("status") != want:
            return False
    return not (node.get("spec") or {}).get("unschedulable")


def is_mcd_failing(node: Dict[str, Any]) -> bool:
    """``isNodeMCDFailing``."""
    a = _ann(node)
    return a.get(MCD + "currentConfig") != a.get(MCD + "desiredConfig") and a.get(MCD + "state") in FAILING


def is_unavailable(node: Dict[str, Any]) -> bool:
    """``isNodeUnavailable`` (IsUnavailableForUpdate on a pool that is not layered)."""
    if not check_node_ready(node):
        return True
    if is_node_done(node):
        return False
    return not is_mcd_failing(node)


def is_degraded(node: Dict[str, Any]) -> bool:
    """status.go ``getDegradedMachines``: a desired config and state Degraded or Unreconcilable."""
    a = _ann(node)
    return bool(a.get(MCD + "desiredConfig")) and a.get(MCD + "state") in FAILING


# -- pkg/controller/node/status.go --------------------------------------------------------------

def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def calculate_status(pool: Dict[str, Any], nodes: Sequence[Dict[str, Any]],
                     render_degraded: bool = False) -> Dict[str, Any]:
    """``calculateStatus`` of a pool that is not layered, for its Nodes (``nodes_for_pool``): the
    counts (``GetMachinesByState``), the conditions' status, reason and message, and whether
    status.configuration is spec.configuration now (``allUpdated``). ``render_degraded``: the
    render controller's RenderDegraded, which calculateStatus folds into Degraded."""
    target = ((pool.get("spec") or {}).get("configuration") or {}).get("name", "")
    updated = [n for n in nodes if is_done_at(n, target)]
    ready = [n for n in updated if check_node_ready(n)]
    unavailable = [n for n in nodes if is_unavailable(n)]
    degraded = [n for n in nodes if is_degraded(n)]
    total = len(nodes)
    all_updated = len(updated) == total and len(ready) == total and not unavailable
    line = f"MachineConfig {target}"  # getPoolUpdateLine, not layered
    conds: Dict[str, Dict[str, str]] = {}
    if all_updated:
        conds["Updated"] = {"status": "True", "reason": "", "message": f"All nodes are updated with {line}"}
        conds["Updating"] = {"status": "False", "reason": "", "message": ""}
    else:
        conds["Updated"] = {"status": "False", "reason": "", "message": ""}
        conds["Updating"] = ({"status": "False", "reason": "", "message": f"Pool is paused; will not update to {line}"}
                             if (pool.get("spec") or {}).get("paused") else
                             {"status": "True", "reason": "", "message": f"All nodes are updating to {line}"})
    reasons = [f"Node {(n.get('metadata') or {}).get('name')} is reporting: {_go_quote(_ann(n)[MCD + 'reason'])}"
               for n in degraded if _ann(n).get(MCD + "reason")]
    if degraded:
        conds["NodeDegraded"] = {"status": "True", "reason": f"{len(degraded)} nodes are reporting degraded status "
                                                             f"on sync", "message": ", ".join(reasons)}
    else:
        conds["NodeDegraded"] = {"status": "False", "reason": "", "message": ""}
    conds["Degraded"] = {"status": "True" if degraded or render_degraded else "False", "reason": "",
                         "message": conds["NodeDegraded"]["message"] if degraded else ""}
    return {"machineCount": total, "updatedMachineCount": len(updated), "readyMachineCount": len(ready),
            "unavailableMachineCount": len(unavailable), "degradedMachineCount": len(degraded),
            "observedGeneration": (pool.get("metadata") or {}).get("generation"),
            "allUpdated": all_updated, "conditions": conds}


def pool_update_line_events(pool: str, target: str) -> Dict[str, str]:
    """status.go ``syncStatusOnly``'s Events as spec and status.configuration move (reason ->
    message), getPoolUpdateLine of a pool that is not layered."""
    return {"Updating": f"Pool {pool} now targeting MachineConfig {target}",
            "Completed": f"Pool {pool} has completed update to MachineConfig {target}"}


def set_desired_event(node: str, target: str) -> str:
    """node_controller.go ``setDesiredAnnotations``' SetDesiredConfig message for one node (its
    ``updateName`` "MachineConfig: %s", not getPoolUpdateLine's)."""
    return f"Targeted node {node} to MachineConfig: {target}"


def rendered_event_prefix(rendered: str) -> str:
    """render_controller.go ``syncGeneratedMachineConfig``: "%s successfully generated (release
    version: %s, controller version: %s)"."""
    return f"{rendered} successfully generated (release version: "


# -- pkg/daemon/writer.go ---------------------------------------------------------------------------

def mcd_write(annotations: Dict[str, str], state: str, current: str = "", reason: str = "",
              image: str = "") -> Dict[str, str]:
    """The Node's MCD annotations after the daemon's write for ``state``: ``SetWorking`` (the
    state only), ``SetDone`` (state, currentConfig, reason "", currentImage only with an image on
    disk, else deleted), ``SetDegraded`` (state, the reason cut to 2,000 characters)."""
    out = dict(annotations)
    out[MCD + "state"] = state
    if state == "Done":
        out[MCD + "currentConfig"] = current
        out[MCD + "reason"] = ""
        if image:
            out[MCD + "currentImage"] = image
        else:
            out.pop(MCD + "currentImage", None)
    elif state in FAILING:
        out[MCD + "reason"] = reason[:2000]
    return out


def set_desired(annotations: Dict[str, str], desired: str) -> Dict[str, str]:
    """``SetDesiredStateFromPool`` of a pool that is not layered: desiredConfig, no desiredImage."""
    out = dict(annotations, **{MCD + "desiredConfig": desired})
    out.pop(MCD + "desiredImage", None)
    return out


def describe_annotations(text: str) -> Dict[str, str]:
    """The ``Annotations:`` block of ``kubectl describe node`` as {key: value}."""
    out: Dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Annotations:"):
            block = [line[len("Annotations:"):]]
            for more in lines[i + 1:]:
                if more and not more[0].isspace():
                    break
                block.append(more)
            for entry in block:
                key, sep, value = entry.strip().partition(": ")
                if key and key != "<none>":
                    out[key.rstrip(":")] = value if sep else ""
            break
    return out
