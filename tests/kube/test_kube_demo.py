"""``make kube-demo`` runs examples/kube_demo.py to the point where it waits, with kubectl's and
our pool tables agreeing, shows one rollout live (who updates, who waits and why, as the server
sees it), keeps its Nodes Ready while it waits (it plays their kubelets' heartbeats: here with a
node lifecycle grace period of GRACE seconds, waited out three times), and ``make kube-demo-stop``
(``--stop``) ends every process it started."""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.helpers import paths
from tests.helpers.kube_cluster import find_kube_bin
from tests.helpers.wait import wait_for

sys.path.insert(0, paths.REPO)
from examples import demoprocs  # noqa: E402

DEMO = os.path.join(paths.REPO, "examples", "kube_demo.py")
GRACE = 6  # seconds without a heartbeat before the node lifecycle controller marks a Node NotReady


def _table(text, after):
    """The table printed after the line ``after``: {pool: [columns]}, without AGE (it ticks)."""
    lines = text.split(after, 1)[1].split("\n", 1)[1].splitlines()  # from the line after the command's
    rows = [line.split() for line in lines[:4] if line.startswith("  ")]
    assert rows and rows[0][0] == "NAME", lines[:4]
    return {r[0]: r[1:-1] for r in rows[1:]}


def _ready(demo, log):
    """The demo's output once it says it is ready; a demo that ended fails the test at once, with its output."""
    text = log.read_text()
    assert demo.poll() is None, text
    return "make kube-demo-stop" in text and text


def _cli(env, *args):
    r = subprocess.run([sys.executable, "-m", "agent.server.cli", *args], cwd=paths.REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_kube_demo_shows_kubectl_and_get_pools_alike_and_stop_ends_every_process(tmp_path):
    if not find_kube_bin():
        pytest.skip("kube-apiserver/kube-controller-manager are not built: run make kube-bin")
    run = tmp_path / "kube-demo-run"
    # COLUMNS: a wide table whatever the environment says (the tables take $COLUMNS first)
    env = dict(os.environ, NODE_AGENT_KUBE_DEMO_DIR=str(run), NO_COLOR="1", PYTHONPATH=paths.REPO, COLUMNS="400",
               NODE_AGENT_KUBE_DEMO_GRACE=str(GRACE))
    log = tmp_path / "demo.log"
    with open(log, "w") as out:
        demo = subprocess.Popen([sys.executable, DEMO], cwd=paths.REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        text = wait_for(lambda: _ready(demo, log), "the kube demo to be ready", timeout=240)
        recorded = json.loads((run / demoprocs.RECORD).read_text())
        assert [e["name"] for e in recorded] == ["demo", "etcd", "kube-apiserver", "kube-controller-manager",
                                                 "kube-scheduler", "node-config-server"]
        kubectl = _table(text, "get mcp")
        ours = _table(text, "get pools --config")
        assert set(kubectl) == set(ours) == {"infra", "master", "worker"}
        for pool in ours:  # CONFIG, UPDATED, UPDATING, DEGRADED, the four counts
            assert kubectl[pool] == ours[pool], (pool, kubectl[pool], ours[pool])
        assert kubectl["infra"][:2] == [ours["infra"][0], "True"] and ours["infra"][-3:] == ["2", "2", "0"]
        assert ours["worker"][1:3] == ["True", "False"]  # worker-0's reboot completed: Updated
        ready_at = time.monotonic()
        # The rollout, live: the server's own view of who updates and who waits, and why.
        assert "the server targets infra-0 (infra's maxUnavailable is 1); infra-1 waits: maxUnavailable 1 is " \
               "taken by infra-0" in text
        assert "waiting for its turn" in text and "infra-0 is Done on" in text
        assert "the demo plays their kubelets' heartbeats for as long as it runs: every 1.5 s" in text
        # The Nodes stay Ready past three grace periods: the played kubelets keep posting.
        time.sleep(max(0.0, ready_at + 3 * GRACE - time.monotonic()))
        client = str(run / "client.yaml")
        nodes = _cli(env, "get", "nodes", "--config", client)
        assert [line.split()[:3] for line in nodes.splitlines()] == [
            ["NAME", "POOL", "READY"], ["infra-0", "infra", "True"], ["infra-1", "infra", "True"],
            ["worker-0", "worker", "True"]], nodes
        described = _cli(env, "describe", "pool", "infra", "--config", client)
        conditions = {line.split()[0]: line.split()[1] for line in described.split("Conditions:\n", 1)[1].splitlines()
                      if line.startswith("  ") and not line.startswith("   ")}
        assert (conditions["Updated"], conditions["Updating"]) == ("True", "False") and "Not ready" not in described, \
            described
        stop = subprocess.run([sys.executable, DEMO, "--stop"], cwd=paths.REPO, env=env, capture_output=True,
                              text=True, timeout=120)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert demo.wait(60) == 0
        assert not any(demoprocs.alive(e) for e in recorded)
        assert not (run / demoprocs.RECORD).exists()
    finally:
        if demo.poll() is None:
            subprocess.run([sys.executable, DEMO, "--stop"], cwd=paths.REPO, env=env, timeout=120)
            demo.wait(60)
