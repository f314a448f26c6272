"""Drain leases as coordination.k8s.io/v1 Leases: at most ``maxUnavailable`` nodes of a pool
drain at once, across replicas that keep no state of their own (the etcd version is
``etcd.drains``).

A pool's leases are a counting semaphore of ``limit`` slots: Lease objects ``drain-<pool>-<i>``,
``i`` in ``0..limit-1`` (the pool's name hashed when the name would be too long), each held by
at most one node (``spec.holderIdentity``) until ``renewTime + leaseDurationSeconds``. Taking a
slot is a compare-and-swap on the API: create (409 AlreadyExists: another replica took it) or
update carrying the resourceVersion read (409 Conflict). Since only slots below ``limit`` are
ever granted, two replicas cannot grant more than ``limit`` at once however they interleave.
One case is not covered by the slots alone: slots at or above a *lowered* limit may still be
held. So every grant is checked after it is made with a fresh list of the pool, and undone
before it is answered when more than ``limit`` are live: a grant is answered only when a read
made after its write saw at most ``limit`` holders, so no ``limit + 1`` answered grants can ever
be live together (the last of them would have seen all the others).

Expiry compares ``renewTime`` (written with the granting replica's clock) with this replica's
clock: replicas' clocks must agree within the TTL, as Kubernetes' leader election assumes of its
Lease holders. (client-go's leaderelection.go, tryAcquireOrRenew, measures a foreign lease from
when it saw it change, which needs a memory of its own; a stateless replica cannot.) A release
clears the holder as client-go's ``release()`` does (the Lease stays for the next grant).
"""

import collections
import dataclasses
import datetime
import hashlib
import math
import re
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

from agent.server.rollout.drains import DrainAnswer
from agent.server.store.kube.client import LEASES, KubeClient, KubeError
from agent.server.store.kube.watch import Follower, NewestObjects, permission, resource_version
from agent.server.store.kube.workerturns import WorkerTurns

APP_LABEL, APP = "app.kubernetes.io/name", "node-config-server"
KIND_LABEL, KIND = "node-agent.openshift.io/kind", "drain-lease"
POOL_LABEL = "node-agent.openshift.io/pool"
POOL, CONFIG = "node-agent.openshift.io/pool", "node-agent.openshift.io/config"
GRANTED, EXPIRES = "node-agent.openshift.io/granted", "node-agent.openshift.io/expires"
MAX_NAME = 253  # a Lease's name is a DNS subdomain
MAX_RACES = 20  # a grant that loses this many races in a row answers "wait" (Retry-After 1)
OWN_WRITES = 64  # this process's newest Lease writes remembered (KubeLeases._followed)
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"  # metav1.MicroTime's RFC 3339 form (apimachinery micro_time.go, RFC3339Micro)

Lease = Dict[str, Any]
Holder = Dict[str, Any]


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def slot_name(pool: str, i: int) -> str:
    name = f"drain-{pool}-{i}"
    return name if len(name) <= MAX_NAME else f"drain-{_digest(pool, 40)}-{i}"


def pool_label(pool: str) -> str:
    return pool if LABEL_VALUE.fullmatch(pool) else _digest(pool, 40)


def micro_time(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(MICRO)


def parse_time(text: Any) -> float:
    """A MicroTime (or a plain RFC 3339 Time) as Unix seconds; 0.0 when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return 0.0
    for form in (MICRO, "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.datetime.strptime(text, form).replace(tzinfo=datetime.timezone.utc).timestamp()
        except ValueError:
            continue
    return 0.0


def _float(text: Any, default: float) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


def holder_of(obj: Lease) -> Optional[Holder]:
    """The lease's holder: {"node", "pool", "config", "granted", "expires"} plus "until" (when the
    slot frees: renewTime + leaseDurationSeconds), "name", "version"; None when nobody holds it."""
    spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
    node = spec.get("holderIdentity")
    if not node:
        return None
    ann = meta.get("annotations") or {}
    until = parse_time(spec.get("renewTime")) + float(spec.get("leaseDurationSeconds") or 0)
    return {"node": node, "pool": ann.get(POOL, ""), "config": ann.get(CONFIG, ""),
            "granted": _float(ann.get(GRANTED), parse_time(spec.get("acquireTime"))),
            "expires": _float(ann.get(EXPIRES), until), "until": until,
            "name": meta.get("name", ""), "version": str(meta.get("resourceVersion") or "")}


def live(h: Optional[Holder], now: float) -> bool:
    """A slot is free when nobody holds it or renewTime + leaseDurationSeconds < now."""
    return h is not None and h["until"] >= now


def public(h: Holder) -> Holder:
    return {k: h[k] for k in ("node", "pool", "config", "granted", "expires")}


def lease_body(name: str, namespace: str, pool: str, node: str, config: str, granted: float, now: float,
               ttl_s: int, version: str = "") -> Lease:
    meta: Dict[str, Any] = {
        "name": name, "namespace": namespace,
        "labels": {APP_LABEL: APP, KIND_LABEL: KIND, POOL_LABEL: pool_label(pool)},
        "annotations": {POOL: pool, CONFIG: config, GRANTED: repr(granted), EXPIRES: repr(now + ttl_s)}}
    if version:
        meta["resourceVersion"] = version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": node, "leaseDurationSeconds": ttl_s, "acquireTime": micro_time(granted),
                     "renewTime": micro_time(now)}}


def cleared_body(obj: Lease, pool: str) -> Lease:
    """The slot with nobody holding it (client-go's release() writes an empty holder too)."""
    meta = obj["metadata"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace", ""),
                         "resourceVersion": meta.get("resourceVersion", ""),
                         "labels": {APP_LABEL: APP, KIND_LABEL: KIND, POOL_LABEL: pool_label(pool)},
                         "annotations": {POOL: pool}},
            "spec": {}}


def in_pool(holders: List[Holder], pool: str, now: float) -> List[Holder]:
    """The pool's live holders, oldest grant first."""
    return sorted((h for h in holders if h["pool"] == pool and live(h, now)), key=lambda h: (h["granted"], h["node"]))


def free_slots(objects: Dict[str, Lease], pool: str, limit: int, now: float) -> List[Tuple[int, Optional[Lease]]]:
    """The slots below ``limit`` nobody holds live: (index, its Lease or None if absent)."""
    free = []
    for i in range(limit):
        obj = objects.get(slot_name(pool, i))
        if obj is None or not live(holder_of(obj), now):
            free.append((i, obj))
    return free


def spread(node: str, race: int, n: int) -> int:
    """Which of ``n`` free slots a grant takes (ours): a hash of the node's name and the race, from
    the first try on. A wave of nodes asking at once (the server targets ``maxUnavailable`` nodes
    in one step) then mostly write different slots. Before, every first try took the lowest free
    slot, so all but one of a wave lost and listed again: at 1,000 nodes with drains 8,900
    conflicting Lease writes; after a place of its own from the second try, still 0.3-0.5
    conflicts per node at 100-200 nodes (docs/performance.md, "Writes per node and conflicts")."""
    if n <= 1:
        return 0
    return int(hashlib.sha256(f"{node}/{race}".encode()).hexdigest()[:8], 16) % n


class KubeLeases(Follower):
    """Drain leases on the API in ``namespace``; ``holders``/``held_by`` answer from a watch."""

    def __init__(self, client: KubeClient, namespace: str, watch: bool = True):
        self.client = client
        self.namespace = namespace
        self._lock = threading.Lock()
        self._granting: Dict[str, threading.Lock] = {}  # per pool: one grant at a time in this process
        self.turns = WorkerTurns(None)  # and in this replica (serve's workers share theirs: workerturns.py)
        self._leases = NewestObjects()
        self._watched = 0  # the newest resourceVersion the watch brought (or its list was read at)
        self._wrote: Deque[int] = collections.deque(maxlen=OWN_WRITES)  # this process's newest Lease writes
        self._follow(client, LEASES, namespace, f"{KIND_LABEL}={KIND}", watch)

    def _event(self, kind: str, obj: Lease) -> None:
        with self._lock:
            if kind == "RELIST":
                self._leases.resync(obj["items"], obj["metadata"]["resourceVersion"])
                self._watched = max(self._watched, resource_version(obj))
            else:
                self._leases.event(kind, obj)
                self._watched = max(self._watched, resource_version(obj))

    def _note(self, obj: Lease) -> None:
        with self._lock:
            self._leases.put(obj)

    def _followed(self, last: int) -> Optional[Dict[str, Lease]]:
        """The Leases as this process follows them, when they hold ``last`` (the last write of this
        replica's grants: ``Turn.last``; this process's own, or one its watch brought); None: read
        the API. A grant counted from the API every time, twice (before and after its write): at
        1,000 nodes a wave of 100 drain asks, granted one at a time, waited 7 s for its median
        grant (docs/performance.md). A Lease another process wrote and the watch has not brought
        costs a refused write and a read; a refusal is never decided from memory (``_acquire``)."""
        if self.reflector is None or not self.reflector.wait_synced(0):
            return None
        with self._lock:
            if last > self._watched and last not in self._wrote:
                return None
            return dict(self._leases.objects)

    def _counted(self, race: int, last: int) -> Tuple[Dict[str, Lease], bool]:
        """What a try counts: (the Leases, whether from memory): the first try from memory when
        ``_followed`` allows, every other one from the API."""
        followed = self._followed(last) if race == 0 else None
        return (followed, True) if followed is not None else (self._list(), False)

    # -- API calls --------------------------------------------------------------------------

    def _list(self, pool: Optional[str] = None) -> Dict[str, Lease]:
        """The drain Leases (of one pool, or all) read from the API now: what a grant counts."""
        selector = f"{KIND_LABEL}={KIND}" + (f",{POOL_LABEL}={pool_label(pool)}" if pool is not None else "")
        with permission("list", LEASES, self.namespace):
            items, _ = self.client.list(LEASES.path(namespace=self.namespace), {"labelSelector": selector})
        for obj in items:
            self._note(obj)
        return {obj["metadata"]["name"]: obj for obj in items}

    def _write(self, body: Lease) -> bool:
        """Create (no resourceVersion) or compare-and-swap update; False: another replica was first."""
        name = body["metadata"]["name"]
        try:
            if body["metadata"].get("resourceVersion"):
                with permission("update", LEASES, self.namespace):
                    obj = self.client.replace(LEASES.path(name, self.namespace), body)
            else:
                with permission("create", LEASES, self.namespace):
                    obj = self.client.create(LEASES.path(namespace=self.namespace), body)
        except KubeError as exc:
            if exc.status in (404, 409):  # 409: taken or changed meanwhile; 404: deleted meanwhile
                return False
            raise
        self._note(obj)
        with self._lock:
            self._wrote.append(resource_version(obj))
        return True

    def _clear(self, obj: Lease, pool: str) -> bool:
        return self._write(cleared_body(obj, pool))

    # -- the drain lease methods ------------------------------------------------------------

    def acquire(self, node: str, pool: str, config: str, limit: int, ttl: float, now: float) -> DrainAnswer:
        """Grant, renew or refuse ``node`` a drain slot in ``pool`` (etcd.drains.request_drain).

        One grant of a pool at a time in this replica (ours): a wave's asks reach its workers
        together, and two grants counting the same list could pick the same slot; in turn, each
        counts the slots the one before took (the threads of a worker by a lock, its workers by
        their turn at the pool's drains), from memory when it holds the last one's write
        (``_followed``). Other replicas still race (the compare-and-swap decides), on a slot of
        the node's own choosing (``spread``). The check after the write (the module's docstring)
        reads the API outside the turn: the next grant does not wait for it."""
        with self._lock:
            granting = self._granting.setdefault(pool, threading.Lock())
        for _ in range(MAX_RACES):
            with granting, self.turns.turn("drains/" + pool) as turn:
                wrote = self._wrote[-1] if self._wrote else 0
                answer, slot = self._acquire(node, pool, config, limit, ttl, now, turn.last)
                if self._wrote and self._wrote[-1] != wrote:
                    turn.wrote = self._wrote[-1]  # the next holder's watch may not have brought it yet
            if slot is None:
                return answer
            after = in_pool([h for h in map(holder_of, self._list(pool).values()) if h is not None], pool, now)
            if len(after) <= limit:
                return dataclasses.replace(answer, holders=[h["node"] for h in after])
            self._take_back(slot, node, pool)  # slots above a lowered limit are held: undone before answering
        return DrainAnswer(False, node, pool, limit, retry_after=1, holders=[])

    def _acquire(self, node: str, pool: str, config: str, limit: int, ttl: float, now: float,
                 last: int) -> Tuple[DrainAnswer, Optional[str]]:
        """(the answer, the slot this call wrote a new grant to: None when renewed or refused)."""
        ttl_s = max(1, int(math.ceil(ttl)))
        for race in range(MAX_RACES):
            objects, remembered = self._counted(race, last)
            held = [h for h in map(holder_of, objects.values()) if h is not None]
            mine = [h for h in held if h["node"] == node and live(h, now)]
            here = sorted((h for h in mine if h["pool"] == pool), key=lambda h: h["granted"])
            holders = in_pool(held, pool, now)
            if here:
                if self._renew(objects[here[0]["name"]], here[0], config, now, ttl_s):
                    for extra in here[1:]:  # two replicas granted one node at once: keep one slot
                        self._clear(objects[extra["name"]], pool)
                    names = [h["node"] for h in holders if h["name"] not in {e["name"] for e in here[1:]}]
                    return DrainAnswer(True, node, pool, limit, now + ttl_s, holders=names, renewed=True), None
                continue  # changed meanwhile: read again
            free = free_slots(objects, pool, limit, now)
            if remembered and (len(holders) >= limit or not free):
                continue  # refused from memory: read the API first (a release may not be followed yet)
            if len(holders) >= limit or not free:  # (not free: a slot's annotations were edited by hand)
                soonest = min((h["until"] for h in holders), default=now + ttl_s) - now
                return DrainAnswer(False, node, pool, limit, retry_after=int(max(1, min(30, math.ceil(soonest)))),
                                   holders=[h["node"] for h in holders]), None
            i, slot = free[spread(node, race, len(free))]
            body = lease_body(slot_name(pool, i), self.namespace, pool, node, config, now, now, ttl_s,
                              slot["metadata"]["resourceVersion"] if slot is not None else "")
            if not self._write(body):
                continue  # another replica took the slot: count again
            for old in mine:  # moved pools: the old pool's slot goes (read again if it changed)
                if not self._clear(objects[old["name"]], old["pool"]):
                    self._take_back(old["name"], node, old["pool"])
            return DrainAnswer(True, node, pool, limit, now + ttl_s), body["metadata"]["name"]
        return DrainAnswer(False, node, pool, limit, retry_after=1, holders=[]), None

    def _renew(self, obj: Lease, h: Holder, config: str, now: float, ttl_s: int) -> bool:
        body = lease_body(h["name"], self.namespace, h["pool"], h["node"], config, h["granted"], now, ttl_s,
                          obj["metadata"]["resourceVersion"])
        return self._write(body)

    def _take_back(self, name: str, node: str, pool: str) -> None:
        """Clear slot ``name`` if ``node`` still holds it (read afresh: compare-and-swap)."""
        for _ in range(MAX_RACES):
            obj = self._list(pool).get(name)
            h = holder_of(obj) if obj is not None else None
            if h is None or h["node"] != node or self._clear(obj, pool):  # type: ignore[arg-type]
                return
        raise RuntimeError(f"drain lease {self.namespace}/{name}: lost {MAX_RACES} races taking back the slot of "
                           f"{node} (it expires by itself after its TTL); try again")

    def release(self, node: str, current_config: Optional[str] = None) -> Optional[str]:
        """End the node's lease (uncordon); with ``current_config``, only if that is the leased
        config (a Done report on the config it drained for). Returns the pool it held a lease
        in, or None. Cleared from what this process follows when that shows the lease for this
        config (a Lease list per drained node less); anything else is decided from the API."""
        now = time.time()
        for race in range(MAX_RACES):
            objects, remembered = self._counted(race, 0)
            mine = sorted((h for h in map(holder_of, objects.values()) if h is not None and h["node"] == node
                           and live(h, now)), key=lambda h: h["granted"])
            first = mine[0] if mine else None
            other = first is not None and bool(current_config and first["config"]) and first["config"] != current_config
            if remembered and (first is None or other):
                continue  # nothing to clear, or another config, in memory: the API decides
            if first is None or other:
                return None
            if all([self._clear(objects[h["name"]], h["pool"]) for h in mine]):
                return first["pool"]
        raise RuntimeError(f"node {node}: lost {MAX_RACES} races releasing its drain lease in namespace "
                           f"{self.namespace}; try again")

    def holders(self, pool: str = "") -> List[Holder]:
        """Every live lease (of one pool, or all), oldest grant first: from the watch (a fresh
        list without one)."""
        now = time.time()
        if self.reflector is None:
            objects = list(self._list(pool or None).values())
        else:
            with self._lock:
                objects = list(self._leases.objects.values())
        held = [h for h in map(holder_of, objects) if h is not None]
        return [public(h) for h in sorted(held, key=lambda h: (h["granted"], h["node"]))
                if live(h, now) and (not pool or h["pool"] == pool)]

    def held_by(self, node: str) -> Optional[Holder]:
        """The node's live lease from memory (no round trip), or None."""
        now = time.time()
        with self._lock:
            held = [h for h in map(holder_of, self._leases.objects.values())
                    if h is not None and h["node"] == node and live(h, now)]
        return public(min(held, key=lambda h: h["granted"])) if held else None
