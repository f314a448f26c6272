"""The server's state objects (MachineConfigs, pools, cluster policy, OS configs/builds) in etcd.

``publish`` takes a state directory, validates all of it with the same loader the server uses
(a set with any problem is refused whole: nothing is written), writes the files under a new
generation ``state/gens/<gen>/`` and then switches ``state/current`` to it in one transaction.
Replicas never see a half-written set: until the switch no one reads the new generation, and
after it every file is there. A generation is named by the hash of its contents, so publishing
the same directory twice changes nothing.

``EtcdStateSource`` is what a replica serves from: it follows ``state/current`` with a watch,
copies the generation into a private directory and loads it with ``store.load_state``, so every
replica renders from byte-identical files and serves the same rendered names. While etcd is
away it keeps serving the last generation it loaded (kept on disk too, for a restart).
"""

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from typing import Dict, Optional, Tuple

from agent.server.store.etcd.client import EtcdClient, EtcdUnavailable, cmp_absent, cmp_mod, op_delete, op_put
from agent.server.store.stateformat import CLUSTER_FILE, KINDS, State, load_state, paused_changes

log = logging.getLogger(__name__)

TXN_OPS = 100  # etcd's default --max-txn-ops is 128
MAX_STATE_BYTES = 64 * 1024 * 1024


class StateRefused(ValueError):
    """The directory has problems; nothing was published."""

    def __init__(self, problems: list):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s); nothing was published:\n" +
                         "\n".join(f"  {p}" for p in problems))


def state_files(state_dir: str) -> Dict[str, bytes]:
    """Relative path -> bytes of every file the server's loader reads from ``state_dir``."""
    out: Dict[str, bytes] = {}
    total = 0
    for sub in KINDS:
        d = os.path.join(state_dir, sub)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".yaml", ".yml", ".json")) and os.path.isfile(os.path.join(d, name)):
                out[f"{sub}/{name}"] = _read(os.path.join(d, name))
    if os.path.isfile(os.path.join(state_dir, CLUSTER_FILE)):
        out[CLUSTER_FILE] = _read(os.path.join(state_dir, CLUSTER_FILE))
    total = sum(len(v) for v in out.values())
    if total > MAX_STATE_BYTES:
        raise ValueError(f"{state_dir}: {total} bytes of state objects; at most {MAX_STATE_BYTES} are published")
    return out


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def generation_of(files: Dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return h.hexdigest()[:32]


def publish(client: EtcdClient, prefix: str, state_dir: str) -> Tuple[str, bool]:
    """Validate and publish ``state_dir``; returns (generation, changed)."""
    files = state_files(state_dir)
    with tempfile.TemporaryDirectory(prefix="node-config-server-publish-") as tmp:
        state = load_state(_materialize(files, tmp))
    if state.problems:
        raise StateRefused(state.problems)
    gen = generation_of(files)
    cur_key = f"{prefix}state/current"
    current = client.get(cur_key)
    if current is not None and json.loads(current.value).get("generation") == gen:
        return gen, False
    gen_prefix = f"{prefix}state/gens/{gen}/"
    client.delete(gen_prefix, prefix=True)  # a publish that died half-way left this behind
    ops = [op_put(gen_prefix + rel, data) for rel, data in sorted(files.items())]
    for i in range(0, len(ops), TXN_OPS):
        client.txn([], ops[i:i + TXN_OPS])
    pointer = json.dumps({"generation": gen, "files": sorted(files)})
    guard = [cmp_absent(cur_key)] if current is None else [cmp_mod(cur_key, current.mod_revision)]
    ok, _ = client.txn(guard, [op_put(cur_key, pointer)])
    if not ok:
        raise RuntimeError("another publish switched the state at the same time; run this command again")
    if current is not None:  # keep only the generation that serves now
        old = json.loads(current.value).get("generation")
        if old and old != gen:
            client.txn([], [op_delete(f"{prefix}state/gens/{old}/", prefix=True)])
    return gen, True


def _materialize(files: Dict[str, bytes], directory: str) -> str:
    for sub in KINDS:
        os.makedirs(os.path.join(directory, sub), exist_ok=True)
    for rel, data in files.items():
        with open(os.path.join(directory, rel), "wb") as f:
            f.write(data)
    return directory


class EtcdStateSource:
    """The serving ``State`` of a replica, from etcd (an ``objectsource.ObjectSource``)."""

    store_error = ""  # why etcd could not be read just now ("" when it could)

    def __init__(self, client: EtcdClient, prefix: str, cache_dir: str, watch: bool = True):
        self.client = client
        self.prefix = prefix
        self.cache_dir = cache_dir
        self.store_error = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._state = State(stale=False)
        self._generation: Optional[str] = None
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        revision = self._first_load()
        if watch:
            client.watch(f"{prefix}state/current", revision, lambda _e, _r: self.refresh(), self._stop)

    @property
    def state_dir(self) -> str:
        """The generation this replica serves (``current`` links to ``gens/<generation>``)."""
        return os.path.join(self.cache_dir, "current")

    def _first_load(self) -> int:
        try:
            return self.refresh()
        except EtcdUnavailable as exc:
            self.store_error = str(exc)
            if os.path.isdir(self.state_dir):
                gen = os.path.basename(os.path.realpath(self.state_dir))
                log.error("etcd unreachable at start (%s): serving the state kept in %s", exc, self.state_dir)
                self._install(self._load_dir(os.path.realpath(self.state_dir), gen), gen)
            return 0

    def refresh(self) -> int:
        """Load the current generation if it changed; returns the etcd revision read at."""
        kvs, revision = self.client.range(f"{self.prefix}state/current")
        if not kvs:
            self.store_error = "no state published yet: run node-config-server load-state"
            return revision
        gen = json.loads(kvs[0].value)["generation"]
        if gen == self._generation:
            return revision
        files_kv, _ = self.client.range(f"{self.prefix}state/gens/{gen}/", prefix=True, revision=revision)
        cut = len(f"{self.prefix}state/gens/{gen}/")
        files = {kv.key.decode()[cut:]: kv.value for kv in files_kv}
        self._install(self._stage(files, gen), gen)
        self.store_error = ""
        return revision

    def _stage(self, files: Dict[str, bytes], gen: str) -> State:
        """Copy a generation under ``gens/<gen>`` (written once: several worker processes share
        the cache), load it, and point ``current`` at it when it is good."""
        gens = os.path.join(self.cache_dir, "gens")
        os.makedirs(gens, mode=0o700, exist_ok=True)
        path = os.path.join(gens, gen)
        if not os.path.isdir(path):
            tmp = _materialize(files, tempfile.mkdtemp(prefix=".tmp-", dir=gens))
            try:
                os.rename(tmp, path)
            except OSError:  # another process of this replica got there first: same contents
                shutil.rmtree(tmp, ignore_errors=True)
        state = self._load_dir(path, gen)
        if not state.problems:
            link = os.path.join(self.cache_dir, f".current-{os.getpid()}")
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(os.path.join("gens", gen), link)
            os.replace(link, self.state_dir)
            _prune(gens, keep={gen})
        return state

    @staticmethod
    def _load_dir(directory: str, gen: str) -> State:
        state = load_state(directory)
        state.signature = f"etcd:{gen}"  # the same on every replica (mtimes differ)
        return state

    def _install(self, new: State, gen: Optional[str]) -> None:
        with self._lock:
            old = self._state
            if new.problems and (old.pools or old.machine_configs):
                for p in new.problems:
                    log.error("state generation %s: %s", gen, p)
                self._state = State(old.pools, old.machine_configs, old.cluster, old.os_configs, old.os_builds,
                                    old.signature, list(new.problems), old.loaded_at, stale=True,
                                    warnings=old.warnings)
            else:
                for line in paused_changes(old.pools, new.pools):
                    log.info("%s", line)
                self._state = new
            self._generation = gen

    def current(self, check_now: bool = False, settled: Optional[str] = None) -> State:
        """``settled`` (the directory watcher's settle rule) has no use here: a generation is
        switched in whole, never seen half-written."""
        if check_now:
            try:
                self.refresh()
            except EtcdUnavailable as exc:
                self.store_error = str(exc)
        with self._lock:
            return self._state

    def close(self) -> None:
        self._stop.set()


def _prune(gens: str, keep: set, spare: int = 3) -> None:
    """Remove old generations but the newest ``spare`` (a process may still be loading one)."""
    entries = [e for e in os.scandir(gens) if e.is_dir() and e.name not in keep and not e.name.startswith(".")]
    entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
    for e in entries[spare:]:
        shutil.rmtree(e.path, ignore_errors=True)
