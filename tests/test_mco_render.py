"""Rendering as the MCO's render controller does: overwrite defaults, custom-pool merge order."""

from agent.server.render import render_pool

ROLE = "machineconfiguration.openshift.io/role"


def mc(name, role, files):
    return {"metadata": {"name": name, "labels": {ROLE: role}},
            "spec": {"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": files}}}}


def pool(name, roles):
    return {"metadata": {"name": name}, "spec": {"machineConfigSelector": {"matchExpressions": [
        {"key": ROLE, "operator": "In", "values": roles}]}}}


def test_every_file_gets_overwrite_true_unless_it_says_otherwise():
    # MCO pkg/controller/common/helpers.go:140-148
    mcs = {"00-w": mc("00-w", "worker", [
        {"path": "/etc/systemd/journald.conf", "contents": {"source": "data:,x"}},
        {"path": "/etc/keep", "contents": {"source": "data:,k"}, "overwrite": False},
        {"path": "/etc/empty"}])}
    files = {f["path"]: f for f in render_pool(pool("worker", ["worker"]), mcs).spec["config"]["storage"]["files"]}
    assert files["/etc/systemd/journald.conf"]["overwrite"] is True
    assert files["/etc/keep"]["overwrite"] is False
    # Ignition refuses overwrite: true without a source; upstream sets it anyway, we do not.
    assert "overwrite" not in files["/etc/empty"]


def test_custom_pool_merges_worker_configs_first():
    # The custom-pools guide: 99-worker-chrony sorts after 50-infra, yet infra wins
    # (MCO pkg/controller/common/helpers.go:76-95).
    mcs = {"99-worker-chrony": mc("99-worker-chrony", "worker",
                                  [{"path": "/etc/chrony.conf", "contents": {"source": "data:,worker"}}]),
           "50-infra": mc("50-infra", "infra", [{"path": "/etc/chrony.conf", "contents": {"source": "data:,infra"}}]),
           "00-worker": mc("00-worker", "worker", [])}
    infra = render_pool(pool("infra", ["worker", "infra"]), mcs)
    assert infra.sources == ("00-worker", "99-worker-chrony", "50-infra")
    assert infra.spec["config"]["storage"]["files"][0]["contents"]["source"] == "data:,infra"
    worker = render_pool(pool("worker", ["worker"]), mcs)
    assert worker.sources == ("00-worker", "99-worker-chrony")
