"""An in-memory index of node records with counters and proofs kept per change (pure).

The etcd node store feeds it from a watch: every replica holds the same index, so a count, a
proof or a config fetch is a dictionary look-up that costs the same at 100 and 50,000 nodes and
keeps answering while etcd is away. Each change carries its etcd ``mod_revision``; a change
older than what the index holds for that node is ignored, so a replica's own write (applied at
once, for read-your-writes) and the same write arriving later through the watch agree.
"""

from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from agent.server.rollout.firstboots import is_open
from agent.server.rollout.progress import Membership
from agent.server.store.changejournal import ChangeJournal
from agent.server.store.nodestore import NodeRecord, PoolCounts, Proof, contribution

_COUNTERS = ("machine", "done", "working", "reported_degraded", "degraded", "refused")
ProofKey = Tuple[str, str, str]  # (pool, config, image)


class NodeIndex:
    def __init__(self) -> None:
        self.records: Dict[str, NodeRecord] = {}
        self.revisions: Dict[str, int] = {}
        self.counts: Dict[str, Dict[str, int]] = {}
        self.proofs: Dict[ProofKey, Tuple[int, int]] = {}
        self.assign: Optional[Callable[[Dict[str, Any]], Membership]] = None
        self.signature: Optional[str] = None
        self.open: Dict[str, NodeRecord] = {}  # first boots not done (firstboots.is_open): what views list
        self.journal = ChangeJournal()  # each record replaced: who reads by change (kube_nodes.NodeTruth)

    def apply(self, node: str, record: Optional[NodeRecord], revision: int) -> bool:
        """Set (or, with None, remove) a node's record at ``revision``; False if it is older."""
        if revision and revision <= self.revisions.get(node, 0):
            return False
        if record is not None and self.assign is not None:
            record = _with_membership(record, self.assign(record.report))
        old = self.records.pop(node, None)
        self.open.pop(node, None)
        if old is not None:
            self._add(old, -1)
        if record is not None:
            self.records[node] = record
            self._add(record, 1)
            if is_open(record.report):
                self.open[node] = record
        self.revisions[node] = revision
        self.journal.note(node)
        return True

    def rebuild(self, signature: str, assign: Callable[[Dict[str, Any]], Membership]) -> int:
        self.assign, self.signature = assign, signature
        self.journal.reset()
        records = list(self.records.values())
        self.records, self.counts, self.proofs, self.open = {}, {}, {}, {}
        for rec in records:
            rec = _with_membership(rec, assign(rec.report))
            self.records[rec.node] = rec
            self._add(rec, 1)
            if is_open(rec.report):
                self.open[rec.node] = rec
        return len(records)

    def clear(self) -> None:
        self.records, self.revisions, self.counts, self.proofs, self.open = {}, {}, {}, {}, {}
        self.journal.reset()

    def pool_counts(self, pool: str) -> PoolCounts:
        c = self.counts.get(pool)
        return PoolCounts(**c) if c else PoolCounts()

    def proof(self, pool: str, config: str, image: Optional[str] = None) -> Proof:
        if image is not None:
            return Proof(*self.proofs.get((pool, config, image), (0, 0)))
        return self._sum(pool, config)

    def proofs_of(self, pool: str, config: str) -> Dict[str, Proof]:
        return {k[2]: Proof(*v) for k, v in self.proofs.items() if k[0] == pool and k[1] == config}

    def _sum(self, pool: str, config: str) -> Proof:
        found = self.proofs_of(pool, config).values()
        return Proof(sum(p.updated for p in found), sum(p.ready for p in found))

    def _add(self, rec: NodeRecord, sign: int) -> None:
        deltas, proof_key, ready = contribution(rec.pool, rec.degraded, rec.report)
        counts = self.counts.setdefault(rec.pool, dict.fromkeys(_COUNTERS, 0))
        for k in _COUNTERS:
            counts[k] += sign * deltas[k]
        if counts["machine"] <= 0:
            del self.counts[rec.pool]
        if proof_key is not None:
            updated, ready_n = self.proofs.get(proof_key, (0, 0))
            updated, ready_n = updated + sign, ready_n + sign * ready
            if updated <= 0:
                self.proofs.pop(proof_key, None)
            else:
                self.proofs[proof_key] = (updated, ready_n)


def _with_membership(rec: NodeRecord, m: Membership) -> NodeRecord:
    if (rec.pool, rec.why, rec.degraded) == (m.pool, m.why, m.degraded):
        return rec
    return replace(rec, pool=m.pool, why=m.why, degraded=m.degraded)


class IndexedReads:
    """The NodeStore reads that a store following its nodes with a watch answers from its
    ``NodeIndex`` (the etcd and the Kubernetes stores): no round trip. Needs ``self._lock`` and
    ``self._index``."""

    _lock: Any
    _index: NodeIndex

    def node(self, node: str) -> Optional[NodeRecord]:
        with self._lock:
            return self._index.records.get(node)

    def nodes(self, pool: Optional[str] = None, after: str = "", limit: int = 500) -> List[NodeRecord]:
        with self._lock:
            names = sorted(n for n, r in self._index.records.items()
                           if n > after and (pool is None or r.pool == pool))[:limit]
            return [self._index.records[n] for n in names]

    def counts(self, pool: str) -> PoolCounts:
        with self._lock:
            return self._index.pool_counts(pool)

    def open_first_boots(self, pool: Optional[str] = None) -> List[NodeRecord]:
        with self._lock:
            return [r for _, r in sorted(self._index.open.items()) if pool is None or r.pool == pool]

    def proof(self, pool: str, config: str, image: Optional[str] = None) -> Proof:
        with self._lock:
            return self._index.proof(pool, config, image)

    def record_changes(self, mark: Optional[int]) -> Tuple[int, Optional[Set[str]]]:
        """(the mark now, the nodes whose record changed after ``mark``; None: read them all)."""
        with self._lock:
            return self._index.journal.since(mark)

    def membership_signature(self) -> Optional[str]:
        return self._index.signature

    def rebuild(self, signature: str, assign: Callable[[Dict[str, Any]], Membership]) -> int:
        # Membership is a function of the report and the pools every replica loads alike, so
        # each process re-derives it in memory; nothing is rewritten in the shared store.
        with self._lock:
            return self._index.rebuild(signature, assign)
