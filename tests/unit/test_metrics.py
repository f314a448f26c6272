"""/metrics with prometheus-client: counts summed across worker processes, stale directories removed."""

import os
import subprocess
import sys

from agent.server.http import metrics
from tests.helpers import paths


def samples(text):
    """(name, sorted labels) -> value, parsed by prometheus-client's own parser (label order free)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}

REPO = paths.REPO

# A "worker": counts in its own process, in multiprocess mode, then exits.
WORKER = """
import sys
from agent.server.http.metrics import RequestCounter
c = RequestCounter(sys.argv[1])
for _ in range(int(sys.argv[2])):
    c.inc("worker", 200, "GET")
"""


def test_counts_of_every_worker_process_are_summed(tmp_path):
    d = str(tmp_path)
    for n in (3, 4):  # two worker processes, both gone by the scrape
        subprocess.run([sys.executable, "-c", WORKER, d, str(n)], check=True, cwd=REPO, timeout=60)
    scrape = """
import sys
from agent.server.http.metrics import RequestCounter, exposition
c = RequestCounter(sys.argv[1])
c.inc("master", 404, "GET")
print(exposition(c, {}, 0, False))
"""
    out = subprocess.run([sys.executable, "-c", scrape, d], check=True, cwd=REPO, timeout=60, capture_output=True,
                         text=True).stdout
    got = samples(out)
    assert got[("node_config_server_requests_total", (("code", "200"), ("method", "GET"), ("pool", "worker")))] == 7
    assert got[("node_config_server_requests_total", (("code", "404"), ("method", "GET"), ("pool", "master")))] == 1
    assert got[("node_config_server_state_stale", ())] == 0


HOLDER = """
import sys
from agent.server.http.metrics import RequestCounter
c = RequestCounter(sys.argv[1])
c.held.labels("worker").inc(int(sys.argv[2]))  # fetches it held when it died (never answered)
"""
SCRAPE = """
import sys
from agent.server.http.metrics import RequestCounter, exposition
print(exposition(RequestCounter(sys.argv[1]), {}, 0, False))
"""


def test_held_fetches_are_summed_over_live_workers_and_a_dead_workers_leave_the_sum_at_its_exit(tmp_path):
    """node_config_server_held_fetches{pool} (livesum): gunicorn's child_exit hook, in the master,
    drops a worker that died holding fetches; the others' still count."""
    from types import SimpleNamespace

    from agent.server.http import gunicorn_app

    d = str(tmp_path)
    pids = [subprocess.Popen([sys.executable, "-c", HOLDER, d, str(n)], cwd=REPO) for n in (2, 3)]
    for p in pids:
        assert p.wait(timeout=60) == 0

    def held():
        out = subprocess.run([sys.executable, "-c", SCRAPE, d], check=True, cwd=REPO, timeout=60,
                             capture_output=True, text=True).stdout
        return samples(out).get(("node_config_server_held_fetches", (("pool", "worker"),)), 0)

    assert held() == 5
    old = os.environ.get(metrics.ENV)
    os.environ[metrics.ENV] = d
    try:
        gunicorn_app.child_exit_hook()(None, SimpleNamespace(pid=pids[0].pid))
    finally:
        if old is None:
            del os.environ[metrics.ENV]
        else:
            os.environ[metrics.ENV] = old
    assert held() == 3


def test_the_masters_child_exit_hook_imports_nothing_when_gunicorns_sigchld_handler_runs_it(tmp_path, monkeypatch):
    """gunicorn calls child_exit from its SIGCHLD handler; a second worker's exit interrupts it. An
    import inside the hook was then found half done by the nested call (a py39 CI run: "partially
    initialized module 'prometheus_client.multiprocess'", the server's exit code 70)."""
    from types import SimpleNamespace
    from unittest import mock

    from agent.server.http import gunicorn_app

    monkeypatch.setenv(metrics.ENV, str(tmp_path))
    hook = gunicorn_app.child_exit_hook()
    with mock.patch("builtins.__import__", side_effect=AssertionError("the child_exit hook imported")) as imp:
        hook(None, SimpleNamespace(pid=12345))
    assert imp.call_count == 0


def test_single_process_counter_and_state_gauges():
    c = metrics.RequestCounter(None)
    c.inc("infra", 503, "GET")
    views = {"infra": {"spec": {"configuration": {"name": "rendered-infra-1"}},
                       "status": {"configuration": {"name": "rendered-infra-0"},
                                  "served": {"config": "rendered-infra-0", "image": "quay.io/x"},
                                  "nodeStates": {"Done": 1, "Working": 0, "Degraded": 0}, "machineCount": 1}}}
    text = metrics.exposition(c, views, 2, True)
    got = samples(text)
    assert got[("node_config_server_requests_total", (("code", "503"), ("method", "GET"), ("pool", "infra")))] == 1
    assert got[("node_config_server_served_config_info",
                (("config", "rendered-infra-0"), ("image", "quay.io/x"), ("pool", "infra")))] == 1
    assert got[("node_config_server_nodes", (("pool", "infra"), ("state", "Done")))] == 1
    assert got[("node_config_server_state_problems", ())] == 2 and got[("node_config_server_state_stale", ())] == 1
    import prometheus_client

    if hasattr(prometheus_client, "disable_created_metrics"):  # 0.17+; older ones add _created series
        assert not [k for k in got if k[0].endswith("_created")]


def test_a_dead_servers_directory_is_removed_a_live_ones_kept(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = tmp_path / f"{metrics.DIR_PREFIX}{child.pid}-abc"
    live = tmp_path / f"{metrics.DIR_PREFIX}{os.getpid()}-def"
    other = tmp_path / "unrelated-123-x"
    for d in (dead, live, other):
        d.mkdir()
        (d / "counter_1.db").write_bytes(b"x")
    assert metrics.remove_stale_dirs(str(tmp_path)) == [str(dead)]
    assert not dead.exists() and live.exists() and other.exists()


def test_first_boots_by_pool_stage_and_outcome_the_stalled_ones_and_their_duration():
    """Gauges from the pools' status.firstBoots (the shared store: every replica the same), and
    what this process saw end: a counter by pool, stage and outcome, Done ones' durations."""
    c = metrics.RequestCounter(None)
    c.observe_first_boot("worker", {"outcome": "Failed", "stage": "apply", "began": "2027-01-15T08:00:00.000Z",
                                    "endedAt": "2027-01-15T08:01:00.000Z"})
    c.observe_first_boot("worker", {"outcome": "Done", "stage": "report", "began": "2027-01-15T08:00:00.000Z",
                                    "endedAt": "2027-01-15T08:12:00.000Z"})
    first_boots = {"running": 1, "failed": 0, "stalled": 2,
                   "stages": {"Running": {"pool": 1}, "Stalled": {"fetch": 1, "report": 1}}}
    views = {"worker": {"spec": {"configuration": {"name": "rendered-worker-1"}},
                        "status": {"configuration": {"name": "rendered-worker-1"},
                                   "served": {"config": "rendered-worker-1", "image": ""},
                                   "nodeStates": {}, "firstBoots": first_boots}}}
    got = samples(metrics.exposition(c, views, 0, False))
    assert {k[1]: v for k, v in got.items() if k[0] == "node_config_server_firstboots"} == {
        (("outcome", "running"), ("pool", "worker"), ("stage", "pool")): 1,
        (("outcome", "stalled"), ("pool", "worker"), ("stage", "fetch")): 1,
        (("outcome", "stalled"), ("pool", "worker"), ("stage", "report")): 1}
    assert got[("node_config_server_firstboots_stalled", (("pool", "worker"),))] == 2
    assert got[("node_config_server_firstboots_ended_total", (("outcome", "failed"), ("pool", "worker"),
                                                              ("stage", "apply")))] == 1
    assert got[("node_config_server_firstboot_duration_seconds_count", (("pool", "worker"),))] == 1  # Done only
    assert got[("node_config_server_firstboot_duration_seconds_sum", (("pool", "worker"),))] == 720
    assert got[("node_config_server_firstboot_duration_seconds_bucket", (("le", "900.0"), ("pool", "worker")))] == 1


def flags_of(got, pool):
    """The pool's 1-or-0 gauges (metrics.POOL_FLAGS) by short name."""
    return {name[len("node_config_server_pool_"):]: got[(name, (("pool", pool),))] for name, _, _ in metrics.POOL_FLAGS}


def test_paused_halted_held_and_render_degraded_pools_read_1_the_others_0():
    def view(paused=False, halted="", true=()):
        conditions = [{"type": t, "status": "True" if t in true else "False"}
                      for t in ("Updated", "NodeDegraded", "RenderDegraded", "Degraded", "RenderHeld")]
        return {"spec": {"configuration": {"name": "r1"}, "paused": paused},
                "status": {"configuration": {"name": "r0"}, "served": {"config": "r0", "image": ""},
                           "nodeStates": {}, "rollout": {"target": "r1", **({"halted": halted} if halted else {})},
                           "conditions": conditions}}

    views = {"calm": view(), "paused": view(paused=True),
             "halted": view(halted="rollout halted: 1 node(s) failed on the target (w0)",
                            true=("NodeDegraded", "Degraded")),
             "held": view(true=("RenderHeld",)), "unrenderable": view(true=("RenderDegraded", "Degraded")),
             "degraded": view(true=("NodeDegraded", "Degraded"))}  # nodes: node_config_server_pool_degraded_machines
    got = samples(metrics.exposition(metrics.RequestCounter(None), views, 0, False))
    zero = {"paused": 0, "rollout_halted": 0, "held": 0, "render_degraded": 0}
    assert flags_of(got, "calm") == zero
    assert flags_of(got, "paused") == dict(zero, paused=1)
    assert flags_of(got, "halted") == dict(zero, rollout_halted=1)
    assert flags_of(got, "held") == dict(zero, held=1)
    assert flags_of(got, "unrenderable") == dict(zero, render_degraded=1)
    assert flags_of(got, "degraded") == zero


def test_the_in_process_server_reads_a_paused_pool_1_and_a_pool_it_cannot_render_render_degraded(tmp_path, new_app):
    """/metrics of the App over the example state: infra paused (spec.paused), a pool without a
    machineConfigSelector (no MachineConfigs: RenderDegraded and Degraded, as the render controller)."""
    import shutil

    from tests.campaigns.test_bad_input_campaign import wsgi

    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    infra = state / "machineconfigpools" / "infra.yaml"
    infra.write_text(infra.read_text().replace("  maxUnavailable: 1", "  maxUnavailable: 1\n  paused: true"))
    (state / "machineconfigpools" / "empty.yaml").write_text("metadata: {name: empty}\n")
    status, headers, body = wsgi(new_app(str(state), reload_interval=0.0), "GET", "/metrics")
    assert status == 200, body
    got = samples(body.decode())
    zero = {"paused": 0, "rollout_halted": 0, "held": 0, "render_degraded": 0}
    assert flags_of(got, "infra") == dict(zero, paused=1)
    assert flags_of(got, "worker") == flags_of(got, "master") == zero
    assert flags_of(got, "empty") == dict(zero, render_degraded=1)


def test_each_gate_of_a_pool_reads_holding_and_failed_closed_and_blocked_nodes_are_counted():
    """node_config_server_pool_gate_holding / _gate_failed_closed{pool,gate}: one series per gate the
    pool has; a closed window or a firing alert holds, an invalid annotation, an unanswered
    Prometheus or pods not listed hold and failed closed; blocking pods hold only their nodes."""
    def view(**rollout):
        return {"spec": {"configuration": {"name": "r1"}},
                "status": {"configuration": {"name": "r1"}, "served": {"config": "r1", "image": ""},
                           "nodeStates": {}, "rollout": {"target": "r1", **rollout}, "conditions": []}}

    views = {
        "plain": view(),
        "open": view(window={"schedule": "mon", "open": True, "closesAt": "x"},
                     alerts={"pattern": "A", "holding": False, "firing": [], "count": 0},
                     blockingPods={"selector": "app=batch", "waiting": 2, "nodes": {"w0": ["a/b"], "w1": ["a/c"]}}),
        "closed": view(window={"schedule": "mon", "open": False, "opensAt": "x"},
                       alerts={"pattern": "A", "holding": True, "firing": ["A"], "count": 1}),
        "broken": view(window={"invalid": "at days: 'funday' is not a day"},
                       alerts={"pattern": "A", "unanswered": "Connection refused", "holding": True},
                       blockingPods={"selector": "app=batch", "unavailable": "503"}),
        "badselector": view(blockingPods={"invalid": "at character 3"}),
        "overridden": view(alerts={"pattern": "A", "unanswered": "Connection refused", "holding": False,
                                   "override": "alert-gate-unreachable: proceed"}),
    }
    got = samples(metrics.exposition(metrics.RequestCounter(None), views, 0, False))

    def gates(name, pool):
        return {dict(labels)["gate"]: value for (metric, labels), value in got.items()
                if metric == f"node_config_server_pool_gate_{name}" and dict(labels)["pool"] == pool}

    assert gates("holding", "plain") == {} and gates("failed_closed", "plain") == {}
    assert gates("holding", "open") == {"maintenance-window": 0, "alert-gate": 0, "blocking-pods": 0}
    assert gates("failed_closed", "open") == {"maintenance-window": 0, "alert-gate": 0, "blocking-pods": 0}
    assert gates("holding", "closed") == {"maintenance-window": 1, "alert-gate": 1}
    assert gates("failed_closed", "closed") == {"maintenance-window": 0, "alert-gate": 0}
    assert gates("holding", "broken") == gates("failed_closed", "broken") == \
        {"maintenance-window": 1, "alert-gate": 1, "blocking-pods": 1}
    assert gates("failed_closed", "badselector") == {"blocking-pods": 1}
    assert gates("holding", "overridden") == gates("failed_closed", "overridden") == {"alert-gate": 0}
    blocked = {pool: got[("node_config_server_pool_blocked_machines", (("pool", pool),))] for pool in views}
    assert blocked == {"plain": 0, "open": 2, "closed": 0, "broken": 0, "badselector": 0, "overridden": 0}
