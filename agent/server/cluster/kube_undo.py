"""What the admin's ``DELETE /api/v1/nodes/<node>`` takes back from the Kubernetes API
(``--backend kubernetes``; issue 45): everything the name made this server write, so that a name
deleted by mistake or a squatter the admin approved leaves its Node, its MachineConfigNode and
its pool's numbers as they were before it reported.

- the MCD's annotations on the Node (currentConfig, desiredConfig, state, reason, currentImage,
  desiredImage), which the server wrote from the name's counted reports (kube_sync.node_patch);
- our drain's annotations, and the cordon when we made it (``drained-for``, kube_drain.py: a
  Node someone else cordoned stays so);
- the custom pool's role labels applied because of its report's firstPivotConfig, with their
  guard annotation (kube_sync.node_patch, MCO-650), when the guard is there;
- its MachineConfigNode when this server made it (``created-by``, mcnrecord.py) and the name's
  reports counted (its status was written from them): kube_mcn makes it again from the Node
  alone, as for a Node without node-agent (issue 48: every Node has one); one the MCO made stays,
  without our report (the node store took that).

A report that never counted (pending, or a name neither proven nor approved) wrote nothing on
the Node or MCN, so only the drain's marks could be there, and they are taken too.
"""

import logging
from typing import Any, Callable, Dict, Optional

from agent.server.cluster.kube_drain import DRAINED_FOR
from agent.server.cluster.kube_sync import ANNOTATION, LABELS_APPLIED, NODE_FIELDS, pool_labels
from agent.server.rollout import draincadence
from agent.server.rollout.progress import SERVER_KEY
from agent.server.store.kube.client import MACHINE_CONFIG_NODES, NODES, KubeError, get_if_exists
from agent.server.store.kube.mcnrecord import CREATED_BY, CREATOR

log = logging.getLogger(__name__)


def undo_patch(node_obj: Dict[str, Any], counted: bool, pivot_pool: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The merge patch taking our writes back from a Node (pure; {} when there are none).
    ``counted``: the deleted name's report counted (only then did the server write the MCD's
    annotations and the pool's labels); ``pivot_pool``: the pool its firstPivotConfig belongs to."""
    meta = node_obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    gone: Dict[str, Any] = {}
    if counted:
        gone.update({ANNOTATION + k: None for k in NODE_FIELDS if ANNOTATION + k in annotations})
        if LABELS_APPLIED in annotations:
            gone[LABELS_APPLIED] = None
    gone.update({k: None for k in (DRAINED_FOR, *draincadence.KEYS) if k in annotations})
    patch: Dict[str, Any] = {"metadata": {"annotations": gone}} if gone else {}
    ours = pool_labels(pivot_pool) if counted and LABELS_APPLIED in annotations else {}
    drop = {k: None for k, v in ours.items() if labels.get(k) == v}
    if drop:
        patch.setdefault("metadata", {})["labels"] = drop
    if DRAINED_FOR in annotations and (node_obj.get("spec") or {}).get("unschedulable"):
        patch["spec"] = {"unschedulable": None}
    return patch


def forgetting(sync: Any) -> Callable[[str, Any], None]:
    """The Cluster's delete listener for a kube_sync.KubeSync: drop what it has queued for the
    node, then take back what was written (backends.start_writers registers it)."""
    def forget(node: str, rec: Any) -> None:
        sync.drop(node)
        forget_node(sync.client, sync.cluster, sync.source.reflectors["machineconfigpools"].snapshot(), node, rec)

    return forget


def forget_node(client: Any, cluster: Any, pools: Dict[str, Dict[str, Any]], node: str, rec: Any) -> Dict[str, Any]:
    """Take back from the API what ``node``'s reports made the server write (``rec``: its node
    store record before the delete, or None). Returns what was done, for the log."""
    report = rec.report if rec is not None else {}
    mark = report.get(SERVER_KEY)
    counted = rec is not None and not (isinstance(mark, dict) and mark.get("pending"))
    pivot = str(report.get("firstPivotConfig") or "")
    pivot_pool = pools.get(cluster.pool_of_rendered(pivot) or "") if pivot else None
    done: Dict[str, Any] = {}
    obj = get_if_exists(client, NODES.path(node))
    patch = undo_patch(obj, counted, pivot_pool) if obj is not None else {}
    if patch:
        client.merge_patch(NODES.path(node), patch)
        done["node"] = patch
    mcn = get_if_exists(client, MACHINE_CONFIG_NODES.path(node))
    if counted and mcn is not None and ((mcn.get("metadata") or {}).get("annotations") or {}).get(CREATED_BY) == CREATOR:
        try:
            client.delete(MACHINE_CONFIG_NODES.path(node))
            done["machineConfigNode"] = "deleted"
        except KubeError as exc:
            if exc.status != 404:
                raise
    if done:
        log.info("node %s deleted: took back from the API %s", node, done)
    return done
