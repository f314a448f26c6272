"""What the kube backend writes, rendered by its pure functions from the examples' state,
validates against OpenShift's CRDs (deploy/crds/: structural schema and x-kubernetes-validations
CEL rules, tests/helpers/crd_validate.py): MachineConfigPool status
(``kube_sync.pool_status``), rendered MachineConfig (``kube_sync.rendered_object``) and
MachineConfigNode (``KubeSync._write_node_object``: its spec and status patches, captured).
tests/kube/test_kube_backend.py checks the same objects as a real API server stores them.
"""

import os
import shutil
import types

import pytest
import yaml

pytestmark = pytest.mark.cel  # cel-python; the RHEL 9 run (Python 3.9) does not collect this module

from agent.server.cluster import kube_sync  # noqa: E402
from agent.server.cluster.service import validate_report  # noqa: E402
from agent.server.http.app import App  # noqa: E402
from agent.server.rollout import firstboots, mcnconditions  # noqa: E402
from agent.server.store.kube.mcnrecord import node_object  # noqa: E402
from tests.helpers import crd_validate, paths  # noqa: E402

EXAMPLE = os.path.join(paths.REPO, "examples", "state")
NOW = "2026-11-27T04:00:00Z"
WORKER = {"node-role.kubernetes.io/worker": ""}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    state = tmp_path_factory.mktemp("crd-written") / "state"
    shutil.copytree(EXAMPLE, state)
    a = App(str(state), reload_interval=0.0)
    a.warm()
    return a


def pool_object(name):
    with open(os.path.join(EXAMPLE, "machineconfigpools", f"{name}.yaml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def target(app, pool):
    return app.cluster.store.pools()[pool].target


def report(app, node, **body):
    app.cluster.record_report(node, validate_report(dict({"pool": "worker", "labels": WORKER}, **body)))


def decided_at(epoch, deadline=60.0):
    """The cluster's first-boot decision, at ``epoch``, as KubeSync asks it (firstbootview.py)."""
    return lambda body, pool: firstboots.decide(body.get(firstboots.KEY), epoch, deadline)


def written_mcn(node, body, annotations=None, first_boot=None):
    """The MachineConfigNode KubeSync writes for a report: its merge patches, applied in order."""
    first_boot = first_boot or decided_at(1.8e9)
    patches = []
    fake = types.SimpleNamespace(client=types.SimpleNamespace(merge_patch=lambda path, p: patches.append(p)),
                                 _drain_written={},
                                 cluster=types.SimpleNamespace(node_truth=None, first_boot_decision=first_boot))
    node_obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "uid": "uid-" + node}}
    kube_sync.KubeSync._write_node_object(fake, node, body, "worker", annotations or {}, node_obj)
    # both patches, or what KubeSync writes would go unchecked (node_object alone would be)
    assert any("spec" in p for p in patches) and any("status" in p for p in patches), patches
    obj = node_object(node, body, "worker")
    for patch in patches:
        merge_patch(obj, patch)
    return obj


def merge_patch(target, patch):
    """RFC 7386, as the API server applies a merge patch (None removes a key)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = value


def test_the_status_of_every_example_pool_validates_against_the_crd(app):
    report(app, "w-done", state="Done", currentConfig=target(app, "worker"), desiredConfig=target(app, "worker"))
    report(app, "w-degraded", state="Degraded", reason="disk full", currentConfig=target(app, "worker"),
           desiredConfig=target(app, "worker"))
    views = app.cluster.pool_views(pending=False, nodes=0)
    assert sorted(views) == ["infra", "master", "worker"]  # every example pool, not an empty loop
    for name, view in views.items():
        obj = dict(pool_object(name), status=kube_sync.pool_status(view, 1, None, NOW))
        assert crd_validate.problems(obj) == [], name


def test_every_pools_spec_and_status_configuration_with_its_source_validates_against_the_crd(app):
    """kube_pools: spec.configuration (render_controller.go syncGeneratedMachineConfig) and
    status.configuration, name and source, as KubeSync patches them onto the pool."""
    from agent.server.cluster import kube_pools

    for name, view in app.cluster.pool_views(pending=False, nodes=0).items():
        obj = pool_object(name)
        config = view["spec"]["configuration"]["name"]
        merge_patch(obj, kube_pools.spec_patch(obj, config, app.cluster.sources_of(config)))
        status = kube_sync.pool_status(view, 2, None, NOW)
        status["configuration"] = kube_pools.configuration(status["configuration"]["name"],
                                                           app.cluster.sources_of(status["configuration"]["name"]), obj)
        obj["status"] = status
        assert obj["spec"]["configuration"]["source"] and obj["status"]["configuration"]["source"], name
        assert crd_validate.problems(obj) == [], name


def test_every_rendered_machineconfig_validates_against_the_crd(app):
    for pool in ("master", "worker", "infra"):
        name = target(app, pool)
        obj = kube_sync.rendered_object(name, pool, "uid-" + pool, app.cluster.spec_of(name), "node-config-server 1")
        assert crd_validate.problems(obj) == [], name


@pytest.mark.parametrize("state", ["Done", "Degraded"])
def test_the_machineconfignode_of_a_node_on_a_config_validates_against_the_crd(app, state):
    config = target(app, "worker")
    body = {"state": state, "currentConfig": config, "desiredConfig": config, "reason": "disk full", "_at": 1.8e9}
    assert crd_validate.problems(written_mcn("worker-0", body)) == []


def test_the_machineconfignode_of_a_node_on_its_first_config_validates_against_the_crd(app):
    """No currentConfig reported yet: upstream writes "not-yet-set" where the CRD's CEL rule
    wants an RFC 1123 subdomain (issue 38)."""
    body = {"state": "Working", "desiredConfig": target(app, "worker"), "_at": 1.8e9}
    assert crd_validate.problems(written_mcn("worker-1", body)) == []


FIRST_BOOT = {"run": "5b0c6c1e4d0a4f6c9a8f0c2d1e3b4a59", "startedAt": "2027-01-15T08:00:00.120Z", "result": "running",
              "stage": "fetch", "elapsed": 2.5, "stages": [{"name": "fetch", "startedAt": "2027-01-15T08:00:00.120Z",
                                                             "seconds": 2.4, "result": "ok"}]}


@pytest.mark.parametrize("outcome", ["Running", "Failed", "Stalled", "Done"])
def test_the_machineconfignode_of_a_first_boot_validates_against_the_crd_with_its_condition(app, outcome):
    """Our FirstBootComplete condition (a type in our own domain, as the CRD's pattern admits)
    in every outcome, beside upstream's types: the list stays within the CRD's 20."""
    sent = dict(FIRST_BOOT, result="failed", stage="apply", exitCode=75, hint="the node is as before") \
        if outcome == "Failed" else FIRST_BOOT
    body = {"pool": "worker", "state": "Done" if outcome == "Done" else "Degraded" if outcome == "Failed" else
            "Working", "reason": "applying failed: No space left on device", "firstBoot": sent}
    now = 1.8e9
    record = firstboots.record(None, body, now)
    later = now + (120 if outcome == "Stalled" else 1)
    mcn = written_mcn("worker-fb", dict(body, firstBoot=record, _at=now), first_boot=decided_at(later))
    assert crd_validate.problems(mcn) == []
    condition = [c for c in mcn["status"]["conditions"] if c["type"] == mcnconditions.FIRST_BOOT]
    assert [(c["status"], c["reason"]) for c in condition] == \
        [(mcnconditions.FIRST_BOOT_STATUS[outcome], firstboots.REASONS[outcome])]
