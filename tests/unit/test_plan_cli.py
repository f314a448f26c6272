"""``node-agent plan``: the --json contract, human output, --show-policy, errors (exit 65)."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from agent.cli import main
from tests.helpers import paths

EXAMPLES = os.path.join(paths.REPO, "examples", "policy")


def ign(files=(), units=(), users=None, kargs=None):
    doc = {"ignition": {"version": "3.4.0"}, "storage": {"files": list(files)}, "systemd": {"units": list(units)}}
    if users is not None:
        doc["passwd"] = {"users": users}
    if kargs is not None:
        doc["kernelArguments"] = kargs
    return doc


def file(path, text):
    return {"path": path, "mode": 420, "overwrite": True, "contents": {"source": "data:," + text}}


def mc(config, **spec):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "rendered-worker-x"}, "spec": dict(spec, config=config)}


def run_plan(tmp_path, capsys, old, new, policy=None, *extra):
    paths = []
    for name, doc in (("from", old), ("to", new)):
        p = tmp_path / (name + (".ign" if "ignition" in doc else ".yaml"))
        p.write_text(json.dumps(doc) if "ignition" in doc else yaml.safe_dump(doc))
        paths.append(str(p))
    argv = ["plan", "--from", paths[0], "--to", paths[1], "--json", *extra]
    if policy is not None:
        pol = tmp_path / "policy.yaml"
        pol.write_text(yaml.safe_dump({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
                                       "metadata": {"name": "cluster"},
                                       "spec": {"nodeDisruptionPolicy": policy}}))
        argv += ["--policy", str(pol)]
    rc = main(argv)
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else out.err)


def core(actions):
    return [{k: a[k] for k in ("type", "unit") if k in a} for a in actions]


def test_contract_shape_no_change(tmp_path, capsys):
    rc, out = run_plan(tmp_path, capsys, ign([file("/etc/a", "1")]), ign([file("/etc/a", "1")]))
    assert rc == 0
    assert set(out) == {"actions", "drain", "reboot", "changes"}
    assert core(out["actions"]) == [{"type": "None"}]
    assert (out["drain"], out["reboot"]) == (False, False)


def test_default_policy_restart_and_daemon_reload(tmp_path, capsys):
    new = ign([file("/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf", "x")])
    rc, out = run_plan(tmp_path, capsys, ign(), new)
    assert rc == 0
    assert core(out["actions"]) == [{"type": "DaemonReload"}, {"type": "Restart", "unit": "kubelet.service"}]
    assert (out["drain"], out["reboot"]) == (False, False)
    assert out["changes"]["files"][0]["change"] == "added"


def test_unknown_file_reboots_and_drains(tmp_path, capsys):
    rc, out = run_plan(tmp_path, capsys, ign([file("/etc/chrony.conf", "a")]), ign([file("/etc/chrony.conf", "b")]))
    assert core(out["actions"]) == [{"type": "Reboot"}]
    assert (out["drain"], out["reboot"]) == (True, True)


def test_user_policy_from_machineconfiguration(tmp_path, capsys):
    policy = {"files": [{"path": "/etc/chrony.conf",
                         "actions": [{"type": "Restart", "restart": {"serviceName": "chronyd.service"}}]}]}
    rc, out = run_plan(tmp_path, capsys, ign([file("/etc/chrony.conf", "a")]), ign([file("/etc/chrony.conf", "b")]),
                       policy)
    assert core(out["actions"]) == [{"type": "Restart", "unit": "chronyd.service"}]
    assert not out["drain"] and not out["reboot"]


def test_machineconfig_os_change_reboots(tmp_path, capsys):
    rc, out = run_plan(tmp_path, capsys, mc(ign(), osImageURL="quay.io/x@sha256:" + "1" * 64),
                       mc(ign(), osImageURL="quay.io/x@sha256:" + "2" * 64))
    assert rc == 0
    assert core(out["actions"]) == [{"type": "Reboot"}]
    assert out["changes"]["os"][0]["field"] == "osImageURL"


def test_ignition_kernel_arguments_reboot(tmp_path, capsys):
    rc, out = run_plan(tmp_path, capsys, ign(), ign(kargs={"shouldExist": ["nosmt"]}))
    assert core(out["actions"]) == [{"type": "Reboot"}]


def test_ssh_keys_default_none(tmp_path, capsys):
    rc, out = run_plan(tmp_path, capsys, ign(users=[{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 A"]}]),
                       ign(users=[{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 B"]}]))
    assert core(out["actions"]) == [{"type": "None"}]
    assert out["changes"]["sshKeys"] == [{"user": "core", "added": ["ssh-ed25519 B"], "removed": ["ssh-ed25519 A"]}]


REG = '[[registry]]\nlocation = "quay.io/ocp"\n'
REG_MIRROR = REG + '[[registry.mirror]]\nlocation = "m.local/ocp"\npull-from-mirror = "digest-only"\n'


@pytest.mark.parametrize("old,new,drain", [(REG, REG_MIRROR, False), (REG_MIRROR, REG, True)])
def test_registries_conf_special(tmp_path, capsys, old, new, drain):
    from urllib.parse import quote

    rc, out = run_plan(tmp_path, capsys, ign([file("/etc/containers/registries.conf", quote(old))]),
                       ign([file("/etc/containers/registries.conf", quote(new))]))
    assert core(out["actions"]) == [{"type": "Special"}]
    assert out["actions"][0]["reload"] == "crio.service"
    assert (out["drain"], out["reboot"]) == (drain, False)


def test_firstboot_drops_the_drain_and_reloads_only_if_active(tmp_path, capsys):
    policy = {"files": [{"path": "/etc/app.conf", "actions": [
        {"type": "Drain"}, {"type": "Reload", "reload": {"serviceName": "app.service"}}]}]}
    rc, out = run_plan(tmp_path, capsys, ign(), ign([file("/etc/app.conf", "x")]), policy, "--firstboot")
    assert core(out["actions"]) == [{"type": "Reload", "unit": "app.service"}]
    assert out["actions"][0]["onlyIfActive"] is True
    assert out["drain"] is False


def test_human_output(tmp_path, capsys):
    a, b = tmp_path / "a.ign", tmp_path / "b.ign"
    a.write_text(json.dumps(ign([file("/etc/containers/policy.json", "a")])))
    b.write_text(json.dumps(ign([file("/etc/containers/policy.json", "b")])))
    assert main(["plan", "--from", str(a), "--to", str(b)]) == 0
    text = capsys.readouterr().out
    assert "policy files[/etc/containers/policy.json] says Reload crio.service" in text
    assert "No reboot. No drain." in text


def test_show_policy_yaml_and_json(tmp_path, capsys):
    assert main(["plan", "--show-policy"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["sshkey"] == {"actions": [{"type": "None"}]}
    assert {"path": "/etc/containers/registries.conf", "actions": [{"type": "Special"}]} in doc["files"]
    # the InternalReleaseImage defaults (MCO apihelpers.go:137-186) are listed
    iri = {"type": "Restart", "restart": {"serviceName": "iri-registry.service"}}
    assert {"path": "/etc/iri-registry", "actions": [iri]} in doc["files"]
    assert {"path": "/usr/local/bin/load-registry-image.sh", "actions": [iri]} in doc["files"]
    assert {"path": "/etc/pki/ca-trust/source/anchors/iri-root-ca.crt", "actions": [
        {"type": "Restart", "restart": {"serviceName": "coreos-update-ca-trust.service"}}]} in doc["files"]
    assert {"name": "iri-registry.service", "actions": [{"type": "DaemonReload"}, iri]} in doc["units"]
    policy = os.path.join(EXAMPLES, "machineconfiguration.yaml")
    assert main(["plan", "--show-policy", "--json", "--policy", policy]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["files"][-1]["path"] == "/etc/my-app"
    assert [u["name"] for u in doc["units"]] == ["iri-registry.service", "chronyd.service"]


# What the MCD refuses as unreconcilable (pkg/daemon/update.go:1640-1651 checkFIPS; reconcilable:
# "ignition disks section contains changes"): plan says so with exit 65, as first boot and update do.
@pytest.mark.parametrize("old,new,where,words", [
    (mc(ign(), fips=False), mc(ign(), fips=True), "$.spec.fips", "FIPS mode is off on this node"),
    (mc(ign(), fips=True), mc(ign(), fips=False), "$.spec.fips", "FIPS mode is on on this node"),
    (ign(), dict(ign(), storage={"filesystems": [{"device": "/dev/vdb", "format": "xfs", "path": "/var/lib/x"}]}),
     "$.storage.filesystems", "filesystems section changed"),
], ids=["fips-on", "fips-off", "day2-filesystem"])
def test_unreconcilable_change_is_refused_like_update(tmp_path, capsys, old, new, where, words):
    rc, err = run_plan(tmp_path, capsys, old, new)
    assert rc == 65
    assert where in err and words in err and "Traceback" not in err


def test_fips_kept_on_plans_normally(tmp_path, capsys):
    rc, out = run_plan(tmp_path, capsys, mc(ign(), fips=True), mc(ign([file("/etc/chrony.conf", "b")]), fips=True))
    assert rc == 0 and core(out["actions"]) == [{"type": "Reboot"}]


def test_invalid_policy_exits_65_with_paths(capsys):
    rc = main(["plan", "--show-policy", "--policy", os.path.join(EXAMPLES, "invalid-policy.yaml")])
    err = capsys.readouterr().err
    assert rc == 65
    assert "$.spec.nodeDisruptionPolicy.files.2.actions.0.restart.serviceName" in err
    assert "$.spec.nodeDisruptionPolicy.units.0.actions.0.reload.serviceName" in err
    assert "Traceback" not in err


def test_invalid_config_exits_65_and_a_missing_file_66(tmp_path, capsys):
    bad = tmp_path / "bad.ign"
    bad.write_text(json.dumps({"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "relative"}]}}))
    good = tmp_path / "good.ign"
    good.write_text(json.dumps(ign()))
    assert main(["plan", "--from", str(good), "--to", str(bad)]) == 65
    assert "$.storage.files.0.path" in capsys.readouterr().err
    assert main(["plan", "--from", str(good), "--to", str(tmp_path / "b.ymal")]) == 66  # EX_NOINPUT
    err = capsys.readouterr().err
    assert f"--to {tmp_path / 'b.ymal'}: no such file" in err and "$" not in err.split("what to do")[0]


def test_plan_takes_o_yaml_as_node_config_server_does(tmp_path, capsys):
    import yaml

    good = tmp_path / "good.ign"
    good.write_text(json.dumps(ign()))
    assert main(["plan", "--from", str(good), "--to", str(good), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["reboot"] is False


def test_missing_arguments_is_usage_exit_2_naming_the_missing_options_on_stderr(capsys):
    assert main(["plan", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # --json promises a document on stdout only when there is one
    assert "--from" in err and "--to" in err and "--help" in err, err


def test_examples_run_as_a_real_process():
    out = subprocess.run([sys.executable, "-m", "agent", "plan", "--from", os.path.join(EXAMPLES, "from.yaml"),
                          "--to", os.path.join(EXAMPLES, "to.yaml"), "--policy",
                          os.path.join(EXAMPLES, "machineconfiguration.yaml"), "--json"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert core(doc["actions"]) == [{"type": "DaemonReload"}, {"type": "Restart", "unit": "chronyd.service"},
                                    {"type": "Special"}, {"type": "Restart", "unit": "kubelet.service"}]
    assert (doc["drain"], doc["reboot"]) == (False, False)
