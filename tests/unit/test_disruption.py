"""Node disruption policy: validation, defaults, merge, and the action table (REFERENCE §4)."""

import pytest

from agent.core import disruption as d
from agent.core.diff import Changes, FileChange, OSChange, SSHKeyChange, UnitChange, UserChange
from agent.errors import ConfigError


def fc(path, change="changed", old=None, new=None):
    return FileChange(path, "file", change, ("contents",) if change == "changed" else (), old, new)


def kinds(plan):
    return [(a["type"], a.get("unit")) for a in plan.to_dict()["actions"]]


def user_policy(files=(), units=(), sshkey=None):
    doc = {"files": list(files), "units": list(units)}
    if sshkey is not None:
        doc["sshkey"] = {"actions": sshkey}
    return d.effective_policy(d.parse_policy(doc))


RESTART = lambda unit: {"type": "Restart", "restart": {"serviceName": unit}}  # noqa: E731
RELOAD = lambda unit: {"type": "Reload", "reload": {"serviceName": unit}}  # noqa: E731

# --- every default entry -----------------------------------------------------------------------

DEFAULT_TABLE = [
    ("/var/lib/kubelet/config.json", [("None", None)], False),
    ("/etc/machine-config-daemon/no-reboot/containers-gpg.pub", [("Reload", "crio.service")], False),
    ("/etc/containers/policy.json", [("Reload", "crio.service")], False),
    ("/etc/containers/registries.d/example.yaml", [("Reload", "crio.service")], False),
    ("/etc/containers/registries.d", [("Reload", "crio.service")], False),
    ("/etc/crio/policies/openshift.json", [("Reload", "crio.service")], False),
    ("/etc/nmstate/openshift/worker.yml", [("None", None)], False),
    ("/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt",
     [("Restart", "coreos-update-ca-trust.service"), ("Restart", "crio.service")], False),
    ("/etc/kubernetes/credential-providers/ecr.yaml", [("Restart", "kubelet.service")], False),
    ("/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf",
     [("DaemonReload", None), ("Restart", "kubelet.service")], False),
    ("/etc/node-agent/boot-image-skew.json", [("None", None)], False),
    ("/etc/node-agent/pool.json", [("None", None)], False),
    ("/etc/kubernetes/kubelet-env", [("Restart", "kubelet.service")], False),
    # InternalReleaseImage defaults (MCO apihelpers.go:137-186)
    ("/etc/iri-registry/certs/tls.crt", [("Restart", "iri-registry.service")], False),
    ("/usr/local/bin/load-registry-image.sh", [("Restart", "iri-registry.service")], False),
    ("/etc/pki/ca-trust/source/anchors/iri-root-ca.crt", [("Restart", "coreos-update-ca-trust.service")], False),
    # what the config server adds for kubelet, as the MCS does (server.go:98-197)
    ("/etc/kubernetes/kubeconfig", [("Restart", "kubelet.service")], False),
    ("/etc/kubernetes/kubelet-ca.crt", [("Restart", "kubelet.service")], False),
    ("/etc/chrony.conf", [("Reboot", None)], True),  # no entry
    ("/etc/containers/registries.d.bak", [("Reboot", None)], True),  # a sibling, not a child
    ("/etc/crio", [("Reboot", None)], True),  # a parent of an entry is not covered
]


@pytest.mark.parametrize("path,expected,drain", DEFAULT_TABLE)
def test_default_entries(path, expected, drain):
    plan = d.compute_actions(Changes(files=(fc(path),)))
    assert kinds(plan) == expected
    assert plan.drain is drain
    assert plan.reboot is (expected == [("Reboot", None)])


def test_defaults_file_has_the_reference_table():
    policy = d.default_policy()
    assert [e.key for e in policy.files] == [
        "/var/lib/kubelet/config.json",
        "/etc/machine-config-daemon/no-reboot/containers-gpg.pub",
        "/etc/containers/policy.json",
        "/etc/containers/registries.conf",
        "/etc/containers/registries.d",
        "/etc/crio/policies",
        "/etc/nmstate/openshift",
        "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt",
        "/etc/kubernetes/credential-providers",
        "/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf",
        # InternalReleaseImage (MCO apihelpers.go:137-186)
        "/etc/iri-registry",
        "/usr/local/bin/load-registry-image.sh",
        "/etc/pki/ca-trust/source/anchors/iri-root-ca.crt",
        # node-agent's own additions, after the MCO's table
        "/etc/node-agent",
        "/etc/kubernetes/kubelet-env",
        "/etc/kubernetes/kubeconfig",
        "/etc/kubernetes/kubelet-ca.crt",
    ]
    assert [(e.key, e.actions) for e in policy.units] == [
        ("iri-registry.service", (d.PolicyAction("DaemonReload"), d.PolicyAction("Restart", "iri-registry.service")))]
    assert policy.sshkey == (d.PolicyAction("None"),)
    assert policy.file_entry("/etc/containers/registries.conf").actions == (d.PolicyAction("Special"),)


def test_no_change_is_none():
    plan = d.compute_actions(Changes())
    assert plan.to_dict()["actions"][0]["type"] == "None"
    assert (plan.drain, plan.reboot) == (False, False)
    assert kinds(plan) == [("None", None)]


# --- OS-level changes --------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["osImageURL", "kernelArguments", "kernelArguments.shouldExist",
                                   "kernelArguments.shouldNotExist", "kernelType", "extensions", "fips"])
def test_os_level_change_reboots_even_with_a_none_file(field):
    changes = Changes(os=(OSChange(field, "a", "b"),), files=(fc("/var/lib/kubelet/config.json"),))
    plan = d.compute_actions(changes)
    assert kinds(plan) == [("Reboot", None)]
    assert plan.reboot and plan.drain
    assert f"{field} changed" in plan.actions[0].causes[0].change


# --- longest prefix, overrides, merge ------------------------------------------------------------

def test_longest_parent_directory_wins():
    policy = user_policy(files=[
        {"path": "/etc/app", "actions": [{"type": "Drain"}]},
        {"path": "/etc/app/conf.d", "actions": [RESTART("app.service")]},
        {"path": "/etc/app/conf.d/special.conf", "actions": [{"type": "None"}]},
    ])
    assert kinds(d.compute_actions(Changes(files=(fc("/etc/app/x.conf"),)), policy)) == [("Drain", None)]
    assert kinds(d.compute_actions(Changes(files=(fc("/etc/app/conf.d/a.conf"),)), policy)) == [
        ("Restart", "app.service")]
    assert kinds(d.compute_actions(Changes(files=(fc("/etc/app/conf.d/special.conf"),)), policy)) == [
        ("None", None)]
    assert kinds(d.compute_actions(Changes(files=(fc("/etc/application.conf"),)), policy)) == [("Reboot", None)]


def test_user_entry_replaces_default_in_place_and_others_are_appended():
    user = d.parse_policy({"files": [
        {"path": "/etc/chrony.conf", "actions": [RESTART("chronyd.service")]},
        {"path": "/etc/containers/policy.json", "actions": [{"type": "Drain"}, RELOAD("crio.service")]},
    ]})
    merged = d.merge(d.default_policy(), user)
    keys = [e.key for e in merged.files]
    assert keys.index("/etc/containers/policy.json") == 2  # replaced in place
    assert keys[-1] == "/etc/chrony.conf"  # added at the end
    assert len(keys) == len(d.default_policy().files) + 1
    plan = d.compute_actions(Changes(files=(fc("/etc/containers/policy.json"),)), merged)
    assert kinds(plan) == [("Drain", None), ("Reload", "crio.service")]
    assert plan.drain and not plan.reboot


def test_user_sshkey_replaces_default():
    changes = Changes(ssh_keys=(SSHKeyChange("core", ("ssh-ed25519 AAAA new",), ()),))
    assert kinds(d.compute_actions(changes)) == [("None", None)]
    policy = user_policy(sshkey=[{"type": "Drain"}, RESTART("sshd.service")])
    plan = d.compute_actions(changes, policy)
    assert kinds(plan) == [("Drain", None), ("Restart", "sshd.service")]
    assert plan.actions[1].causes[0].rule == "sshkey"


def test_user_change_other_than_keys_reboots_but_password_follows_sshkey():
    assert kinds(d.compute_actions(Changes(users=(UserChange("core", "changed", ("passwordHash",)),)))) == [
        ("None", None)]
    assert kinds(d.compute_actions(Changes(users=(UserChange("bob", "added", ("groups",)),)))) == [
        ("Reboot", None)]


def test_units_match_by_exact_name():
    policy = user_policy(units=[{"name": "chronyd.service", "actions": [RESTART("chronyd.service")]}])
    changed = Changes(units=(UnitChange("chronyd.service", "changed", ("contents",)),))
    assert kinds(d.compute_actions(changed, policy)) == [("Restart", "chronyd.service")]
    other = Changes(units=(UnitChange("chronyd.socket", "changed", ("contents",)),))
    assert kinds(d.compute_actions(other, policy)) == [("Reboot", None)]


# --- combining: Reboot dominance, None dropping, order, no duplicates ------------------------------

def test_reboot_dominates_everything():
    changes = Changes(files=(fc("/etc/containers/policy.json"), fc("/etc/unknown.conf"),
                             fc("/var/lib/kubelet/config.json")))
    plan = d.compute_actions(changes)
    assert kinds(plan) == [("Reboot", None)]
    assert [str(c.change) for c in plan.actions[0].causes] == ["/etc/unknown.conf changed (contents)"]


def test_none_mixed_with_others_is_dropped():
    changes = Changes(files=(fc("/var/lib/kubelet/config.json"), fc("/etc/containers/policy.json")))
    assert kinds(d.compute_actions(changes)) == [("Reload", "crio.service")]


def test_only_nones_give_a_single_none():
    changes = Changes(files=(fc("/var/lib/kubelet/config.json"), fc("/etc/nmstate/openshift/a.yml")),
                      ssh_keys=(SSHKeyChange("core", ("k",)),))
    plan = d.compute_actions(changes)
    assert kinds(plan) == [("None", None)]
    assert len(plan.actions[0].causes) == 3


def test_stable_order_without_duplicates_and_daemon_reload_first():
    changes = Changes(files=(
        fc("/etc/containers/policy.json"),  # Reload crio
        fc("/etc/crio/policies/a.json"),  # Reload crio again: merged
        fc("/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt"),
        fc("/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf"),
    ))
    plan = d.compute_actions(changes)
    assert kinds(plan) == [
        ("DaemonReload", None),
        ("Reload", "crio.service"),
        ("Restart", "coreos-update-ca-trust.service"),
        ("Restart", "crio.service"),
        ("Restart", "kubelet.service"),
    ]
    assert len(plan.actions[1].causes) == 2  # both files explain the one reload
    # the same input always gives the same output
    assert d.compute_actions(changes).to_dict() == plan.to_dict()


def test_entry_order_is_kept_and_drain_flag_set():
    policy = user_policy(files=[{"path": "/etc/app.conf", "actions": [
        RESTART("b.service"), {"type": "Drain"}, RELOAD("a.service")]}])
    plan = d.compute_actions(Changes(files=(fc("/etc/app.conf"),)), policy)
    assert kinds(plan) == [("Restart", "b.service"), ("Drain", None), ("Reload", "a.service")]
    assert plan.drain and not plan.reboot


@pytest.mark.parametrize("path", ["/etc/machine-config-daemon/node-annotations.json",
                                  "/etc/ignition-machine-config-encapsulated.json",
                                  "/etc/mcs-machine-config-content.json"])
def test_bookkeeping_files_of_the_server_need_nothing(path):
    changes = Changes(files=(fc(path),))
    assert kinds(d.compute_actions(changes)) == [("None", None)]


def test_iri_registry_unit_default():
    # apihelpers.go:137-186: a change of iri-registry.service reloads systemd, then restarts it
    plan = d.compute_actions(Changes(units=(UnitChange("iri-registry.service", "changed", ("contents",)),)))
    assert kinds(plan) == [("DaemonReload", None), ("Restart", "iri-registry.service")]


def test_empty_sshkey_actions_mean_the_default():
    # apihelpers.go:499-503: sshkey with actions: [] keeps the default (None), it is not an error
    policy = user_policy(sshkey=[])
    assert policy.sshkey == (d.PolicyAction("None"),)
    assert d.merge_policy({"sshkey": {"actions": []}}).sshkey == (d.PolicyAction("None"),)


@pytest.mark.parametrize("name", ["getty@tty1.service", "foo@.service"])
def test_service_name_with_at_is_invalid(name):
    # openshift/api NodeDisruptionPolicy service names: no '@' (template units cannot be named)
    with pytest.raises(ConfigError) as exc:
        d.parse_policy({"files": [{"path": "/etc/x", "actions": [RESTART(name)]}]})
    assert any(p.path.endswith(".restart.serviceName") for p in exc.value.problems)
    with pytest.raises(ConfigError):
        d.parse_policy({"units": [{"name": name, "actions": [{"type": "None"}]}]})


# --- registries.conf (Special) ---------------------------------------------------------------------

OLD_REG = b'''unqualified-search-registries = ["registry.access.redhat.com"]
[[registry]]
location = "quay.io/ocp"
'''
DIGEST_ONLY = OLD_REG + b'''[[registry.mirror]]
location = "mirror.local/ocp"
pull-from-mirror = "digest-only"
'''
TAG_MIRROR = OLD_REG + b'''[[registry.mirror]]
location = "mirror.local/ocp"
pull-from-mirror = "tag-only"
'''


@pytest.mark.parametrize("old,new,drain", [
    (OLD_REG, DIGEST_ONLY, False),
    (DIGEST_ONLY, OLD_REG, True),  # removing a mirror
    (OLD_REG, TAG_MIRROR, True),
    (OLD_REG, b"not [ toml", True),
    (None, DIGEST_ONLY, True),  # old contents unknown
    # appending to unqualified-search-registries needs no drain (MCO drain.go:188-197) ...
    (OLD_REG, OLD_REG.replace(b'"registry.access.redhat.com"]', b'"registry.access.redhat.com", "docker.io"]'),
     False),
    # ... but removing or reordering one does
    (OLD_REG.replace(b'"registry.access.redhat.com"]', b'"registry.access.redhat.com", "docker.io"]'), OLD_REG,
     True),
    (OLD_REG.replace(b'"registry.access.redhat.com"]', b'"a.io", "b.io"]'),
     OLD_REG.replace(b'"registry.access.redhat.com"]', b'"b.io", "a.io"]'), True),
])
def test_registries_conf_is_special(old, new, drain):
    plan = d.compute_actions(Changes(files=(fc(d.REGISTRIES_CONF, old=old, new=new),)))
    out = plan.to_dict()
    assert [(a["type"], a.get("unit")) for a in out["actions"]] == [("Special", None)]
    assert out["actions"][0]["reload"] == "crio.service"
    assert out["drain"] is drain and out["reboot"] is False
    assert out["actions"][0]["drain"] is drain


def test_registries_conf_added_drains():
    plan = d.compute_actions(Changes(files=(fc(d.REGISTRIES_CONF, "added", new=DIGEST_ONLY),)))
    assert plan.drain and kinds(plan) == [("Special", None)]


# --- first boot ------------------------------------------------------------------------------------

def test_firstboot_no_drain_and_conditional_restarts():
    policy = user_policy(files=[{"path": "/etc/app.conf", "actions": [{"type": "Drain"}, RESTART("app.service")]}])
    plan = d.compute_actions(Changes(files=(fc("/etc/app.conf"), fc(d.REGISTRIES_CONF, new=b"x"))), policy,
                             firstboot=True)
    out = plan.to_dict()
    assert kinds(plan) == [("Restart", "app.service"), ("Special", None)]
    assert all(a["onlyIfActive"] for a in out["actions"])
    assert out["drain"] is False
    assert "only if active" in plan.explain()


def test_firstboot_reboot_only_where_needed():
    plan = d.compute_actions(Changes(os=(OSChange("osImageURL", "a", "b"),)), firstboot=True)
    assert (plan.reboot, plan.drain) == (True, False)
    plan = d.compute_actions(Changes(files=(fc("/etc/containers/policy.json"),)), firstboot=True)
    assert not plan.reboot


def test_firstboot_drain_only_becomes_none():
    policy = user_policy(files=[{"path": "/etc/app.conf", "actions": [{"type": "Drain"}]}])
    plan = d.compute_actions(Changes(files=(fc("/etc/app.conf"),)), policy, firstboot=True)
    assert kinds(plan) == [("None", None)] and not plan.drain


# --- explanations ----------------------------------------------------------------------------------

def test_explain_names_change_and_policy_entry():
    policy = user_policy(files=[{"path": "/etc/chrony.conf", "actions": [RESTART("chronyd.service")]}])
    text = d.compute_actions(Changes(files=(fc("/etc/chrony.conf"),)), policy).explain()
    assert ("/etc/chrony.conf changed (contents); policy files[/etc/chrony.conf] says Restart chronyd.service"
            in text)
    assert text.rstrip().endswith("No reboot. No drain.")
    reboot = d.compute_actions(Changes(files=(fc("/etc/x"),))).explain()
    assert "no policy entry covers it" in reboot and reboot.rstrip().endswith(
        "Reboot (drain first: node-config-server cordons the Node and evicts its pods as kubectl drain does "
        "(Kubernetes backend; other backends have no pods: a drain lease only)).")


# --- validation ------------------------------------------------------------------------------------

P = "$.spec.nodeDisruptionPolicy"


def problems_of(doc):
    with pytest.raises(ConfigError) as info:
        d.policy_from_document({"kind": "MachineConfiguration", "spec": {"nodeDisruptionPolicy": doc}})
    return {p.path: p.message for p in info.value.problems}


@pytest.mark.parametrize("doc,path,fragment", [
    ({"files": [{"path": "etc/x", "actions": [{"type": "None"}]}]}, f"{P}.files.0.path", "absolute"),
    ({"files": [{"path": "/a", "actions": [{"type": "Reboot"}, {"type": "Drain"}]}]}, f"{P}.files.0.actions",
     "Reboot must be the only"),
    ({"files": [{"path": "/a", "actions": [{"type": "None"}, {"type": "Drain"}]}]}, f"{P}.files.0.actions",
     "None must be the only"),
    ({"files": [{"path": "/a", "actions": [{"type": "Restart", "restart": {"serviceName": "chronyd"}}]}]},
     f"{P}.files.0.actions.0.restart.serviceName", "unit name"),
    ({"files": [{"path": "/a", "actions": [{"type": "Restart"}]}]},
     f"{P}.files.0.actions.0.restart.serviceName", "needs restart.serviceName"),
    ({"files": [{"path": "/a", "actions": [{"type": "Reload", "reload": {"serviceName": "x" * 250 + ".service"}}]}]},
     f"{P}.files.0.actions.0.reload.serviceName", "at most 255"),
    ({"files": [{"path": "/a", "actions": [{"type": "Drain", "reload": {"serviceName": "a.service"}}]}]},
     f"{P}.files.0.actions.0.reload", "only allowed"),
    ({"files": [{"path": "/a", "actions": [{"type": "Special"}]}]}, f"{P}.files.0.actions.0.type", "reserved"),
    ({"files": [{"path": "/a", "actions": [{"type": "Bounce"}]}]}, f"{P}.files.0.actions.0.type", "unknown"),
    ({"files": [{"path": "/a", "actions": [{"type": "Drain"}] * 11}]}, f"{P}.files.0.actions", "at most 10"),
    ({"files": [{"path": "/a", "actions": []}]}, f"{P}.files.0.actions", "at least one"),
    ({"files": [{"path": f"/f{i}", "actions": [{"type": "None"}]} for i in range(51)]}, f"{P}.files", "at most 50"),
    ({"units": [{"name": f"u{i}.service", "actions": [{"type": "None"}]} for i in range(51)]}, f"{P}.units",
     "at most 50"),
    ({"units": [{"name": "kubelet", "actions": [{"type": "None"}]}]}, f"{P}.units.0.name", "unit name"),
    ({"units": [{"name": "a.service", "actions": [{"type": "None"}]},
                {"name": "a.service", "actions": [{"type": "None"}]}]}, f"{P}.units.1.name", "duplicate"),
    ({"sshkey": {"actions": [{"type": "Reboot"}, {"type": "Drain"}]}}, f"{P}.sshkey.actions", "Reboot"),
    ({"sshkey": {}}, f"{P}.sshkey", "actions"),
    ({"bogus": 1}, f"{P}.bogus", "unknown field"),
])
def test_validation_names_the_field(doc, path, fragment):
    found = problems_of(doc)
    assert path in found, found
    assert fragment in found[path]


def test_validation_reports_every_problem_and_nests_deep_paths():
    found = problems_of({"files": [
        {"path": "/ok", "actions": [{"type": "None"}]},
        {"path": "/ok2", "actions": [{"type": "None"}]},
        {"path": "/x", "actions": [RESTART("bad name")]},
    ], "units": [{"name": "nope", "actions": [{"type": "None"}]}]})
    assert set(found) == {f"{P}.files.2.actions.0.restart.serviceName", f"{P}.units.0.name"}


def test_limits_are_inclusive():
    # '@' is not allowed in a policy's unit names (openshift/api NodeDisruptionPolicySpecUnit: alphabets,
    # digits, ':', '-', '_', '.', '\\'): see test_service_name_with_at_is_invalid
    doc = {"files": [{"path": f"/f{i}", "actions": [{"type": "Drain"}] * 10} for i in range(50)],
           "units": [{"name": "getty-tty1.service", "actions": [RESTART("getty-tty1.service")]}]}
    policy = d.parse_policy(doc)
    assert len(policy.files) == 50


def test_yaml_text_and_wrong_kind():
    text = """
apiVersion: operator.openshift.io/v1
kind: MachineConfiguration
metadata: {name: cluster}
spec:
  nodeDisruptionPolicy:
    units:
      - name: chronyd.service
        actions: [{type: Restart, restart: {serviceName: chronyd.service}}]
"""
    policy = d.load_policy_text(text, "mc.yaml")
    assert policy.unit_entry("chronyd.service").actions == (d.PolicyAction("Restart", "chronyd.service"),)
    with pytest.raises(ConfigError, match="MachineConfiguration"):
        d.load_policy_text("kind: MachineConfig\nspec: {}\n")
    with pytest.raises(ConfigError, match="YAML"):
        d.load_policy_text("spec: [unclosed\n")
    # no policy in the document: defaults only
    assert d.effective_policy(d.load_policy_text("kind: MachineConfiguration\nspec: {}\n")) == d.effective_policy()


def test_policy_to_dict_round_trips():
    merged = d.effective_policy()
    assert d.parse_policy(merged.to_dict(), origin="default") == d.Policy(
        tuple(d.PolicyEntry(e.key, e.actions, "default") for e in merged.files),
        tuple(d.PolicyEntry(e.key, e.actions, "default") for e in merged.units), merged.sshkey)


def test_merge_policy_from_a_spec_mapping():
    merged = d.merge_policy({"units": [{"name": "a.service", "actions": [{"type": "Drain"}]}]})
    assert merged.unit_entry("a.service").actions == (d.PolicyAction("Drain"),)
    assert merged.files == d.default_policy().files
    assert d.merge_policy(None) == d.effective_policy()
