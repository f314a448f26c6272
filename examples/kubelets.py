"""The kubelets of ``make kube-demo``'s scratch nodes, played: a scratch root runs no kubelet, so
nothing would post their Nodes' status and the node lifecycle controller (kube-controller-manager)
would mark them NotReady once ``--node-monitor-grace-period`` (40 s by default) had passed without
a heartbeat. A kubelet's heartbeats are two (kubelet ``nodestatus`` and ``nodelease``, Kubernetes
1.20): its Node's status (the Ready condition's ``lastHeartbeatTime``) and its Lease in
``kube-node-lease`` (``renewTime``), both every 10 s by default (the Lease's renew interval is a
quarter of its 40 s duration). ``Heartbeats`` posts both for each node, with that node's own
client certificate (the Node authorizer and NodeRestriction let a kubelet write only its own),
until stopped.
"""

import datetime
import threading
from typing import Dict, Tuple

LEASE_NAMESPACE = "kube-node-lease"


def now_micro() -> str:
    """A MicroTime as the API writes one (a Lease's renewTime)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_second() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Heartbeats:
    """``Heartbeats(kc, {node: (cert, key)}, interval)``: ``beat()`` once now, ``start()`` every
    ``interval`` seconds on a daemon thread, ``stop()``. ``beats`` counts the rounds done."""

    def __init__(self, kc, certs: Dict[str, Tuple[str, str]], interval: float = 10.0, lease_seconds: int = 40):
        self.kc, self.certs, self.interval, self.lease_seconds = kc, dict(certs), interval, lease_seconds
        self.sessions = {name: kc.session(cert=cert) for name, cert in self.certs.items()}
        self.since = {name: now_second() for name in self.certs}  # the Ready condition's lastTransitionTime
        self.beats = 0
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet-heartbeats", daemon=True)

    def beat(self) -> None:
        for name, s in self.sessions.items():
            self._status(name, s)
            self._lease(name, s)
        self.beats += 1

    def _status(self, name: str, s) -> None:
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": now_second(), "lastTransitionTime": self.since[name]}
        r = s.patch(f"{self.kc.url}/api/v1/nodes/{name}/status", json={"status": {"conditions": [ready]}}, timeout=10,
                    headers={"Content-Type": "application/strategic-merge-patch+json"})  # merged by type, as a kubelet's
        r.raise_for_status()

    def _lease(self, name: str, s) -> None:
        url = f"{self.kc.url}/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
        r = s.patch(f"{url}/{name}", json={"spec": {"renewTime": now_micro()}}, timeout=10,
                    headers={"Content-Type": "application/merge-patch+json"})
        if r.status_code == 404:  # the first beat: the kubelet makes its Lease
            r = s.post(url, timeout=10, json={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": self.lease_seconds, "renewTime": now_micro()}})
        r.raise_for_status()

    def start(self) -> "Heartbeats":
        self.beat()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
                self.error = ""
            except Exception as exc:  # the API server away for a moment (or stopping): the next round tries again
                self.error = str(exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(15)
