"""Objects the API accepts, and only those: a MachineConfigPool without machineConfigSelector,
a MachineOSConfig named after its pool, v1alpha1 refused naming v1; checked on the MCO's own
documents (../shared/mco-corpus, index.json says which ones the MCO accepts)."""

import json
import os
import shutil

import pytest
import yaml

from agent.server.store.stateformat import check_os_config, check_pool, load_state
from tests.helpers import paths

REPO = paths.REPO
# <repo>/../shared (CI keeps shared/ beside the clone), or NODE_AGENT_SHARED_DIR (a git worktree)
CORPUS = os.path.join(os.environ.get("NODE_AGENT_SHARED_DIR") or os.path.join(REPO, "..", "shared"), "mco-corpus")
SUBDIR = {"MachineConfigPool": "machineconfigpools", "MachineOSConfig": "machineosconfigs",
          "MachineOSBuild": "machineosbuilds"}


def test_pool_without_selector_is_valid_and_selects_nothing(tmp_path):
    # openshift/api MachineConfigPool tests: "No spec is required for a MachineConfigPool"
    assert check_pool({"metadata": {"name": "empty"}}, "p") == []
    assert check_pool({"metadata": {"name": "empty"}, "spec": {"paused": False}}, "p") == []
    (tmp_path / "machineconfigpools").mkdir()
    (tmp_path / "machineconfigpools" / "empty.yaml").write_text(
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfigPool\nmetadata: {name: empty}\n")
    (tmp_path / "machineconfigs").mkdir()
    (tmp_path / "machineconfigs" / "00.yaml").write_text(
        "metadata: {name: '00', labels: {machineconfiguration.openshift.io/role: worker}}\n"
        "spec: {config: {ignition: {version: 3.4.0}}}\n")
    st = load_state(str(tmp_path))
    assert st.problems == [] and "empty" in st.pools
    from agent.server.rollout.render import select_machine_configs

    assert select_machine_configs(st.pools["empty"], st.machine_configs) == []


def test_pool_without_selector_is_withheld_by_the_server(tmp_path, new_app):
    from tests.campaigns.test_bad_input_campaign import wsgi

    (tmp_path / "machineconfigpools").mkdir()
    (tmp_path / "machineconfigpools" / "empty.yaml").write_text("metadata: {name: empty}\n")
    status, _, body = wsgi(new_app(str(tmp_path), reload_interval=0.0), "GET", "/config/empty")
    # render_controller.go fails such a pool's sync: its RenderDegraded words, and the node waits
    assert status == 503 and b"Failed to render configuration for pool empty: no MachineConfigs found" in body


@pytest.mark.parametrize("doc,path", [
    ({"metadata": {"name": "infra"}, "spec": {"machineConfigPool": {"name": "worker"}}}, "$.metadata.name"),
    ({"metadata": {"name": "infra"}, "spec": {}}, "$.spec.machineConfigPool.name"),
])
def test_machineosconfig_is_named_after_its_pool(doc, path):
    problems = check_os_config(doc, "m")
    assert [p.path for p in problems] == [path]
    assert check_os_config({"metadata": {"name": "infra"}, "spec": {"machineConfigPool": {"name": "infra"}}}, "m") == []


@pytest.mark.parametrize("sub,kind", [("machineosconfigs", "MachineOSConfig"), ("machineosbuilds", "MachineOSBuild"),
                                      ("machineconfigpools", "MachineConfigPool")])
def test_v1alpha1_is_refused_naming_v1(tmp_path, sub, kind):
    (tmp_path / sub).mkdir()
    (tmp_path / sub / "x.yaml").write_text(
        f"apiVersion: machineconfiguration.openshift.io/v1alpha1\nkind: {kind}\nmetadata: {{name: infra}}\n"
        "spec: {machineConfigPool: {name: infra}}\n")
    [problem] = load_state(str(tmp_path)).problems
    assert problem.path == "$.apiVersion" and "machineconfiguration.openshift.io/v1" in problem.message
    assert "no longer served" in problem.message


def corpus_documents():
    index = os.path.join(CORPUS, "index.json")
    if not os.path.exists(index):
        return []
    with open(index) as f:
        items = json.load(f)
    return [it for it in (items if isinstance(items, list) else []) if it.get("kind") in SUBDIR]


@pytest.mark.parametrize("item", corpus_documents() or [None], ids=lambda it: it["file"] if it else "no-corpus")
def test_mco_corpus_objects_accepted_as_upstream(tmp_path, item):
    if item is None:
        pytest.skip(f"the MCO corpus is not at {CORPUS} (it lives beside the clone in shared/mco-corpus; "
                    f"or set NODE_AGENT_SHARED_DIR)")
    sub = SUBDIR[item["kind"]]
    (tmp_path / sub).mkdir()
    shutil.copy(os.path.join(CORPUS, item["file"]), tmp_path / sub / item["file"])
    problems = load_state(str(tmp_path)).problems
    with open(os.path.join(CORPUS, item["file"])) as f:
        doc = yaml.safe_load(f)
    if item["kind"] == "MachineOSConfig" and doc["metadata"]["name"] != doc["spec"]["machineConfigPool"]["name"]:
        # The API refuses these since openshift/api#2399 (OCPBUGS-54287: "MachineOSConfig name must match the
        # referenced MachineConfigPool name"); the corpus index judged them by an older API.
        assert [p.path for p in problems] == ["$.metadata.name"], item["origin"]
        return
    if item["upstream_accepts"]:
        assert problems == [], (item["origin"], [str(p) for p in problems])
    else:
        assert problems, (item["origin"], item["upstream_rejects_because"])
        if "v1alpha1" in item["upstream_rejects_because"]:
            assert problems[0].path == "$.apiVersion"
