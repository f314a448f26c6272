"""The apply engine on real scratch roots: contents, modes, owners, links, units, users, day 2."""

import base64
import gzip
import hashlib
import json
import os
from dataclasses import dataclass

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.errors import ApplyError, ConfigError, FetchError, HostError
from agent.host.root import PathEscapeError, Root
from agent.node.apply import apply_config

UNIT = "[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\nAlias=x-alias.service\n"


def data_url(payload: bytes, gz: bool = False) -> dict:
    if gz:
        payload = gzip.compress(payload)
    out = {"source": "data:;base64," + base64.b64encode(payload).decode()}
    if gz:
        out["compression"] = "gzip"
    return out


def cfg(storage=None, units=None, users=None, name="rendered-1", **kw) -> NodeConfig:
    ign = {"ignition": {"version": "3.4.0"}}
    if storage:
        ign["storage"] = storage
    if units:
        ign["systemd"] = {"units": units}
    if users:
        ign["passwd"] = {"users": users}
    return NodeConfig(ignition=ign, name=name, **kw)


@pytest.fixture
def root(tmp_path):
    top = tmp_path / "root"
    (top / "etc").mkdir(parents=True)
    (top / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000:CoreOS:/home/core:/bin/bash\n")
    (top / "etc/group").write_text("root:x:0:\nwheel:x:10:\ncore:x:1000:\n")
    (top / "etc/shadow").write_text("root:*:19000:0:99999:7:::\ncore:*:19000:0:99999:7:::\n")
    (top / "etc/gshadow").write_text("root:::\nwheel:::\ncore:!::\n")
    for f in ("shadow", "gshadow"):
        os.chmod(top / "etc" / f, 0)
    return Root(str(top))


def st(root: Root, p: str):
    return os.lstat(root.path(p, follow_last=False))


def test_two_hundred_files_byte_identical_then_second_apply_changes_nothing(root):
    files = []
    expected = {}
    for i in range(200):
        body = hashlib.sha256(str(i).encode()).digest() * (i % 7 + 1)
        mode = (0o600, 0o640, 0o644, 0o755)[i % 4]
        uid, gid = (0, 0) if i % 3 else (1000, 1000)
        path = f"/etc/many/d{i % 10}/file-{i:03d}"
        f = {"path": path, "contents": data_url(body, gz=i % 2 == 0), "mode": mode}
        f["user"] = {"id": uid} if i % 2 else {"name": "core" if uid else "root"}
        f["group"] = {"id": gid}
        files.append(f)
        expected[path] = (body, mode, uid, gid)
    c = cfg({"files": files})
    first = apply_config(root, c)
    assert len(first.changed) == 200 and first.unchanged == 0
    for path, (body, mode, uid, gid) in expected.items():
        s = st(root, path)
        assert root.read_bytes(path) == body
        assert (s.st_mode & 0o7777, s.st_uid, s.st_gid) == (mode, uid, gid), path
    second = apply_config(root, c)
    assert second.changed == [] and second.changed_paths == []
    assert second.unchanged == 200


def test_secret_is_never_group_or_world_readable_and_umask_does_not_matter(root):
    old = os.umask(0)
    try:
        apply_config(root, cfg({"files": [{"path": "/etc/secret.key", "contents": data_url(b"k"), "mode": 0o600}]}))
    finally:
        os.umask(old)
    assert st(root, "/etc/secret.key").st_mode & 0o777 == 0o600
    assert not [n for n in os.listdir(root.path("/etc")) if n.startswith(".node-agent-tmp")]


def test_directories_links_and_hard_links(root):
    c = cfg({
        "directories": [{"path": "/var/lib/app", "mode": 0o750, "user": {"name": "core"}}],
        "files": [{"path": "/var/lib/app/data", "contents": data_url(b"payload")}],
        "links": [{"path": "/etc/app-link", "target": "/var/lib/app/data"},
                  {"path": "/etc/app-hard", "target": "/var/lib/app/data", "hard": True},
                  {"path": "/etc/chain", "target": "/etc/app-link"}],
    })
    apply_config(root, c)
    d = st(root, "/var/lib/app")
    assert (d.st_mode & 0o7777, d.st_uid) == (0o750, 1000)
    assert os.readlink(root.path("/etc/app-link", follow_last=False)) == "/var/lib/app/data"
    assert st(root, "/etc/app-hard").st_ino == st(root, "/var/lib/app/data").st_ino
    assert root.read_bytes("/etc/chain") == b"payload"
    assert apply_config(root, c).changed == []


def test_append_is_added_once(root):
    (open(root.path("/etc/hosts"), "w")).write("127.0.0.1 localhost\n")
    c = cfg({"files": [{"path": "/etc/hosts", "append": [data_url(b"10.0.0.1 api\n")]}]})
    apply_config(root, c)
    apply_config(root, c)
    assert root.read_text("/etc/hosts") == "127.0.0.1 localhost\n10.0.0.1 api\n"


def test_overwrite_false_refuses_foreign_file_but_replaces_our_own(root):
    open(root.path("/etc/foreign.conf"), "w").write("admin's\n")
    c = cfg({"files": [{"path": "/etc/foreign.conf", "contents": data_url(b"ours\n")}]})
    with pytest.raises(ApplyError, match=r"\$\.storage\.files\.0: /etc/foreign.conf already exists.*overwrite"):
        apply_config(root, c)
    assert root.read_text("/etc/foreign.conf") == "admin's\n"
    # A file we wrote earlier (managed record) is ours to replace on day 2.
    v1 = cfg({"files": [{"path": "/etc/ours.conf", "contents": data_url(b"v1\n")}]})
    v2 = cfg({"files": [{"path": "/etc/ours.conf", "contents": data_url(b"v2\n")}]}, name="rendered-2")
    apply_config(root, v1)
    apply_config(root, v2)
    assert root.read_text("/etc/ours.conf") == "v2\n"
    # Same contents are never a conflict.
    open(root.path("/etc/same.conf"), "w").write("same\n")
    apply_config(root, cfg({"files": [{"path": "/etc/same.conf", "contents": data_url(b"same\n")}]}))


def test_day2_removes_what_the_previous_config_had(root):
    v1 = cfg({"files": [{"path": "/etc/a", "contents": data_url(b"a")}, {"path": "/etc/b", "contents": data_url(b"b")}]},
             units=[{"name": "x.service", "enabled": True, "contents": UNIT}])
    v2 = cfg({"files": [{"path": "/etc/a", "contents": data_url(b"a")}]}, name="rendered-2")
    apply_config(root, v1)
    assert os.path.islink(root.path("/etc/systemd/system/multi-user.target.wants/x.service", follow_last=False))
    r = apply_config(root, v2, v1)
    assert not root.exists("/etc/b")
    assert not root.exists("/etc/systemd/system/x.service")
    assert not root.exists("/etc/systemd/system/multi-user.target.wants/x.service")
    assert not root.exists("/etc/systemd/system/x-alias.service")
    assert "/etc/b" in r.changed_paths and root.exists("/etc/a")


def test_offline_units_enable_mask_dropins_and_vendor_units(root):
    vendor = root.path("/usr/lib/systemd/system")
    os.makedirs(vendor)
    with open(os.path.join(vendor, "chronyd.service"), "w") as f:
        f.write("[Service]\nExecStart=/usr/sbin/chronyd\n[Install]\nWantedBy=multi-user.target\nAlso=chrony-wait.service\n")
    with open(os.path.join(vendor, "chrony-wait.service"), "w") as f:
        f.write("[Service]\nType=oneshot\n[Install]\nRequiredBy=time-sync.target\n")
    c = cfg(units=[
        {"name": "x.service", "enabled": True, "contents": UNIT,
         "dropins": [{"name": "10-env.conf", "contents": "[Service]\nEnvironment=A=1\n"}]},
        {"name": "chronyd.service", "enabled": True},
        {"name": "bad.service", "mask": True},
    ])
    r = apply_config(root, c)
    link = lambda p: os.readlink(root.path(p, follow_last=False))  # noqa: E731
    assert link("/etc/systemd/system/multi-user.target.wants/x.service") == "/etc/systemd/system/x.service"
    assert link("/etc/systemd/system/x-alias.service") == "/etc/systemd/system/x.service"
    assert link("/etc/systemd/system/multi-user.target.wants/chronyd.service") == "/usr/lib/systemd/system/chronyd.service"
    assert link("/etc/systemd/system/time-sync.target.requires/chrony-wait.service") == \
        "/usr/lib/systemd/system/chrony-wait.service"
    assert link("/etc/systemd/system/bad.service") == "/dev/null"
    assert root.read_text("/etc/systemd/system/x.service.d/10-env.conf") == "[Service]\nEnvironment=A=1\n"
    assert "daemon-reload (offline root)" in r.not_performed
    # Disable removes the links again.
    off = cfg(units=[{"name": "chronyd.service", "enabled": False}], name="rendered-2")
    apply_config(root, off)
    assert not root.exists("/etc/systemd/system/multi-user.target.wants/chronyd.service")


class FakeSystemd:
    def __init__(self, fail_on=None):
        self.calls = []
        self.fail_on = fail_on

    def _rec(self, name, arg=None):
        self.calls.append((name, arg))
        if self.fail_on == name:
            raise RuntimeError(f"{name} failed over D-Bus")

    def daemon_reload(self):
        self._rec("daemon_reload")

    def enable_unit_files(self, names):
        self._rec("enable_unit_files", list(names))

    def disable_unit_files(self, names):
        self._rec("disable_unit_files", list(names))

    def mask_unit_files(self, names):
        self._rec("mask_unit_files", list(names))

    def unmask_unit_files(self, names):
        self._rec("unmask_unit_files", list(names))


class LiveRoot(Root):
    """A scratch root that claims to be live, to drive the live (D-Bus) branch with a fake."""

    @property
    def is_live(self):
        return True


def test_live_root_uses_systemd_and_failure_rolls_back(root):
    live = LiveRoot(root.top)
    c = cfg({"files": [{"path": "/etc/app.conf", "contents": data_url(b"x")}]},
            units=[{"name": "x.service", "enabled": True, "contents": UNIT}, {"name": "y.service", "mask": True}])
    sd = FakeSystemd()
    r = apply_config(live, c, systemd=sd)
    assert sd.calls == [("daemon_reload", None), ("mask_unit_files", ["y.service"]),
                        ("enable_unit_files", ["x.service"])]
    assert r.live_actions == ["daemon-reload", "mask y.service", "enable x.service"]

    bad = cfg({"files": [{"path": "/etc/app.conf", "contents": data_url(b"v2")}]},
              units=[{"name": "z.service", "enabled": True, "contents": UNIT}], name="rendered-2")
    sd2 = FakeSystemd(fail_on="enable_unit_files")
    with pytest.raises(ApplyError, match="systemd enable z.service.*rolled back") as ei:
        apply_config(live, bad, c, systemd=sd2)
    assert ei.value.exit_code == 75
    assert root.read_bytes("/etc/app.conf") == b"x"
    assert not root.exists("/etc/systemd/system/z.service")
    assert ("disable_unit_files", ["z.service"]) in sd2.calls and sd2.calls[-1] == ("daemon_reload", None)


def test_users_created_and_ssh_keys_written(root):
    c = cfg(users=[{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA core@x"]},
                   {"name": "alice", "groups": ["wheel"], "sshAuthorizedKeys": ["ssh-rsa BBBB alice"]}])
    apply_config(root, c)
    passwd = root.read_text("/etc/passwd")
    assert "alice:x:1001:1001::/home/alice:/bin/bash" in passwd
    assert "wheel:x:10:alice" in root.read_text("/etc/group")
    assert "alice:!:" in root.read_text("/etc/shadow")
    assert st(root, "/etc/shadow").st_mode & 0o777 == 0
    for user, uid in (("core", 1000), ("alice", 1001)):
        d = st(root, f"/home/{user}/.ssh/authorized_keys.d")
        f = st(root, f"/home/{user}/.ssh/authorized_keys.d/ignition")
        assert (d.st_mode & 0o777, d.st_uid) == (0o700, uid)
        assert (f.st_mode & 0o777, f.st_uid, f.st_gid) == (0o600, uid, uid)
    assert root.read_text("/home/alice/.ssh/authorized_keys.d/ignition") == "ssh-rsa BBBB alice\n"
    assert apply_config(root, c).changed == []


def test_unknown_owner_name_is_a_clear_error(root):
    c = cfg({"files": [{"path": "/etc/x", "contents": data_url(b"x"), "user": {"name": "nobody-here"}}]})
    with pytest.raises(ApplyError, match=r"\$\.storage\.files\.0\.user\.name: user 'nobody-here' does not exist"):
        apply_config(root, c)
    assert not root.exists("/etc/x")


def test_path_escapes_are_refused_and_nothing_written(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink("../../outside", root.path("/etc/escape"))
    c = cfg({"files": [{"path": "/etc/ok", "contents": data_url(b"x")},
                       {"path": "/etc/escape/pwned", "contents": data_url(b"x")}]})
    with pytest.raises(PathEscapeError, match=r"\$\.storage\.files\.1.*leaves the root.*nothing was changed"):
        apply_config(root, c)
    assert os.listdir(outside) == [] and not root.exists("/etc/ok")
    c2 = cfg({"files": [{"path": "/etc/../../outside/pwned", "contents": data_url(b"x")}]})
    with pytest.raises(PathEscapeError):
        apply_config(root, c2)
    assert os.listdir(outside) == []
    # An absolute link is followed inside the root (chroot semantics), never to the host.
    os.symlink(str(outside), root.path("/etc/abs"))
    apply_config(root, cfg({"files": [{"path": "/etc/abs/f", "contents": data_url(b"in")}]}))
    assert os.listdir(outside) == []
    assert open(os.path.join(root.top, str(outside).lstrip("/"), "f"), "rb").read() == b"in"


def test_invalid_pull_secret_refused_before_anything_is_written(root):
    bad = json.dumps({"auths": {"quay.io": {"auth": base64.b64encode(b"no-colon").decode()}}}).encode()
    c = cfg({"files": [{"path": "/etc/first", "contents": data_url(b"1")},
                       {"path": "/var/lib/kubelet/config.json", "contents": data_url(bad)}]})
    with pytest.raises(ConfigError) as ei:
        apply_config(root, c)
    assert "$.storage.files.1.contents.auths.quay.io.auth" in str(ei.value)
    assert ei.value.exit_code == 65
    assert not root.exists("/etc/first") and not root.exists("/var/lib/kubelet")


@dataclass
class _Res:
    body: bytes


class FakeFetcher:
    def __init__(self, bodies, fail=None):
        self.bodies, self.fail, self.calls = bodies, fail, []

    def fetch(self, url, verification=None):
        self.calls.append((url, verification))
        if url == self.fail:
            raise FetchError(f"GET {url}: 404 not found", url=url, status=404)
        return _Res(self.bodies[url])


def test_http_contents_fetched_before_any_change(root):
    f = FakeFetcher({"https://s/a": b"A", "https://s/b.gz": gzip.compress(b"B")}, fail="https://s/c")
    good = cfg({"files": [
        {"path": "/etc/a", "contents": {"source": "https://s/a", "verification": {"hash": "sha512-" + hashlib.sha512(b"A").hexdigest()}}},
        {"path": "/etc/b", "contents": {"source": "https://s/b.gz", "compression": "gzip",
                                        "verification": {"hash": "sha256-" + hashlib.sha256(b"B").hexdigest()}}}]})
    apply_config(root, good, fetcher=f)
    assert root.read_bytes("/etc/a") == b"A" and root.read_bytes("/etc/b") == b"B"
    assert f.calls[0][1] == {"hash": "sha512-" + hashlib.sha512(b"A").hexdigest()}
    assert f.calls[1][1] is None  # decompressed contents are verified here, not by the fetcher
    failing = cfg({"files": [{"path": "/etc/z", "contents": data_url(b"z")},
                             {"path": "/etc/c", "contents": {"source": "https://s/c"}}]}, name="rendered-2")
    with pytest.raises(FetchError):
        apply_config(root, failing, fetcher=f)
    assert not root.exists("/etc/z")


def test_data_url_hash_mismatch_is_refused(root):
    c = cfg({"files": [{"path": "/etc/h", "contents": dict(data_url(b"x"), verification={"hash": "sha512-00"})}]})
    with pytest.raises(FetchError, match="verification.hash"):
        apply_config(root, c)


def test_dry_run_changes_nothing(root):
    c = cfg({"files": [{"path": "/etc/dry", "contents": data_url(b"x")}]})
    r = apply_config(root, c, dry_run=True)
    assert r.changed == ["file /etc/dry"] and r.dry_run
    assert not root.exists("/etc/dry") and not root.exists("/var/lib/node-agent")


def test_offline_os_changes_are_pending_and_not_performed(root):
    c = cfg(os_image_url="quay.io/ocp/rhcos@sha256:abc", kernel_arguments=("nosmt", "mitigations=auto"))
    r = apply_config(root, c)
    assert not r.os_update_staged
    assert any(s.startswith("rebase to quay.io/ocp/rhcos@sha256:abc (offline root") for s in r.not_performed)
    assert any(s.startswith("kernel arguments +nosmt +mitigations=auto") for s in r.not_performed)
    pending = json.loads(root.read_text("/var/lib/node-agent/pending-os.json"))
    assert pending["osImageURL"] == "quay.io/ocp/rhcos@sha256:abc"
    assert pending["kernelArguments"] == {"append": ["nosmt", "mitigations=auto"], "delete": []}


class FakeRpmOstree:
    def __init__(self, available=True, fail=False):
        self._available, self.fail, self.calls = available, fail, []

    def available(self):
        return self._available

    def status(self):
        return {"deployments": [{"booted": True, "container-image-reference": "ostree-unverified-registry:quay.io/old"}]}

    def booted_kargs(self):
        return ("root=UUID=1", "nosmt")

    def kargs(self, append, delete):
        self.calls.append(("kargs", tuple(append), tuple(delete)))
        if self.fail:
            raise HostError("rpm-ostree kargs failed")

    def rebase(self, image):
        self.calls.append(("rebase", image))

    def cleanup_pending(self):
        self.calls.append(("cleanup",))


def test_live_os_changes_staged_against_booted_state(root):
    live = LiveRoot(root.top)
    ro = FakeRpmOstree()
    c = cfg({"files": [{"path": "/etc/f", "contents": data_url(b"f")}]},
            os_image_url="quay.io/new", kernel_arguments=("nosmt", "quiet"))
    r = apply_config(live, c, rpmostree=ro, systemd=FakeSystemd())
    assert ro.calls == [("kargs", ("quiet",), ()), ("rebase", "quay.io/new")]
    assert r.os_update_staged
    ro_fail = FakeRpmOstree(fail=True)
    with pytest.raises(ApplyError):
        apply_config(live, cfg({"files": [{"path": "/etc/f", "contents": data_url(b"g")}]}, kernel_arguments=("x",)),
                     rpmostree=ro_fail, systemd=FakeSystemd())
    assert ro_fail.calls[-1] == ("cleanup",) and root.read_bytes("/etc/f") == b"f"
    with pytest.raises(HostError, match="needs rpm-ostree"):
        apply_config(live, cfg(kernel_arguments=("y",)), rpmostree=FakeRpmOstree(available=False))


def test_bad_gzip_names_the_field(root):
    c = cfg({"files": [{"path": "/etc/g", "contents": {"source": "data:;base64,AAAA", "compression": "gzip"}}]})
    with pytest.raises(ConfigError, match=r"\$\.storage\.files\.0\.contents\.compression: invalid gzip"):
        apply_config(root, c)
    assert not root.exists("/etc/g")


# --- batched durable writes (agent.host.files.write_many) ------------------------------------

def test_write_many_writes_every_file_with_its_mode(tmp_path):
    from agent.host import files

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"old")
    items = [(str(tmp_path / d / f"f{i}"), f"data {i}".encode(), 0o600 if i % 2 else 0o644, -1, -1)
             for i in range(600) for d in ("a", "b")[i % 2]]  # more than one chunk
    items.append((str(tmp_path / "a" / "x"), b"new", 0o640, -1, -1))
    files.write_many(items)
    for path, data, mode, _, _ in items:
        assert open(path, "rb").read() == data
        assert os.stat(path).st_mode & 0o7777 == mode
    assert not [n for d in ("a", "b") for n in os.listdir(tmp_path / d) if n.startswith(files.TMP_PREFIX)]


def test_write_many_failure_before_the_renames_leaves_no_trace(tmp_path, monkeypatch):
    from agent.host import files

    (tmp_path / "x").write_bytes(b"old")
    real_fsync, calls = os.fsync, []

    def failing_fsync(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(5, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    items = [(str(tmp_path / f"f{i}"), b"new", 0o644, -1, -1) for i in range(5)]
    items.append((str(tmp_path / "x"), b"new", 0o644, -1, -1))
    with pytest.raises(OSError, match="Input/output error"):  # the injected one, not another
        files.write_many(items)
    assert sorted(os.listdir(tmp_path)) == ["x"]  # no new file, no temporary
    assert (tmp_path / "x").read_bytes() == b"old"


def test_a_rollback_that_could_not_undo_everything_names_what_it_left_never_all_rolled_back():
    from agent.node.apply import rollback_outcome

    assert rollback_outcome([]) == "every change was rolled back"
    text = rollback_outcome(["/etc/x: Permission denied", "daemon-reload: timeout"])
    assert "all" not in text and "2 change(s) it could not undo" in text
    assert "/etc/x: Permission denied; daemon-reload: timeout" in text and "restore those by hand" in text
