"""Spec 3.x -> 2.2.0 (agent.ignition.translate_down2): what spec 2.2 can say is said, the rest is
refused naming each JSON path (the MCS answers 500 when its conversion fails, api.go)."""

import pytest

from agent.ignition.translate_down2 import NotExpressible, to_spec22

SHA512 = "sha512-" + "a" * 128


def test_files_units_users_and_merges():
    doc = {"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "https://x/y", "verification": {"hash": SHA512}}]},
                        "timeouts": {"httpTotal": 30},
                        "security": {"tls": {"certificateAuthorities": [{"source": "data:,ca"}]}}},
           "storage": {"files": [{"path": "/etc/a", "mode": 420, "contents": {"source": "data:,a", "compression": ""}},
                                 {"path": "/etc/b", "overwrite": True, "user": {"name": "core"}},
                                 {"path": "/etc/c", "append": [{"source": "data:,more"}]}],
                       "directories": [{"path": "/etc/d", "mode": 493}],
                       "links": [{"path": "/etc/l", "target": "/etc/a", "hard": False}]},
           "systemd": {"units": [{"name": "a.service", "enabled": True, "contents": "[Unit]\n",
                                  "dropins": [{"name": "10-x.conf", "contents": "[Service]\n"}]}]},
           "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"]}],
                      "groups": [{"name": "g", "gid": 1001}]}}
    out = to_spec22(doc)
    assert out["ignition"] == {"version": "2.2.0", "config": {"append": [{"source": "https://x/y",
                                                                           "verification": {"hash": SHA512}}]},
                               "timeouts": {"httpTotal": 30},
                               "security": {"tls": {"certificateAuthorities": [{"source": "data:,ca"}]}}}
    a, b, c = out["storage"]["files"]
    # Spec 3 files default to overwrite false, spec 2 files to true: always explicit.
    assert a == {"filesystem": "root", "path": "/etc/a", "overwrite": False, "mode": 420,
                 "contents": {"source": "data:,a"}}
    assert b == {"filesystem": "root", "path": "/etc/b", "overwrite": True, "user": {"name": "core"},
                 "contents": {"source": "data:,"}}
    assert c["append"] is True and c["contents"] == {"source": "data:,more"}
    assert out["storage"]["directories"] == [{"filesystem": "root", "path": "/etc/d", "mode": 493}]
    assert out["storage"]["links"] == [{"filesystem": "root", "path": "/etc/l", "target": "/etc/a", "hard": False}]
    assert out["systemd"]["units"][0]["dropins"] == [{"name": "10-x.conf", "contents": "[Service]\n"}]
    assert out["passwd"] == {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"]}],
                             "groups": [{"name": "g", "gid": 1001}]}


@pytest.mark.parametrize("doc,path", [
    ({"storage": {"filesystems": [{"device": "/dev/vdb", "format": "xfs"}]}}, "$.storage.filesystems"),
    ({"storage": {"luks": [{"name": "root", "device": "/dev/vda4"}]}}, "$.storage.luks"),
    ({"storage": {"files": [{"path": "/a", "contents": {"source": "data:,", "verification": {"hash": "sha256-00"}}}]}},
     "$.storage.files.0.contents.verification.hash"),
    ({"storage": {"files": [{"path": "/a", "contents": {"source": "https://x", "httpHeaders": [{"name": "A"}]}}]}},
     "$.storage.files.0.contents.httpHeaders"),
    ({"storage": {"files": [{"path": "/a", "contents": {"source": "gs://b/o"}}]}}, "$.storage.files.0.contents.source"),
    ({"storage": {"files": [{"path": "/a", "append": [{"source": "data:,1"}, {"source": "data:,2"}]}]}},
     "$.storage.files.0.append"),
    ({"passwd": {"users": [{"name": "old", "shouldExist": False}]}}, "$.passwd.users.0.shouldExist"),
    ({"kernelArguments": {"shouldExist": ["a"]}}, "$.kernelArguments"),
    ({"ignition": {"version": "3.4.0", "proxy": {"httpProxy": "http://p"}}}, "$.ignition.proxy"),
])
def test_refused_with_json_path(doc, path):
    doc = dict(doc)
    doc.setdefault("ignition", {"version": "3.4.0"})
    with pytest.raises(NotExpressible) as exc:
        to_spec22(doc)
    assert path in [p.path for p in exc.value.problems]
    assert path in str(exc.value) and "2.2.0" in str(exc.value)


def test_only_spec3_input():
    with pytest.raises(NotExpressible, match="spec 3.x"):
        to_spec22({"ignition": {"version": "2.2.0"}})


def test_round_trip_through_the_spec2_reader():
    # What we serve as 2.2.0, read back by the 2.2 -> 3.2 translator (agent.ignition.translate2, as the
    # MCO's ign-converter v22tov30), is the same config: nothing lost on the way down.
    from agent.ignition.translate2 import translate

    doc = {"ignition": {"version": "3.2.0"},
           "storage": {"files": [{"path": "/etc/a", "mode": 420, "overwrite": True, "contents": {"source": "data:,a"}}],
                       "directories": [{"path": "/etc/d", "mode": 493}],
                       "links": [{"path": "/etc/l", "target": "/etc/a"}]},
           "systemd": {"units": [{"name": "a.service", "enabled": True, "contents": "[Unit]\n"}]},
           "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"]}]}}
    back, problems = translate(to_spec22(doc))
    assert problems == []
    assert back["ignition"]["version"].startswith("3.")
    f = back["storage"]["files"][0]
    assert (f["path"], f["mode"], f["contents"]["source"], f.get("overwrite")) == ("/etc/a", 420, "data:,a", True)
    assert back["storage"]["directories"][0]["path"] == "/etc/d"
    assert back["storage"]["links"][0]["target"] == "/etc/a"
    assert back["systemd"]["units"] == doc["systemd"]["units"]
    assert back["passwd"]["users"][0]["sshAuthorizedKeys"] == ["ssh-ed25519 AAAA"]
