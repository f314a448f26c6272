"""The MachineConfigNodes the node store just wrote, as the API server answered each write, for the
write-back of the same report (agent/server/cluster/kube_mcn.py). The write-back decides the
status against the object the API holds; the record's write has just returned it, so reading it
again was one more request a report (12 % of a worker's CPU in bench_kube's burst:
docs/performance.md). Taken once: a second write-back of the node reads the API.

Bounded: the newest ``LIMIT`` nodes' objects, each with only what the write-back reads (not the
annotations, where a report alone may take 64 KiB).
"""

import threading
from collections import OrderedDict
from typing import Any, Dict, Optional

LIMIT = 1024


def slim(obj: Dict[str, Any]) -> Dict[str, Any]:
    """What the write-back reads of an MCN (pure): its version, generation and owners, spec, status."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "resourceVersion", "generation", "ownerReferences") if k in meta},
            "spec": obj.get("spec") or {}, "status": obj.get("status") or {}}


class FreshObjects:
    """Thread-safe: the request's greenlet puts, the write-back's loop takes."""

    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._objects: OrderedDict[str, Dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, name: str, obj: Dict[str, Any]) -> None:
        kept = slim(obj)
        with self._lock:
            self._objects.pop(name, None)
            self._objects[name] = kept
            while len(self._objects) > self.limit:
                self._objects.popitem(last=False)

    def take(self, name: str) -> Optional[Dict[str, Any]]:
        with self._lock:
            return self._objects.pop(name, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)
