"""Every pool's Nodes by their labels (nodestatus.group_by_pool), kept from the Node cache's
change journal: a Node that changed is grouped again, not the fleet (ours; upstream's
``GetNodesForPool`` lists every Node and matches each against the pool at every sync).

The grouping numbers what it moved in a journal of its own, so a reader (the pools' counts and
their steps' members: kube_nodes.NodeTruth) takes the names changed since its mark together with
the Nodes as the grouping holds them, and never sees a Node the grouping has not placed yet.
Without a journal (a cache that keeps none), a re-list, or a change to the pools' selectors, it
groups every Node again and its own journal starts over (every reader reads its pool whole).
Not locked: the owner holds its lock around each call.
"""

from typing import Any, Dict, List, Optional, Set, Tuple

from agent.server.rollout import nodestatus
from agent.server.store.changejournal import ChangeJournal


class NodeGroups:
    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.by_pool: Dict[str, Dict[str, Dict[str, Any]]] = {}
        self.pool_of: Dict[str, str] = {}
        self.journal = ChangeJournal()  # the names this grouping placed again
        self._key: Any = None  # what it was grouped under: the pools' selectors (and a cache's change count)
        self._cache_mark: Optional[int] = None

    def update(self, pools: Dict[str, Dict[str, Any]]) -> None:
        """Bring the grouping up to the cache's newest Nodes."""
        selectors = pools_key(pools)
        follow = getattr(self.cache, "changed_since", None)
        if follow is None:  # a cache without a journal (tests' stand-ins): regroup when anything changed
            key = (selectors, self.cache.changes)
            if key != self._key:
                self._regroup(pools, self.cache.snapshot())
                self._key = key
            return
        mark, names = follow(self._cache_mark if selectors == self._key else None)
        if names is None:
            self._regroup(pools, self.cache.snapshot())
        else:
            for name in names:
                self._place(name, self.cache.get(name), pools)
        self._key, self._cache_mark = selectors, mark

    def _regroup(self, pools: Dict[str, Dict[str, Any]], nodes: Dict[str, Dict[str, Any]]) -> None:
        grouped = nodestatus.group_by_pool(pools, nodes.values())
        self.by_pool = {pool: {_name(n): n for n in members} for pool, members in grouped.items()}
        self.pool_of = {name: pool for pool, members in self.by_pool.items() for name in members}
        self.journal.reset()

    def _place(self, name: str, node: Optional[Dict[str, Any]], pools: Dict[str, Dict[str, Any]]) -> None:
        was = self.pool_of.pop(name, None)
        if was is not None:
            self.by_pool[was].pop(name, None)
        pool = None
        if node is not None:
            pool = nodestatus.pool_for_node(pools, (node.get("metadata") or {}).get("labels") or {})[0]
        if pool is not None:
            self.by_pool.setdefault(pool, {})[name] = node
            self.pool_of[name] = pool
        self.journal.note(name)

    def changes(self, mark: Optional[int]) -> Tuple[int, Optional[Set[str]]]:
        """(the mark now, the names placed again after ``mark``; None: read the pools whole)."""
        return self.journal.since(mark)

    def nodes(self, pool: str) -> List[Dict[str, Any]]:
        return list(self.by_pool.get(pool, {}).values())

    def node(self, pool: str, name: str) -> Optional[Dict[str, Any]]:
        """The Node ``name`` as grouped, when it is in ``pool`` (None: it is not)."""
        return self.by_pool.get(pool, {}).get(name)


def _name(node: Dict[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def pools_key(pools: Dict[str, Dict[str, Any]]) -> Tuple:
    """What of the pools decides who is in which: their names and node selectors."""
    return tuple(sorted((name, repr((p.get("spec") or {}).get("nodeSelector"))) for name, p in pools.items()))
