"""Drain coordination: at most ``maxUnavailable`` nodes of a pool hold a drain lease at once.

A node asks (POST) before a disruptive update and gets *granted* or *wait* (with Retry-After).
A lease expires after a TTL unless renewed by asking again (a node that dies does not hold its
slot for ever), and ends on DELETE (uncordon) or on a Done report. With the directory backend
there are no pods to evict: cordon, drain and uncordon are recorded in SQLite and granted.
"""

import time
from dataclasses import dataclass, field
from typing import Any, Collection, List, Optional, Sequence

DEFAULT_TTL = 600.0
UNCORDON_RETRY = 1  # Retry-After while a slot is taken only by Nodes whose uncordon this replica has not seen


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
    max_unavailable: Optional[int] = None  # the pool's (None: ``limit``, no unavailable Node takes a slot)
    uncordoning: List[str] = field(default_factory=list)  # ``sooner``: Done, their uncordon not seen here yet

    def to_dict(self) -> dict:
        """``maxUnavailable`` is the pool's; ``slots`` the drain slots lease holders may have now
        (maxUnavailable less the pool's other unavailable Nodes with the Kubernetes backend),
        ``free`` those not held."""
        most = self.limit if self.max_unavailable is None else self.max_unavailable
        out = {"status": "granted" if self.granted else "wait", "granted": self.granted, "node": self.node,
               "pool": self.pool, "maxUnavailable": most, "slots": self.limit,
               "free": max(0, self.limit - len(self.holders)), "holders": self.holders}
        if self.granted:
            out["expires"] = self.expires
            out["renewed"] = self.renewed
            out["actions"] = ["cordon", "drain"]
        else:
            out["retryAfter"] = self.retry_after
            taken = most - self.limit
            used = f"; {taken} of its maxUnavailable {most} taken by unavailable Nodes" if taken > 0 else ""
            out["reason"] = (f"all {self.limit} drain slot(s) of pool {self.pool} are held ({', '.join(self.holders)})"
                             f"{used}; the pool's maxUnavailable is {most}; ask again later")
            if self.limit <= 0:
                # --backend kubernetes: other unavailable Nodes use up maxUnavailable (kube_nodes.py)
                out["reason"] = (f"no drain slot of pool {self.pool} is free: its unavailable Nodes (NotReady, "
                                 f"cordoned or updating: `node-config-server get pools -o wide`) use up all of its "
                                 f"maxUnavailable {most}; ask again later")
            if self.uncordoning:
                out["reason"] += (f"; {', '.join(self.uncordoning)} reported Done and the uncordon that ends its "
                                  f"drain is not seen here yet: ask again in {self.retry_after} s")
        return out


def sooner(answer: DrainAnswer, uncordoning: List[str], limit_without: int) -> DrainAnswer:
    """A refusal with the short Retry-After (``UNCORDON_RETRY``) when it is due only to Nodes whose
    Done this replica holds but whose uncordon its Node cache has not seen yet (``uncordoning``):
    with them available, the slots would be ``limit_without``. Ours: such a Node took a slot of the
    replica asked, and the refusal waited for the holders' leases, 30 s (pure)."""
    if answer.granted or not uncordoning or len(answer.holders) >= limit_without:
        return answer
    return DrainAnswer(False, answer.node, answer.pool, answer.limit, retry_after=UNCORDON_RETRY,
                       holders=list(answer.holders), max_unavailable=answer.max_unavailable,
                       uncordoning=list(uncordoning))


def drains_over(marked: Sequence[str], holders: Sequence[str], targeted: Collection[str]) -> List[str]:
    """Ours: of the Nodes cordoned by our drain (``marked``), those that hold no drain lease
    (``holders``: the refusal's own read of the leases) and that the pool no longer targets
    (``targeted``: its row's entries). A Done ended their drain: it released the lease, and the
    step that saw it dropped the entry. The uncordon written with it is on its way, though this
    process's own copy of the Done may not be yet (``sooner``'s other source: at 1,000 nodes one
    such refusal waited 30 s, docs/performance.md). A Node whose lease ran out mid-drain, or that
    gave its lease back without a Done, is still targeted: not one of them (pure)."""
    return [n for n in marked if n not in holders and n not in targeted]


def request_drain(store: Any, node: str, pool: str, config: str, limit: int, ttl: float,
                  now: Optional[float] = None) -> DrainAnswer:
    """Grant or refuse a drain lease (``store``: a nodestore.NodeStore; atomic there)."""
    return store.acquire_lease(node, pool, config, limit, ttl, time.time() if now is None else now)


def release(store: Any, node: str, why: str = "uncordon requested") -> Optional[str]:
    """End a node's lease (uncordon). Returns the pool it held a lease in, or None."""
    return store.release_lease(node, why)
