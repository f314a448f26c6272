"""Ours: a pool's numbers (nodestatus.calculate_status) kept per Node, so that a change costs
what changed, not a pass over the pool (pure data, no effects).

Upstream's status.go ``calculateStatus`` walks the pool's Nodes at every sync. Here each Node's
``nodestatus.Share`` under the pool's target and image is kept: ``put`` a Node that changed,
``drop`` one that left, and ``status()`` gives what ``calculate_status`` gives over the same
Nodes (tests/unit/test_status_tally.py compares them on generated pools and histories). A new
target or image is a new tally (cluster/kube_nodes.py makes one, once per target).
"""

import bisect
from typing import Any, Dict, List, Mapping, Optional

from agent.server.rollout.nodestatus import NodeStatus, Share, node_share

_COUNTED = ("updated", "ready", "proven", "degraded", "working", "refused")


class StatusTally:
    def __init__(self, target: str, image: Optional[str]) -> None:
        self.under = (target, image)
        self.mark: Any = None  # the feeder's mark of what is tallied (kube_nodes.NodeTruth)
        self.keys: Dict[str, Any] = {}  # the feeder's key of what each Node was tallied from
        self.entries: Dict[str, Any] = {}  # what of its rollout entry each Node with one was tallied under
        self._shares: Dict[str, Share] = {}
        self._names: List[str] = []  # in name order
        self._sums = dict.fromkeys(_COUNTED, 0)
        self._unavailable: Dict[str, str] = {}
        self._degraded: Dict[str, str] = {}
        self._status: Optional[NodeStatus] = None

    def put(self, name: str, node: Dict[str, Any], report: Optional[Mapping[str, Any]]) -> None:
        share = node_share(name, node, report, *self.under)
        old = self._shares.get(name)
        if old == share:
            return
        if old is None:
            bisect.insort(self._names, name)
        else:
            self._count(name, old, -1)
        self._shares[name] = share
        self._count(name, share, 1)

    def drop(self, name: str) -> None:
        old = self._shares.pop(name, None)
        if old is not None:
            del self._names[bisect.bisect_left(self._names, name)]
            self._count(name, old, -1)

    def _count(self, name: str, share: Share, sign: int) -> None:
        for key in _COUNTED:
            self._sums[key] += sign * getattr(share, key)
        for kept, value in ((self._unavailable, share.unavailable), (self._degraded, share.degraded_reason)):
            if value:
                if sign > 0:
                    kept[name] = value
                else:
                    kept.pop(name, None)
        self._status = None

    def status(self) -> NodeStatus:
        """calculate_status over the Nodes tallied (made once per change; the caller must not change it)."""
        if self._status is None:
            unavailable = sorted(self._unavailable.items())
            self._status = NodeStatus(machine=len(self._names), nodes=list(self._names),
                                      unavailable=len(unavailable), unavailable_nodes=[n for n, _ in unavailable],
                                      unavailable_reasons=[r for _, r in unavailable],
                                      degraded_reasons=[r for _, r in sorted(self._degraded.items())],
                                      **self._sums)
        return self._status
