"""The Kubernetes node store's ConfigMaps (part of ``kube.nodestore.KubeNodeStore``): pool rows
with their history, the shared meta strings and the rendered configs, in the server's namespace.

| ConfigMap | data |
|---|---|
| ``node-config-server-pool-<pool>`` | ``row`` (JSON: PoolRow) and ``history`` (JSON list, newest 200), one write |
| ``node-config-server-meta`` | one key per meta key (the state signature every replica has seen) |
| ``node-config-server-rendered-<name>`` | binaryData ``rendered``: zlib JSON {pool, spec, sources}; immutable |

Pool rows and meta are followed by one watch (kube.watch.Reflector) and served from memory; a pool row is
changed by compare-and-swap on the ConfigMap's resourceVersion (a PUT carrying it: the API
server answers 409 Conflict when another replica wrote first). Rendered configs are read once
and kept: they never change under their name.
"""

import base64
import json
import logging
import threading
import time
import zlib
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.server.store.kube.client import CONFIGMAPS, KubeClient, KubeError
from agent.server.store.kube.watch import resource_version as rv
from agent.server.store.kube.workerturns import WorkerTurns
from agent.server.store.nodestore import PoolRow

log = logging.getLogger(__name__)

APP_LABEL = "app.kubernetes.io/name"
APP = "node-config-server"
KIND_LABEL = "node-agent.openshift.io/kind"
META = "node-config-server-meta"
POOL_PREFIX = "node-config-server-pool-"
RENDERED_PREFIX = "node-config-server-rendered-"
HISTORY_KEEP = 200
CAS_TRIES = 50
# A ConfigMap holds at most 1 MiB (validation.go: MaxSecretSize, ConfigMap's validateConfigMap
# in kubernetes/pkg/apis/core/validation); keep room for its metadata.
CONFIGMAP_MAX = (1 << 20) - (16 << 10)


def row_of(name: str, data: Dict[str, Any]) -> Tuple[Optional[PoolRow], List[Dict[str, Any]]]:
    """A pool ConfigMap's row and history; an unreadable one (edited by hand) is no row, and the
    next update replaces it (its resourceVersion is kept), so the store never stops on it."""
    try:
        row = PoolRow.from_dict(json.loads(data["row"]))
        history = json.loads(data.get("history") or "[]")
        return row, history if isinstance(history, list) else []
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("ConfigMap %s: unreadable pool row (%s); the next update of the pool replaces it", name, exc)
        return None, []


def configmap(name: str, namespace: str, kind: str, data: Optional[Dict[str, str]] = None,
              version: int = 0) -> Dict[str, Any]:
    meta: Dict[str, Any] = {"name": name, "namespace": namespace, "labels": {APP_LABEL: APP, KIND_LABEL: kind}}
    if version:
        meta["resourceVersion"] = str(version)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}


class ConfigMapState:
    """Pools, history, meta and rendered configs of one namespace. ``lock`` is the store's."""

    def __init__(self, client: KubeClient, namespace: str, lock: threading.RLock,
                 on_write: Callable[[int], None]):
        self.client = client
        self.namespace = namespace
        self._lock = lock
        self._wrote = on_write  # the store's revision and last contact
        self._pools: Dict[str, Tuple[PoolRow, int, List[Dict[str, Any]]]] = {}  # name -> (row, rv, history)
        self._meta: Tuple[Dict[str, str], int] = ({}, 0)
        self._rendered: Dict[str, Dict[str, Any]] = {}
        self.turns = WorkerTurns(None)  # serve's workers share theirs (KubeNodeStore.share_worker_turns)

    def selector(self) -> str:
        return f"{APP_LABEL}={APP},{KIND_LABEL} in (pool,meta)"

    def _path(self, name: str = "") -> str:
        return CONFIGMAPS.path(name, self.namespace)

    # -- following ---------------------------------------------------------------------------------

    def on_list(self, items: List[Dict[str, Any]], at: int) -> int:
        """A (re-)list at resourceVersion ``at``: what it holds, but this process's own writes
        made after it."""
        with self._lock:
            pools, meta = self._pools, self._meta
            self._pools = {n: held for n, held in pools.items() if at and held[1] > at}
            self._meta = meta if at and meta[1] > at else ({}, 0)
            for obj in items:
                self._note(obj, False)
        return max([at] + [rv(o) for o in items])

    def on_event(self, kind: str, obj: Dict[str, Any]) -> int:
        with self._lock:
            self._note(obj, kind == "DELETED")
        return rv(obj)

    def _note(self, obj: Dict[str, Any], deleted: bool) -> None:
        name, version = obj["metadata"]["name"], rv(obj)
        data = obj.get("data") or {}
        if name == META:
            if version >= self._meta[1]:
                self._meta = ({} if deleted else dict(data), version)
        elif name.startswith(POOL_PREFIX):
            pool = name[len(POOL_PREFIX):]
            held = self._pools.get(pool)
            if deleted:
                self._pools.pop(pool, None)
            elif held is None or version >= held[1]:
                row, history = row_of(name, data)
                self._pools[pool] = (row, version, history)

    # -- pools -------------------------------------------------------------------------------------

    def pools(self) -> Dict[str, PoolRow]:
        with self._lock:
            return {name: held[0] for name, held in self._pools.items() if held[0] is not None}

    def pool(self, name: str) -> Optional[PoolRow]:
        with self._lock:
            held = self._pools.get(name)
            return held[0] if held else None

    def history(self, pool: str) -> List[Dict[str, Any]]:
        with self._lock:
            held = self._pools.get(pool)
            return list(held[2]) if held else []

    def update_pool(self, name: str, decide: Callable[[Optional[PoolRow]], Optional[PoolRow]]) -> PoolRow:
        """Compare-and-swap on the ConfigMap's resourceVersion, as EtcdNodeStore.update_pool on the
        key's revision: decide from the row this process holds (no round trip when nothing
        moves); a 409 (another replica wrote first, or made it) reads it and decides again. In
        this replica's turn at the pool (workerturns.py): the row another worker wrote last, which
        this one's watch has not brought yet, is read first instead of refused."""
        with self.turns.turn("pool/" + name) as turn:
            with self._lock:
                held = self._pools.get(name)
            old, version, history = held if held else (None, 0, [])
            if turn.last > version:
                old, version, history = self._read_pool(name)
            new, turn.wrote = self._swap(name, decide, old, version, history)
            return new

    def _swap(self, name: str, decide: Callable[[Optional[PoolRow]], Optional[PoolRow]], old: Optional[PoolRow],
              version: int, history: List[Dict[str, Any]]) -> Tuple[PoolRow, Optional[int]]:
        """The row decided, and the resourceVersion written (None: nothing was)."""
        for _ in range(CAS_TRIES):
            new = decide(old)
            if new is None or new == old:
                return old, None  # type: ignore[return-value]
            now = time.time()
            added = [{"field": f, "config": getattr(new, f), "at": now}
                     for f in ("target", "current") if old is None or getattr(old, f) != getattr(new, f)]
            data = {"row": json.dumps(new.as_dict(), sort_keys=True),
                    "history": json.dumps((history + added)[-HISTORY_KEEP:])}
            body = configmap(POOL_PREFIX + name, self.namespace, "pool", data, version)
            try:
                obj = self.client.replace(self._path(body["metadata"]["name"]), body) if version \
                    else self.client.create(self._path(), body)
            except KubeError as exc:
                if exc.status != 409:
                    raise
                old, version, history = self._read_pool(name)
                continue
            self._wrote(self.on_event("MODIFIED", obj))
            return new, rv(obj)
        raise RuntimeError(f"pool {name}: {CAS_TRIES} concurrent updates of ConfigMap {self.namespace}/"
                           f"{POOL_PREFIX}{name} in a row; try again")

    def _read_pool(self, name: str) -> Tuple[Optional[PoolRow], int, List[Dict[str, Any]]]:
        try:
            obj = self.client.get(self._path(POOL_PREFIX + name))
        except KubeError as exc:
            if exc.status == 404:
                return None, 0, []
            raise
        row, history = row_of(POOL_PREFIX + name, obj.get("data") or {})
        return row, rv(obj), history

    # -- meta --------------------------------------------------------------------------------------

    def meta(self, key: str) -> Optional[str]:
        with self._lock:
            return self._meta[0].get(key)

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            if self._meta[0].get(key) == value:
                return
        for _ in range(3):
            try:
                obj = self.client.merge_patch(self._path(META), {"data": {key: value}})
            except KubeError as exc:
                if exc.status != 404:
                    raise
                try:
                    obj = self.client.create(self._path(), configmap(META, self.namespace, "meta", {key: value}))
                except KubeError as exc2:
                    if exc2.status != 409:  # 409: another replica made it meanwhile: patch it
                        raise
                    continue
            self._wrote(self.on_event("MODIFIED", obj))
            return
        raise RuntimeError(f"ConfigMap {self.namespace}/{META}: made and deleted concurrently; try again")

    # -- rendered configs --------------------------------------------------------------------------

    def put_rendered(self, pool: str, name: str, spec: Dict[str, Any], sources: List[str]) -> None:
        """Made once under its name (immutable). Every worker renders a new pool config; the first
        to take the name's turn (workerturns.py) makes its ConfigMap, and the others, told so, do not
        ask again (each such ask was refused with 409)."""
        with self._lock:
            if name in self._rendered:  # made or read by this process already
                return
        blob = zlib.compress(json.dumps({"pool": pool, "spec": spec, "sources": list(sources),
                                         "created": time.time()}, sort_keys=True).encode())
        encoded = base64.b64encode(blob).decode()
        if len(encoded) > CONFIGMAP_MAX:
            raise ValueError(f"rendered config {name} (pool {pool}): {len(encoded)} bytes compressed and base64-"
                             f"encoded, more than a ConfigMap holds ({CONFIGMAP_MAX} of its 1 MiB limit); "
                             f"make the pool's MachineConfigs smaller (large files belong in a container image)")
        body = configmap(RENDERED_PREFIX + name, self.namespace, "rendered")
        body.pop("data")
        body.update(binaryData={"rendered": encoded}, immutable=True)
        with self.turns.turn("rendered/" + name) as turn:
            if not turn.last:  # no other worker of this replica made it
                turn.wrote = self._create_rendered(body)
        with self._lock:
            self._rendered[name] = {"pool": pool, "spec": spec}

    def _create_rendered(self, body: Dict[str, Any]) -> int:
        """The ConfigMap made (its resourceVersion), or found made by another replica (1)."""
        try:
            made = rv(self.client.create(self._path(), body))
        except KubeError as exc:
            if exc.status != 409:  # 409: already there, and immutable under its name
                raise
            return 1
        self._wrote(made)
        return made

    def rendered(self, name: str) -> Optional[Dict[str, Any]]:
        with self._lock:
            doc = self._rendered.get(name)
        if doc is not None:
            return doc
        try:
            obj = self.client.get(self._path(RENDERED_PREFIX + name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        full = json.loads(zlib.decompress(base64.b64decode((obj.get("binaryData") or {})["rendered"])))
        doc = {"pool": full["pool"], "spec": full["spec"]}
        with self._lock:
            self._rendered[name] = doc
        return doc
