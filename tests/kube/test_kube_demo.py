"""``make kube-demo`` runs examples/kube_demo.py to the point where it waits, with kubectl's and
our pool tables agreeing, and ``make kube-demo-stop`` (``--stop``) ends every process it started."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import paths
from tests.helpers.kube_cluster import find_kube_bin
from tests.helpers.wait import wait_for

sys.path.insert(0, paths.REPO)
from examples import demoprocs  # noqa: E402

DEMO = os.path.join(paths.REPO, "examples", "kube_demo.py")


def _table(text, after):
    """The table printed after the line ``after``: {pool: [columns]}, without AGE (it ticks)."""
    lines = text.split(after, 1)[1].split("\n", 1)[1].splitlines()  # from the line after the command's
    rows = [line.split() for line in lines[:4] if line.startswith("  ")]
    assert rows and rows[0][0] == "NAME", lines[:4]
    return {r[0]: r[1:-1] for r in rows[1:]}


def test_kube_demo_shows_kubectl_and_get_pools_alike_and_stop_ends_every_process(tmp_path):
    if not find_kube_bin():
        pytest.skip("kube-apiserver/kube-controller-manager are not built: run make kube-bin")
    run = tmp_path / "kube-demo-run"
    # COLUMNS: a wide table whatever the environment says (the tables take $COLUMNS first)
    env = dict(os.environ, NODE_AGENT_KUBE_DEMO_DIR=str(run), NO_COLOR="1", PYTHONPATH=paths.REPO, COLUMNS="400")
    log = tmp_path / "demo.log"
    with open(log, "w") as out:
        demo = subprocess.Popen([sys.executable, DEMO], cwd=paths.REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        text = wait_for(lambda: demo.poll() is None and "make kube-demo-stop" in log.read_text() and log.read_text(),
                        "the kube demo to be ready", timeout=240)
        assert demo.poll() is None, log.read_text()
        recorded = json.loads((run / demoprocs.RECORD).read_text())
        assert [e["name"] for e in recorded] == ["demo", "etcd", "kube-apiserver", "kube-controller-manager",
                                                 "kube-scheduler", "node-config-server"]
        kubectl = _table(text, "get mcp")
        ours = _table(text, "get pools --config")
        assert set(kubectl) == set(ours) == {"infra", "master", "worker"}
        for pool in ours:  # CONFIG, UPDATED, UPDATING, DEGRADED, the four counts
            assert kubectl[pool] == ours[pool], (pool, kubectl[pool], ours[pool])
        assert kubectl["infra"][:2] == [ours["infra"][0], "True"] and ours["infra"][-3:] == ["1", "1", "0"]
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
