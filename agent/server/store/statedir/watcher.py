"""Noticing changes of the state directory, each gunicorn worker on its own.

Rules (docs/security.md, "State directory"):

- A change is read only after the directory has stayed unchanged for ``settle`` seconds
  (``serve --settle-seconds``, 10 s by default; 0.5 s for a watcher made without it), so a
  config written file by file, or rewritten in place with pauses, is never rendered half-written.
- A state file that holds no object (emptied, or cut before its first document) is a problem,
  like an invalid one: the last good objects keep serving (statefiles.read_docs).
- A read during which the files changed again is thrown away (a torn view is never served).
- The state's ``signature`` is always that of the files it was last checked against, also when
  those files were invalid and the last good objects keep serving: so the removal of a bad file
  is a change like any other, and ``/healthz`` clears at the next check.
- ``stale`` is true whenever the newest files have problems, whatever serves instead: the last
  good objects, or, in a process that started while the directory was bad (a gunicorn worker
  booted or restarted late), the valid ones. Marking only the first case left a late worker
  answering ``stale: false`` with problems listed, so "every worker reports stale" never held.
"""

import logging
import threading
import time
from typing import Callable, Optional, Tuple

from agent.server.store.stateformat import (
    State,
    load_state,
    no_pools_warning,
    paused_changes,
    signature,
    signature_and_newest,
)

log = logging.getLogger(__name__)

SETTLE_SECONDS = 0.5
CHANGING = "changing:"  # prefix of a signature that can never match the directory's


class StateWatcher:
    """Holds the serving state; looks at the directory at most once per ``interval`` seconds.

    Thread-safe: request threads call ``current()``; only one of them reloads at a time.
    An ``ObjectSource`` (agent.server.store.objectsource).
    """

    store_error = ""  # a directory on local disk has no store to lose
    logs_problems = True  # it logs what it read (serve's first read prints nothing more)

    def __init__(self, state_dir: str, interval: float = 1.0, settle: Optional[float] = None,
                 announce: Optional[Callable[[str], bool]] = None):
        """``announce(signature)``: whether this process logs what it read under that signature
        (problems, warnings, a reload, a pool paused); serve's workers share one, so that each is
        said once, not once per worker (agent/server/http/saidonce.py), by the worker that saw the
        change; with one, a first read says nothing (serve's own first read said the state it
        started on). None: this process says everything."""
        self.state_dir = state_dir
        self.announce = announce
        self.interval = interval
        self.settle = min(SETTLE_SECONDS, interval) if settle is None else settle  # in-process default
        self._lock = threading.Lock()
        self._next = 0.0  # monotonic time of the next look
        self._pending: Optional[Tuple[str, float]] = None  # (signature, first seen) of a change settling
        self._partial = False  # serving the valid objects of a bad directory (no good state seen yet)
        self._state = self._first_load()

    def _first_load(self) -> State:
        state = load_state(self.state_dir)
        if signature(self.state_dir) != state.signature:
            # Files changed while being read: serve this (nothing better exists yet), look again soon.
            state.signature = CHANGING + state.signature
        if state.problems:
            state.stale = self._partial = True
        if self.announce is None:  # with an announcer (serve's workers) serve's own first read said it, and a
            # worker booted after a change leaves it to the workers that see the change (its reload is said)
            self._log_problems(state)
            if state.problems:  # as a reload with problems says it: the line to look for
                log.error("state directory %s has %d problem(s); valid objects serve", self.state_dir,
                          len(state.problems))
        self._next = time.monotonic() + self.interval
        return state

    def _says(self, state: State) -> bool:
        return self.announce is None or self.announce(state.signature)

    def _log_problems(self, state: State) -> None:
        for p in state.problems:
            log.error("state: %s", p)
        empty = no_pools_warning(state, f"state directory {self.state_dir}")
        if empty:
            log.warning("%s", empty)
        for found in state.warnings.values():  # admitted, and served: said once per load
            for p in found:
                log.warning("state: %s", p)

    def current(self, check_now: bool = False, settled: Optional[str] = None) -> State:
        """The state to serve. ``check_now`` looks at once; ``settled`` is a signature another
        worker has already waited out (it is read without waiting again)."""
        now = time.monotonic()
        if check_now:
            self._lock.acquire()
        elif now < self._next or not self._lock.acquire(blocking=False):
            return self._state
        try:
            self._check(now, settled)
        finally:
            self._lock.release()
        return self._state

    def _check(self, now: float, settled: Optional[str]) -> None:
        sig, newest = signature_and_newest(self.state_dir)
        if sig == self._state.signature:
            self._pending = None
            self._next = now + self.interval
            return
        wait = self._settle_wait(sig, newest, now, settled)
        if wait > 0:
            self._next = now + min(wait, self.interval)
            return
        new = load_state(self.state_dir)
        after = signature(self.state_dir)
        if after != new.signature:  # changed while being read: never serve a torn view
            self._pending = (after, time.monotonic())
            self._next = now + self.settle
            return
        self._pending = None
        self._next = now + self.interval
        self._apply(new)

    def _settle_wait(self, sig: str, newest: float, now: float, settled: Optional[str]) -> float:
        """Seconds to wait before reading ``sig`` (0: read now).

        Settled when the newest mtime is ``settle`` seconds old, or (for mtimes in the future)
        when this signature has been seen unchanged for ``settle`` seconds, or when another
        worker has already waited it out.
        """
        if self.settle <= 0 or sig == settled:
            return 0.0
        quiet = time.time() - newest
        if quiet >= self.settle:
            return 0.0
        if self._pending is None or self._pending[0] != sig:
            self._pending = (sig, now)
        seen_for = now - self._pending[1]
        if seen_for >= self.settle:
            return 0.0
        return max(0.05, min(self.settle - seen_for, self.settle - max(quiet, 0.0)))

    def close(self) -> None:
        """Nothing to release (a look is a plain read); here so that every state source closes alike."""

    def _apply(self, new: State) -> None:
        said = self._says(new)
        if not new.problems:
            if said:
                log.info("state directory %s reloaded", self.state_dir)
                for line in paused_changes(self._state.pools, new.pools):
                    log.info("%s", line)
                self._log_problems(new)  # none, but its warnings and an emptied directory are worth saying
            self._state, self._partial = new, False
            return
        if said:  # said before this worker serves it (another worker, finding the saying claimed, may serve it first)
            self._log_problems(new)
            log.error("state directory %s has %d problem(s); %s", self.state_dir, len(new.problems),
                      "valid objects serve" if self._partial else "the last good state keeps serving")
        if self._partial:  # no good state was ever read: the newest valid objects serve
            new.stale = True
            self._state = new
        else:  # keep the last good objects, with the newest files' signature and problems
            # (carrying the last good signature made a removed bad file look "unchanged")
            old = self._state
            self._state = State(old.pools, old.machine_configs, old.cluster, old.os_configs, old.os_builds,
                                new.signature, new.problems, old.loaded_at, stale=True, bootstrap=old.bootstrap,
                                warnings=old.warnings)
