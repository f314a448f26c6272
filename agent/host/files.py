"""File effects on the host: atomic, durable, never briefly readable by others.

Every helper takes *host* paths (already resolved through ``Root.path``). Writes follow one
recipe so a crash at any instant leaves either the old or the new file, never a mix:

1. create a temporary file next to the target with ``O_EXCL`` and mode 0600 (a secret is never
   readable by others, whatever the umask),
2. chown it, write, fsync,
3. chmod to the final mode just before the rename (chown clears set-id bits, so chmod comes last),
4. rename over the target and fsync the directory so the rename itself is durable.

Temporary names start with ``TMP_PREFIX`` so recovery can sweep leftovers of a killed run.
"""

import errno
import os
import secrets
import stat
from typing import Any, Dict, List, Optional, Sequence, Tuple

from agent.core.applyplan.op import Observed

TMP_PREFIX = ".node-agent-tmp."

# Where SELinux is on, every path written here gets the label policy assigns it
# (agent.host.selinux.Labeller, set by use_labeller at the start of a run); None elsewhere, and
# then nothing changes.
_labeller: Optional[Any] = None


def use_labeller(labeller: Optional[Any]) -> None:
    global _labeller
    _labeller = labeller


def _label(path: str) -> None:
    if _labeller is not None:
        _labeller.label([path])


def observe(path: str, read: bool = True) -> Observed:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Observed("absent")
    except NotADirectoryError:
        return Observed("absent")
    perm = stat.S_IMODE(st.st_mode)
    common = dict(mode=perm, uid=st.st_uid, gid=st.st_gid, ino=st.st_ino, dev=st.st_dev)
    if stat.S_ISLNK(st.st_mode):
        return Observed("symlink", target=os.readlink(path), **common)
    if stat.S_ISDIR(st.st_mode):
        return Observed("dir", **common)
    if stat.S_ISREG(st.st_mode):
        data = None
        if read:
            with open(path, "rb") as f:
                data = f.read()
        return Observed("file", data=data, **common)
    return Observed("other", **common)


def fsync_dir(path: str) -> None:
    """Make a directory's entries (a rename, a new name) durable."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # some file systems (and fakes) cannot open directories; nothing more to do
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _tmp_name(path: str) -> str:
    directory, base = os.path.split(path)
    return os.path.join(directory, f"{TMP_PREFIX}{base[:100]}.{secrets.token_hex(4)}")


_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _fill(fd: int, tmp: str, data: bytes, uid: int, gid: int) -> None:
    """A new temporary's owner and contents, private (0600) until its final mode is set."""
    os.fchmod(fd, 0o600)  # umask-proof: the mode given to open() was masked
    if uid != -1 or gid != -1:
        # By name, not fchown: the name is ours (O_EXCL, O_NOFOLLOW, in a root-only
        # directory), and file-system fakes used in tests emulate chown but not fchown.
        os.chown(tmp, uid, gid, follow_symlinks=False)
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def atomic_write(path: str, data: bytes, mode: int = 0o644, uid: int = -1, gid: int = -1) -> None:
    """Replace ``path`` with ``data`` (mode, owner set before the new name appears)."""
    tmp = _tmp_name(path)
    fd = os.open(tmp, _TMP_FLAGS, 0o600)
    try:
        try:
            _fill(fd, tmp, data, uid, gid)
            os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    except BaseException:
        _unlink_quiet(tmp)
        raise
    _rename_into_place(tmp, path)


def write_many(items: Sequence[Tuple[str, bytes, int, int, int]]) -> None:
    """``atomic_write`` of many files (``(path, data, mode, uid, gid)`` each), durable as a whole
    when it returns, with one fsync per file and one per directory instead of two per file.

    Each file gets the same recipe as ``atomic_write`` (private temporary, chown, write, fsync,
    chmod, rename: a reader or a crash sees the old or the new file, never a mix), but in
    phases over a chunk of files: write every temporary, fsync them all (from a few threads:
    concurrent fsyncs share the file system's journal commits), rename them all; then each
    directory is fsynced once. A failure before a chunk's renames removes its temporaries;
    renames already done are the caller's to undo (the apply journal backs them up).
    """
    dirs: Dict[str, None] = {}  # insertion-ordered set
    for start in range(0, len(items), _CHUNK):
        chunk = items[start:start + _CHUNK]
        _write_chunk(chunk)
        if _labeller is not None:
            _labeller.label([path for path, *_ in chunk])
        dirs.update((os.path.dirname(path), None) for path, *_ in chunk)
    for directory in dirs:
        fsync_dir(directory)


_CHUNK = 256  # temporaries open at once (file descriptors)
_FSYNC_THREADS = 8


def _write_chunk(chunk: Sequence[Tuple[str, bytes, int, int, int]]) -> None:
    temps: List[str] = []
    fds: List[int] = []
    renamed = 0
    try:
        try:
            for path, data, _, uid, gid in chunk:
                tmp = _tmp_name(path)
                fds.append(os.open(tmp, _TMP_FLAGS, 0o600))
                temps.append(tmp)
                _fill(fds[-1], tmp, data, uid, gid)
            _fsync_all(fds)
            for fd, (_, _, mode, _, _) in zip(fds, chunk):
                os.fchmod(fd, mode)
        finally:
            for fd in fds:
                os.close(fd)
        for tmp, (path, *_) in zip(temps, chunk):
            os.rename(tmp, path)
            renamed += 1
    except BaseException:
        for tmp in temps[renamed:]:
            _unlink_quiet(tmp)
        raise


def _fsync_all(fds: List[int]) -> None:
    if len(fds) < 2:
        for fd in fds:
            os.fsync(fd)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(_FSYNC_THREADS, len(fds))) as pool:
        for _ in pool.map(os.fsync, fds):  # re-raises the first failure
            pass


def set_attrs(path: str, mode: Optional[int], uid: int = -1, gid: int = -1) -> None:
    """chown then chmod (chown clears set-id bits); never follows a final link."""
    if uid != -1 or gid != -1:
        os.chown(path, uid, gid, follow_symlinks=False)
    if mode is not None and not os.path.islink(path):
        os.chmod(path, mode)
    _label(path)  # directories made by makedirs or apply, and attribute-only changes


def makedirs(path: str, mode: int = 0o755, uid: int = -1, gid: int = -1, stop: str = "/") -> List[str]:
    """``mkdir -p`` with an exact mode and owner on each directory it creates.

    Returns the directories created, parents first. ``stop`` (the root's top) is never created.
    """
    missing = []
    cur = path
    while cur != stop and not os.path.lexists(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    created = []
    for d in reversed(missing):
        os.mkdir(d, 0o700)
        created.append(d)
        set_attrs(d, mode, uid, gid)
        fsync_dir(os.path.dirname(d))
    return created


def _rename_into_place(tmp: str, path: str) -> None:
    try:
        os.rename(tmp, path)
    except BaseException:
        _unlink_quiet(tmp)
        raise
    _label(path)
    fsync_dir(os.path.dirname(path))


def replace_symlink(path: str, target: str) -> None:
    """Point ``path`` at ``target``: a new link under a temporary name, renamed over the old name."""
    tmp = _tmp_name(path)
    os.symlink(target, tmp)
    _rename_into_place(tmp, path)


def replace_hardlink(path: str, existing: str) -> None:
    """Make ``path`` another name of ``existing`` (atomically replacing whatever ``path`` was)."""
    tmp = _tmp_name(path)
    os.link(existing, tmp, follow_symlinks=False)
    _rename_into_place(tmp, path)


def remove(path: str) -> bool:
    """Remove a file, link or empty directory; True if something was removed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        try:
            os.rmdir(path)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise
    else:
        os.unlink(path)
    fsync_dir(os.path.dirname(path))
    return True


def copy_file(src: str, dst: str) -> None:
    """Durable private copy (backups): content only, mode 0600."""
    with open(src, "rb") as f:
        data = f.read()
    atomic_write(dst, data, 0o600)


def sweep_tmp(directory: str) -> List[str]:
    """Remove temporary files a killed run left in ``directory``."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if name.startswith(TMP_PREFIX):
            p = os.path.join(directory, name)
            _unlink_quiet(p)
            removed.append(p)
    if removed:
        fsync_dir(directory)
    return removed


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
