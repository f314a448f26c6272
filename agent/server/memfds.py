"""Large response bodies as memfds, so the gevent worker can ``sendfile(2)`` them (plain HTTP).

A config body is one ``bytes`` object cached by the service and sent again and again; copying
it through Python into the socket for every request cost the server about 10x nginx's CPU per
request in the config storm (nginx sends a static file with ``sendfile``). Here each distinct
body gets a memfd (anonymous memory with a file descriptor, Linux) holding the same bytes,
written once; ``os.sendfile`` with an explicit offset never moves the file position, so every
connection can use it (each on its own ``dup``, so that an eviction never closes an fd in use).

Keyed by the ``bytes`` object's identity, with a reference kept so that the identity cannot be
reused while the entry lives; at most ``max_bytes`` in total, least recently used dropped first.
A body gets a memfd the second time it is sent (``fd_for`` returns None the first time): a
response built for one request (a pool view) never costs a memfd or a place in the cache
(an identity reused by chance at most wastes one memfd, evicted in turn).
"""

import os
from collections import OrderedDict
from typing import Optional, Tuple


class MemfdCache:
    def __init__(self, max_bytes: int = 256 << 20):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, Tuple[bytes, int]] = OrderedDict()
        self._bytes = 0
        self._seen: OrderedDict[int, int] = OrderedDict()  # id -> length of bodies sent once

    @staticmethod
    def available() -> bool:
        return hasattr(os, "memfd_create") and hasattr(os, "sendfile")

    def fd_for(self, data: bytes) -> Optional[int]:
        key = id(data)
        hit = self._entries.get(key)
        if hit is not None and hit[0] is data:
            self._entries.move_to_end(key)
            return hit[1]
        if self._seen.get(key) != len(data):
            self._seen[key] = len(data)
            while len(self._seen) > 256:
                self._seen.popitem(last=False)
            return None
        del self._seen[key]
        if hit is not None:  # the identity of a body that is gone: drop its entry
            self._drop(key)
        fd = os.memfd_create("node-config-server-body", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            raise
        self._entries[key] = (data, fd)
        self._bytes += len(data)
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            self._drop(next(iter(self._entries)))
        return fd

    def _drop(self, key: int) -> None:
        old, old_fd = self._entries.pop(key)
        self._bytes -= len(old)
        os.close(old_fd)  # a send in progress has its own dup of it
