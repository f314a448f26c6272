"""A replica process announces what it serves (``EtcdNodeStore`` replicas view), watches etcd's
alarms, and takes its turn compacting etcd's history.

Why compaction: etcd keeps every revision of every key until its history is compacted, and its
database counts against ``--quota-backend-bytes``. Nothing compacted it: about 90 large reports
(each a new revision of ``nodes/<node>``) filled a 96 MiB quota, etcd raised NOSPACE, and every
later write of any node got 503 (issue 28). Now one process at a time compacts to the current
revision minus ``COMPACT_KEEP`` every ``COMPACT_INTERVAL`` seconds (``Compactor``), and an alarm
(NOSPACE, CORRUPT) makes /healthz unhealthy, naming it (service.Cluster.store_health).
"""

import json
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, Optional

from agent.server.store.etcd.client import EtcdError, EtcdNoSpace, cmp_absent, cmp_mod, op_put

log = logging.getLogger(__name__)

COMPACT_INTERVAL = 60.0  # seconds between compactions (by whichever process claims the turn)
COMPACT_KEEP = 1000  # revisions kept behind the current one (a watch that fell behind less resumes)
ALARM_POLL = 5.0  # seconds between two looks at etcd's alarms (a refused write says NOSPACE at once)


class Compactor:
    """Compacts etcd's history to ``revision - keep`` every ``interval`` seconds, one process
    at a time, as kube-apiserver does (its ``compact_rev_key``): a process compacts only if its
    compare-and-swap of ``key`` succeeds, i.e. nobody took the turn since it last looked (an
    interval ago). With several replicas and workers, about one compaction per interval
    happens in all; when the process that compacts dies, another takes over one interval later.

    Under NOSPACE the claim (a write) is refused: every process then compacts (etcd allows it
    without space, and compacting twice to the same revision is harmless), so that the freed
    space is there once an operator defragments and disarms the alarm."""

    def __init__(self, client: Any, key: str, interval: float = COMPACT_INTERVAL, keep: int = COMPACT_KEEP,
                 who: str = ""):
        self.client, self.key, self.interval, self.keep = client, key, interval, keep
        self.who = who or f"pid {os.getpid()}"
        self.seen: Optional[int] = None  # mod_revision of ``key`` when last seen (0: absent)
        self.next_at = time.monotonic() + interval
        self.compacted = 0  # the revision this process last compacted to

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def tick(self) -> Optional[int]:
        """Take the turn if nobody took it since the last look; returns the revision compacted
        to (None: not this process's turn, or nothing to compact)."""
        self.next_at = time.monotonic() + self.interval
        if self.seen is None:
            self._look()
            return None
        guard = cmp_absent(self.key) if self.seen == 0 else cmp_mod(self.key, self.seen)
        claim = json.dumps({"by": self.who, "at": time.time()})
        try:
            ok, revision = self.client.txn([guard], [op_put(self.key, claim)])
        except EtcdNoSpace:
            _, revision = self.client.range(self.key, keys_only=True)
            return self._compact(revision)
        if not ok:
            self._look()
            return None
        self.seen = revision
        return self._compact(revision)

    def _look(self) -> None:
        kv = self.client.get(self.key)
        self.seen = kv.mod_revision if kv is not None else 0

    def _compact(self, revision: int) -> Optional[int]:
        target = revision - self.keep
        if target <= max(1, self.compacted):
            return None
        started = time.monotonic()
        done = self.client.compact(target)
        self.compacted = target
        log.info("etcd history compacted to revision %d (current %d, %d kept) in %.2f s%s", target, revision,
                 self.keep, time.monotonic() - started, "" if done else " (already compacted that far)")
        return target


class Heartbeat:
    """A replica process announces what it serves under ``replicas/<name>/<pid>`` (an etcd lease
    of ``ttl`` seconds, renewed every ``ttl / 3``): /api/v1/cluster lists every replica's view,
    and a replica that died drops out by itself. The same thread looks at etcd's alarms every
    ``ALARM_POLL`` seconds (``client.alarms_seen``: /healthz) and runs the ``Compactor``."""

    def __init__(self, store: Any, name: str, describe: Callable[[], Dict[str, Any]], ttl: int = 15,
                 compact_interval: float = COMPACT_INTERVAL, compact_keep: int = COMPACT_KEEP,
                 alarm_poll: float = ALARM_POLL):
        self.store, self.name, self.describe, self.ttl = store, name, describe, ttl
        self._lease = 0
        self._beat_at = 0.0  # when the next announcement is due
        self._alarms_at = 0.0  # when the next look at the alarms is due
        self.alarm_poll = alarm_poll
        self.compactor = Compactor(store.client, store._k("compaction"), compact_interval, compact_keep,
                                   who=f"{name} pid {os.getpid()}")
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="replica-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No more announcements from this process (its etcd lease then ends within ``ttl``)."""
        self._stopped.set()

    def beat(self) -> None:
        client = self.store.client
        if not self._lease or client.keepalive(self._lease) <= 0:
            self._lease = client.grant(self.ttl)
        info = dict(self.describe(), replica=self.name, pid=os.getpid(), at=time.time())
        client.put(self.store._k("replicas", self.name, str(os.getpid())), json.dumps(info, sort_keys=True),
                   lease=self._lease)

    def check_alarms(self) -> None:
        before = {a["alarm"] for a in self.store.client.alarms_seen}
        now = {a["alarm"] for a in self.store.client.alarms()}
        for alarm in sorted(now - before):
            log.error("etcd raised the %s alarm: it refuses writes until an operator clears it "
                      "(docs/security.md, \"Limits\")", alarm)
        for alarm in sorted(before - now):
            log.warning("etcd's %s alarm is cleared", alarm)

    def _loop(self) -> None:
        stop = self.store._stop
        while not stop.is_set() and not self._stopped.is_set():
            now = time.monotonic()
            if now >= self._beat_at:
                try:
                    self.beat()
                    self._beat_at = time.monotonic() + self.ttl / 3
                except Exception as exc:  # the store is away or full: the next beat tries again
                    log.debug("replica heartbeat failed: %s", exc)
                    self._lease = 0
                    self._beat_at = time.monotonic() + 1
            if now >= self._alarms_at:
                self._alarms_at = time.monotonic() + self.alarm_poll
                try:
                    self.check_alarms()
                except Exception as exc:
                    log.debug("etcd alarm check failed: %s", exc)
            if self.compactor.due():
                try:
                    self.compactor.tick()
                except (EtcdError, ValueError, OSError) as exc:
                    log.warning("etcd compaction failed (tried again in %.0f s): %s", self.compactor.interval, exc)
            stop.wait(max(0.05, min(self._beat_at, self._alarms_at, self.compactor.next_at) - time.monotonic()))
