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

Once per transition, by one replica: each replica decides every open first boot once a second
from the shared store (a stall is a function of the record and now), and a transition is taken
by writing its token into the MCN's annotation ``node-agent.openshift.io/first-boot-event`` with
the MCN's resourceVersion as a precondition; the replica whose write the API takes writes the
condition and records the Events, the others read the annotation and follow. The condition is
kept as decided at every change of outcome, with or without an Event (running, done after
running): for a node with no Node object yet nobody else writes its MCN's status (kube_sync
writes a Node's, with the same condition). Events are named
as client-go names them (``<object>.<UnixNano in hex>``), so ``kubectl get events`` lists each
object's in the order they happened (kube_events.py writes them).
"""

import hashlib
import logging
import threading
import time
import urllib.parse
from typing import Any, Dict, Optional, Set

from agent.server.cluster import kube_events
from agent.server.rollout import firstboots, mcnconditions
from agent.server.rollout.progress import iso8601
from agent.server.store.kube.client import MACHINE_CONFIG_NODES, KubeError, KubeUnavailable

log = logging.getLogger(__name__)

NOTICE = "node-agent.openshift.io/first-boot-event"
COMPONENT = "machine-config-server"  # upstream's source of FirstbootFailed (MCO-2224's reporter in the MCS)
MCO_V1 = "machineconfiguration.openshift.io/v1"
# Upstream's reason for a failed first boot, spelt as upstream spells it; ours for the rest.
REASONS = {firstboots.FAILED: "FirstbootFailed", firstboots.STALLED: "FirstBootStalled",
           firstboots.RUNNING: "FirstBootResumed", firstboots.DONE: "FirstBootCompleted"}
ERROR_MAX = 200  # characters of the error in the message, as upstream's sanitizeErrorMessage


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


class FirstBootEvents:
    """Runs in a daemon thread of its own beside kube_sync.KubeSync (whose MCN writer it uses)."""

    def __init__(self, cluster: Any, sync: Any, namespace: str, interval: float = 1.0):
        self.cluster, self.sync, self.namespace, self.interval = cluster, sync, namespace, interval
        self.client = sync.client
        self.announced = 0  # transitions this replica took (tests, benchmarks)
        self._seen: Dict[str, str] = {}  # node -> the token known to be announced (or nothing to announce)
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
        warned = {n for n, token in self._seen.items() if token.split("/", 1)[0] in (firstboots.FAILED,
                                                                                       firstboots.STALLED)}
        for node in sorted(set(open_now) | reported | warned):
            rec = open_now.get(node) or store.node(node)
            decision = self.cluster.first_boot_decision(rec.report, rec.pool, now, deadlines) if rec else None
            if decision is None:
                self._seen.pop(node, None)
                continue
            token = decision.token(rec.report[firstboots.KEY])
            if self._seen.get(node) != token:
                self._announce(rec, decision, token, now)
        for node in [n for n, token in self._seen.items() if token == firstboots.DONE and n not in open_now]:
            del self._seen[node]  # done and said: nothing more will change

    def _announce(self, rec: Any, decision: firstboots.Decision, token: str, now: float) -> None:
        """A transition: Events (once, by the replica whose write of the token the API takes) when
        the first boot fails or stalls or comes back from that; in any case the MCN's condition as
        decided now (a node without a Node object has no other writer of it)."""
        node = rec.node
        mcn = self._mcn(node)
        have = str((((mcn or {}).get("metadata") or {}).get("annotations") or {}).get(NOTICE) or "")
        was_warning = have.split("/", 1)[0] in (firstboots.FAILED, firstboots.STALLED)
        if have != token and (decision.warning or was_warning):
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

    def _nanos(self) -> int:
        """Now in nanoseconds, later than any this process named an Event with: a name of its own
        for each Event (the same name again would count up the first, as a series of one event)."""
        with self._lock:
            self._last_nanos = max(self._last_nanos + 1, time.time_ns())
            return self._last_nanos

    def _mcn(self, node: str) -> Optional[Dict[str, Any]]:
        try:
            return self.client.get(MACHINE_CONFIG_NODES.path(node))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def _write_status(self, rec: Any) -> None:
        """The MCN's spec and status as kube_sync writes them (the one writer of its conditions:
        the first boot's decided now), for a node that may have no Node object yet."""
        node_obj = self.sync.node_cache.get(rec.node) or {}
        annotations = (node_obj.get("metadata") or {}).get("annotations") or {}
        body = dict(rec.report, _at=rec.received, _rewrite=True)
        self.sync._write_node_object(rec.node, body, rec.pool, annotations, node_obj)

    def _emit(self, rec: Any, decision: firstboots.Decision, mcn: Dict[str, Any], now: float) -> None:
        record = rec.report.get(firstboots.KEY) or {}
        spec = self.cluster.spec_of(str(rec.report.get("desiredConfig") or "")) or {}
        message = messages(rec.node, decision, record, str(spec.get("osImageURL") or ""))
        reason, kind = REASONS[decision.outcome], "Warning" if decision.warning else "Normal"
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
