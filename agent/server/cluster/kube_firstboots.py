"""First boots on the Kubernetes API (``--backend kubernetes``): Events and the MachineConfigNode's
condition when a first boot fails or stalls, and when it comes back after that.

A node whose first boot fails before kubelet starts has no Node object: upstream's answer, the
open MCO-2224 (openshift/machine-config-operator PR #6124, pkg/server/failure_reporter.go), is a
Warning Event ``FirstbootFailed`` on the node's MachineConfigPool, its message ``Node <node>
failed during firstboot at stage '<stage>': <error, 200 characters> (image: <registry>)``, its
source the machine-config-server, in the MCO's namespace. We write that Event, with upstream's
reason, message and involved object, and beside it (ours):

- the same Event on the node's MachineConfigNode (made for it when there is none yet, as the
  Kubernetes node store makes one at a node's first report), whose condition
  ``node-agent.openshift.io/FirstBootComplete`` (agent/server/rollout/mcnconditions.py) says the
  first boot's outcome;
- ``FirstBootStalled`` (Warning) for a first boot no report came from within its deadline, which
  upstream cannot see (agent/server/rollout/firstboots.py ``decide``), naming the last stage;
- ``FirstBootResumed`` / ``FirstBootCompleted`` (Normal) when a first boot that was announced
  failed or stalled reports again, or is Done, so that the Warning is not the last word.

All that is for a name that binds a Node (proven by its kubelet's client certificate, or approved
by the admin: approval.py ``unbound``). A first boot runs before the kubelet starts, so with this
backend nearly every first boot reports as a name not proven yet (pending), and such a report is
never written to a Node or an MCN (issue 45). For it:

- no Node object of that name: its Events go on the pool only (as MCO-2224's, which the MCS writes
  for a node it does not authenticate either), their message ending ``(not proven yet: its
  registration is pending)``; no MCN is made or written for it;
- a Node object of that name exists: nothing at all. A bootstrap-token holder makes no Event
  about a real Node's name (issue 45); the real node's first boot, once its kubelet's
  certificate proves the name, is announced as any other.

A pending name claiming the master pool is in no pool (progress.membership): no Event either.
A name that binds later while its first boot is failed or stalled is announced again, on its
pool and its MCN, as a name that binds a Node. A name that binds a Node whose Node object does not
exist yet (approved by the admin before its kubelet registered) has no MCN either (kube_mcn makes
one per Node: issue 48): its Events go on the pool only, as a pending name's, without the
"not proven" words, and on its MCN too once its Node appears.

Once per transition, by one replica: each replica decides every open first boot once a second
from the shared store (a stall is a function of the record and now). For a name that binds a
Node, a transition is taken by writing its token into the MCN's annotation
``node-agent.openshift.io/first-boot-event`` with the MCN's resourceVersion as a precondition; the
replica whose write the API takes writes the condition and records the Events, the others read
the annotation and follow. The condition is kept as decided at every change of outcome, with or
without an Event (running, done after running; kube_sync writes it too, at each report). These Events are
named as client-go names them (``<object>.<UnixNano in hex>``), so ``kubectl get events`` lists
each object's in the order they happened (kube_events.py writes them).

A pending name has no MCN to take a transition on, so its Warning is named from the shared
record, the same on every replica: ``<pool>.<decision.since in nanoseconds, hex>.<sha256(node)
[:8]>`` (the time first, so that the pool's Events list in time order), made with a plain create:
409 means another replica announced it (never counted up as a series). Whether a Warning came
before, for the Normal Event that follows it, is each replica's own memory (``_unproven``): that
Event is named after the Warning (its time and one nanosecond: listed right after it), so the
replicas that saw the Warning make it once between them; a replica started after the Warning
makes none.
"""

import hashlib
import logging
import threading
import time
import urllib.parse
from typing import Any, Dict, Optional, Set, Tuple

from agent.server.cluster import kube_events
from agent.server.rollout import firstboots, mcnconditions
from agent.server.rollout.progress import iso8601
from agent.server.store.kube.client import MACHINE_CONFIG_NODES, KubeError, KubeUnavailable, get_if_exists
from agent.server.store.nodestore import SERVER_KEY

log = logging.getLogger(__name__)

NOTICE = "node-agent.openshift.io/first-boot-event"
COMPONENT = "machine-config-server"  # upstream's source of FirstbootFailed (MCO-2224's reporter in the MCS)
MCO_V1 = "machineconfiguration.openshift.io/v1"
# Upstream's reason for a failed first boot, spelt as upstream spells it; ours for the rest.
REASONS = {firstboots.FAILED: "FirstbootFailed", firstboots.STALLED: "FirstBootStalled",
           firstboots.RUNNING: "FirstBootResumed", firstboots.DONE: "FirstBootCompleted"}
ERROR_MAX = 200  # characters of the error in the message, as upstream's sanitizeErrorMessage
NOT_PROVEN = " (not proven yet: its registration is pending)"
BOUND = "#bound"  # a name that binds a Node with no Node object yet: its own tokens and Event names
WARNINGS = (firstboots.FAILED, firstboots.STALLED)


def image_host(image: str) -> str:
    """The registry of an OS image (``quay.io``), as upstream's message names it; ``none`` without one."""
    if not image:
        return "none"
    host = urllib.parse.urlsplit(image if "://" in image else "https://" + image).hostname
    return host or "invalid-url"


def messages(node: str, decision: firstboots.Decision, record: Dict[str, Any], image: str) -> str:
    """The Event's message (pure): upstream's sentence for a failure, ours in its form for the rest."""
    stage = decision.stage
    if decision.outcome == firstboots.FAILED:
        error = str(record.get("error") or "").split("\n", 1)[0] or "unknown error"
        if len(error) > ERROR_MAX:
            error = error[:ERROR_MAX] + "... (truncated)"
        return f"Node {node} failed during firstboot at stage '{stage}': {error} (image: {image_host(image)})"
    if decision.outcome == firstboots.STALLED:
        return f"Node {node} stalled during firstboot after stage '{stage}': {decision.message}"
    if decision.outcome == firstboots.DONE:
        return f"Node {node} completed its firstboot: {decision.message}"
    return f"Node {node} reported its firstboot again: {decision.message}"


def event_name(obj_name: str, nanos: int) -> str:
    """``<object>.<UnixNano in hex>``, as client-go's recorder names an Event: one per transition,
    listed in time order."""
    suffix = f"{nanos:x}"
    name = f"{obj_name}.{suffix}"
    return name if len(name) <= 253 else f"{hashlib.sha256(obj_name.encode()).hexdigest()[:40]}.{suffix}"


def unproven_event_name(pool: str, nanos: int, node: str) -> str:
    """``<pool>.<nanoseconds in hex>.<sha256(node)[:8]>``: an Event about a pending name's first
    boot, named from the shared record (every replica names it the same: one of them makes it)."""
    return f"{pool}.{nanos:x}.{hashlib.sha256(node.encode()).hexdigest()[:8]}"


def pending(report: Dict[str, Any]) -> bool:
    """Whether a stored report counts for nothing (pending, or a name neither proven nor approved:
    approval.py ``unbound``): it binds no Node (kube_sync ``_counts`` reads the same mark)."""
    mark = report.get(SERVER_KEY)
    return isinstance(mark, dict) and bool(mark.get("pending"))


class FirstBootEvents:
    """Runs in a daemon thread of its own beside kube_sync.KubeSync (whose MCN writer it uses)."""

    def __init__(self, cluster: Any, sync: Any, namespace: str, interval: float = 1.0):
        self.cluster, self.sync, self.namespace, self.interval = cluster, sync, namespace, interval
        self.client = sync.client
        self.announced = 0  # transitions this replica took (tests, benchmarks)
        self._seen: Dict[str, str] = {}  # node -> the token known to be announced (or nothing to announce)
        self._unproven: Dict[str, Tuple[str, int]] = {}  # pending node -> (its token, its Warning's nanoseconds)
        self._reported: Set[str] = set()  # nodes reported to this replica since the last round
        self._last_nanos = 0  # each Event's name: a nanosecond of its own (two in one round must differ)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kube-first-boots", daemon=True)

    def start(self) -> "FirstBootEvents":
        self.cluster.report_listeners.append(self._note)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _note(self, node: str, body: Dict[str, Any], pool: Optional[str]) -> None:
        if firstboots.KEY in body:
            with self._lock:
                self._reported.add(node)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except (KubeUnavailable, KubeError) as exc:
                log.warning("first boots on the Kubernetes API: %s (retrying)", exc)
            except Exception:  # keep going whatever one round hit
                log.exception("first boots on the Kubernetes API")

    def step(self, now: Optional[float] = None) -> None:
        """One round: every open first boot, those reported here since, and those announced
        failed or stalled, decided now; each transition announced once."""
        now = time.time() if now is None else now
        store = self.cluster.store
        deadlines = self.cluster.first_boot_deadlines()
        open_now = {rec.node: rec for rec in store.open_first_boots()}
        with self._lock:
            reported, self._reported = self._reported, set()
        warned = {n for n, token in self._seen.items() if _warning(token)}
        warned.update(n for n, (token, _) in self._unproven.items() if _warning(token))
        for node in sorted(set(open_now) | reported | warned):
            rec = open_now.get(node) or store.node(node)
            decision = self.cluster.first_boot_decision(rec.report, rec.pool, now, deadlines) if rec else None
            if decision is None:
                self._seen.pop(node, None)
                self._unproven.pop(node, None)
                continue
            token = decision.token(rec.report[firstboots.KEY])
            unbound = pending(rec.report)
            if unbound or self._nodeless(node):  # no MCN to announce it on (issue 48: none without a Node)
                self._seen.pop(node, None)
                if unbound:
                    self._announce_unproven(rec, decision, token, now)
                else:  # bound, no Node yet: announced (again) on the pool, by a name of its own
                    self._announce_unproven(rec, decision, token + BOUND, now, "", node + BOUND)
            else:
                self._unproven.pop(node, None)
                if self._seen.get(node) != token:
                    self._announce(rec, decision, token, now)
        for node in [n for n, token in self._seen.items() if token == firstboots.DONE and n not in open_now]:
            del self._seen[node]  # done and said: nothing more will change
        for node in [n for n, (token, _) in self._unproven.items() if n not in open_now and not _warning(token)]:
            del self._unproven[node]  # done, or gone (deleted by the admin): no Normal Event to come

    def _announce(self, rec: Any, decision: firstboots.Decision, token: str, now: float) -> None:
        """A transition: Events (once, by the replica whose write of the token the API takes) when
        the first boot fails or stalls or comes back from that; in any case the MCN's condition as
        decided now (a node without a Node object has no other writer of it)."""
        node = rec.node
        mcn = self._mcn(node)
        have = str((((mcn or {}).get("metadata") or {}).get("annotations") or {}).get(NOTICE) or "")
        if have != token and (decision.warning or _warning(have)):
            if mcn is None:  # no MachineConfigNode yet (node state in SQLite or etcd): made with its status
                self._write_status(rec)
                mcn = self._mcn(node)
                if mcn is None:
                    return
            try:
                mcn = self.client.merge_patch(MACHINE_CONFIG_NODES.path(node), {"metadata": {
                    "resourceVersion": mcn["metadata"]["resourceVersion"], "annotations": {NOTICE: token}}})
            except KubeError as exc:
                if exc.status in (404, 409):  # another replica took it, or a report moved the MCN: next round
                    return
                raise
            self._write_status(rec)
            self._emit(rec, decision, mcn, now)
            self._seen[node] = token
            self.announced += 1
            return
        if mcn is None or _condition(mcn) != (mcnconditions.FIRST_BOOT_STATUS[decision.outcome], decision.reason):
            self._write_status(rec)  # nothing to announce (running, done after running): the condition only
        self._seen[node] = token

    def _nodeless(self, node: str) -> bool:
        """Whether the Nodes are listed and none is named ``node``: it has no MachineConfigNode."""
        cache = self.sync.node_cache
        return cache.synced.is_set() and cache.get(node) is None

    def _announce_unproven(self, rec: Any, decision: firstboots.Decision, token: str, now: float,
                           suffix: str = NOT_PROVEN, key: str = "") -> None:
        """A pending name's transition (or a counted name's with no Node, so no MCN: ``suffix`` "")
        : its Event on the pool only, once across replicas by its name (``unproven_event_name``);
        nothing when a Node object of that name exists (a bootstrap-token holder makes no Event
        about a real Node's name: issue 45)."""
        node = rec.node
        if not self.sync.node_cache.synced.is_set():
            return  # the Nodes not listed yet: whether one has this name is not known (next round)
        if self.sync.node_cache.get(node) is not None:
            self._unproven.pop(node, None)
            return
        had, warned_at = self._unproven.get(node, ("", 0))
        if had == token:
            return
        if not (decision.warning or _warning(had)):  # running, done: nothing to say
            self._unproven[node] = (token, 0)
            return
        # a Warning at the moment it came to be; the Normal after it right after it (one name
        # however the replicas saw the first boot go on: resumed, or done)
        # (a bound name's Warning one nanosecond after the pending one's: listed after it)
        nanos = int(round(decision.since * 1e9)) + (1 if key else 0) if decision.warning else warned_at + 1
        pool = self.sync.source.reflectors["machineconfigpools"].get(rec.pool) if rec.pool else None
        if pool is not None:
            name = unproven_event_name(rec.pool, nanos, key or node)
            reason, kind, message = self._said(rec, decision)
            message += suffix
            involved = kube_events.reference(pool, MCO_V1, "MachineConfigPool", self.namespace)
            body = kube_events.event_body(involved, self.namespace, reason, message, iso8601(now), kind, COMPONENT,
                                          name=name)
            try:
                self.client.create(f"/api/v1/namespaces/{self.namespace}/events", body)
                (log.warning if decision.warning else log.info)("node %s: %s: %s", node, reason, message)
                self.announced += 1
            except KubeUnavailable:
                raise  # not said yet: the next round
            except KubeError as exc:
                if exc.status != 409:  # 409: another replica announced it
                    log.error("MachineConfigPool %s: the %s Event about node %s was not written: %s (deploy/"
                              "rbac.yaml grants events in %s)", rec.pool, reason, node, exc, self.namespace)
        self._unproven[node] = (token, nanos if decision.warning else 0)

    def _said(self, rec: Any, decision: firstboots.Decision) -> Tuple[str, str, str]:
        """(reason, type, message) of the Event about ``rec``'s first boot as decided."""
        record = rec.report.get(firstboots.KEY) or {}
        spec = self.cluster.spec_of(str(rec.report.get("desiredConfig") or "")) or {}
        message = messages(rec.node, decision, record, str(spec.get("osImageURL") or ""))
        return REASONS[decision.outcome], "Warning" if decision.warning else "Normal", message

    def _nanos(self) -> int:
        """Now in nanoseconds, later than any this process named an Event with: a name of its own
        for each Event (the same name again would count up the first, as a series of one event)."""
        with self._lock:
            self._last_nanos = max(self._last_nanos + 1, time.time_ns())
            return self._last_nanos

    def _mcn(self, node: str) -> Optional[Dict[str, Any]]:
        return get_if_exists(self.client, MACHINE_CONFIG_NODES.path(node))

    def _write_status(self, rec: Any) -> None:
        """The MCN's spec and status as kube_sync writes them (the one writer of its conditions:
        the first boot's decided now), for a node that may have no Node object yet."""
        node_obj = self.sync.node_cache.get(rec.node) or {}
        annotations = (node_obj.get("metadata") or {}).get("annotations") or {}
        body = dict(rec.report, _at=rec.received, _rewrite=True)
        self.sync._write_node_object(rec.node, body, rec.pool, annotations, node_obj)

    def _emit(self, rec: Any, decision: firstboots.Decision, mcn: Dict[str, Any], now: float) -> None:
        reason, kind, message = self._said(rec, decision)
        (log.warning if decision.warning else log.info)("node %s: %s: %s", rec.node, reason, message)
        stamp = iso8601(now)
        pool = self.sync.source.reflectors["machineconfigpools"].get(rec.pool) if rec.pool else None
        about = [(mcn, "MachineConfigNode")]
        if pool is not None:
            about.insert(0, (pool, "MachineConfigPool"))
        for obj, kind_of in about:
            involved = kube_events.reference(obj, MCO_V1, kind_of, self.namespace)
            body = kube_events.event_body(involved, self.namespace, reason, message, stamp, kind, COMPONENT,
                                          name=event_name(involved["name"], self._nanos()))
            kube_events.record(self.client, self.namespace, body)


def _condition(mcn: Dict[str, Any]) -> Any:
    """(status, reason) of the MCN's first-boot condition as the API holds it, None without one."""
    for c in (mcn.get("status") or {}).get("conditions") or []:
        if c.get("type") == mcnconditions.FIRST_BOOT:
            return c.get("status"), c.get("reason")
    return None


def _warning(token: str) -> bool:
    """Whether an announced token is a Warning's (a failure or a stall)."""
    return token.split("/", 1)[0] in WARNINGS
