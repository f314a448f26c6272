"""The server's imperative core: state directory + node store, tied together by ``reconcile``.

``reconcile`` renders every pool, stores new rendered configs, and moves each pool's target
and current per ``progress.rollout_step``. Node state lives in a ``nodestore.NodeStore`` whose
counters and proofs are updated per report, so after a report only the pools it touches are
stepped (O(1), not O(nodes)); each pool's step is an atomic read-modify-write, so several
gunicorn workers doing it at once agree. A full reconcile runs when a worker sees a new state
directory (and re-assigns every node's pool once when the pools' selectors changed).

A config fetch costs one store round trip (``NodeStore.serving``); what it decides is memoised
on its inputs (state, target, current, proof count, membership), shared by the worker's
threads, so reports never invalidate the rendered bodies.
"""

import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent.core.objectchecks import parse_max_unavailable
from agent.server.cluster import poolview, renderreview
from agent.server.cluster.approval import Approval
from agent.server.cluster.firstbootfacts import with_current_image, with_first_boot_facts
from agent.server.cluster.firstbootview import FirstBoots
from agent.server.cluster.poolqueue import Bell
from agent.server.cluster.replicaview import ReplicaView
from agent.server.cluster.reports import ReportInvalid, validate_report  # noqa: F401 - the API's names
from agent.server.cluster.rolloutctl import RolloutControl
from agent.server.cluster.serving import ConfigServing, Fetch, UnknownPool  # noqa: F401 - the API's names
from agent.server.rollout import gating, nodestatus, progress, renderstatus, rolloutstatus
from agent.server.rollout.drains import DEFAULT_TTL
from agent.server.rollout.render import Rendered, inputs_key, render_pool
from agent.server.store.errors import StoreUnavailable
from agent.server.store.nodestore import SERVER_KEY, NodeStore, PoolRow, counts_for
from agent.server.store.objectsource import ObjectSource
from agent.server.store.sqlite.db import Database
from agent.server.store.sqlite.nodestore import SqliteNodeStore
from agent.server.store.statedir.watcher import StateWatcher
from agent.server.store.stateformat import State

log = logging.getLogger(__name__)

STORE_RETRY = 2.0  # seconds between attempts to write to a shared store that is away
VIEW_NODES = 100  # nodes listed in a pool view; all of them: /api/v1/nodes (paged)
_UNSET = object()


MEMBERSHIP_RULE = 2


def membership_signature(st: State) -> str:
    """What node membership depends on in the state: the pools and their node selectors."""
    sel = {name: (pool.get("spec") or {}).get("nodeSelector") for name, pool in st.pools.items()}
    # The rule's version is part of it: a store written before matchExpressions selected nodes
    # (progress._selects) re-derives every node's pool once.
    sel["//rule"] = MEMBERSHIP_RULE
    return hashlib.sha256(json.dumps(sel, sort_keys=True, default=str).encode()).hexdigest()[:32]


class Cluster(Approval, ConfigServing, ReplicaView, RolloutControl, FirstBoots):
    def __init__(self, state_dir: Optional[str], db_path: Optional[str] = None, lease_ttl: float = DEFAULT_TTL,
                 reload_interval: float = 1.0, store: Optional[NodeStore] = None, watcher: Any = None,
                 settle: Optional[float] = None, alert_source: Any = None):
        """``store`` and ``watcher`` (a state source with ``current()``) default to SQLite at
        ``db_path`` and polling of the state directory (backends.open_backends gives etcd's).
        ``db_path`` defaults to nodes.db in the state directory, for library use and tests on a
        scratch copy; the command line always passes its data directory's (serve --data-dir)."""

        self.state_dir = state_dir
        self.db = Database(db_path or os.path.join(state_dir, "nodes.db")) if store is None else None
        self.store: NodeStore = store or SqliteNodeStore(self.db)
        self.watcher: ObjectSource = watcher or StateWatcher(state_dir, reload_interval, settle)
        self._heartbeat: Any = None
        self.store_error = ""  # why the last write to the shared store failed ("" = it did not)
        self._store_retry_at = 0.0
        self.lease_ttl = lease_ttl
        self._reconciled_sig = None
        self._lock = threading.Lock()
        self._rendered: Dict[str, Rendered] = {}
        self._by_name: Dict[str, Rendered] = {}
        self._old_specs: Dict[str, Dict[str, Any]] = {}
        self._cache: OrderedDict[Tuple, Tuple[bytes, str, str, Tuple[str, ...]]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._flights: Dict[Tuple, threading.Lock] = {}
        self._decisions: Dict[Tuple, Any] = {}  # shared by threads; keyed on every input
        self.cache_size = 64
        # called with (node, report, pool) after a report is recorded (kube_sync writes the Node)
        self.report_listeners: List[Callable[[str, Dict[str, Any], Optional[str]], None]] = []
        # called with (pool, type, reason, message) by the process that decided it (kube_sync: an Event on the pool)
        self.pool_listeners: List[Callable[[str, str, str, str], None]] = []
        # called with (node, its record before) after the admin deleted a node (kube_sync undoes its writes)
        self.delete_listeners: List[Callable[[str, Any], None]] = []
        self.drainer: Any = None  # the Kubernetes backend's (kube_drain.Drainer): a lease drains the Node
        self.node_truth: Any = None  # the Kubernetes backend's (kube_nodes.NodeTruth): pools from Node objects
        self.bell = Bell()
        self.alert_source = alert_source  # serve --prometheus-url's (alertsource.py): known to the first step too
        self._summaries: Dict[str, Tuple[Any, Any, Dict[str, Any]]] = {}  # pool -> (members, inputs, status.rollout)
        self.reconcile(force=True)

    # -- state and reconcile -----------------------------------------------------------------

    def state(self, seen: Any = _UNSET) -> State:
        """The state this worker serves. ``seen``: the signature the store holds, when the
        caller already read it (a fetch reads it in its one round trip)."""
        st = self.watcher.current()
        if seen is _UNSET:
            seen = self.store.meta("state_signature")
        if seen is not None and seen != st.signature:
            # Another worker has seen different files: look now, so that every worker serves
            # the same state as soon as one of them has noticed a change (no flip-flop).
            st = self.watcher.current(check_now=True, settled=seen)
        if st.signature != self._reconciled_sig:
            self.reconcile()
        return st

    def render_all(self, st: State) -> Dict[str, Rendered]:
        return {name: self._render_shared(name, pool, st) for name, pool in st.pools.items()}

    def _render_shared(self, name: str, pool: Dict[str, Any], st: State, wait: float = 30.0) -> Rendered:
        """One worker renders a pool's inputs, the others read its result from the store."""
        key = inputs_key(pool, st.machine_configs)
        deadline = time.monotonic() + wait
        while True:
            hit = self.store.rendered_for(key)
            if hit is not None:
                return Rendered(pool=name, name=hit[0], spec=hit[1], sources=tuple(hit[2]))
            if self.store.claim_render(key, time.time(), stale_after=wait) or time.monotonic() > deadline:
                r = render_pool(pool, st.machine_configs)
                self.store.put_rendered(name, r.name, r.spec, list(r.sources), inputs=key)
                return r
            time.sleep(0.05)  # another worker is rendering these inputs

    def reconcile(self, force: bool = False) -> None:
        """Render and move the pools; while the shared store is away, keep serving what this
        process has and try again at most every STORE_RETRY seconds (a fetch never waits on it)."""
        if not force and time.monotonic() < self._store_retry_at:
            return
        try:
            self._reconcile(force)
        except StoreUnavailable as exc:
            self.store_error = str(exc)
            self._store_retry_at = time.monotonic() + STORE_RETRY
            log.warning("store unavailable, serving what this replica has: %s", exc)
            if self._reconciled_sig is None and not self._rendered:
                raise
        else:
            self.store_error = ""

    def _reconcile(self, force: bool = False) -> None:
        with self._lock:
            st = self.watcher.current()
            fresh = st.signature != self._reconciled_sig
            if not fresh and not force:
                # Another caller reconciled this state while this one waited for the lock: a new
                # state wakes every held fetch at once (the pools' bell), and each of them, having
                # seen it before it was reconciled, stepped every pool again here, one after the
                # other: 1,000 steps, 9 s, before the first wave was told its turn.
                return
            if fresh:  # membership (firstPivotConfig) must know the new names before counting
                rendered = self.render_all(st)
                self._rendered = rendered
                self._by_name = {r.name: r for r in rendered.values()}
                self._decisions = {}
            self.store.set_meta("state_signature", st.signature)
            sig = membership_signature(st)
            if self.store.membership_signature() != sig:
                n = self.store.rebuild(sig, lambda report: progress.membership(report, st.pools,
                                                                               self.pool_of_rendered))
                log.info("node membership recomputed for %d node(s): the pools changed", n)
            for name in sorted(self._rendered):
                self._step_pool(st, name)
            self._reconciled_sig = st.signature

    def step_pools(self) -> None:
        """Step every pool from its counts now: with Node objects (kube_sync, once a second) a
        Node that turned Ready or was relabelled moves numbers that no report announced."""
        st = self.state()
        for name in sorted(self._rendered):
            self._step_pool(st, name)

    def _layered(self, st: State, pool: str, config: str) -> Optional[str]:
        key = ("image", st.signature, pool, config)
        if key not in self._decisions:
            self._remember(key, gating.layered_image(pool, config, st.os_configs, st.os_builds))
        return self._decisions[key]

    def render_failure(self, st: State, pool: str) -> List[str]:
        """Why ``pool`` cannot be rendered from ``st`` (empty: it can): renderstatus.py, once per state."""
        key = ("render", st.signature)
        failures = self._decisions.get(key)
        if failures is None:
            failures = renderstatus.render_failures(st.pools, st.machine_configs, st.os_configs,
                                                    st.rejected if st.attributable else (), st.unattributed())
            self._remember(key, failures)
        return failures.get(pool, [])

    def is_layered_pool(self, pool: str) -> bool:
        """Whether a MachineOSConfig opts ``pool`` in to image mode (its nodes carry currentImage)."""
        return gating.os_config_for_pool(pool, self.state().os_configs) is not None

    def _remember(self, key: Tuple, value: Any) -> None:
        if len(self._decisions) > 4096:  # bounded: inputs that no longer occur fall out
            self._decisions = {}
        self._decisions[key] = value

    def _counts(self, st: State, pool: str, target: str) -> progress.Counts:
        image = self._layered(st, pool, target)
        if self.node_truth is not None and self.node_truth.ready():  # --backend kubernetes: the Nodes decide
            return self.node_truth.counts(pool, st.pools, target, image)
        return counts_for(self.store.counts(pool), self.store.proof(pool, target, image))

    def pool_of_rendered(self, name: str) -> Optional[str]:
        r = self._by_name.get(name)
        return r.pool if r is not None else self.store.rendered_pool(name)

    # -- views -----------------------------------------------------------------------------

    def pool_views(self, only: Optional[str] = None, pending: bool = True,
                   nodes: int = VIEW_NODES) -> Dict[str, Dict[str, Any]]:
        """MachineConfigPool views, O(pools): counts come from the store's counters, and at
        most ``nodes`` nodes are listed per pool (``status.nodesTruncated`` says when more)."""
        st = self.state()
        rows = self.store.pools()
        views = {}
        for name, pool in sorted(st.pools.items()):
            row = rows.get(name)
            if row is None and self.render_failure(st, name):  # never rendered: its status still says why
                row = PoolRow(name, "", "", "", "", {})
            if row is None or (only is not None and name != only):
                continue
            views[name] = self._view(st, name, pool, row, pending, nodes)
        return views

    def _base_images(self, *names: str) -> Dict[str, str]:
        return {n: (self.spec_of(n) or {}).get("osImageURL", "") for n in names}

    def sources_of(self, rendered_name: str) -> Optional[List[str]]:
        """The MachineConfigs ``rendered_name`` was rendered from, when this process rendered it."""
        r = self._by_name.get(rendered_name)
        return list(r.sources) if r is not None else None

    def is_empty_rendering(self, rendered_name: str) -> bool:
        r = self._by_name.get(rendered_name)
        return r is not None and not r.sources

    def spec_of(self, rendered_name: str) -> Optional[Dict[str, Any]]:
        r = self._by_name.get(rendered_name)
        if r is not None:
            return r.spec
        # Rendered configs never change under a name: older ones are cached once read.
        spec = self._old_specs.get(rendered_name)
        if spec is None:
            spec = self.store.rendered_spec(rendered_name)
            if spec is not None:
                if len(self._old_specs) > 16:
                    self._old_specs.clear()
                self._old_specs[rendered_name] = spec
        return spec

    def _view(self, st: State, name: str, pool: Dict[str, Any], row: PoolRow, pending: bool,
              max_nodes: int) -> Dict[str, Any]:
        target, current = row.target, row.current
        image = self._layered(st, name, target)
        pc = self.store.counts(name)
        counts = self._counts(st, name, target)
        served = gating.decide(name, target, current, counts.updated, self._base_images(target, current),
                               st.os_configs, st.os_builds, self._current_proof(st, name, row, counts.updated))
        spec = dict(pool.get("spec") or {})
        spec["configuration"] = {"name": target}
        limit = parse_max_unavailable(spec.get("maxUnavailable"), counts.machine)
        listed = self._listed(name, counts, max_nodes)
        if counts.degraded and not counts.degraded_reasons and counts.unavailable is None:  # the node store's
            named = listed or self._listed(name, counts, VIEW_NODES)  # a view listing none: read them all the same
            counts.degraded_reasons = poolview.degraded_reasons(named, counts.degraded)
        status: Dict[str, Any] = {
            "configuration": {"name": current},
            "rendered": row.rendered or "",
            "observedGeneration": 1,
            **counts.to_status(),
            "nodeStates": {"Done": pc.done, "Working": pc.working, "Degraded": pc.reported_degraded},
            "served": served.to_dict(),
            "held": row.held or "",
            "layeredImage": image or "",
            "nodes": listed,
            "drain": {"maxUnavailable": limit,
                      "holders": sorted(lease["node"] for lease in self.store.leases(pool=name))},
        }
        if self.drainer is not None:  # the Kubernetes backend: each drain under way in the pool, blocker named
            from agent.server.cluster.drainpacer import drain_view

            status["drain"].update(drain_view(self.drainer, status["drain"]["holders"], name,
                                              lambda n: getattr(self.store.node(n), "pool", None)))
        if counts.machine > len(listed):
            status["nodesTruncated"] = True
        waiting = self.waiting_for_approval(name) if max_nodes > 0 else []  # kept, counted in nothing
        if waiting:
            status["waitingForApproval"] = {"count": len(waiting), "nodes": waiting[:max_nodes]}
        status["rollout"] = self._rollout_view(st, name, row, image, limit, max_nodes)
        if spec.get("paused"):  # nothing updates while paused: no end to estimate (rolloutstatus.summary's assumes it goes on)
            status["rollout"].pop("estimate", None)
        status["firstBoots"] = self.first_boot_summary(name, deadlines=self.first_boot_deadlines(st))  # decided now
        disruption = poolview.pending_disruption(self.spec_of, st.cluster_spec, current, target) if pending else None
        if disruption is not None:
            status["pendingDisruption"] = disruption
        history = self.store.history(name)
        status["conditions"] = poolview.conditions(counts, target, current, row.as_dict(), history,
                                                  self.render_failure(st, name), bool(spec.get("paused")), name)
        renderreview.add_to_view(self, st, name, row, status)  # ours: validator warnings, a rendering held for review
        return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
                "metadata": poolview.metadata(pool, history), "spec": spec, "status": status}

    def _rollout_view(self, st: State, name: str, row: PoolRow, image: Optional[str], limit: int,
                      max_nodes: int) -> Dict[str, Any]:
        """``status.rollout``: who updates, who waits and why, who failed or was deferred, and an
        estimate of the end (rolloutstatus.summary, O(nodes): made once for each list of members,
        the one the pool's last step read while nothing was stored since: members_seen); a view
        listing no node (the status writes, /metrics) gets only what the pool's row says (halted,
        why the others wait, the window)."""
        if max_nodes <= 0:
            keep = {"halted": "halted", "waiting": "waitReason", "window": "window", "blockingPods": "blockingPods",
                    "alerts": "alerts"}
            return {"target": row.target, **{out: row.rollout[k] for k, out in keep.items() if row.rollout.get(k)}}
        members = self.members_seen(st, name)
        inputs = (row, image, limit)
        kept = self._summaries.get(name)
        if kept is None or kept[0] is not members or kept[1] != inputs:  # once per step of the pool at most
            kept = (members, inputs, rolloutstatus.summary(members, row.rollout, row.target, image, limit, time.time()))
            self._summaries[name] = kept
        return dict(kept[2])

    def _listed(self, pool: str, counts: progress.Counts, limit: int) -> Dict[str, Dict[str, Any]]:
        """The first ``limit`` nodes of the pool: its Nodes with the Kubernetes backend, else the store's."""
        if limit <= 0:
            return {}
        if self.node_truth is not None and self.node_truth.ready():
            return self.node_truth.entries(counts.nodes[:limit])
        return {rec.node: poolview.node_entry(rec) for rec in self.store.nodes(pool=pool, limit=limit)}

    # -- reports and drains ------------------------------------------------------------------------

    def node_pool(self, node: str) -> Optional[progress.Membership]:
        rec = self.store.node(node)
        return rec.membership() if rec is not None else None

    def record_report(self, node: str, body: Dict[str, Any]) -> Dict[str, Any]:
        st = self.state()
        reg = self.store.registration(node)
        previous = self.store.node(node)
        first_boot = bool(body.get("firstPivotConfig")) and body.get("state") != "Done"
        before, now = (previous.report if previous is not None else None), time.time()
        body = with_current_image(before, with_first_boot_facts(before, body))
        body = self.with_first_boot(before, body, reg.created if reg is not None else None, now)
        body = self._marked(st, node, body, reg)
        if first_boot:  # not a member the server targets until its first boot is Done (rolloutctl.counted)
            body[SERVER_KEY] = dict(body.get(SERVER_KEY) or {}, firstBoot=True)
        member = progress.membership(body, st.pools, self.pool_of_rendered)
        recorded = self.store.record_report(node, body, member, now)
        self.first_boot_ended(member.pool, before, body)
        event = nodestatus.revert_event(node, before, body)  # ours: the node reverted an update (its health check)
        if event is not None and member.pool:
            self.pool_event(member.pool, *event)
        mark = body.get(SERVER_KEY) or {}
        if not mark.get("pending"):  # a report that counts for nothing is never written to a Node (issue 45)
            for listener in self.report_listeners:  # a Done that ends our drain: the uncordon is written here,
                listener(node, body, member.pool)  # before the step that gives its slot to the next node
        # Only the pools this node left or joined can step (their counters moved), on the queue's
        # thread: the report is answered at once, whatever the fleet's size (poolqueue.py).
        self.wake_pools((member.pool, recorded.previous_pool))
        out = {"node": node, "pool": member.pool, "membership": member.why, "accepted": True,
               "leaseReleased": recorded.released}
        if member.degraded:
            out["degradedReason"] = member.degraded
        if mark.get("pending"):
            out["approval"] = "Pending"
            out["counted"] = False
            out["note"] = f"node {node}'s report is kept but counts for nothing: {self.unbound(reg)}"
        elif mark.get("proof") is False:
            out["proof"] = False
            out["note"] = (f"{body.get('currentConfig')} was never served to node {node}: it counts as a node "
                           f"but proves nothing for the rollout gate")
        return out

    def delete_node(self, node: str) -> Dict[str, Any]:
        """Forget a node (admin): its report, counters, proofs, lease and credential; the pool it
        counted in steps again (its counters moved). With the Kubernetes backend the delete
        listeners (kube_sync) then take back what the name made the server write on its Node and
        MachineConfigNode (issue 45)."""
        before = self.store.node(node)
        deleted = self.store.delete_node(node, time.time())
        for listener in self.delete_listeners:
            listener(node, before)
        self.wake_pools((deleted.previous_pool,))
        return {"node": node, "deleted": deleted.existed, "pool": deleted.previous_pool or "",
                "leaseReleased": deleted.lease_pool is not None}

    def max_unavailable(self, pool: str) -> int:
        """The pool's maxUnavailable scaled to its machines (its Nodes with the Kubernetes backend)."""
        st = self.state()
        value = (st.pools[pool].get("spec") or {}).get("maxUnavailable")
        row = self.store.pools().get(pool)
        machines = self._counts(st, pool, row.target).machine if row is not None else self.store.counts(pool).machine
        return parse_max_unavailable(value, machines)

    def drain_limit(self, pool: str, node: str = "", settled: Sequence[str] = ()) -> int:
        """The drain slots ``node`` may take a lease in: maxUnavailable; with Node objects
        (kube_nodes.py) less every other unavailable Node of the pool but ``settled``, as upstream."""
        st = self.state()
        value = (st.pools[pool].get("spec") or {}).get("maxUnavailable")
        if self.node_truth is not None and self.node_truth.ready():
            return self.node_truth.drain_limit(self, st, pool, value, node, settled)
        return parse_max_unavailable(value, self.store.counts(pool).machine)


def now() -> float:
    return time.time()
