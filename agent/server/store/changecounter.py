"""How many times nodes.db was written, readable by every process without asking SQLite.

Why: the answer to a new node's config fetch depends only on its pool, its Accept header and the
node store, and a storm of such fetches asks the same thing thousands of times a second. A
worker keeps the answer (agent/server/http/fetchmemo.py) for as long as nothing was committed; asking
SQLite that (``PRAGMA data_version``) costs a read transaction: two ``fcntl`` locks on the shared
``-shm`` file, contended by every worker. This counter costs a load from shared memory.

``<db>-gen`` holds one 64-bit counter, mapped by every process that opens the database. A
writer adds one *after* its COMMIT (agent/server/store/sqlite/db.py), under ``flock`` (other processes; each
opens the file itself, as a descriptor inherited across a fork would share its lock) and a
thread lock (this process's threads), so that no increment is lost: the counter only grows. A
reader reads the counter *before* it reads the store and keeps what it read under that value:
whatever it read includes every commit counted up to then, so an unchanged counter means
nothing it read is out of date.

Not counted: a writer killed between its COMMIT and its increment, or one that does not know
the counter (the ``sqlite3`` shell, a server older than this file). What readers keep therefore
also expires after a second (fetchmemo.TTL): the most such a missed increment can cost.
"""

import fcntl
import mmap
import os
import struct
import threading
from typing import Optional

_FORMAT = struct.Struct("<Q")


class ChangeCounter:
    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._open()

    def _open(self) -> None:
        self._pid = os.getpid()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._file = open(fd, "r+b", buffering=0)  # closed with this object, like the map
        if os.fstat(fd).st_size < _FORMAT.size:
            os.ftruncate(fd, _FORMAT.size)  # zeros: a new counter starts at 0
        self._map = mmap.mmap(fd, _FORMAT.size)

    @classmethod
    def beside(cls, db_path: str) -> Optional["ChangeCounter"]:
        """The counter of database ``db_path``; None for ``:memory:`` or where the file cannot be
        made (then nothing is kept: every fetch asks the store)."""
        if db_path == ":memory:":
            return None
        try:
            return cls(db_path + "-gen")
        except OSError:
            return None

    def value(self) -> int:
        return _FORMAT.unpack_from(self._map)[0]

    def bump(self) -> None:
        with self._lock:
            if self._pid != os.getpid():  # opened before a fork: this process needs its own lock
                self.close()
                self._open()
            fcntl.flock(self._file, fcntl.LOCK_EX)
            try:
                _FORMAT.pack_into(self._map, 0, _FORMAT.unpack_from(self._map)[0] + 1)
            finally:
                fcntl.flock(self._file, fcntl.LOCK_UN)

    def close(self) -> None:
        self._map.close()
        self._file.close()
