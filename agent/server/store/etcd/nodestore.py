"""The etcd node store (``nodestore.NodeStore`` on etcd), for several server replicas.

Layout under the store prefix (default ``/node-agent/``):

| key | value |
|---|---|
| ``nodes/<node>`` | JSON: pool, why, degraded, report, received |
| ``pools/<pool>`` | JSON: the pool's row (target, current, held, rendered) |
| ``history/<pool>`` | JSON list of target/current changes (the newest 200) |
| ``rendered/<name>`` | zlib-compressed JSON: pool, spec, sources (written once: names are content hashes) |
| ``meta/<key>`` | a small shared string (the state signature every replica has seen) |
| ``leases/<pool>/<node>`` | a drain lease, attached to an etcd lease with the drain TTL (``etcd.drains``) |
| ``drainlog/<node>`` | JSON list of the node's cordon/drain/uncordon events (the newest 50) |
| ``credentials/<node>``, ``credhash/<hash>`` | the hash of the node's credential, and its owner (``etcd.identity``) |

Reads come from memory: each process loads nodes, pools and meta once and follows them with a
watch (``nodeindex.NodeIndex``), so counts, proofs and a config fetch cost no round trip and
keep answering while etcd is away. Every write is an etcd transaction and is acknowledged only
once etcd has committed it; when etcd cannot be reached a write raises ``EtcdUnavailable``,
which the HTTP layer answers with 503 and Retry-After.
"""

import json
import logging
import threading
import time
import zlib
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.server.rollout.progress import Membership
from agent.server.store.etcd import drains
from agent.server.store.etcd.client import (
    KV,
    EtcdClient,
    EtcdError,
    Event,
    cmp_absent,
    cmp_mod,
    op_delete,
    op_put,
)
from agent.server.store.etcd.identity import EtcdIdentity
from agent.server.store.nodeindex import IndexedReads, NodeIndex
from agent.server.store.nodestore import (
    DRAIN_GRANTED,
    NodeRecord,
    NodeStore,
    PoolRow,
    Recorded,
    Serving,
    lease_ends,
)

log = logging.getLogger(__name__)

HISTORY_KEEP = 200
DRAINLOG_KEEP = 50
CAS_TRIES = 50


class EtcdNodeStore(EtcdIdentity, IndexedReads, NodeStore):
    def __init__(self, client: EtcdClient, prefix: str = "/node-agent/", watch: bool = True):
        self.client = client
        self.prefix = prefix
        self._lock = threading.RLock()
        self._index = NodeIndex()
        self._pools: Dict[str, PoolRow] = {}
        self._pool_revs: Dict[str, int] = {}  # mod_revision of each pool row: the compare of a CAS
        self._leases: Dict[str, Tuple[str, str, int, int]] = {}  # node -> (pool, config, mod_revision, lease)
        self._meta: Dict[str, str] = {}
        self._credentials: Dict[str, str] = {}
        self._owners: Dict[str, str] = {}
        self._replicas: Dict[str, Dict[str, Any]] = {}  # "<replica>/<pid>" -> what it announced
        self._rendered: Dict[str, Dict[str, Any]] = {}
        self._stop = threading.Event()
        self.revision = 0
        self._load()
        if watch:
            client.watch(prefix, self.revision, self._on_events, self._stop)

    # -- loading and following ----------------------------------------------------------------

    def _k(self, *parts: str) -> str:
        return self.prefix + "/".join(parts)

    def _load(self) -> None:
        """Read everything at one revision. etcd's history is compacted (etcd.heartbeat.Compactor):
        when the revision read at is compacted away between two of the reads, read again."""
        for attempt in range(5):
            try:
                return self._load_once()
            except EtcdError as exc:
                if "compacted" not in str(exc) or attempt == 4:
                    raise
                log.info("etcd history compacted while loading the node store; reading again")

    def _load_once(self) -> None:
        nodes, rev = self.client.range(self._k("nodes/"), prefix=True)
        pools, _ = self.client.range(self._k("pools/"), prefix=True, revision=rev)
        meta, _ = self.client.range(self._k("meta/"), prefix=True, revision=rev)
        leases, _ = self.client.range(self._k("leases/"), prefix=True, revision=rev)
        replicas, _ = self.client.range(self._k("replicas/"), prefix=True, revision=rev)
        credentials = self._read_credentials(rev)
        with self._lock:
            self._index.clear()
            for kv in nodes:
                name = _tail(kv.key)
                self._index.apply(name, _node_record(name, kv.value), kv.mod_revision)
            if self._index.assign is not None:
                self._index.rebuild(self._index.signature or "", self._index.assign)
            self._pools = {_tail(kv.key): PoolRow.from_dict(json.loads(kv.value)) for kv in pools}
            self._pool_revs = {_tail(kv.key): kv.mod_revision for kv in pools}
            self._replicas = {kv.key.decode()[len(self._k("replicas/")):]: json.loads(kv.value) for kv in replicas}
            self._leases = {}
            for kv in leases:
                self._note_lease(kv.key.decode()[len(self._k("leases/")):], kv, False)
            self._meta = {_tail(kv.key): kv.value.decode() for kv in meta}
            self._set_credentials(credentials)
            self.revision = rev

    def _on_events(self, events: List[Event], revision: int) -> None:
        if not events:  # the watch fell behind a compaction: read everything again
            self._load()
            return
        with self._lock:
            for ev in events:
                self._apply_event(ev)
            self.revision = max(self.revision, revision)

    def _apply_event(self, ev: Event) -> None:
        key = ev.kv.key.decode()[len(self.prefix):]
        kind, _, name = key.partition("/")
        deleted = ev.type == "DELETE"
        if kind == "nodes":
            self._index.apply(name, None if deleted else _node_record(name, ev.kv.value), ev.kv.mod_revision)
        elif kind == "pools":
            if deleted:
                self._pools.pop(name, None)
                self._pool_revs.pop(name, None)
            elif ev.kv.mod_revision >= self._pool_revs.get(name, 0):
                self._pools[name] = PoolRow.from_dict(json.loads(ev.kv.value))
                self._pool_revs[name] = ev.kv.mod_revision
        elif kind == "leases":
            self._note_lease(name, ev.kv, deleted)
        elif kind == "replicas":
            if deleted:
                self._replicas.pop(name, None)
            else:
                self._replicas[name] = json.loads(ev.kv.value)
        elif kind == "credentials":
            self._credential_event(name, ev.kv, deleted)
        elif kind == "meta":
            if deleted:
                self._meta.pop(name, None)
            else:
                self._meta[name] = ev.kv.value.decode()

    def _note_lease(self, pool_node: str, kv: KV, deleted: bool) -> None:
        pool, _, node = pool_node.partition("/")
        if deleted:
            held = self._leases.get(node)
            if held is not None and held[0] == pool:
                del self._leases[node]
        else:
            config = json.loads(kv.value or b"{}").get("config", "")
            self._leases[node] = (pool, config, kv.mod_revision, kv.lease)

    kind = "etcd"

    def alarms(self) -> List[Dict[str, str]]:
        """etcd's raised alarms as this process last saw them (etcd.heartbeat polls them; a write
        refused for lack of space adds NOSPACE at once): [{"alarm": "NOSPACE", "member": id}]."""
        return list(self.client.alarms_seen)

    def observe(self, observer: Callable[[str, float, bool], None]) -> None:
        self.client.observer = observer

    def last_seen(self) -> float:
        """When etcd last answered this process (a call or the watch): for /healthz and status."""
        return self.client.last_ok

    def start_heartbeat(self, name: str, describe: Callable[[], Dict[str, Any]]) -> Any:
        """Announce this process's view under replicas/ (etcd.heartbeat.Heartbeat, which also
        watches etcd's alarms and takes its turn compacting)."""
        from agent.server.store.etcd.heartbeat import Heartbeat

        return Heartbeat(self, name, describe)

    def replicas(self) -> List[Dict[str, Any]]:
        """What every live replica process announced (Heartbeat), oldest key first."""
        with self._lock:
            return [dict(v) for _, v in sorted(self._replicas.items())]

    def close(self) -> None:
        self._stop.set()

    # -- nodes --------------------------------------------------------------------------------

    def record_report(self, node: str, body: Dict[str, Any], member: Membership, now: float) -> Recorded:
        """One transaction: the report, and the end of the node's drain lease when it is Done on
        the leased config (guarded by the lease key's revision as this process knows it, or by
        its absence when this process knows of none; when another replica changed the lease
        meanwhile, read it afresh and try once more)."""
        rec = NodeRecord(node, member.pool, member.why, member.degraded, dict(body), now)
        value = json.dumps({"pool": rec.pool, "why": rec.why, "degraded": rec.degraded, "report": rec.report,
                            "received": now}, sort_keys=True)
        with self._lock:
            old = self._index.records.get(node)
            lease = self._leases.get(node)
        for attempt in range(2):
            ops, guard, ending = [op_put(self._k("nodes", node), value)], [], None
            if body.get("state") == "Done" and lease is not None and lease_ends(lease[1], body):
                key = self._k("leases", lease[0], node)
                ops.append(op_delete(key))
                guard = [cmp_mod(key, lease[2])]
                ending = lease
            elif body.get("state") == "Done" and lease is None and not attempt:
                # this process's watch may not have seen a lease another replica just granted
                guard = [cmp_absent(self._k("leases", member.pool, node))]
            ok, revision = self.client.txn(guard, ops, [op_put(self._k("nodes", node), value)] if guard else None)
            if ok or attempt:
                break
            lease = self._fresh_lease(node)  # the report is stored; only the lease part is retried
        with self._lock:
            self._index.apply(node, rec, revision)
        released = ending is not None and ok
        if released:
            self.client.revoke(ending[3])
            self._log_drain(node, ending[0], "uncordon", "node reported Done")
        return Recorded(released, old.pool if old is not None else None)

    def _fresh_lease(self, node: str) -> Optional[Tuple[str, str, int, int]]:
        for h in drains.holders(self.client, self.prefix):
            if h["node"] == node:
                kv = self.client.get(self._k("leases", h["pool"], node))
                if kv is not None:
                    return (h["pool"], h["config"], kv.mod_revision, kv.lease)
        return None

    # -- leases -------------------------------------------------------------------------------

    def acquire_lease(self, node: str, pool: str, config: str, limit: int, ttl: float, now: float):
        answer = drains.request_drain(self.client, self.prefix, node, pool, config, limit, ttl, now)
        if answer.granted:  # read-your-writes: a Done report through this process ends it at once
            kv = self.client.get(self._k("leases", pool, node))
            if kv is not None:
                with self._lock:
                    self._note_lease(f"{pool}/{node}", kv, False)
        if answer.granted and not answer.renewed:
            self._log_drain(node, pool, "cordon", config)
            self._log_drain(node, pool, "drain", DRAIN_GRANTED)
        return answer

    def release_lease(self, node: str, why: str) -> Optional[str]:
        pool = drains.release(self.client, self.prefix, node)
        with self._lock:
            self._leases.pop(node, None)
        if pool is not None:
            self._log_drain(node, pool, "uncordon", why)
        return pool

    def leases(self, pool: Optional[str] = None, now: Optional[float] = None) -> List[Dict[str, Any]]:
        return [{k: h[k] for k in ("node", "pool", "config", "granted", "expires")}
                for h in drains.holders(self.client, self.prefix, pool or "")]

    def drain_events(self, node: Optional[str] = None) -> List[Dict[str, Any]]:
        if node is not None:
            kv = self.client.get(self._k("drainlog", node))
            return json.loads(kv.value) if kv else []
        kvs, _ = self.client.range(self._k("drainlog/"), prefix=True)
        return sorted((e for kv in kvs for e in json.loads(kv.value)), key=lambda e: e.get("at", 0))

    def _log_drain(self, node: str, pool: str, action: str, detail: str) -> None:
        event = {"node": node, "pool": pool, "action": action, "detail": detail, "at": time.time()}
        self._append(self._k("drainlog", node), event, DRAINLOG_KEEP)

    def _append(self, key: str, item: Dict[str, Any], keep: int) -> None:
        """Append to a JSON list under ``key`` with a compare-and-swap (replicas may race)."""
        for _ in range(CAS_TRIES):
            kv = self.client.get(key)
            items = json.loads(kv.value) if kv else []
            items = (items + [item])[-keep:]
            guard = [cmp_absent(key)] if kv is None else [cmp_mod(key, kv.mod_revision)]
            if self.client.txn(guard, [op_put(key, json.dumps(items))])[0]:
                return
        log.warning("could not append to %s: too many concurrent writers", key)

    # -- pools, rendered configs, meta ----------------------------------------------------------

    def pools(self) -> Dict[str, PoolRow]:
        with self._lock:
            return dict(self._pools)

    def update_pool(self, name: str, decide: Callable[[Optional[PoolRow]], Optional[PoolRow]]) -> PoolRow:
        """Compare-and-swap on the row's revision. The first try decides from the row this
        process holds (kept current by the watch), so a report that moves no pool costs no round
        trip; a lost race reads the row from etcd and decides again."""
        key = self._k("pools", name)
        with self._lock:
            old, rev = self._pools.get(name), self._pool_revs.get(name, 0)
        for _ in range(CAS_TRIES):
            new = decide(old)
            if new is None or new == old:
                return old  # type: ignore[return-value]
            guard = [cmp_absent(key)] if old is None else [cmp_mod(key, rev)]
            ok, revision = self.client.txn(guard, [op_put(key, json.dumps(new.as_dict()))])
            if ok:
                with self._lock:
                    if revision >= self._pool_revs.get(name, 0):
                        self._pools[name], self._pool_revs[name] = new, revision
                self._record_history(name, old, new)
                return new
            kv = self.client.get(key)
            old, rev = (PoolRow.from_dict(json.loads(kv.value)), kv.mod_revision) if kv else (None, 0)
        raise RuntimeError(f"pool {name}: too many concurrent updates in etcd; try again")

    def _record_history(self, pool: str, old: Optional[PoolRow], new: PoolRow) -> None:
        now = time.time()
        for field in ("target", "current"):
            if old is None or getattr(old, field) != getattr(new, field):
                self._append(self._k("history", pool), {"field": field, "config": getattr(new, field), "at": now},
                             HISTORY_KEEP)

    def history(self, pool: str) -> List[Dict[str, Any]]:
        kv = self.client.get(self._k("history", pool))
        return json.loads(kv.value) if kv else []

    def put_rendered(self, pool: str, name: str, spec: Dict[str, Any], sources: List[str], inputs: str = "") -> None:
        key = self._k("rendered", name)
        blob = zlib.compress(json.dumps({"pool": pool, "spec": spec, "sources": list(sources),
                                         "created": time.time()}, sort_keys=True).encode())
        self.client.txn([cmp_absent(key)], [op_put(key, blob)])
        with self._lock:
            self._rendered[name] = {"pool": pool, "spec": spec}

    def _rendered_doc(self, name: str) -> Optional[Dict[str, Any]]:
        with self._lock:
            doc = self._rendered.get(name)
        if doc is None:
            kv = self.client.get(self._k("rendered", name))
            if kv is None:
                return None
            doc = json.loads(zlib.decompress(kv.value))
            with self._lock:  # immutable under its name: safe to keep
                self._rendered[name] = {"pool": doc["pool"], "spec": doc["spec"]}
        return doc

    def rendered_spec(self, name: str) -> Optional[Dict[str, Any]]:
        doc = self._rendered_doc(name)
        return doc["spec"] if doc else None

    def rendered_pool(self, name: str) -> Optional[str]:
        doc = self._rendered_doc(name)
        return doc["pool"] if doc else None

    def meta(self, key: str) -> Optional[str]:
        with self._lock:
            return self._meta.get(key)

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            if self._meta.get(key) == value:
                return
        self.client.put(self._k("meta", key), value)
        with self._lock:
            self._meta[key] = value

    def serving(self, pool: str, node: Optional[str] = None) -> Serving:
        with self._lock:
            row = self._pools.get(pool)
            proofs = self._index.proofs_of(pool, row.target) if row is not None else {}
            rec = self._index.records.get(node) if node else None
            return Serving(self._meta.get("state_signature"), row, proofs, rec)


def _tail(key: bytes) -> str:
    return key.decode().rsplit("/", 1)[1]


def _node_record(node: str, value: bytes) -> NodeRecord:
    d = json.loads(value)
    return NodeRecord(node=node, pool=d["pool"], why=d.get("why", ""), degraded=d.get("degraded", ""),
                      report=d.get("report") or {}, received=d.get("received", 0.0))

