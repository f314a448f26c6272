"""Validator warnings of admitted objects and the hold for the admin's acknowledgement (issue 49):
agent/core/objectchecks.py, agent/server/store/stateformat.py ``admit``, agent/core/rolloutpolicy.py
``require-ack``, agent/server/rollout/review.py (pure)."""

import pytest

from agent.core.objectchecks import check_machine_config, check_pool
from agent.core.rolloutpolicy import REQUIRE_ACK, parse_review_kinds, policy_problems, rollout_policy
from agent.server.rollout import review
from agent.server.rollout.progress import Step
from agent.server.store.stateformat import State, admit


def machine_config(spec):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": "50-x", "labels": {"machineconfiguration.openshift.io/role": "worker"}}, "spec": spec}


def test_a_misspelled_key_in_a_machine_config_is_a_warning_at_its_path_and_the_object_is_admitted():
    doc = machine_config({"kernelArgs": ["nosmt"], "config": {"ignition": {"version": "3.4.0"},
                                                            "storge": {"files": []}}})
    found = check_machine_config(doc, "machineconfigs/50-x.yaml")
    assert [(p.path, p.severity, p.message) for p in found] == [
        ("$.spec.config.storge", "warning", "unused key storge"), ("$.spec.kernelArgs", "warning", "unused key kernelArgs")]
    state = State()
    assert admit(state, "machineconfigs", doc, "machineconfigs/50-x.yaml") == "50-x"
    assert "50-x" in state.machine_configs and not state.problems
    assert [p.path for p in state.warnings["MachineConfig/50-x"]] == ["$.spec.config.storge", "$.spec.kernelArgs"]


def test_an_object_with_an_error_is_left_out_with_its_errors_only():
    doc = machine_config({"fips": "yes", "config": {"ignition": {"version": "3.4.0"}, "storge": {}}})
    state = State()
    assert admit(state, "machineconfigs", doc, "x.yaml") is None
    assert [p.path for p in state.problems] == ["$.spec.fips"] and not state.warnings


def test_a_misspelled_pool_spec_key_is_a_warning():
    found = check_pool({"metadata": {"name": "infra"}, "spec": {"pasued": True, "maxUnavailable": 1}}, "p.yaml")
    assert [(p.path, p.severity) for p in found] == [("$.spec.pasued", "warning")]


@pytest.mark.parametrize("value, kinds", [("all", ("warnings", "file-removal", "reboot")),
                                          ("reboot, warnings", ("warnings", "reboot")), ("none", ()), ("", ())])
def test_require_ack_reads_its_kinds(value, kinds):
    assert parse_review_kinds(value) == kinds
    assert rollout_policy({"metadata": {"annotations": {REQUIRE_ACK: value}}}).require_ack == kinds


def test_a_bad_require_ack_makes_the_pool_invalid_naming_the_annotation():
    assert "unknown rebot" in policy_problems({REQUIRE_ACK: "rebot"})[REQUIRE_ACK]
    found = check_pool({"metadata": {"name": "w", "annotations": {REQUIRE_ACK: "rebot"}}, "spec": {}}, "p.yaml")
    assert [p.path for p in found if p.is_error] == [f"$.metadata.annotations['{REQUIRE_ACK}']"]


PLAN = {"actions": [{"type": "Reboot"}], "reboot": True, "drain": True,
        "changes": {"files": [{"path": "/etc/motd", "kind": "file", "change": "removed"},
                              {"path": "/etc/x", "kind": "file", "change": "changed"}],
                    "units": [{"name": "a.service", "change": "removed"}]}}


def test_a_review_names_the_paths_removed_the_reboot_and_the_warnings():
    r = review.review_of("B", "A", ["MachineConfig m: $.spec.config.storge: unused key storge"], PLAN)
    assert (r.removes, r.reboot, r.drain, r.actions) == (("/etc/motd", "unit a.service"), True, True, ("Reboot",))
    assert r.findings(("file-removal",)) == ["removes /etc/motd; unit a.service"]
    assert r.findings(("warnings", "reboot")) == ["has 1 validator warning(s) (MachineConfig m: $.spec.config.storge: "
                                                  "unused key storge)", "needs a reboot and a drain"]


STEP = Step("B", "A", "")


def held(required, acknowledged=(), plan=PLAN, warnings=(), step=STEP, row_target="A"):
    asked = []

    def make():
        asked.append(1)
        return review.review_of("B", row_target, list(warnings), plan)
    return review.reviewed_step(step, row_target, "B", required, acknowledged, make, "worker"), asked


def test_a_rendering_that_does_what_the_pool_requires_an_ack_for_keeps_the_old_target_and_says_why():
    (step, found), _ = held(("reboot",))
    assert (step.target, step.current) == ("A", "A") and found.config == "B"
    assert step.held.startswith("B needs a reboot and a drain: it waits for the admin's acknowledgement "
                                "(node-config-server ack pool worker")


def test_an_acknowledged_rendering_or_one_that_does_nothing_required_is_the_target():
    assert held(("reboot",), acknowledged=("B",))[0] == (STEP, None)
    assert held(("warnings",))[0] == (STEP, None)  # it reboots, but has no warning
    no_removal = dict(PLAN, changes={})
    assert held(("file-removal",), plan=no_removal)[0] == (STEP, None)


def test_nothing_is_planned_without_require_ack_nor_for_the_target_already_taken():
    assert held(())[1] == [] and held(())[0] == (STEP, None)
    assert held(("reboot",), row_target="B")[0] == (STEP, None)
    pinned = Step("A", "A", "rolled back by the admin")
    assert held(("reboot",), step=pinned)[0] == (pinned, None)


def test_a_rendering_that_cannot_be_compared_is_held_saying_so():
    (step, _found), _ = held(("warnings",), plan=None)
    assert step.target == "A" and "could not be compared with A" in step.held


def test_the_render_warnings_condition_names_each_warning():
    assert review.warnings_condition([], "B") == {"type": "RenderWarnings", "status": "False", "reason": "",
                                                  "message": ""}
    c = review.warnings_condition(["MachineConfig m: $.spec.x: unused key x"], "B")
    assert (c["status"], c["reason"]) == ("True", "ValidatorWarnings")
    assert c["message"] == "1 validator warning(s) in the inputs of B: MachineConfig m: $.spec.x: unused key x"
