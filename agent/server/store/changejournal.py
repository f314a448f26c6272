"""Ours: the names of the objects that changed, numbered, so that a reader who read up to a mark
reads only what changed since (pure; whoever writes and reads it holds its own lock).

A watch cache (kube.watch.Reflector) notes each Node an event changed, a node index
(nodeindex.NodeIndex) each record it replaced; the pool's step and counts on Node objects
(cluster/kube_nodes.py) then cost what changed since their last read, not a pass over the
pool. Upstream's node controller has no such journal: its work queue holds pool names, and each
sync lists the pool's Nodes again (node_controller.go ``syncMachineConfigPool``).

A re-list (or a membership rebuild) may have changed anything: ``reset`` makes every older mark
unanswerable, and so does trimming the oldest half once ``keep`` names are held; a reader whose
mark cannot be answered reads everything again.
"""

import bisect
from typing import List, Optional, Set, Tuple

KEEP = 20000  # names held; a reader further behind reads everything again


class ChangeJournal:
    def __init__(self, keep: int = KEEP) -> None:
        self.seq = 0  # the mark of the newest change
        self.floor = 0  # a mark below this may have missed a change
        self.keep = keep
        self._seqs: List[int] = []
        self._names: List[str] = []

    def note(self, name: str) -> None:
        self.seq += 1
        self._seqs.append(self.seq)
        self._names.append(name)
        if len(self._seqs) > self.keep:
            drop = len(self._seqs) // 2
            self.floor = self._seqs[drop - 1]
            del self._seqs[:drop]
            del self._names[:drop]

    def reset(self) -> None:
        """Anything may have changed: every mark taken before now is unanswerable."""
        self.seq += 1
        self.floor = self.seq
        self._seqs, self._names = [], []

    def since(self, mark: Optional[int]) -> Tuple[int, Optional[Set[str]]]:
        """(the mark now, the names changed after ``mark``); None for the names when ``mark`` is
        None, older than what is held, or not this journal's (newer than its newest)."""
        if mark is None or mark < self.floor or mark > self.seq:
            return self.seq, None
        return self.seq, set(self._names[bisect.bisect_right(self._seqs, mark):])
