"""Large response bodies as unnamed files, so the gevent worker can ``sendfile(2)`` them (plain HTTP).

A config body is one ``bytes`` object cached by the service and sent again and again; copying
it through Python into the socket for every request cost the server about 10x nginx's CPU per
request in the config storm (nginx sends a static file with ``sendfile``). Here each distinct
body gets a file holding the same bytes, written once; ``os.sendfile`` with an explicit offset
never moves the file position, so every connection can send from the same descriptor.

Which file: an ``O_TMPFILE`` in the temporary directory (the service's private /tmp under
systemd's ``PrivateTmp=``): it never has a name, is 0600, and its pages are ordinary page cache,
which the kernel may reclaim under memory pressure and which ``sendfile`` sends for less system
time than a memfd's (shmem) pages: 0.19-0.22 ms against 0.26-0.29 ms per 2.4 MB body in the
config storm (docs/performance.md; nginx serving from tmpfs shows the same gap). Where
``O_TMPFILE`` is refused (a file system without it), a memfd; where neither exists, nothing
(the worker copies through Python).

Keyed by the ``bytes`` object's identity, with a reference kept so that the identity cannot be
reused while the entry lives; at most ``max_bytes`` in total, least recently used dropped first.
A body gets a file the second time it is sent (``acquire`` returns None the first time): a
response built for one request (a pool view) never costs a file or a place in the cache (an
identity reused by chance at most wastes one file, evicted in turn). A descriptor handed out
by ``acquire`` stays open until its ``release``, even if the entry is evicted meanwhile: the
worker's greenlets share it without a ``dup`` per request.
"""

import os
import tempfile
from collections import OrderedDict
from typing import Dict, Optional


class _Entry:
    __slots__ = ("data", "fd", "users", "evicted")

    def __init__(self, data: bytes, fd: int):
        self.data, self.fd, self.users, self.evicted = data, fd, 0, False


class BodyFiles:
    def __init__(self, max_bytes: int = 256 << 20, directory: Optional[str] = None):
        self.max_bytes = max_bytes
        self.directory = directory
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._by_fd: Dict[int, _Entry] = {}
        self._bytes = 0
        self._seen: OrderedDict[int, int] = OrderedDict()  # id -> length of bodies sent once

    @staticmethod
    def available() -> bool:
        return hasattr(os, "sendfile") and (hasattr(os, "O_TMPFILE") or hasattr(os, "memfd_create"))

    def acquire(self, data: bytes) -> Optional[int]:
        """A descriptor holding ``data`` (call ``release`` with it when sent), or None: the
        first time this body is sent, or no file could be made."""
        key = id(data)
        entry = self._entries.get(key)
        if entry is not None and entry.data is data:
            self._entries.move_to_end(key)
        elif self._seen.get(key) != len(data):
            self._seen[key] = len(data)
            while len(self._seen) > 256:
                self._seen.popitem(last=False)
            return None
        else:
            del self._seen[key]
            if entry is not None:  # the identity of a body that is gone: drop its entry
                self._evict(key)
            entry = self._add(key, data)
            if entry is None:
                return None
        entry.users += 1
        return entry.fd

    def release(self, fd: int) -> None:
        entry = self._by_fd[fd]
        entry.users -= 1
        if entry.evicted and entry.users == 0:
            self._close(entry)

    def _add(self, key: int, data: bytes) -> Optional[_Entry]:
        fd = self._new_file()
        if fd is None:
            return None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            raise
        entry = self._entries[key] = self._by_fd[fd] = _Entry(data, fd)
        self._bytes += len(data)
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            self._evict(next(iter(self._entries)))
        return entry

    def _new_file(self) -> Optional[int]:
        if hasattr(os, "O_TMPFILE"):
            try:
                return os.open(self.directory or tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
            except OSError:
                pass  # EOPNOTSUPP/EISDIR: no O_TMPFILE on this file system; a read-only /tmp
        if hasattr(os, "memfd_create"):
            try:
                return os.memfd_create("node-config-server-body", os.MFD_CLOEXEC)
            except OSError:
                pass
        return None

    def _evict(self, key: int) -> None:
        entry = self._entries.pop(key)
        self._bytes -= len(entry.data)
        entry.evicted = True
        if entry.users == 0:
            self._close(entry)

    def _close(self, entry: _Entry) -> None:
        del self._by_fd[entry.fd]
        os.close(entry.fd)
        entry.data = b""
