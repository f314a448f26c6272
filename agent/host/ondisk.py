"""What the paths of a config are on disk now (stat, streamed digests, enablement links).

Reading only; the comparison is agent.core.drift's. Each file is hashed in 1 MiB reads (memory
stays bounded whatever its size), opened with O_NOFOLLOW|O_NONBLOCK (a link swapped in after the
lstat, or a FIFO, is never followed or waited on) and compared by fstat with what lstat saw.
Every path goes through the Root: ``--root DIR`` holds, and a link leaving the root is an error
named in the report, never followed.
"""

import hashlib
import os
import stat
from typing import Dict, Iterable, List, Optional

from agent.core.drift import Seen
from agent.host.root import PathEscapeError, Root

CHUNK = 1 << 20


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def _digest(host: str, st: os.stat_result, algo: str) -> str:
    h = hashlib.new(algo)
    fd = os.open(host, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise OSError(f"{host} was replaced while it was read")
        while True:
            block = os.read(fd, CHUNK)
            if not block:
                break
            h.update(block)
    finally:
        os.close(fd)
    return h.hexdigest()


def observe(root: Root, path: str, algo: Optional[str] = None) -> Seen:
    """``path`` (a config path) as it is; its content's digest in ``algo`` for a regular file."""
    try:
        host = root.path(path, follow_last=False)
    except PathEscapeError as e:
        return Seen("other", error=str(e))
    try:
        st = os.lstat(host)
    except (FileNotFoundError, NotADirectoryError):
        return Seen("absent")
    except OSError as e:
        return Seen("other", error=f"{e.strerror or e}")
    kind = _kind(st.st_mode)
    common = dict(mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid, size=st.st_size)
    if kind == "symlink":
        try:
            return Seen(kind, target=os.readlink(host), **common)
        except OSError as e:
            return Seen(kind, error=f"{e.strerror or e}", **common)
    digest = None
    if kind == "file" and algo:
        try:
            digest = _digest(host, st, algo)
        except OSError as e:
            return Seen(kind, error=f"{getattr(e, 'strerror', None) or e}", **common)
    return Seen(kind, digest=digest, **common)


def observe_all(root: Root, paths: Iterable[str], algos: Dict[str, str]) -> Dict[str, Seen]:
    """Each path as it is (``algos``: path -> digest algorithm, for the files whose content is compared)."""
    with root.unchanged():
        return {p: observe(root, p, algos.get(p)) for p in paths}


def enablement_links(root: Root, units: Iterable[str]) -> Dict[str, List[str]]:
    """unit -> the ``*.wants``/``*.requires``/``*.upholds`` links to it under /etc/systemd/system."""
    from agent.host.units import existing_links_to

    return {u: existing_links_to(root, u) for u in units}


def unit_text(root: Root, name: str) -> Optional[tuple]:
    """(path, text) of a unit file in the root, as systemd finds it (for its [Install] section)."""
    from agent.host.units import find_unit

    return find_unit(root, name)


__all__ = ["enablement_links", "observe", "observe_all", "unit_text"]
