"""Scale-up during a rollout (issue 7), small: the scenario of benchmarks/scaleup.py with 12 new
nodes, and the two product behaviours it depends on (a reboot's Done report; a node with a
reboot pending proves nothing)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from agent.server.rollout import gating, progress
from benchmarks.scaleup import EXAMPLES, TOKEN, run_scenario, simulate_reboot
from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root
from tests.helpers.server_proc import ServerProcess

REPO = paths.REPO


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return run_scenario(nodes=12, parallel=4, existing=1, workdir=str(tmp_path_factory.mktemp("scaleup")))


def test_every_invariant_holds(scenario):
    assert scenario.ok, {k: v for k, v in scenario.invariants.items() if not v["ok"]}
    assert scenario.invariants["pool"]["wrongPoolMoments"] == 0
    assert scenario.invariants["pool"]["samples"] >= 5  # the poller did watch the run
    assert scenario.invariants["reboots"]["nodesOverOne"] == 0


def test_the_run_covers_both_sides_of_the_proof(scenario):
    inv = scenario.invariants["unproven"]
    assert inv["beforeProof"] >= 2 and inv["afterProof"] >= 2
    for pool in ("worker", "infra"):
        row = scenario.pools[pool]
        assert row["nodes"] == 6 and row["failed"] == 0
        assert row.get("config_old", 0) >= 1 and row.get("config_new", 0) >= 1
        # Boot images of unknown OS: every new node pivots, so exactly one reboot each.
        assert row.get("reboots_1", 0) == 6
    assert scenario.pools["infra"].get("image_layered-new", 0) >= 1
    for pool, roll in scenario.rollout.items():
        assert roll["server_switched"] is not None and roll["server_switched"] >= roll["proven_after"], pool


def test_nodes_served_before_the_proof_got_the_old_config_and_no_new_image(scenario):
    before, after = [], []
    for node in scenario.nodes_detail:
        roll = scenario.rollout[node["pool"]]
        if node["fetch_end"] < roll["proven_after"]:
            before.append(node["name"])
            assert node["config"] == roll["old_config"], node["name"]
            assert node["image"] != roll["new_image"] or node["pool"] == "worker", node["name"]
        if node["fetch_start"] > roll["proven_by"]:
            after.append(node["name"])
            assert node["config"] == roll["new_config"], node["name"]
        assert node["pool"] == node["pool_labels"] == node["pool_annotations"] == node["pool_registry"]
    assert before and after, (before, after)  # both kinds of node were there to check


def test_a_node_with_a_reboot_pending_does_not_prove_the_target():
    target, current = "rendered-worker-new", "rendered-worker-old"
    member = progress.Membership("worker", "reported pool")
    working = {"state": "Working", "currentConfig": target, "reason": "reboot pending"}
    counts = progress.count({"a": (working, member)}, target, None)
    assert counts.updated == 0
    assert gating.decide("worker", target, current, counts.updated, {}, {}, {}).config == current
    done = dict(working, state="Done")
    counts = progress.count({"a": (done, member)}, target, None)
    assert counts.updated == 1
    assert gating.decide("worker", target, current, counts.updated, {}, {}, {}).config == target


def _agent(*args):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_update_reports_done_only_after_the_reboot_and_degraded_on_the_wrong_image(tmp_path):
    state = str(tmp_path / "state")
    shutil.copytree(EXAMPLES, state)
    with ServerProcess(state, tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        api = srv.session()

        def report(name):
            return api.get(srv.url(f"/api/v1/nodes/{name}")).json()["report"]

        roots = {}
        for name in ("w-good", "w-bad"):
            roots[name] = make_node_root(str(tmp_path / name), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(),
                                         token=TOKEN, node_name=name)
            assert _agent("firstboot", "--root", roots[name]).returncode == 0
            assert report(name)["state"] == "Working"
            # Same boot: the node does not run its config yet, and says nothing new.
            assert _agent("update", "--once", "--root", roots[name]).returncode == 0
            assert report(name)["state"] == "Working"

        staged = simulate_reboot(roots["w-good"])
        r = _agent("update", "--once", "--root", roots["w-good"])
        assert r.returncode == 0, r.stderr
        got = report("w-good")
        assert got["state"] == "Done" and got["currentImage"] == staged["image"]
        assert not os.path.exists(os.path.join(roots["w-good"], "var/lib/node-agent/reboot-pending.json"))

        # A reboot that came back on another image than the one staged is not Done.
        simulate_reboot(roots["w-bad"])
        aleph = os.path.join(roots["w-bad"], "sysroot/.aleph-version.json")
        doc = json.load(open(aleph))
        doc["container-image"]["image"] = "quay.io/example/other:1"
        with open(aleph, "w") as f:
            json.dump(doc, f)
        assert _agent("update", "--once", "--root", roots["w-bad"]).returncode == 0
        got = report("w-bad")
        assert got["state"] == "Degraded" and "quay.io/example/other:1" in got["reason"]
