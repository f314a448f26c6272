"""Status that tells the truth (issue 57, item 4): ``status`` exits non-zero and says why while a
pool is degraded or the state has a problem; a Degraded pool names its failing nodes; every
condition's lastTransitionTime is the time of its last transition."""

import json
import shutil
import subprocess
import sys
import types

import pytest

from agent.server.cluster import rolloutctl
from agent.server.cluster.service import Cluster, validate_report
from tests.helpers import paths
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

EXAMPLES = paths.REPO + "/examples/state"
WORKER = {"pool": "worker", "labels": {"node-role.kubernetes.io/worker": ""}}
BAD = "metadata: {name: BAD}\n"  # no object a pool can be told from: it fails every pool (renderstatus.py)


def ncs(*args):
    return subprocess.run([sys.executable, "-m", "agent.server.cli", *args], capture_output=True, text=True,
                          cwd=paths.REPO, timeout=60)


@pytest.fixture
def state(tmp_path):
    shutil.copytree(EXAMPLES, tmp_path / "state")
    return tmp_path / "state"


@pytest.fixture
def cluster(state, tmp_path):
    made = Cluster(str(state), db_path=str(tmp_path / "nodes.db"))
    yield made
    made.db.close()


def report(cluster, node, state, **more):
    target = cluster.store.pools()["worker"].target
    cluster.record_report(node, validate_report(dict(WORKER, state=state, currentConfig=target,
                                                     desiredConfig=target, **more)))


def conditions(cluster, nodes=100):
    view = cluster.pool_views(only="worker", nodes=nodes)["worker"]
    return {c["type"]: c for c in view["status"]["conditions"]}


def test_status_of_a_state_with_an_invalid_object_exits_1_and_names_it(state):
    r = ncs("status", "--state", str(state))
    assert r.returncode == 0 and "cluster update: complete" in r.stdout, r.stdout + r.stderr
    (state / "machineconfigs" / "bad.yaml").write_text(BAD)
    r = ncs("status", "--state", str(state))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cluster update: NOT complete, DEGRADED (infra, master, state, worker)" in r.stdout, r.stdout
    assert "\n  worker: degraded: Failed to render configuration for pool worker: $.metadata.name: error: must be a " \
           "DNS-1123 subdomain (got 'BAD') [name] in machineconfigs/bad.yaml\n" in r.stdout, r.stdout
    assert r.stdout.count("(got 'BAD')") == 3  # once a pool, not again as the state's own line
    out = json.loads(ncs("status", "--state", str(state), "-o", "json").stdout)
    assert out["complete"] is False and out["degraded"] == ["infra", "master", "state", "worker"]


def test_status_of_a_running_server_exits_1_once_its_state_has_an_invalid_object(state, tmp_path):
    with ServerProcess(str(state)) as srv:
        args = ("--server", srv.base_url)
        r = ncs("status", *args)
        assert r.returncode == 0 and "cluster update: complete" in r.stdout, r.stdout + r.stderr
        (state / "machineconfigs" / "bad.yaml").write_text(BAD)
        r = wait_for(lambda: (lambda r: r if r.returncode != 0 else None)(ncs("status", *args)),
                     "status to say the update is not complete once the state has an invalid object")
        assert r.returncode == 1 and "DEGRADED (" in r.stdout and "in machineconfigs/bad.yaml" in r.stdout, r.stdout
        pools = ncs("get", "pools", *args)
        assert "\nworker: RenderDegraded: Failed to render configuration for pool worker: $.metadata.name: " \
            in pools.stdout, pools.stdout


def test_a_degraded_pool_names_each_failing_node_as_upstream_does(cluster):
    report(cluster, "w1", "Done")
    report(cluster, "w2", "Degraded", reason='disk "full"')
    for nodes in (100, 0):  # the views listing nodes, and /api/v1/cluster's, which lists none
        conds = conditions(cluster, nodes)
        assert conds["Degraded"]["message"] == conds["NodeDegraded"]["message"] == \
            'Node w2 is reporting: "disk \\"full\\""', conds
    progress = cluster.cluster()
    assert progress["degraded"] == ["worker"]
    assert {"pool": "worker", "reason": 'degraded: 1 node(s) degraded: Node w2 is reporting: "disk \\"full\\""'} \
        in progress["blocking"]


def test_updated_takes_the_time_of_each_of_its_transitions(cluster, monkeypatch):
    """A node Degraded, then Done again: Updated turns False, then True, neither with a change of
    the pool's target or current; each time is the step's that saw the transition."""
    clock = [1_800_000_000.0]
    monkeypatch.setattr(rolloutctl, "time", types.SimpleNamespace(time=lambda: clock[0]))
    report(cluster, "w1", "Done")
    before = conditions(cluster)["Updated"]
    assert before["status"] == "True"
    clock[0] += 100
    report(cluster, "w1", "Degraded", reason="disk full")
    first = conditions(cluster)["Updated"]
    assert (first["status"], first["lastTransitionTime"]) == ("False", "2027-01-15T08:01:40Z")
    clock[0] += 100
    report(cluster, "w1", "Done")
    second = conditions(cluster)["Updated"]
    assert (second["status"], second["lastTransitionTime"]) == ("True", "2027-01-15T08:03:20Z")
    assert conditions(cluster)["Degraded"]["lastTransitionTime"] == "2027-01-15T08:03:20Z"
