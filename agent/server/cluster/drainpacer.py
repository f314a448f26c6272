"""A node's drain paced as the MCO's drain controller paces it, its state on the Node for every
replica, and its Events. The MachineConfigNode's ``Drained`` condition follows from that state:
kube_sync, the one writer of an MCN's conditions, rewrites them when the Node's drain annotations
change (two writers of one list lost each other's conditions: a flaky test showed it).

The cadence itself (when to attempt, when it has failed) is pure: agent/server/rollout/
draincadence.py. This module reads the Node, asks draincadence what this ask of the node leads
to, writes the new state as annotations with the Node's resourceVersion as a precondition (two
replicas answering the same node at once: one starts the attempt and emits its Event, the other
gets 409, reads again and follows), runs the round (kube_drain.drain_for_lease) when an attempt
is under way, and says how long the node should wait otherwise.

A drain's first attempt writes the cordon and our mark only (the same precondition); its state
follows only when the round leaves pods on the Node (ours, issue 53). A drain with nothing to
evict was two Node writes, its state written and at once removed; it is now one. Upstream's
drain controller keeps its ongoing drains in memory (drain_controller.go ``drainNode``:
``ctrl.ongoingDrains``) and writes the Node's cordon and, once drained, its ``lastAppliedDrain``
(``syncNode``; the stored version read is newer than 7ff337a4). A Node cordoned with our
mark and no state is such a first attempt (or a finished drain): an ask runs its round again
without a write. Were the process to die within the round, the Node would show that for the 5 s
after which another process writes the node's MachineConfigNode (kube_sync ``MARK_GRACE``): Drained
for a round that had not finished, until the node's next ask.

No drain at all on a single-node cluster (Infrastructure ``cluster``,
status.controlPlaneTopology SingleReplica: the MCD's drainRequired, pkg/daemon/drain.go), and none
while the topology cannot be read (agent/server/cluster/topology.py: unknown, retried).
"""

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from agent.server.cluster import kube_events
from agent.server.cluster.kube_drain import DRAINED_FOR, RETRY_SECONDS, DrainResult, drain_for_lease
from agent.server.rollout import draincadence
from agent.server.rollout.draincadence import Cadence, DrainState
from agent.server.store.kube.client import NODES, KubeError, KubeUnavailable

log = logging.getLogger(__name__)

# Events go to the server's own namespace (Drainer.event_namespace, serve --namespace), as the MCO
# writes its Events into its own (openshift-machine-config-operator), under its node controller's name.
COMPONENT = kube_events.NODE_CONTROLLER
MAX_WAIT = 60  # a node told to wait longer still asks within a minute (its lease is renewed on each ask)


@dataclass
class Paced:
    """One ask's outcome: ``result`` of the round run (None: none ran), ``wait`` seconds before the
    next ask while not done, ``skipped`` why no drain happens at all, ``state`` as written."""
    done: bool
    result: Optional[DrainResult] = None
    wait: int = RETRY_SECONDS
    skipped: str = ""
    unknown: str = ""  # why it is not known whether a drain is allowed (topology): nothing done, ask again
    state: DrainState = field(default_factory=DrainState)
    events: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"required": not self.skipped}
        if self.skipped or self.unknown:
            out["reason"] = self.skipped or self.unknown
        if self.result is not None:
            out.update(self.result.to_dict())
        if self.state.active:
            out["state"] = self.state.to_dict()
        return out


def paced_drain(drainer: Any, node: str, config: str, now: Optional[float] = None) -> Optional[Paced]:
    """The node holding its lease asks again. None: no Node of that name (nothing to drain)."""
    topology, unknown = drainer.topology.read(drainer.client)
    if unknown:  # fail closed: it may be a single-node cluster
        return Paced(done=False, wait=max(1, int(drainer.topology.retry_seconds)), unknown=unknown)
    required, why = draincadence.drain_required(topology)
    if not required:
        return Paced(done=True, skipped=why)
    cadence: Cadence = drainer.cadence or Cadence()
    now = time.time() if now is None else now
    for _ in range(3):  # 409: another replica moved the state meanwhile; read it again
        try:
            obj = drainer.client.get(NODES.path(node))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        meta = obj.get("metadata") or {}
        state = draincadence.from_annotations(meta.get("annotations") or {})
        step = draincadence.begin(state, cadence, node, now)
        first = step.run and not state.active  # a drain's first attempt: its state only if its round leaves pods
        if step.changed and not (first and marked(obj, config)):
            try:  # an attempt that runs now cordons in the same write (one Node write, not three)
                written = _write_state(drainer, node, DrainState() if first else step.state, meta.get("resourceVersion"),
                                       config, cordon=step.run, mark=first)
            except KubeError as exc:
                if exc.status == 409:
                    continue
                raise
            _emit(drainer, obj, step.events, now)
            obj = written if isinstance(written, dict) and written.get("metadata") else obj
        break
    else:
        raise KubeUnavailable(f"node {node}: its drain state kept changing under three reads (other replicas); "
                              f"the node asks again")
    out = Paced(done=False, state=step.state, events=[reason for reason, _ in step.events])
    if not step.run:
        if step.changed:
            drainer.on_node_written(node, obj)
        if not (obj.get("spec") or {}).get("unschedulable"):
            drainer.cordon(node)  # uncordoned by someone between attempts: cordoned again (MCO PR #5305)
            drainer.on_node_written(node)
        out.wait = max(1, min(MAX_WAIT, int(step.wait + 0.999)))
        return out
    result = drain_for_lease(drainer, node, config, obj)
    if result is None:
        return None
    state, changed = draincadence.after_round(step.state, result.done, blocker(result))
    changed = changed and not (first and result.done)  # a first round that finished: no state was written
    if changed:
        if state.active and not first:  # only the blocker: another replica may have moved the attempt meanwhile
            written = drainer.client.merge_patch(NODES.path(node), {"metadata": {"annotations": {
                draincadence.LAST_ERROR: draincadence.annotations(state)[draincadence.LAST_ERROR]}}})
        else:
            written = _write_state(drainer, node, state, None, config)
        obj = written if isinstance(written, dict) and written.get("metadata") else obj
    if changed or step.changed:  # one MCN write for this ask's state: the cordon and the round's end together
        drainer.on_node_written(node, obj)
    out.done, out.result, out.state = result.done, result, state
    return out


def end_drain(drainer: Any, node: str) -> None:
    """Give a drain up (ours: deferred past a PodDisruptionBudget): the Node uncordoned and its drain
    state removed in one write, what the Drainer evicted forgotten; the pods it evicted are gone
    already, those the budget protects stay."""
    patch = {"spec": {"unschedulable": None},
             "metadata": {"annotations": dict(draincadence.annotations(DrainState()), **{DRAINED_FOR: None})}}
    written = drainer.client.merge_patch(NODES.path(node), patch)
    drainer.forget(node)
    drainer.on_node_written(node, written)


def held_by_budget(paced: "Paced") -> bool:
    """Whether a PodDisruptionBudget holds the drain: the last round's evictions were refused (429),
    or, between attempts, the last error names one."""
    if paced.result is not None and (paced.result.blocked or paced.result.too_many_requests):
        return True
    return "PodDisruptionBudget" in paced.state.last_error or "429" in paced.state.last_error


def blocker(result: DrainResult) -> str:
    """What holds a round: the PDB behind a 429 (named), a failed or refused pod, else the pods
    still there (evicted, terminating)."""
    held = [f"{p}: {m}" for p, m in result.blocked] + [f"{p}: {m}" for p, m in result.failed] + result.errors
    if held:
        return "; ".join(held)
    if result.still_running:
        return f"{len(result.still_running)} pod(s) still on the node: {', '.join(result.still_running[:5])}"
    return ""


def _write_state(drainer: Any, node: str, state: DrainState, version: Optional[str], config: str,
                 cordon: bool = False, mark: bool = False) -> Any:
    """The drain state's annotations on the Node (with ``cordon``, the cordon in the same patch;
    ``mark``: our cordon's mark with no state, a first attempt's write); returns the Node as written."""
    ours = state.active or mark
    meta: Dict[str, Any] = {"annotations": draincadence.annotations(state)}
    if ours and version:
        meta["resourceVersion"] = version  # a precondition: 409 when another replica wrote first
    if ours:
        meta["annotations"][DRAINED_FOR] = config or "-"
    patch: Dict[str, Any] = {"metadata": meta}
    if cordon and ours:
        patch["spec"] = {"unschedulable": True}
    return drainer.client.merge_patch(NODES.path(node), patch)


def marked(node_obj: Dict[str, Any], config: str) -> bool:
    """Whether the Node is cordoned with our mark for ``config`` and no drain state: a first attempt
    another ask started (or a drain that finished), whose round this ask runs again without a write."""
    meta = node_obj.get("metadata") or {}
    return bool((node_obj.get("spec") or {}).get("unschedulable")) and \
        (meta.get("annotations") or {}).get(DRAINED_FOR) == (config or "-")


def _emit(drainer: Any, node_obj: Dict[str, Any], events: Any, now: float) -> None:
    """core/v1 Warning Events on the Node, as the MCO's recorder makes them (involvedObject the
    Node, in the server's namespace), the MCO's node controller as the source; a repeat counts up
    one Event per Node and reason (kube_events.py). A refused write is logged: the state
    annotations and the metric still say it."""
    name = str((node_obj.get("metadata") or {}).get("name", ""))
    stamp = draincadence.iso(now)
    involved = kube_events.reference(node_obj, "v1", "Node", drainer.event_namespace)
    for reason, message in events:
        log.warning("node %s: %s: %s", name, reason, message)
        kube_events.record(drainer.client, drainer.event_namespace,
                           kube_events.event_body(involved, drainer.event_namespace, reason, message, stamp,
                                                  "Warning", COMPONENT))


def active_drains(drainer: Any) -> Dict[str, DrainState]:
    """Every Node with a drain under way, from the Node cache (no API call), worked out again only
    when the cache has changed; empty without the Kubernetes backend."""
    cache = drainer.node_cache
    if cache is None:
        return {}
    version = cache.version
    memo = drainer.active_memo
    if memo is not None and memo[0] == version and version:
        return memo[1]
    out = {}
    for name, obj in cache.snapshot().items():
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if draincadence.STARTED in annotations:
            state = draincadence.from_annotations(annotations)
            if state.active:
                out[name] = state
    drainer.active_memo = (version, out)
    return out


def drain_view(drainer: Any, holders: List[str], pool: str = "",
               pool_of: Optional[Callable[[str], Optional[str]]] = None) -> Dict[str, Any]:
    """``status.drain.nodes`` of a pool view: each node of the pool with a drain under way: its
    lease holders, and (``pool_of``) a node that gave its lease up while its Node stays cordoned
    and draining (node-agent's update.drainTimeout ran out), so that no drain is out of sight."""
    active = active_drains(drainer)
    out = {name: state.to_dict() for name, state in active.items()
           if name in holders or (pool_of is not None and pool_of(name) == pool)}
    return {"nodes": dict(sorted(out.items()))} if out else {}


def node_drain(drainer: Any, node: str) -> Optional[Dict[str, Any]]:
    """One node's drain under way (``GET /api/v1/nodes/<node>``'s ``drain``), None otherwise."""
    state = active_drains(drainer).get(node)
    return state.to_dict() if state is not None else None
