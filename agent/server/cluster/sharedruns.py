"""Callers that need the same work done share one run of it (a pool's step: rolloutctl._step_pool).

``SharedRuns().run(key, fn)`` returns once a run of ``fn`` for ``key`` that began after the call has
finished: runs for one key go one at a time, and the callers that arrive while one runs wait for the
next, which serves all of them. So a burst of reports costs a few steps of the pool instead of one
each, and the steps of one process never race each other to the pool row's compare-and-swap (with
gevent, each step's write yields to the next report's step, which read the same row: all but one
lost, read the row again and decided again, O(nodes) each time; at 1,000 nodes that was 83% of a
worker's CPU: docs/performance.md, "Rollout at fleet scale"). A run that raises serves nobody: each
waiting caller then runs its own.
"""

import threading
from typing import Any, Callable, Dict, Hashable, List

KEEP = 64  # keys kept; beyond, the idle ones are forgotten (a key is a pool and the state it was stepped in)


class SharedRuns:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: Dict[Hashable, List[Any]] = {}  # key -> [its run's lock, calls so far, calls served]

    def run(self, key: Hashable, fn: Callable[[], None]) -> None:
        with self._lock:
            if key not in self._keys and len(self._keys) >= KEEP:
                self._keys = {k: e for k, e in self._keys.items() if e[0].locked() or e[1] != e[2]}
            entry = self._keys.setdefault(key, [threading.Lock(), 0, 0])
            entry[1] += 1
            mine = entry[1]
        with entry[0]:
            if entry[2] >= mine:
                return  # a run that began after this call has finished: it saw what this call needs
            with self._lock:
                upto = entry[1]  # every call so far is served by a run that begins now
            fn()
            entry[2] = max(entry[2], upto)
