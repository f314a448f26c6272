"""SELinux labels for the files the agent writes, as Ignition and the MCD leave them.

A file written by rename keeps the label of the temporary file it was created as; on an
enforcing node ``/etc/shadow``, units or ``/etc/kubernetes/...`` with a wrong label break the
services that read them. So every path ``agent.host.files`` writes (files, directories, links)
is relabelled to what the loaded policy assigns its path, as Ignition does after its files stage
(coreos/ignition internal/exec/util/selinux.go ``RelabelFiles``: ``setfiles -vF0 -r <root>
<root>/etc/selinux/<SELINUXTYPE>/contexts/files/file_contexts -f -``, the paths NUL-separated
on stdin, SELINUXTYPE read from ``<root>/etc/selinux/config``).

SELinux is on when ``<root>/sys/fs/selinux/enforce`` exists (selinuxfs is mounted: enforcing or
permissive, labels matter in both). Where it is off nothing changes: no labeller, no command.
On the running system (root ``/``) the libselinux Python bindings are used when importable
(``selinux.restorecon``: one process, the policy loaded once); otherwise, and for any other
``--root``, ``setfiles`` with ``-r`` the root. A failure to label is an error (a wrong label on
an enforcing node is a broken node, found later and far from its cause).
"""

import logging
import os
import shutil
import subprocess
from typing import Any, Callable, Optional, Sequence

from agent.errors import HostError

log = logging.getLogger(__name__)

ENFORCE = "sys/fs/selinux/enforce"
CONFIG = "etc/selinux/config"
_TIMEOUT = 120.0


class LabelError(HostError):
    """Files could not be given their SELinux label."""


def enabled(root_top: str) -> bool:
    return os.path.exists(os.path.join(root_top, ENFORCE))


def policy_type(root_top: str) -> str:
    """SELINUXTYPE from the root's /etc/selinux/config (as Ignition's getSelinuxPolicy)."""
    path = os.path.join(root_top, CONFIG)
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("SELINUXTYPE="):
                    value = line[len("SELINUXTYPE="):].strip().strip('"')
                    if value:
                        return value
    except OSError as exc:
        raise LabelError(f"SELinux is enabled but {path} cannot be read ({exc.strerror or exc}); "
                         "the agent cannot tell which policy labels its files") from exc
    raise LabelError(f"SELinux is enabled but {path} names no SELINUXTYPE")


def _bindings() -> Optional[Any]:
    try:
        import selinux  # type: ignore[import-not-found]  # python3-libselinux on RHEL
    except ImportError:
        return None
    return selinux if hasattr(selinux, "restorecon") else None


class Labeller:
    """Gives each written host path the label policy assigns it (see the module doc)."""

    def __init__(self, root_top: str, *, run: Callable[..., Any] = subprocess.run,
                 bindings: Optional[Any] = None, setfiles: Optional[str] = None):
        self.root_top = os.path.abspath(root_top)
        self._run = run
        self._bindings = bindings if bindings is not None else (_bindings() if self.root_top == "/" else None)
        self._setfiles = setfiles
        self._contexts = ""

    def _file_contexts(self) -> str:
        if not self._contexts:
            policy = policy_type(self.root_top)
            self._contexts = os.path.join(self.root_top, "etc/selinux", policy, "contexts/files/file_contexts")
        return self._contexts

    def label(self, paths: Sequence[str]) -> None:
        if not paths:
            return
        if self._bindings is not None:
            for path in paths:
                try:
                    self._bindings.restorecon(path, force=True)
                except OSError as exc:
                    raise LabelError(f"cannot set the SELinux label of {path}: {exc}") from exc
            return
        setfiles = self._setfiles or shutil.which("setfiles") or "/usr/sbin/setfiles"
        argv = [setfiles, "-F0", "-r", self.root_top, self._file_contexts(), "-f", "-"]
        stdin = b"".join(os.fsencode(p) + b"\0" for p in paths)
        try:
            proc = self._run(argv, input=stdin, capture_output=True, timeout=_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LabelError(f"cannot run {setfiles} to set SELinux labels ({exc}); "
                             "install policycoreutils") from exc
        if proc.returncode != 0:
            detail = (proc.stderr or b"").decode("utf-8", "replace").strip()[-500:]
            raise LabelError(f"setfiles failed (exit {proc.returncode}) labelling {len(paths)} path(s) "
                             f"such as {paths[0]}: {detail}")
        log.debug("SELinux labels set on %d path(s)", len(paths))


def labeller_for(root_top: str, **kwargs: Any) -> Optional[Labeller]:
    """A Labeller when SELinux is on for this root, else None (nothing to do)."""
    return Labeller(root_top, **kwargs) if enabled(root_top) else None
