"""The journal on a real scratch root: backups, rollback of every kind of change, recovery."""

import os

from agent.host import files
from agent.host.root import Root
from agent.node.txjournal import Journal, recover


def test_rollback_restores_files_links_dirs_and_removes_created_paths(tmp_path):
    top = tmp_path / "r"
    (top / "etc").mkdir(parents=True)
    (top / "etc/conf").write_bytes(b"old")
    os.chmod(top / "etc/conf", 0o640)
    os.chown(top / "etc/conf", 7, 8)
    os.symlink("/etc/conf", top / "etc/link")
    (top / "etc/dir").mkdir(mode=0o755)
    root = Root(str(top))
    j = Journal(root)
    j.begin(["/etc/conf", "/etc/link", "/etc/dir", "/etc/new", "/etc/newdir"], "c1")
    assert os.path.exists(j.journal_path)
    files.atomic_write(str(top / "etc/conf"), b"new", 0o600, 0, 0)
    files.replace_symlink(str(top / "etc/link"), "/elsewhere")
    os.chmod(top / "etc/dir", 0o700)
    files.atomic_write(str(top / "etc/new"), b"x")
    os.mkdir(top / "etc/newdir")
    (top / "etc" / (files.TMP_PREFIX + "conf.dead")).write_bytes(b"partial")

    assert recover(root) == "rolled-back"
    st = os.stat(top / "etc/conf")
    assert (top / "etc/conf").read_bytes() == b"old" and (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o640, 7, 8)
    assert os.readlink(top / "etc/link") == "/etc/conf"
    assert os.stat(top / "etc/dir").st_mode & 0o777 == 0o755
    assert not os.path.exists(top / "etc/new") and not os.path.exists(top / "etc/newdir")
    assert sorted(os.listdir(top / "etc")) == ["conf", "dir", "link"]
    assert not os.path.exists(j.journal_path) and not os.path.exists(j.backup_dir)
    assert recover(root) is None


def test_committed_journal_rolls_forward(tmp_path):
    root = Root(str(tmp_path))
    j = Journal(root)
    j.begin(["/etc/a"], "c2")
    files.makedirs(str(tmp_path / "etc"), stop=str(tmp_path))
    files.atomic_write(str(tmp_path / "etc/a"), b"new")
    j.doc["state"] = "committed"
    j._save()  # as if killed during clean-up
    assert recover(root) == "rolled-forward"
    assert (tmp_path / "etc/a").read_bytes() == b"new"


def test_live_actions_are_undone_in_reverse(tmp_path):
    calls = []

    class SD:
        def __getattr__(self, name):
            return lambda *a: calls.append((name,) + a)

    root = Root(str(tmp_path))
    j = Journal(root)
    j.begin([], "c3")
    j.note_live("enable", ["a.service"])
    j.note_live("mask", ["b.service"])
    assert recover(root, systemd=SD()) == "rolled-back"
    assert calls == [("unmask_unit_files", ["b.service"]), ("disable_unit_files", ["a.service"]), ("daemon_reload",)]
