"""What the Kubernetes backend writes on a MachineConfigPool besides its counts (agent/server/cluster/
kube_pools.py), each test named after the upstream function it mirrors (openshift/machine-config-
operator pkg/controller/render/render_controller.go, pkg/controller/node/status.go)."""

from agent.server.cluster import kube_pools

MC = "machineconfiguration.openshift.io/v1"


def test_syncGeneratedMachineConfig_writes_spec_configuration_name_and_source_once():
    obj = {"metadata": {"name": "worker"}, "spec": {"maxUnavailable": 1}}
    patch = kube_pools.spec_patch(obj, "rendered-worker-b", ["00-worker", "99-worker-ssh"])
    assert patch == {"spec": {"configuration": {"name": "rendered-worker-b", "source": [
        {"apiVersion": MC, "kind": "MachineConfig", "name": "00-worker"},
        {"apiVersion": MC, "kind": "MachineConfig", "name": "99-worker-ssh"}]}}}
    written = dict(obj, spec=dict(obj["spec"], **patch["spec"]))
    assert kube_pools.spec_patch(written, "rendered-worker-b", ["00-worker", "99-worker-ssh"]) is None  # no churn
    assert kube_pools.spec_patch(obj, "", ["00-worker"]) is None  # nothing rendered yet: nothing written


def test_a_config_this_replica_did_not_render_keeps_the_source_the_pool_object_holds():
    """An older target (held by a render failure or a rollback) or the pool's current config: its
    source as the API holds it, in spec.configuration or in status.configuration."""
    source = [{"apiVersion": MC, "kind": "MachineConfig", "name": "00-worker"}]
    obj = {"spec": {"configuration": {"name": "rendered-worker-b", "source": source}},
           "status": {"configuration": {"name": "rendered-worker-a", "source": source[:0]}}}
    assert kube_pools.configuration("rendered-worker-b", None, obj) == {"name": "rendered-worker-b", "source": source}
    assert kube_pools.configuration("rendered-worker-a", None, obj) == {"name": "rendered-worker-a", "source": []}
    assert kube_pools.configuration("rendered-worker-z", None, obj) == {"name": "rendered-worker-z"}
    assert kube_pools.spec_patch(obj, "rendered-worker-b", None) is None
    assert kube_pools.spec_patch(obj, "rendered-worker-a", None) == {"spec": {"configuration": {
        "name": "rendered-worker-a", "source": []}}}


def test_syncStatusOnly_events_as_target_and_current_move():
    events = kube_pools.pool_update_events
    assert events("worker", ("a", "a"), ("b", "a")) == [("Updating", "Pool worker now targeting MachineConfig b")]
    assert events("worker", ("b", "a"), ("b", "b")) == [("Completed", "Pool worker has completed update to "
                                                                      "MachineConfig b")]
    assert events("worker", ("b", "b"), ("b", "b")) == []
    assert [r for r, _ in events("infra", None, ("c", "c"))] == ["Updating", "Completed"]  # a pool seen first
    assert events("infra", ("c", "c"), ("d", "c"), "quay.io/os@sha256:1") == [
        ("Updating", "Pool infra now targeting MachineConfig d / Image quay.io/os@sha256:1")]  # getPoolUpdateLine


def test_syncGeneratedMachineConfig_RenderedConfigGenerated_event():
    assert kube_pools.rendered_event("rendered-worker-b", "node-config-server 1.2") == (
        "RenderedConfigGenerated",
        "rendered-worker-b successfully generated (release version: , controller version: node-config-server 1.2)")
