import os

import pytest

from agent.host.root import PathEscapeError, Root, normalize


def test_paths_resolve_inside_the_root_with_chroot_link_semantics(tmp_path):
    (tmp_path / "var/home").mkdir(parents=True)
    os.symlink("var/home", tmp_path / "home")
    os.symlink("/var/home", tmp_path / "abs")
    r = Root(str(tmp_path))
    assert r.path("/home/core") == str(tmp_path / "var/home/core")
    assert r.path("/abs/core") == str(tmp_path / "var/home/core")
    assert r.path("/home", follow_last=False) == str(tmp_path / "home")
    assert r.path("/a/../b") == str(tmp_path / "b")
    assert r.config_path(str(tmp_path / "etc/x")) == "/etc/x"
    assert not r.is_live and Root("/").is_live


def test_escapes_are_refused(tmp_path):
    os.symlink("../..", tmp_path / "up")
    os.symlink("loop", tmp_path / "loop")
    r = Root(str(tmp_path))
    for p, msg in (("/../etc", "leaves the root"), ("/up/x", "leaves the root"), ("/loop/x", "too many levels"),
                   ("relative", "not an absolute path")):
        with pytest.raises(PathEscapeError, match=msg):
            r.path(p)
    with pytest.raises(PathEscapeError, match="is not under the root"):
        r.config_path("/somewhere/else")
    assert normalize("//a/./b/") == "/a/b"
