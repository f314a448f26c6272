"""Ours: a pool's members filed by what its step asks of them (pure data, no effects), kept from
one step to the next so that a step costs what changed, not a pass over the pool.

Upstream's node controller lists the pool's Nodes and sorts its candidates at every sync
(node_controller.go ``getAllCandidateMachines``, ``sortNodeList``). Here a member is filed once
under (its Member, its entry in the pool's rollout record, the pool's target and image): as
unavailable, failing, a candidate skipped for not being ready, a ready candidate in rollout order,
and in the counts the canary and the deferred nodes read. A step files again only the members
whose Member object changed (the member sources make a new one only for a Node or a report that
changed: members.MemberMemo, kube_nodes.NodeTruth) and those whose entry changed (the entries are
the nodes in flight, at most maxUnavailable and the failed and deferred ones); a new target or
image files every member again, once. What the index answers is what
candidates.get_all_candidate_machines and targeting's counts answer over the whole list
(tests/unit/test_pool_index.py compares them on generated pools and histories); names come in
name order.
"""

import bisect
from dataclasses import dataclass
from typing import Any, Collection, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from agent.core.rolloutpolicy import node_priority
from agent.server.rollout import nodestatus
from agent.server.rollout.candidates import (
    ZONE_LABEL,
    Member,
    check_node_candidacy_for_update,
    is_desired_equal_to_pool,
)
from agent.server.rollout.entries import effective, entry_of


class Ordered:
    """Keys kept in order (a sorted list, kept by bisection): add, discard, count, the first n."""

    def __init__(self) -> None:
        self._keys: List[Any] = []
        self._set: Set[Any] = set()

    def add(self, key: Any) -> None:
        if key not in self._set:
            bisect.insort(self._keys, key)
            self._set.add(key)

    def discard(self, key: Any) -> None:
        if key in self._set:
            del self._keys[bisect.bisect_left(self._keys, key)]
            self._set.discard(key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._keys)

    def first(self, n: int) -> List[Any]:
        return self._keys[:max(0, n)]


@dataclass(frozen=True)
class Facts:
    """What one member is to its pool's step under (its entry, the target, the image)."""
    unavailable: bool  # IsUnavailableForUpdate
    failing: bool  # no candidate (CheckNodeCandidacyForUpdate) and IsNodeMCDFailing
    skipped: bool  # a candidate that is not ready: upstream skips it
    ranked: bool  # a ready candidate node-agent reports for: targeted in rollout order
    waiting: bool  # a candidate node-agent reports for, ready or not (who waits while the pool is held)
    ready_on_target: bool  # ready and IsDone on the target (the canary)
    on_target: bool  # desires the target's config (IsDesiredMachineConfigEqualToPool, no image)
    ours_not_done: bool  # node-agent reports for it and it is not IsDone on the target (deferred nodes)


def facts_of(member: Member, entry: Optional[Mapping[str, Any]], target: str, image: Optional[str]) -> Facts:
    eff = effective(member, entry)
    candidate = check_node_candidacy_for_update(eff, target, image)
    done = nodestatus.is_done(eff, target, image)
    return Facts(unavailable=nodestatus.is_unavailable_for_update(member.not_ready, eff),
                 failing=not candidate and nodestatus.is_mcd_failing(eff),
                 skipped=candidate and bool(member.not_ready),
                 ranked=candidate and not member.not_ready and member.ours,
                 waiting=candidate and member.ours,
                 ready_on_target=done and not member.not_ready,
                 on_target=is_desired_equal_to_pool(eff, target, None),
                 ours_not_done=member.ours and not done)


def filed_key(entry: Optional[Mapping[str, Any]]) -> Optional[Tuple[str, Any]]:
    """What of an entry a member's Facts depend on (entries.effective reads these two)."""
    return None if entry is None else (str(entry.get("config") or ""), entry.get("image"))


def rank_key(member: Member) -> Tuple:
    """targeting.rollout_order's key but for the deferred nodes (which the step puts last itself):
    a higher rollout-priority label first, then sortNodeList (zone label first by zone, then the
    oldest; the name breaks ties)."""
    zone = member.labels.get(ZONE_LABEL)
    return (-node_priority(member.labels)[0], 0 if zone is not None else 1, zone or "", member.created, member.name)


@dataclass(frozen=True)
class Picked:
    """candidates.Candidates from the index: the same numbers and names (in name order), with the
    ready candidates counted (``count``) rather than listed; ``PoolIndex.first`` gives them in
    rollout order."""
    capacity: int
    unavailable: List[str]
    failing: List[str]
    room: int
    not_ready: List[str]
    blocked: List[str]
    count: int


class PoolIndex:
    """One pool's members filed by their Facts. ``sync`` or ``apply`` says which members changed,
    ``classify`` files them again under the rollout record and target of a step, and the rest reads."""

    def __init__(self) -> None:
        self.members: Dict[str, Member] = {}
        self.cursor: Optional[int] = None  # the member source's mark of what is filed (members.MemberMemo.changes)
        self._facts: Dict[str, Facts] = {}
        self._filed_entry: Dict[str, Tuple[str, Any]] = {}  # what of its entry each member was filed under
        self._rank: Dict[str, Tuple] = {}
        self._under: Optional[Tuple[str, Optional[str]]] = None
        self._dirty: Set[str] = set()
        self.unavailable, self.failing, self.skipped, self.waiting = Ordered(), Ordered(), Ordered(), Ordered()
        self.ranked = Ordered()  # rank keys (rank_key)
        self.ready_on_target = self.on_target = self.ours_not_done = 0

    @classmethod
    def of(cls, members: Iterable[Member]) -> "PoolIndex":
        index = cls()
        index.sync(members)
        return index

    def sync(self, members: Iterable[Member]) -> None:
        """The pool's members now, whole: one that is not the object filed last time is filed
        again, one not among them leaves (identity checks only: a member is made again only when
        its Node or report changed)."""
        seen: Set[str] = set()
        changed = []
        for m in members:
            seen.add(m.name)
            if self.members.get(m.name) is not m:
                changed.append(m)
        self.apply(changed, [n for n in self.members if n not in seen])

    def apply(self, changed: Iterable[Member], removed: Iterable[str] = ()) -> None:
        """Members that changed or joined, and the names of those that left."""
        for name in removed:
            if self.members.pop(name, None) is not None:
                self._dirty.add(name)
        for m in changed:
            self.members[m.name] = m
            self._dirty.add(m.name)

    def classify(self, rollout: Optional[Mapping[str, Any]], target: str, image: Optional[str]) -> None:
        """File again the members that changed and those whose entry in ``rollout`` is not the one
        they were filed under; every member when the target or image moved."""
        if self._under != (target, image):
            self._under = (target, image)
            dirty = set(self.members) | set(self._facts)
        else:
            dirty = self._dirty
            targets = (rollout or {}).get("targets") or {}
            for name in set(self._filed_entry).union(targets):
                if self._filed_entry.get(name) != filed_key(entry_of(rollout, name)):
                    dirty.add(name)
        self._dirty = set()
        for name in dirty:
            self._refile(name, entry_of(rollout, name), target, image)

    def _refile(self, name: str, entry: Optional[Mapping[str, Any]], target: str, image: Optional[str]) -> None:
        old = self._facts.pop(name, None)
        if old is not None:
            self._file(name, old, -1)
        self._filed_entry.pop(name, None)
        member = self.members.get(name)
        if member is None:
            self._rank.pop(name, None)
            return
        facts = facts_of(member, entry, target, image)
        self._facts[name] = facts
        self._rank[name] = rank_key(member)
        if entry is not None:
            self._filed_entry[name] = filed_key(entry)
        self._file(name, facts, 1)

    def _file(self, name: str, facts: Facts, sign: int) -> None:
        for wanted, names, key in ((facts.unavailable, self.unavailable, name), (facts.failing, self.failing, name),
                                   (facts.skipped, self.skipped, name), (facts.waiting, self.waiting, name),
                                   (facts.ranked, self.ranked, self._rank.get(name))):
            if wanted:
                (names.add if sign > 0 else names.discard)(key)
        self.ready_on_target += sign * facts.ready_on_target
        self.on_target += sign * facts.on_target
        self.ours_not_done += sign * facts.ours_not_done

    # -- what a step reads -------------------------------------------------------------------------

    def not_done_among(self, names: Iterable[str]) -> int:
        """How many of ``names`` are node-agent's members not IsDone on the target (``ours_not_done``)."""
        return sum(1 for n in names if n in self._facts and self._facts[n].ours_not_done)

    def candidates(self, max_unavailable: int, retrying: Sequence[str] = (),
                   blocked: Collection[str] = ()) -> Picked:
        """candidates.get_all_candidate_machines over the filed members (classify first)."""
        held = [n for n in retrying if n in self._facts and not self._facts[n].unavailable]
        waits = sorted(n for n in blocked if n in self._facts and self._facts[n].ranked)
        failing = list(self.failing)
        room = max(0, max_unavailable - len(self.unavailable) - len(held))
        return Picked(max(0, room - len(failing)), list(self.unavailable), failing, room, list(self.skipped), waits,
                      len(self.ranked) - len(waits))

    def first(self, n: int, leave_out: Collection[str]) -> List[Member]:
        """The first ``n`` ready candidates in rollout order, but those named in ``leave_out``."""
        out: List[Member] = []
        if n <= 0:
            return out
        for key in self.ranked:
            if key[-1] not in leave_out:
                out.append(self.members[key[-1]])
                if len(out) == n:
                    break
        return out

    def in_order(self, names: Iterable[str]) -> List[Member]:
        """The ready candidates among ``names``, in rollout order."""
        keys = sorted(self._rank[n] for n in names if n in self._facts and self._facts[n].ranked)
        return [self.members[k[-1]] for k in keys]
