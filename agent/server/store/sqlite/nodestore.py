"""The SQLite node store (``nodestore.NodeStore`` on ``db.Database``).

Counters and proofs live in two small tables (``pool_counts``, ``proofs``) updated by each
report in the same transaction that stores it: the report's old contribution is subtracted and
its new one added, so a report, a count or a proof costs the same at 100 and at 50,000 nodes.
Writers serialize on ``BEGIN IMMEDIATE`` (several gunicorn workers agree).
"""

import json
import math
import sqlite3
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.server.rollout.firstboots import is_open
from agent.server.rollout.progress import Membership
from agent.server.store.errors import TooManyFromAddress, TooManyPending, TooManyUnvetted
from agent.server.store.nodestore import (
    DRAIN_GRANTED,
    SERVED_KEEP,
    VETTED_BY,
    Deleted,
    NodeRecord,
    NodeStore,
    PoolCounts,
    PoolRow,
    Proof,
    Recorded,
    Registration,
    Serving,
    contribution,
    registration_from,
)
from agent.server.store.sqlite.db import Database

_REG_COLUMNS = "node, created, approved, approved_by, labels, served, address"
# Registrations no admin approved (nodestore.VETTED_BY): pending, or approved by a rule.
_UNVETTED_COUNT = ("SELECT COUNT(*) FROM credentials WHERE approved=0 OR approved_by NOT IN "
                   f"({', '.join('?' * len(VETTED_BY))})")

_COUNTERS = ("machine", "done", "working", "reported_degraded", "degraded", "refused")


def _record(row: sqlite3.Row) -> NodeRecord:
    return NodeRecord(node=row["node"], pool=row["pool"], why=row["why"], degraded=row["degraded"],
                      report=json.loads(row["body"]), received=row["received"])


def _add(c: sqlite3.Connection, pool: str, degraded: str, report: Dict[str, Any], sign: int) -> None:
    """Add (sign=1) or take away (sign=-1) one node's contribution to the counters and proofs."""
    deltas, proof_key, ready = contribution(pool, degraded, report)
    cols = ", ".join(_COUNTERS)
    marks = ", ".join("?" * len(_COUNTERS))
    sets = ", ".join(f"{k}={k}+excluded.{k}" for k in _COUNTERS)
    c.execute(f"INSERT INTO pool_counts (pool, {cols}) VALUES (?, {marks}) ON CONFLICT(pool) DO UPDATE SET {sets}",
              (pool, *[sign * deltas[k] for k in _COUNTERS]))
    if proof_key is not None:
        c.execute("INSERT INTO proofs (pool, config, image, updated, ready) VALUES (?,?,?,?,?) "
                  "ON CONFLICT(pool, config, image) DO UPDATE SET updated=updated+excluded.updated, "
                  "ready=ready+excluded.ready", (*proof_key, sign, sign * ready))
        if sign < 0:  # keep the table as small as the set of configs nodes actually run
            c.execute("DELETE FROM proofs WHERE pool=? AND config=? AND image=? AND updated<=0", proof_key)


MEMBER_CHANGES_READ = 2000  # changed nodes a pool's step reads one by one; more: it reads its pool whole


class SqliteNodeStore(NodeStore):
    kind = "sqlite"

    def __init__(self, db: Database):
        self.db = db

    def _q(self, sql: str, args: tuple = ()) -> List[sqlite3.Row]:
        return self.db.conn().execute(sql, args).fetchall()

    # -- nodes --------------------------------------------------------------------------------

    def record_report(self, node: str, body: Dict[str, Any], member: Membership, now: float) -> Recorded:
        with self.db.write() as c:
            old = c.execute("SELECT pool, degraded, body FROM reports WHERE node=?", (node,)).fetchone()
            if old is not None:
                _add(c, old["pool"], old["degraded"], json.loads(old["body"]), -1)
            c.execute("INSERT INTO reports (node, pool, body, received, why, degraded, firstboot) "
                      "VALUES (?,?,?,?,?,?,?) ON CONFLICT(node) DO UPDATE SET pool=excluded.pool, body=excluded.body, "
                      "received=excluded.received, why=excluded.why, degraded=excluded.degraded, "
                      "firstboot=excluded.firstboot",
                      (node, member.pool, json.dumps(body, sort_keys=True), now, member.why, member.degraded,
                       int(is_open(body))))
            _add(c, member.pool, member.degraded, body, 1)
            released = False
            if body.get("state") == "Done":
                released = _release_if_on(c, node, str(body.get("currentConfig") or ""), "node reported Done", now)
        return Recorded(released, old["pool"] if old is not None else None)

    def node(self, node: str) -> Optional[NodeRecord]:
        rows = self._q("SELECT node, pool, why, degraded, body, received FROM reports WHERE node=?", (node,))
        return _record(rows[0]) if rows else None

    def nodes(self, pool: Optional[str] = None, after: str = "", limit: int = 500) -> List[NodeRecord]:
        if pool is None:
            rows = self._q("SELECT node, pool, why, degraded, body, received FROM reports WHERE node > ? "
                           "ORDER BY node LIMIT ?", (after, limit))
        else:
            rows = self._q("SELECT node, pool, why, degraded, body, received FROM reports WHERE pool=? AND node > ? "
                           "ORDER BY node LIMIT ?", (pool, after, limit))
        return [_record(r) for r in rows]

    def member_texts(self, pool: str) -> List[Tuple[str, str, float, float]]:
        rows = self._q("SELECT r.node, r.body, r.received, COALESCE(c.created, 0) FROM reports r "
                       "LEFT JOIN credentials c ON c.node = r.node WHERE r.pool=? ORDER BY r.node", (pool,))
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def member_changes(self, after: Optional[int]) -> Optional[Tuple[int, List[Tuple[str, str, str, float, float]]]]:
        """(the number of the newest change, and (node, its pool or "" once gone, its report's
        text, received, registered or 0) of each node changed after ``after``). None: changes
        after ``after`` were dropped (the table keeps the last 100,000: schema 9), or more than
        ``MEMBER_CHANGES_READ`` nodes changed: read the pool whole (``member_texts``)."""
        # MAX and MIN in two queries: SQLite answers each from the key, both in one query by a scan
        head = self._q("SELECT COALESCE(MAX(seq), 0) FROM member_changes")[0][0]
        if after is None or after >= head:
            return head, []  # nothing changed: one query
        if after + 1 < self._q("SELECT COALESCE(MIN(seq), 0) FROM member_changes")[0][0]:
            return None
        names = [r[0] for r in self._q("SELECT DISTINCT node FROM member_changes WHERE seq > ? AND seq <= ? LIMIT ?",
                                       (after, head, MEMBER_CHANGES_READ + 1))]
        if len(names) > MEMBER_CHANGES_READ:
            return None
        found: Dict[str, Tuple[str, str, str, float, float]] = {}
        for i in range(0, len(names), 500):
            chunk = names[i:i + 500]
            for r in self._q("SELECT r.node, r.pool, r.body, r.received, COALESCE(c.created, 0) FROM reports r LEFT "
                             f"JOIN credentials c ON c.node = r.node WHERE r.node IN ({','.join('?' * len(chunk))})",
                             tuple(chunk)):
                found[r[0]] = (r[0], r[1], r[2], r[3], r[4])
        return head, [found.get(n, (n, "", "", 0.0, 0.0)) for n in names]

    def open_first_boots(self, pool: Optional[str] = None) -> List[NodeRecord]:
        """Nodes whose first boot is not done, by the partial index (schema 6): O(their number)."""
        cols = "node, pool, why, degraded, body, received"
        if pool is None:
            rows = self._q(f"SELECT {cols} FROM reports WHERE firstboot=1 ORDER BY node")
        else:
            rows = self._q(f"SELECT {cols} FROM reports WHERE firstboot=1 AND pool=? ORDER BY node", (pool,))
        return [_record(r) for r in rows]

    def counts(self, pool: str) -> PoolCounts:
        rows = self._q(f"SELECT {', '.join(_COUNTERS)} FROM pool_counts WHERE pool=?", (pool,))
        return PoolCounts(**{k: rows[0][k] for k in _COUNTERS}) if rows else PoolCounts()

    def proof(self, pool: str, config: str, image: Optional[str] = None) -> Proof:
        if image is None:
            rows = self._q("SELECT COALESCE(SUM(updated), 0), COALESCE(SUM(ready), 0) FROM proofs "
                           "WHERE pool=? AND config=?", (pool, config))
        else:
            rows = self._q("SELECT COALESCE(SUM(updated), 0), COALESCE(SUM(ready), 0) FROM proofs "
                           "WHERE pool=? AND config=? AND image=?", (pool, config, image))
        return Proof(rows[0][0], rows[0][1])

    def membership_signature(self) -> Optional[str]:
        return self.meta("membership_signature")

    def rebuild(self, signature: str, assign: Callable[[Dict[str, Any]], Membership]) -> int:
        with self.db.write() as c:
            c.execute("DELETE FROM pool_counts")
            c.execute("DELETE FROM proofs")
            n = 0
            for row in c.execute("SELECT node, body FROM reports").fetchall():
                body = json.loads(row["body"])
                m = assign(body)
                c.execute("UPDATE reports SET pool=?, why=?, degraded=? WHERE node=?",
                          (m.pool, m.why, m.degraded, row["node"]))
                _add(c, m.pool, m.degraded, body, 1)
                n += 1
            Database.set_meta(c, "membership_signature", signature)
        return n

    def delete_node(self, node: str, now: float) -> Deleted:
        with self.db.write() as c:
            old = c.execute("SELECT pool, degraded, body FROM reports WHERE node=?", (node,)).fetchone()
            if old is not None:
                _add(c, old["pool"], old["degraded"], json.loads(old["body"]), -1)
                c.execute("DELETE FROM reports WHERE node=?", (node,))
            lease = c.execute("SELECT pool FROM leases WHERE node=?", (node,)).fetchone()
            if lease is not None:
                c.execute("DELETE FROM leases WHERE node=?", (node,))
                Database.record_drain(c, node, lease["pool"], "uncordon", "node deleted by the admin")
            gone = c.execute("DELETE FROM credentials WHERE node=?", (node,)).rowcount
        return Deleted(bool(old is not None or lease is not None or gone), old["pool"] if old is not None else None,
                       lease["pool"] if lease is not None else None)

    # -- identity -------------------------------------------------------------------------------

    def credential(self, node: str) -> Optional[str]:
        rows = self._q("SELECT hash FROM credentials WHERE node=?", (node,))
        return rows[0][0] if rows else None

    def credential_owner(self, credential_hash: str) -> Optional[str]:
        rows = self._q("SELECT node FROM credentials WHERE hash=?", (credential_hash,))
        return rows[0][0] if rows else None

    def put_credential(self, node: str, credential_hash: str, now: float, replace: bool, approved: bool = True,
                       by: str = "", max_pending: Optional[int] = None,
                       max_unvetted: Optional[int] = None, address: str = "",
                       max_per_address: Optional[int] = None) -> bool:
        """The caps are counted in the same write transaction: every worker shares them."""
        with self.db.write() as c:
            exists = c.execute("SELECT 1 FROM credentials WHERE node=?", (node,)).fetchone() is not None
            if exists and not replace:
                return False
            if not exists and not approved and max_pending is not None and \
                    c.execute("SELECT COUNT(*) FROM credentials WHERE approved=0").fetchone()[0] >= max_pending:
                raise TooManyPending(node)
            if not exists and not approved and max_per_address is not None and address and c.execute(
                    "SELECT COUNT(*) FROM credentials WHERE approved=0 AND address=?", (address,)
            ).fetchone()[0] >= max_per_address:
                raise TooManyFromAddress(node)
            if not exists and not (approved and by in VETTED_BY) and max_unvetted is not None and \
                    c.execute(_UNVETTED_COUNT, VETTED_BY).fetchone()[0] >= max_unvetted:
                raise TooManyUnvetted(node)
            c.execute("INSERT INTO credentials (node, hash, created, approved, approved_by, address) "
                      "VALUES (?,?,?,?,?,?) "
                      "ON CONFLICT(node) DO UPDATE SET hash=excluded.hash, created=excluded.created",
                      (node, credential_hash, now, now if approved else 0, by if approved else "", address))
            return True

    def registration(self, node: str) -> Optional[Registration]:
        rows = self._q(f"SELECT {_REG_COLUMNS} FROM credentials WHERE node=?", (node,))
        return registration_from(node, dict(rows[0])) if rows else None

    def registrations(self, pending: Optional[bool] = None, after: str = "", limit: int = 500) -> List[Registration]:
        where = "" if pending is None else ("AND approved=0 " if pending else "AND approved>0 ")
        rows = self._q(f"SELECT {_REG_COLUMNS} FROM credentials WHERE node > ? {where}ORDER BY node LIMIT ?",
                       (after, limit))
        return [registration_from(r["node"], dict(r)) for r in rows]

    def pending_count(self) -> int:
        return self._q("SELECT COUNT(*) FROM credentials WHERE approved=0")[0][0]

    def unvetted_count(self) -> int:
        return self._q(_UNVETTED_COUNT, VETTED_BY)[0][0]

    def approve(self, node: str, now: float, by: str, labels: Optional[Dict[str, str]] = None) -> Optional[Registration]:
        with self.db.write() as c:
            row = c.execute("SELECT approved FROM credentials WHERE node=?", (node,)).fetchone()
            if row is None:
                return None
            c.execute("UPDATE credentials SET approved=?, approved_by=? WHERE node=?",
                      (row["approved"] or now, by, node))
            if labels is not None:
                c.execute("UPDATE credentials SET labels=? WHERE node=?", (json.dumps(labels, sort_keys=True), node))
        return self.registration(node)

    def note_served(self, node: str, config: str) -> None:
        rows = self._q("SELECT served FROM credentials WHERE node=?", (node,))
        if not rows or config in json.loads(rows[0][0] or "[]"):
            return  # nothing to remember, or remembered: no write
        with self.db.write() as c:
            row = c.execute("SELECT served FROM credentials WHERE node=?", (node,)).fetchone()
            if row is None:
                return
            served = [s for s in json.loads(row[0] or "[]") if s != config] + [config]
            c.execute("UPDATE credentials SET served=? WHERE node=?", (json.dumps(served[-SERVED_KEEP:]), node))

    # -- leases -------------------------------------------------------------------------------

    def acquire_lease(self, node: str, pool: str, config: str, limit: int, ttl: float, now: float):
        from agent.server.rollout.drains import DrainAnswer

        with self.db.write() as c:
            for row in c.execute("SELECT node, pool FROM leases WHERE expires <= ?", (now,)).fetchall():
                Database.record_drain(c, row["node"], row["pool"], "expired", "lease TTL passed without renewal")
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
                soonest = min((r["expires"] for r in rows), default=now + ttl) - now  # none: limit 0
                retry = int(max(1, min(30, math.ceil(soonest))))
                return DrainAnswer(False, node, pool, limit, retry_after=retry, holders=holders)
            c.execute("INSERT INTO leases (node, pool, config, granted, expires) VALUES (?,?,?,?,?)",
                      (node, pool, config, now, now + ttl))
            Database.record_drain(c, node, pool, "cordon", config)
            Database.record_drain(c, node, pool, "drain", DRAIN_GRANTED)
            return DrainAnswer(True, node, pool, limit, now + ttl, holders=holders + [node])

    def release_lease(self, node: str, why: str) -> Optional[str]:
        with self.db.write() as c:
            row = c.execute("SELECT pool FROM leases WHERE node=?", (node,)).fetchone()
            if row is None:
                return None
            c.execute("DELETE FROM leases WHERE node=?", (node,))
            Database.record_drain(c, node, row["pool"], "uncordon", why)
            return row["pool"]

    def leases(self, pool: Optional[str] = None, now: Optional[float] = None) -> List[Dict[str, Any]]:
        now = time.time() if now is None else now
        if pool is None:
            rows = self._q("SELECT node, pool, config, granted, expires FROM leases WHERE expires > ?", (now,))
        else:
            rows = self._q("SELECT node, pool, config, granted, expires FROM leases WHERE pool=? AND expires > ?",
                           (pool, now))
        return [dict(r) for r in rows]

    def drain_events(self, node: Optional[str] = None) -> List[Dict[str, Any]]:
        return self.db.drain_events(node)

    # -- pools, rendered configs, meta ----------------------------------------------------------

    def pools(self) -> Dict[str, PoolRow]:
        return {name: PoolRow.from_dict(row) for name, row in self.db.pools().items()}

    def update_pool(self, name: str, decide: Callable[[Optional[PoolRow]], Optional[PoolRow]]) -> PoolRow:
        with self.db.write() as c:
            row = c.execute("SELECT name, target, current, held, rendered, rollout FROM pools WHERE name=?",
                            (name,)).fetchone()
            old = PoolRow.from_dict(dict(row)) if row is not None else None
            new = decide(old)
            if new is None or new == old:
                return old  # type: ignore[return-value]
            Database.set_pool(c, name, new.target, new.current, new.held, new.rendered,
                              old.as_dict() if old is not None else None, new.rollout)
            return new

    def history(self, pool: str) -> List[Dict[str, Any]]:
        return self.db.history(pool)

    def put_rendered(self, pool: str, name: str, spec: Dict[str, Any], sources: List[str], inputs: str = "") -> None:
        with self.db.write() as c:
            Database.put_rendered(c, pool, name, spec, sources)
            if inputs:
                c.execute("INSERT INTO renderings (inputs, name, claimed) VALUES (?,?,?) ON CONFLICT(inputs) "
                          "DO UPDATE SET name=excluded.name", (inputs, name, time.time()))

    def rendered_for(self, inputs: str) -> Optional[Tuple[str, Dict[str, Any], List[str]]]:
        rows = self._q("SELECT r.name, r.spec, r.sources FROM renderings g JOIN rendered r ON r.name = g.name "
                       "WHERE g.inputs=?", (inputs,))
        return (rows[0][0], json.loads(rows[0][1]), json.loads(rows[0][2])) if rows else None

    def claim_render(self, inputs: str, now: float, stale_after: float) -> bool:
        with self.db.write() as c:
            row = c.execute("SELECT name, claimed FROM renderings WHERE inputs=?", (inputs,)).fetchone()
            if row is not None and (row["name"] or now - row["claimed"] < stale_after):
                return False
            c.execute("INSERT INTO renderings (inputs, name, claimed) VALUES (?, '', ?) ON CONFLICT(inputs) "
                      "DO UPDATE SET claimed=excluded.claimed", (inputs, now))
            return True

    def rendered_spec(self, name: str) -> Optional[Dict[str, Any]]:
        return self.db.rendered_spec(name)

    def rendered_pool(self, name: str) -> Optional[str]:
        return self.db.rendered_pool(name)

    def meta(self, key: str) -> Optional[str]:
        return self.db.meta(key)

    def set_meta(self, key: str, value: str) -> None:
        if self.db.meta(key) == value:
            return  # no write (and no new data_version) when nothing changes
        with self.db.write() as c:
            Database.set_meta(c, key, value)

    def serving(self, pool: str, node: Optional[str] = None) -> Serving:
        rows = self._q(
            "SELECT (SELECT value FROM meta WHERE key='state_signature') AS sig, "
            "p.name AS pname, p.target, p.current, p.held, p.rendered, p.rollout, pr.image, pr.updated, pr.ready, "
            "r.node, r.pool, r.why, r.degraded, r.body, r.received "
            "FROM (SELECT 1) AS one LEFT JOIN pools p ON p.name=? "
            "LEFT JOIN proofs pr ON pr.pool=p.name AND pr.config=p.target "
            "LEFT JOIN reports r ON r.node=?", (pool, node or ""))
        first = rows[0]
        row = None
        if first["pname"] is not None:
            row = PoolRow.from_dict({"name": first["pname"], "target": first["target"], "current": first["current"],
                                     "held": first["held"], "rendered": first["rendered"], "rollout": first["rollout"]})
        proofs = {r["image"]: Proof(r["updated"], r["ready"]) for r in rows if r["image"] is not None}
        rec = _record(first) if first["node"] is not None else None
        return Serving(first["sig"], row, proofs, rec)

    def generation(self) -> Any:
        return self.db.generation()

    def close(self) -> None:
        self.db.close()


def _release_if_on(c: sqlite3.Connection, node: str, current_config: str, why: str, now: float) -> bool:
    """Inside a write transaction: end the lease when the node is Done on the leased config."""
    row = c.execute("SELECT pool, config FROM leases WHERE node=?", (node,)).fetchone()
    if row is None or (row["config"] and current_config and row["config"] != current_config):
        return False
    c.execute("DELETE FROM leases WHERE node=?", (node,))
    Database.record_drain(c, node, row["pool"], "uncordon", why)
    return True
