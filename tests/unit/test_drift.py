"""On-disk drift (issue 32): the current config's paths checked on disk, each difference named,
never a secret's content; recorded for ``node-agent status``, reported to the server; inotify
re-checks what changes; the force file.

Upstream beside ours: machine-config-operator pkg/daemon/on_disk_validation.go
(``checkFileContentsAndMode``: mode and content; ``checkV3Unit``: masks, :88-100; dropins,
``checkV3Dropin`` :50-71) and pkg/daemon/config_drift_monitor.go (parent directories watched).
"""

import json
import os
import threading
from urllib.parse import quote

import pytest

from agent.core import drift as core
from agent.core.nodeconfig import NodeConfig
from agent.errors import FetchError
from agent.host import inotify
from agent.host.root import Root
from agent.node import drift as node_drift
from agent.node.apply import apply_config
from tests.helpers.wait import wait_for

STATE = "/var/lib/node-agent"
PULL_SECRET = "/var/lib/kubelet/config.json"
SECRET_TEXT = '{"auths":{"r.example.com":{"auth":"c2VjcmV0OnBhc3N3b3Jk"}}}'


def _file(path, text, mode=0o644, **extra):
    return {"path": path, "mode": mode, "overwrite": True, "contents": {"source": "data:," + quote(text, safe="")},
            **extra}


def config(name="rendered-worker-1", sysctl="vm.swappiness=10\n"):
    unit = "[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
    ign = {"ignition": {"version": "3.4.0"},
           "storage": {"files": [_file("/etc/sysctl.d/90-x.conf", sysctl),
                                 _file("/etc/motd", "hello\n", user={"name": "core"}, group={"id": 1000}),
                                 _file(PULL_SECRET, SECRET_TEXT, mode=0o600)],
                       "directories": [{"path": "/etc/x.d", "mode": 0o750}],
                       "links": [{"path": "/etc/localtime", "target": "/usr/share/zoneinfo/UTC"}]},
           "systemd": {"units": [{"name": "x.service", "enabled": True, "contents": unit,
                                  "dropins": [{"name": "10-a.conf", "contents": "[Service]\nNice=5\n"}]},
                                 {"name": "y.service", "mask": True}]}}
    return NodeConfig(ignition=ign, name=name)


@pytest.fixture
def root(tmp_path):
    top = tmp_path / "root"
    (top / "etc").mkdir(parents=True)
    (top / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000::/var/home/core:/bin/bash\n")
    (top / "etc/group").write_text("root:x:0:\ncore:x:1000:\n")
    r = Root(str(top))
    apply_config(r, config(), None, state_dir=STATE)
    return r


def host(r, path):
    return r.path(path, follow_last=False)


def expect(r, cfg=None):
    return node_drift.build_expectation(r, cfg or config())


def events_until(watcher, path, timeout=10.0):
    """The paths ``watcher`` names (each try waits up to 0.5 s for events) until ``path`` is among them."""
    changed = set()

    def seen():
        got = watcher.wait(0.5)
        changed.update(got if isinstance(got, set) else ())
        return path in changed

    wait_for(seen, f"an inotify event for {path}", timeout)
    return changed


# -- the pure comparison -----------------------------------------------------------------------

def test_a_freshly_applied_config_has_no_drift(root):
    e = expect(root)
    assert node_drift.check(root, e) == []
    # what is checked: files, directory, link, unit file, dropin, mask, enablement link
    kinds = {x.path: x.kind for x in e.entries}
    assert kinds["/etc/x.d"] == "dir" and kinds["/etc/localtime"] == "symlink"
    assert kinds["/etc/systemd/system/y.service"] == "symlink"  # masked: a link to /dev/null
    assert kinds["/etc/systemd/system/multi-user.target.wants/x.service"] == "symlink"
    assert kinds["/etc/systemd/system/x.service.d/10-a.conf"] == "file"


def test_each_drifted_path_is_named_with_what_differs(root):
    with open(host(root, "/etc/sysctl.d/90-x.conf"), "w") as f:
        f.write("vm.swappiness=60\n")
    os.chmod(host(root, "/etc/motd"), 0o600)
    os.chown(host(root, "/etc/motd"), 0, 0)
    os.rmdir(host(root, "/etc/x.d"))
    os.unlink(host(root, "/etc/localtime"))
    os.symlink("/usr/share/zoneinfo/Europe/Paris", host(root, "/etc/localtime"))
    os.unlink(host(root, "/etc/systemd/system/multi-user.target.wants/x.service"))
    os.unlink(host(root, "/etc/systemd/system/y.service"))
    found = {d.path: d.differences for d in node_drift.check(root, expect(root))}
    digest = core.sha256_hex(b"vm.swappiness=60\n")[1][:12]
    want = core.sha256_hex(b"vm.swappiness=10\n")[1][:12]
    assert found == {
        "/etc/sysctl.d/90-x.conf": (f"content differs (sha256 {digest}, expected {want})",),
        "/etc/motd": ("mode 0600, expected 0644", "owner 0:0, expected 1000:1000"),
        "/etc/x.d": ("missing",),
        "/etc/localtime": ("link target /usr/share/zoneinfo/Europe/Paris, expected /usr/share/zoneinfo/UTC",),
        "/etc/systemd/system/multi-user.target.wants/x.service": ("missing: x.service is not enabled "
                                                                  "(the config enables it)",),
        "/etc/systemd/system/y.service": ("missing",),
    }


def test_a_file_replaced_by_a_directory_or_a_link_is_a_type_difference(root):
    os.unlink(host(root, "/etc/motd"))
    os.mkdir(host(root, "/etc/motd"))
    os.unlink(host(root, "/etc/sysctl.d/90-x.conf"))
    os.symlink("/etc/motd", host(root, "/etc/sysctl.d/90-x.conf"))
    found = {d.path: d.differences for d in node_drift.check(root, expect(root))}
    assert found["/etc/motd"] == ("is a directory, expected a regular file",)
    # as the MCD's Lstat-based mode comparison: a link in place of a file differs
    assert found["/etc/sysctl.d/90-x.conf"] == ("is a symbolic link, expected a regular file",)


def test_a_secret_says_content_differs_and_nothing_more(root):
    changed = SECRET_TEXT.replace("c2VjcmV0", "b3RoZXIK")
    with open(host(root, PULL_SECRET), "w") as f:
        f.write(changed)
    drifts = node_drift.check(root, expect(root))
    assert [(d.path, d.differences, d.secret) for d in drifts] == [(PULL_SECRET, ("content differs",), True)]
    text = core.reason("rendered-worker-1", drifts)
    for leak in (changed, "c2VjcmV0", core.sha256_hex(changed.encode())[1][:12],
                 core.sha256_hex(SECRET_TEXT.encode())[1][:12]):
        assert leak not in text
    # a file the config keeps from other users is a secret too
    assert core.is_secret("/etc/ssh/key", 0o640) and not core.is_secret("/etc/motd", 0o644)


def test_a_disabled_unit_with_an_enablement_link_is_drift(root):
    cfg = config()
    cfg.ignition["systemd"]["units"].append({"name": "z.service", "enabled": False})
    wants = host(root, "/etc/systemd/system/timers.target.wants")
    os.makedirs(wants)
    os.symlink("/usr/lib/systemd/system/z.service", os.path.join(wants, "z.service"))
    found = node_drift.check(root, expect(root, cfg))
    assert [(d.path, d.differences) for d in found] == [
        ("/etc/systemd/system/timers.target.wants/z.service",
         ("z.service is enabled by this link; the config has it disabled",))]


def test_content_the_config_does_not_hold_is_not_compared():
    assert core.content_digest({"path": "/a", "append": [{"source": "data:,x"}], "contents": {"source": "data:,y"}}) is None
    assert core.content_digest({"path": "/a"}) is None  # no source: kept as it is, as Ignition does
    assert core.content_digest({"path": "/a", "contents": {"source": "https://h/x"}}) is None
    assert core.content_digest({"path": "/a", "contents": {"source": "https://h/x",
                                                           "verification": {"hash": "sha512-AB"}}}) == ("sha512", "ab")
    gz = "data:;base64,H4sIAAAAAAAA/8tIzcnJBwCGphA2BQAAAA=="  # gzip of "hello"
    assert core.content_digest({"path": "/a", "contents": {"source": gz, "compression": "gzip"}}) == \
        core.sha256_hex(b"hello")


def test_the_reason_is_the_mcds_and_bounded():
    drifts = [core.Drift(f"/etc/f{i}", f"$.storage.files.{i}", ("missing",)) for i in range(30)]
    text = core.reason("rendered-worker-1", drifts)
    lines = text.split("\n")
    assert lines[0] == "unexpected on-disk state validating against rendered-worker-1: 30 paths differ from it"
    assert lines[1] == "/etc/f0: missing" and len(lines) == 22 and "and 10 more" in lines[-1]
    assert len(text) < 4096 and core.is_drift_reason(text)


# -- recorded and reported --------------------------------------------------------------------

def test_the_monitor_records_reports_once_and_reports_done_when_restored(root):
    sent = []
    mon = node_drift.DriftMonitor(root, STATE, send=sent.append, pool="worker", use_inotify=False)
    assert mon.check(config()) == []
    assert sent == []  # a clean first check says nothing (the update's own reports say Done)
    path = host(root, "/etc/sysctl.d/90-x.conf")
    with open(path, "w") as f:
        f.write("edited by hand\n")
    mon.check(config())
    mon.check(config())  # the same drift again: not reported twice
    assert [p["state"] for p in sent] == ["Degraded"]
    assert sent[0]["reason"].startswith("unexpected on-disk state validating against rendered-worker-1: 1 path")
    assert "/etc/sysctl.d/90-x.conf: content differs" in sent[0]["reason"]
    record = node_drift.read_record(root, STATE)
    assert record["config"] == "rendered-worker-1" and record["drifted"][0]["path"] == "/etc/sysctl.d/90-x.conf"
    assert mon.refusal("rendered-worker-2").exit_code == 79
    with open(path, "w") as f:
        f.write("vm.swappiness=10\n")
    mon.check(config())
    assert [p["state"] for p in sent] == ["Degraded", "Done"]
    assert node_drift.read_record(root, STATE)["drifted"] == [] and mon.refusal("x") is None


def test_no_done_report_while_a_reboot_is_pending(root):
    from agent.node import nodestate

    sent = []
    mon = node_drift.DriftMonitor(root, STATE, send=sent.append, pool="worker", use_inotify=False)
    os.chmod(host(root, "/etc/motd"), 0o600)
    mon.check(config())
    nodestate.mark_reboot_pending(root, STATE, config(), "boot-1")
    os.chmod(host(root, "/etc/motd"), 0o644)
    mon.check(config())
    assert [p["state"] for p in sent] == ["Degraded"]  # Working until the reboot, not Done


def test_the_force_file_is_found_under_the_root_and_taken_once(root):
    assert not node_drift.force_requested(root)
    os.makedirs(host(root, "/run"))
    open(host(root, node_drift.FORCE_FILE), "w").close()
    assert node_drift.force_requested(root)
    assert node_drift.take_force_file(root) and not node_drift.force_requested(root)
    assert not node_drift.take_force_file(root)


# -- inotify ---------------------------------------------------------------------------------

needs_inotify = pytest.mark.skipif(not inotify.available(), reason="no inotify on this host")


@needs_inotify
def test_inotify_names_the_changed_path_and_the_monitor_rechecks_it(root):
    sent = []
    mon = node_drift.DriftMonitor(root, STATE, send=sent.append, pool="worker")
    mon.check(config())
    watcher = mon._watch()
    assert watcher is not None and mon.watching
    os.chmod(host(root, "/etc/motd"), 0o666)
    mon.check_paths(events_until(watcher, "/etc/motd"))
    assert sent[-1]["state"] == "Degraded" and "/etc/motd: mode 0666, expected 0644" in sent[-1]["reason"]
    mon.forget()
    assert not mon.watching


@needs_inotify
def test_an_edit_right_after_a_check_is_seen_by_the_next_idle(root):
    """The watch is set up before the full check, never after it: an edit between the check and
    the wait is an event (it was missed until the next full check, found as a rare failure of
    test_update_drift under load)."""
    sent = []
    mon = node_drift.DriftMonitor(root, STATE, send=sent.append, pool="worker")
    mon.check(config())
    assert mon.watching  # before idle() is ever called
    os.chmod(host(root, "/etc/motd"), 0o666)

    def degraded():
        mon.idle(0.5)
        return bool(sent) and sent[-1]["state"] == "Degraded"

    wait_for(degraded, "the edit made before idle() reported Degraded", timeout=10)
    assert "/etc/motd: mode 0666, expected 0644" in sent[-1]["reason"]


@needs_inotify
def test_a_missing_directory_is_watched_through_its_parent(root):
    cfg = config()
    cfg.ignition["storage"]["files"].append(_file("/etc/new/deep/f.conf", "x"))
    os.unlink(host(root, "/etc/motd"))
    with inotify.DirWatcher(root, core.expectation(cfg, lambda k, n: 0, {}).watch_dirs()) as w:
        os.makedirs(host(root, "/etc/new/deep"))
        # the stand-in (/etc) changed: rebuild, check everything
        wait_for(lambda: w.wait(0.5) == inotify.FULL, "a full rebuild after /etc/new/deep appeared", timeout=10)
        assert "/etc/new/deep" in w.wds.values()


@needs_inotify
def test_idle_returns_early_when_the_force_file_appears(root):
    mon = node_drift.DriftMonitor(root, STATE, pool="worker")
    os.makedirs(host(root, "/run"))
    mon.check(config())
    assert mon._watch() is not None
    done, errors = threading.Event(), []

    def idle():
        try:
            mon.idle(60)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=idle, daemon=True)
    t.start()
    open(host(root, node_drift.FORCE_FILE), "w").close()
    assert done.wait(20), "idle() did not notice the force file"
    t.join(5)
    if errors:
        raise errors[0]


def test_without_inotify_idle_sleeps(root):
    slept = []
    mon = node_drift.DriftMonitor(root, STATE, sleep=slept.append, use_inotify=False)
    mon.check(config())
    mon.idle(7.0)
    assert slept == [7.0] and not mon.watching


def test_the_record_is_json_status_reads(root):
    with open(host(root, "/etc/motd"), "w") as f:
        f.write("x")
    node_drift.DriftMonitor(root, STATE, use_inotify=False).check(config())
    with open(host(root, STATE + "/drift.json")) as f:
        data = json.load(f)
    assert set(data) == {"config", "checkedAt", "drifted", "uncheckedContent"}


def test_describe_node_shows_each_drifted_path_and_tables_the_first_line():
    from agent.server.cli import views

    reason = core.reason("rendered-worker-1", [core.Drift("/etc/a", "$.storage.files.0", ("missing",)),
                                               core.Drift("/etc/b", "$.storage.files.1", ("mode 0600, expected 0644",))])
    node = {"name": "w1", "pool": "worker", "report": {"state": "Degraded", "reason": reason,
                                                       "currentConfig": "rendered-worker-1"}}
    text = views.describe_node(node, None, 0.0)
    assert ("State:               Degraded (unexpected on-disk state validating against rendered-worker-1: "
            "2 paths differ from it)\n                       /etc/a: missing\n"
            "                       /etc/b: mode 0600, expected 0644\n") in text
    assert views.node_reason(node) == reason.split("\n")[0]
    table = views.nodes_table([node], 0.0)
    assert "/etc/a" not in table and len([line for line in table.splitlines() if "hidden at this" not in line]) == 2


def test_status_says_degraded_and_lists_the_drift(root, capsys):
    from agent.commands import status as status_cmd
    from agent.node.status import RunRecorder

    rec = RunRecorder(root, "update", state_dir=STATE)
    rec.finish("done", 0)
    os.chmod(host(root, "/etc/motd"), 0o600)
    node_drift.DriftMonitor(root, STATE, use_inotify=False).check(config())
    code = status_cmd.run(type("A", (), {"root": root.top, "format": None, "long": False, "wait": False})())
    out = capsys.readouterr().out
    assert code == 2 and out.startswith("status: degraded\n")
    assert "drift: 1 path differs from rendered-worker-1 on disk" in out
    assert "  /etc/motd: mode 0600, expected 0644\n" in out and "node-agent update --force" in out


@needs_inotify
def test_a_link_enabling_a_disabled_unit_is_seen_by_the_watch(root):
    cfg = config()
    cfg.ignition["systemd"]["units"].append({"name": "z.service", "enabled": False})
    sent = []
    mon = node_drift.DriftMonitor(root, STATE, send=sent.append, pool="worker")
    assert mon.check(cfg) == []
    watcher = mon._watch()
    assert "/etc/systemd/system/multi-user.target.wants" in watcher.wds.values()
    link = "/etc/systemd/system/multi-user.target.wants/z.service"
    os.symlink("/usr/lib/systemd/system/z.service", host(root, link))
    mon.check_paths(events_until(watcher, link))
    assert sent and sent[-1]["state"] == "Degraded" and link in sent[-1]["reason"]


@needs_inotify
def test_drift_during_a_held_fetch_is_reported_before_the_fetch_returns(root):
    """The day-2 loop's fetch may be held turn.HOLD seconds by the server; the monitor watches
    the disk meanwhile (``during``): here the fetch returns only once the Degraded report went
    out, so a monitor that waited for the fetch first would never see it (the fetch gives up)."""
    reported = threading.Event()
    sent = []
    mon = node_drift.DriftMonitor(root, STATE, send=lambda p: (sent.append(p), reported.set()), pool="worker")
    mon.check(config())

    def held_fetch():
        os.chmod(host(root, "/etc/motd"), 0o666)  # while the server holds the fetch
        return "answer" if reported.wait(120) else "gave up"

    assert mon.during(held_fetch) == "answer"
    assert sent[-1]["state"] == "Degraded" and "/etc/motd: mode 0666, expected 0644" in sent[-1]["reason"]


@needs_inotify
def test_the_force_file_ends_the_wait_for_a_held_fetch_whose_answer_is_dropped(root):
    mon = node_drift.DriftMonitor(root, STATE, send=lambda p: None, pool="worker")
    mon.check(config())
    release = threading.Event()

    def held_fetch():
        os.makedirs(host(root, "/run"), exist_ok=True)
        open(host(root, "/run/node-agent-force"), "w").close()
        release.wait(120)
        return "late answer"

    assert mon.during(held_fetch) is None  # the pass that takes the force file fetches again
    left = mon._left
    assert left is not None and left.is_alive()
    assert mon.during(lambda: "next") == "next"  # one left running at most: this one waited for in place
    release.set()
    left.join(60)
    assert not left.is_alive()


@needs_inotify
def test_an_error_of_a_held_fetch_is_raised_on_the_loops_thread(root):
    mon = node_drift.DriftMonitor(root, STATE, send=lambda p: None, pool="worker")
    mon.check(config())

    def held_fetch():
        raise FetchError("HTTP 401", "https://server/config/worker", 401)

    with pytest.raises(FetchError):
        mon.during(held_fetch)
