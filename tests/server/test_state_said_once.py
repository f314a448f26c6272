"""A state directory problem is logged once by serve, not once per gunicorn worker (issue 57,
item 5): each worker reads the directory on its own; the first to read a signature says what it
found (agent/server/http/saidonce.py), and at start serve's own first read says it for all."""

import os
import shutil

import requests

from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

BROKEN = ("metadata: {name: 99-broken, labels: {machineconfiguration.openshift.io/role: worker}}\n"
          "spec: {kernelType: fancy}\n")
PROBLEM = "state: $.spec.kernelType"


def stale_workers(srv, seen):
    """The pids of the workers seen answering that their state is stale (one fresh connection per
    call: it lands on any worker), once both workers have."""
    r = requests.get(srv.url("/api/v1/cluster"), timeout=10)
    for replica in r.json()["replicas"]:
        if replica.get("stale"):
            seen.add(replica["pid"])
    return set(seen) if len(seen) == 2 else None


def test_a_state_problem_is_logged_once_by_a_server_of_two_workers(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    with ServerProcess(str(state), workers=2) as srv:
        (tmp_path / "99-broken.yaml").write_text(BROKEN)
        os.replace(tmp_path / "99-broken.yaml", state / "machineconfigs" / "99-broken.yaml")
        seen = set()
        wait_for(lambda: stale_workers(srv, seen), "both workers read the broken file", 60, interval=0)
        log = wait_for(lambda: (lambda t: "has 1 problem(s); " in t and t)(srv.log_text()), "the summary line")
    # "the last good state keeps serving", or, from a worker that booted after the write, "valid objects serve"
    assert log.count(PROBLEM) == 1, log
    assert log.count("has 1 problem(s); ") == 1, log


def test_a_server_started_on_a_broken_directory_logs_its_problem_once(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    (state / "machineconfigs" / "99-broken.yaml").write_text(BROKEN)
    with ServerProcess(str(state), workers=2) as srv:
        seen = set()
        wait_for(lambda: stale_workers(srv, seen), "both workers read the broken directory", 60, interval=0)
        log = srv.log_text()
    assert log.count(PROBLEM) == 1, log


def paused_on_workers(srv, seen, paused):
    """The pids of the workers seen serving the worker pool as ``paused``, once both workers have."""
    out = requests.get(srv.url("/api/v1/cluster"), timeout=10).json()
    if out["pools"]["worker"]["paused"] is paused:
        seen.update(r["pid"] for r in out["replicas"])
    return set(seen) if len(seen) == 2 else None


def test_pausing_and_unpausing_a_pool_is_logged_once_each(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    pool = state / "machineconfigpools" / "worker.yaml"
    text = pool.read_text()
    with ServerProcess(str(state), workers=2) as srv:
        for paused in (True, False):
            (tmp_path / "worker.yaml").write_text(text + ("  paused: true\n" if paused else ""))
            os.replace(tmp_path / "worker.yaml", pool)
            wait_for(lambda seen=set(), paused=paused: paused_on_workers(srv, seen, paused),
                     f"both workers serve paused={paused}", 60, interval=0)
        log = wait_for(lambda: (lambda t: "pool worker unpaused" in t and t)(srv.log_text()), "the unpause line")
    assert log.count("pool worker paused (spec.paused: true): none of its nodes is updated until it is unpaused") \
        == 1, log
    assert log.count("pool worker unpaused (spec.paused: false): its nodes are updated again, in turn") == 1, log
