"""Drain coordination: at most ``maxUnavailable`` nodes of a pool hold a drain lease at once.

A node asks (POST) before a disruptive update and gets *granted* or *wait* (with Retry-After).
A lease expires after a TTL unless renewed by asking again (a node that dies does not hold its
slot for ever), and ends on DELETE (uncordon) or on a Done report. With the directory backend
there are no pods to evict: cordon, drain and uncordon are recorded in SQLite and granted.
"""

import time
from dataclasses import dataclass, field
from typing import Any, List, Optional

DEFAULT_TTL = 600.0


@dataclass
class DrainAnswer:
    granted: bool
    node: str
    pool: str
    limit: int
    expires: float = 0.0
    retry_after: int = 0
    holders: List[str] = field(default_factory=list)
    renewed: bool = False

    def to_dict(self) -> dict:
        out = {"status": "granted" if self.granted else "wait", "granted": self.granted, "node": self.node,
               "pool": self.pool, "maxUnavailable": self.limit, "holders": self.holders}
        if self.granted:
            out["expires"] = self.expires
            out["renewed"] = self.renewed
            out["actions"] = ["cordon", "drain"]
        else:
            out["retryAfter"] = self.retry_after
            out["reason"] = (f"{len(self.holders)} of at most {self.limit} node(s) of pool {self.pool} are "
                             f"being updated ({', '.join(self.holders)}); ask again later")
            if self.limit <= 0:
                # --backend kubernetes: other unavailable Nodes use up maxUnavailable (kube_nodes.py)
                out["reason"] = (f"no drain slot of pool {self.pool} is free: its unavailable Nodes (NotReady, "
                                 f"cordoned or updating: `node-config-server get pools -o wide`) use up its "
                                 f"maxUnavailable; ask again later")
        return out


def request_drain(store: Any, node: str, pool: str, config: str, limit: int, ttl: float,
                  now: Optional[float] = None) -> DrainAnswer:
    """Grant or refuse a drain lease (``store``: a nodestore.NodeStore; atomic there)."""
    return store.acquire_lease(node, pool, config, limit, ttl, time.time() if now is None else now)


def release(store: Any, node: str, why: str = "uncordon requested") -> Optional[str]:
    """End a node's lease (uncordon). Returns the pool it held a lease in, or None."""
    return store.release_lease(node, why)
