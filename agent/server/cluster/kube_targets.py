"""What the server's node targeting writes on the Nodes (``--backend kubernetes``), as the MCO's node
controller writes it (pkg/controller/node/node_controller.go at 7ff337a4): each targeted Node's
``machineconfiguration.openshift.io/desiredConfig`` (and ``desiredImage`` on a layered pool), the
``UpdateInProgress:PreferNoSchedule`` taint while its desired config is not the pool's
(``syncMachineConfigPool``: the scheduler then prefers the Nodes already updated), and the
``SetDesiredConfig`` Event on the pool (``setDesiredAnnotations``). A paused pool's Nodes, and a
layered pool's while its image is not built, are not written at all (``frozen``): upstream returns
before its taint loop then, and leaves the taints as they are.

Only Nodes node-agent reports for (a counted report) are written: a Node a real MCD or nothing
manages is read, never targeted (agent/server/rollout/targeting.py). The decision is in the store
(the pool row's ``rollout``); one process writes what it says on each Node (``owner_of``), and a
write that finds the Node already so writes nothing.
"""

import hashlib
import logging
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from agent.server.cluster import kube_events
from agent.server.rollout import candidates, gating, targeting
from agent.server.rollout.progress import iso8601
from agent.server.store.kube.client import NODES, KubeError

log = logging.getLogger(__name__)

MCD = "machineconfiguration.openshift.io/"
TAINT = {"key": candidates.TAINT_KEY, "effect": candidates.TAINT_EFFECT}


def has_taint(node: Dict[str, Any]) -> bool:
    return any(t.get("key") == TAINT["key"] and t.get("effect") == TAINT["effect"]
               for t in (node.get("spec") or {}).get("taints") or [])


def target_patch(node: Dict[str, Any], desired: str, image: Optional[str], tainted: bool) -> Dict[str, Any]:
    """The merge patch that makes ``node`` (slim, as the watch keeps it) desire ``desired`` (and
    ``image``) and carry the taint or not (pure; empty when it already does). A taint change
    writes the whole list with the Node's resourceVersion as a precondition: another writer's
    taint is never lost (409: the next round reads it again)."""
    meta = node.get("metadata") or {}
    ann = meta.get("annotations") or {}
    patch: Dict[str, Any] = {}
    want = {MCD + "desiredConfig": desired or None, MCD + "desiredImage": image or None}
    changed = {k: v for k, v in want.items() if ann.get(k) != v and (v is not None or k in ann)}
    if desired and changed:
        patch["metadata"] = {"annotations": changed}
    if tainted != has_taint(node):
        taints = [t for t in (node.get("spec") or {}).get("taints") or []
                  if not (t.get("key") == TAINT["key"] and t.get("effect") == TAINT["effect"])]
        patch["spec"] = {"taints": taints + [dict(TAINT)] if tainted else taints}
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
    return patch


def json_patch_of(node: Dict[str, Any], patch: Dict[str, Any]) -> List[Dict[str, Any]]:
    """``target_patch``'s taint change as a JSON patch whose precondition is the taints alone (pure;
    [] when the merge patch is kept): ``test`` the list read, then replace it, and the annotations
    set. The Node's resourceVersion made a report's annotations written meanwhile (the node just
    told its turn says Working) a conflict too (0.1-0.2 per node; docs/performance.md). Only for a
    Node that has taints and annotations: a JSON patch cannot test that a list is absent."""
    meta = node.get("metadata") or {}
    taints = (node.get("spec") or {}).get("taints")
    if "spec" not in patch or not taints or not meta.get("annotations"):
        return []
    ops: List[Dict[str, Any]] = [{"op": "test", "path": "/spec/taints", "value": taints},
                                 {"op": "replace", "path": "/spec/taints", "value": patch["spec"]["taints"]}]
    for key, value in ((patch.get("metadata") or {}).get("annotations") or {}).items():
        path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
        ops.append({"op": "remove", "path": path} if value is None else {"op": "add", "path": path, "value": value})
    return ops


def pool_event(client: Any, namespace: str, pool_obj: Dict[str, Any], kind: str, reason: str, message: str,
               component: str = kube_events.NODE_CONTROLLER) -> None:
    """An Event on the MachineConfigPool (the node controller's recorder, or ``component``'s, in
    the server's namespace)."""
    involved = kube_events.reference(pool_obj, "machineconfiguration.openshift.io/v1", "MachineConfigPool", namespace)
    body = kube_events.event_body(involved, namespace, reason, message, iso8601(time.time()), kind, component)
    # One series per pool and reason would hide which nodes were targeted: each targeting is its own Event.
    body["metadata"]["name"] = f"{body['metadata']['name']}.{int(time.time() * 1000):x}"
    kube_events.record(client, namespace, body)


def owner_of(node: str, writers: List[str]) -> str:
    """Which of the live server processes ``writers`` writes ``node``'s targeting (ours, pure):
    the highest hash of (writer, node), so that every process that lists the same writers picks
    the same one, and a writer that comes or goes moves only its own share of the Nodes.
    Upstream has one node controller (its leader), so one writer per Node; with every process
    writing every Node, two workers' taint patches conflicted 1.6-1.9 times per node
    (docs/performance.md, "Rollout at fleet scale")."""
    return max(writers, key=lambda w: hashlib.sha256(f"{w}\0{node}".encode()).digest())


class TargetWriter:
    """Writes each counted member's desired config and the taint from the pool rows (one pass over
    the pools' Nodes, from the watch cache; a write only where the Node differs), for the Nodes
    this process owns among the live replicas' processes (``owner_of``; all of them when the
    store lists no replicas)."""

    def __init__(self, cluster: Any, client: Any, node_cache: Any):
        self.cluster, self.client, self.node_cache = cluster, client, node_cache
        self.writes = 0

    def writers(self) -> Tuple[str, List[str]]:
        """(this process, every live server process): as the replicas' heartbeats list them."""
        me = f"{getattr(self.cluster, 'replica_name', '')}/{os.getpid()}"
        listed = self.cluster.store.replicas() or []
        return me, sorted({f"{r.get('replica', '')}/{r.get('pid', '')}" for r in listed} | {me})

    def sync(self, pools: Dict[str, Dict[str, Any]]) -> None:
        truth = self.cluster.node_truth
        if truth is None or not truth.ready():
            return
        st = self.cluster.state()
        rows = self.cluster.store.pools()
        nodes = self.node_cache.snapshot()
        me, writers = self.writers()
        for name, row in sorted(rows.items()):
            pool = st.pools.get(name)
            if pool is None:
                continue
            image = self.cluster._layered(st, name, row.target)
            if frozen(pool, image, gating.os_config_for_pool(name, st.os_configs) is not None):
                continue
            for member in truth.members(name, st.pools):
                if member.ours and member.name in nodes and (len(writers) == 1 or owner_of(member.name, writers) == me):
                    self._write(nodes[member.name], member, row, image)

    def _write(self, node: Dict[str, Any], member: targeting.Member, row: Any, image: Optional[str]) -> None:
        entry = targeting.entry_of(row.rollout, member.name)
        desired, desired_image = targeting.desired_of(member.report, entry)
        eff = targeting.with_desired(member.report, entry)
        tainted = candidates.needs_update_in_progress_taint(eff, row.target, image)
        patch = target_patch(node, desired, desired_image, tainted)
        if not patch:
            return
        ops = json_patch_of(node, patch)
        try:
            if ops:
                self.client.json_patch(NODES.path(member.name), ops)
            else:
                self.client.merge_patch(NODES.path(member.name), patch)
            self.writes += 1
        except KubeError as exc:  # 409/422: the Node (its taints) changed meanwhile; 404: gone. The next round sees it
            if exc.status not in (404, 409, 422):
                raise


def frozen(pool: Dict[str, Any], image: Optional[str], layered: bool) -> bool:
    """No Node of the pool is written: upstream's ``syncMachineConfigPool`` returns before its
    taint loop and its targeting while the pool is paused, or (a layered pool) while the target's
    image is not built (``canLayeredContinue``): desiredConfig, desiredImage and the taints stay as
    they are."""
    return bool((pool.get("spec") or {}).get("paused")) or (layered and not image)


def served_desired(rows: Dict[str, Any], pool: str, node: str, report: Dict[str, Any]) -> Dict[str, Any]:
    """``report`` with the desired config the server decided for ``node`` (what the MCD's
    annotations and the MachineConfigNode carry: the node controller's, not the node's)."""
    row = rows.get(pool)
    entry = targeting.entry_of(row.rollout, node) if row is not None else None
    if entry is None:
        return report
    return targeting.with_desired(report, entry) or report
