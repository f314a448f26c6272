"""Crash campaign: a real child process applying a day-2 config is SIGKILLed at many points.

The child (a fork of the test process) counts its file-system mutations (rename, write, fsync,
unlink, mkdir, symlink, chmod, ...) and SIGKILLs itself at mutation number k. While it runs, a
watcher thread in the parent reads every managed file and checks that it only ever holds the
complete old or the complete new contents. After the kill, ``recover`` must bring the tree back
to exactly the old tree (rolled back) or exactly the new one (rolled forward), and the next
apply must give exactly the target tree.
"""

import base64
import os
import pathlib
import random
import shutil
import signal
import tempfile
import threading

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.host.root import Root
from agent.node.apply import apply_config, recover

MUTATORS = ("rename", "write", "fsync", "unlink", "rmdir", "mkdir", "symlink", "link", "chmod",
            "chown", "fchmod", "fchown", "open")


def _data(text: str) -> dict:
    return {"source": "data:;base64," + base64.b64encode(text.encode()).decode()}


UNIT = "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"


def _configs():
    prev_files = [{"path": f"/etc/app/f{i:02d}.conf", "contents": _data(f"old {i}\n" * (i + 1)), "mode": 0o644}
                  for i in range(20)]
    prev_files.append({"path": "/etc/app/secret", "contents": _data("old-secret\n"), "mode": 0o600})
    prev = NodeConfig(ignition={
        "ignition": {"version": "3.4.0"},
        "storage": {"files": prev_files, "links": [{"path": "/etc/app/current", "target": "/etc/app/f00.conf"}]},
        "systemd": {"units": [{"name": "old.service", "enabled": True, "contents": UNIT}]},
    }, name="rendered-old")
    files = []
    for i in range(25):
        if 15 <= i < 20:
            continue  # removed on day 2
        text = f"new {i}\n" * (i + 2) if i % 2 == 0 else f"old {i}\n" * (i + 1)
        files.append({"path": f"/etc/app/f{i:02d}.conf", "contents": _data(text), "mode": 0o640 if i % 3 else 0o644})
    files.append({"path": "/etc/app/secret", "contents": _data("new-secret\n"), "mode": 0o600})
    files.append({"path": "/opt/new/deep/file", "contents": _data("deep\n")})
    target = NodeConfig(ignition={
        "ignition": {"version": "3.4.0"},
        "storage": {"files": files,
                    "directories": [{"path": "/var/data", "mode": 0o750}],
                    "links": [{"path": "/etc/app/current", "target": "/etc/app/f02.conf"}]},
        "systemd": {"units": [{"name": "new.service", "enabled": True, "contents": UNIT}]},
    }, name="rendered-new")
    return prev, target


def snapshot(top: str) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, top)
            if rel.startswith("var/lib/node-agent/journal"):
                continue
            st = os.lstat(p)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p), st.st_uid, st.st_gid)
            elif os.path.isdir(p):
                out[rel] = ("dir", st.st_mode & 0o7777, st.st_uid, st.st_gid)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", f.read(), st.st_mode & 0o7777, st.st_uid, st.st_gid)
    return out


def _child_apply(top: str, prev, target, kill_at: int) -> None:
    """Runs in the forked child: apply with a SIGKILL at mutation ``kill_at``."""
    count = [0]

    def wrap(fn, name):
        def inner(*a, **kw):
            if name == "open" and not (len(a) > 1 and isinstance(a[1], int) and a[1] & os.O_CREAT):
                return fn(*a, **kw)
            count[0] += 1
            if count[0] >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*a, **kw)
        return inner

    for name in MUTATORS:
        setattr(os, name, wrap(getattr(os, name), name))
    try:
        apply_config(Root(top), target, prev)
        os._exit(0)
    except BaseException:
        os._exit(3)


def _count_mutations(top: str, prev, target) -> int:
    count = [0]
    saved = {n: getattr(os, n) for n in MUTATORS}

    def wrap(fn, name):
        def inner(*a, **kw):
            if not (name == "open" and not (len(a) > 1 and isinstance(a[1], int) and a[1] & os.O_CREAT)):
                count[0] += 1
            return fn(*a, **kw)
        return inner

    try:
        for n in MUTATORS:
            setattr(os, n, wrap(saved[n], n))
        apply_config(Root(top), target, prev)
    finally:
        for n, fn in saved.items():
            setattr(os, n, fn)
    return count[0]


def _watch(top: str, allowed: dict, stop: threading.Event, bad: list, errors: list) -> None:
    """Reads every managed file until ``stop``; what it saw wrong goes to ``bad``, an error of its
    own to ``errors`` (a watcher that died would otherwise pass the test having checked nothing)."""
    try:
        while not stop.is_set():
            for rel, choices in allowed.items():
                try:
                    with open(os.path.join(top, rel), "rb") as f:
                        data = f.read()
                except (FileNotFoundError, NotADirectoryError):
                    continue
                if data not in choices:
                    bad.append((rel, data[:80]))
    except BaseException as exc:  # noqa: BLE001 - asserted on in the test's thread
        errors.append(exc)


@pytest.fixture
def scratch(tmp_path):
    """A scratch dir on tmpfs when there is one: fsync there costs nothing, keeping this fast."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = tempfile.mkdtemp(prefix="node-agent-crash-", dir="/dev/shm")
        yield pathlib.Path(d)
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path


def _trees_and_mutations(top, prev, target):
    """``top``/base with ``prev`` applied, its tree, the tree the apply of ``target`` over it
    gives, and how many file-system mutations that apply makes (counted on a copy, ``probe``)."""
    base = str(top / "base")
    os.makedirs(base)
    apply_config(Root(base), prev)
    probe = str(top / "probe")
    shutil.copytree(base, probe, symlinks=True)
    total = _count_mutations(probe, prev, target)
    return base, snapshot(base), snapshot(probe), total


def test_sigkill_at_many_points_always_recovers_to_old_or_target(scratch):
    tmp_path = scratch
    prev, target = _configs()
    base, old_tree, new_tree, total = _trees_and_mutations(tmp_path, prev, target)
    assert new_tree != old_tree
    assert total > 60

    allowed = {}
    for rel in set(old_tree) | set(new_tree):
        choices = {t[1] for t in (old_tree.get(rel), new_tree.get(rel)) if t and t[0] == "file"}
        if choices and not rel.startswith("var/lib/node-agent"):
            allowed[rel] = choices

    rng = random.Random(1234)
    points = sorted(set([1, 2, total] + rng.sample(range(1, total + 1), min(total, 58))))
    assert len(points) >= 50
    outcomes = {}
    top = str(tmp_path / "root")
    for k in points:
        if os.path.exists(top):
            shutil.rmtree(top)
        shutil.copytree(base, top, symlinks=True)
        stop, bad, errors = threading.Event(), [], []
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            _child_apply(top, prev, target, k)
        watcher = threading.Thread(target=_watch, args=(top, allowed, stop, bad, errors))
        watcher.start()
        _, status = os.waitpid(pid, 0)
        stop.set()
        watcher.join()
        assert not errors, f"kill at {k}: the watcher failed: {errors[0]!r}"
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (k, status)
        assert not bad, f"kill at {k}: a reader saw partial or foreign contents: {bad[:3]}"

        outcome = recover(Root(top))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        after = snapshot(top)
        if outcome == "rolled-forward":
            assert after == new_tree, k
        elif outcome == "rolled-back":
            assert after == old_tree, f"kill at {k}: rollback did not restore the old tree"
        else:  # killed before the journal existed, or after the apply had removed it
            assert outcome is None
            assert after in (old_tree, new_tree), f"kill at {k}: no journal, yet the tree is mixed"
        assert not os.path.exists(os.path.join(top, "var/lib/node-agent/journal.json"))

        result = apply_config(Root(top), target, prev)
        assert snapshot(top) == new_tree, k
        if outcome == "rolled-forward":
            assert result.changed == []
    assert outcomes.get("rolled-back", 0) > 20


def _batch_configs():
    """A day-2 change that is mostly one batch of file writes (files.write_many): new files in a
    new directory tree, replaced files in an existing one."""
    prev = NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {"files": [
        {"path": f"/etc/batch/f{i}", "contents": _data(f"old {i}\n"), "mode": 0o644} for i in range(6)]}},
        name="rendered-old")
    files = [{"path": f"/etc/batch/f{i}", "contents": _data(f"new {i}\n" * 3), "mode": 0o640} for i in range(6)]
    files += [{"path": f"/opt/batch/d{i % 2}/g{i}", "contents": _data(f"g {i}\n")} for i in range(4)]
    return prev, NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {"files": files}},
                            name="rendered-new")


def test_sigkill_at_every_point_of_a_batched_write(scratch):
    """Every mutation of an apply whose files are written as one batch (temporaries written,
    fsynced from threads, renamed, then one fsync per directory): a kill at any of them
    recovers to exactly the old tree or exactly the new one."""
    prev, target = _batch_configs()
    base, old_tree, new_tree, total = _trees_and_mutations(scratch, prev, target)
    top = str(scratch / "root")
    seen = set()
    for k in range(1, total + 1):
        if os.path.exists(top):
            shutil.rmtree(top)
        shutil.copytree(base, top, symlinks=True)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            _child_apply(top, prev, target, k)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (k, status)
        outcome = recover(Root(top))
        seen.add(outcome)
        after = snapshot(top)
        if outcome is None:  # killed before the journal existed, or after the apply had removed it
            assert after in (old_tree, new_tree), k
        else:
            assert after == (new_tree if outcome == "rolled-forward" else old_tree), (k, outcome)
        apply_config(Root(top), target, prev)
        assert snapshot(top) == new_tree, k
    assert "rolled-back" in seen and "rolled-forward" in seen
