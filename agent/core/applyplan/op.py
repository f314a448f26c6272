"""One desired operation of the apply planner (pure data): a file, a unit's enablement, an OS change."""

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Optional, Tuple

from agent.core.applyplan.accounts import Accounts

DEFAULT_STATE_DIR = "/var/lib/node-agent"


@dataclass(frozen=True)
class Op:
    kind: str  # file dir symlink hardlink remove enable disable mask unmask kargs rebase kernel-type extensions
    path: str = ""  # config path (unit name for unit ops)
    data: Optional[bytes] = None  # file: full contents (None: keep existing contents)
    append: Optional[bytes] = None  # file: fragments to add once
    mode: Optional[int] = None
    uid: Optional[int] = None
    gid: Optional[int] = None
    target: str = ""  # links
    overwrite: bool = False
    links: Tuple[Tuple[str, str], ...] = ()  # enable/disable: install links (path, target)
    args: Tuple[Tuple[str, ...], ...] = ()  # kargs: (append, delete); kernel-type: ((old,), (new,)); extensions: (added, removed)
    where: str = ""  # JSON path of the config entry, for errors
    internal: bool = False  # the agent's own state (not counted as a config change)
    unit_file: bool = False  # a unit file or dropin (a change needs daemon-reload)
    owned: bool = False  # written by a previous apply (managed record or previous config)

    def describe(self) -> str:
        if self.kind in ("enable", "disable", "mask", "unmask"):
            return f"{self.kind} {self.path}"
        if self.kind == "kargs":
            app, dele = self.args
            return "kernel arguments" + "".join(f" +{a}" for a in app) + "".join(f" -{d}" for d in dele)
        if self.kind == "rebase":
            return f"rebase to {self.target}"
        if self.kind == "kernel-type":
            return f"kernel type {self.args[0][0]} -> {self.args[1][0]}"
        if self.kind == "extensions":
            added, removed = self.args
            return "extensions" + "".join(f" +{a}" for a in added) + "".join(f" -{r}" for r in removed)
        return f"{self.kind} {self.path}"


@dataclass(frozen=True)
class Observed:
    """What is at a path now (``lstat``, not following a final link)."""

    kind: str  # "absent", "file", "dir", "symlink", "other"
    mode: int = 0  # permission bits only (07777)
    uid: int = 0
    gid: int = 0
    data: Optional[bytes] = None  # regular files only, when asked for
    target: str = ""  # symlinks only
    ino: int = 0
    dev: int = 0


@dataclass(frozen=True)
class Facts:
    """What the planner needs to know about the node, read beforehand by the shell."""

    accounts: Accounts = field(default_factory=Accounts)
    live: bool = False
    vendor_units: Dict[str, Tuple[str, str]] = field(default_factory=dict)  # name -> (path, text)
    unit_links: Dict[str, Tuple[str, ...]] = field(default_factory=dict)  # name -> existing wants links
    managed: FrozenSet[str] = frozenset()
    booted: Optional[Tuple[str, Tuple[str, ...]]] = None  # (image, kargs) on a live host
    days_since_epoch: int = 0
    state_dir: str = DEFAULT_STATE_DIR
