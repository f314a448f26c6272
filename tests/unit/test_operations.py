"""The pure planner: ordering, ownership resolution, day-2 removals, overwrite rule, kargs."""

import pytest

from agent.core.applyplan.accounts import Accounts, add_user
from agent.core.applyplan.op import Observed
from agent.core.applyplan.operations import Facts, desired_operations, diff_operations, kernel_args
from agent.core.nodeconfig import NodeConfig
from agent.errors import ApplyError

ACC = Accounts(passwd="root:x:0:0::/root:/bin/bash\ncore:x:1000:1000::/var/home/core:/bin/bash\n",
               group="root:x:0:\ncore:x:1000:\n")


def cfg(**ign):
    return NodeConfig(ignition=dict({"ignition": {"version": "3.4.0"}}, **ign), name="c")


def test_order_dirs_parents_first_links_after_targets_units_after_files():
    c = cfg(storage={
        "directories": [{"path": "/a/b/c"}, {"path": "/a"}],
        "files": [{"path": "/a/f"}],
        "links": [{"path": "/l2", "target": "/l1"}, {"path": "/h", "target": "/a/f", "hard": True},
                  {"path": "/l1", "target": "/a/f"}]},
        systemd={"units": [{"name": "u.service", "enabled": True,
                            "contents": "[Install]\nWantedBy=multi-user.target\n"}]})
    ops = desired_operations(c, None, {}, Facts(accounts=ACC))
    kinds = [(o.kind, o.path) for o in ops if not o.internal]
    assert kinds == [("dir", "/a"), ("dir", "/a/b/c"), ("file", "/a/f"), ("symlink", "/l1"), ("symlink", "/l2"),
                     ("hardlink", "/h"), ("file", "/etc/systemd/system/u.service"), ("enable", "u.service")]


def test_owner_names_resolve_from_root_and_from_users_created_by_the_config():
    c = cfg(storage={"files": [{"path": "/f", "user": {"name": "svc"}, "group": {"name": "core"}}]},
            passwd={"users": [{"name": "svc"}]})
    ops = desired_operations(c, None, {}, Facts(accounts=ACC, days_since_epoch=20000))
    f = next(o for o in ops if o.path == "/f")
    assert (f.uid, f.gid) == (1001, 1000)
    passwd = next(o for o in ops if o.path == "/etc/passwd")
    assert b"svc:x:1001:1001::/home/svc:/bin/bash" in passwd.data
    shadow = next(o for o in ops if o.path == "/etc/shadow")
    assert shadow.mode == 0 and b"svc:!:20000:" in shadow.data


def test_add_user_picks_next_free_uid_and_rejects_taken_one():
    acc, u = add_user(ACC, {"name": "x"}, 1)
    assert u.uid == 1001
    _, u2 = add_user(acc, {"name": "y"}, 1)
    assert u2.uid == 1002
    with pytest.raises(ApplyError, match="uid 1000 is already used"):
        add_user(ACC, {"name": "z", "uid": 1000}, 1)


def test_ssh_keys_go_to_the_ignition_fragment_in_the_users_home():
    c = cfg(passwd={"users": [{"name": "core", "sshAuthorizedKeys": ["k1", "k2 "]}]})
    ops = desired_operations(c, None, {}, Facts(accounts=ACC))
    f = next(o for o in ops if o.kind == "file" and "authorized_keys.d" in o.path)
    assert f.path == "/var/home/core/.ssh/authorized_keys.d/ignition"
    assert (f.data, f.mode, f.uid, f.gid) == (b"k1\nk2\n", 0o600, 1000, 1000)


def test_day2_removals_and_unit_disable():
    prev = cfg(storage={"files": [{"path": "/keep"}, {"path": "/gone"}]},
               systemd={"units": [{"name": "old.service", "enabled": True, "contents": "[Install]\nWantedBy=a.target\n"}]})
    tgt = cfg(storage={"files": [{"path": "/keep"}]})
    ops = desired_operations(tgt, prev, {}, Facts(accounts=ACC))
    assert [(o.kind, o.path) for o in ops if o.kind in ("remove", "disable")] == [
        ("disable", "old.service"), ("remove", "/etc/systemd/system/old.service"), ("remove", "/gone")]


def test_overwrite_rule():
    c = cfg(storage={"files": [{"path": "/etc/x"}]})
    ops = [o for o in desired_operations(c, None, {"$.storage.files.0.contents": b"new"}, Facts(accounts=ACC))
           if not o.internal]
    foreign = {"/etc/x": Observed("file", mode=0o644, data=b"old"), "/etc": Observed("dir", mode=0o755)}
    with pytest.raises(ApplyError, match="overwrite is false"):
        diff_operations(ops, foreign, Facts())
    steps, changed, _ = diff_operations(ops, foreign, Facts(managed=frozenset({"/etc/x"})))
    assert [s.kind for s in steps] == ["write"] and steps[0].data == b"new"
    same = {"/etc/x": Observed("file", mode=0o644, data=b"new"), "/etc": Observed("dir", mode=0o755)}
    steps, changed, unchanged = diff_operations(ops, same, Facts())
    assert steps == [] and changed == [] and len(unchanged) == 1


def test_missing_parents_become_mkdir_steps_once():
    c = cfg(storage={"files": [{"path": "/n/a/1"}, {"path": "/n/a/2"}]})
    ops = [o for o in desired_operations(c, None, {}, Facts(accounts=ACC)) if not o.internal]
    steps, _, _ = diff_operations(ops, {}, Facts())
    assert [(s.kind, s.path) for s in steps] == [("mkdir", "/n"), ("mkdir", "/n/a"), ("write", "/n/a/1"),
                                                 ("write", "/n/a/2")]


def test_kernel_args_against_previous_and_booted():
    prev = NodeConfig(kernel_arguments=("a", "b"))
    tgt = NodeConfig(ignition={"ignition": {"version": "3.4.0"},
                               "kernelArguments": {"shouldExist": ["c"], "shouldNotExist": ["z"]}},
                     kernel_arguments=("b", "d"))
    assert kernel_args(tgt, None, None) == (("b", "d", "c"), ("z",))
    assert kernel_args(tgt, prev, None) == (("d", "c"), ("z", "a"))
    assert kernel_args(tgt, prev, ("img", ("a", "b", "c"))) == (("d",), ("a",))
