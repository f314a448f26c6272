"""Loading Ignition configs and MachineConfigs into NodeConfig; parse errors with line/column."""

import json
from pathlib import Path

import pytest

from agent.core.loadconfig import check_node_config, load_node_config, nodeconfig_to_machineconfig
from agent.core.nodeconfig import NodeConfig
from agent.errors import ConfigError
from agent.ignition.parse import parse_document, parse_document_with_warnings
from tests.helpers import paths

EXAMPLES = Path(paths.REPO) / "examples" / "ignition"


def test_parse_json_error_names_source_line_and_column():
    with pytest.raises(ConfigError) as exc:
        parse_document(b'{\n  "ignition": {"version": "3.4.0"}\n  "storage": {}\n}', "config.ign")
    assert str(exc.value).startswith("config.ign: invalid JSON at line 3, column 3: Expecting ','")


def test_trailing_comma_is_json_error_not_yaml():
    with pytest.raises(ConfigError, match="invalid JSON"):
        parse_document('{"ignition": {"version": "3.4.0"},}')


def test_yaml_error_names_line_and_column():
    with pytest.raises(ConfigError, match=r"mc.yaml: invalid YAML at line 2, column \d+"):
        parse_document("kind: MachineConfig\nspec: a: b: c\n", "mc.yaml")


def test_yaml_is_safe():
    with pytest.raises(ConfigError):
        parse_document("!!python/object/apply:os.system ['true']\n")


@pytest.mark.parametrize("data", [b"", b"   \n", "# only a comment\n"])
def test_empty_documents_are_refused(data):
    with pytest.raises(ConfigError, match="empty"):
        parse_document(data, "x")


def test_not_utf8_is_refused():
    with pytest.raises(ConfigError, match="UTF-8"):
        parse_document(b'a: "\xff"', "x")


def test_invalid_utf8_in_json_reads_as_go_does():
    # Go's encoding/json (Ignition) turns invalid UTF-8 in a string into U+FFFD
    assert parse_document(b'{"a": "\xff"}', "x") == {"a": "\ufffd"}


def test_duplicate_keys_are_warned_last_wins():
    doc, warnings = parse_document_with_warnings('{"a": 1, "a": 2}')
    assert doc == {"a": 2} and warnings[0].rule == "duplicate-key" and not warnings[0].is_error
    doc, warnings = parse_document_with_warnings("a: 1\na: 2\n")
    assert doc == {"a": 2} and "line 2" in warnings[0].message


def test_ignition_json_loads_as_nodeconfig():
    nc = load_node_config((EXAMPLES / "worker.ign").read_bytes(), "worker.ign")
    assert isinstance(nc, NodeConfig)
    assert nc.name == "worker.ign"
    assert [f["path"] for f in nc.files][0] == "/etc/hostname"
    assert nc.units[0]["name"] == "kubelet.service"
    assert nc.os_image_url == "" and nc.kernel_arguments == ()


def test_machineconfig_yaml_loads_with_os_fields():
    nc = load_node_config((EXAMPLES / "machineconfig-worker.yaml").read_text(), "mc.yaml")
    assert nc.name == "99-worker-chrony"
    assert nc.kernel_arguments == ("nosmt", "enforcing=1")
    assert nc.kernel_type == "default" and nc.extensions == ("usbguard",) and nc.fips is False
    assert nc.os_image_url.startswith("quay.io/")
    assert nc.files[0]["path"] == "/etc/chrony.conf"


def test_machineconfig_json_and_dict_input():
    mc = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
          "metadata": {"name": "m"}, "spec": {"fips": True}}
    nc = load_node_config(json.dumps(mc))
    assert nc.fips is True and nc.ignition == {"ignition": {"version": "3.4.0"}}
    nc2, problems = check_node_config(mc)
    assert nc2 == nc and problems == []


def test_machineconfig_problems_carry_full_paths():
    nc, problems = check_node_config((EXAMPLES / "invalid-machineconfig.yaml").read_bytes(), "bad.yaml")
    assert nc is None
    paths = {(p.path, p.rule) for p in problems if p.is_error}
    assert ("$.spec.config.storage.files.0.mode", "type") in paths
    assert ("$.spec.kernelType", "kernel-type") in paths
    assert ("$.spec.kernelArguments", "type") in paths
    assert all(p.source == "bad.yaml" for p in problems)


def test_machineconfig_with_invalid_ignition_path():
    mc = {"kind": "MachineConfig", "apiVersion": "machineconfiguration.openshift.io/v1",
          "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "x"}]}}}}
    with pytest.raises(ConfigError) as exc:
        load_node_config(mc)
    assert exc.value.problems[0].path == "$.spec.config.storage.files.0.path"
    assert "$.spec.config.storage.files.0.path: error: path not absolute" in str(exc.value)


def test_machineconfig_config_without_version_is_an_error():
    mc = {"kind": "MachineConfig", "spec": {"config": {"storage": {"files": [{"path": "/a"}]}}}}
    _, problems = check_node_config(mc)
    assert ("$.spec.config.ignition.version", "version-missing") in {(p.path, p.rule) for p in problems}


def test_wrong_kind_is_an_error():
    _, problems = check_node_config({"apiVersion": "v1", "kind": "ConfigMap", "spec": {}})
    rules = {p.rule for p in problems if p.is_error}
    assert {"mc-kind", "mc-api-version"} <= rules


def test_warnings_do_not_block_loading(caplog):
    nc = load_node_config({"ignition": {"version": "3.4.0"}, "extra": 1})
    assert nc.ignition["extra"] == 1
    assert "unused key extra" in caplog.text


def test_nodeconfig_to_machineconfig_roundtrip():
    nc = load_node_config((EXAMPLES / "machineconfig-worker.yaml").read_text())
    mc = nodeconfig_to_machineconfig(nc, "rendered-worker-abc")
    assert mc["kind"] == "MachineConfig" and mc["metadata"]["name"] == "rendered-worker-abc"
    assert mc["apiVersion"] == "machineconfiguration.openshift.io/v1"
    back = load_node_config(mc)
    assert back.ignition == nc.ignition and back.os_fields() == nc.os_fields()
    assert back.name == "rendered-worker-abc"
