"""Paths inside a root directory, so ``--root DIR`` works everywhere.

A config path such as ``/etc/chrony.conf`` names a file inside the node's tree. On a node the
root is ``/``; in tests and the demo it is a scratch directory. Symbolic links already on disk
are followed as a chroot would (an absolute target is relative to the root); any path that
would leave the root, through ``..`` or through a link, is refused.
"""

import contextlib
import os
import posixpath
from typing import Dict, Iterator, Optional, Tuple

from agent.errors import HostError

_MAX_LINKS = 40  # as the kernel's MAXSYMLINKS


class PathEscapeError(HostError):
    """A path would resolve outside the root."""


class Root:
    def __init__(self, top: str = "/"):
        self.top = os.path.abspath(top)
        self._resolved: Optional[Dict[Tuple[str, bool], str]] = None  # see unchanged()

    @contextlib.contextmanager
    def unchanged(self) -> Iterator["Root"]:
        """While this process changes nothing in the tree, each path is resolved once: the apply
        resolves every path three times before its first change (check, observe, journal), one
        lstat per component each time. Only for such read-only stretches."""
        self._resolved = {}
        try:
            yield self
        finally:
            self._resolved = None

    @property
    def is_live(self) -> bool:
        """True when this root is the running system's own ``/`` (live D-Bus actions make sense)."""
        return self.top == "/"

    def __repr__(self) -> str:
        return f"Root({self.top!r})"

    def path(self, config_path: str, follow_last: bool = True) -> str:
        """The host path of ``config_path`` (absolute, as in a config), links resolved inside the root.

        ``follow_last=False`` leaves the final component unresolved (to replace or inspect a link
        itself). Raises PathEscapeError when the path would leave the root.
        """
        memo = self._resolved
        if memo is None:
            return self._resolve(config_path, follow_last)
        key = (config_path, follow_last)
        found = memo.get(key)
        if found is None:
            found = memo[key] = self._resolve(config_path, follow_last)
        return found

    def _resolve(self, config_path: str, follow_last: bool) -> str:
        if not config_path.startswith("/"):
            raise PathEscapeError(f"{config_path!r} is not an absolute path")
        parts = [p for p in config_path.split("/") if p and p != "."]
        resolved = []  # components below the root, all existing-or-not directories
        links = 0
        top = "" if self.top == "/" else self.top  # joined with "/": os.path.join's result, cheaper
        while parts:
            name = parts.pop(0)
            if name == "..":
                if not resolved:
                    raise PathEscapeError(f"{config_path!r} leaves the root {self.top} through '..'")
                resolved.pop()
                continue
            candidate = "/".join([top, *resolved, name])
            is_last = not parts
            if os.path.islink(candidate) and (follow_last or not is_last):
                links += 1
                if links > _MAX_LINKS:
                    raise PathEscapeError(f"{config_path!r}: too many levels of symbolic links")
                target = os.readlink(candidate)
                if target.startswith("/"):
                    # An absolute link inside a root means the root's own tree (chroot semantics),
                    # but a link pointing at the host's absolute root path is an escape attempt.
                    resolved = []
                parts = [p for p in target.split("/") if p and p != "."] + parts
                continue
            resolved.append(name)
        return "/".join([top, *resolved]) if resolved else self.top

    def config_path(self, host_path: str) -> str:
        """The inverse of ``path``: the absolute path inside the root of a host path under it."""
        rel = os.path.relpath(host_path, self.top)
        if rel == ".":
            return "/"
        if rel.startswith(".."):
            raise PathEscapeError(f"{host_path} is not under the root {self.top}")
        return "/" + rel

    def exists(self, config_path: str) -> bool:
        return os.path.lexists(self.path(config_path, follow_last=False))

    def read_bytes(self, config_path: str) -> bytes:
        with open(self.path(config_path), "rb") as f:
            return f.read()

    def read_text(self, config_path: str) -> str:
        return self.read_bytes(config_path).decode("utf-8")


def normalize(config_path: str) -> str:
    """``posixpath.normpath`` that keeps a single leading slash."""
    out = posixpath.normpath(config_path)
    return "/" + out.lstrip("/")
