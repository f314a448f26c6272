"""Rendering as the MCO's render controller does: overwrite defaults, custom-pool merge order."""

from agent.server.rollout.render import render_pool

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
    assert "overwrite" not in mcs["00-w"]["spec"]["config"]["storage"]["files"][0]  # the source is untouched


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


def test_state_loader_converts_spec2_and_the_render_carries_it(tmp_path):
    from agent.server.store.stateformat import load_state

    (tmp_path / "machineconfigpools").mkdir()
    (tmp_path / "machineconfigs").mkdir()
    (tmp_path / "machineconfigpools" / "infra.yaml").write_text(
        "metadata: {name: infra}\nspec:\n  machineConfigSelector:\n    matchExpressions:\n"
        f"    - {{key: {ROLE}, operator: In, values: [worker, infra]}}\n")
    (tmp_path / "machineconfigs" / "51-infra.yaml").write_text(
        f"metadata: {{name: 51-infra, labels: {{{ROLE}: infra}}}}\nspec:\n  config:\n    ignition: {{version: 2.2.0}}\n"
        "    storage:\n      files:\n      - {contents: {source: 'data:,infra'}, filesystem: root, mode: 0644, "
        "path: /etc/infratest}\n")
    (tmp_path / "machineconfigs" / "52-bad.yaml").write_text(
        f"metadata: {{name: 52-bad, labels: {{{ROLE}: infra}}}}\nspec:\n  config:\n    ignition: {{version: 2.2.0}}\n"
        "    passwd: {users: [{name: alice}]}\n")
    st = load_state(str(tmp_path))
    assert [(p.source, p.path) for p in st.problems] == [("machineconfigs/52-bad.yaml", "$.spec.config.passwd.users.0.name")]
    files = render_pool(st.pools["infra"], st.machine_configs).spec["config"]["storage"]["files"]
    assert files == [{"path": "/etc/infratest", "overwrite": True, "mode": 0o644, "contents": {"source": "data:,infra"}}]
