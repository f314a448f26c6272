"""The MachineConfigNodes with ``--backend kubernetes``, as upstream keeps them
(openshift/machine-config-operator 7ff337a4):

- one for every Node, named after it and owned by it (``ownerReferences``, no
  ``blockOwnerDeletion``), except a Node whose ``status.phase`` is Pending or Provisioning
  (pkg/operator/sync.go ``syncMachineConfigNodes``), with or without node-agent on it; its
  ``spec.pool`` the pool the Node's labels put it in, else "not-yet-set"
  (pkg/helpers/helpers.go ``GetPrimaryPoolNameForMCN``), ``spec.configVersion.desired`` the
  Node's desired config (upgrade_monitor.go ``GenerateAndApplyMachineConfigNodeSpec``);
- every condition from the first status written, then the phases of node-agent's reports and of
  our drain (agent/server/rollout/mcnconditions.py), a condition that does not change keeping its
  lastTransitionTime; ``status.observedGeneration`` the object's generation,
  ``status.configVersion.desired`` the desired config and ``current`` the Node's currentConfig
  annotation, omitted until it has one (``generateAndApplyMachineConfigNodes``);
- none for a name with no Node: a report is evidence about a Node, never a claim to one (issue 45);
  an MCN whose Node is gone is deleted (``syncMachineConfigNodes``; the garbage collector does
  so too for one it owns).

The status is written with the conditions it was computed from as a precondition (a JSON patch's
``test``; 409/422: read again and decide again), so that every transition is decided against the
conditions the API holds, as the CRD's transition rules (``oldSelf``) judge it; the first, when
there are none, with the object's resourceVersion. Conditions
are the server's to decide only for a Node node-agent reports for (a counted report); for any
other Node the conditions held are kept as they are (a real MCD's, or the defaults written when
the object was made) and only the fields read from the Node (configVersion) follow it.
"""

import contextlib
import logging
import time
from typing import Any, Callable, ContextManager, Dict, Optional, Tuple

from agent.server.cluster.kube_drain import DRAINED_FOR
from agent.server.rollout import draincadence, mcnconditions
from agent.server.rollout.mcnconditions import NOT_YET_SET, Facts, config_name
from agent.server.rollout.progress import epoch_of, iso8601
from agent.server.store.kube.client import MACHINE_CONFIG_NODES, KubeError
from agent.server.store.kube.mcnrecord import CREATED_BY, CREATOR
from agent.server.store.kube.watch import Reflector, resource_version

log = logging.getLogger(__name__)

MCD = "machineconfiguration.openshift.io/"
SKIPPED_PHASES = ("Pending", "Provisioning")  # syncMachineConfigNodes: no MCN for such a Node yet
ORPHAN_GRACE = 10.0  # seconds an MCN without a Node is left to another replica's Node cache catching up
TRIES = 3
REPORT_GRACE = 5.0  # seconds a node's MCN is left to the process that took its report (``sweep``)
SWEEP_BATCH = 50  # MCNs a sweep writes at most, so that a fleet's first sweep never holds back reports' write-back


def slim_mcn(obj: Dict[str, Any]) -> Dict[str, Any]:
    """An MCN as the writer keeps it: what says whether it is as wanted (owner, spec, the status
    fields read from the Node), not its conditions nor the node store's report."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return {"metadata": {"name": meta.get("name", ""), "uid": meta.get("uid", ""), "resourceVersion": meta.get("resourceVersion"),
                         "generation": meta.get("generation"), "creationTimestamp": meta.get("creationTimestamp", ""),
                         "owners": [o.get("uid") for o in meta.get("ownerReferences") or []]},
            "spec": obj.get("spec") or {},
            "status": {"observedGeneration": status.get("observedGeneration"),
                       "configVersion": status.get("configVersion"), "conditions": bool(status.get("conditions"))}}


def node_owner(node_obj: Dict[str, Any]) -> Dict[str, Any]:
    """The MachineConfigNode's ownerReferences to its Node (pure; none without the Node's uid). No
    blockOwnerDeletion: it would need update on nodes/finalizers where OwnerReferencesPermission-
    Enforcement is on (OpenShift), and nothing needs the Node's deletion held up."""
    meta = node_obj.get("metadata") or {}
    if not meta.get("uid"):
        return {}
    return {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta.get("name", ""),
                                 "uid": meta["uid"]}]}


def skipped(node_obj: Optional[Dict[str, Any]]) -> bool:
    """No MCN: no Node, or one still Pending/Provisioning (syncMachineConfigNodes)."""
    return not node_obj or ((node_obj.get("status") or {}).get("phase") in SKIPPED_PHASES)


def wanted_spec(node: str, pool: Optional[str], desired: str) -> Dict[str, Any]:
    return {"node": {"name": node}, "pool": {"name": pool or NOT_YET_SET},
            "configVersion": {"desired": config_name(desired)}}


def node_facts(node: str, node_obj: Dict[str, Any], report: Optional[Dict[str, Any]],
               needs: Optional[Tuple[bool, bool]]) -> Facts:
    """What the Node (as just written) and the counted report say (pure); the desired config is
    the report's (the server's decision: kube_targets.served_desired), else the Node's."""
    annotations = (node_obj.get("metadata") or {}).get("annotations") or {}
    desired = str((report or {}).get("desiredConfig") or annotations.get(MCD + "desiredConfig") or "")
    drained_for = str(annotations.get(DRAINED_FOR) or "")  # "-": drained for a config it did not name
    return Facts(node=node, desired=desired, report=report,
                 cordoned=bool((node_obj.get("spec") or {}).get("unschedulable")),
                 drain=draincadence.from_annotations(annotations),
                 drained_for=(desired or drained_for) if drained_for == "-" else drained_for, needs=needs)


def mcn_status(held: Dict[str, Any], facts: Facts, node_obj: Dict[str, Any], now: str,
               first_boot: Any = None) -> Dict[str, Any]:
    """The status to hold (pure): the conditions decided against ``held`` (the object as the API
    holds it), its generation, the desired config and the Node's currentConfig (None: removed)."""
    current = ((node_obj.get("metadata") or {}).get("annotations") or {}).get(MCD + "currentConfig") or None
    conditions = (held.get("status") or {}).get("conditions")
    if facts.report is not None or not conditions:
        conditions = mcnconditions.node_conditions(conditions, facts, now, first_boot)
    return {"observedGeneration": int((held.get("metadata") or {}).get("generation") or 1),
            "configVersion": {"desired": config_name(facts.desired), "current": current},
            "conditions": conditions}


def status_ops(held: Any, status: Dict[str, Any], generation: Any = None) -> list:
    """The status write as a JSON patch of the status subresource whose precondition is what it
    was decided against (pure): ``test`` the conditions and, when known, the generation its
    observedGeneration was read from; then set the fields ``mcn_status`` decides (the others, a
    real MCD's pinnedImageSets, stay). Not the object's resourceVersion: the node store's report
    and drain-log annotations move it too, and the status write that followed a report
    conflicted with the next report's record (0.8-1.2 per node with drains)."""
    version = {k: v for k, v in status["configVersion"].items() if v is not None}
    tests = [{"op": "test", "path": "/metadata/generation", "value": generation}] if generation is not None else []
    return tests + [{"op": "test", "path": "/status/conditions", "value": held},
            {"op": "replace", "path": "/status/conditions", "value": status["conditions"]},
            {"op": "add", "path": "/status/observedGeneration", "value": status["observedGeneration"]},
            {"op": "add", "path": "/status/configVersion", "value": version}]


def _holds(obj: Dict[str, Any], status: Dict[str, Any]) -> bool:
    """Whether ``obj`` holds ``status`` already (a None field: absent)."""
    have = obj.get("status") or {}
    version = {k: v for k, v in status["configVersion"].items() if v is not None}
    return (have.get("observedGeneration") == status["observedGeneration"] and
            have.get("configVersion") == version and have.get("conditions") == status["conditions"])


class McnWriter:
    """Writes the MachineConfigNodes of a KubeSync (``cluster``, ``client``, ``node_cache``):
    one node's at a report or a Node change (``write``), and every Node's that is missing or
    not as wanted, and orphans gone (``sweep``)."""

    def __init__(self, cluster: Any, client: Any, on_change: Callable[[], None] = lambda: None):
        self.cluster, self.client = cluster, client
        self.cache = Reflector(client, MACHINE_CONFIG_NODES, on_change, transform=slim_mcn)
        self.writes = {"created": 0, "spec": 0, "status": 0, "deleted": 0}
        self.waiting = False  # an MCN without a Node younger than ORPHAN_GRACE: sweep again

    def start(self) -> None:
        self.cache.start()

    def stop(self) -> None:
        self.cache.stop()

    def write(self, node: str, node_obj: Optional[Dict[str, Any]], pool: Optional[str],
              report: Optional[Dict[str, Any]] = None, base: str = "") -> Optional[Dict[str, Any]]:
        """The MCN of ``node`` as it should be now (None: none, there is no Node): ``node_obj`` the
        Node as just written, ``pool`` the one its labels put it in, ``report`` node-agent's
        counted report (None: not ours to decide its conditions), ``base`` the config the Node ran
        before this report (what the change needs: AppliedFilesAndOS's message)."""
        if skipped(node_obj):
            return None
        assert node_obj is not None
        specs = [self.cluster.spec_of(name) if name else None for name in (base, str((report or {}).get(
            "desiredConfig") or ""))] if report is not None and base else [None, None]
        facts = node_facts(node, node_obj, report, mcnconditions.update_needs(*specs))
        spec = wanted_spec(node, pool, facts.desired)
        first_boot = self.cluster.first_boot_decision(report, pool or "") if report is not None else None
        # a fresh report's phases are dated by its receipt (queued writes come later), a rewrite's now
        at = float((report or {}).get("_at") or 0) if report is not None and not report.get("_rewrite") else 0.0
        with self._turn(node):  # read, decide and write with no other worker of this replica between
            return self._write(node, node_obj, spec, facts, first_boot, at)

    def _turn(self, node: str) -> ContextManager[Any]:
        """This replica's turn at the node's MachineConfigNode among serve's workers (the store's
        ``turn``: kube/workerturns.py; none with another store): two workers writing one status at
        once made the second's ``test`` fail (422), 0.04-0.09 per node with drains."""
        turn = getattr(self.cluster.store, "turn", None)
        return turn("mcn/" + node) if turn is not None else contextlib.nullcontext()

    def _write(self, node: str, node_obj: Dict[str, Any], spec: Dict[str, Any], facts: Any, first_boot: Any,
               at: float) -> Optional[Dict[str, Any]]:
        owner = node_owner(node_obj)
        known = self._fresh(node)
        obj = self._put_spec(node, spec, owner, known)
        for _ in range(TRIES):
            status = mcn_status(obj, facts, node_obj, iso8601(at or time.time()), first_boot)
            if _holds(obj, status):
                if obj is not known:
                    return obj
                known = None  # as the record's write left it: another process may have written since
                obj = self._put_spec(node, spec, owner)
                continue
            held = (obj.get("status") or {}).get("conditions")
            try:
                if held:
                    obj = self.client.json_patch(MACHINE_CONFIG_NODES.path(node, sub="status"),
                                                 status_ops(held, status, (obj.get("metadata") or {}).get("generation")))
                else:
                    obj = self.client.merge_patch(MACHINE_CONFIG_NODES.path(node, sub="status"), {
                        "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": status})
                self.writes["status"] += 1
                return obj
            except KubeError as exc:
                if exc.status not in (404, 409, 422):
                    raise
            obj = self._put_spec(node, spec, owner)  # changed (or gone) since: read it again
        log.warning("MachineConfigNode %s: its status changed under %d writes; the next round writes it", node, TRIES)
        return obj

    def _fresh(self, node: str) -> Optional[Dict[str, Any]]:
        """The node's MCN as the node store's record write returned it (its ``fresh_mcn``), when it
        is at least as new as the one the watch shows; else None (read it). Its status write
        tests what it was decided against, so an object another process moved since costs a 422
        and a read, never a wrong status."""
        take = getattr(self.cluster.store, "fresh_mcn", None)
        obj = take(node) if take is not None else None
        kept = self.cache.get(node)
        if obj is None or kept is None or resource_version(obj) < resource_version(kept):
            return None
        return obj

    def _put_spec(self, node: str, spec: Dict[str, Any], owner: Dict[str, Any],
                  known: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The object with ``spec`` and ``owner``, made when missing, as upstream's
        ``GenerateAndApplyMachineConfigNodeSpec``; a new one is offered the node store's kept report
        (``adopt``). Read first (``known``: as just written, ``_fresh``), and patched only when its
        spec or owner differ: a merge patch that changes nothing is still a write the API server
        takes (it was one of each report's four MachineConfigNode writes; docs/performance.md,
        "Rollout at fleet scale")."""
        if self.cache.get(node) is not None:
            try:
                obj = known if known is not None else self.client.get(MACHINE_CONFIG_NODES.path(node))
                owners = [o.get("uid") for o in (obj.get("metadata") or {}).get("ownerReferences") or []]
                if obj.get("spec") == spec and (not owner or owners == [owner["ownerReferences"][0]["uid"]]):
                    return obj
                return self._patch_spec(node, spec, owner)
            except KubeError as exc:
                if exc.status != 404:
                    raise
        body = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigNode",
                "metadata": dict({"name": node, "annotations": {CREATED_BY: CREATOR}}, **owner), "spec": spec}
        try:
            obj = self.client.create(MACHINE_CONFIG_NODES.path(), body)
        except KubeError as exc:
            if exc.status != 409:  # 409: made meanwhile (another replica): patch it
                raise
            return self._patch_spec(node, spec, owner)
        self.writes["created"] += 1
        adopt = getattr(self.cluster.store, "adopt", None)
        if adopt is not None:
            adopt(node)
        return obj

    def _patch_spec(self, node: str, spec: Dict[str, Any], owner: Dict[str, Any]) -> Dict[str, Any]:
        kept = self.cache.get(node) or {}
        if kept.get("spec") != spec or (owner and kept["metadata"]["owners"] != [owner["ownerReferences"][0]["uid"]]):
            self.writes["spec"] += 1
        return self.client.merge_patch(MACHINE_CONFIG_NODES.path(node), dict({"spec": spec},
                                                                                **({"metadata": owner} if owner else {})))

    def sweep(self, nodes: Dict[str, Dict[str, Any]], pools_of: Dict[str, Optional[str]],
              counted: Callable[[str], Optional[Tuple[Dict[str, Any], str]]], now: float,
              mine: Callable[[str], bool] = lambda name: True) -> int:
        """Every Node's MCN made or brought up to date where it is missing or not as wanted
        (``pools_of``: each Node's pool by its labels; ``counted(node)``: its counted report, with
        its receipt time as ``_at``, and pool, else None), and every MCN whose Node is gone deleted.
        Only the Nodes this process writes (``mine``), and not one whose report came within
        ``REPORT_GRACE`` (the process that took it writes it: the sweep, woken by that report's
        Node patch, wrote it too and one of the two conflicted). Only with both caches listed;
        at most ``SWEEP_BATCH`` writes, ``waiting`` set when more are left. Returns how many objects
        it wrote."""
        if not self.cache.synced.is_set():
            return 0
        mcns = self.cache.snapshot()
        done = 0
        self.waiting = False
        for name, node_obj in nodes.items():
            if done >= SWEEP_BATCH:
                self.waiting = True
                return done
            if skipped(node_obj):
                continue
            kept = mcns.get(name)
            if not mine(name):
                continue
            counts = counted(name)
            if kept is not None and counts is not None and now - float(counts[0].get("_at") or 0) < REPORT_GRACE:
                self.waiting = True  # looked at again next round
                continue
            annotations = (node_obj.get("metadata") or {}).get("annotations") or {}
            desired = str(counts[0].get("desiredConfig") or "") if counts else str(annotations.get(MCD + "desiredConfig") or "")
            if kept is not None and not self._stale(kept, node_obj, pools_of.get(name), desired):
                continue
            try:
                self.write(name, node_obj, pools_of.get(name), counts[0] if counts else None)
                done += 1
            except KubeError as exc:
                log.warning("MachineConfigNode %s: %s (the next round retries)", name, exc)
        for name, kept in mcns.items():
            if name in nodes:
                continue
            if now - _epoch(kept["metadata"]["creationTimestamp"]) > ORPHAN_GRACE:
                done += self._delete_orphan(name, kept["metadata"]["uid"])
            else:
                self.waiting = True
        return done

    @staticmethod
    def _stale(kept: Dict[str, Any], node_obj: Dict[str, Any], pool: Optional[str], desired: str) -> bool:
        meta = node_obj.get("metadata") or {}
        current = (meta.get("annotations") or {}).get(MCD + "currentConfig") or None
        status = kept["status"]
        version = {k: v for k, v in {"desired": config_name(desired), "current": current}.items() if v is not None}
        return (kept["spec"] != wanted_spec(meta.get("name", ""), pool, desired) or
                kept["metadata"]["owners"] != ([meta["uid"]] if meta.get("uid") else kept["metadata"]["owners"]) or
                not status["conditions"] or status["configVersion"] != version or
                status["observedGeneration"] != kept["metadata"]["generation"])

    def _delete_orphan(self, name: str, uid: str) -> int:
        """syncMachineConfigNodes: "Node %s has been removed, deleting associated MCN" (only the
        object seen: a uid precondition)."""
        try:
            self.client.delete(MACHINE_CONFIG_NODES.path(name), {"apiVersion": "v1", "kind": "DeleteOptions",
                                                                  "preconditions": {"uid": uid}})
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise
            return 0
        log.info("Node %s has been removed: deleted its MachineConfigNode", name)
        self.writes["deleted"] += 1
        return 1


def _epoch(stamp: str) -> float:
    return epoch_of(stamp) or 0.0
