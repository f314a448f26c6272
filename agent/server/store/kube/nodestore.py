"""The Kubernetes node store (``nodestore.NodeStore`` on the API server): node state where the
cluster keeps it, so replicas are stateless (``serve --store kubernetes``; issue 29).

| what | where |
|---|---|
| a node's report, pool and membership | its MachineConfigNode (cluster-scoped, named after the node): annotation ``node-agent.openshift.io/report`` (JSON: pool, why, degraded, report, received); while it counts for nothing, or (``--backend kubernetes``) has no MCN because it has no Node, its registration's Secret instead |
| its cordon/drain/uncordon log | the same MachineConfigNode: annotation ``node-agent.openshift.io/drain-log`` (JSON list, newest 50) |
| pool rows, history, meta, rendered configs | ConfigMaps in the namespace (``kube.nodestate``) |
| credentials and registrations | Secrets in the credentials namespace (``kube.identity.KubeCredentials``) |
| drain leases | coordination.k8s.io/v1 Leases in the namespace (``kube.leases.KubeLeases``) |

Why the MachineConfigNode: it is the MCO's own per-node state object (docs/kubernetes.md "Node
state in the API"). The MCNs this store writes carry the label ``node-agent.openshift.io/store=
<namespace>``: the store follows those only (two servers in two namespaces keep apart); an MCN
without the report annotation (made by the MCO or kube_mcn) is no node record.

Reads come from memory, as in EtcdNodeStore: each process lists the MCNs and ConfigMaps once and
follows them with a watch into a ``NodeIndex`` (revision = the object's resourceVersion), so counts,
proofs and a config fetch cost no round trip and keep answering while the API server is away. A
write is acknowledged once the API server stored it, else ``KubeUnavailable`` (503, Retry-After).
"""

import logging
import threading
import time
from typing import Any, Callable, ContextManager, Dict, List, Optional

from agent.server.rollout.progress import Membership
from agent.server.store.errors import StoreUnavailable
from agent.server.store.kube.client import (
    CONFIGMAPS,
    MACHINE_CONFIG_NODES,
    KubeClient,
    KubeError,
    KubeUnavailable,
)
from agent.server.store.kube.drainlog import UNCORDON, KubeDrainLog, NoMachineConfigNode  # noqa: F401 (the store's name)
from agent.server.store.kube.freshmcn import FreshObjects
from agent.server.store.kube.heartbeat import KubeHeartbeat
from agent.server.store.kube.identity import CredentialMethods, KeptFirstBoots, KubeCredentials
from agent.server.store.kube.leases import KubeLeases
from agent.server.store.kube.mcnrecord import (  # noqa: F401 - DRAIN_LOG, STORE_LABEL: the store's names too
    DRAIN_LOG,
    REPORT,
    STORE_LABEL,
    json_list,
    log_ops,
    node_object,
    node_record,
    report_annotation,
)
from agent.server.store.kube.nodestate import POOL_PREFIX, ConfigMapState
from agent.server.store.kube.watch import Reflector, wait_all_synced
from agent.server.store.kube.watch import resource_version as rv
from agent.server.store.kube.workerturns import Turn, WorkerTurns
from agent.server.store.nodeindex import IndexedReads, NodeIndex
from agent.server.store.nodestore import (
    SERVER_KEY,
    Deleted,
    NodeRecord,
    NodeStore,
    PoolRow,
    Recorded,
    Serving,
    lease_ends,
)

log = logging.getLogger(__name__)

SYNC_TIMEOUT = 30.0


class KubeNodeStore(KubeDrainLog, KeptFirstBoots, CredentialMethods, IndexedReads, NodeStore):
    kind = "kubernetes"
    def __init__(self, client: KubeClient, namespace: str, watch: bool = True, sync_timeout: float = SYNC_TIMEOUT,
                 credentials_namespace: Optional[str] = None):
        """``credentials_namespace``: where node credentials' Secrets are (default: ``namespace``;
        serve keeps them in a namespace of their own: backends.StoreConfig)."""
        self.client = client
        self.namespace = namespace
        self._lock = threading.RLock()
        self._index = NodeIndex()
        self._drainlogs: Dict[str, List[Dict[str, Any]]] = {}
        self._drainraw: Dict[str, str] = {}  # each drain log as the annotation holds it: a JSON patch's test
        self.revision = 0
        self._last_ok = 0.0
        self.cm = ConfigMapState(client, namespace, self._lock, self._wrote)
        self._row_listeners: List[Callable[[], None]] = []
        self._feeds = [
            Reflector(client, MACHINE_CONFIG_NODES, label_selector=f"{STORE_LABEL}={namespace}", metadata_only=True,
                      on_event=self._mcn_event, keep_objects=False),
            Reflector(client, CONFIGMAPS, label_selector=self.cm.selector(), namespace=namespace,
                      on_event=self._cm_event, keep_objects=False)]
        self.credentials = KubeCredentials(client, credentials_namespace or namespace, watch)
        self.drain_leases = KubeLeases(client, namespace, watch)
        self.heartbeat: Optional[KubeHeartbeat] = None
        # False with --backend kubernetes: an MCN is a Node's, made by kube_mcn; without one a report is kept
        self.makes_mcns = True  # in the registration, as a pending one (issues 45, 48; ``adopt``)
        self.fresh_mcns = FreshObjects()  # each record's MCN as written, for its write-back (``fresh_mcn``)
        for f in self._feeds:
            f.start()
        helpers = [h for h in (self.credentials, self.drain_leases) if hasattr(h, "wait_synced")]
        if not wait_all_synced(self._feeds + helpers, sync_timeout):
            self.close()
            why = "; ".join(f.error for f in self._feeds if f.error) or f"no answer within {sync_timeout:.0f}s"
            raise KubeUnavailable(f"node store in namespace {namespace}: could not list its MachineConfigNodes, "
                                  f"ConfigMaps, Leases and the Secrets in {self.credentials.namespace}: {why}")

    # -- following -------------------------------------------------------------------------------

    def _wrote(self, revision: int) -> None:
        with self._lock:
            self.revision = max(self.revision, revision)
            self._last_ok = time.time()

    def _mcn_event(self, kind: str, obj: Dict[str, Any]) -> None:
        """A watch event, or (RELIST) a list: what it holds, but this process's writes made after."""
        if kind != "RELIST":
            with self._lock:
                self._mcn_note(obj, kind == "DELETED")
            self._wrote(rv(obj))
            return
        at = rv(obj)
        with self._lock:
            mine = {n: (self._index.records.get(n), v) for n, v in self._index.revisions.items() if at and v > at}
            self._index.clear()
            self._drainlogs = {n: log for n, log in self._drainlogs.items() if n in mine}
            self._drainraw = {n: raw for n, raw in self._drainraw.items() if n in mine}
            for item in obj["items"]:
                if item["metadata"]["name"] not in mine:
                    self._mcn_note(item, False)
            for name, (record, version) in mine.items():
                self._index.apply(name, record, version)
            if self._index.assign is not None:
                self._index.rebuild(self._index.signature or "", self._index.assign)
        self._wrote(at)

    def _mcn_note(self, obj: Dict[str, Any], deleted: bool) -> None:
        meta = obj.get("metadata") or {}
        name, annotations = meta["name"], (meta.get("annotations") or {}) if not deleted else {}
        if not self._index.apply(name, node_record(name, annotations.get(REPORT)), rv(obj)):
            return  # older than what this process wrote itself: the drain log too
        drain_log = json_list(annotations.get(DRAIN_LOG))
        if drain_log:
            self._drainlogs[name] = drain_log
        else:
            self._drainlogs.pop(name, None)
        if isinstance(annotations.get(DRAIN_LOG), str):
            self._drainraw[name] = annotations[DRAIN_LOG]
        else:
            self._drainraw.pop(name, None)

    def _cm_event(self, kind: str, obj: Dict[str, Any]) -> None:
        if kind == "RELIST":
            self._wrote(self.cm.on_list(obj["items"], rv(obj)))
        else:
            self._wrote(self.cm.on_event(kind, obj))
        if kind == "RELIST" or obj["metadata"]["name"].startswith(POOL_PREFIX):
            for listener in list(self._row_listeners):
                listener()

    def on_pool_rows(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever the watch brings the pools' rows (another process's
        step), once they are in memory: the pool queue rings the held fetches of the nodes it
        targeted then, not at its next look (poolqueue.py)."""
        self._row_listeners.append(listener)

    def last_seen(self) -> float:
        """When the API server last answered this process (a write or a watch): /healthz, status."""
        return self._last_ok

    def generation(self) -> Any:
        """The newest resourceVersion this process has seen of its MCNs and ConfigMaps, with the
        helpers' (credentials, leases) when they keep one: it grows with every change."""
        parts = [self.revision]
        for helper in (self.credentials, self.drain_leases):
            gen = getattr(helper, "generation", None)
            parts.append(gen() if callable(gen) else None)
        return tuple(parts)

    def close(self) -> None:
        for f in self._feeds:
            f.stop()
        for helper in (self.credentials, self.drain_leases):
            helper.close()
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def start_heartbeat(self, name: str, describe: Callable[[], Dict[str, Any]]) -> KubeHeartbeat:
        """Announce this process's view as a Lease (kube.heartbeat.py; /api/v1/cluster)."""
        if self.heartbeat is None:
            self.heartbeat = KubeHeartbeat(self.client, self.namespace, name, describe)
        return self.heartbeat

    def replicas(self) -> List[Dict[str, Any]]:
        """What every live replica process announced, as this one last listed it."""
        return self.heartbeat.replicas() if self.heartbeat is not None else []

    # -- nodes -----------------------------------------------------------------------------------

    def _patch_mcn(self, node: str, patch: Dict[str, Any], pool: str, body: Dict[str, Any]) -> Dict[str, Any]:
        """Merge-patch the node's MCN, making it first when there is none. A patch carrying
        metadata.resourceVersion is a compare-and-swap: a 404 or 409 goes to the caller."""
        patch = dict(patch, metadata=dict(patch.get("metadata") or {}, labels={STORE_LABEL: self.namespace}))
        cas = "resourceVersion" in patch["metadata"]
        for _ in range(3):
            try:
                return self.client.merge_patch(MACHINE_CONFIG_NODES.path(node), patch)
            except KubeError as exc:
                if exc.status != 404 or cas:
                    raise
            try:
                return self._create_mcn(node, patch["metadata"], pool, body)
            except KubeError as exc:
                if exc.status != 409:  # 409: kube_sync or the MCO made it meanwhile: patch it
                    raise
        raise RuntimeError(f"MachineConfigNode {node}: made and deleted concurrently; try again")

    def _create_mcn(self, node: str, metadata: Dict[str, Any], pool: str, body: Dict[str, Any]) -> Dict[str, Any]:
        """The MCN with the spec kube_sync makes (the CRD requires node, pool and configVersion.desired),
        our labels and annotations; NoMachineConfigNode when MCNs are not ours to make (``makes_mcns``)."""
        if not self.makes_mcns:
            raise NoMachineConfigNode(404, "NotFound", "none is made without its Node", f"CREATE {node}")
        obj = node_object(node, body, pool)
        made = obj["metadata"]["annotations"]
        obj["metadata"].update(metadata, labels={STORE_LABEL: self.namespace})
        obj["metadata"]["annotations"] = dict(made, **(metadata.get("annotations") or {}))
        return self.client.create(MACHINE_CONFIG_NODES.path(), obj)

    def record_report(self, node: str, body: Dict[str, Any], member: Membership, now: float) -> Recorded:
        """The report on the node's MCN (with the drain log's uncordon and the spec's desired config
        where they go with it: ``_write_record``); then, when it is Done on the leased config, the
        end of its drain lease (a second write: a replica dying between the two leaves the lease to
        expire, or to the node's next Done report, whose uncordon is then logged twice). A report that counts for nothing (the
        server's pending mark) goes into the node's credential record instead, never onto an MCN
        (issue 45); once it counts, the next write moves it (the record's copy is dropped after)."""
        rec = NodeRecord(node, member.pool, member.why, member.degraded, dict(body), now)
        value = report_annotation(rec)
        with self._lock:
            old = self._index.records.get(node)
        obj, logged = None, False
        if not _pending(body):
            try:
                obj, logged = self._write_record(node, value, member.pool, body)
            except NoMachineConfigNode:  # no Node, so no MCN: kept as a pending one is, until kube_mcn makes one
                pass
        elif old is not None:  # it counted before (a rotated registration): off the MCN first
            self._strip_mcn(node)
        if obj is None and not self.credentials.keep_report(node, value):
            raise StoreUnavailable(f"node {node} has no registration to keep its report with (deleted "
                                   f"meanwhile): register again")
        if obj is not None:
            self._adopted(node, obj)
        if _pending(body):
            return Recorded(False, old.pool if old is not None else None)
        released = False
        lease = self.drain_leases.held_by(node) if body.get("state") == "Done" else None
        if lease is not None and lease_ends(str(lease.get("config") or ""), body):
            pool = self.drain_leases.release(node, str(body.get("currentConfig") or "") or None)
            if pool is not None:
                released = True
                if not logged:
                    self._log_drain(node, pool, UNCORDON)
        return Recorded(released, old.pool if old is not None else None)

    def _adopted(self, node: str, obj: Dict[str, Any]) -> None:
        with self._lock:  # read-your-writes: the object as stored (its drain log too)
            self._mcn_note(obj, False)
        self.fresh_mcns.put(node, obj)
        self._wrote(rv(obj))
        if self.credentials.pending_report(node) is not None:
            self.credentials.keep_report(node, None)

    def fresh_mcn(self, node: str) -> Optional[Dict[str, Any]]:
        """The node's MCN as this store's last record write returned it, once (None: taken, or none)."""
        return self.fresh_mcns.take(node)

    def adopt(self, node: str) -> bool:
        """A counted report kept in ``node``'s registration while it had no MCN moves onto the one
        kube_mcn just made for its Node (a patch, never a create). False: none to move."""
        kept = self.credentials.pending_report(node)
        if kept is None or _pending(kept.report):
            return False
        try:
            obj = self.client.merge_patch(MACHINE_CONFIG_NODES.path(node), {"metadata": {
                "annotations": {REPORT: report_annotation(kept)}, "labels": {STORE_LABEL: self.namespace}}})
        except KubeError as exc:
            if exc.status != 404:
                raise
            return False
        self._adopted(node, obj)
        return True

    def delete_node(self, node: str, now: float) -> Deleted:
        """The report and drain log leave the MCN (the object stays: its status is kube_sync's and
        the MCO's), then the credential and the lease. Three writes: one failing raises, and the
        admin's retry finishes the rest."""
        with self._lock:
            old = self._index.records.get(node)
            had_log = node in self._drainlogs
        kept = self.credentials.pending_report(node)
        held = self.drain_leases.held_by(node)
        if old is not None or had_log:
            self._strip_mcn(node)
        old = old or kept
        had_credential = self.credentials.forget(node)  # its pending report goes with it
        lease_pool = self.drain_leases.release(node) if held is not None else None
        return Deleted(bool(old is not None or had_credential or held is not None),
                       old.pool if old is not None else None, lease_pool or (held or {}).get("pool"))

    def _strip_mcn(self, node: str) -> None:
        """Take our report, drain log and store label off the node's MCN (the object stays:
        kube_sync deletes one it made when the admin deletes the node)."""
        try:
            obj = self.client.merge_patch(MACHINE_CONFIG_NODES.path(node), {"metadata": {
                "annotations": {REPORT: None, DRAIN_LOG: None}, "labels": {STORE_LABEL: None}}})
        except KubeError as exc:
            if exc.status != 404:
                raise
            obj = {}
        with self._lock:
            self._index.apply(node, None, rv(obj))
            self._drainlogs.pop(node, None)
            self._drainraw.pop(node, None)
        self._wrote(rv(obj))

    def node(self, node: str) -> Optional[NodeRecord]:
        with self._lock:
            rec = self._index.records.get(node)
        return rec if rec is not None else self.credentials.pending_report(node)

    def nodes(self, pool: Optional[str] = None, after: str = "", limit: int = 500) -> List[NodeRecord]:
        merged = {n: r for n, r in self.credentials.pending_reports().items()
                  if n > after and (pool is None or r.pool == pool)}
        with self._lock:
            merged.update((n, r) for n, r in self._index.records.items()
                          if n > after and (pool is None or r.pool == pool))
        return [merged[n] for n in sorted(merged)[:limit]]

    # -- pools, rendered configs, meta (kube.nodestate.ConfigMapState) ------------------------------

    def pools(self) -> Dict[str, PoolRow]:
        return self.cm.pools()

    def update_pool(self, name: str, decide: Callable[[Optional[PoolRow]], Optional[PoolRow]]) -> PoolRow:
        return self.cm.update_pool(name, decide)

    def share_worker_turns(self, directory: str) -> None:
        self.cm.turns = self.drain_leases.turns = WorkerTurns(directory)

    def turn(self, key: str) -> ContextManager[Turn]:
        """This replica's turn at ``key`` among serve's workers (workerturns.py), for the writers of
        the objects of this namespace's store: a MachineConfigNode's status."""
        return self.cm.turns.turn(key)

    def history(self, pool: str) -> List[Dict[str, Any]]:
        return self.cm.history(pool)

    def put_rendered(self, pool: str, name: str, spec: Dict[str, Any], sources: List[str], inputs: str = "") -> None:
        self.cm.put_rendered(pool, name, spec, sources)

    def rendered_spec(self, name: str) -> Optional[Dict[str, Any]]:
        doc = self.cm.rendered(name)
        return doc["spec"] if doc else None

    def rendered_pool(self, name: str) -> Optional[str]:
        doc = self.cm.rendered(name)
        return doc["pool"] if doc else None

    def meta(self, key: str) -> Optional[str]:
        return self.cm.meta(key)

    def set_meta(self, key: str, value: str) -> None:
        self.cm.set_meta(key, value)

    def serving(self, pool: str, node: Optional[str] = None) -> Serving:
        with self._lock:
            row = self.cm.pool(pool)
            proofs = self._index.proofs_of(pool, row.target) if row is not None else {}
            rec = self._index.records.get(node) if node else None
        if rec is None and node:
            rec = self.credentials.pending_report(node)
        return Serving(self.cm.meta("state_signature"), row, proofs, rec)


def _pending(body: Dict[str, Any]) -> bool:
    mark = body.get(SERVER_KEY)
    return isinstance(mark, dict) and bool(mark.get("pending"))
