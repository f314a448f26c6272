"""Planning the effects of a config on a node (pure: data in, operations out).

Two steps, both pure functions so ``plan``, tests and the apply engine share them:

``desired_operations(target, previous, contents, facts)``
    What the node must look like: one ``Op`` per path or action, in a safe order (accounts,
    day-2 removals, directories parents first, files, links after their targets, units after
    their files, ssh keys, OS changes last).

``diff_operations(ops, observed, facts)`` (in ``agent.core.applyplan.steps``, importable from here)
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
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

from agent.core.applyplan.accounts import Accounts, add_group, add_user, home_of
from agent.core.applyplan.op import DEFAULT_STATE_DIR, Facts, Op  # noqa: F401 (DEFAULT_STATE_DIR re-exported)
from agent.core.applyplan.osops import kernel_args, os_commands, os_operations  # noqa: F401 (re-exported: apply, tests)
from agent.core.applyplan.steps import Step, cur_is_mask, diff_operations, observe_paths  # noqa: F401 (re-exported: apply, tests)
from agent.core.applyplan.unitfiles import SYSTEM_DIR, also_units, install_links
from agent.core.nodeconfig import NodeConfig
from agent.core.secretfiles import file_mode
from agent.errors import ApplyError

SSH_KEYS_FRAGMENT = "ignition"  # same fragment Ignition and the MCO write: day 2 replaces it
MANAGED_FILE = "managed.json"
PENDING_OS_FILE = "pending-os.json"


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
    # Accounts first: file owners may name users and groups this config creates.
    acc, ops, new_users = _account_ops(target, facts)
    # Day 2: what the previous config (or the managed record) had and the target doesn't.
    target_paths = set(_config_paths(target, acc))
    old_paths = set(facts.managed)
    if previous is not None:
        old_paths |= set(_config_paths(previous, acc))
    ops += _removal_ops(target, previous, facts, old_paths - target_paths)
    ops += _storage_ops(target, contents, acc, new_users)
    ops += _unit_ops(target, previous, facts)
    ops += _ssh_key_ops(target, acc)
    # OS level: live hosts stage with rpm-ostree; offline roots get a pending record.
    os_ops = os_operations(target, previous, facts.booted)
    if facts.live:
        ops.extend(os_ops)
    ops += _own_record_ops(target, facts, sorted(target_paths), os_ops)
    return [replace(o, owned=True) if o.path in old_paths else o for o in ops]


def _account_ops(target: NodeConfig, facts: Facts) -> Tuple[Accounts, List[Op], List[Tuple[Any, int]]]:
    """The account databases after the config's groups and users are added, the file writes that
    take them there, and the new users whose home directories are to be made."""
    acc_before = acc = facts.accounts
    for i, g in enumerate(target.ignition.get("passwd", {}).get("groups") or []):
        acc = add_group(acc, g["name"], g.get("gid"), f"$.passwd.groups.{i}")
    new_users = []
    for i, u in enumerate(target.users):
        if acc.user(u["name"]) is None:
            acc, user = add_user(acc, u, facts.days_since_epoch, f"$.passwd.users.{i}")
            if not u.get("noCreateHome"):
                new_users.append((user, i))
    ops = []
    for name, mode in (("passwd", 0o644), ("group", 0o644), ("shadow", 0), ("gshadow", 0)):
        text = getattr(acc, name)
        if text != getattr(acc_before, name):
            ops.append(Op("file", f"/etc/{name}", data=text.encode(), mode=mode, uid=0, gid=0,
                          overwrite=True, where="$.passwd"))
    return acc, ops, new_users


def _removal_ops(target: NodeConfig, previous: Optional[NodeConfig], facts: Facts, gone) -> List[Op]:
    """Units the previous config had and the target does not, disabled and unmasked; paths no
    longer in any config removed, deepest first (the agent's own records are never removed)."""
    ops = []
    state_paths = {f"{facts.state_dir}/{MANAGED_FILE}", f"{facts.state_dir}/{PENDING_OS_FILE}"}
    removals = sorted(set(gone) - state_paths, key=lambda p: (-_depth(p), p))
    target_units = {u["name"] for u in target.units}
    for u in previous.units if previous is not None else []:
        if u["name"] in target_units:
            continue
        if u.get("enabled"):
            ops.append(_unit_enable_op(u, False, facts))
        if u.get("mask"):
            ops.append(Op("unmask", u["name"], where="previous config"))
    ops.extend(Op("remove", p, where="previous config") for p in removals)
    return ops


def _storage_ops(target: NodeConfig, contents: Dict[str, bytes], acc: Accounts, new_users) -> List[Op]:
    """Directories (parents first, then new users' homes), files, then links."""
    ops = []
    for i, d in sorted(enumerate(target.directories), key=lambda e: (_depth(e[1]["path"]), e[0])):
        w = f"$.storage.directories.{i}"
        ops.append(Op("dir", d["path"], mode=d.get("mode") if d.get("mode") is not None else 0o755,
                      uid=_owner_id(d, "user", acc, w), gid=_owner_id(d, "group", acc, w),
                      overwrite=bool(d.get("overwrite")), where=w))
    for user, i in new_users:
        ops.append(Op("dir", user.home, mode=0o700, uid=user.uid, gid=user.gid, where=f"$.passwd.users.{i}"))
    for i, f in enumerate(target.files):
        w = f"$.storage.files.{i}"
        data = contents.get(f"{w}.contents")
        fragments = [contents[f"{w}.append.{k}"] for k in range(len(f.get("append") or []))
                     if f"{w}.append.{k}" in contents]
        ops.append(Op("file", f["path"], data=data, append=b"".join(fragments) if fragments else None,
                      mode=file_mode(f["path"], f.get("mode")),  # secrets 0600 whatever the config says
                      uid=_owner_id(f, "user", acc, w), gid=_owner_id(f, "group", acc, w),
                      overwrite=bool(f.get("overwrite")), where=w))
    # Symbolic links before hard links (a hard link may name a file reached via a link), and a
    # link whose target is another link of the config after it.
    link_ops = []
    for i, ln in enumerate(target.links):
        w = f"$.storage.links.{i}"
        link_ops.append(Op("hardlink" if ln.get("hard") else "symlink", ln["path"], target=ln["target"],
                           uid=_owner_id(ln, "user", acc, w), gid=_owner_id(ln, "group", acc, w),
                           overwrite=bool(ln.get("overwrite")), where=w))
    return ops + _order_links(link_ops)


def _unit_ops(target: NodeConfig, previous: Optional[NodeConfig], facts: Facts) -> List[Op]:
    """Unit files and dropins, then masks, then enablement."""
    ops = []
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
    return ops


def _ssh_key_ops(target: NodeConfig, acc: Accounts) -> List[Op]:
    """The same fragment Ignition writes, so day 2 replaces (not adds to) it."""
    ops = []
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
    return ops


def _own_record_ops(target: NodeConfig, facts: Facts, managed: List[str], os_ops: List[Op]) -> List[Op]:
    """The agent's own records, inside the same transaction: the managed paths, and on an offline
    root what a live host would have run for the OS (pending until the reboot)."""
    ops = [Op("file", f"{facts.state_dir}/{MANAGED_FILE}", data=(json.dumps(managed, indent=1) + "\n").encode(),
              mode=0o644, uid=0, gid=0, overwrite=True, internal=True)]
    if facts.live or not os_ops:
        return ops
    append, delete = next((o.args for o in os_ops if o.kind == "kargs"), ((), ()))
    pending = {"kernelArguments": {"append": list(append), "delete": list(delete)},
               "osImageURL": next((o.target for o in os_ops if o.kind == "rebase"), ""),
               "config": target.name}
    for o in os_ops:
        if o.kind == "kernel-type":
            pending["kernelType"] = {"from": o.args[0][0], "to": o.args[1][0]}
        elif o.kind == "extensions":
            pending["extensions"] = {"install": list(o.args[0]), "uninstall": list(o.args[1])}
    pending["commands"] = [["rpm-ostree", *args] for o in os_ops for args in os_commands(o)]
    ops.append(Op("file", f"{facts.state_dir}/{PENDING_OS_FILE}", data=(json.dumps(pending, indent=1) + "\n").encode(),
                  mode=0o644, uid=0, gid=0, overwrite=True, internal=True))
    return ops


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
