"""Each replica process announces what it serves on the Kubernetes API (``/api/v1/cluster``
lists every replica's view): the etcd store's ``etcd.heartbeat.Heartbeat``, with a
coordination.k8s.io Lease per process instead of a key on an etcd lease.

The Lease ``replica-<name>-<pid>`` in the store's namespace, label
``node-agent.openshift.io/kind=replica``, ``holderIdentity`` ``<name>/<pid>``, renewed every
``ttl / 3`` seconds with the announcement (JSON) in the annotation
``node-agent.openshift.io/replica``. A replica whose ``renewTime`` is more than ``ttl`` old is
not listed; its Lease is deleted once it is ``SWEEP_AFTER`` old (by any replica: a process
killed without stopping leaves one behind) and by its own process when it stops. Expiry reads
the replica's clock, as the drain leases do (kube.leases.py): replicas' clocks must agree
within the TTL.
"""

import hashlib
import json
import logging
import os
import re
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from agent.server.store.kube.client import LEASES, KubeClient, KubeError
from agent.server.store.kube.leases import KIND_LABEL, micro_time, parse_time

log = logging.getLogger(__name__)

KIND = "replica"
ANNOUNCEMENT = "node-agent.openshift.io/replica"
SWEEP_AFTER = 600.0  # seconds without a renewal before a replica's Lease is a dead process's
MAX_NAME = 253


def lease_name(name: str, pid: int) -> str:
    """A DNS subdomain name for the replica's Lease: its name lower-cased, other characters as
    '-'; a hash when that would be too long or empty."""
    base = re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.")
    full = f"replica-{base}-{pid}"
    if not base or len(full) > MAX_NAME:
        full = f"replica-{hashlib.sha256(name.encode()).hexdigest()[:40]}-{pid}"
    return full


def announcement_of(obj: Dict[str, Any], now: float, ttl_grace: float = 0.0) -> Optional[Dict[str, Any]]:
    """What a live replica's Lease announces (None: expired, or not readable)."""
    spec = obj.get("spec") or {}
    until = parse_time(spec.get("renewTime")) + float(spec.get("leaseDurationSeconds") or 0)
    if until + ttl_grace < now:
        return None
    try:
        info = json.loads(((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOUNCEMENT) or "")
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


class KubeHeartbeat:
    def __init__(self, client: KubeClient, namespace: str, name: str, describe: Callable[[], Dict[str, Any]],
                 ttl: int = 15, start: bool = True):
        self.client, self.namespace, self.name, self.describe, self.ttl = client, namespace, name, describe, ttl
        self.pid = os.getpid()
        self.lease = lease_name(name, self.pid)
        self._version = ""
        self._listed: List[Dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="replica-heartbeat", daemon=True)
        if start:
            self._thread.start()

    def replicas(self) -> List[Dict[str, Any]]:
        """Every live replica's announcement as last listed (this process's own at least)."""
        with self._lock:
            return [dict(r) for r in self._listed]

    def beat(self) -> None:
        """Renew this process's Lease with its announcement, then list every replica's."""
        now = time.time()
        info = dict(self.describe(), replica=self.name, pid=self.pid, at=now)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.lease, "namespace": self.namespace, "labels": {KIND_LABEL: KIND},
                             "annotations": {ANNOUNCEMENT: json.dumps(info, sort_keys=True)}},
                "spec": {"holderIdentity": f"{self.name}/{self.pid}", "leaseDurationSeconds": self.ttl,
                         "renewTime": micro_time(now)}}
        self._version = self._write(body)
        self._list(now)

    def _write(self, body: Dict[str, Any]) -> str:
        """Create the Lease, or replace it (only this process writes it: a 409 means it was made
        or changed by a process of the same name and pid before, so read it and take it over)."""
        path = LEASES.path(self.lease, self.namespace)
        for _ in range(3):
            try:
                if self._version:
                    body["metadata"]["resourceVersion"] = self._version
                    return str(self.client.replace(path, body)["metadata"]["resourceVersion"])
                return str(self.client.create(LEASES.path(namespace=self.namespace), body)["metadata"]["resourceVersion"])
            except KubeError as exc:
                if exc.status == 404:
                    self._version = ""
                elif exc.status == 409:
                    self._version = str(self.client.get(path)["metadata"]["resourceVersion"])
                else:
                    raise
        raise KubeError(409, "Conflict", f"Lease {self.namespace}/{self.lease} kept changing", "heartbeat")

    def _list(self, now: float) -> None:
        items, _ = self.client.list(LEASES.path(namespace=self.namespace), {"labelSelector": f"{KIND_LABEL}={KIND}"})
        live = []
        for obj in items:
            info = announcement_of(obj, now)
            if info is not None:
                live.append(info)
            elif announcement_of(obj, now, SWEEP_AFTER) is None:
                self._delete(obj["metadata"]["name"])
        live.sort(key=lambda r: (str(r.get("replica", "")), int(r.get("pid") or 0)))
        with self._lock:
            self._listed = live

    def _delete(self, name: str) -> None:
        try:
            self.client.delete(LEASES.path(name, self.namespace))
        except KubeError as exc:
            if exc.status != 404:
                log.debug("replica Lease %s/%s not deleted: %s", self.namespace, name, exc)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
                wait = self.ttl / 3
            except Exception as exc:  # the API server is away: the next beat tries again
                log.debug("replica heartbeat failed: %s", exc)
                wait = 1.0
            self._stop.wait(wait)

    def stop(self) -> None:
        """Stop announcing and take this process's Lease away (the others drop it at once)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._delete(self.lease)
