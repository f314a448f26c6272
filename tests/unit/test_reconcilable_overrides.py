"""``MachineConfiguration.spec.irreconcilableValidationOverrides.storage`` (issue 32), as upstream:
with the override a day-2 disk, filesystem or raid change is let through (recorded and reported,
the node keeps what it was installed with); without it, refused as before. Upstream:
machine-config-operator pkg/controller/common/reconcile_test.go TestIsRenderedConfigReconcilable
("Verify Disk changes are allowed if an override is given", and the same for Filesystems, Raid).
"""

import json

import pytest
import yaml

from agent.core import reconcilable
from agent.core.nodeconfig import NodeConfig
from agent.core.objectchecks import check_cluster
from agent.errors import ConfigError
from agent.host.root import Root
from agent.node import nodestate, planning

DISKS = [{"device": "/dev/vdb", "wipeTable": False}]
FILESYSTEMS = [{"device": "/dev/vdb1", "format": "xfs", "path": "/var/lib/data"}]
RAID = [{"name": "data", "level": "raid1", "devices": ["/dev/vdc", "/dev/vdd"]}]


def nc(name="rendered-a", **storage):
    return NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": dict(storage)}, name=name)


@pytest.mark.parametrize("section,value,override", [
    ("disks", DISKS, "Disks"), ("filesystems", FILESYSTEMS, "FileSystems"), ("raid", RAID, "Raid")])
def test_each_override_lets_its_section_through_and_only_it(section, value, override):
    new = nc("rendered-b", **{section: value})
    with pytest.raises(ConfigError, match=f"the {section} section changed") as e:
        reconcilable.check(nc(), new, None, firstboot=False)  # without it: refused as today
    assert [p.path for p in e.value.problems] == [f"$.storage.{section}"]
    assert f"irreconcilableValidationOverrides.storage [{override}]" in e.value.problems[0].message
    assert reconcilable.check(nc(), new, None, firstboot=False, overrides=(override,)) == [section]
    others = tuple(o for o in reconcilable.OVERRIDES if o != override)
    with pytest.raises(ConfigError, match=f"the {section} section changed") as e:
        reconcilable.check(nc(), new, None, firstboot=False, overrides=others)
    assert [p.path for p in e.value.problems] == [f"$.storage.{section}"]


def test_luks_has_no_override_and_stays_refused():
    new = nc("rendered-b", luks=[{"name": "data", "device": "/dev/vdb"}])
    with pytest.raises(ConfigError, match="the luks section changed") as e:
        reconcilable.check(nc(), new, None, firstboot=False, overrides=("Disks", "FileSystems", "Raid"))
    assert "irreconcilableValidationOverrides" not in e.value.problems[0].message


def test_a_fips_flip_is_refused_whatever_the_overrides():
    with pytest.raises(ConfigError, match="FIPS"):
        reconcilable.check(nc(), NodeConfig(ignition=nc().ignition, fips=True), False, firstboot=False,
                           overrides=("Disks",))


@pytest.mark.parametrize("value,problem", [
    ({"storage": ["Disks", "Raid"]}, None),
    ({}, "at least one property"),
    ({"storage": []}, "1 to 3 items"),
    ({"storage": ["Disks", "Raid", "FileSystems", "Disks"]}, "1 to 3 items"),
    ({"storage": ["Disk"]}, "must be one of Disks, FileSystems, Raid"),
    ({"storage": ["Raid", "Raid"]}, "duplicate value"),
    ({"storage": ["Raid"], "kernel": ["x"]}, "unknown field 'kernel'"),
])
def test_the_crd_shape_is_checked(value, problem):
    found = check_cluster({"spec": {"irreconcilableValidationOverrides": value}}, "machineconfiguration.yaml")
    if problem is None:
        assert found == []
    else:
        assert found and problem in found[0].message and found[0].path.startswith(
            "$.spec.irreconcilableValidationOverrides")


def test_the_server_serves_the_overrides_to_the_node():
    from agent.core.served import POLICY_PATH, file_bytes
    from agent.server.cluster.content import build_document

    pool = {"metadata": {"name": "worker"}, "spec": {"nodeSelector": {"matchLabels": {}}}}
    spec = {"osImageURL": "quay.io/x@sha256:" + "0" * 64, "config": {"ignition": {"version": "3.4.0"}}}
    doc = build_document(pool, "rendered-worker-1", spec, spec["osImageURL"],
                         {"irreconcilableValidationOverrides": {"storage": ["Disks"]}})
    served = yaml.safe_load(file_bytes(doc, POLICY_PATH))
    assert served["spec"] == {"irreconcilableValidationOverrides": {"storage": ["Disks"]}}
    assert reconcilable.storage_overrides(served) == ("Disks",)


def test_the_node_reads_them_from_the_served_policy_and_records_what_it_keeps(tmp_path):
    root = Root(str(tmp_path))
    policy = yaml.safe_dump({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
                             "spec": {"irreconcilableValidationOverrides": {"storage": ["Disks"]}}})
    new = nc("rendered-b", disks=DISKS)
    with pytest.raises(ConfigError, match="the disks section changed"):
        planning.check_reconcilable(root, nc(), new, firstboot=False, policy_text=None)
    assert planning.check_reconcilable(root, nc(), new, firstboot=False, policy_text=policy) == ["disks"]
    # the difference is against the install-time config the server served at first boot
    from urllib.parse import quote

    installed = {"spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {}}}}
    mcs = {"path": "/etc/mcs-machine-config-content.json",
           "contents": {"source": "data:," + quote(json.dumps(installed))}}
    target = nc("rendered-b", disks=DISKS, files=[mcs])
    diffs = reconcilable.irreconcilable_differences(planning.installed_ignition(target), target.ignition)
    assert diffs == ["storage.disks"]
    nodestate.save_irreconcilable(root, "/var/lib/node-agent", "rendered-b", diffs)
    assert nodestate.load_irreconcilable(root, "/var/lib/node-agent") == {"config": "rendered-b",
                                                                         "differences": ["storage.disks"]}
    nodestate.save_irreconcilable(root, "/var/lib/node-agent", "rendered-c", [])
    assert nodestate.load_irreconcilable(root, "/var/lib/node-agent") is None


def test_status_lists_kept_differences_without_degrading():
    from agent.commands.status import drift_lines

    lines = drift_lines(None, {"config": "rendered-b", "differences": ["storage.disks"]})
    assert lines == ["irreconcilable: storage.disks of rendered-b differ from the install-time config; kept as "
                     "installed (irreconcilableValidationOverrides.storage): new nodes get them"]


def test_a_config_may_not_write_the_force_file():
    new = NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {"files": [
        {"path": "/run/node-agent-force", "contents": {"source": "data:,"}}]}}, name="rendered-b")
    with pytest.raises(ConfigError, match="cannot be written by a config") as e:
        reconcilable.check(nc(), new, None, firstboot=False)
    assert e.value.problems[0].path == "$.storage.files.0.path"


def test_plan_honours_the_override_of_its_policy_file(tmp_path, capsys):
    from agent.cli import main as agent_main

    old, new, pol = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "mc.yaml"
    old.write_text(json.dumps(nc().ignition))
    new.write_text(json.dumps(nc(disks=DISKS).ignition))
    assert agent_main(["plan", "--from", str(old), "--to", str(new)]) == 65
    pol.write_text("apiVersion: operator.openshift.io/v1\nkind: MachineConfiguration\nspec:\n"
                   "  irreconcilableValidationOverrides:\n    storage: [Disks]\n")
    capsys.readouterr()
    assert agent_main(["plan", "--from", str(old), "--to", str(new), "--policy", str(pol)]) == 0
    assert "storage.disks changed: allowed by irreconcilableValidationOverrides.storage" in capsys.readouterr().err
