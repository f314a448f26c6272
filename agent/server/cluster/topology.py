"""The cluster's control-plane topology as the drain needs it: a small object a Drainer owns.

The MCD drains only when the cluster is not single-node (pkg/daemon/drain.go, drainRequired:
``!isSingleNodeTopology(controlPlaneTopology)``, read from the Infrastructure object ``cluster``).
Three states, not two: *known* (read once, it does not change), *absent* (no Infrastructure on
plain Kubernetes: 404, which drains as upstream's default topology does) and *unknown* (the read
failed: a 403 from a missing ``get infrastructures`` grant, an API server away). Unknown never
drains (draining the only node of a single-node cluster is what the MCO never does): the node is
told to ask again, the answer says why, and the read is tried again after RETRY_SECONDS.
"""

import logging
import time
from typing import Any, Callable, Optional, Tuple

from agent.server.store.kube.client import KubeError, KubeUnavailable

log = logging.getLogger(__name__)

INFRASTRUCTURE = "/apis/config.openshift.io/v1/infrastructures/cluster"
RETRY_SECONDS = 10.0


class Topology:
    """``read(client)`` answers ``(topology, unknown)``: ``topology`` the Infrastructure's
    status.controlPlaneTopology (None: no such object), ``unknown`` why it could not be read ("" once
    it is known). A known answer is kept for the Drainer's life; an unknown one for RETRY_SECONDS."""

    def __init__(self, retry_seconds: float = RETRY_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.retry_seconds = retry_seconds
        self.clock = clock
        self._known: Optional[Tuple[Optional[str]]] = None  # (topology,) once read
        self._unknown = ""  # why the last read failed
        self._retry_at = 0.0

    def read(self, client: Any) -> Tuple[Optional[str], str]:
        if self._known is not None:
            return self._known[0], ""
        if self._unknown and self.clock() < self._retry_at:
            return None, self._unknown
        try:
            status = client.get(INFRASTRUCTURE).get("status") or {}
        except KubeError as exc:
            if exc.status == 404:  # plain Kubernetes: no Infrastructure, a cluster of several nodes
                self._known = (None,)
                return None, ""
            return None, self._failed(str(exc))
        except KubeUnavailable as exc:
            return None, self._failed(str(exc))
        self._known = (str(status.get("controlPlaneTopology") or "") or None,)
        self._unknown = ""
        return self._known[0], ""

    def _failed(self, error: str) -> str:
        self._unknown = (f"the cluster's topology is unknown ({error}): no cordon and no drain until it is known "
                         f"(a single-node cluster is never drained); deploy/rbac.yaml grants get infrastructures")
        self._retry_at = self.clock() + self.retry_seconds
        log.warning("reading %s failed: %s", INFRASTRUCTURE, self._unknown)
        return self._unknown
