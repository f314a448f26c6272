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
half second. A step that stored a new row of its pool rings it (rolloutctl.py), and the queue
rings it whenever the pools' rows change in the store
(``watch``: another process, another replica, stepped them), looked at every ``TICK`` seconds and
only once the store's generation moved.
"""

import logging
import threading
import time
import weakref
from typing import Any, Iterable, Optional, Set

log = logging.getLogger(__name__)

BATCH = 0.05  # seconds a woken queue waits for the rest of a burst before it steps
SHARE = 0.25  # of a CPU, at most, that steps woken by reports take (a step's cost grows with its pool)
TICK = 0.05  # seconds between looks at the store's generation for pool rows another process wrote


class Bell:
    """A counter that grows with every ring; ``wait`` returns as soon as it differs from what the
    caller saw (or the timeout passes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.rung = 0

    def ring(self) -> None:
        with self._cond:
            self.rung += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self.rung != seen, timeout)
            return self.rung


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
        self._thread = threading.Thread(target=self._run, name="pool-queue", daemon=True)

    def start(self) -> "PoolQueue":
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

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
        next_all = time.monotonic() + (self.interval or 0)
        rows, seen_gen, spent = None, object(), 0.0
        while not self._stop.is_set():
            woken = self._wake.wait(TICK)
            owner = self._owner()
            if owner is None or self._stop.is_set():  # stop() wakes the thread too
                return
            try:
                rows, seen_gen = self._watch(owner, rows, seen_gen)
                everything = self.interval is not None and time.monotonic() >= next_all
                if woken or everything:
                    if woken and self._stop.wait(max(BATCH, spent * (1 - SHARE) / SHARE)):
                        return  # (the wait: the rest of the burst, and never more than SHARE of a CPU in steps)
                    self._wake.clear()
                    began = time.monotonic()
                    self._step(owner, everything)
                    spent = time.monotonic() - began
                    if everything:
                        next_all = time.monotonic() + self.interval
            except Exception as exc:  # the store away, a race with a reload: the next round retries
                log.debug("stepping the pools: %s", exc)
            del owner

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

    def _watch(self, owner: Any, rows: Any, seen_gen: Any) -> Any:
        """Ring the bell when the pools' rows changed in the store (written by another process);
        read them only once the store's generation moved (None: a store without one, whose
        ``pools()`` is this process's memory: etcd's watch)."""
        gen = owner.store.generation()
        if gen is not None and gen == seen_gen:
            return rows, seen_gen
        now_rows = owner.store.pools()
        if rows is not None and now_rows != rows:
            self.bell.ring()
        return now_rows, gen
