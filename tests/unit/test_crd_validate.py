"""tests/helpers/crd_validate.py: each family of check, on OpenShift's own CRDs (deploy/crds/),
passes a valid object and fails an invalid one, so a test that relies on it can fail.

cel-python is not installable on CPython 3.9 with RHEL 9's PyYAML 5.4 (every release needs
PyYAML 6): there the module is skipped, and says why.
"""

import copy

import pytest

pytestmark = pytest.mark.cel  # cel-python; the RHEL 9 run (Python 3.9) does not collect this module

from tests.helpers import crd_cel, crd_validate  # noqa: E402

MCO = "machineconfiguration.openshift.io/v1"
DIGEST = "sha256:" + "a" * 64


def mcn(**status):
    obj = {"apiVersion": MCO, "kind": "MachineConfigNode", "metadata": {"name": "worker-0"},
           "spec": {"node": {"name": "worker-0"}, "pool": {"name": "worker"},
                    "configVersion": {"desired": "rendered-worker-1"}}}
    if status:
        obj["status"] = status
    return obj


def pool(**status):
    return {"apiVersion": MCO, "kind": "MachineConfigPool", "metadata": {"name": "worker"},
            "spec": {"machineConfigSelector": {}, "nodeSelector": {}}, "status": status}


def synchronizer(**counts):
    row = {"poolSynchronizerType": "PinnedImageSets", "machineCount": 2, "readyMachineCount": 1,
           "availableMachineCount": 1, "unavailableMachineCount": 0, "updatedMachineCount": 1}
    return dict(row, **counts)


def only(found, *words):
    assert len(found) == 1 and all(w in found[0] for w in words), found


def test_a_valid_machineconfignode_and_pool_have_no_problems():
    assert crd_validate.problems(mcn()) == []
    assert crd_validate.problems(pool(machineCount=2, poolSynchronizersStatus=[synchronizer()])) == []


# -- the structural schema ----------------------------------------------------------------------

def test_schema_type_is_checked():
    only(crd_validate.problems(pool(machineCount="2")), "status.machineCount", "must be of type integer")


def test_schema_required_is_checked():
    obj = mcn()
    del obj["spec"]["pool"]
    only(crd_validate.problems(obj), "spec.pool", "Required value")


def test_schema_enum_is_checked():
    condition = {"type": "Updated", "status": "Maybe", "reason": "R", "message": "m",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
    only(crd_validate.problems(mcn(conditions=[condition])), "status.conditions[0].status", "Unsupported value")
    assert crd_validate.problems(mcn(conditions=[dict(condition, status="True")])) == []


def test_schema_max_length_and_date_time_format_are_checked():
    condition = {"type": "Updated", "status": "True", "reason": "R", "message": "m",
                 "lastTransitionTime": "yesterday"}
    only(crd_validate.problems(mcn(conditions=[condition])), "lastTransitionTime", "RFC 3339")
    long_diff = {"fieldPath": "spec.config", "diff": "x" * 4097}
    only(crd_validate.problems(mcn(irreconcilableChanges=[long_diff])), "diff", "Too long")


def test_an_unknown_field_is_reported_as_pruned():
    obj = mcn()
    obj["spec"]["nodeName"] = "worker-0"
    only(crd_validate.problems(obj), "spec.nodeName", "prunes")


def test_a_map_list_refuses_duplicate_keys():
    rows = [synchronizer(), synchronizer()]
    only(crd_validate.problems(pool(machineCount=2, poolSynchronizersStatus=rows)), "Duplicate value")


def test_int_or_string_takes_both_and_nothing_else():
    obj = pool()
    obj["spec"]["maxUnavailable"] = "25%"
    assert crd_validate.problems(obj) == []
    obj["spec"]["maxUnavailable"] = 2
    assert crd_validate.problems(obj) == []
    obj["spec"]["maxUnavailable"] = 2.5
    only(crd_validate.problems(obj), "spec.maxUnavailable", "integer or a string")


def test_metadata_name_must_be_a_dns_subdomain():
    obj = pool()
    obj["metadata"]["name"] = "Worker_Pool"
    only(crd_validate.problems(obj), "metadata.name", "DNS-1123")


# -- x-kubernetes-validations (CEL) -------------------------------------------------------------

def test_cel_comparison_rules_of_the_pool_synchronizer_counts():
    bad = synchronizer(readyMachineCount=3, availableMachineCount=3)
    found = crd_validate.problems(pool(machineCount=2, poolSynchronizersStatus=[bad]))
    assert len(found) == 2 and all("machineCount must be greater than or equal to" in f for f in found), found


def test_cel_transition_rule_runs_only_against_an_old_object():
    new = pool(machineCount=2, poolSynchronizersStatus=[synchronizer(observedGeneration=3)])
    old = copy.deepcopy(new)
    old["status"]["poolSynchronizersStatus"][0]["observedGeneration"] = 5
    assert crd_validate.problems(new) == []  # a create: oldSelf rules are not run
    only(crd_validate.problems(new, old=old), "observedGeneration", "must not move backwards")
    assert crd_validate.problems(old, old=new) == []


def test_cel_format_dns1123_subdomain_validate_has_value():
    obj = mcn()
    obj["spec"]["configVersion"]["desired"] = ""
    only(crd_validate.problems(obj), "spec.configVersion.desired", "RFC 1123 subdomain")
    obj["spec"]["configVersion"]["desired"] = "not-yet-set"  # what upstream writes before a config is known
    assert crd_validate.problems(obj) == []


def test_cel_root_rule_ties_the_name_to_the_node():
    obj = mcn()
    obj["spec"]["node"]["name"] = "worker-1"
    only(crd_validate.problems(obj), "<root>", "spec.node.name should match metadata.name")


def test_cel_has_implications_of_pinned_image_sets():
    row = {"name": "set-a", "desiredGeneration": 2, "lastFailedGeneration": 2}
    only(crd_validate.problems(mcn(pinnedImageSets=[row])), "last failed generation error must be defined")
    assert crd_validate.problems(mcn(pinnedImageSets=[dict(row, lastFailedGenerationError="pull failed")])) == []
    only(crd_validate.problems(mcn(pinnedImageSets=[{"name": "set-a", "desiredGeneration": 1,
                                                     "currentGeneration": 2}])), "desired generation must be")


def test_cel_split_and_matches_of_an_image_reference():
    def release(image):
        return {"releases": [{"name": "ocp-release-bundle-4.18.0-x86_64", "image": image}]}

    assert crd_validate.problems(mcn(internalReleaseImage=release(f"quay.io/ocp/release@{DIGEST}"))) == []
    only(crd_validate.problems(mcn(internalReleaseImage=release("quay.io/ocp/release@sha256:abc"))), "'@sha256:<digest>'")
    only(crd_validate.problems(mcn(internalReleaseImage=release(f"release@{DIGEST}"))), "host[:port]")


def test_cel_starts_with_and_matches_of_a_field_path():
    assert crd_validate.problems(mcn(irreconcilableChanges=[{"fieldPath": "spec.config", "diff": "d"}])) == []
    found = crd_validate.problems(mcn(irreconcilableChanges=[{"fieldPath": "status/x", "diff": "d"}]))
    assert len(found) == 2 and "must start with `spec.`" in found[0] and "alphanumeric" in found[1], found


def test_a_rule_that_cannot_be_evaluated_is_a_problem_not_a_pass():
    schema = {"type": "object", "properties": {"a": {"type": "string"}},
              "x-kubernetes-validations": [{"rule": "self.a.noSuchFunction()", "message": "m"}]}
    only(crd_validate.problems({"metadata": {"name": "x"}, "a": "v"}, schema=schema), "could not be evaluated")


# -- the Kubernetes CEL library functions themselves --------------------------------------------

@pytest.mark.parametrize("check, good, bad", [
    (crd_cel.dns1123_subdomain_errors, "rendered-worker-1.a", "Rendered"),
    (crd_cel.dns1123_label_errors, "worker-0", "worker.0"),
    (crd_cel.dns1035_label_errors, "worker", "0worker")])
def test_kubernetes_name_formats(check, good, bad):
    assert check(good) == [] and check(bad)


def test_optional_value_or_value_and_split_limit():
    from celpy import celtypes

    f = crd_cel.functions()
    missing = f["validate"](f["dns1123Label"](), celtypes.StringType("ok"))
    assert not f["hasValue"](missing) and f["orValue"](missing, "d") == "d"
    with pytest.raises(ValueError):
        f["value"](missing)
    assert list(f["split"](celtypes.StringType("a@b@c"), celtypes.StringType("@"), 2)) == ["a", "b@c"]
    assert list(f["split"](celtypes.StringType("a@b"), celtypes.StringType("@"), 0)) == []
