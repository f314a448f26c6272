"""A pool's members as the targeting reads them from the node store (no Node objects): which
records count (``counted``), what a member is made of (``member_of_record``), and ``MemberMemo``,
which parses again only the reports that changed since the pool's last step read them.

Why the memo: the pool's step reads every member of its pool (as upstream's sync lists the pool's
Nodes); at 5,000 nodes, parsing 5,000 reports and making their members was two thirds of a step
(docs/performance.md, "Fleet scale: server cost against the number of nodes"). A report's stored
text is its identity: the same text, the same member.
"""

import json
import threading
from typing import Any, Dict, List, Optional, Tuple

from agent.server.rollout import firstboots
from agent.server.rollout.targeting import Member
from agent.server.store.nodestore import SERVER_KEY, NodeRecord

PAGE = 5000


class MemberMemo:
    """Members by (node, report text, registration time), kept per pool from one read to the next."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: Dict[str, Dict[Tuple[str, str, float], Optional[Member]]] = {}
        self._lists: Dict[str, List[Member]] = {}

    def members(self, store: Any, pool: str) -> List[Member]:
        texts = store.member_texts(pool)
        if texts is None:
            return read_members(store, pool)
        with self._lock:
            kept = self._pools.get(pool, {})
        now: Dict[Tuple[str, str, float], Optional[Member]] = {}
        for node, text, received, created in texts:
            key = (node, text, created)
            if key in kept:
                now[key] = kept[key]
                continue
            rec = NodeRecord(node, pool, "", "", json.loads(text), received)
            now[key] = member_of_record(rec, created) if counted(rec) else None
        with self._lock:
            if now.keys() == kept.keys() and pool in self._lists:  # nothing changed: the same list (views keep
                return self._lists[pool]                             # what they made from it: service._rollout_view)
            self._pools[pool] = now  # only the pool's nodes of this read: bounded by the pool's size
            self._lists[pool] = [m for m in now.values() if m is not None]
            return self._lists[pool]


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
