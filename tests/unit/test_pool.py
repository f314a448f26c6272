"""Pool identity and kubelet labels (pure): the race-free pool join's decisions."""

import base64
import json

import pytest

from agent.core.pool import merge_kubelet_env, pool_from_url, resolve_pool
from agent.core.served import ANN, Served, file_bytes, node_config_from_served, read_served
from agent.errors import ConfigError


def served(pool="infra", first_pivot="rendered-infra-abc123", labels=None):
    return Served(annotations={ANN + "pool": pool, ANN + "firstPivotConfig": first_pivot},
                  pool_info={"pool": pool, "nodeSelector": {"matchLabels": labels or {
                      "node-role.kubernetes.io/infra": ""}}})


@pytest.mark.parametrize("url,pool", [
    ("https://mcs.example:22623/config/worker", "worker"),
    ("https://mcs.example:22623/config/infra", "infra"),
    ("http://127.0.0.1:8080/config/my-pool", "my-pool"),
    ("https://mcs.example:22623/healthz", None),
    ("https://mcs.example:22623/config/a/b", None),
])
def test_pool_from_url(url, pool):
    assert pool_from_url(url) == pool


def test_pointer_annotation_and_first_pivot_agree():
    ident = resolve_pool("infra", served())
    assert ident.pool == "infra"
    assert ident.config == "rendered-infra-abc123"
    assert ident.labels == {"node-role.kubernetes.io/infra": ""}


def test_pool_name_with_dashes_parsed_from_rendered_name():
    ident = resolve_pool("gpu-large", served(pool="gpu-large", first_pivot="rendered-gpu-large-0f0f"))
    assert ident.pool == "gpu-large"


@pytest.mark.parametrize("pointer,pool,pivot,named", [
    ("worker", "infra", "rendered-infra-1", "pointer config URL"),
    ("infra", "infra", "rendered-worker-1", "firstPivotConfig"),
    ("infra", "worker", "rendered-infra-1", "annotation"),
])
def test_disagreement_is_a_clear_error(pointer, pool, pivot, named):
    with pytest.raises(ConfigError) as err:
        resolve_pool(pointer, served(pool=pool, first_pivot=pivot))
    text = str(err.value)
    assert "pool disagreement" in text and named in text
    assert err.value.problems[0].rule == "pool-mismatch"


def test_no_pool_anywhere_is_an_error():
    with pytest.raises(ConfigError, match="cannot tell which pool"):
        resolve_pool(None, Served())


def test_invalid_label_is_refused_with_its_path():
    with pytest.raises(ConfigError) as err:
        resolve_pool("infra", served(labels={"bad key!": "x"}))
    assert err.value.problems[0].path == "$.nodeSelector.matchLabels.bad key!"


@pytest.mark.parametrize("existing,labels,expected", [
    ("", {"node-role.kubernetes.io/infra": ""}, "CUSTOM_KUBELET_LABELS=node-role.kubernetes.io/infra=\n"),
    ("KUBELET_LOG_LEVEL=2\n", {"a": "1"}, "KUBELET_LOG_LEVEL=2\nCUSTOM_KUBELET_LABELS=a=1\n"),
    # existing labels kept, the pool's value wins for the same key, other lines and order kept
    ('X=1\nCUSTOM_KUBELET_LABELS="zone=a,a=0"\nY=2\n', {"a": "1"}, "X=1\nCUSTOM_KUBELET_LABELS=a=1,zone=a\nY=2\n"),
    ("CUSTOM_KUBELET_LABELS=a=1\n", {"a": "1"}, "CUSTOM_KUBELET_LABELS=a=1\n"),
])
def test_merge_kubelet_env(existing, labels, expected):
    assert merge_kubelet_env(existing, labels) == expected


def test_merge_kubelet_env_is_idempotent():
    once = merge_kubelet_env("A=1\n", {"x": "y", "b": ""})
    assert merge_kubelet_env(once, {"x": "y", "b": ""}) == once


def _file(path, data, b64=True):
    if b64:
        source = "data:;base64," + base64.b64encode(data).decode()
    else:
        source = "data:," + data.decode()
    return {"path": path, "contents": {"source": source}}


def test_read_served_and_node_config():
    ann = {ANN + "firstPivotConfig": "rendered-infra-1", ANN + "pool": "infra"}
    mc = {"kind": "MachineConfig", "spec": {"osImageURL": "quay.io/x@sha256:1", "kernelArguments": ["a=1"],
                                            "extensions": ["usbguard"], "fips": False, "kernelType": "default"}}
    ign = {"ignition": {"version": "3.4.0"}, "storage": {"files": [
        _file("/etc/machine-config-daemon/node-annotations.json", json.dumps(ann).encode()),
        _file("/etc/ignition-machine-config-encapsulated.json", json.dumps(mc).encode()),
        _file("/etc/node-agent/boot-image-skew.json", b"%7B%22mode%22%3A%22None%22%7D", b64=False),
    ]}}
    s = read_served(ign)
    assert s.pool == "infra" and s.config_name == "rendered-infra-1"
    assert s.skew_rules == {"mode": "None"}
    nc = node_config_from_served(ign, s)
    assert nc.os_image_url == "quay.io/x@sha256:1"
    assert nc.kernel_arguments == ("a=1",) and nc.extensions == ("usbguard",)
    assert nc.name == "rendered-infra-1"
    assert file_bytes(ign, "/nope") is None


def test_served_file_that_is_not_json_names_the_path():
    ign = {"ignition": {"version": "3.4.0"}, "storage": {"files": [
        _file("/etc/machine-config-daemon/node-annotations.json", b"{nope")]}}
    with pytest.raises(ConfigError, match="node-annotations.json"):
        read_served(ign)


# The served skew rules (moved here from the skew stage: agent.core.served is the one reader of
# what the server adds to a config).
RULES = "/etc/node-agent/boot-image-skew.json"


def _with_rules(contents):
    return {"ignition": {"version": "3.4.0"}, "storage": {"files": [
        {"path": "/etc/motd", "contents": {"source": "data:,hi"}},
        {"path": RULES, "mode": 0o644, "contents": contents}]}}


def test_served_rules_percent_encoded_json():
    import urllib.parse

    src = "data:," + urllib.parse.quote(json.dumps({"mode": "Enforce", "minimum": {"rhcosVersion": "9.2"}}))
    assert read_served(_with_rules({"source": src})).skew_rules["minimum"] == {"rhcosVersion": "9.2"}


def test_served_rules_base64_gzip_yaml_keeps_versions_as_text():
    import gzip

    payload = base64.b64encode(gzip.compress(b"mode: Warn\nminimum:\n  rhcosVersion: 9.10\n")).decode()
    rules = read_served(_with_rules({"source": "data:;base64," + payload, "compression": "gzip"})).skew_rules
    assert rules == {"mode": "Warn", "minimum": {"rhcosVersion": "9.10"}}


def test_served_rules_absent_or_not_inline_means_none():
    assert read_served({"ignition": {"version": "3.4.0"}}).skew_rules is None
    assert read_served(_with_rules({})).skew_rules is None
    assert read_served(_with_rules({"source": "https://example.com/rules.json"})).skew_rules is None


@pytest.mark.parametrize("contents", [
    {"source": "data:;base64,@@@"},
    {"source": "data:,notgzip", "compression": "gzip"},
], ids=["bad-base64", "bad-gzip"])
def test_undecodable_served_rules_name_the_path(contents):
    with pytest.raises(ConfigError) as info:
        read_served(_with_rules(contents))
    assert info.value.problems[0].path == "$.storage.files.1.contents.source"


def test_labels_from_match_expressions_as_the_mco_derives_them():
    # MCO pkg/controller/node/node_controller.go:1815-1849
    from agent.core.pool import node_labels

    sel = {"matchLabels": {"a": "1"}, "matchExpressions": [
        {"key": "node-role.kubernetes.io/infra", "operator": "Exists"},
        {"key": "zone", "operator": "In", "values": ["east"]},
        {"key": "many", "operator": "In", "values": ["x", "y"]},
        {"key": "not", "operator": "NotIn", "values": ["x"]},
        {"key": "gone", "operator": "DoesNotExist"}]}
    assert node_labels(sel) == {"a": "1", "node-role.kubernetes.io/infra": "", "zone": "east"}
    s = Served(annotations={}, pool_info={"pool": "infra", "nodeSelector": sel})
    identity = resolve_pool("infra", s)
    assert identity.labels["node-role.kubernetes.io/infra"] == ""
    assert "node-role.kubernetes.io/infra=," in merge_kubelet_env("", identity.labels)
