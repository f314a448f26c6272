"""agent.core.diff: what differs between two NodeConfigs."""

import base64
import gzip
import json

from agent.core.diff import diff
from agent.core.nodeconfig import NodeConfig


def cfg(files=(), units=(), users=(), dirs=(), links=(), kargs=None, **os_fields):
    ign = {"ignition": {"version": "3.4.0"},
           "storage": {"files": list(files), "directories": list(dirs), "links": list(links)},
           "systemd": {"units": list(units)}, "passwd": {"users": list(users)}}
    if kargs is not None:
        ign["kernelArguments"] = kargs
    return NodeConfig(ignition=ign, **os_fields)


def f(path, text=None, **kw):
    entry = {"path": path, **kw}
    if text is not None:
        entry["contents"] = {"source": "data:," + text}
    return entry


def test_identical_configs_have_no_changes():
    a = cfg([f("/etc/a", "x")], [{"name": "a.service", "enabled": True}])
    assert diff(a, a).empty
    assert diff(a, a).to_dict() == {"os": [], "files": [], "units": [], "sshKeys": [], "users": []}


def test_file_added_removed_changed_sorted():
    a = cfg([f("/etc/b", "1"), f("/etc/c", "1")])
    b = cfg([f("/etc/a", "1"), f("/etc/b", "2")])
    out = diff(a, b).to_dict()["files"]
    assert [(c["path"], c["change"]) for c in out] == [("/etc/a", "added"), ("/etc/b", "changed"),
                                                        ("/etc/c", "removed")]
    assert out[1]["fields"] == ["contents"]


def test_same_data_in_different_encodings_is_no_change():
    text = b"hello world\n"
    plain = f("/etc/a", "hello%20world%0A")
    b64 = {"path": "/etc/a", "contents": {"source": "data:;base64," + base64.b64encode(text).decode()}}
    gz = {"path": "/etc/a", "contents": {"source": "data:;base64," + base64.b64encode(gzip.compress(text)).decode(),
                                         "compression": "gzip"}}
    assert diff(cfg([plain]), cfg([b64])).empty
    assert diff(cfg([plain]), cfg([gz])).empty


def test_remote_sources_compare_url_and_hash():
    a = {"path": "/etc/a", "contents": {"source": "https://x/a", "verification": {"hash": "sha512-1"}}}
    b = {"path": "/etc/a", "contents": {"source": "https://x/a", "verification": {"hash": "sha512-2"}}}
    assert diff(cfg([a]), cfg([a])).empty
    assert diff(cfg([a]), cfg([b])).files[0].fields == ("contents",)


def test_mode_owner_append_fields():
    base = f("/etc/a", "x")
    assert diff(cfg([base]), cfg([dict(base, mode=420)])).empty  # 0644 is the default
    assert diff(cfg([base]), cfg([dict(base, mode=384)])).files[0].fields == ("mode",)
    assert diff(cfg([base]), cfg([dict(base, user={"name": "core"})])).files[0].fields == ("user",)
    assert diff(cfg([base]), cfg([dict(base, group={"id": 5})])).files[0].fields == ("group",)
    assert diff(cfg([base]), cfg([dict(base, append=[{"source": "data:,y"}])])).files[0].fields == ("append",)


def test_directories_and_links_count_like_files():
    a = cfg(dirs=[{"path": "/etc/d"}], links=[{"path": "/etc/l", "target": "/a"}])
    b = cfg(dirs=[{"path": "/etc/d", "mode": 448}], links=[{"path": "/etc/l", "target": "/b"}])
    out = diff(a, b).to_dict()["files"]
    assert out == [
        {"path": "/etc/d", "kind": "directory", "change": "changed", "fields": ["mode"]},
        {"path": "/etc/l", "kind": "link", "change": "changed", "fields": ["target"]},
    ]
    # a file turning into a link is one change of kind
    kind = diff(cfg([f("/etc/x", "1")]), cfg(links=[{"path": "/etc/x", "target": "/y"}])).files[0]
    assert (kind.change, kind.fields, kind.kind) == ("changed", ("kind",), "link")


def test_units_and_dropins():
    a = cfg(units=[{"name": "a.service", "contents": "[Unit]", "enabled": True,
                    "dropins": [{"name": "1.conf", "contents": "x"}, {"name": "2.conf", "contents": "y"}]},
                   {"name": "gone.service"}])
    b = cfg(units=[{"name": "a.service", "contents": "[Unit]", "enabled": False, "mask": True,
                    "dropins": [{"name": "1.conf", "contents": "z"}, {"name": "3.conf", "contents": "y"}]},
                   {"name": "new.timer"}])
    out = diff(a, b).to_dict()["units"]
    assert out == [
        {"name": "a.service", "change": "changed", "fields": ["enabled", "mask", "dropins"],
         "dropins": {"added": ["3.conf"], "removed": ["2.conf"], "changed": ["1.conf"]}},
        {"name": "gone.service", "change": "removed", "fields": [], "dropins": {"added": [], "removed": [], "changed": []}},
        {"name": "new.timer", "change": "added", "fields": [], "dropins": {"added": [], "removed": [], "changed": []}},
    ]


def test_ssh_keys_per_user_and_other_user_fields():
    a = cfg(users=[{"name": "core", "sshAuthorizedKeys": ["k1", "k2"]}])
    b = cfg(users=[{"name": "core", "sshAuthorizedKeys": ["k2", "k3"], "passwordHash": "$6$x"},
                   {"name": "ops", "sshAuthorizedKeys": ["k9"]}])
    changes = diff(a, b).to_dict()
    assert changes["sshKeys"] == [{"user": "core", "added": ["k3"], "removed": ["k1"]},
                                  {"user": "ops", "added": ["k9"], "removed": []}]
    assert changes["users"] == [{"user": "core", "change": "changed", "fields": ["passwordHash"]}]


def test_os_level_fields():
    a = cfg(os_image_url="img@sha256:1", kernel_arguments=("a=1",), extensions=("usbguard",),
            kargs={"shouldExist": ["x"]})
    b = cfg(os_image_url="img@sha256:2", kernel_arguments=("a=1", "b"), kernel_type="realtime",
            extensions=("usbguard",), fips=True, kargs={"shouldExist": ["x"], "shouldNotExist": ["y"]})
    fields = [c["field"] for c in diff(a, b).to_dict()["os"]]
    assert fields == ["osImageURL", "kernelArguments", "kernelArguments.shouldNotExist", "kernelType", "fips"]
    # "" and "default" are the same kernel; extension order does not matter
    assert diff(cfg(kernel_type=""), cfg(kernel_type="default")).empty
    assert diff(cfg(extensions=("a", "b")), cfg(extensions=("b", "a"))).empty


def test_to_dict_is_json_and_deterministic():
    a = cfg([f("/etc/z", "1"), f("/etc/a", "1")])
    b = cfg([f("/etc/a", "2"), f("/etc/z", "2")])
    one = json.dumps(diff(a, b).to_dict())
    assert one == json.dumps(diff(a, b).to_dict())
    assert json.loads(one)["files"][0]["path"] == "/etc/a"


def test_decoded_data_is_kept_for_content_rules():
    change = diff(cfg([f("/etc/a", "old")]), cfg([f("/etc/a", "new")])).files[0]
    assert (change.old_bytes(), change.new_bytes()) == (b"old", b"new")
