"""Which pools an invalid object keeps from rendering (agent/server/rollout/renderstatus.py), as the
MCO's render controller fails one pool's sync (pkg/controller/render/render_controller.go
``syncMachineConfigPool`` -> ``syncFailingStatus``), and the state that keeps an invalid pool for
its Nodes (agent/server/store/stateformat.py ``admit``)."""

import pytest

from agent.server.rollout import renderstatus
from agent.server.store.stateformat import State, admit

ROLE = "machineconfiguration.openshift.io/role"


def pool(name, selector=None, **spec):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": name},
            "spec": {"machineConfigSelector": selector if selector is not None else {"matchLabels": {ROLE: name}},
                     "nodeSelector": {"matchLabels": {f"node-role.kubernetes.io/{name}": ""}}, **spec}}


def mc(name, role, **spec):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": name, "labels": {ROLE: role}},
            "spec": dict({"config": {"ignition": {"version": "3.4.0"}}}, **spec)}


INFRA = pool("infra", {"matchExpressions": [{"key": ROLE, "operator": "In", "values": ["worker", "infra"]}]})
POOLS = {"master": pool("master"), "worker": pool("worker"), "infra": INFRA}
MCS = {"00-master": mc("00-master", "master"), "00-worker": mc("00-worker", "worker"), "50-infra": mc("50-infra", "infra")}


@pytest.mark.parametrize("selector,text", [
    ({"matchLabels": {ROLE: "worker"}}, "machineconfiguration.openshift.io/role=worker"),
    ({"matchExpressions": [{"key": ROLE, "operator": "In", "values": ["worker", "infra"]}]},
     "machineconfiguration.openshift.io/role in (infra,worker)"),
    ({"matchLabels": {"z": "1"}, "matchExpressions": [{"key": "a", "operator": "Exists"},
                                                      {"key": "m", "operator": "DoesNotExist"},
                                                      {"key": "n", "operator": "NotIn", "values": ["y", "x"]}]},
     "a,!m,n notin (x,y),z=1"),
    (None, ""), ({}, "")])
def test_selector_string_prints_as_apimachinery_labels_Selector_String(selector, text):
    assert renderstatus.selector_string(selector) == text


def test_an_invalid_machineconfig_fails_only_the_pools_that_select_it():
    """getPoolsForMachineConfig: a worker MachineConfig is rendered into worker and into infra
    (which selects role worker too), never into master."""
    bad = mc("99-worker-bad", "worker")
    failures = renderstatus.render_failures(POOLS, MCS, {}, [("machineconfigs", bad, ["$.spec: bad [x]"])])
    assert failures == {"worker": ["$.spec: bad [x]"], "infra": ["$.spec: bad [x]"]}
    assert renderstatus.failure_message("worker", failures["worker"]) == \
        "Failed to render configuration for pool worker: $.spec: bad [x]"


def test_an_invalid_pool_fails_only_itself_and_what_no_pool_can_be_told_from_fails_every_pool():
    failures = renderstatus.render_failures(POOLS, MCS, {}, [("machineconfigpools", POOLS["infra"], ["mu"])])
    assert failures == {"infra": ["mu"]}
    nameless = renderstatus.render_failures(POOLS, MCS, {}, [("machineconfigs", {"metadata": 5}, ["x"])])
    assert sorted(nameless) == ["infra", "master", "worker"]
    cluster = renderstatus.render_failures(POOLS, MCS, {}, [], ["machineconfigurations/cluster (API): y"])
    assert sorted(cluster) == ["infra", "master", "worker"]
    unlabelled = renderstatus.render_failures(POOLS, MCS, {}, [("machineconfigs", mc("99-x", "gpu"), ["z"])])
    assert unlabelled == {}  # selected by no pool: upstream's render controller never reads it either


def test_an_invalid_machineosconfig_or_build_fails_its_pool():
    mosc = {"metadata": {"name": "infra"}, "spec": {"machineConfigPool": {"name": "infra"}}}
    assert renderstatus.render_failures(POOLS, MCS, {}, [("machineosconfigs", mosc, ["p"])]) == {"infra": ["p"]}
    mosb = {"metadata": {"name": "b"}, "spec": {"machineOSConfig": {"name": "infra"}}}
    assert renderstatus.render_failures(POOLS, MCS, {"infra": mosc}, [("machineosbuilds", mosb, ["q"])]) == \
        {"infra": ["q"]}


def test_a_pool_selecting_no_machineconfig_fails_with_upstreams_words():
    """render_controller.go: "no MachineConfigs found matching selector %v"; a MachineConfig the
    checks refused is still one the pool selects (upstream lists it, then fails to validate it)."""
    gpu = pool("gpu")
    failures = renderstatus.render_failures(dict(POOLS, gpu=gpu), MCS, {}, [])
    assert failures == {"gpu": ["no MachineConfigs found matching selector machineconfiguration.openshift.io/role=gpu"]}
    bad = mc("50-gpu", "gpu")
    assert renderstatus.render_failures(dict(POOLS, gpu=gpu), MCS, {}, [("machineconfigs", bad, ["b"])]) == \
        {"gpu": ["b"]}


@pytest.mark.parametrize("value", ["3", -1])
def test_a_pool_whose_max_unavailable_upstream_cannot_read_is_kept_for_its_nodes_and_marked(value):
    """stateformat.admit: the pool stays (its Nodes are its own, its status is written), its
    refused field left out; the problem is recorded as the pool's own."""
    st = State(attributable=True)
    admit(st, "machineconfigpools", pool("infra", maxUnavailable=value), "machineconfigpools/infra (API)")
    assert "infra" in st.pools and "maxUnavailable" not in st.pools["infra"]["spec"]
    assert [p.path for p in st.refused_pools()["infra"]] == ["$.spec.maxUnavailable"]
    assert st.unattributed() == [] and len(st.problems) == 1
    assert renderstatus.render_failures(st.pools, {"00": mc("00", "infra")}, {}, st.rejected, st.unattributed()) \
        == {"infra": [str(st.problems[0])]}


def test_a_pool_with_an_unreadable_selector_is_still_left_out():
    st = State()
    admit(st, "machineconfigpools", pool("infra", nodeSelector=[1]), "machineconfigpools/infra (API)")
    assert "infra" not in st.pools and st.refused_pools() == {} and st.problems


def test_in_a_state_directory_any_problem_fails_every_pool():
    """A directory may be read mid-write (a file cut short, its labels gone): there no problem is
    taken as one object's, and every pool holds (docs/security.md, "State directory")."""
    st = State()
    admit(st, "machineconfigs", {"metadata": {"name": "99-cut"}, "spec": {"config": 5}}, "machineconfigs/99-cut.yaml")
    assert st.unattributed() == st.problems and st.problems
    assert renderstatus.render_failures(POOLS, MCS, {}, (), st.unattributed()).keys() == POOLS.keys()
