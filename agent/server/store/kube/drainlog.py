"""The Kubernetes node store's drain leases and drain log (a mixin of ``KubeNodeStore``): the
leases are coordination.k8s.io Leases (``kube.leases.KubeLeases``), the log an annotation of the
node's MachineConfigNode, and a report's record, which goes on the same object, written with what
goes with it in one write where it can (``_write_record``; issue 53)."""

import json
import logging
import time
from typing import Any, Dict, List, Optional, Tuple

from agent.server.rollout import targeting
from agent.server.rollout.mcnconditions import config_name
from agent.server.store.kube.client import MACHINE_CONFIG_NODES, KubeError, get_if_exists
from agent.server.store.kube.mcnrecord import DRAIN_LOG, REPORT, json_list, log_ops, record_ops
from agent.server.store.kube.watch import resource_version as rv
from agent.server.store.nodestore import DRAIN_GRANTED, lease_ends

log = logging.getLogger(__name__)

DRAINLOG_KEEP = 50
CAS_TRIES = 50
UNCORDON = ("uncordon", "node reported Done")


class NoMachineConfigNode(KubeError):
    """No MCN, and none is ours to make (``makes_mcns`` False): the name has no Node."""


class KubeDrainLog:
    """Needs ``client``, ``namespace``, ``_lock``, ``_drainlogs``, ``_drainraw``, ``drain_leases``,
    ``cm``, ``_patch_mcn``, ``_create_mcn``, ``_mcn_note`` and ``_wrote`` of the class it is mixed into."""

    def _write_record(self, node: str, value: str, pool: str, body: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
        """The report's record on the node's MCN, in one write with (ours, issue 53):

        - ``spec.configVersion.desired`` when the server targeted the node (its entry in this
          process's pool row): the MCD writes the MCN's spec when it takes up the update
          (upgrade_monitor.go ``GenerateAndApplyMachineConfigNodeSpec``, which sets
          ``Spec.ConfigVersion.Desired`` from the Node's desiredConfig annotation), and kube_mcn
          then finds the spec as wanted and writes none of its own (it wrote one for every
          targeted node before);
        - the drain log's uncordon when the report is a Done that ends the node's drain lease (the
          lease as the watch shows it): the log read is the JSON patch's precondition (a 422 when
          it moved: the record is written alone and the entry after the release, as before).

        Returns (the MCN as written, whether the uncordon is logged)."""
        patch: Dict[str, Any] = {"metadata": {"annotations": {REPORT: value}}}
        row = self.cm.pools().get(pool)
        entry = targeting.entry_of(row.rollout, node) if row is not None else None
        desired = config_name(str(entry.get("config") or "")) if entry is not None and entry.get("config") else ""
        if desired:
            patch["spec"] = {"configVersion": {"desired": desired}}
        lease = self.drain_leases.held_by(node) if body.get("state") == "Done" else None
        with self._lock:
            raw = self._drainraw.get(node)
        if lease is not None and lease_ends(str(lease.get("config") or ""), body) and raw is not None:
            event = {"node": node, "pool": lease["pool"], "action": UNCORDON[0], "detail": UNCORDON[1], "at": time.time()}
            logged = json.dumps((json_list(raw) + [event])[-DRAINLOG_KEEP:])
            try:
                return self.client.json_patch(MACHINE_CONFIG_NODES.path(node), record_ops(
                    raw, logged, value, desired, self.namespace)), True
            except KubeError as exc:
                if exc.status not in (404, 409, 422):
                    raise
        return self._patch_mcn(node, patch, pool, body), False

    def acquire_lease(self, node: str, pool: str, config: str, limit: int, ttl: float, now: float):
        answer = self.drain_leases.acquire(node, pool, config, limit, ttl, now)
        if answer.granted and not answer.renewed:
            self._log_drain(node, pool, ("cordon", config), ("drain", DRAIN_GRANTED))
        return answer

    def release_lease(self, node: str, why: str) -> Optional[str]:
        pool = self.drain_leases.release(node)
        if pool is not None:
            self._log_drain(node, pool, ("uncordon", why))
        return pool

    def leases(self, pool: Optional[str] = None, now: Optional[float] = None) -> List[Dict[str, Any]]:
        return [{k: h[k] for k in ("node", "pool", "config", "granted", "expires")}
                for h in self.drain_leases.holders(pool or "")]

    def drain_events(self, node: Optional[str] = None) -> List[Dict[str, Any]]:
        with self._lock:
            if node is not None:
                return list(self._drainlogs.get(node) or [])
            return sorted((e for log in self._drainlogs.values() for e in log), key=lambda e: e.get("at", 0))

    def _log_drain(self, node: str, pool: str, *entries: Tuple[str, str]) -> None:
        """Append ``entries`` (action, detail) to the MCN's drain log in one write: a JSON patch testing the log
        read (``log_ops``), else a CAS on the resourceVersion; a 422 whose log had not moved is raised."""
        events, refused = [{"node": node, "pool": pool, "action": a, "detail": d, "at": time.time()}
                           for a, d in entries], None  # refused: (a 422, the log it tested)
        for _ in range(CAS_TRIES):
            cur = get_if_exists(self.client, MACHINE_CONFIG_NODES.path(node)) or {}
            meta = cur.get("metadata") or {}
            logged = (meta.get("annotations") or {}).get(DRAIN_LOG)
            if refused is not None and logged == refused[1]:
                raise refused[0]  # no race: the patch itself was refused
            annotations = {DRAIN_LOG: json.dumps((json_list(logged) + events)[-DRAINLOG_KEEP:])}
            try:
                if (tested := logged is not None and bool(meta.get("labels"))):
                    obj = self.client.json_patch(MACHINE_CONFIG_NODES.path(node), log_ops(meta, annotations[DRAIN_LOG],
                                                                                             self.namespace))
                elif cur and logged is None:  # a node's first entries: no log to lose, so no precondition
                    # (a status or spec write meanwhile was a 409 and a read more: 0.1-0.16 per node with
                    # drains; the one writer of first entries is the node's grant, a second grant at once the same)
                    obj = self._patch_mcn(node, {"metadata": {"annotations": annotations}}, pool, {})
                elif cur:
                    obj = self._patch_mcn(node, {"metadata": {"annotations": annotations,
                                                              "resourceVersion": meta["resourceVersion"]}}, pool, {})
                else:
                    obj = self._create_mcn(node, {"annotations": annotations}, pool, {})
            except NoMachineConfigNode:  # no Node: its drain log has no object to go on
                log.info("node %s: %s not logged: no MachineConfigNode (no Node)", node, entries)
                return
            except KubeError as exc:
                if exc.status in (404, 409) or (exc.status == 422 and tested):  # changed since read? read again
                    refused = (exc, logged) if exc.status == 422 else None
                    continue
                raise
            with self._lock:
                self._mcn_note(obj, False)
            self._wrote(rv(obj))
            return
        raise RuntimeError(f"MachineConfigNode {node}: {CAS_TRIES} concurrent changes of its drain log; try again")
