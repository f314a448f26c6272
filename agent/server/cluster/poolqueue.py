"""The pools' work queue: a pool is stepped (rolloutctl._step_pool) by one thread of the process,
woken by what changed, never on a request's path.

Upstream (pkg/controller/node/node_controller.go): a Node or pool event enqueues the pool
(``enqueueDefault``: ``queue.AddAfter(key, updateDelay)``, 5 s, ``defaultUpdateDelay``); the queue
keeps a key once however often it is added, and a worker syncs it once for all of them. Here a
report, an approval or a deletion adds its pools (``add``); the thread waits ``BATCH`` seconds for
the rest of a burst, then steps each pool added once. So a report costs its own write, whatever the
fleet's size, and a thousand reports in a second cost a few steps, not a thousand. Ours: 0.05 s
instead of upstream's 5 s, since a node waiting for its turn is told by its held fetch as soon as
the step targets it (``Bell``). A step reads every member of its pool (O(nodes), as upstream's
sync lists the pool's Nodes), so after a step that took T the next waits at least T * 3 (``SHARE``:
a quarter of a CPU at most): the bigger the fleet, the more reports one step serves, and the cost
per report stays the same.

Also, every ``interval`` seconds every pool is stepped: what no report announces
moves the rollout then, a canary's wait running out. With the Kubernetes backend that is the sync
loop's (kube_sync.py), and the queue only steps what was added.

``Bell``: what a held fetch waits on (http/app.py ``_held``) instead of looking at the store every
half second. A step that stored a new row of its pool rings it for the nodes whose targeting
changed (rolloutctl.py), and the queue rings it whenever the pools' rows change in the store
(``watch``: another process, another replica, stepped them): at once when the store says so (the
Kubernetes store's watch of the rows, ``on_pool_rows``), else at its look every ``TICK`` seconds,
only once the store's generation moved.
"""

import logging
import threading
import time
import weakref
from typing import Any, Dict, Iterable, Optional, Set

log = logging.getLogger(__name__)

BATCH = 0.05  # seconds a woken queue waits for the rest of a burst before it steps
SHARE = 0.25  # of a CPU, at most, that steps woken by reports take (a step's cost grows with its pool)
MAX_RUNG = 65536  # nodes the bell keeps a count of
TICK = 0.05  # seconds between looks at the store's generation for pool rows another process wrote


class Bell:
    """Rings for named nodes, or for all: ``wait(node, seen, timeout)`` returns as soon as a ring
    for that node (or for all) came after ``seen`` (``seen(node)``), or the timeout passed. A
    targeting wakes only the held fetches of the nodes it targeted: with a thousand fetches held,
    waking all of them at every step cost more than looking at the store twice a second."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._all = 0
        self._rung: Dict[str, int] = {}
        self._waiters: Dict[str, Set[threading.Event]] = {}

    def seen(self, node: Optional[str]) -> int:
        with self._lock:
            return self._all + self._rung.get(node or "", 0)

    def ring(self, nodes: Optional[Iterable[str]] = None) -> None:
        """For ``nodes`` (None: for every node)."""
        with self._lock:
            if nodes is None or len(self._rung) > MAX_RUNG:  # bounded: forgetting the names rings for all once
                self._all += 1
                self._rung.clear()
                events = [e for waiting in self._waiters.values() for e in waiting]
            else:
                events = []
                for node in nodes:
                    self._rung[node] = self._rung.get(node, 0) + 1
                    events.extend(self._waiters.get(node, ()))
        for event in events:
            event.set()

    def wait(self, node: Optional[str], seen: int, timeout: float) -> int:
        key, event = node or "", threading.Event()
        with self._lock:
            self._waiters.setdefault(key, set()).add(event)
        try:
            if self.seen(node) == seen:
                event.wait(timeout)
            return self.seen(node)
        finally:
            with self._lock:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._waiters[key]


def changed_nodes(old: Any, new: Any) -> Optional[Set[str]]:
    """The nodes whose targeting differs between two rows of a pool (PoolRow): those whose held
    fetch may have a new answer; None: all of them (a pool that came or went, or whose current
    config moved: what a node with no config of its own is served). A new target alone wakes
    only the nodes it targets (their entries are new): a waiting node's answer is the config it
    runs, whatever the target; waking a thousand held fetches at every new target made the
    targeted ones wait behind the others."""
    if old is None or new is None or old.current != new.current:
        return None
    before, after = old.rollout.get("targets") or {}, new.rollout.get("targets") or {}
    return {n for n in set(before) | set(after) if before.get(n) != after.get(n)}


class PoolQueue:
    """Steps the pools on one thread (``owner.step_queued(pools, everything)``): each pool added
    once per batch, and every pool every ``interval`` seconds (None: only what is added); watches
    ``owner.store`` for rows another process wrote. Holds its owner only weakly: an owner dropped
    stops its queue."""

    def __init__(self, owner: Any, interval: Optional[float], bell: Bell) -> None:
        self._owner = weakref.ref(owner)
        self.interval = interval
        self.bell = bell
        self._lock = threading.Condition()
        self._dirty: Set[str] = set()
        self._added = 0  # tickets handed out by add
        self._stepped = 0  # every ticket up to this one was stepped (or its step failed)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._started = False
        self._ended = threading.Event()  # the thread's loop returned
        self._rows_seen: Any = (None, object())  # (the pools' rows, the store's generation) last looked at
        self._looking = threading.Lock()  # the queue's thread and the store's watch both look
        self._thread = threading.Thread(target=self._run, name="pool-queue", daemon=True)
        listen = getattr(owner.store, "on_pool_rows", None)
        if callable(listen):
            listen(self.look)

    def start(self) -> "PoolQueue":
        self._thread.start()
        self._started = True
        return self

    def look(self) -> None:
        """The store's watch brought the pools' rows: ring the nodes another process's step
        targeted now, not at the next ``TICK``: at 1,000 nodes that wait was 27-30 ms (median) of
        the 260 ms from a targeting to the held fetch's answer, for the half of the nodes held
        in the other worker."""
        owner = self._owner()
        if owner is None or not self.alive():
            return
        try:
            self._watch(owner)
        except Exception as exc:  # the store away: the queue's own look comes
            log.debug("looking at the pools' rows: %s", exc)

    def alive(self) -> bool:
        """Started and not stopped, nor ended. Never yields: every member's fetch asks
        (rolloutctl.caught_up), and under gevent ``Thread.is_alive()`` switches to the other
        greenlets; with a thousand held fetches woken at once each answer then waited, half
        made, for every other one, and the nodes a step had just targeted were told last."""
        return self._started and not self._ended.is_set() and not self._stop.is_set()

    def add(self, pools: Iterable[str]) -> int:
        """Queue ``pools`` for a step; the ticket ``wait_stepped`` takes."""
        with self._lock:
            self._dirty.update(p for p in pools if p)
            self._added += 1
            ticket = self._added
        self._wake.set()
        return ticket

    def added(self) -> int:
        with self._lock:
            return self._added

    def wait_stepped(self, ticket: int, timeout: float) -> bool:
        """Whether the step that covers ``ticket`` ended within ``timeout`` seconds."""
        with self._lock:
            return self._lock.wait_for(lambda: self._stepped >= ticket or not self.alive(), timeout) and \
                self._stepped >= ticket

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._lock:
            self._lock.notify_all()

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._ended.set()
            with self._lock:  # a caller of wait_stepped stops waiting for a step that never comes
                self._lock.notify_all()

    def _loop(self) -> None:
        next_all = time.monotonic() + (self.interval or 0)
        spent = 0.0
        while not self._stop.is_set():
            woken = self._wake.wait(TICK)
            owner = self._owner()
            if owner is None or self._stop.is_set():  # stop() wakes the thread too
                return
            try:
                self._watch(owner)
                everything = self.interval is not None and time.monotonic() >= next_all
                if woken or everything:
                    # the wait: the rest of the burst, and never more than SHARE of a CPU in steps
                    if woken and self._spaced(owner, max(BATCH, spent * (1 - SHARE) / SHARE)):
                        return
                    self._wake.clear()
                    began = time.monotonic()
                    self._step(owner, everything)
                    spent = time.monotonic() - began
                    if everything:
                        next_all = time.monotonic() + self.interval
            except Exception as exc:  # the store away, a race with a reload: the next round retries
                log.debug("stepping the pools: %s", exc)
            del owner

    def _spaced(self, owner: Any, seconds: float) -> bool:
        """Wait ``seconds`` before a step (whether the queue was stopped), watching the rows all
        the while: after a step of T the wait is 3T, and at 1,000 nodes on a busy machine the
        nodes another process targeted meanwhile learned their turn only once it was over."""
        until = time.monotonic() + seconds
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return False
            if self._stop.wait(min(TICK, left)):
                return True
            try:
                self._watch(owner)
            except Exception as exc:  # the store away: the step after the wait looks again
                log.debug("looking at the pools' rows: %s", exc)

    def _step(self, owner: Any, everything: bool) -> None:
        with self._lock:
            pools, self._dirty = self._dirty, set()
            upto = self._added
        try:
            owner.step_queued(pools, everything)
        finally:
            with self._lock:
                self._stepped = max(self._stepped, upto)
                self._lock.notify_all()

    def _watch(self, owner: Any) -> None:
        """Ring the bell when the pools' rows changed in the store (written by another process);
        read them only once the store's generation moved (None: a store without one, whose
        ``pools()`` is this process's memory: etcd's watch)."""
        with self._looking:
            self._look(owner)

    def _look(self, owner: Any) -> None:
        rows, seen_gen = self._rows_seen
        gen = owner.store.generation()
        if gen is not None and gen == seen_gen:
            return
        now_rows = owner.store.pools()
        if rows is not None and now_rows != rows:
            targeted: Set[str] = set()
            every = False
            for pool in set(rows) | set(now_rows):
                names = changed_nodes(rows.get(pool), now_rows.get(pool))
                every = every or names is None
                targeted |= names or set()
            # the nodes a step retargeted first: waking every held fetch (another pool's current
            # moved) first would have them answered after all the others
            if targeted:
                self.bell.ring(targeted)
            if every:
                self.bell.ring()
        self._rows_seen = (now_rows, gen)
