"""Table tests: each invalid config must be reported at its JSON path with its rule; valid ones clean."""

import copy

import pytest

from agent.ignition.validate import validate_ignition
from agent.ignition.values import clean_path

H512 = "sha512-" + "a" * 128
H256 = "sha256-" + "b" * 64


def cfg(version="3.4.0", **sections):
    doc = {"ignition": {"version": version}}
    doc.update(sections)
    return doc


def files(*entries, version="3.4.0"):
    return cfg(version, storage={"files": list(entries)})


def units(*entries, version="3.4.0"):
    return cfg(version, systemd={"units": list(entries)})


def errors(doc):
    return [(p.path, p.rule) for p in validate_ignition(doc) if p.is_error]


def warnings(doc):
    return [(p.path, p.rule) for p in validate_ignition(doc) if not p.is_error]


VALID = [
    cfg("3.0.0"), cfg("3.1.0"), cfg("3.2.0"), cfg("3.3.0"), cfg("3.4.0"), cfg("3.5.0"),
    files({"path": "/etc/hostname", "mode": 420, "contents": {"source": "data:,node1"}}),
    files({"path": "/etc/a", "overwrite": True, "contents": {"source": ""}}),
    files({"path": "/etc/a", "contents": {"source": "https://example.com/a", "verification": {"hash": H512}}}),
    files({"path": "/etc/a", "contents": {"source": "http://e.com/a", "verification": {"hash": H256}}},
          version="3.1.0"),
    files({"path": "/etc/a", "contents": {"source": "data:;base64,H4sIAAAAAAAA/8tIzcnJBwCGphA2BQAAAA==",
                                          "compression": "gzip"}}),
    files({"path": "/etc/a", "contents": {"source": "s3://bucket/key?versionId=3"}}),
    files({"path": "/etc/a", "contents": {"source": "tftp://host/file"}}),
    files({"path": "/etc/a", "contents": {"source": "gs://bucket/obj"}}, version="3.2.0"),
    files({"path": "/etc/a", "contents": {"source": "arn:aws:s3:::bucket/obj"}}),
    files({"path": "/etc/a", "contents": {"source": "https://e.com/a",
                                          "httpHeaders": [{"name": "Authorization", "value": "x"}]}}),
    files({"path": "/etc/a", "append": [{"source": "data:,x"}, {"source": "data:,y"}]}),
    files({"path": "/etc/a", "mode": 0o7777}),
    cfg(storage={"directories": [{"path": "/var/x", "mode": 493}]}),
    cfg(storage={"links": [{"path": "/etc/l", "target": "/etc/a"}, {"path": "/etc/h", "target": "/etc/a",
                                                                    "hard": True}]}),
    units({"name": "a.service", "enabled": True, "contents": "[Service]\nExecStart=/bin/true\n[Install]\n"
           "WantedBy=multi-user.target\n", "dropins": [{"name": "10-x.conf", "contents": "[Service]\nX=1\n"}]}),
    units({"name": "b.timer", "mask": True}, {"name": "c@.service", "enabled": False}),
    units({"name": "kubelet.service", "dropins": [{"name": "10-a.conf"}]}),
    cfg(passwd={"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA x"], "uid": 1000,
                           "groups": ["wheel"], "homeDir": "/home/core", "shell": "/bin/bash", "gecos": "C",
                           "noCreateHome": False, "noUserGroup": False, "noLogInit": True, "system": False,
                           "primaryGroup": "core", "passwordHash": "$6$x"}],
                "groups": [{"name": "g", "gid": 1001, "system": True}]}),
    cfg(kernelArguments={"shouldExist": ["a=1", "b"], "shouldNotExist": ["c"]}),
    cfg(ignition={"version": "3.4.0", "config": {"merge": [{"source": "https://e.com/m.ign",
                                                            "verification": {"hash": H512}}]},
                  "security": {"tls": {"certificateAuthorities": [{"source": "data:,-----BEGIN%20CERTIFICATE-----%0AMIIB%0A-----END%20CERTIFICATE-----"}]}},
                  "timeouts": {"httpResponseHeaders": 10, "httpTotal": 0},
                  "proxy": {"httpsProxy": "http://proxy:3128", "noProxy": ["a"]}}),
    cfg(storage={"filesystems": [{"device": "/dev/disk/by-label/var", "format": "xfs", "path": "/var",
                                  "label": "var", "wipeFilesystem": False}],
                 "disks": [{"device": "/dev/vda", "partitions": [{"label": "var", "number": 5, "sizeMiB": 0,
                                                                   "typeGuid": "0FC63DAF-8483-4772-8E79-3D69D8477DE4"}]}]}),
    cfg(storage={"luks": [{"name": "root", "device": "/dev/vda4", "clevis": {"tpm2": True}, "discard": True}]}),
    cfg(storage={"files": None}, systemd=None),  # JSON null reads as unset
    cfg("3.6.0"), cfg("3.6.0", storage={"files": [{"path": "/usr/local/bin/s", "mode": 0o2541}]}),
    cfg("3.7.0-experimental"),  # Ignition accepts it (config/v3_7_experimental/config.go): a warning here
    # Ignition checks a digest's length only (config/v3_*/types/verification.go)
    files({"path": "/a", "contents": {"source": "data:,x", "verification": {"hash": "sha512-" + "g" * 128}}}),
    cfg(ignition={"version": "3.4.0", "timeouts": {"httpTotal": -1}}),  # no sign check in Ignition
    cfg(passwd={"users": [{"uid": 1}], "groups": [{"gid": 2}]}),  # users/groups need no name there
    units({"name": ".service"}),  # Go's path.Ext(".service") is ".service"
    units({"name": "a.service", "contents": "no section yet\n[Unit]\nA=1"}),  # go-systemd skips the head
    units({"name": "a.service", "contents": "[Unit\nStill the name]\nA=1"}),  # a section name spans lines
    # partition layouts of Ignition's positive tests (tests/positive/partitions/*.go)
    cfg(storage={"disks": [{"device": "/dev/vdb", "partitions": [
        {"label": "a", "number": 1, "startMiB": 1, "sizeMiB": 32}, {"label": "b", "number": 3, "sizeMiB": 0,
                                                                   "startMiB": 0},
        {"number": 4, "shouldExist": False, "wipePartitionEntry": True}, {"number": 9, "shouldExist": False},
        {"label": "auto", "number": 0, "sizeMiB": 64}]}]}),
    cfg(storage={"disks": [{"device": "/dev/vdb", "partitions": [{"number": -1}]}]}),  # only 0 means "none"
    # Go's decoder matches keys case-insensitively: "Path" sets path (and is an unused key warning)
    files({"Path": "/etc/a", "Mode": 420}),
]


@pytest.mark.parametrize("doc", VALID)
def test_valid_configs_have_no_errors(doc):
    assert errors(doc) == []


INVALID = [
    # (doc, path, rule)
    ({}, "$.ignition.version", "version-missing"),
    ({"ignition": {}}, "$.ignition.version", "version-missing"),
    (cfg("3.4"), "$.ignition.version", "version-invalid"),
    (cfg("2.2.0"), "$.ignition.version", "version-2x"),
    (cfg("3.7.0"), "$.ignition.version", "version-unsupported"),
    (cfg("3.5.0-experimental"), "$.ignition.version", "version-invalid"),
    ({"ignition": {"version": 3}}, "$.ignition.version", "type"),
    (files({"path": "etc/x"}), "$.storage.files.0.path", "path-absolute"),
    (files({"path": "/etc/../x"}), "$.storage.files.0.path", "path-clean"),
    (files({"path": "/etc//x"}), "$.storage.files.0.path", "path-clean"),
    (files({"path": "/etc/x/"}), "$.storage.files.0.path", "path-clean"),
    (files({"path": "/etc/./x"}), "$.storage.files.0.path", "path-clean"),
    (files({"mode": 420}), "$.storage.files.0.path", "path-required"),
    (files({"path": "/a", "overwrite": True}), "$.storage.files.0.overwrite", "overwrite-nil-source"),
    (files({"path": "/a", "contents": {"source": "ftp://h/x"}}), "$.storage.files.0.contents.source", "url-scheme"),
    (files({"path": "/a", "contents": {"source": "/etc/x"}}), "$.storage.files.0.contents.source", "url-scheme"),
    (files({"path": "/a", "contents": {"source": "gs://b/o"}}, version="3.1.0"),
     "$.storage.files.0.contents.source", "url-scheme"),
    (files({"path": "/a", "contents": {"source": "arn:aws:s3:::b/o"}}, version="3.3.0"),
     "$.storage.files.0.contents.source", "url-scheme"),
    (files({"path": "/a", "contents": {"source": "arn:aws:ec2:::b/o"}}), "$.storage.files.0.contents.source",
     "s3-arn"),
    (files({"path": "/a", "contents": {"source": "s3://b/o?versionId="}}), "$.storage.files.0.contents.source",
     "s3-version-id"),
    (files({"path": "/a", "contents": {"source": "http://h:port/x"}}), "$.storage.files.0.contents.source",
     "url-invalid"),
    (files({"path": "/a", "contents": {"source": "http://h/%zz"}}), "$.storage.files.0.contents.source",
     "url-invalid"),
    (files({"path": "/a", "contents": {"source": "data:;base64,!!!"}}), "$.storage.files.0.contents.source",
     "data-url"),
    (files({"path": "/a", "contents": {"source": "data:nocomma"}}), "$.storage.files.0.contents.source", "data-url"),
    (files({"path": "/a", "contents": {"source": "data:,x", "compression": "xz"}}),
     "$.storage.files.0.contents.compression", "compression-invalid"),
    (files({"path": "/a", "contents": {"source": "data:,x", "verification": {"hash": "sha512"}}}),
     "$.storage.files.0.contents.verification.hash", "hash-malformed"),
    (files({"path": "/a", "contents": {"source": "data:,x", "verification": {"hash": "md5-" + "a" * 32}}}),
     "$.storage.files.0.contents.verification.hash", "hash-function"),
    (files({"path": "/a", "contents": {"source": "data:,x", "verification": {"hash": H256}}}, version="3.0.0"),
     "$.storage.files.0.contents.verification.hash", "hash-function"),
    (files({"path": "/a", "contents": {"source": "data:,x", "verification": {"hash": "sha512-" + "a" * 64}}}),
     "$.storage.files.0.contents.verification.hash", "hash-size"),
    (files({"path": "/a", "contents": {"verification": {"hash": H512}}}),
     "$.storage.files.0.contents.verification.hash", "verification-nil-source"),
    (files({"path": "/a", "contents": {"source": "s3://b/o", "httpHeaders": [{"name": "A", "value": "b"}]}}),
     "$.storage.files.0.contents.httpHeaders", "httpheaders-scheme"),
    (files({"path": "/a", "contents": {"source": "https://h/o", "httpHeaders": [{"name": "", "value": "b"}]}}),
     "$.storage.files.0.contents.httpHeaders.0.name", "httpheader-name"),
    (files({"path": "/a", "contents": {"source": "https://h/o", "httpHeaders": [{"name": "A"}, {"name": "A"}]}}),
     "$.storage.files.0.contents.httpHeaders.1.name", "duplicate"),
    (files({"path": "/a", "mode": 0o10000}), "$.storage.files.0.mode", "mode-range"),
    (files({"path": "/a", "mode": -1}), "$.storage.files.0.mode", "mode-range"),
    (files({"path": "/a", "mode": "0644"}), "$.storage.files.0.mode", "type"),
    (files({"path": "/a", "mode": 420.0}), "$.storage.files.0.mode", "type"),
    (files({"path": "/a", "overwrite": "yes"}), "$.storage.files.0.overwrite", "type"),
    (files({"path": "/a", "user": {"id": 0, "name": "root"}}), "$.storage.files.0.user", "owner-id-and-name"),
    (files({"path": "/a"}, {"path": "/a"}), "$.storage.files.1", "duplicate"),
    # Go visits Storage's fields in order Directories, Files, Links: the file is the duplicate
    (cfg(storage={"files": [{"path": "/a"}], "directories": [{"path": "/a"}]}), "$.storage.files.0",
     "duplicate"),
    (cfg(storage={"links": [{"path": "/l", "target": "/x"}], "files": [{"path": "/l/f"}]}),
     "$.storage.files.0", "path-through-link"),
    (cfg(storage={"links": [{"path": "/l", "target": "/x", "hard": True}], "directories": [{"path": "/l/d"}]}),
     "$.storage.directories.0", "path-through-link"),
    (cfg(storage={"links": [{"path": "/h", "target": "/d", "hard": True}], "directories": [{"path": "/d"}]}),
     "$.storage.links.0", "hardlink-to-directory"),
    (cfg(storage={"links": [{"path": "/d/h", "target": "x", "hard": True}], "directories": [{"path": "/d/h/x"}]}),
     "$.storage.links.0", "hardlink-to-directory"),
    (cfg(storage={"links": [{"path": "/l"}]}), "$.storage.links.0.target", "link-target-required"),
    (cfg(storage={"links": [{"path": "/l", "target": ""}]}), "$.storage.links.0.target", "link-target-required"),
    # a null list entry decodes to the zero value, which Ignition then judges
    (cfg(storage={"files": [None]}), "$.storage.files.0.path", "path-required"),
    (units(None), "$.systemd.units.0.name", "unit-suffix"),
    (cfg(storage={"disks": [{"device": "/dev/vda", "partitions": [None]}]}), "$.storage.disks.0.partitions.0",
     "partition-number-or-label"),
    (files({"Path": True}), "$.storage.files.0.path", "type"),  # Go reads "Path" into path
    (cfg(storage={"luks": [{"name": "root"}]}), "$.storage.luks.0.device", "device-required"),
    (cfg(storage={"luks": [{"name": "r", "device": "/dev/vdb", "clevis": {"tang": [
        {"url": "ftp://t", "thumbprint": "x"}]}}]}), "$.storage.luks.0.clevis.tang.0.url", "url-scheme"),
    (cfg(storage={"luks": [{"name": "r", "device": "/dev/vdb", "clevis": {"tang": [{"thumbprint": "x"}]}}]}),
     "$.storage.luks.0.clevis.tang.0.url", "url-scheme"),
    (cfg(storage={"luks": [{"name": "r", "device": "/dev/vdb", "clevis": {"tang": [{"url": "http://t"}]}}]}),
     "$.storage.luks.0.clevis.tang.0.thumbprint", "tang-thumbprint"),
    (cfg("3.5.0", storage={"luks": [{"name": "r", "device": "/dev/vdb", "clevis": {
        "custom": {"pin": "tpm2+pkcs11", "config": "{}"}}}]}), "$.storage.luks.0.clevis.custom.pin", "clevis-pin"),
    (cfg(storage={"disks": [{"device": "/dev/vda", "partitions": [{"sizeMiB": 10}]}]}),
     "$.storage.disks.0.partitions.0", "partition-number-or-label"),
    (cfg(storage={"disks": [{"device": "/dev/vda", "partitions": [{"number": 1, "shouldExist": False,
                                                                    "sizeMiB": 5}]}]}),
     "$.storage.disks.0.partitions.0", "should-not-exist-with-others"),
    (cfg(storage={"disks": [{"device": "/dev/vda", "partitions": [{"label": "a:b"}]}]}),
     "$.storage.disks.0.partitions.0.label", "partition-label-colon"),
    (cfg(storage={"disks": [{"device": "/dev/vda", "partitions": [
        {"number": 1, "startMiB": 1, "sizeMiB": 10}, {"number": 2, "startMiB": 5, "sizeMiB": 10}]}]}),
     "$.storage.disks.0.partitions.1", "partitions-overlap"),
    (files({"path": "/a", "contents": {"source": "data:,%s"}}), "$.storage.files.0.contents.source", "data-url"),
    (cfg(passwd={"users": [{"name": "a", "sshAuthorizedKeys": ["k", "k"]}]}),
     "$.passwd.users.0.sshAuthorizedKeys.1", "duplicate"),
    (cfg(passwd={"users": [{}, {}]}), "$.passwd.users.1.name", "duplicate"),
    (cfg(ignition={"version": "3.4.0", "proxy": {"httpProxy": ""}}), "$.ignition.proxy.httpProxy",
     "proxy-scheme"),
    (units({"name": "a.service", "contents": "[Unit]\nNoEquals\nA=1"}), "$.systemd.units.0.contents",
     "unit-contents"),
    (units({"name": "a.service", "contents": "[Unit] trailing\n"}), "$.systemd.units.0.contents",
     "unit-contents"),
    (cfg(storage={"files": "x"}), "$.storage.files", "type"),
    (cfg(storage=[]), "$.storage", "type"),
    (units({"name": "foo"}), "$.systemd.units.0.name", "unit-suffix"),
    (units({"name": "foo.conf"}), "$.systemd.units.0.name", "unit-suffix"),
    (units({"enabled": True}), "$.systemd.units.0.name", "unit-suffix"),
    (units({"name": "a.service"}, {"name": "a.service"}), "$.systemd.units.1.name", "duplicate"),
    (units({"name": "a.service", "dropins": [{"name": "x.txt"}]}), "$.systemd.units.0.dropins.0.name",
     "dropin-suffix"),
    (units({"name": "a.service", "dropins": [{"name": "x.conf"}, {"name": "x.conf"}]}),
     "$.systemd.units.0.dropins.1.name", "duplicate"),
    (units({"name": "a.service", "contents": "[Service\nX=1"}), "$.systemd.units.0.contents", "unit-contents"),
    (units({"name": "a.service", "enabled": "true"}), "$.systemd.units.0.enabled", "type"),
    (cfg(storage={"files": [{"path": "/etc/systemd/system/a.service"}]}, systemd={"units": [
        {"name": "a.service", "contents": "[Unit]\n"}]}), "$.storage.files.0.path", "path-conflicts-systemd"),
    (cfg(passwd={"users": [{"name": "a"}, {"name": "a"}]}), "$.passwd.users.1.name", "duplicate"),
    (cfg(passwd={"groups": [{"name": "g"}, {"name": "g"}]}), "$.passwd.groups.1.name", "duplicate"),
    (cfg(passwd={"users": [{"name": "a", "sshAuthorizedKeys": "ssh-rsa x"}]}),
     "$.passwd.users.0.sshAuthorizedKeys", "type"),
    (cfg(passwd={"users": [{"name": "a", "sshAuthorizedKeys": [1]}]}), "$.passwd.users.0.sshAuthorizedKeys.0",
     "type"),
    (cfg(passwd={"users": [{"name": "a", "uid": "1000"}]}), "$.passwd.users.0.uid", "type"),
    (cfg(kernelArguments={"shouldExist": ["a"], "shouldNotExist": ["a"]}), "$.kernelArguments.shouldNotExist.0",
     "duplicate"),
    (cfg(kernelArguments={"shouldExist": "a"}), "$.kernelArguments.shouldExist", "type"),
    (cfg(ignition={"version": "3.4.0", "config": {"merge": [{"verification": {"hash": H512}}]}}),
     "$.ignition.config.merge.0.source", "source-required"),
    (cfg(ignition={"version": "3.4.0", "config": {"replace": {"source": "ftp://x"}}}),
     "$.ignition.config.replace.source", "url-scheme"),
    (cfg(ignition={"version": "3.4.0", "security": {"tls": {"certificateAuthorities": [{}]}}}),
     "$.ignition.security.tls.certificateAuthorities.0.source", "source-required"),
    (cfg(ignition={"version": "3.4.0", "timeouts": {"httpTotal": "10"}}), "$.ignition.timeouts.httpTotal", "type"),
    (cfg(ignition={"version": "3.4.0", "proxy": {"httpProxy": "socks5://p"}}), "$.ignition.proxy.httpProxy",
     "proxy-scheme"),
    (cfg(storage={"filesystems": [{"device": "/dev/vdb", "format": "ntfs"}]}),
     "$.storage.filesystems.0.format", "filesystem-format"),
    (cfg("3.2.0", storage={"filesystems": [{"device": "/dev/vdb", "format": "none"}]}),
     "$.storage.filesystems.0.format", "filesystem-format"),
    (cfg(storage={"filesystems": [{"device": "/dev/vdb", "path": "/var"}]}),
     "$.storage.filesystems.0.format", "format-required"),
    (cfg(storage={"filesystems": [{"device": "/dev/vdb", "label": "x"}]}),
     "$.storage.filesystems.0.label", "label-needs-format"),
    (cfg(storage={"filesystems": [{"device": "/dev/vdb", "format": "xfs", "label": "x" * 13}]}),
     "$.storage.filesystems.0.label", "label-too-long"),
    (cfg(storage={"filesystems": [{"format": "xfs"}]}), "$.storage.filesystems.0.device", "device-required"),
    (cfg(storage={"disks": [{"device": "/dev/vda", "partitions": [{"label": "x" * 37}]}]}),
     "$.storage.disks.0.partitions.0.label", "partition-label"),
    (cfg(storage={"disks": [{"device": "/dev/vda", "partitions": [{"number": 1}, {"number": 1}]}]}),
     "$.storage.disks.0.partitions.1", "duplicate"),
    (cfg(storage={"disks": [{"device": "/dev/vda", "partitions": [{"typeGuid": "linux"}]}]}),
     "$.storage.disks.0.partitions.0.typeGuid", "guid"),
    (cfg(storage={"raid": [{"name": "md", "level": "raid7", "devices": ["/dev/a"]}]}),
     "$.storage.raid.0.level", "raid-level"),
    (cfg(storage={"luks": [{"name": "a/b", "device": "/dev/vdb"}]}), "$.storage.luks.0.name", "luks-name"),
    ([], "$", "type"),
    ("x", "$", "type"),
]


@pytest.mark.parametrize("doc,path,rule", INVALID, ids=[f"{i}-{t[2]}" for i, t in enumerate(INVALID)])
def test_invalid_configs_are_reported_at_their_path(doc, path, rule):
    assert (path, rule) in errors(doc), validate_ignition(doc)


WARN = [
    (cfg(foo=1), "$.foo", "unused-key"),
    (files({"path": "/a", "bogus": True}), "$.storage.files.0.bogus", "unused-key"),
    (cfg("3.2.0", kernelArguments={"shouldExist": ["a"]}), "$.kernelArguments", "unused-key"),
    (cfg("3.0.0", ignition={"version": "3.0.0", "proxy": {"httpProxy": "http://p"}}), "$.ignition.proxy",
     "unused-key"),
    (cfg("3.1.0", storage={"luks": [{"name": "x"}]}), "$.storage.luks", "unused-key"),
    (units({"name": "a.service", "enabled": True, "contents": "[Service]\nExecStart=/bin/true\n"}),
     "$.systemd.units.0.contents", "unit-no-install"),
    (units({"name": "a.service", "enabled": True, "mask": True}), "$.systemd.units.0", "unit-mask-enabled"),
    (files({"path": "/a", "mode": 0o4755}, version="3.3.0"), "$.storage.files.0.mode", "mode-special"),
    (files({"path": "/a", "mode": 0o4755}, version="3.5.0"), "$.storage.files.0.mode", "mode-special"),
    (files({"Path": "/a"}), "$.storage.files.0.Path", "unused-key"),
    (cfg("3.7.0-experimental"), "$.ignition.version", "version-experimental"),
    (cfg(storage={"links": [{"path": "/h", "target": "/f", "hard": True, "user": {"id": 0}}]}),
     "$.storage.links.0.user.id", "hardlink-owner"),
    (cfg(storage={"disks": [{"device": "/dev/vda", "partitions": [{"number": 1}]}],
                  "filesystems": [{"device": "/dev/vda", "format": "xfs"}]}),
     "$.storage.filesystems.0.device", "partitions-overwritten"),
    (cfg(passwd={"users": [{"name": "a", "homeDir": "home/a"}]}), "$.passwd.users.0.homeDir", "path-absolute"),
]


@pytest.mark.parametrize("doc,path,rule", WARN)
def test_warnings_do_not_make_a_config_invalid(doc, path, rule):
    assert (path, rule) in warnings(doc)
    assert errors(doc) == []


def test_every_problem_is_path_first_and_has_a_rule():
    doc = files({"path": "etc/x", "mode": 99999}, {"path": "etc/x"})
    problems = validate_ignition(doc)
    assert problems
    for p in problems:
        assert str(p).startswith(p.path + ": ")
        assert p.path.startswith("$")
        assert p.rule


def test_value_is_carried_where_useful():
    (p,) = [p for p in validate_ignition(files({"path": "etc/x"})) if p.is_error]
    assert p.to_dict()["value"] == "etc/x"
    assert "(got 'etc/x')" in str(p)


def test_validation_does_not_mutate_the_input():
    doc = files({"path": "/a", "contents": {"source": "data:,x"}}, {"path": "b"})
    before = copy.deepcopy(doc)
    validate_ignition(doc)
    assert doc == before


def test_field_newer_than_declared_version_names_the_needed_version():
    (w,) = [p for p in validate_ignition(cfg("3.2.0", kernelArguments={"shouldExist": ["a"]})) if not p.is_error]
    assert "3.3.0" in w.message and "3.2.0" in w.message


@pytest.mark.parametrize("raw,clean", [("/", "/"), ("/a/b", "/a/b"), ("/a/../b", "/b"), ("//a", "/a"),
                                       ("/a/", "/a"), ("/..", "/"), ("/a/./b", "/a/b")])
def test_clean_path_matches_go_path_clean(raw, clean):
    assert clean_path(raw) == clean


def _reference_data_url_ok(url):
    """A slow, obviously-right statement of the data URL rules (regexes and a decode)."""
    import base64
    import binascii
    import re
    from urllib.parse import unquote_to_bytes

    from agent.errors import ConfigError
    from agent.ignition.dataurl import split_data_url

    try:
        _, is_base64, payload = split_data_url(url)
    except ConfigError:
        return False
    if re.search(r"[\x00-\x1f\x7f]", url) or re.search(r"%(?![0-9A-Fa-f]{2})", payload):
        return False
    if not is_base64:
        return True
    compact = b"".join(unquote_to_bytes(payload).split())
    body = compact.rstrip(b"=")
    if not re.fullmatch(rb"[A-Za-z0-9+/_-]*", body) or len(body) % 4 == 1:
        return False
    if len(compact) - len(body) > (-len(body)) % 4:
        return False  # more padding than the length needs
    try:
        base64.b64decode(body.replace(b"-", b"+").replace(b"_", b"/") + b"=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def test_fast_data_url_check_agrees_with_a_plain_statement_of_the_rules():
    """data_url_error (C-speed passes, no decoding) gives the verdict of the slow reference."""
    import random

    from agent.ignition.dataurl import data_url_error

    rng = random.Random(15)
    alphabet = "AB+/-_=% \n\t3fZz,;é"
    for _ in range(4000):
        payload = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        for url in ("data:;base64," + payload, "data:," + payload, "data:text/plain;base64," + payload):
            assert (data_url_error(url) is None) == _reference_data_url_ok(url), url


# -- a link plus an odd path: validation ends, and reports what Ignition reports ---------------

# The 338-byte config that made 'node-agent validate' loop forever (issue 28): a relative path
# and a link ("usr".rsplit("/", 1)[0] is "usr", so walking up the parents never ended)
HANG_338 = (b'{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"usr/local/bin/x","mode":493,'
            b'"overwrite":true,"contents":{"source":"data:,%23!%2Fbin%2Fsh%0Aecho%20hello!!!%0A"}}],'
            b'"directories":[{"path":"/var/lib/x","mode":493}],"links":[{"path":"/usr/local/bin/y",'
            b'"target":"/usr/local/bin/x"},{"path":"/etc/x.conf","target":"/var/lib/x/c"}]}}')


def _within(seconds, fn, *args):
    """fn(*args) run in a thread: its result, or a test failure when it takes longer (a hang
    fails the test instead of blocking the run)."""
    import threading

    box = {}

    def run():
        try:
            box["result"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test's thread
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__} did not return within {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_a_relative_path_beside_a_link_is_reported_without_hanging():
    from agent.core.loadconfig import check_node_config

    assert len(HANG_338) == 338
    nc, problems = _within(5, check_node_config, HANG_338, "hang.ign")
    assert nc is None
    assert ("$.storage.files.0.path", "path-absolute") in [(p.path, p.rule) for p in problems if p.is_error]


@pytest.mark.parametrize("node,link,through", [
    ("usr/local/bin/x", "/usr/bin/y", False),
    ("usr/local/bin/x", "usr", True),  # Go: strings.HasPrefix(node, link+"/"), relative or not
    ("usr/local/bin/x", "usr/local", True),
    ("x", "/y", False),
    ("", "/y", False),
    ("/", "/y", False),
    ("//", "/", True),
    ("//a", "/", True),
    ("/a/", "/a", True),
    ("/a//b", "/a/", True),
    ("/a/b", "/a/", False),
    ("/a/b/", "/a/b", True),
    ("/ab/c", "/a", False),
    ("/a/./b", "/a/.", True),
    ("/a/b", "", True),  # a link without a path: Go's "" + "/" is a prefix of every absolute path
    ("a/b", "", False),
])
def test_a_node_under_a_link_is_found_as_go_finds_it(node, link, through):
    doc = cfg(storage={"files": [{"path": node}], "links": [{"path": link, "target": "/t"}]})
    found = _within(5, errors, doc)
    assert (("$.storage.files.0", "path-through-link") in found) == through, found
    if not node.startswith("/"):
        assert ("$.storage.files.0.path", "path-absolute" if node else "path-required") in found


def test_many_links_and_nodes_under_them_stay_one_finding_per_node():
    links = [{"path": f"/l{i}", "target": "/t"} for i in range(2000)] + [{"path": "/l0", "target": "/t"}] * 50
    doc = cfg(storage={"files": [{"path": f"/l0/{'x/' * 500}f{i}"} for i in range(2000)], "links": links})
    found = _within(5, errors, doc)
    assert sum(rule == "path-through-link" for _, rule in found) == 2000


def test_the_link_rule_is_gos_has_prefix_for_any_paths():
    """Property: a node is reported under a link exactly when Go's strings.HasPrefix(node.Path,
    link.Path+"/") holds for some link (storage.go), for any path strings at all."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    paths = st.text(alphabet="/a.", max_size=7)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(paths, max_size=5), st.lists(paths, max_size=4))
    def check(nodes, links):
        doc = cfg(storage={"files": [{"path": n} for n in nodes], "links": [{"path": ln, "target": "/t"}
                                                                             for ln in links]})
        found = {path for path, rule in _within(5, errors, doc) if rule == "path-through-link"}
        want = {f"$.storage.files.{i}" for i, n in enumerate(nodes) if any(n.startswith(ln + "/") for ln in links)}
        want |= {f"$.storage.links.{i}" for i, n in enumerate(links) if any(n.startswith(ln + "/") for ln in links)}
        assert found == want

    check()
