"""Drain coordination: at most ``maxUnavailable`` nodes of a pool hold a drain lease at once.

A node asks (POST) before a disruptive update and gets *granted* or *wait* (with Retry-After).
A lease expires after a TTL unless renewed by asking again (a node that dies does not hold its
slot for ever), and ends on DELETE (uncordon) or on a Done report. With the directory backend
there are no pods to evict: cordon, drain and uncordon are recorded in SQLite and granted.
"""

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional

from agent.server.db import Database

DEFAULT_TTL = 600.0


def parse_max_unavailable(value: Any, machine_count: int) -> int:
    """``spec.maxUnavailable`` (int or "N%") for a pool of ``machine_count`` nodes; at least 1.

    Percentages round down, as the MCO does, but never to 0 (the pool would never update).
    """
    if value is None:
        return 1
    if isinstance(value, bool):
        raise ValueError("must be a whole number or a percentage like \"10%\"")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        return max(1, value)
    text = str(value).strip()
    m = re.match(r"^(\d+)%$", text)
    if m:
        pct = int(m.group(1))
        if pct > 100:
            raise ValueError("a percentage must be at most 100%")
        return max(1, math.floor(machine_count * pct / 100))
    if re.match(r"^\d+$", text):
        return max(1, int(text))
    raise ValueError("must be a whole number or a percentage like \"10%\"")


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
        return out


def request_drain(db: Database, node: str, pool: str, config: str, limit: int, ttl: float,
                  now: Optional[float] = None) -> DrainAnswer:
    now = time.time() if now is None else now
    with db.write() as c:
        for row in c.execute("SELECT node, pool FROM leases WHERE expires <= ?", (now,)).fetchall():
            db.record_drain(c, row["node"], row["pool"], "expired", "lease TTL passed without renewal")
        c.execute("DELETE FROM leases WHERE expires <= ?", (now,))
        mine = c.execute("SELECT pool FROM leases WHERE node=?", (node,)).fetchone()
        if mine is not None and mine["pool"] == pool:
            c.execute("UPDATE leases SET expires=?, config=? WHERE node=?", (now + ttl, config, node))
            holders = [r[0] for r in c.execute("SELECT node FROM leases WHERE pool=? ORDER BY granted", (pool,))]
            return DrainAnswer(True, node, pool, limit, now + ttl, holders=holders, renewed=True)
        if mine is not None:  # moved pools: the old lease goes
            c.execute("DELETE FROM leases WHERE node=?", (node,))
        rows = c.execute("SELECT node, expires FROM leases WHERE pool=? ORDER BY granted", (pool,)).fetchall()
        holders = [r["node"] for r in rows]
        if len(holders) >= limit:
            soonest = min(r["expires"] for r in rows) - now
            retry = int(max(1, min(30, math.ceil(soonest))))
            return DrainAnswer(False, node, pool, limit, retry_after=retry, holders=holders)
        c.execute("INSERT INTO leases (node, pool, config, granted, expires) VALUES (?,?,?,?,?)",
                  (node, pool, config, now, now + ttl))
        db.record_drain(c, node, pool, "cordon", config)
        db.record_drain(c, node, pool, "drain", "no pods to evict with the directory backend")
        return DrainAnswer(True, node, pool, limit, now + ttl, holders=holders + [node])


def release(db: Database, node: str, why: str = "uncordon requested") -> Optional[str]:
    """End a node's lease (uncordon). Returns the pool it held a lease in, or None."""
    with db.write() as c:
        row = c.execute("SELECT pool FROM leases WHERE node=?", (node,)).fetchone()
        if row is None:
            return None
        c.execute("DELETE FROM leases WHERE node=?", (node,))
        db.record_drain(c, node, row["pool"], "uncordon", why)
        return row["pool"]


def release_in(c: Any, node: str, current_config: str, why: str) -> bool:
    """Inside a write transaction: end the lease when the node is Done on the leased config."""
    row = c.execute("SELECT pool, config FROM leases WHERE node=?", (node,)).fetchone()
    if row is None or (row["config"] and current_config and row["config"] != current_config):
        return False
    c.execute("DELETE FROM leases WHERE node=?", (node,))
    Database.record_drain(c, node, row["pool"], "uncordon", why)
    return True
