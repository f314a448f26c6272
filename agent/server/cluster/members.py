"""A pool's members as the targeting reads them from the node store (no Node objects): which
records count (``counted``), what a member is made of (``member_of_record``), and ``MemberMemo``,
which parses again only the reports that changed since the pool's last step read them.

Why the memo: the pool's step reads every member of its pool (as upstream's sync lists the pool's
Nodes); at 5,000 nodes, parsing 5,000 reports and making their members was two thirds of a step
(docs/performance.md, "Fleet scale: server cost against the number of nodes"). A report's stored
text is its identity: the same text, the same member.
"""

import bisect
import json
import threading
from typing import Any, Dict, List, Optional, Tuple

from agent.server.rollout import firstboots
from agent.server.rollout.targeting import Member
from agent.server.store.nodestore import SERVER_KEY, NodeRecord

PAGE = 5000
JOURNAL = 20000  # member changes a pool keeps for its step, at least (one further behind reads the pool whole)


class _Pool:
    """One pool's members as the memo keeps them."""

    def __init__(self) -> None:
        self.seq: Optional[int] = None  # the store's change number they are read up to (None: read whole)
        self.keys: Dict[str, Tuple[str, float]] = {}  # node -> (report text, registered) its member is made of
        self.members: Dict[str, Member] = {}  # the counted ones
        self.journal: List[Tuple[int, str]] = []  # (version, node) of each change of a member, oldest first
        self.version = 0
        self.listed: Optional[List[Member]] = None


class MemberMemo:
    """Members by (node, report text, registration time), kept per pool from one read to the next.
    With a store that numbers its changes (``member_changes``: SQLite) a read costs the nodes
    changed since the last one, and ``changes`` tells a pool's step which members changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: Dict[str, _Pool] = {}

    def members(self, store: Any, pool: str) -> List[Member]:
        return self.read(store, pool)[0]

    def read(self, store: Any, pool: str) -> Tuple[List[Member], Optional[int]]:
        """The pool's members and the version they are (for ``changes``; None: another store)."""
        with self._lock:
            kept = self._refresh(store, pool)
            if kept is None:
                return read_members(store, pool), None
            if kept.listed is None:  # the same list while nothing changed (views keep what they made from it)
                kept.listed = [kept.members[n] for n in sorted(kept.members)]
            return kept.listed, kept.version

    def changes(self, store: Any, pool: str, since: Optional[int]) -> Optional[Tuple[int, List[Member], List[str]]]:
        """(version, the members that changed or joined since version ``since``, the names of those
        that left). None: not known (another store, or ``since`` is too old): sync with ``members``."""
        with self._lock:
            kept = self._refresh(store, pool)
            if kept is None or since is None or since > kept.version or \
                    (kept.journal and kept.journal[0][0] > since + 1) or (not kept.journal and since != kept.version):
                return None
            names = {n for _, n in kept.journal[bisect.bisect_right(kept.journal, (since, "\uffff")):]}
            return (kept.version, [kept.members[n] for n in sorted(names) if n in kept.members],
                    sorted(n for n in names if n not in kept.members))

    def _refresh(self, store: Any, pool: str) -> Optional[_Pool]:
        kept = self._pools.setdefault(pool, _Pool())
        feed = store.member_changes(kept.seq) if kept.seq is not None else None
        if feed is not None:
            kept.seq = feed[0]
            for node, in_pool, text, received, created in feed[1]:
                self._note(kept, pool, node, (text, created) if in_pool == pool else None, received)
            return kept
        head = store.member_changes(None)  # before the read: the changes after it are read next time
        texts = store.member_texts(pool)
        if texts is None:
            return None
        seen = set()
        for node, text, received, created in texts:
            seen.add(node)
            self._note(kept, pool, node, (text, created), received)
        for node in [n for n in kept.keys if n not in seen]:
            self._note(kept, pool, node, None, 0.0)
        kept.seq = head[0] if head is not None else None
        return kept

    def _note(self, kept: _Pool, pool: str, node: str, key: Optional[Tuple[str, float]], received: float) -> None:
        """The node's record now (``key``: its text and registration; None: not in the pool)."""
        if kept.keys.get(node) == key:
            return
        was = kept.members.pop(node, None)
        member = None
        if key is None:
            kept.keys.pop(node, None)
        else:
            kept.keys[node] = key
            rec = NodeRecord(node, pool, "", "", json.loads(key[0]), received)
            member = member_of_record(rec, key[1]) if counted(rec) else None
            if member is not None:
                kept.members[node] = member
        if was is None and member is None:
            return
        kept.version += 1
        kept.journal.append((kept.version, node))
        if len(kept.journal) > 2 * JOURNAL:  # trimmed by halves: a change costs O(1) amortised
            del kept.journal[:JOURNAL]
        kept.listed = None


def read_members(store: Any, pool: str) -> List[Member]:
    """The members of ``pool`` from ``nodes`` and ``registrations``, page by page."""
    created = {r.node: r.created for r in store.registrations(None, "", PAGE)}
    out: List[Member] = []
    after = ""
    while True:
        page = store.nodes(pool=pool, after=after, limit=PAGE)
        out.extend(member_of_record(rec, created.get(rec.node, 0.0)) for rec in page if counted(rec))
        if len(page) < PAGE:
            return out
        after = page[-1].node


def in_first_boot(rec: NodeRecord) -> bool:
    """The node's first boot is not Done: its record says so (firstboots.is_open: running or
    failed), or (a node that sends no first-boot record) its newest report came from its first
    boot and is not Done (the server's mark)."""
    mark = rec.report.get(SERVER_KEY)
    return (isinstance(mark, dict) and bool(mark.get("firstBoot"))) or firstboots.is_open(rec.report)


def counted(rec: NodeRecord) -> bool:
    """A record that is a member of its pool for the targeting: not a registration waiting for
    approval, nor a node whose first boot is not Done yet (upstream it is no Node yet: its kubelet
    starts after the first boot; it is targeted once it reports Done)."""
    mark = rec.report.get(SERVER_KEY)
    return bool(rec.pool) and not (isinstance(mark, dict) and mark.get("pending")) and not in_first_boot(rec)


def member_of_record(rec: NodeRecord, created: float) -> Member:
    """A member from the node store (no Node objects): the labels the admin vouched for, else the
    reported ones; registered at ``created``; ready as far as anyone knows."""
    mark = rec.report.get(SERVER_KEY)
    labels = mark.get("labels") if isinstance(mark, dict) and isinstance(mark.get("labels"), dict) else None
    if labels is None:
        labels = rec.report.get("labels") if isinstance(rec.report.get("labels"), dict) else {}
    return Member(rec.node, rec.report, True, "", {str(k): str(v) for k, v in labels.items()}, created)
