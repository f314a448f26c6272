"""Findings carry the line and column of the offending value, as ignition-validate reports them."""

from agent.core.loadconfig import check_node_config
from agent.ignition.positions import locate

JSON = """{
  "ignition": {"version": "3.4.0"},
  "storage": {"files": [
    {"path": "/etc/ok", "mode": 420},
    {"path": "etc/x", "contents": {"source": "data:,%zz"}},
    {"Path": true}
  ]}
}
"""

YAML = """apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
spec:
  config:
    ignition: {version: 3.4.0}
    storage:
      files:
      - path: etc/x
"""


def test_locate_json_values_and_fall_back_to_the_nearest_ancestor():
    found = locate(JSON, ["$.storage.files.1.path", "$.storage.files.1.contents.source",
                          "$.storage.files.2.path", "$.storage.files.2.Path", "$.nowhere"])
    assert found["$.storage.files.1.path"] == (5, 14)
    assert found["$.storage.files.1.contents.source"] == (5, 46)
    assert found["$.storage.files.2.Path"] == (6, 14)
    assert found["$.storage.files.2.path"] == (6, 5)  # not in the text: its entry
    assert found["$.nowhere"] == (1, 1)  # the document


def test_locate_yaml():
    assert locate(YAML, ["$.spec.config.storage.files.0.path"]) == {"$.spec.config.storage.files.0.path": (8, 15)}


def test_check_node_config_attaches_positions():
    _, problems = check_node_config(JSON.encode(), "x.ign")
    by_path = {p.path: p for p in problems if p.is_error}
    p = by_path["$.storage.files.1.path"]
    assert (p.line, p.column) == (5, 14)
    assert "at line 5, column 14 in x.ign" in str(p)
    assert p.to_dict()["line"] == 5 and p.to_dict()["column"] == 14


def test_escaped_keys_and_strings_do_not_confuse_the_tokenizer():
    text = '{"a\\"b": "x,]}\\"", "ignition": {"version": "3.4.0"}, "c": [1, {"d": "e"}]}'
    assert locate(text, ["$.c.1.d", "$.ignition.version"]) == {"$.c.1.d": (1, 69), "$.ignition.version": (1, 44)}
