"""What node-config-server writes back to the Kubernetes API (``serve --backend kubernetes``),
where the MCO writes the same things, so that ``kubectl get mcp``/``oc get mcp`` show our numbers:

- rendered configs as MachineConfigs ``rendered-<pool>-<hash>`` owned by their pool
  (``controller: true``, as the MCO's render controller makes them; deleting the pool deletes
  them), created once: a rendered config never changes under its name;
- each pool's ``status`` (configuration, the machine counts, observedGeneration, conditions with
  reason, message and lastTransitionTime): computed from the same view as ``get pools``, written
  by a JSON merge patch of the status subresource only when it differs from what the API holds,
  at most once per pool per ``interval`` however many reports arrive (coalesced), in a loop of
  its own so that writing thousands of Nodes never holds it back;
- each reporting node's MCD annotations on its Node object
  (``machineconfiguration.openshift.io/currentConfig``, ``state``, ``reason``, ``currentImage``
  from its report; ``desiredConfig``/``desiredImage`` as the server targeted it), and the role
  label of a custom pool it joined (the MCO node controller's labelling for ``firstPivotConfig``,
  MCO-650). A Node not registered yet gets them when it appears;
- the rollout's writes: each member's desiredConfig and the UpdateInProgress taint
  (kube_targets.TargetWriter, once a second), and an Event on the pool for each targeting
  (``note_pool_event``);
- a MachineConfigNode for every Node (kube_mcn.McnWriter): at each report and each change of
  the Node's drain state, and a sweep of every Node's when Nodes or MCNs change.

A merge patch carries no resourceVersion, so a status write never conflicts (409) with another
replica's: every replica computes the same status from the same shared node state, and the last
write wins. Writes failing because the API server is away are retried on the next round; the
node reports themselves are kept by the node store meanwhile, so nothing is lost.
"""

import logging
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from agent.server.cluster import kube_pools
from agent.server.cluster.kube_drain import drain_mark, uncordon_patch
from agent.server.cluster.kube_events import NODE_CONTROLLER
from agent.server.cluster.kube_mcn import McnWriter
from agent.server.cluster.kube_nodepatch import (  # noqa: F401 - kube_sync's names too (kube_undo, tests)
    ANNOTATION,
    LABELS_APPLIED,
    NODE_FIELDS,
    node_patch,
    patch_changes,
    pool_labels,
)
from agent.server.cluster.kube_pools import (  # noqa: F401 - kube_sync's name too
    STATUS_FIELDS,
    pool_status,
    rendered_object,  # noqa: F401 - kube_sync's name for it too
)
from agent.server.cluster.kube_targets import TargetWriter, owner_of, pool_event, served_desired
from agent.server.cluster.kube_writeback import write_back
from agent.server.rollout.nodestatus import slim_node
from agent.server.rollout.progress import iso8601
from agent.server.store.kube.client import (
    MACHINE_CONFIG_POOLS,
    MACHINE_CONFIGS,
    NODES,
    KubeClient,
    KubeError,
    KubeUnavailable,
)
from agent.server.store.kube.watch import Reflector

log = logging.getLogger(__name__)

MARK_GRACE = 5.0  # seconds a drain state another process wrote is left to it (``_unwritten``)
EARLY = "_early"  # a queued report whose Node patch note_report wrote: (the annotations before, the Node written)


class KubeSync:
    """Writes rendered configs, pool status and Node annotations, in one daemon thread."""

    def __init__(self, cluster: Any, source: Any, client: KubeClient, interval: float = 1.0):
        self.cluster = cluster
        self.source = source  # kube.state.KubeStateSource: its caches hold the objects as the API has them
        self.client = client
        self.interval = interval
        self.writes = {"status": 0, "rendered": 0, "node": 0}
        self._created: set = set()
        self._written: Dict[str, Dict[str, Any]] = {}
        self._spec_written: Dict[str, Tuple[Any, Dict[str, Any]]] = {}  # pool -> (its resourceVersion, the patch)
        self._drain_written: Dict[str, str] = {}  # node -> drain_mark its MCN was written with (none: "")
        self._marks_seen: Dict[str, Tuple[str, float]] = {}  # node -> (a drain_mark not written here, since)
        self._nodes: Dict[str, Tuple[Dict[str, Any], str]] = {}  # node -> (report, pool) not written yet
        self._nodes_changed = False
        self._sweep_due, self._swept_at = True, 0.0  # every Node's MCN: when Nodes or MCNs changed, once a second
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        # Whole Nodes (their conditions and spec.unschedulable count), each kept slim: only what
        # the rules read (nodestatus.slim_node: labels, the MCD's and our annotations, three conditions).
        self.node_cache = Reflector(client, NODES, self._node_seen, transform=slim_node)
        self.targets = TargetWriter(cluster, client, self.node_cache)  # desiredConfig and the taint (kube_targets)
        self.mcns = McnWriter(cluster, client, self._mcn_seen)  # a MachineConfigNode per Node (kube_mcn)
        # Two loops, so that a burst of node writes never delays a pool's status (nor the reverse).
        self._threads = [threading.Thread(target=self._loop, args=(self.sync_pools, None), name="kube-sync-pools",
                                          daemon=True),
                         threading.Thread(target=self._loop, args=(self.sync_nodes, self._wake),
                                          name="kube-sync-nodes", daemon=True)]

    def start(self) -> "KubeSync":
        self.cluster.report_listeners.append(self.note_report)
        self.cluster.pool_listeners.append(self.note_pool_event)
        self.node_cache.start()
        self.mcns.start()
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.node_cache.stop()
        self.mcns.stop()

    def note_report(self, node: str, body: Dict[str, Any], pool: Optional[str]) -> None:
        """Queue the node's write-back (the node loop); a Done that ends our drain writes the Node
        now, its annotations and the uncordon in one patch, as the MCD uncordons before it says
        Done: until then the Node counts as unavailable and holds a slot of its pool, and behind a
        queue of reports (three writes each) that took seconds at 1,000 nodes (docs/performance.md,
        "Rollout at fleet scale"). The node loop writes the rest (the MachineConfigNode), not this
        patch again."""
        obj = self.node_cache.get(node) if self._counts(node) else None  # never for an unbound report
        queued = dict(body, _at=time.time())
        if obj is not None and uncordon_patch((obj.get("metadata") or {}).get("annotations") or {}, body):
            try:
                _, ours, written = self._patch_node(node, body, pool or "", obj, self.source.reflectors[
                    "machineconfigpools"].snapshot(), self.cluster.store.pools())
                queued[EARLY] = (ours, written)  # the node loop writes the MCN only, not this patch again
            except (KubeUnavailable, KubeError) as exc:  # the node loop's patch uncordons it too
                log.warning("uncordoning Node %s: %s (the next write-back retries)", node, exc)
        with self._lock:
            self._nodes[node] = (queued, pool or "")
        self._wake.set()

    def note_node(self, node: str, written: Optional[Dict[str, Any]] = None) -> None:
        """Our drain moved ``node``'s drain state (drainpacer, in this process; ``written``: the Node
        as written): its MCN is written here, from that Node; the other processes leave it
        (``_unwritten``'s grace). A queued report keeps its place: its own Node patch comes first."""
        rec = self.cluster.store.node(node) if self._counts(node) else None
        if rec is None:
            return
        item = dict(rec.report, _at=rec.received, _rewrite=True)
        if isinstance(written, dict) and written.get("metadata"):
            slim = slim_node(written)
            item[EARLY] = (slim["metadata"].get("annotations") or {}, slim)
        with self._lock:
            held = self._nodes.get(node)
            if held is None or held[0].get("_rewrite"):
                self._nodes[node] = (item, rec.pool or "")
        self._wake.set()

    def note_pool_event(self, pool: str, kind: str, reason: str, message: str, component: str = NODE_CONTROLLER) -> None:
        """An Event on the pool (SetDesiredConfig ...), written now by the process that decided it."""
        obj = self.source.reflectors["machineconfigpools"].snapshot().get(pool)
        drainer = self.cluster.drainer
        if obj is not None and drainer is not None:
            pool_event(self.client, drainer.event_namespace, obj, kind, reason, message, component)
        self._wake.set()

    def drop(self, node: str) -> None:
        """The admin deleted ``node``: nothing queued for it is written any more (kube_undo.py
        takes back what was written: issue 45)."""
        with self._lock:
            self._nodes.pop(node, None)
        self._drain_written.pop(node, None)

    def _counts(self, node: str) -> bool:
        """Whether ``node``'s report (still) counts: recorded, and not pending (nor unproven). A
        write queued before the admin deleted the node, or queued by another process, is dropped."""
        rec = self.cluster.store.node(node)
        mark = rec.report.get("_server") if rec is not None else None
        return rec is not None and not (isinstance(mark, dict) and mark.get("pending"))

    def _node_seen(self) -> None:
        self._nodes_changed = self._sweep_due = True
        self._wake.set()

    def _mcn_seen(self) -> None:
        self._sweep_due = True
        self._wake.set()

    def _loop(self, step: Callable[[], None], wake: Optional[threading.Event]) -> None:
        """``step`` every ``interval`` (pools: coalesced, one status write per pool at most), or
        as soon as ``wake`` is set (nodes: a report, a Node that appeared)."""
        while not self._stop.is_set():
            if wake is None:
                self._stop.wait(self.interval)
            else:
                wake.wait(self.interval)
                wake.clear()
            try:
                step()
            except (KubeUnavailable, KubeError) as exc:
                log.warning("writing to the Kubernetes API: %s (retrying)", exc)
            except Exception:  # keep writing whatever one round hit
                log.exception("kube sync")

    def sync_pools(self) -> None:
        """Rendered configs, then each pool's status."""
        pools = self.source.reflectors["machineconfigpools"].snapshot()
        self._sync_rendered(pools)
        if self.cluster.node_truth is not None:
            self.cluster.step_pools()
        self._sync_pools(pools)
        self.targets.sync(pools)

    def sync_nodes(self) -> None:
        self._sync_nodes(self.source.reflectors["machineconfigpools"].snapshot())

    def _sync_rendered(self, pools: Dict[str, Dict[str, Any]]) -> None:
        from agent import __version__

        existing = self.source.reflectors["machineconfigs"].snapshot()
        for pool, row in self.cluster.store.pools().items():
            obj = pools.get(pool)
            for name in {row.target, row.current, row.rendered} - {"", None}:
                if name in self._created or name in existing or obj is None:
                    continue
                spec = self.cluster.spec_of(name)
                if spec is None:
                    continue
                body = rendered_object(name, pool, obj["metadata"].get("uid", ""), spec,
                                       f"node-config-server {__version__}")
                try:
                    self.client.create(MACHINE_CONFIGS.path(), body)
                    self.writes["rendered"] += 1
                    self.note_pool_event(pool, "Normal", *kube_pools.rendered_event(name, body["metadata"][
                        "annotations"][kube_pools.GENERATED_BY]), component=kube_pools.RENDER_CONTROLLER)
                except KubeError as exc:
                    if exc.status != 409:  # 409: another replica made it (same name, same content): its Event
                        raise
                self._created.add(name)

    def _sync_pools(self, pools: Dict[str, Dict[str, Any]]) -> None:
        views = self.cluster.pool_views(pending=False, nodes=0)
        for name, view in views.items():
            obj = pools.get(name)
            if obj is None:
                continue
            generation = self._sync_spec(name, obj, view["spec"]["configuration"]["name"])
            status = pool_status(view, generation, (obj.get("status") or {}).get("conditions"), iso8601(time.time()))
            current = status["configuration"]["name"]
            status["configuration"] = kube_pools.configuration(current, self.cluster.sources_of(current), obj)
            have = {k: v for k, v in (obj.get("status") or {}).items() if k in STATUS_FIELDS}
            if status in (have, self._written.get(name)):
                continue
            self.client.merge_patch(MACHINE_CONFIG_POOLS.path(name, sub="status"), {"status": status})
            self._written[name] = status
            self.writes["status"] += 1

    def _sync_spec(self, name: str, obj: Dict[str, Any], target: str) -> Any:
        """The pool's spec.configuration as the render controller writes it (kube_pools.spec_patch),
        when it differs; the pool's generation after it (the status's observedGeneration)."""
        meta = obj.get("metadata") or {}
        patch = kube_pools.spec_patch(obj, target, self.cluster.sources_of(target))
        if patch is None or self._spec_written.get(name) == (meta.get("resourceVersion"), patch):
            return meta.get("generation")
        written = self.client.merge_patch(MACHINE_CONFIG_POOLS.path(name), patch)
        self._spec_written[name] = (meta.get("resourceVersion"), patch)
        return ((written or {}).get("metadata") or {}).get("generation") or meta.get("generation")

    def _sync_nodes(self, pools: Dict[str, Dict[str, Any]]) -> None:
        with self._lock:
            pending, self._nodes = self._nodes, {}
        present = self.node_cache.snapshot()
        if self._nodes_changed:
            self._nodes_changed = False
            pending.update(self._unwritten(present, pending))
        failed: Dict[str, Tuple[Dict[str, Any], str]] = {}
        rows = self.cluster.store.pools() if pending else {}
        todo = []
        for node, (reported, pool) in pending.items():
            if not self._counts(node):  # deleted since, or a report that counts for nothing: never on a Node
                continue
            if node not in present:  # when the Node appears (its kubelet registers it)
                failed[node] = (reported, pool)
                continue
            todo.append((node, reported, pool))
        def write(node: str, reported: Dict[str, Any], pool: str) -> None:
            early = reported.pop(EARLY, None)
            if early is not None:  # note_report wrote this report's Node patch already
                body, (ours, written) = served_desired(rows, pool, node, reported), early
            else:
                body, ours, written = self._patch_node(node, reported, pool, present[node], pools, rows)
            self._write_node_object(node, body, pool, ours, written)

        done, away = write_back(todo, write, failed)
        self.writes["node"] += done
        if away:
            log.warning("writing %d node(s) back: %s (retrying)", len(failed), away)
        with self._lock:
            for node, item in failed.items():
                self._nodes.setdefault(node, item)
        if not away:
            self._sweep(present, pools)

    def _sweep(self, present: Dict[str, Dict[str, Any]], pools: Dict[str, Dict[str, Any]]) -> None:
        """Every Node's MachineConfigNode made or brought up to date, orphans deleted
        (kube_mcn.McnWriter.sweep), once the Nodes are listed, when Nodes or MCNs changed, once
        a second at most."""
        truth = self.cluster.node_truth
        now = time.time()
        if not self._sweep_due or now - self._swept_at < self.interval or truth is None or not truth.ready():
            return
        self._sweep_due, self._swept_at = False, now
        rows = self.cluster.store.pools()

        def counted(name: str) -> Optional[Tuple[Dict[str, Any], str]]:
            rec = self.cluster.store.node(name) if self._counts(name) else None
            if rec is None:
                return None
            return served_desired(rows, rec.pool, name, dict(rec.report, _rewrite=True, _at=rec.received)), rec.pool

        self.mcns.sweep(present, truth.pools_by_node(pools), counted, now, self._mine())
        self._sweep_due = self._sweep_due or self.mcns.waiting  # more to write, or an orphan's grace: next round

    def _patch_node(self, node: str, reported: Dict[str, Any], pool: str, node_obj: Dict[str, Any],
                    pools: Dict[str, Dict[str, Any]], rows: Dict[str, Any]) -> Tuple[Dict[str, Any], ...]:
        """The report's merge patch of the Node (node_patch; the uncordon when it ends our drain);
        returns (the report as written, the Node's annotations before it, the Node as written, slim)."""
        body = served_desired(rows, pool, node, reported)  # desiredConfig: the server's decision
        ours = (node_obj.get("metadata") or {}).get("annotations") or {}
        pivot = str(body.get("firstPivotConfig") or "")
        patch = node_patch(body, pools.get(pool), ours, self.cluster.pool_of_rendered(pivot) if pivot else None,
                           self.cluster.is_layered_pool(pool))
        # Done on the config it was drained for; a rewrite of a kept report never uncordons
        # (that report may predate the drain: only a fresh Done ends it).
        end = {} if body.get("_rewrite") else uncordon_patch(ours, body)
        if end:
            patch["spec"] = end["spec"]
            patch["metadata"]["annotations"].update(end["metadata"]["annotations"])
        if not patch_changes(patch, node_obj):  # a rewrite, or a report sent again: a write would change nothing
            return body, ours, node_obj
        written = self.client.merge_patch(NODES.path(node), patch)
        return body, ours, slim_node(written) if isinstance(written, dict) and written.get("metadata") else node_obj

    def _write_node_object(self, node: str, body: Dict[str, Any], pool: str, annotations: Dict[str, Any],
                           node_obj: Dict[str, Any]) -> None:
        """The node's MachineConfigNode for its counted report ``body`` (kube_mcn.McnWriter.write):
        ``node_obj`` the Node as just written (none: no MCN), ``annotations`` the Node's before this report
        (the config it ran); its pool the one the Node's labels put it in, its desired config the server's."""
        truth = self.cluster.node_truth
        member = (truth.pool_of(node, self.source.reflectors["machineconfigpools"].snapshot())[0]
                  if truth is not None and truth.ready() else None)
        body = served_desired(self.cluster.store.pools(), pool, node, body)
        self.mcns.write(node, node_obj, member, body, str(annotations.get(ANNOTATION + "currentConfig") or ""))
        meta = (node_obj or {}).get("metadata") or {}
        mark = drain_mark(meta.get("annotations") or {}, bool(((node_obj or {}).get("spec") or {}).get("unschedulable")))
        self._marks_seen.pop(node, None)
        if mark:
            self._drain_written[node] = mark
        else:
            self._drain_written.pop(node, None)

    def _mine(self) -> Callable[[str], bool]:
        """Whether this process writes a node's MCN on a change of its Node (kube_targets.owner_of):
        every process sees each change, and each wrote it before (a report's: the process took it)."""
        me, writers = self.targets.writers()
        return lambda name: len(writers) == 1 or owner_of(name, writers) == me

    def _unwritten(self, present: Dict[str, Dict[str, Any]], pending: Dict[str, Any]) -> Dict[str, Any]:
        """Nodes that appeared (or lost our annotations) since their report was recorded: a Node
        made by a kubelet after first boot, or a server restarted since; and Nodes whose drain
        state (drainpacer's annotations) moved since their MachineConfigNode was written, for its
        Drained condition. O(nodes) only when the Node cache changed."""
        out = {}
        mine, now = self._mine(), time.time()
        for name, obj in present.items():
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            mark = drain_mark(annotations, bool((obj.get("spec") or {}).get("unschedulable")))
            known = ANNOTATION + "state" in annotations
            if name in pending or (known and mark == self._drain_written.get(name, "")) or not mine(name):
                continue  # not mine: every process saw the change, and two wrote each
            seen = self._marks_seen.setdefault(name, (mark, now))
            if known and (seen[0] != mark or now - seen[1] < MARK_GRACE):  # the drain's process writes it
                self._marks_seen[name] = seen if seen[0] == mark else (mark, now)
                self._nodes_changed = True  # looked at again next round
                continue
            rec = self.cluster.store.node(name)
            mark = rec.report.get("_server") if rec is not None else None
            if rec is not None and not (isinstance(mark, dict) and mark.get("pending")):
                out[name] = (dict(rec.report, _at=rec.received, _rewrite=True), rec.pool or "")
        return out
