"""node-config-server's pure parts: rendering, gating, rollout steps, membership, negotiation."""

import json
import os

import pytest

from agent.core.objectchecks import parse_max_unavailable
from agent.server.cluster import content
from agent.server.cluster.service import ReportInvalid, validate_report
from agent.server.rollout import gating, progress
from agent.server.rollout.render import merge_machine_configs, render_pool, selector_matches
from agent.server.store.stateformat import load_state
from tests.helpers import paths

ROLE = "machineconfiguration.openshift.io/role"


def mc(name, role="worker", **spec):
    return {"metadata": {"name": name, "labels": {ROLE: role}}, "spec": spec}


def pool(name, selector=None, **spec):
    return {"metadata": {"name": name},
            "spec": {"machineConfigSelector": selector or {"matchLabels": {ROLE: name}}, **spec}}


# -- rendering -------------------------------------------------------------------------------

def test_merge_follows_mco_rules():
    a = mc("00-a", osImageURL="img:a", kernelArguments=["a=1"], extensions=["usbguard"], kernelType="realtime",
           config={"ignition": {"version": "3.2.0"}, "storage": {"files": [
               {"path": "/etc/x", "contents": {"source": "data:,a"}}, {"path": "/etc/keep"}]}})
    b = mc("10-b", kernelArguments=["b=2", "a=1"], extensions=["usbguard", "kerberos"], fips=True,
           config={"ignition": {"version": "3.4.0"}, "storage": {"files": [
               {"path": "/etc/x", "contents": {"source": "data:,b"}}]}})
    c = mc("20-c", osImageURL="", kernelType="default")
    spec = merge_machine_configs([a, b, c])
    assert spec["osImageURL"] == "img:a"  # the last non-empty
    assert spec["kernelArguments"] == ["a=1", "b=2", "a=1"]  # accumulate
    assert spec["extensions"] == ["usbguard", "kerberos"]
    assert spec["fips"] is True
    assert spec["kernelType"] == "realtime"  # "default" later does not reset it
    files = {f["path"]: f for f in spec["config"]["storage"]["files"]}
    assert files["/etc/x"]["contents"]["source"] == "data:,b"  # later wins
    assert "/etc/keep" in files


def test_render_is_name_ordered_and_content_addressed():
    mcs = {"50-b": mc("50-b", osImageURL="img:b"), "00-a": mc("00-a", osImageURL="img:a"),
           "99-master": mc("99-master", role="master", osImageURL="img:m")}
    r = render_pool(pool("worker"), mcs)
    assert r.sources == ("00-a", "50-b")
    assert r.spec["osImageURL"] == "img:b"
    assert r.name.startswith("rendered-worker-") and len(r.name.rsplit("-", 1)[1]) == 32
    assert render_pool(pool("worker"), dict(mcs)).name == r.name
    mcs["60-c"] = mc("60-c", kernelArguments=["x"])
    assert render_pool(pool("worker"), mcs).name != r.name


def test_selector_match_expressions():
    sel = {"matchExpressions": [{"key": ROLE, "operator": "In", "values": ["worker", "infra"]}]}
    assert selector_matches(sel, {ROLE: "infra"}) and selector_matches(sel, {ROLE: "worker"})
    assert not selector_matches(sel, {ROLE: "master"})
    assert not selector_matches({}, {ROLE: "worker"})  # an empty selector selects nothing
    assert selector_matches({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"})


# -- gating (REFERENCE §2) ----------------------------------------------------------------------

MOSC = {"infra": {"metadata": {"name": "infra"}, "spec": {"machineConfigPool": {"name": "infra"}},
                  "status": {"currentImagePullSpec": "reg/infra@sha256:1"}}}


def build(config, succeeded=True, failed=False):
    return {"b": {"metadata": {"name": "b"}, "spec": {"machineOSConfig": {"name": "infra"},
                                                     "machineConfig": {"name": config}},
                  "status": {"conditions": [{"type": "Succeeded", "status": str(succeeded)},
                                            {"type": "Failed", "status": str(failed)}]}}}


BASE = {"T": "base:t", "C": "base:c"}


@pytest.mark.parametrize("target,current,updated,mosc,builds,config,image", [
    ("T", "C", 0, {}, {}, "C", "base:c"),  # nobody runs the target: the current config
    ("T", "C", 1, {}, {}, "T", "base:t"),  # one updated node proves the target
    ("T", "T", 0, {}, {}, "T", "base:t"),  # brand-new pool: its only config
    ("T", "C", 1, MOSC, build("T"), "T", "reg/infra@sha256:1"),  # build succeeded and proven
    ("T", "T", 0, MOSC, build("T"), "T", "base:t"),  # build succeeded, not proven yet
    ("T", "C", 0, MOSC, build("T"), "C", "base:c"),
    ("T", "C", 1, MOSC, build("T", succeeded=False, failed=True), "T", "base:t"),  # failed build never
    ("T", "T", 3, MOSC, build("T", succeeded=False), "T", "base:t"),  # still building
    ("T", "C", 1, MOSC, build("OTHER"), "T", "base:t"),  # a build of another config
])
def test_gating_table(target, current, updated, mosc, builds, config, image):
    served = gating.decide("infra", target, current, updated, BASE, mosc, builds)
    assert (served.config, served.image) == (config, image)
    assert served.reason


INTERNAL = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/os@sha256:2"


def mosc_with(pull_spec):
    return {"infra": {"metadata": {"name": "infra"}, "spec": {"machineConfigPool": {"name": "infra"}},
                      "status": {"currentImagePullSpec": pull_spec} if pull_spec else {}}}


def test_internal_registry_image_is_never_served_to_a_new_node():
    # cluster_server.go resolveDesiredImageForPool: IsOpenShiftRegistry -> "" (base image, 2 reboots)
    served = gating.decide("infra", "T", "C", 3, BASE, mosc_with(INTERNAL), build("T"))
    assert (served.config, served.image, served.layered) == ("T", "base:t", False)
    assert "internal registry" in served.reason and INTERNAL in served.reason
    # a member has cluster DNS: it gets the image (upstream: the MCD updates it after joining)
    assert gating.for_member("infra", "T", BASE, mosc_with(INTERNAL), build("T")).image == INTERNAL


def test_currentimagepullspec_is_required():
    # cluster_server.go: !moscState.HasOSImage() -> no layered image, even with a digested build
    builds = build("T")
    builds["b"]["status"]["digestedImagePushSpec"] = "reg/infra@sha256:9"
    served = gating.decide("infra", "T", "T", 2, BASE, mosc_with(None), builds)
    assert served.image == "base:t" and "status.currentImagePullSpec" in served.reason
    assert gating.for_member("infra", "T", BASE, mosc_with(None), builds).image == "base:t"


def test_mid_rollout_the_current_config_brings_its_proven_image():
    # Target T unproven: a new node gets current C, with C's layered image once a node runs C with it
    builds = {**build("C"), **{"t": dict(build("T")["b"], metadata={"name": "t"})}}
    builds["b"]["status"]["digestedImagePushSpec"] = "reg/infra@sha256:c"  # C's own build
    served = gating.decide("infra", "T", "C", 0, BASE, MOSC, builds, current_proof=2)
    assert (served.config, served.image, served.layered) == ("C", "reg/infra@sha256:c", True)
    assert "proven by 2 node(s)" in served.reason
    served = gating.decide("infra", "T", "C", 0, BASE, MOSC, builds, current_proof=0)
    assert (served.config, served.image) == ("C", "base:c") and "runs on no node yet" in served.reason


def test_failed_build_is_explained():
    served = gating.decide("infra", "T", "T", 5, BASE, MOSC, build("T", succeeded=False, failed=True))
    assert "has not succeeded" in served.reason and served.image == "base:t"


@pytest.mark.parametrize("builds,image", [
    ({}, "base:t"),
    (build("T"), "reg/infra@sha256:1"),  # a member may run the unproven build: it is how it gets proven
    (build("T", succeeded=False, failed=True), "base:t"),  # but never a failed one
])
def test_a_member_gets_the_target_even_before_it_is_proven(builds, image):
    served = gating.for_member("infra", "T", BASE, MOSC, builds)
    assert (served.config, served.image) == ("T", image)
    assert "member of infra" in served.reason


# -- counts, rollout, membership ---------------------------------------------------------------

def members(**reports):
    return {n: (r, progress.Membership(r["pool"], "test")) for n, r in reports.items()}


def test_updated_needs_layered_image_too():
    m = members(a={"pool": "p", "state": "Done", "currentConfig": "T", "currentImage": "old"},
                b={"pool": "p", "state": "Done", "currentConfig": "T", "currentImage": "new"})
    assert progress.count(m, "T", "new").updated == 1
    assert progress.count(m, "T", None).updated == 2


def C(machine=0, ready=0):
    return progress.Counts(machine=machine, ready=ready, updated=ready)


@pytest.mark.parametrize("rendered,row,counts,waiting,expect", [
    ("R1", None, C(), False, ("R1", "R1", False)),  # brand-new pool
    ("R2", {"target": "R1", "current": "R1"}, C(2, 2), False, ("R2", "R1", False)),  # starts a rollout
    ("R2", {"target": "R1", "current": "R1"}, C(0, 0), False, ("R2", "R2", False)),  # no nodes: nothing runs R1
    # nodes wait for approval in it: R1 (what they run) stays what new nodes get until a counted node proves R2
    ("R2", {"target": "R1", "current": "R1"}, C(0, 0), True, ("R2", "R1", False)),
    ("R2", {"target": "R2", "current": "R1"}, C(0, 0), True, ("R2", "R1", False)),
    # a new rendering is the target at once, also mid-rollout (a revert is one step; targeting paces nodes)
    ("R3", {"target": "R2", "current": "R1"}, C(2, 1), False, ("R3", "R1", False)),
    ("R1", {"target": "R2", "current": "R1"}, C(2, 0), False, ("R1", "R1", False)),  # reverted
    ("R2", {"target": "R2", "current": "R1"}, C(2, 2), False, ("R2", "R2", False)),  # all done: current moves
    ("R3", {"target": "R2", "current": "R1"}, C(2, 2), False, ("R3", "R2", False)),  # done, then next
    # the admin rolled back from R2 to R1: R2 waits (RenderHeld) until a new rendering replaces it
    ("R2", {"target": "R1", "current": "R1", "rollout": {"pinned": {"config": "R1", "from": "R2", "at": 1.0}}},
     C(2, 2), False, ("R1", "R1", True)),
    ("R3", {"target": "R1", "current": "R1", "rollout": {"pinned": {"config": "R1", "from": "R2", "at": 1.0}}},
     C(2, 2), False, ("R3", "R1", False)),
])
def test_rollout_step_moves_the_target_at_once_but_current_only_when_every_counted_node_is_done(rendered, row, counts,
                                                                                             waiting, expect):
    step = progress.rollout_step(rendered, row, counts, waiting)
    assert (step.target, step.current, bool(step.held)) == expect
    assert step.unpin == bool(row and (row.get("rollout") or {}).get("pinned") and rendered == "R3")


POOLS = {
    "master": {"metadata": {"name": "master"}, "spec": {"nodeSelector": {"matchLabels": {"node-role/master": ""}}}},
    "worker": {"metadata": {"name": "worker"}, "spec": {"nodeSelector": {"matchLabels": {"node-role/worker": ""}}}},
    "infra": {"metadata": {"name": "infra"}, "spec": {"nodeSelector": {"matchLabels": {"node-role/infra": ""}}}},
    "gpu": {"metadata": {"name": "gpu"}, "spec": {"nodeSelector": {"matchLabels": {"node-role/gpu": ""}}}},
}


def pool_of(name):
    return name[len("rendered-"):].rsplit("-", 1)[0] if name.startswith("rendered-") else None


def test_first_pivot_of_custom_pool_wins_over_worker():
    m = progress.membership({"pool": "worker", "firstPivotConfig": "rendered-infra-abc"}, POOLS, pool_of)
    assert m.pool == "infra" and not m.degraded


def test_label_precedence_master_custom_worker():
    both = {"node-role/worker": "", "node-role/infra": ""}
    assert progress.membership({"pool": "worker", "labels": both}, POOLS, pool_of).pool == "infra"
    assert progress.membership({"pool": "worker", "labels": {**both, "node-role/master": ""}},
                               POOLS, pool_of).pool == "master"
    two = progress.membership({"pool": "worker", "labels": {**both, "node-role/gpu": ""}}, POOLS, pool_of)
    assert two.degraded and "gpu" in two.degraded and "infra" in two.degraded


def test_a_pool_selected_by_match_expressions_gets_its_nodes():
    pools = dict(POOLS, gpu={"spec": {"nodeSelector": {"matchExpressions": [
        {"key": "node-role/gpu", "operator": "Exists"},
        {"key": "node-role/infra", "operator": "DoesNotExist"}]}}})
    m = progress.membership({"pool": "worker", "labels": {"node-role/worker": "", "node-role/gpu": ""}}, pools, pool_of)
    assert m.pool == "gpu" and not m.degraded
    # DoesNotExist holds it back from an infra node: infra alone matches, no conflict.
    m = progress.membership({"pool": "worker", "labels": {"node-role/worker": "", "node-role/gpu": "", "node-role/infra": ""}},
                            pools, pool_of)
    assert m.pool == "infra" and not m.degraded


def test_cluster_progress_names_what_blocks():
    def view(target, current, paused=False, machine=1, updated=1, ready=1, degraded=0, refused=0, held=""):
        return {"spec": {"configuration": {"name": target}, "paused": paused},
                "status": {"configuration": {"name": current}, "machineCount": machine, "updatedMachineCount": updated,
                           "readyMachineCount": ready, "degradedMachineCount": degraded,
                           "skewRefusedMachineCount": refused, "held": held}}
    out = progress.cluster_progress({"master": view("a", "a"), "worker": view("b", "b")})
    assert out["complete"] and out["blocking"] == []
    out = progress.cluster_progress({"master": view("a", "a"), "worker": view("c", "b", paused=True, updated=0, ready=0),
                                     "infra": view("d", "d", degraded=1, refused=1)})
    assert not out["complete"] and out["pools"]["master"]["complete"]
    reasons = {(b["pool"], b["reason"].split(":")[0]) for b in out["blocking"]}
    assert ("worker", "paused while updating to c") in reasons
    assert ("infra", "degraded") in reasons and ("infra", "skew") in reasons


# -- drains ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,count,want", [(None, 5, 1), (2, 5, 2), ("50%", 5, 2), ("10%", 5, 1), (0, 5, 1),
                                              ("150%", 5, 7), ("25%", 302, 75), ("0%", 5, 1)])
def test_max_unavailable_as_GetScaledValueFromIntOrPercent(value, count, want):
    """node_controller.go maxUnavailable: percent of the pool rounded down (150% too), 0 -> 1."""
    assert parse_max_unavailable(value, count) == want


@pytest.mark.parametrize("value", ["abc", "2", "3", "-5%", -1, True, 1.5])
def test_max_unavailable_GetScaledValueFromIntOrPercent_refuses(value):
    """A quoted bare number is no percentage upstream either; negatives would stall the pool."""
    with pytest.raises(ValueError):
        parse_max_unavailable(value, 5)


# -- served content ----------------------------------------------------------------------------

def _files(doc):
    from agent.core.served import read_served

    return read_served(doc)


def test_served_additions_read_back_by_the_agent():
    p = {"metadata": {"name": "infra"}, "spec": {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/infra": ""}}}}
    spec = {"config": {"ignition": {"version": "3.5.0"}}, "osImageURL": "base", "kernelArguments": ["nosmt"],
            "kernelType": "default", "extensions": [], "fips": False}
    cluster = {"bootImageSkewEnforcement": {"mode": "Manual", "manual": {"mode": "RHCOSVersion",
                                                                         "rhcosVersion": "9.2.20240101-0"}},
               "nodeDisruptionPolicy": {"files": [{"path": "/etc/chrony.conf", "actions": [{"type": "None"}]}]}}
    doc = content.build_document(p, "rendered-infra-x", spec, "quay.io/x/rhel-coreos-9:9.6", cluster, layered=True)
    served = _files(doc)
    assert served.config_name == "rendered-infra-x" and served.pool == "infra"
    assert served.annotations["machineconfiguration.openshift.io/state"] == "Done"
    assert served.annotations["machineconfiguration.openshift.io/desiredImage"] == "quay.io/x/rhel-coreos-9:9.6"
    assert served.encapsulated["spec"]["osImageURL"] == "quay.io/x/rhel-coreos-9:9.6"
    assert served.encapsulated["spec"]["kernelArguments"] == ["nosmt"]
    assert served.skew_rules == {"mode": "Enforce", "allowMajorUpgrade": False,
                                 "minimum": {"rhcosVersion": "9.2"},  # RHEL major.minor only
                                 "target": {"osImageURL": "quay.io/x/rhel-coreos-9:9.6", "rhelMajor": 9}}
    assert served.pool_info["nodeSelector"] == {"matchLabels": {"node-role.kubernetes.io/infra": ""}}
    assert "/etc/chrony.conf" in served.policy_text
    assert all(f["mode"] == 0o644 for f in doc["storage"]["files"])


@pytest.mark.parametrize("skew,want", [
    ({"mode": "None"}, {"mode": "None"}),
    ({"mode": "Automatic"}, {"rhcosVersion": "9.2"}),
    ({"mode": "Manual", "manual": {"ocpVersion": "4.13.0"}}, {"ocpVersion": "4.13.0"}),
])
def test_skew_rules_modes(skew, want):
    rules = content.skew_rules({"bootImageSkewEnforcement": skew}, {"metadata": {"name": "w"}}, "img")
    if skew["mode"] == "None":
        assert rules == want
    else:
        assert rules["mode"] == "Enforce" and rules["minimum"] == want and "rhelMajor" not in rules["target"]


def test_negotiation_moves_kernel_arguments_below_33():
    # upstream MigrateKernelArgsIfNecessary (server.go:275-293): shouldExist -> spec.kernelArguments
    p = {"metadata": {"name": "worker"}, "spec": {}}
    spec = {"config": {"ignition": {"version": "3.5.0"}, "kernelArguments": {"shouldExist": ["a"]}},
            "osImageURL": "base", "kernelArguments": ["nosmt"]}
    for version, in_ign, in_mc in (("3.3.0", ["a"], ["nosmt"]), ("3.2.0", None, ["nosmt", "a"]),
                                   ("2.2.0", None, ["nosmt", "a"])):
        doc = content.build_document(p, "rendered-worker-x", spec, "base", {}, version=version)
        assert doc["ignition"]["version"] == version
        assert (doc.get("kernelArguments") or {}).get("shouldExist") == in_ign
        enc = _files(doc).encapsulated
        assert enc["spec"]["kernelArguments"] == in_mc and enc["spec"]["config"] == {"ignition": {"version": version}}
    spec["config"]["kernelArguments"] = {"shouldNotExist": ["b"]}
    with pytest.raises(content.ConversionFailed, match="shouldNotExist"):
        content.build_document(p, "rendered-worker-x", spec, "base", {}, version="3.2.0")


# -- reports and state files ---------------------------------------------------------------------

@pytest.mark.parametrize("body,field", [
    ([], "$"), ({"state": "Done"}, "$.pool"), ({"pool": "w", "state": "Fine"}, "$.state"),
    ({"pool": "w", "state": "Done", "skew": "maybe"}, "$.skew"),
    ({"pool": "w", "state": "Done", "currentConfig": 3}, "$.currentConfig"),
    ({"pool": "w", "state": "Done", "bogus": 1}, "$.bogus"),
])
def test_report_validation_names_the_field(body, field):
    with pytest.raises(ReportInvalid) as exc:
        validate_report(body)
    assert exc.value.field == field


def test_state_problems_name_file_and_field(tmp_path):
    (tmp_path / "machineconfigpools").mkdir()
    (tmp_path / "machineconfigs").mkdir()
    (tmp_path / "machineconfigpools" / "w.yaml").write_text(
        "metadata: {name: Worker}\nspec: {machineConfigSelector: {matchLabels: {a: b}}, maxUnavailable: lots}\n")
    (tmp_path / "machineconfigs" / "00.yaml").write_text(
        "metadata: {name: '00'}\nspec: {fips: 'yes', config: {ignition: {version: 2.4.0}}}\n")
    (tmp_path / "machineconfigs" / "bad.yaml").write_text("metadata: [\n")
    (tmp_path / "machineconfigs" / "10.yaml").write_text(
        "metadata: {name: '10'}\nspec: {config: {ignition: {version: 3.4.0}, storage: {files: [{path: rel}]}}}\n")
    (tmp_path / "machineconfiguration.yaml").write_text(
        "spec:\n  bootImageSkewEnforcement: {mode: Manual}\n"
        "  nodeDisruptionPolicy: {files: [{path: /etc/x, actions: [{type: Bogus}]}]}\n")
    st = load_state(str(tmp_path))
    found = {(p.source, p.path) for p in st.problems}
    assert ("machineconfigpools/w.yaml", "$.metadata.name") in found
    assert ("machineconfigpools/w.yaml", "$.spec.maxUnavailable") in found
    assert ("machineconfigs/00.yaml", "$.spec.fips") in found
    assert ("machineconfigs/00.yaml", "$.spec.config.ignition.version") in found
    assert ("machineconfigs/bad.yaml", "$") in found
    assert ("machineconfiguration.yaml", "$.spec.bootImageSkewEnforcement.manual") in found
    assert ("machineconfiguration.yaml", "$.spec.nodeDisruptionPolicy.files.0.actions.0.type") in found
    assert ("machineconfigs/10.yaml", "$.spec.config.storage.files.0.path") in found  # full Ignition validation
    assert not st.pools and not st.machine_configs


def test_example_state_is_valid_and_its_build_matches():
    here = os.path.join(paths.REPO, "examples", "state")
    st = load_state(here)
    assert not st.problems, [str(p) for p in st.problems]
    r = render_pool(st.pools["infra"], st.machine_configs)
    assert r.sources == ("00-worker", "50-infra")
    assert gating.layered_image("infra", r.name, st.os_configs, st.os_builds)  # demo build is for this render
    json.dumps(r.spec)


def test_paused_changes_names_each_pool_paused_or_unpaused_and_no_new_pool():
    from agent.server.store.stateformat import paused_changes

    old = {"worker": {"spec": {}}, "infra": {"spec": {"paused": True}}}
    new = {"worker": {"spec": {"paused": True}}, "infra": {"spec": {}}, "gpu": {"spec": {"paused": True}}}
    assert [line.split(" (")[0] for line in paused_changes(old, new)] == ["pool infra unpaused", "pool worker paused"]
    assert paused_changes(new, new) == []
