"""Planning the effects of a config on a node (pure: data in, operations out).

Two steps, both pure functions so ``plan``, tests and the apply engine share them:

``desired_operations(target, previous, contents, facts)``
    What the node must look like: one ``Op`` per path or action, in a safe order (accounts,
    day-2 removals, directories parents first, files, links after their targets, units after
    their files, ssh keys, OS changes last).

``diff_operations(ops, observed, facts)``
    Compares each op with what is on disk (``observed``: config path -> ``Observed``) and
    returns the concrete ``Step`` list that turns the disk into the target, plus the ops
    already satisfied. An op already satisfied gives no step: applying twice changes nothing.

Overwrite rule (Ignition spec 3, adapted to day 2): ``overwrite`` defaults to false. A file,
link or directory the config asks for, where something different already exists, is an error
when overwrite is false **unless the path is ours**: listed in the managed-paths record
(``<state>/managed.json``, written by every apply) or in the previous config. Our own files are
replaced on re-apply. Identical contents are never an error. A file with no ``contents.source``
keeps existing contents (only mode and owner are set), as Ignition does. ``append`` fragments
are added once: a file that already ends with them is left alone.
"""

import json
import posixpath
from dataclasses import dataclass, field, replace
from typing import Dict, FrozenSet, List, Optional, Tuple

from agent.errors import ApplyError
from agent.host.accounts import Accounts, add_group, add_user, home_of
from agent.host.units import SYSTEM_DIR, also_units, install_links
from agent.nodeconfig import NodeConfig
from agent.op import Op
from agent.osops import kernel_args, os_commands, os_operations  # noqa: F401 (re-exported: apply, tests)
from agent.secretfiles import file_mode

SSH_KEYS_FRAGMENT = "ignition"  # same fragment Ignition and the MCO write: day 2 replaces it
DEFAULT_STATE_DIR = "/var/lib/node-agent"
MANAGED_FILE = "managed.json"
PENDING_OS_FILE = "pending-os.json"


@dataclass(frozen=True)
class Step:
    """One concrete change. ``path`` is a config path; ``live``/``os`` steps act on services."""

    kind: str  # write attrs mkdir symlink hardlink remove live os
    path: str = ""
    data: Optional[bytes] = None
    mode: Optional[int] = None
    uid: int = -1
    gid: int = -1
    target: str = ""
    action: str = ""  # live: daemon-reload enable disable mask unmask; os: kargs rebase
    units: Tuple[str, ...] = ()
    args: Tuple[Tuple[str, ...], ...] = ()
    op: Optional[Op] = None

    @property
    def touches_path(self) -> bool:
        return self.kind not in ("live", "os")


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


def _owner_id(entry: dict, key: str, acc: Accounts, where: str) -> Optional[int]:
    ref = entry.get(key) or {}
    if ref.get("id") is not None:
        return int(ref["id"])
    name = ref.get("name")
    if not name:
        return None
    found = acc.uid_of(name) if key == "user" else acc.gid_of(name)
    if found is None:
        db = "/etc/passwd" if key == "user" else "/etc/group"
        raise ApplyError(f"{where}.{key}.name: {key} {name!r} does not exist in the root's {db}; "
                         f"add it to passwd.{key}s or use an id")
    return found


def _parents(path: str) -> List[str]:
    out = []
    cur = posixpath.dirname(path)
    while cur not in ("/", ""):
        out.append(cur)
        cur = posixpath.dirname(cur)
    return list(reversed(out))


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def _config_paths(cfg: NodeConfig, acc: Accounts) -> List[str]:
    """Paths a config manages (files, links, unit files, dropins, ssh key fragments)."""
    paths = [f["path"] for f in cfg.files] + [ln["path"] for ln in cfg.links]
    for u in cfg.units:
        if u.get("contents") is not None and not u.get("mask"):
            paths.append(f"{SYSTEM_DIR}/{u['name']}")
        if u.get("mask"):
            paths.append(f"{SYSTEM_DIR}/{u['name']}")
        for d in u.get("dropins") or []:
            if d.get("contents") is not None:
                paths.append(f"{SYSTEM_DIR}/{u['name']}.d/{d['name']}")
    for usr in cfg.users:
        if usr.get("sshAuthorizedKeys"):
            paths.append(f"{usr.get('homeDir') or home_of(acc, usr['name'])}/.ssh/authorized_keys.d/{SSH_KEYS_FRAGMENT}")
    return paths


def desired_operations(target: NodeConfig, previous: Optional[NodeConfig], contents: Dict[str, bytes],
                       facts: Facts) -> List[Op]:
    """The ordered operations that make a node match ``target`` (see module docstring).

    ``contents`` maps JSON paths (``$.storage.files.3.contents``, ``$.storage.files.3.append.0``)
    to the already fetched and decompressed bytes.
    """
    ops: List[Op] = []
    acc = facts.accounts

    # Accounts first: file owners may name users and groups this config creates.
    acc_before = acc
    for i, g in enumerate(target.ignition.get("passwd", {}).get("groups") or []):
        acc = add_group(acc, g["name"], g.get("gid"), f"$.passwd.groups.{i}")
    new_users = []
    for i, u in enumerate(target.users):
        if acc.user(u["name"]) is None:
            acc, user = add_user(acc, u, facts.days_since_epoch, f"$.passwd.users.{i}")
            if not u.get("noCreateHome"):
                new_users.append((user, i))
    if acc != acc_before:
        for name, mode in (("passwd", 0o644), ("group", 0o644), ("shadow", 0), ("gshadow", 0)):
            text = getattr(acc, name)
            if text != getattr(acc_before, name):
                ops.append(Op("file", f"/etc/{name}", data=text.encode(), mode=mode, uid=0, gid=0,
                              overwrite=True, where="$.passwd"))

    # Day 2: what the previous config (or the managed record) had and the target doesn't.
    target_paths = set(_config_paths(target, acc))
    old_paths = set(facts.managed)
    if previous is not None:
        old_paths |= set(_config_paths(previous, acc))
    state_paths = {f"{facts.state_dir}/{MANAGED_FILE}", f"{facts.state_dir}/{PENDING_OS_FILE}"}
    removals = sorted(old_paths - target_paths - state_paths, key=lambda p: (-_depth(p), p))
    target_units = {u["name"] for u in target.units}
    if previous is not None:
        for u in previous.units:
            if u["name"] in target_units:
                continue
            if u.get("enabled"):
                ops.append(_unit_enable_op(u, False, facts))
            if u.get("mask"):
                ops.append(Op("unmask", u["name"], where="previous config"))
    ops.extend(Op("remove", p, where="previous config") for p in removals)

    # Directories, parents first.
    for i, d in sorted(enumerate(target.directories), key=lambda e: (_depth(e[1]["path"]), e[0])):
        w = f"$.storage.directories.{i}"
        ops.append(Op("dir", d["path"], mode=d.get("mode") if d.get("mode") is not None else 0o755,
                      uid=_owner_id(d, "user", acc, w), gid=_owner_id(d, "group", acc, w),
                      overwrite=bool(d.get("overwrite")), where=w))
    for user, i in new_users:
        ops.append(Op("dir", user.home, mode=0o700, uid=user.uid, gid=user.gid, where=f"$.passwd.users.{i}"))

    # Files.
    for i, f in enumerate(target.files):
        w = f"$.storage.files.{i}"
        data = contents.get(f"{w}.contents")
        fragments = [contents[f"{w}.append.{k}"] for k in range(len(f.get("append") or []))
                     if f"{w}.append.{k}" in contents]
        ops.append(Op("file", f["path"], data=data, append=b"".join(fragments) if fragments else None,
                      mode=file_mode(f["path"], f.get("mode")),  # secrets 0600 whatever the config says
                      uid=_owner_id(f, "user", acc, w), gid=_owner_id(f, "group", acc, w),
                      overwrite=bool(f.get("overwrite")), where=w))

    # Links: symbolic links before hard links (a hard link may name a file reached via a link),
    # and a link whose target is another link of the config after it.
    link_ops = []
    for i, ln in enumerate(target.links):
        w = f"$.storage.links.{i}"
        link_ops.append(Op("hardlink" if ln.get("hard") else "symlink", ln["path"], target=ln["target"],
                           uid=_owner_id(ln, "user", acc, w), gid=_owner_id(ln, "group", acc, w),
                           overwrite=bool(ln.get("overwrite")), where=w))
    ops.extend(_order_links(link_ops))

    # Units: files and dropins, then masks, then enablement.
    for i, u in enumerate(target.units):
        w = f"$.systemd.units.{i}"
        name = u["name"]
        if u.get("mask"):
            ops.append(Op("mask", name, where=w))
        elif u.get("contents") is not None:
            ops.append(Op("file", f"{SYSTEM_DIR}/{name}", data=u["contents"].encode(), mode=0o644, uid=0, gid=0,
                          overwrite=True, where=w, unit_file=True))
        elif u.get("mask") is False or (previous is not None and _was_masked(previous, name)):
            ops.append(Op("unmask", name, where=w))
        for k, d in enumerate(u.get("dropins") or []):
            if d.get("contents") is not None:
                ops.append(Op("file", f"{SYSTEM_DIR}/{name}.d/{d['name']}", data=d["contents"].encode(),
                              mode=0o644, uid=0, gid=0, overwrite=True, where=f"{w}.dropins.{k}", unit_file=True))
    for u in target.units:
        if u.get("enabled") is not None and not u.get("mask"):
            ops.append(_unit_enable_op(u, bool(u["enabled"]), facts))

    # SSH keys: the same fragment Ignition writes, so day 2 replaces (not adds to) it.
    for i, u in enumerate(target.users):
        keys = u.get("sshAuthorizedKeys")
        if not keys:
            continue
        user = acc.user(u["name"])
        uid, gid = (user.uid, user.gid) if user else (None, None)
        home = u.get("homeDir") or home_of(acc, u["name"])
        w = f"$.passwd.users.{i}.sshAuthorizedKeys"
        for d in (f"{home}/.ssh", f"{home}/.ssh/authorized_keys.d"):
            ops.append(Op("dir", d, mode=0o700, uid=uid, gid=gid, overwrite=False, where=w))
        text = "".join(k.strip() + "\n" for k in keys)
        ops.append(Op("file", f"{home}/.ssh/authorized_keys.d/{SSH_KEYS_FRAGMENT}", data=text.encode(),
                      mode=0o600, uid=uid, gid=gid, overwrite=True, where=w))

    # OS level: live hosts stage with rpm-ostree; offline roots get a pending record.
    os_ops = os_operations(target, previous, facts.booted)
    append, delete = next((o.args for o in os_ops if o.kind == "kargs"), ((), ()))
    if facts.live:
        ops.extend(os_ops)

    # The agent's own records, inside the same transaction.
    managed = sorted(target_paths)
    ops.append(Op("file", f"{facts.state_dir}/{MANAGED_FILE}", data=(json.dumps(managed, indent=1) + "\n").encode(),
                  mode=0o644, uid=0, gid=0, overwrite=True, internal=True))
    if not facts.live:
        pending = {"kernelArguments": {"append": list(append), "delete": list(delete)},
                   "osImageURL": next((o.target for o in os_ops if o.kind == "rebase"), ""),
                   "config": target.name}
        for o in os_ops:  # what a live host would run, recorded for the reboot to come
            if o.kind == "kernel-type":
                pending["kernelType"] = {"from": o.args[0][0], "to": o.args[1][0]}
            elif o.kind == "extensions":
                pending["extensions"] = {"install": list(o.args[0]), "uninstall": list(o.args[1])}
        pending["commands"] = [["rpm-ostree", *args] for o in os_ops for args in os_commands(o)]
        if os_ops:
            ops.append(Op("file", f"{facts.state_dir}/{PENDING_OS_FILE}", data=(json.dumps(pending, indent=1) + "\n").encode(),
                          mode=0o644, uid=0, gid=0, overwrite=True, internal=True))
    return [replace(o, owned=True) if o.path in old_paths else o for o in ops]


def _was_masked(cfg: NodeConfig, name: str) -> bool:
    return any(u["name"] == name and u.get("mask") for u in cfg.units)


def _unit_enable_op(u: dict, enable: bool, facts: Facts) -> Op:
    name = u["name"]
    links: List[Tuple[str, str]] = []
    seen = set()

    def add(unit: str, text: Optional[str], path: str) -> None:
        if unit in seen or text is None:
            return
        seen.add(unit)
        links.extend(install_links(unit, text, path))
        for other in also_units(text):
            vendor = facts.vendor_units.get(other)
            if vendor:
                add(other, vendor[1], vendor[0])

    if u.get("contents") is not None:
        add(name, u["contents"], f"{SYSTEM_DIR}/{name}")
    elif name in facts.vendor_units:
        add(name, facts.vendor_units[name][1], facts.vendor_units[name][0])
    if not enable:
        links.extend((p, "") for p in facts.unit_links.get(name, ()) if p not in {lp for lp, _ in links})
    return Op("enable" if enable else "disable", name, links=tuple(links))


def _order_links(link_ops: List[Op]) -> List[Op]:
    """Symlinks (targets first when a target is another link), then hard links."""
    sym = [o for o in link_ops if o.kind == "symlink"]
    hard = [o for o in link_ops if o.kind == "hardlink"]
    by_path = {o.path: o for o in sym}
    out: List[Op] = []
    placed = set()

    def place(o: Op, depth: int = 0) -> None:
        if o.path in placed or depth > len(sym):
            return
        tgt = o.target if o.target.startswith("/") else posixpath.normpath(posixpath.join(posixpath.dirname(o.path), o.target))
        if tgt in by_path and tgt != o.path:
            place(by_path[tgt], depth + 1)
        placed.add(o.path)
        out.append(o)

    for o in sorted(sym, key=lambda o: _depth(o.path)):
        place(o)
    return out + hard


# ---------------------------------------------------------------------------------------------
# diff: desired operations vs what is on disk


def observe_paths(ops: List[Op]) -> List[str]:
    """Every config path whose current state ``diff_operations`` needs."""
    paths = set()
    for o in ops:
        if o.kind in ("file", "dir", "symlink", "hardlink", "remove"):
            paths.add(o.path)
            paths.update(_parents(o.path))
        if o.kind == "hardlink":
            paths.add(o.target)
        if o.kind in ("mask", "unmask"):
            paths.add(f"{SYSTEM_DIR}/{o.path}")
            paths.update(_parents(f"{SYSTEM_DIR}/{o.path}"))
        for p, _ in o.links:
            paths.add(p)
            paths.update(_parents(p))
    return sorted(paths)


def diff_operations(ops: List[Op], observed: Dict, facts: Facts) -> Tuple[List[Step], List[Op], List[Op]]:
    """(steps, changed ops, unchanged ops). ``observed`` maps config path -> files.Observed.

    Raises ApplyError (nothing changed yet) on an overwrite conflict.
    """
    from agent.host.files import Observed  # a dataclass only; keeps this module free of effects

    state: Dict[str, object] = dict(observed)
    absent = Observed("absent")

    def now(p: str):
        return state.get(p, absent)

    steps: List[Step] = []
    changed: List[Op] = []
    unchanged: List[Op] = []
    made_dirs = set()
    units_changed = False

    def ensure_parents(path: str, op: Op) -> None:
        for parent in _parents(path):
            cur = now(parent)
            if cur.kind == "absent" and parent not in made_dirs:
                steps.append(Step("mkdir", parent, mode=0o755, uid=0, gid=0, op=op))
                made_dirs.add(parent)
                state[parent] = Observed("dir", mode=0o755)
            elif cur.kind not in ("absent", "dir", "symlink"):
                raise ApplyError(f"{op.where or op.path}: cannot create {path}: {parent} exists and is not a directory")

    def ours(op: Op) -> bool:
        return op.overwrite or op.owned or op.path in facts.managed

    for op in ops:
        before = len(steps)
        cur = now(op.path) if op.path.startswith("/") else absent
        uid = -1 if op.uid is None else op.uid
        gid = -1 if op.gid is None else op.gid
        if op.kind == "file":
            if cur.kind == "dir":
                raise ApplyError(f"{op.where}: {op.path} exists and is a directory; remove it or pick another path")
            existing = cur.data if cur.kind == "file" else None
            if op.data is not None:
                want = op.data
            elif existing is not None:
                want = existing
            else:
                want = b""
            if op.append is not None and not want.endswith(op.append):
                want = want + op.append
            mode = op.mode if op.mode is not None else (cur.mode if cur.kind == "file" and op.data is None else 0o644)
            if cur.kind == "file" and existing == want:
                if (cur.mode != mode) or (uid != -1 and cur.uid != uid) or (gid != -1 and cur.gid != gid):
                    steps.append(Step("attrs", op.path, mode=mode, uid=uid, gid=gid, op=op))
            else:
                if cur.kind != "absent" and op.data is not None and not ours(op):
                    raise ApplyError(f"{op.where}: {op.path} already exists with other contents and overwrite is "
                                     "false; set overwrite: true to replace it")
                ensure_parents(op.path, op)
                steps.append(Step("write", op.path, data=want, mode=mode,
                                  uid=0 if uid == -1 and cur.kind != "file" else (cur.uid if uid == -1 else uid),
                                  gid=0 if gid == -1 and cur.kind != "file" else (cur.gid if gid == -1 else gid), op=op))
                state[op.path] = Observed("file", mode=mode, data=want)
                if op.unit_file:
                    units_changed = True
        elif op.kind == "dir":
            if cur.kind == "dir":
                if cur.mode != op.mode or (uid != -1 and cur.uid != uid) or (gid != -1 and cur.gid != gid):
                    steps.append(Step("attrs", op.path, mode=op.mode, uid=uid, gid=gid, op=op))
            elif cur.kind == "absent" or (cur.kind == "symlink" and not op.overwrite):
                if cur.kind == "symlink":
                    pass  # a link to a directory (e.g. /home -> var/home) already serves as one
                else:
                    ensure_parents(op.path, op)
                    steps.append(Step("mkdir", op.path, mode=op.mode, uid=max(uid, 0), gid=max(gid, 0), op=op))
                    made_dirs.add(op.path)
                    state[op.path] = Observed("dir", mode=op.mode or 0)
            else:
                if not op.overwrite:
                    raise ApplyError(f"{op.where}: {op.path} exists and is not a directory; set overwrite: true to replace it")
                steps.append(Step("remove", op.path, op=op))
                steps.append(Step("mkdir", op.path, mode=op.mode, uid=max(uid, 0), gid=max(gid, 0), op=op))
                state[op.path] = Observed("dir", mode=op.mode or 0)
        elif op.kind == "symlink":
            if cur.kind == "symlink" and cur.target == op.target:
                if (uid != -1 and cur.uid != uid) or (gid != -1 and cur.gid != gid):
                    steps.append(Step("attrs", op.path, mode=None, uid=uid, gid=gid, op=op))
            else:
                if cur.kind == "dir":
                    raise ApplyError(f"{op.where}: {op.path} exists and is a directory; cannot replace it with a link")
                if cur.kind != "absent" and not ours(op):
                    raise ApplyError(f"{op.where}: {op.path} already exists and overwrite is false; "
                                     "set overwrite: true to replace it")
                ensure_parents(op.path, op)
                steps.append(Step("symlink", op.path, target=op.target, op=op))
                if uid != -1 or gid != -1:
                    steps.append(Step("attrs", op.path, mode=None, uid=uid, gid=gid, op=op))
                state[op.path] = Observed("symlink", target=op.target)
        elif op.kind == "hardlink":
            tgt = now(op.target)
            if tgt.kind in ("absent", "dir"):
                raise ApplyError(f"{op.where}.target: hard link target {op.target} "
                                 f"{'does not exist' if tgt.kind == 'absent' else 'is a directory'}")
            same = cur.kind != "absent" and cur.ino and cur.ino == tgt.ino and cur.dev == tgt.dev
            if not same:
                if cur.kind == "dir":
                    raise ApplyError(f"{op.where}: {op.path} exists and is a directory")
                if cur.kind != "absent" and not ours(op):
                    raise ApplyError(f"{op.where}: {op.path} already exists and overwrite is false; "
                                     "set overwrite: true to replace it")
                ensure_parents(op.path, op)
                steps.append(Step("hardlink", op.path, target=op.target, op=op))
        elif op.kind == "remove":
            if cur.kind != "absent":
                steps.append(Step("remove", op.path, op=op))
                state[op.path] = absent
                if op.path.startswith(SYSTEM_DIR + "/"):
                    units_changed = True
        elif op.kind in ("mask", "unmask"):
            p = f"{SYSTEM_DIR}/{op.path}"
            masked = cur_is_mask(now(p))
            if op.kind == "mask" and not masked:
                if now(p).kind == "dir":
                    raise ApplyError(f"{op.where}: {p} is a directory; cannot mask {op.path}")
                if facts.live:
                    steps.append(Step("live", p, action="mask", units=(op.path,), op=op))
                else:
                    ensure_parents(p, op)
                    steps.append(Step("symlink", p, target="/dev/null", op=op))
                state[p] = Observed("symlink", target="/dev/null")
                units_changed = True
            elif op.kind == "unmask" and masked:
                if facts.live:
                    steps.append(Step("live", p, action="unmask", units=(op.path,), op=op))
                else:
                    steps.append(Step("remove", p, op=op))
                state[p] = absent
                units_changed = True
        elif op.kind in ("enable", "disable"):
            if op.kind == "enable":
                missing = [(p, t) for p, t in op.links if not (now(p).kind == "symlink" and now(p).target == t)]
                if missing:
                    if facts.live:
                        steps.append(Step("live", op.path, action="enable", units=(op.path,), op=op))
                    else:
                        for p, t in missing:
                            ensure_parents(p, op)
                            steps.append(Step("symlink", p, target=t, op=op))
                            state[p] = Observed("symlink", target=t)
            else:
                present = [p for p, _ in op.links if now(p).kind == "symlink"]
                if present:
                    if facts.live:
                        steps.append(Step("live", op.path, action="disable", units=(op.path,), op=op))
                    else:
                        for p in present:
                            steps.append(Step("remove", p, op=op))
                            state[p] = absent
        elif op.kind == "kargs":
            steps.append(Step("os", action="kargs", args=op.args, op=op))
        elif op.kind == "rebase":
            steps.append(Step("os", action="rebase", target=op.target, op=op))
        elif op.kind in ("kernel-type", "extensions"):
            steps.append(Step("os", action=op.kind, args=op.args, op=op))
        else:  # pragma: no cover - planner and diff are written together
            raise ValueError(f"unknown operation {op.kind}")
        if not op.internal:
            (changed if len(steps) > before else unchanged).append(op)

    # Live hosts: one daemon-reload after unit files change, before enablement so systemd sees them.
    if facts.live and units_changed:
        first_live = next((i for i, s in enumerate(steps) if s.kind in ("live", "os")), len(steps))
        steps.insert(first_live, Step("live", action="daemon-reload"))
    return steps, changed, unchanged


def cur_is_mask(o) -> bool:
    return o.kind == "symlink" and o.target == "/dev/null"
