"""Cordon, evict and uncordon a Node through the Kubernetes API, as ``kubectl drain`` does.

Upstream: k8s.io/kubectl/pkg/drain (drain.go, cordon.go, filters.go), which the MCO's drain
controller (machine-config-operator pkg/controller/drain/drain_controller.go) runs with Force,
IgnoreAllDaemonSets and DeleteEmptyDirData, GracePeriodSeconds -1 (each pod's own), a 90 s
timeout per attempt, and on failure a new attempt every minute, every 5 minutes once a drain has
failed for 10 minutes; after an hour it emits a ``DrainFailed`` event on the Node and sets the
``mcc_drain_err`` metric (alert MCCDrainError), still retrying; a single-node pool never drains.

This module does one *round* per call and never waits: the server calls it from each lease
request, paced by the MCO's cadence (agent/server/cluster/drainpacer.py, the cadence itself in
agent/server/rollout/draincadence.py):

- ``cordon(node)``: a merge patch ``spec.unschedulable: true``, skipped when already set;
  ``uncordon(node)`` removes it.
- ``drain_once(node)``: lists the node's pods (``fieldSelector=spec.nodeName=<node>``, paged),
  classifies them with ``agent.server.rollout.drainplan`` (kubectl's filters), and, unless a pod
  is refused (then nothing is evicted, as kubectl), evicts each evictable pod through the
  Eviction subresource (policy/v1 when discovery lists it, else policy/v1beta1, plain DELETE when
  the API has no eviction) with the pod's own grace period. A 429 blocks that pod this round (a
  PodDisruptionBudget, named by looking up the namespace's PDBs whose selector matches the pod,
  or rate limiting); 404 means gone; a 500 (several PDBs on one pod) or any other refusal fails
  that pod. A pod evicted in an earlier round is not evicted again while it is terminating.
  The drain is ``done`` when no evictable pod is on the node any more: every pod evicted is gone
  (404, or a pod of the same name with a different UID), which is kubectl's waitForDelete.
"""

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from agent.server.cluster.topology import Topology
from agent.server.rollout import draincadence
from agent.server.rollout.drainplan import (
    EVICT,
    DrainPlan,
    DrainSettings,
    PodPlan,
    plan_drain,
    selector_matches,
)
from agent.server.store.kube.client import NODES, KubeClient, KubeError, KubeUnavailable

log = logging.getLogger(__name__)

# The MCO drain controller's cadence (drain_controller.go) is draincadence.Cadence's defaults.

PodKey = Tuple[str, str]  # (namespace, name)


@dataclass
class DrainResult:
    node: str
    done: bool
    evicted: List[str] = field(default_factory=list)  # "ns/name" evicted (or deleted) this round
    blocked: List[Tuple[str, str]] = field(default_factory=list)  # ("ns/name", why): 429 this round
    failed: List[Tuple[str, str]] = field(default_factory=list)  # ("ns/name", error)
    refused: List[PodPlan] = field(default_factory=list)  # the drain cannot proceed while any
    skipped: List[PodPlan] = field(default_factory=list)  # DaemonSet, mirror, long-deleting pods
    still_running: List[str] = field(default_factory=list)  # evictable pods still on the node
    errors: List[str] = field(default_factory=list)  # kubectl's error text for the refusals
    warnings: str = ""  # kubectl's warning text
    too_many_requests: int = 0  # 429 answers this round

    def to_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "done": self.done, "evicted": self.evicted,
                "blocked": [{"pod": p, "message": m} for p, m in self.blocked],
                "failed": [{"pod": p, "message": m} for p, m in self.failed],
                "refused": [f"{p.namespace}/{p.name}" for p in self.refused],
                "skipped": [f"{p.namespace}/{p.name}" for p in self.skipped],
                "stillRunning": self.still_running, "errors": self.errors, "warnings": self.warnings,
                "tooManyRequests": self.too_many_requests}


class Drainer:
    """Drains Nodes through ``client``; keeps, per node, the pods it has evicted (by UID)."""

    def __init__(self, client: KubeClient, settings: Optional[DrainSettings] = None, cadence: Any = None,
                 event_namespace: str = "node-config-server"):
        self.client = client
        self.event_namespace = event_namespace  # where drainpacer writes its Events: the server's --namespace
        self.settings = settings or DrainSettings()
        self.cadence = cadence  # draincadence.Cadence (None: the MCO's), read by drainpacer
        self.node_cache: Any = None  # kube.watch.Reflector of Nodes (kube_sync's): the views' drain state
        self.on_node_written: Any = lambda node, written=None: None  # kube_sync.note_node: the MCN follows the drain state
        self.topology = Topology()  # the cluster's controlPlaneTopology: known, absent or unknown (retried)
        # drainpacer's memo, kept here because it lives as long as this Drainer:
        self.active_memo: Optional[Tuple[Any, Dict[str, Any]]] = None  # (node cache version, active drains)
        self._eviction_version: Optional[str] = None  # "" = the API has no eviction
        self._evicted: Dict[str, Dict[PodKey, str]] = {}  # node -> pod -> uid evicted

    # --- cordon
    def cordon(self, node: str) -> bool:
        """Mark ``node`` unschedulable; False when it already was (no write)."""
        got = self.client.get(NODES.path(node))
        if (got.get("spec") or {}).get("unschedulable") is True:
            return False
        self.client.merge_patch(NODES.path(node), {"spec": {"unschedulable": True}})
        return True

    def uncordon(self, node: str) -> bool:
        """Make ``node`` schedulable again; False when it was not cordoned (no write)."""
        got = self.client.get(NODES.path(node))
        if not (got.get("spec") or {}).get("unschedulable"):
            return False
        self.client.merge_patch(NODES.path(node), {"spec": {"unschedulable": None}})
        self._evicted.pop(node, None)
        return True

    def uncordoned(self, nodes: List[str]) -> List[str]:
        """Which of ``nodes`` the API shows not cordoned (read now, not from a cache), or gone."""
        out = []
        for node in nodes:
            try:
                got = self.client.get(NODES.path(node))
            except KubeError as exc:
                if exc.status != 404:
                    raise
                got = {}
            if not (got.get("spec") or {}).get("unschedulable"):
                out.append(node)
        return out

    def forget(self, node: str) -> None:
        """Forget what was evicted from ``node`` (its drain was given up; the next starts afresh)."""
        self._evicted.pop(node, None)

    # --- one round
    def pods_on(self, node: str) -> List[Dict[str, Any]]:
        items, _ = self.client.list("/api/v1/pods", {"fieldSelector": f"spec.nodeName={node}"})
        return items

    def plan(self, node: str, pods: Optional[List[Dict[str, Any]]] = None) -> DrainPlan:
        pods = self.pods_on(node) if pods is None else pods
        known: Dict[PodKey, bool] = {}

        def daemonset_exists(namespace: str, name: str) -> bool:
            if (namespace, name) not in known:
                known[(namespace, name)] = self._exists(
                    f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
            return known[(namespace, name)]
        return plan_drain(pods, self.settings, daemonset_exists)

    def drain_once(self, node: str) -> DrainResult:
        """One round: list, classify, evict what may be evicted, report what is left. Each
        eviction's answer is the pod's (evicted, blocked, gone, failed); a failure to list the
        pods or to look up a DaemonSet raises (KubeError, KubeUnavailable) before anything is
        evicted: the caller tries again on its next round."""
        pods = self.pods_on(node)
        plan = self.plan(node, pods)
        uid_of = {_key(p): str((p.get("metadata") or {}).get("uid", "")) for p in pods}
        labels_of = {_key(p): (p.get("metadata") or {}).get("labels") or {} for p in pods}
        evicted = self._evicted.setdefault(node, {})
        for key, uid in list(evicted.items()):  # gone: 404 or another pod of that name
            if uid_of.get(key) != uid:
                del evicted[key]
        result = DrainResult(node=node, done=False, refused=plan.with_action("refuse"),
                             skipped=plan.with_action("skip"), errors=plan.errors(), warnings=plan.warnings(),
                             still_running=[f"{p.namespace}/{p.name}" for p in plan.with_action(EVICT)])
        if result.refused:
            return result  # as kubectl: nothing is evicted while any pod is refused
        for pod in plan.with_action(EVICT):
            if evicted.get(pod.key) == pod.uid:
                continue  # evicted in an earlier round; the kubelet is stopping it
            self._evict_one(pod, result, evicted, labels_of.get(pod.key, {}))
        result.done = not result.still_running
        return result

    def _evict_one(self, pod: PodPlan, result: DrainResult, evicted: Dict[PodKey, str],
                   labels: Dict[str, str]) -> None:
        name = f"{pod.namespace}/{pod.name}"
        try:
            self._evict(pod)
        except KubeError as exc:
            if exc.status == 404:
                result.still_running.remove(name)
                return
            if exc.status == 429:
                result.too_many_requests += 1
                result.blocked.append((name, self._blocked_by(pod, exc.message, labels)))
                return
            result.failed.append((name, f"{exc.status} {exc.reason}: {exc.message}"))
            return
        except KubeUnavailable as exc:  # 5xx, e.g. 500: the pod has more than one PDB
            result.failed.append((name, str(exc)))
            return
        evicted[pod.key] = pod.uid
        result.evicted.append(name)

    # --- the API
    def eviction_version(self) -> str:
        """The group/version of pods/eviction in discovery ("" = none), as kubectl's
        CheckEvictionSupport reads /api/v1."""
        if self._eviction_version is None:
            version = ""
            for res in self.client.get("/api/v1").get("resources") or []:
                if res.get("name") == "pods/eviction" and res.get("group") and res.get("version"):
                    version = f"{res['group']}/{res['version']}"
                    break
            self._eviction_version = version
        return self._eviction_version

    def _evict(self, pod: PodPlan) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        version = self.eviction_version()
        # No gracePeriodSeconds: the pod's own (kubectl's GracePeriodSeconds -1). The UID
        # precondition keeps a newer pod of the same name from being evicted by an older plan.
        options = {"preconditions": {"uid": pod.uid}} if pod.uid else {}
        if not version:  # kubectl would DELETE the pod: "delete pods" is a grant deploy/rbac.yaml never gives
            raise KubeError(501, "NoEviction", "the API server lists no pods/eviction subresource, and node-config-"
                                               "server evicts only through it (its role may not delete pods): drain "
                                               "this node by hand (kubectl drain)", f"evicting pod {pod.namespace}/"
                                               f"{pod.name}")
        body = {"apiVersion": version, "kind": "Eviction",
                "metadata": {"name": pod.name, "namespace": pod.namespace},
                "deleteOptions": {"apiVersion": "v1", "kind": "DeleteOptions", **options}}
        self.client.create(path + "/eviction", body)

    def _exists(self, path: str) -> bool:
        try:
            self.client.get(path)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _blocked_by(self, pod: PodPlan, message: str, labels: Dict[str, str]) -> str:
        """The API's 429 message, with the PodDisruptionBudgets selecting the pod named."""
        if "disruption budget" not in message.lower():
            return message
        version = self.eviction_version() or "policy/v1beta1"
        try:
            pdbs, _ = self.client.list(f"/apis/{version}/namespaces/{pod.namespace}/poddisruptionbudgets")
        except (KubeError, KubeUnavailable) as exc:
            log.info("drain: cannot name the PodDisruptionBudget of %s/%s: %s", pod.namespace, pod.name, exc)
            return message
        parts = []
        for pdb in pdbs:
            if selector_matches((pdb.get("spec") or {}).get("selector"), labels, version != "policy/v1beta1"):
                meta, status = pdb.get("metadata") or {}, pdb.get("status") or {}
                parts.append(f"PodDisruptionBudget {pod.namespace}/{meta.get('name')}: "
                             f"{status.get('currentHealthy', 0)} healthy, {status.get('desiredHealthy', 0)} "
                             f"needed, {status.get('disruptionsAllowed', 0)} disruptions allowed")
        return f"{message} ({'; '.join(parts)})" if parts else message


def _key(pod: Dict[str, Any]) -> PodKey:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


DRAINED_FOR = "node-config-server.openshift.io/drained-for"  # our cordon's mark: the config drained for
RETRY_SECONDS = 5  # kubectl's wait after a 429, and what a node is told while its drain goes on


def drain_mark(annotations: Dict[str, Any], cordoned: bool = False) -> str:
    """The Node's drain state as its annotations hold it, our cordon's config and the cordon ("" with
    none): what the MCN's Cordoned and Drained conditions were last written from (kube_sync)."""
    keys = draincadence.KEYS + (DRAINED_FOR,)
    return ("|".join(str(annotations.get(k) or "") for k in keys) + ("|cordoned" if cordoned else "")).strip("|")


def drain_for_lease(drainer: "Drainer", node: str, config: str,
                    node_obj: Optional[Dict[str, Any]] = None) -> Optional[DrainResult]:
    """A node holding its drain lease asks again: cordon its Node (again, if someone uncordoned it
    meanwhile: MCO PR #5305), mark it drained for ``config``, and run one drain round. None when
    there is no Node object of that name (nothing runs there to drain). ``node_obj``: the Node as
    just read or written, so that a cordon or mark it already has is not written again."""
    mark = config or "-"
    try:
        if node_obj is None:
            drainer.cordon(node)
        elif not (node_obj.get("spec") or {}).get("unschedulable"):
            drainer.client.merge_patch(NODES.path(node), {"spec": {"unschedulable": True}})
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise
    if node_obj is None or ((node_obj.get("metadata") or {}).get("annotations") or {}).get(DRAINED_FOR) != mark:
        drainer.client.merge_patch(NODES.path(node), {"metadata": {"annotations": {DRAINED_FOR: mark}}})
    return drainer.drain_once(node)


def uncordon_patch(annotations: Dict[str, str], report: Dict[str, Any]) -> Dict[str, Any]:
    """The merge patch that ends our cordon once the node reports Done on the config it was
    drained for (pure; empty when it does not apply): a node cordoned by someone else stays so."""
    drained_for = annotations.get(DRAINED_FOR)
    if not drained_for or report.get("state") != "Done":
        return {}
    if drained_for not in ("-", report.get("currentConfig")):
        return {}
    return {"spec": {"unschedulable": None}, "metadata": {"annotations": {DRAINED_FOR: None}}}
