"""Merge semantics (Ignition's), spec conversion, and data URLs."""

import base64
import copy
import gzip

import pytest

from agent.errors import ConfigError
from agent.ignition.dataurl import decode_data_url, decompress
from agent.ignition.merge import merge_ignition, replace_ignition
from agent.ignition.spec import SUPPORTED_VERSIONS, best_version, convert_ignition, newer_features


def test_child_wins_on_scalars_and_lists_merge_by_key():
    parent = {"ignition": {"version": "3.2.0", "timeouts": {"httpTotal": 10}},
              "storage": {"files": [{"path": "/a", "mode": 420, "contents": {"source": "data:,p"}},
                                    {"path": "/b", "mode": 384}]}}
    child = {"ignition": {"version": "3.4.0", "timeouts": {"httpResponseHeaders": 5}},
             "storage": {"files": [{"path": "/a", "contents": {"source": "data:,c"}}, {"path": "/c"}]}}
    out = merge_ignition(parent, child)
    assert out["ignition"] == {"version": "3.4.0", "timeouts": {"httpTotal": 10, "httpResponseHeaders": 5}}
    assert out["storage"]["files"] == [
        {"path": "/a", "mode": 420, "contents": {"source": "data:,c"}},
        {"path": "/b", "mode": 384},
        {"path": "/c"},
    ]


def test_merge_is_pure():
    parent = {"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "a.service", "enabled": True}]}}
    child = {"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "a.service", "enabled": False}]}}
    p0, c0 = copy.deepcopy(parent), copy.deepcopy(child)
    out = merge_ignition(parent, child)
    assert parent == p0 and child == c0
    out["systemd"]["units"][0]["name"] = "changed"
    assert parent == p0 and child == c0


def test_units_and_dropins_merge_by_name():
    parent = {"systemd": {"units": [{"name": "k.service", "contents": "P", "dropins": [
        {"name": "10-a.conf", "contents": "A"}, {"name": "20-b.conf", "contents": "B"}]}]}}
    child = {"systemd": {"units": [{"name": "k.service", "dropins": [{"name": "20-b.conf", "contents": "B2"},
                                                                     {"name": "30-c.conf", "contents": "C"}]},
                                   {"name": "x.timer", "enabled": True}]}}
    out = merge_ignition(parent, child)
    (k, x) = out["systemd"]["units"]
    assert k["contents"] == "P"
    assert [(d["name"], d["contents"]) for d in k["dropins"]] == [("10-a.conf", "A"), ("20-b.conf", "B2"),
                                                                  ("30-c.conf", "C")]
    assert x == {"name": "x.timer", "enabled": True}


def test_users_merge_by_name_and_ssh_keys_are_an_ordered_set():
    parent = {"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1", "k2"], "uid": 1000}]}}
    child = {"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k2", "k3"]}, {"name": "ops"}],
                        "groups": [{"name": "g"}]}}
    out = merge_ignition(parent, child)
    assert out["passwd"]["users"] == [{"name": "core", "sshAuthorizedKeys": ["k1", "k2", "k3"], "uid": 1000},
                                      {"name": "ops"}]
    assert out["passwd"]["groups"] == [{"name": "g"}]


def test_path_is_one_namespace_across_files_directories_links():
    parent = {"storage": {"files": [{"path": "/x"}, {"path": "/keep"}], "directories": [{"path": "/d"}]}}
    child = {"storage": {"links": [{"path": "/x", "target": "/y"}], "files": [{"path": "/d"}]}}
    out = merge_ignition(parent, child)
    assert out["storage"]["files"] == [{"path": "/keep"}, {"path": "/d"}]
    assert out["storage"]["directories"] == []
    assert out["storage"]["links"] == [{"path": "/x", "target": "/y"}]


def test_kernel_arguments_child_should_not_exist_removes_parent_should_exist():
    parent = {"kernelArguments": {"shouldExist": ["a", "b"]}}
    child = {"kernelArguments": {"shouldExist": ["c", "a"], "shouldNotExist": ["b"]}}
    out = merge_ignition(parent, child)
    assert out["kernelArguments"] == {"shouldExist": ["a", "c"], "shouldNotExist": ["b"]}


def test_merge_entries_and_cas_by_source_and_header_without_value_removes():
    parent = {"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "https://a", "httpHeaders": [
        {"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]},
        "security": {"tls": {"certificateAuthorities": [{"source": "data:,A"}]}}}}
    child = {"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "https://a", "httpHeaders": [
        {"name": "X"}]}, {"source": "https://b"}]},
        "security": {"tls": {"certificateAuthorities": [{"source": "data:,A"}, {"source": "data:,B"}]}}}}
    out = merge_ignition(parent, child)
    merge = out["ignition"]["config"]["merge"]
    assert merge == [{"source": "https://a", "httpHeaders": [{"name": "Y", "value": "2"}]}, {"source": "https://b"}]
    assert out["ignition"]["security"]["tls"]["certificateAuthorities"] == [{"source": "data:,A"},
                                                                          {"source": "data:,B"}]


def test_null_in_child_keeps_parent_value():
    out = merge_ignition({"storage": {"files": [{"path": "/a", "mode": 420}]}},
                         {"storage": {"files": [{"path": "/a", "mode": None}]}})
    assert out["storage"]["files"][0]["mode"] == 420


def test_replace_returns_a_copy_of_the_replacement():
    repl = {"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/r"}]}}
    out = replace_ignition({"ignition": {"version": "3.2.0"}, "foo": 1}, repl)
    assert out == repl and out is not repl


# -- spec conversion


def test_supported_versions():
    assert SUPPORTED_VERSIONS == ("3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0", "3.6.0")


def test_up_conversion_changes_only_the_version():
    doc = {"ignition": {"version": "3.0.0"}, "storage": {"files": [{"path": "/a"}]}}
    out = convert_ignition(doc, "3.5.0")
    assert out == {"ignition": {"version": "3.5.0"}, "storage": {"files": [{"path": "/a"}]}}
    assert doc["ignition"]["version"] == "3.0.0"


@pytest.mark.parametrize("doc,target,path,needs", [
    ({"kernelArguments": {"shouldExist": ["a"]}}, "3.2.0", "$.kernelArguments", "3.3.0"),
    ({"storage": {"luks": [{"name": "x"}]}}, "3.1.0", "$.storage.luks", "3.2.0"),
    ({"ignition": {"version": "3.4.0", "proxy": {"httpProxy": "http://p"}}}, "3.0.0", "$.ignition.proxy", "3.1.0"),
    ({"passwd": {"users": [{"name": "a", "shouldExist": False}]}}, "3.1.0", "$.passwd.users.0.shouldExist",
     "3.2.0"),
    ({"storage": {"files": [{"path": "/a", "contents": {"source": "gs://b/o"}}]}}, "3.1.0",
     "$.storage.files.0.contents.source", "3.2.0"),
    ({"storage": {"files": [{"path": "/a", "contents": {"source": "https://x", "verification": {
        "hash": "sha256-" + "a" * 64}}}]}}, "3.0.0", "$.storage.files.0.contents.verification.hash", "3.1.0"),
    ({"storage": {"luks": [{"name": "x", "discard": True}]}}, "3.3.0", "$.storage.luks.0.discard", "3.4.0"),
    ({"storage": {"luks": [{"name": "x", "cex": {"enabled": True}}]}}, "3.4.0", "$.storage.luks.0.cex", "3.5.0"),
    ({"storage": {"luks": [{"name": "x", "clevis": {"custom": {"pin": "tpm2+pkcs11", "config": "{}"}}}]}},
     "3.5.0", "$.storage.luks.0.clevis.custom.pin", "3.6.0"),
    ({"storage": {"filesystems": [{"device": "/d", "format": "none"}]}}, "3.2.0",
     "$.storage.filesystems.0.format", "3.3.0"),
    ({"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "https://x", "compression": "gzip"}]}}},
     "3.0.0", "$.ignition.config.merge.0.compression", "3.1.0"),
])
def test_down_conversion_refuses_newer_fields_naming_path_and_version(doc, target, path, needs):
    doc = dict(doc)
    doc.setdefault("ignition", {"version": "3.6.0"})
    with pytest.raises(ConfigError) as exc:
        convert_ignition(doc, target)
    assert f"{path} needs spec {needs}" in str(exc.value)
    assert f"the node asked for {target}" in str(exc.value)
    assert exc.value.problems[0].path == path


def test_spec_36_converts_down_when_nothing_needs_it():
    doc = {"ignition": {"version": "3.6.0"}, "storage": {"files": [{"path": "/a", "mode": 0o4755}]}}
    assert convert_ignition(doc, "3.5.0")["ignition"]["version"] == "3.5.0"
    assert convert_ignition(doc, "3.6.0") == doc


def test_down_conversion_of_a_compatible_config_changes_only_the_version():
    doc = {"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/a", "mode": 420}]},
           "kernelArguments": {}}
    assert convert_ignition(doc, "3.0.0") == dict(doc, ignition={"version": "3.0.0"})
    assert doc["ignition"]["version"] == "3.4.0"


@pytest.mark.parametrize("target", ["2.2.0", "3.7.0", "3.7.0-experimental", "x"])
def test_unsupported_targets_are_refused_naming_the_target(target):
    with pytest.raises(ConfigError) as exc:
        convert_ignition({"ignition": {"version": "3.4.0"}}, target)
    assert target in str(exc.value)


def test_newer_features_empty_for_plain_config():
    assert newer_features({"ignition": {"version": "3.0.0"}, "storage": {"files": [{"path": "/a"}]}},
                          (3, 0, 0)) == []


def test_best_version_from_accept():
    assert best_version(["3.2.0", "3.4.0"]) == "3.4.0"
    assert best_version(["3.9.0"]) == "3.6.0"
    assert best_version(["3.6.0", "3.5.0"]) == "3.6.0"
    assert best_version(["2.2.0"]) is None


# -- data URLs


@pytest.mark.parametrize("url,data", [
    ("data:,hello%20world", b"hello world"),
    ("data:text/plain;charset=utf-8,a%0Ab", b"a\nb"),
    ("data:;base64,aGVsbG8=", b"hello"),
    ("data:text/plain;base64,aGVsbG8", b"hello"),
    ("data:application/octet-stream;base64," + base64.b64encode(bytes(range(256))).decode(), bytes(range(256))),
    ("data:,", b""),
    ("data:;base64,aGVs%0AbG8=", b"hello"),
])
def test_decode_data_url(url, data):
    assert decode_data_url(url) == data


@pytest.mark.parametrize("url", ["data:no-comma", "http://x", "data:;base64,***"])
def test_decode_data_url_errors(url):
    with pytest.raises(ConfigError):
        decode_data_url(url)


def test_gzip_roundtrip_and_errors():
    payload = b"x" * 10000
    assert decompress(gzip.compress(payload), "gzip") == payload
    assert decompress(gzip.compress(b"a") + gzip.compress(b"b"), "gzip") == b"ab"
    assert decompress(b"raw", None) == b"raw"
    assert decompress(b"raw", "") == b"raw"
    with pytest.raises(ConfigError, match="gzip"):
        decompress(b"not gzip", "gzip")
    with pytest.raises(ConfigError, match="truncated"):
        decompress(gzip.compress(payload)[:-10], "gzip")
    with pytest.raises(ConfigError, match="unsupported compression"):
        decompress(b"x", "xz")


def test_gzip_data_url_in_a_file():
    blob = base64.b64encode(gzip.compress(b"kernel.panic=10\n")).decode()
    assert decompress(decode_data_url("data:;base64," + blob), "gzip") == b"kernel.panic=10\n"
