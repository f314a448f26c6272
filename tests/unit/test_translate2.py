"""Spec 2.2 -> 3.2 as the MCO converts MachineConfigs (helpers.go:612-668, ign-converter v23tov30)."""

import pytest

from agent.core.loadconfig import check_node_config, convert_spec2_machine_config
from agent.ignition.translate2 import translate


def v22(**sections):
    return {"ignition": {"version": "2.2.0"}, **sections}


def test_files_root_filesystem_overwrite_and_append():
    out, problems = translate(v22(storage={"files": [
        {"filesystem": "root", "path": "/etc/a", "mode": 420, "contents": {"source": "data:,a"}},
        {"filesystem": "root", "path": "/etc//b", "append": True, "contents": {"source": "data:,b", "compression": ""}},
        {"filesystem": "root", "path": "/etc/c", "overwrite": False, "user": {"name": "core"},
         "contents": {"source": "data:,c", "verification": {"hash": "sha512-00"}}},
        {"filesystem": "root", "path": "/etc/empty"},
    ]}))
    assert problems == []
    assert out == {"ignition": {"version": "3.2.0"}, "storage": {"files": [
        # removeIgnDuplicateFilesUnitsUsers walks from the end: the order comes out reversed.
        {"path": "/etc/empty", "overwrite": True, "contents": {"source": ""}},
        {"path": "/etc/c", "user": {"name": "core"}, "overwrite": False,
         "contents": {"source": "data:,c", "verification": {"hash": "sha512-00"}}},
        {"path": "/etc/b", "overwrite": False, "append": [{"source": "data:,b"}]},
        {"path": "/etc/a", "overwrite": True, "mode": 420, "contents": {"source": "data:,a"}},
    ]}}


def test_duplicate_files_last_wins_and_units_merge_dropins():
    out, problems = translate(v22(
        storage={"files": [{"filesystem": "root", "path": "/etc/x", "contents": {"source": "data:,old"}},
                           {"filesystem": "root", "path": "/etc/x", "contents": {"source": "data:,new"}}]},
        systemd={"units": [{"name": "a.service", "dropins": [{"name": "1.conf", "contents": "[Unit]\n"}]},
                           {"name": "b.service", "mask": True, "enabled": False},
                           {"name": "a.service", "enabled": True, "contents": "[Service]\nExecStart=/bin/true\n",
                            "dropins": [{"name": "2.conf", "contents": "[Unit]\n"}]}]}))
    assert problems == []
    assert [f["contents"]["source"] for f in out["storage"]["files"]] == ["data:,new"]
    assert out["systemd"]["units"] == [
        {"name": "a.service", "enabled": True, "contents": "[Service]\nExecStart=/bin/true\n",
         "dropins": [{"name": "2.conf", "contents": "[Unit]\n"}, {"name": "1.conf", "contents": "[Unit]\n"}]},
        {"name": "b.service", "enabled": False, "mask": True}]


def test_core_users_are_joined():
    out, _ = translate(v22(passwd={"users": [{"name": "core", "sshAuthorizedKeys": ["k1", "k2"]},
                                             {"name": "core", "sshAuthorizedKeys": ["k3", "k1"]}]}))
    assert out["passwd"] == {"users": [{"name": "core", "sshAuthorizedKeys": ["k3", "k1", "k2"]}]}


@pytest.mark.parametrize("cfg,path,words", [
    (v22(passwd={"users": [{"name": "alice"}]}), "$.passwd.users.0.name", "only the core user"),
    (v22(systemd={"units": [{"name": "a.service", "enable": True}]}), "$.systemd.units.0.enable", "use enabled"),
    (v22(networkd={"units": [{"name": "a.network"}]}), "$.networkd.units", "networkd"),
    (v22(storage={"files": [{"filesystem": "data", "path": "/x"}]}), "$.storage.files.0.filesystem", "root"),
    (v22(storage={"files": [{"filesystem": "root", "path": "/x", "mode": 0o4755}]}), "$.storage.files.0.mode",
     "cannot exceed"),
    (v22(storage={"files": [{"filesystem": "root", "path": "/l/x"}],
                  "links": [{"filesystem": "root", "path": "/l", "target": "/tmp"}]}), "$.storage.files.0.path",
     "under the link"),
    (v22(storage={"files": [{"filesystem": "root", "path": "/d"}],
                  "directories": [{"filesystem": "root", "path": "/d"}]}), "$.storage.directories.0.path",
     "also written"),
    ({"ignition": {"version": "2.3.0"}}, "$.ignition.version", "2.2.0"),
])
def test_refused_with_the_path_and_why(cfg, path, words):
    out, problems = translate(cfg)
    assert out is None
    assert problems[0].path == path and words in problems[0].message


def test_machineconfig_validates_with_a_conversion_note_and_original_paths():
    mc = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "metadata": {"name": "x"},
          "spec": {"config": v22(storage={"files": [
              {"filesystem": "root", "path": "/etc/a", "contents": {"source": "data:,a"}},
              {"filesystem": "root", "path": "/etc/b", "contents": {"source": "ftp://h/b"}}]})}}
    nc, problems = check_node_config(mc)
    assert nc is None
    errors = [p for p in problems if p.is_error]
    assert errors[0].path == "$.spec.config.storage.files.1.contents.source"  # the 2.2 entry, not the reversed one
    assert any(p.rule == "converted-spec2" and not p.is_error for p in problems)
    mc["spec"]["config"]["storage"]["files"].pop()
    nc, problems = check_node_config(mc)
    assert nc.ignition["ignition"]["version"] == "3.2.0" and nc.files[0]["overwrite"] is True
    converted, refused = convert_spec2_machine_config(mc, "x.yaml")
    assert refused == [] and converted["spec"]["config"] == nc.ignition and mc["spec"]["config"]["ignition"][
        "version"] == "2.2.0"


def test_a_bare_spec2_config_is_refused_as_ignition_refuses_it():
    nc, problems = check_node_config(v22())
    assert nc is None and problems[0].rule == "version-2x"
