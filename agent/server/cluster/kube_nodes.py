"""The Node is the truth (``--backend kubernetes``): each pool's members, counts, readiness and
drain slots from the cluster's Node objects joined with the nodes' reports, as the MCO's node
controller decides them (the rules: agent/server/rollout/nodestatus.py, pure).

A name that reports but has no Node object (its kubelet never got a certificate approved)
counts for nothing: it is in no pool's machineCount, proves nothing to the rollout gate, and is
never given a drain slot; ``describe node`` says so. A Node's pool is the one its labels select
(``oc label node X node-role.kubernetes.io/infra=`` moves it), whatever its report claims.

Cost: the Nodes come from kube_sync's watch cache (slim objects: nodestatus.slim_node). The
pools' grouping (kube_groups.NodeGroups), each pool's numbers (statustally.StatusTally) and its
step's members (``member_changes``) are kept from change journals, the Node cache's and the node
store's (store/changejournal.py): a Node or a record that changed costs its own share again, not
a pass over the pool. A new target or image tallies the pool once; a re-list, a membership
rebuild or new pool selectors read it whole once.
"""

import threading
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from agent.core.objectchecks import parse_max_unavailable
from agent.server.cluster import poolview
from agent.server.cluster.kube_drain import DRAINED_FOR, uncordon_patch
from agent.server.cluster.kube_groups import NodeGroups
from agent.server.rollout import nodestatus, progress, targeting
from agent.server.rollout.poolindex import filed_key
from agent.server.rollout.statustally import StatusTally
from agent.server.store.errors import StoreUnavailable

FIRST_LIST_WAIT = 10.0  # seconds a drain ask waits for the first list of Nodes (a server just started)
# Seconds after a Done that ends our cordon during which a cordon this replica's Node cache still
# shows is taken for an uncordon in flight (written by the replica that took the Done, or retried
# by its node loop; ``uncordoning``); past it, the Node counts as cordoned for good.
UNCORDON_GRACE = 60.0
MARKED_MAX = 10  # Nodes a drain refusal reads afresh at most (``drain_marked``)
# A pool's (config, image) tallies kept, its least recently read dropped first: its target, and the
# current config whose proof a layered pool's new nodes are served by (serving._proof); each holds
# a share per Node of the pool, so an old target's is not kept for long
TALLIES_PER_POOL = 3


class NodeTruth:
    """Pool numbers from ``node_cache`` (a kube.watch.Reflector of slim Nodes) and ``store``'s reports."""

    def __init__(self, node_cache: Any, store: Any):
        self.node_cache = node_cache
        self.store = store
        self._lock = threading.Lock()  # the grouping and the tallies
        self._groups = NodeGroups(node_cache)
        self._tallies: Dict[Tuple[str, str, Optional[str]], StatusTally] = {}  # in the order last read
        # pool -> node -> (the slim Node, its record, the Member made of the two): the cache and the
        # store replace an object when it changes, so the same two objects make the same Member
        self._members: Dict[str, Dict[str, Tuple[Any, Any, targeting.Member]]] = {}

    def ready(self) -> bool:
        """Whether the Nodes were listed once: until then no pool is judged from them (an empty
        cache would read as pools with no nodes, whose target a step would make current)."""
        return self.node_cache.synced.is_set()

    def node(self, name: str) -> Optional[Dict[str, Any]]:
        return self.node_cache.get(name)

    def not_ready(self, name: str) -> Optional[str]:
        """Why the Node may not take workloads (nodestatus.check_node_ready; "" when it may), None
        when there is no Node of that name."""
        node = self.node(name)
        return None if node is None else nodestatus.check_node_ready(node)

    def pool_of(self, name: str, pools: Dict[str, Dict[str, Any]]) -> Tuple[Optional[str], str]:
        """(the pool the Node's labels put it in, or None; why not). No Node: None."""
        node = self.node(name)
        if node is None:
            return None, (f"no Node object named {name}: a name counts only once its kubelet has joined the "
                          f"cluster (its certificate approved); it is in no pool's machineCount, proves nothing "
                          f"and gets no drain slot")
        pool, why = nodestatus.pool_for_node(pools, (node.get("metadata") or {}).get("labels") or {})
        return pool, (f"Node {name}: {why}" if pool is None else "")

    def describe(self, name: str, pools: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
        """What ``describe node`` shows of the Node: its pool by its labels, whether it counts, why not."""
        member, why = self.pool_of(name, pools)
        if member is None:
            return {"pool": "", "membership": why, "counted": False, "notCounted": why}
        labels = ((self.node(name) or {}).get("metadata") or {}).get("labels") or {}
        also = nodestatus.master_over_custom(pools, labels)
        out = {"pool": member, "membership": "the Node's labels (helpers.go GetPrimaryPoolForNode)" + (
            f"; it also matches custom pool {also}, defaulting to master: it gets none of {also}'s configuration"
            if also else ""), "counted": True}
        rec = self.store.node(name)
        mark = rec.report.get(progress.SERVER_KEY) if rec is not None else None
        if isinstance(mark, dict) and mark.get("pending"):  # the Node counts, read from its annotations
            out.update(counted=False, notCounted=(
                f"this report counts for nothing (not proven by the node's kubelet certificate nor approved by the "
                f"admin): Node {name} is counted in pool {member} from its own annotations, as a Node without "
                f"node-agent"))
        return out

    def unreported(self, pools: Dict[str, Dict[str, Any]], after: str, listed: List[str],
                   full: bool) -> List[Tuple[str, Optional[str], str, Dict[str, Any]]]:
        """(name, pool or None, why, annotations) of each Node named after ``after`` that is not among
        ``listed``, the names of the store's page from ``after`` (sorted; ``full``: it had as many
        as asked). That page holds every record named up to its last name, and, when not full,
        every one past ``after``: so such a Node has no record, with no lookup per name."""
        out = []
        skip = set(listed)
        for name, node in sorted(self.node_cache.snapshot().items()):
            if full and name > listed[-1]:
                break  # the page ends before it (nodes.merged_page)
            if name > after and name not in skip:
                out.append(self._unreported(name, node, pools))
        return out

    def unreported_one(self, name: str, pools: Dict[str, Dict[str, Any]]) -> Optional[Tuple[str, Optional[str], str, Dict[str, Any]]]:
        """``unreported``'s tuple of the Node ``name`` (None: no such Node)."""
        node = self.node(name)
        return None if node is None else self._unreported(name, node, pools)

    @staticmethod
    def _unreported(name: str, node: Dict[str, Any], pools: Dict[str, Dict[str, Any]]) -> Tuple[str, Optional[str], str, Dict[str, Any]]:
        meta = node.get("metadata") or {}
        pool, why = nodestatus.pool_for_node(pools, meta.get("labels") or {})
        why = "the Node's labels; no report from node-agent" if pool is not None else f"Node {name}: {why}"
        return name, pool, why, dict(meta.get("annotations") or {})

    def drain_refusal(self, name: str, pool: str, pools: Dict[str, Dict[str, Any]]) -> str:
        """Why ``name`` may not take a drain slot of ``pool`` ("" when it may): a slot is only for
        an existing Node whose labels put it in that pool."""
        if not self.node_cache.wait_synced(FIRST_LIST_WAIT):
            raise StoreUnavailable("the Node objects have not been listed yet (the server just started, or the "
                                   "Kubernetes API is away): ask again")
        member, why = self.pool_of(name, pools)
        if member is None:
            return f"no drain slot of pool {pool} for {name}: {why}"
        if member != pool:
            return (f"no drain slot of pool {pool} for {name}: its Node's labels put it in pool {member} "
                    f"(helpers.go GetPrimaryPoolForNode); ask for a slot of {member}")
        return ""

    def status(self, pool: str, pools: Dict[str, Dict[str, Any]], target: str,
               image: Optional[str]) -> nodestatus.NodeStatus:
        """The pool's numbers (nodestatus.calculate_status), kept per Node: what changed since the
        last call is tallied again (its Node, its record, its entry in the rollout record)."""
        rollout = self._rollout(pool)
        with self._lock:
            self._groups.update(pools)
            tally = self._tallies.pop((pool, target, image), None) or StatusTally(target, image)
            self._tallies[(pool, target, image)] = tally
            kept = [key for key in self._tallies if key[0] == pool]
            for key in kept[:max(0, len(kept) - TALLIES_PER_POOL)]:
                del self._tallies[key]
            self._tally_up(tally, pool, rollout)
            return tally.status()

    def _tally_up(self, tally: StatusTally, pool: str, rollout: Dict[str, Any]) -> None:
        """Tally again each Node of ``pool`` the grouping placed, the store recorded or the rollout
        record gave another entry since ``tally.mark`` (every one when a journal cannot say)."""
        node_mark, nodes = self._groups.changes(tally.mark[0] if tally.mark else None)
        record_mark, records = self._record_changes(tally.mark[1] if tally.mark else None)
        if nodes is None or records is None:
            names = set(self._groups.by_pool.get(pool, {})) | set(tally.keys)
        else:
            names = nodes | records
        targets = rollout.get("targets") or {}
        names.update(n for n in set(tally.entries).union(targets)
                     if tally.entries.get(n) != filed_key(targeting.entry_of(rollout, n)))
        for name in names:
            node = self._groups.node(pool, name)
            if node is None:
                tally.drop(name)
                tally.keys.pop(name, None)
                tally.entries.pop(name, None)
                continue
            rec, entry = self.store.node(name), targeting.entry_of(rollout, name)
            key = (node, rec, filed_key(entry))
            kept = tally.keys.get(name)
            if kept is not None and kept[0] is node and kept[1] is rec and kept[2] == key[2]:
                continue
            tally.keys[name] = key
            if entry is None:
                tally.entries.pop(name, None)
            else:
                tally.entries[name] = key[2]
            tally.put(name, node, targeting.with_desired(report_of(node, rec), entry))
        tally.mark = (node_mark, record_mark)

    def _record_changes(self, mark: Any) -> Tuple[Any, Optional[Set[str]]]:
        """The node store's (mark now, the records changed since ``mark``; None: any may have). A
        store that keeps no journal (SQLite) marks by its generation: nothing changed, or anything."""
        follow = getattr(self.store, "record_changes", None)
        if follow is not None:
            return follow(mark)
        generation = self.store.generation()
        return generation, set() if mark is not None and mark == generation else None

    def _rollout(self, pool: str) -> Dict[str, Any]:
        """The pool's rollout record: who the server targeted (their desiredConfig is the server's)."""
        row = self.store.pools().get(pool)
        return row.rollout if row is not None else {}

    def members(self, pool: str, pools: Dict[str, Dict[str, Any]]) -> List[targeting.Member]:
        """The pool's Nodes as targeting reads them: each with its counted node-agent report (ours),
        else its own MCD annotations (a Node node-agent does not speak for: never targeted)."""
        return self.read_members(pool, pools)[0]

    def read_members(self, pool: str, pools: Dict[str, Dict[str, Any]]) -> Tuple[List[targeting.Member], Any]:
        """(the pool's members, the mark ``member_changes`` reads on from). A Member is made again
        only for a Node or a record that changed since the pool's last read (as
        members.MemberMemo does for the directory backend): at 1,000 Nodes, making every Member
        was most of a pool's step in a burst of reports (docs/performance.md)."""
        with self._lock:
            self._groups.update(pools)
            nodes, node_mark = self._groups.nodes(pool), self._groups.journal.seq
            kept = self._members.get(pool, {})
        record_mark = self._record_changes(None)[0]  # before the records are read: they are at least this new
        now: Dict[str, Tuple[Any, Any, targeting.Member]] = {}
        for node in nodes:
            name = _name(node)
            now[name] = _kept_member(kept.get(name), node, self.store.node(name))
        with self._lock:
            self._members[pool] = now  # only the pool's Nodes of this read: bounded by the pool's size
        return [entry[2] for entry in now.values()], (node_mark, record_mark)

    def member_changes(self, pool: str, pools: Dict[str, Dict[str, Any]],
                       mark: Any) -> Optional[Tuple[Any, List[targeting.Member], List[str]]]:
        """(the mark now, the members of ``pool`` whose Node or record changed since ``mark``, the
        names of those that left): what a pool's step files again (poolindex.PoolIndex.apply).
        None: not known (no journal, a re-list, new selectors): read them with ``read_members``."""
        if not isinstance(mark, tuple):
            return None
        with self._lock:
            self._groups.update(pools)
            node_mark, nodes = self._groups.changes(mark[0])
            record_mark, records = self._record_changes(mark[1])
            if nodes is None or records is None:
                return None
            kept = self._members.setdefault(pool, {})
            changed, left = [], []
            for name in sorted(nodes | records):
                node = self._groups.node(pool, name)
                if node is None:
                    kept.pop(name, None)
                    left.append(name)
                    continue
                kept[name] = _kept_member(kept.get(name), node, self.store.node(name))
                changed.append(kept[name][2])
        return (node_mark, record_mark), changed, left

    def _nodes_of(self, pool: str, pools: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The pool's Nodes by their labels (nodestatus.group_by_pool, kept: kube_groups.NodeGroups)."""
        with self._lock:
            self._groups.update(pools)
            return self._groups.nodes(pool)

    def pools_by_node(self, pools: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
        """Each Node's pool by its labels (Nodes in no pool are not in it): the MachineConfigNodes'
        spec.pool (kube_mcn), from the same grouping as the pools' numbers."""
        with self._lock:
            self._groups.update(pools)
            return dict(self._groups.pool_of)

    def counts(self, pool: str, pools: Dict[str, Dict[str, Any]], target: str,
               image: Optional[str]) -> progress.Counts:
        return counts_of(self.status(pool, pools, target, image))

    def drain_limit(self, cluster: Any, st: Any, pool: str, value: Any, asking: str,
                    settled: Sequence[str] = ()) -> int:
        """maxUnavailable of the pool's Nodes less every other unavailable Node neither holding a
        lease nor targeted by the server nor ``settled`` (nodestatus.drain_capacity); ``cluster``:
        the service, for the pool's row (target, targeted nodes) and leases."""
        row = cluster.store.pools().get(pool)
        target = row.target if row is not None else ""
        status = self.status(pool, st.pools, target, cluster._layered(st, pool, target))
        holders = [lease["node"] for lease in cluster.store.leases(pool=pool)] + list(settled)
        targeted = [n for n, e in ((row.rollout if row is not None else {}).get("targets") or {}).items()
                    if isinstance(e, dict) and not e.get("deferred")]
        return nodestatus.drain_capacity(parse_max_unavailable(value, status.machine), status.unavailable_nodes,
                                         holders, asking, targeted)

    def drain_marked(self, pool: str, pools: Dict[str, Dict[str, Any]], asking: str) -> List[str]:
        """The pool's Nodes other than ``asking`` this cache shows cordoned with our drain's mark
        (kube_drain.DRAINED_FOR), at most ``MARKED_MAX``: what a drain refusal reads afresh."""
        out = []
        for node in self._nodes_of(pool, pools):
            meta = node.get("metadata") or {}
            if meta.get("name") != asking and (node.get("spec") or {}).get("unschedulable") and \
                    DRAINED_FOR in (meta.get("annotations") or {}):
                out.append(str(meta.get("name", "")))
        return out[:MARKED_MAX]

    def uncordoning(self, pool: str, pools: Dict[str, Dict[str, Any]], asking: str, now: float) -> List[str]:
        """The pool's Nodes other than ``asking`` that this replica's cache shows cordoned by our drain
        while the store already holds the Done that ends it (kube_drain.uncordon_patch), received
        within ``UNCORDON_GRACE``: the replica that took the Done wrote the uncordon with its Node
        patch (kube_sync.note_report), this cache has not seen it yet. Ours: such a Node took a
        drain slot here, and the ask it refused waited for the lease's Retry-After, 30 s
        (docs/performance.md, "Rollout at fleet scale")."""
        out = []
        for node in self._nodes_of(pool, pools):
            meta = node.get("metadata") or {}
            name = str(meta.get("name", ""))
            if name == asking or not (node.get("spec") or {}).get("unschedulable"):
                continue
            rec = self.store.node(name)
            if rec is None or _pending(rec.report) or now - rec.received > UNCORDON_GRACE:
                continue
            if uncordon_patch(meta.get("annotations") or {}, rec.report):
                out.append(name)
        return out

    def entries(self, names: List[str]) -> Dict[str, Dict[str, Any]]:
        """The pool view's entry of each Node named: its report's, or that it has not reported."""
        out = {}
        for name in names:
            rec = self.store.node(name)
            out[name] = poolview.node_entry(rec) if rec is not None else {
                "state": None, "membership": "the Node's labels; no report from node-agent yet"}
        return out

def counts_of(status: nodestatus.NodeStatus) -> progress.Counts:
    """The service's Counts from a pool's node status (unavailable as upstream counts it)."""
    return progress.Counts(machine=status.machine, updated=status.updated, ready=status.ready,
                           degraded=status.degraded, refused=status.refused, working=status.working,
                           nodes=list(status.nodes), unavailable=status.unavailable,
                           degraded_reasons=list(status.degraded_reasons),
                           unavailable_reasons=list(status.unavailable_reasons))


def _name(node: Dict[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def _pending(report: Dict[str, Any]) -> bool:
    mark = report.get(progress.SERVER_KEY)
    return isinstance(mark, dict) and bool(mark.get("pending"))


def _kept_member(hit: Optional[Tuple[Any, Any, targeting.Member]], node: Dict[str, Any],
                 rec: Any) -> Tuple[Any, Any, targeting.Member]:
    """(node, rec, their Member): the one kept (``hit``) when made of these same two objects (the
    cache and the store replace an object when it changes), else a new one."""
    if hit is not None and hit[0] is node and hit[1] is rec:
        return hit
    return node, rec, member_of(node, rec)


def report_of(node: Dict[str, Any], rec: Any) -> Optional[Dict[str, Any]]:
    """The node's report; without one that counts, the MCD's annotations on its Node (what
    upstream reads: a Node another server or a real MCD wrote them on), else None. A report
    that counts for nothing (pending, or a name neither proven by its kubelet's certificate
    nor approved by the admin: issue 45) is no report about the Node: it is read exactly as a
    Node without node-agent, so a squatter never changes what a real Node counts as."""
    if rec is None or _pending(rec.report):
        return nodestatus.report_from_annotations((node.get("metadata") or {}).get("annotations") or {})
    return rec.report


def member_of(node: Dict[str, Any], rec: Any) -> targeting.Member:
    """The Member of a slim Node and the node store's record of it (None: no record)."""
    meta = node.get("metadata") or {}
    return targeting.Member(_name(node), report_of(node, rec), rec is not None and not _pending(rec.report),
                            nodestatus.check_node_ready(node), dict(meta.get("labels") or {}),
                            progress.epoch_of(meta.get("creationTimestamp")) or 0.0)
