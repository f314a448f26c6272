"""A replica's workers take turns at the writes they would race each other for (ours; the MCO
has one node controller, a leader, and no such race).

Each of serve's gunicorn workers steps the pools it was told of (cluster/poolqueue.py), renders a
pool's new config, writes the MachineConfigNode of a node it heard from and grants drain slots.
Two workers doing one of these at once, or the second deciding from an object its watch has not
brought yet, made the API server refuse one write (409, or 422 for a failed ``test``): pool rows
12-39 times per rollout at 100-200 nodes, the most frequent conflict, a rendered config's
ConfigMap 4 times, MachineConfigNode statuses 1-17 and drain Leases 1-10 (docs/performance.md,
"Writes per node and conflicts"). Here a worker takes the turn at what it writes (an exclusive
``flock`` on a file of the server's per-run directory, the one the workers already share: a pool's
row, a rendered config's name, a node's MachineConfigNode, a pool's drains) before it reads and
decides, and finds in it what the last holder wrote (a resourceVersion): a pool row its own watch
has not brought yet is read first. The compare-and-swap stays what keeps each object right (other
replicas, a worker that did not get its turn in time); the turn only saves refused writes.

The lock is taken without blocking and retried every ``POLL`` seconds: under gevent a blocking
``flock`` would stop every request of the worker. A worker that waited ``WAIT`` seconds writes
without its turn. The kernel releases a dead worker's lock.
"""

import contextlib
import errno
import fcntl
import hashlib
import os
import time
from typing import Iterator, Optional

PREFIX = "turn-"  # not *.db: prometheus-client's multiprocess collector reads only those
POLL = 0.002  # seconds between tries of a held turn (a holder writes within milliseconds)
WAIT = 2.0  # seconds a worker waits for its turn before it writes without it


class Turn:
    """``last``: the resourceVersion the last holder wrote (0: none known); ``held``: whether this
    is the turn (False: given without it, after ``WAIT`` or with no shared directory). Set
    ``wrote`` to the one this holder wrote, if any."""

    def __init__(self, last: int, held: bool) -> None:
        self.last = last
        self.held = held
        self.wrote: Optional[int] = None


class WorkerTurns:
    """The turns of one server's workers, in ``directory``; None: a process of its own (a test's
    store, a one-shot command): every turn is given at once, with nothing known."""

    def __init__(self, directory: Optional[str]) -> None:
        self.directory = directory

    @contextlib.contextmanager
    def turn(self, key: str) -> Iterator[Turn]:
        """The turn at ``key`` (what is written: "pool/worker", "mcn/node-1"), for the ``with``
        block; what the holder wrote is kept for the next one only when it was the turn."""
        fd = self._open(key)
        if fd is None:
            yield Turn(0, False)
            return
        try:
            held = _lock(fd)
            turn = Turn(_read(fd) if held else 0, held)
            yield turn
            if held and turn.wrote:
                data = str(turn.wrote).encode()
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
        finally:
            os.close(fd)  # closing releases the lock

    def _open(self, key: str) -> Optional[int]:
        if not self.directory:
            return None
        name = PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
        try:
            return os.open(os.path.join(self.directory, name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:  # the directory gone (the server stopping): the compare-and-swap still guards
            return None


def _lock(fd: int) -> bool:
    """Whether the turn was taken within ``WAIT`` seconds."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() >= deadline:
                return False
        time.sleep(POLL)


def _read(fd: int) -> int:
    try:
        return int(os.pread(fd, 32, 0).decode("ascii") or 0)
    except (OSError, ValueError):  # an unreadable file: nothing known, the compare-and-swap guards
        return 0
