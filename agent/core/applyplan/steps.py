"""From desired operations to concrete steps (pure): compare each ``Op`` with what is on disk.

``diff_operations(ops, observed, facts)`` takes the ops of ``agent.core.applyplan.operations.desired_operations``
and ``observed`` (config path -> ``agent.host.files.Observed``, read beforehand by the shell for
``observe_paths(ops)``) and returns the ``Step`` list that turns the disk into the target, plus
the ops already satisfied. An op already satisfied gives no step: applying twice changes nothing.
The overwrite rule is described in ``agent.core.applyplan.operations``.
"""

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from agent.core.applyplan.op import Op
from agent.core.applyplan.unitfiles import SYSTEM_DIR
from agent.errors import ApplyError

if TYPE_CHECKING:  # annotations only: agent.core.applyplan.operations imports this module
    from agent.core.applyplan.op import Facts


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


def parents(path: str) -> List[str]:
    """The directories above ``path``, outermost first (``/`` left out)."""
    out = []
    cur = posixpath.dirname(path)
    while cur not in ("/", ""):
        out.append(cur)
        cur = posixpath.dirname(cur)
    return list(reversed(out))


def observe_paths(ops: List[Op]) -> List[str]:
    """Every config path whose current state ``diff_operations`` needs."""
    paths = set()
    for o in ops:
        if o.kind in ("file", "dir", "symlink", "hardlink", "remove"):
            paths.add(o.path)
            paths.update(parents(o.path))
        if o.kind == "hardlink":
            paths.add(o.target)
        if o.kind in ("mask", "unmask"):
            paths.add(f"{SYSTEM_DIR}/{o.path}")
            paths.update(parents(f"{SYSTEM_DIR}/{o.path}"))
        for p, _ in o.links:
            paths.add(p)
            paths.update(parents(p))
    return sorted(paths)


def cur_is_mask(o) -> bool:
    return o.kind == "symlink" and o.target == "/dev/null"


def diff_operations(ops: List[Op], observed: Dict, facts: "Facts") -> Tuple[List[Step], List[Op], List[Op]]:
    """(steps, changed ops, unchanged ops). ``observed`` maps config path -> files.Observed.

    Raises ApplyError (nothing changed yet) on an overwrite conflict.
    """
    differ = _Differ(observed, facts)
    changed: List[Op] = []
    unchanged: List[Op] = []
    for op in ops:
        before = len(differ.steps)
        differ.step(op)
        if not op.internal:
            (changed if len(differ.steps) > before else unchanged).append(op)
    steps = differ.steps
    # Live hosts: one daemon-reload after unit files change, before enablement so systemd sees them.
    if facts.live and differ.units_changed:
        first_live = next((i for i, s in enumerate(steps) if s.kind in ("live", "os")), len(steps))
        steps.insert(first_live, Step("live", action="daemon-reload"))
    return steps, changed, unchanged


class _Differ:
    """The disk as the steps so far leave it (``state``), and the steps; one method per op kind."""

    def __init__(self, observed: Dict, facts: "Facts"):
        from agent.core.applyplan.op import Observed

        self.Observed = Observed
        self.absent = Observed("absent")
        self.state: Dict[str, object] = dict(observed)
        self.facts = facts
        self.steps: List[Step] = []
        self.made_dirs: set = set()
        self.units_changed = False

    def now(self, p: str):
        return self.state.get(p, self.absent)

    def ensure_parents(self, path: str, op: Op) -> None:
        for parent in parents(path):
            cur = self.now(parent)
            if cur.kind == "absent" and parent not in self.made_dirs:
                self.steps.append(Step("mkdir", parent, mode=0o755, uid=0, gid=0, op=op))
                self.made_dirs.add(parent)
                self.state[parent] = self.Observed("dir", mode=0o755)
            elif cur.kind not in ("absent", "dir", "symlink"):
                raise ApplyError(f"{op.where or op.path}: cannot create {path}: {parent} exists and is not a directory")

    def ours(self, op: Op) -> bool:
        return op.overwrite or op.owned or op.path in self.facts.managed

    def step(self, op: Op) -> None:
        cur = self.now(op.path) if op.path.startswith("/") else self.absent
        uid = -1 if op.uid is None else op.uid
        gid = -1 if op.gid is None else op.gid
        if op.kind == "file":
            self.file(op, cur, uid, gid)
        elif op.kind == "dir":
            self.directory(op, cur, uid, gid)
        elif op.kind == "symlink":
            self.symlink(op, cur, uid, gid)
        elif op.kind == "hardlink":
            self.hardlink(op, cur)
        elif op.kind == "remove":
            if cur.kind != "absent":
                self.steps.append(Step("remove", op.path, op=op))
                self.state[op.path] = self.absent
                if op.path.startswith(SYSTEM_DIR + "/"):
                    self.units_changed = True
        elif op.kind in ("mask", "unmask"):
            self.mask(op)
        elif op.kind in ("enable", "disable"):
            self.enablement(op)
        elif op.kind == "kargs":
            self.steps.append(Step("os", action="kargs", args=op.args, op=op))
        elif op.kind == "rebase":
            self.steps.append(Step("os", action="rebase", target=op.target, op=op))
        elif op.kind in ("kernel-type", "extensions"):
            self.steps.append(Step("os", action=op.kind, args=op.args, op=op))
        else:  # pragma: no cover - planner and diff are written together
            raise ValueError(f"unknown operation {op.kind}")

    def file(self, op: Op, cur, uid: int, gid: int) -> None:
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
                self.steps.append(Step("attrs", op.path, mode=mode, uid=uid, gid=gid, op=op))
            return
        if cur.kind != "absent" and op.data is not None and not self.ours(op):
            raise ApplyError(f"{op.where}: {op.path} already exists with other contents and overwrite is "
                             "false; set overwrite: true to replace it")
        self.ensure_parents(op.path, op)
        self.steps.append(Step("write", op.path, data=want, mode=mode,
                               uid=0 if uid == -1 and cur.kind != "file" else (cur.uid if uid == -1 else uid),
                               gid=0 if gid == -1 and cur.kind != "file" else (cur.gid if gid == -1 else gid), op=op))
        self.state[op.path] = self.Observed("file", mode=mode, data=want)
        if op.unit_file:
            self.units_changed = True

    def directory(self, op: Op, cur, uid: int, gid: int) -> None:
        if cur.kind == "dir":
            if cur.mode != op.mode or (uid != -1 and cur.uid != uid) or (gid != -1 and cur.gid != gid):
                self.steps.append(Step("attrs", op.path, mode=op.mode, uid=uid, gid=gid, op=op))
        elif cur.kind == "absent" or (cur.kind == "symlink" and not op.overwrite):
            if cur.kind == "symlink":
                return  # a link to a directory (e.g. /home -> var/home) already serves as one
            self.ensure_parents(op.path, op)
            self.steps.append(Step("mkdir", op.path, mode=op.mode, uid=max(uid, 0), gid=max(gid, 0), op=op))
            self.made_dirs.add(op.path)
            self.state[op.path] = self.Observed("dir", mode=op.mode or 0)
        else:
            if not op.overwrite:
                raise ApplyError(f"{op.where}: {op.path} exists and is not a directory; set overwrite: true to replace it")
            self.steps.append(Step("remove", op.path, op=op))
            self.steps.append(Step("mkdir", op.path, mode=op.mode, uid=max(uid, 0), gid=max(gid, 0), op=op))
            self.state[op.path] = self.Observed("dir", mode=op.mode or 0)

    def symlink(self, op: Op, cur, uid: int, gid: int) -> None:
        if cur.kind == "symlink" and cur.target == op.target:
            if (uid != -1 and cur.uid != uid) or (gid != -1 and cur.gid != gid):
                self.steps.append(Step("attrs", op.path, mode=None, uid=uid, gid=gid, op=op))
            return
        self.make_room_for_link(op, cur, "; cannot replace it with a link")
        self.steps.append(Step("symlink", op.path, target=op.target, op=op))
        if uid != -1 or gid != -1:
            self.steps.append(Step("attrs", op.path, mode=None, uid=uid, gid=gid, op=op))
        self.state[op.path] = self.Observed("symlink", target=op.target)

    def hardlink(self, op: Op, cur) -> None:
        tgt = self.now(op.target)
        if tgt.kind in ("absent", "dir"):
            raise ApplyError(f"{op.where}.target: hard link target {op.target} "
                             f"{'does not exist' if tgt.kind == 'absent' else 'is a directory'}")
        same = cur.kind != "absent" and cur.ino and cur.ino == tgt.ino and cur.dev == tgt.dev
        if same:
            return
        self.make_room_for_link(op, cur)
        self.steps.append(Step("hardlink", op.path, target=op.target, op=op))

    def make_room_for_link(self, op: Op, cur, on_dir: str = "") -> None:
        """A link may replace what is at its path only when that is not a directory and is ours
        or overwrite is set; its parents are made first."""
        if cur.kind == "dir":
            raise ApplyError(f"{op.where}: {op.path} exists and is a directory{on_dir}")
        if cur.kind != "absent" and not self.ours(op):
            raise ApplyError(f"{op.where}: {op.path} already exists and overwrite is false; "
                             "set overwrite: true to replace it")
        self.ensure_parents(op.path, op)

    def mask(self, op: Op) -> None:
        p = f"{SYSTEM_DIR}/{op.path}"
        masked = cur_is_mask(self.now(p))
        if op.kind == "mask" and not masked:
            if self.now(p).kind == "dir":
                raise ApplyError(f"{op.where}: {p} is a directory; cannot mask {op.path}")
            if self.facts.live:
                self.steps.append(Step("live", p, action="mask", units=(op.path,), op=op))
            else:
                self.ensure_parents(p, op)
                self.steps.append(Step("symlink", p, target="/dev/null", op=op))
            self.state[p] = self.Observed("symlink", target="/dev/null")
            self.units_changed = True
        elif op.kind == "unmask" and masked:
            if self.facts.live:
                self.steps.append(Step("live", p, action="unmask", units=(op.path,), op=op))
            else:
                self.steps.append(Step("remove", p, op=op))
            self.state[p] = self.absent
            self.units_changed = True

    def enablement(self, op: Op) -> None:
        if op.kind == "enable":
            missing = [(p, t) for p, t in op.links if not (self.now(p).kind == "symlink" and self.now(p).target == t)]
            if not missing:
                return
            if self.facts.live:
                self.steps.append(Step("live", op.path, action="enable", units=(op.path,), op=op))
                return
            for p, t in missing:
                self.ensure_parents(p, op)
                self.steps.append(Step("symlink", p, target=t, op=op))
                self.state[p] = self.Observed("symlink", target=t)
            return
        present = [p for p, _ in op.links if self.now(p).kind == "symlink"]
        if not present:
            return
        if self.facts.live:
            self.steps.append(Step("live", op.path, action="disable", units=(op.path,), op=op))
            return
        for p in present:
            self.steps.append(Step("remove", p, op=op))
            self.state[p] = self.absent
