"""Answers to new nodes' config fetches, kept by a worker while nothing they depend on changed.

A fetch that names no node (a first boot, with the bootstrap token or none) is answered from
the pool, the Accept header, the kind of caller, the state directory and the node store only.
In a scale-up storm thousands of nodes a second ask exactly that; answering each from the store
(a read transaction and its locks, shared by every worker), the gating memo and the body cache
cost 0.56 -> 0.48 ms of the server's CPU per request (docs/performance.md). Here the whole answer
is kept, keyed on those inputs, and is good while

- the store's generation is the one read before the answer was made (``NodeStore.generation``:
  for SQLite a shared counter of commits, agent/server/store/changecounter.py), and the state served
  and reconciled is the same (service.Cluster.fetch_generation); and
- it is younger than ``TTL``: the bound on a commit the counter missed (changecounter.py).

Exact, then: an answer is never kept past a commit that could change it. Only answers are kept
(a 200 with its body); refusals and errors are made afresh each time. Bounded: at most
``MAX_ENTRIES`` answers (the Accept header is the client's to vary), oldest dropped first, all
of them dropped when the generation moves on (the generation only grows: an answer kept under
an older one can never be used again). The bodies are those of the service's body cache
(serving.py, also at most 64), so the two hold at most 128 bodies per worker between them.
"""

import threading
import time
from typing import Any, Callable, Dict, Hashable, Optional, Tuple

TTL = 1.0  # seconds
MAX_ENTRIES = 64


class FetchMemo:
    def __init__(self, ttl: float = TTL, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self._clock = clock
        self._entries: Dict[Hashable, Tuple[Any, float, Any]] = {}
        self._lock = threading.Lock()
        self._generation: Any = None
        self.hits = self.misses = 0

    def get(self, key: Hashable, generation: Any) -> Optional[Any]:
        """The answer kept for ``key`` at ``generation``, if it is still good."""
        hit = self._entries.get(key)
        if generation is None or hit is None or hit[0] != generation or self._clock() >= hit[1]:
            self.misses += 1
            return None
        self.hits += 1
        return hit[2]

    def put(self, key: Hashable, generation: Any, answer: Any) -> None:
        """Keep ``answer``, made from what was read after ``generation`` was."""
        if generation is None:
            return
        with self._lock:
            if generation != self._generation:
                self._entries.clear()
                self._generation = generation
            if key not in self._entries and len(self._entries) >= MAX_ENTRIES:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = (generation, self._clock() + self.ttl, answer)
