"""Users and groups inside a root: lookup, and creation of missing ones (pure: texts in, texts out;
agent.host.accounts reads them from a root).

Choice (documented for issue 3): users and groups a config names that are missing from the
root are **created**, as Ignition does at first boot, by rewriting ``/etc/passwd``,
``/etc/group``, ``/etc/shadow`` and ``/etc/gshadow``. The new texts are computed here by pure
functions and written by the apply engine as ordinary journaled file steps, so they are atomic
(temp + rename, passwd/group 0644, shadow/gshadow 0000, owner root) and roll back with the rest
of a failed apply. No ``useradd`` is run: it does not work on an offline ``--root`` tree and
its locking gives nothing more here (the agent is the only writer while it runs).

- A new user's uid is the config's ``uid`` or the next free id >= 1000 (below 60000); its
  primary group is ``primaryGroup`` when given, else a new group of the same name (gid = uid
  when free). ``groups`` must exist or be created by the same config.
- ``passwordHash`` goes to shadow; without it the account is locked (``!``) and only ssh keys
  log in. The home directory (``homeDir`` or ``/home/<name>``) is created 0700 and owned by
  the user unless ``noCreateHome``; ``/etc/skel`` is not copied (CoreOS images keep it empty).
- Users that already exist are not modified (no usermod): only their ssh keys are managed.
"""

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

from agent.errors import ApplyError

FIRST_UID = 1000
LAST_UID = 59999


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    gecos: str = ""
    home: str = ""
    shell: str = "/bin/bash"


@dataclass(frozen=True)
class Group:
    name: str
    gid: int
    members: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Accounts:
    """The four account databases of a root, as text, with parsed views."""

    passwd: str = ""
    group: str = ""
    shadow: str = ""
    gshadow: str = ""

    def users(self) -> List[User]:
        out = []
        for line in self.passwd.splitlines():
            f = line.split(":")
            if len(f) >= 7 and f[2].isdigit() and f[3].isdigit():
                out.append(User(f[0], int(f[2]), int(f[3]), f[4], f[5], f[6]))
        return out

    def groups(self) -> List[Group]:
        out = []
        for line in self.group.splitlines():
            f = line.split(":")
            if len(f) >= 4 and f[2].isdigit():
                out.append(Group(f[0], int(f[2]), tuple(m for m in f[3].split(",") if m)))
        return out

    def user(self, name: str) -> Optional[User]:
        return next((u for u in self.users() if u.name == name), None)

    def group_named(self, name: str) -> Optional[Group]:
        return next((g for g in self.groups() if g.name == name), None)

    def uid_of(self, name: str) -> Optional[int]:
        u = self.user(name)
        return u.uid if u else None

    def gid_of(self, name: str) -> Optional[int]:
        g = self.group_named(name)
        return g.gid if g else None


def _append_line(text: str, line: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return text + line + "\n"


def _next_free(used, start: int = FIRST_UID) -> int:
    n = start
    while n in used:
        n += 1
    if n > LAST_UID:
        raise ApplyError(f"no free id left between {FIRST_UID} and {LAST_UID}")
    return n


def add_group(acc: Accounts, name: str, gid: Optional[int] = None, where: str = "") -> Accounts:
    """``acc`` with a new group (no-op when it exists)."""
    if acc.group_named(name):
        return acc
    used = {g.gid for g in acc.groups()}
    if gid is None:
        gid = _next_free(used)
    elif gid in used:
        raise ApplyError(f"{where or 'group ' + name}: gid {gid} is already used by another group")
    return replace(acc, group=_append_line(acc.group, f"{name}:x:{gid}:"),
                   gshadow=_append_line(acc.gshadow, f"{name}:!::"))


def add_user(acc: Accounts, spec: Dict, days_since_epoch: int, where: str = "") -> Tuple[Accounts, User]:
    """``acc`` with the Ignition ``passwd.users`` entry ``spec`` added; returns the new user too."""
    name = spec["name"]
    where = where or f"user {name}"
    used_uids = {u.uid for u in acc.users()}
    uid = spec.get("uid")
    if uid is None:
        uid = _next_free(used_uids)
    elif uid in used_uids:
        raise ApplyError(f"{where}: uid {uid} is already used by another user")
    primary = spec.get("primaryGroup")
    if primary:
        gid = acc.gid_of(primary)
        if gid is None:
            raise ApplyError(f"{where}.primaryGroup: group {primary!r} does not exist; add it to passwd.groups")
    else:
        used_gids = {g.gid for g in acc.groups()}
        acc = add_group(acc, name, uid if uid not in used_gids else None, where)
        gid = acc.gid_of(name)
    home = spec.get("homeDir") or f"/home/{name}"
    shell = spec.get("shell") or "/bin/bash"
    gecos = (spec.get("gecos") or "").replace(":", " ")
    user = User(name, uid, gid, gecos, home, shell)
    acc = replace(acc, passwd=_append_line(acc.passwd, f"{name}:x:{uid}:{gid}:{gecos}:{home}:{shell}"),
                  shadow=_append_line(acc.shadow, f"{name}:{spec.get('passwordHash') or '!'}:{days_since_epoch}:0:99999:7:::"))
    for gname in spec.get("groups") or []:
        acc = add_member(acc, gname, name, where)
    return acc, user


def add_member(acc: Accounts, group: str, user: str, where: str = "") -> Accounts:
    if acc.group_named(group) is None:
        raise ApplyError(f"{where}.groups: group {group!r} does not exist; add it to passwd.groups")
    lines = []
    for line in acc.group.splitlines():
        f = line.split(":")
        if len(f) >= 4 and f[0] == group:
            members = [m for m in f[3].split(",") if m]
            if user not in members:
                members.append(user)
            f[3] = ",".join(members)
            line = ":".join(f)
        lines.append(line)
    return replace(acc, group="\n".join(lines) + "\n")


def home_of(acc: Accounts, name: str) -> str:
    u = acc.user(name)
    return u.home if u and u.home else f"/home/{name}"


