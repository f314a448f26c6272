"""Linux inotify through ctypes (no library: RHEL 9 and EPEL 9 ship no inotify module for 3.9).

``DirWatcher(root, dirs)`` watches directories of a root (config paths) and ``wait(timeout)``
returns the config paths named by the events that arrived, or ``FULL`` when the kernel dropped
events (queue overflow) or a watched directory went away or appeared: then everything is to be
checked again. inotify does not recurse, so each directory is watched itself, as the MCD's drift
monitor does (fsnotify on the parent directory of every file, config_drift_monitor.go
``initialize``); a directory that does not exist yet is stood in for by its nearest existing
ancestor, and the watches are rebuilt when that ancestor changes.

``available()`` says whether inotify can be used; a caller falls back to periodic checks.
"""

import ctypes
import ctypes.util
import errno
import logging
import os
import select
import struct
import time
from typing import Dict, Iterable, Optional, Set, Tuple, Union

from agent.host.root import PathEscapeError, Root

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
_HEADER = struct.Struct("iIII")
FULL = "full"  # wait()'s answer when everything must be checked again

_libc = None


def _lib():
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c") or "libc.so.6"
        lib = ctypes.CDLL(name, use_errno=True)
        for fn in ("inotify_init1", "inotify_add_watch"):
            getattr(lib, fn)  # AttributeError where there is no inotify
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        _libc = lib
    return _libc


def available() -> bool:
    try:
        _lib()
    except (OSError, AttributeError):
        return False
    return True


class WatchError(OSError):
    """inotify could not be set up (no inotify, or out of watches: fs.inotify.max_user_watches)."""


class DirWatcher:
    def __init__(self, root: Root, dirs: Iterable[str]):
        lib = _lib()
        self.root = root
        self.dirs = sorted(set(dirs))
        self.fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            e = ctypes.get_errno()
            raise WatchError(e, f"inotify_init1: {os.strerror(e)}")
        self.wds: Dict[int, str] = {}  # wd -> config dir
        self.missing: Dict[int, Set[str]] = {}  # wd -> the missing config dirs it stands in for
        try:
            self._add_all()
        except BaseException:
            self.close()
            raise

    def _add_all(self) -> None:
        lib = _lib()
        for wd in list(self.wds):
            lib.inotify_rm_watch(self.fd, wd)
        self.wds, self.missing = {}, {}
        for d in self.dirs:
            config_dir, stand_in = self._existing(d)
            host = self.root.path(config_dir)
            wd = lib.inotify_add_watch(self.fd, os.fsencode(host), MASK)
            if wd < 0:
                e = ctypes.get_errno()
                if e in (errno.ENOENT, errno.ENOTDIR):  # gone since: the next rebuild sees it
                    continue
                raise WatchError(e, f"inotify_add_watch {host}: {os.strerror(e)}"
                                 + ("; raise fs.inotify.max_user_watches" if e == errno.ENOSPC else ""))
            self.wds[wd] = config_dir
            if stand_in:
                self.missing.setdefault(wd, set()).add(d)

    def _existing(self, config_dir: str) -> Tuple[str, bool]:
        d = config_dir
        while True:
            try:
                if os.path.isdir(self.root.path(d)):
                    return d, d != config_dir
            except PathEscapeError:
                pass
            if d == "/":
                return d, True
            d = os.path.dirname(d)

    def fileno(self) -> int:
        return self.fd

    def wait(self, timeout: Optional[float], settle: float = 0.2, wake_fd: Optional[int] = None
             ) -> Union[str, Set[str]]:
        """Block up to ``timeout`` seconds (None: for ever) for events, or until ``wake_fd`` is
        readable; then collect what more arrives within ``settle`` seconds (an editor's write,
        rename and chmod come as several events: one check). Returns the changed config paths
        (empty: timed out, or woken with no event) or FULL."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        if wake_fd is not None:
            poller.register(wake_fd, select.POLLIN)
        ready = poller.poll(None if timeout is None else max(0, int(timeout * 1000)))
        if wake_fd is not None:
            poller.unregister(wake_fd)  # the settle below waits for more events only
        if not any(fd == self.fd for fd, _ in ready):
            return set()
        changed: Set[str] = set()
        full = False
        deadline = time.monotonic() + settle
        while True:
            more, rebuild = self._read()
            full = full or rebuild
            changed |= more
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(int(left * 1000)):
                break
        if full:
            self._add_all()
            return FULL
        return changed

    def _read(self) -> Tuple[Set[str], bool]:
        try:
            buf = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return set(), False
        changed: Set[str] = set()
        rebuild = False
        pos = 0
        while pos + _HEADER.size <= len(buf):
            wd, mask, _cookie, length = _HEADER.unpack_from(buf, pos)
            raw = buf[pos + _HEADER.size: pos + _HEADER.size + length].rstrip(b"\0")
            pos += _HEADER.size + length
            if mask & (IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
                rebuild = True
                continue
            config_dir = self.wds.get(wd)
            if config_dir is None:
                continue
            path = os.path.join(config_dir, os.fsdecode(raw)) if raw else config_dir
            changed.add(path)
            if any(m == path or m.startswith(path + "/") for m in self.missing.get(wd, ())):
                rebuild = True  # a missing directory may exist now: watch it itself
        return changed, rebuild

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "DirWatcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["FULL", "DirWatcher", "WatchError", "available"]
