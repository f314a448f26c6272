"""The server decides which nodes update (issue 46), end to end on the directory backend: four
workers Done on A (worker maxUnavailable 1), a MachineConfig B that fails on every node (a
directory stands where its file goes; policy None: no drain, no reboot).

- the four nodes' ``update --once`` run at the same time: one tries B, the others wait and say why;
- the pool names the failed node and its reason, and says the rollout halted itself;
- deleting B's MachineConfig makes A the target at once (no RenderHeld) and the failed node is
  retargeted and recovers with no manual step;
- ``rollback pool`` targets the last config every node was Done on, says so first (``--dry-run``),
  holds the rendering it rolled back from (RenderHeld RolledBack) and ``--undo`` lifts the hold;
- /metrics says so as the alerts read it: the pool's rollout halted with a degraded node, then
  neither after the revert; held after the rollback, not after ``--undo``.
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root, not_layered, reboot
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

REPO = paths.REPO
TOKEN, ADMIN = "rollout-token", "rollout-admin"
NODES = [f"w{i}" for i in range(4)]
BAD_FILE = "/etc/nmstate/openshift/bond0.yml"
C_FILE = "/etc/nmstate/openshift/c.yml"  # the default policy: None (no reboot, no drain)
PICKED_UP = 60  # the server reads the state directory every second, after --settle-seconds (0.5): a limit for a stuck run


def agent(*args, env=None):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120, env=env)


def started(*args):
    return subprocess.Popen([sys.executable, "-m", "agent.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)


def mc(name, path, text="x"):
    return ("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
            f"  name: {name}\n  labels: {{machineconfiguration.openshift.io/role: worker}}\nspec:\n"
            f"  config:\n    ignition: {{version: 3.4.0}}\n    storage:\n      files:\n"
            f"      - {{path: {path}, mode: 420, contents: {{source: 'data:,{text}'}}}}\n")


def pool(srv):
    r = srv.session().get(srv.url("/api/v1/pools/worker"))
    assert r.status_code == 200, r.text
    return r.json()


def flags(srv):
    """What the alerts read of the worker pool on /metrics: its 1-or-0 gauges (paused, rollout_halted,
    held, render_degraded) and its degraded nodes (degraded_machines)."""
    from tests.unit.test_metrics import flags_of, samples

    r = srv.session().get(srv.url("/metrics"))
    assert r.status_code == 200, r.text
    got = samples(r.text)
    return dict(flags_of(got, "worker"),
                degraded_machines=got[("node_config_server_pool_degraded_machines", (("pool", "worker"),))])


CALM = {"paused": 0, "rollout_halted": 0, "held": 0, "render_degraded": 0, "degraded_machines": 0}


def held_fetches(srv, pool_name="worker"):
    """node_config_server_held_fetches{pool} of the server's /metrics: fetches held open now."""
    from tests.unit.test_metrics import samples

    text = srv.session().get(srv.url("/metrics"), timeout=30).text
    return samples(text).get(("node_config_server_held_fetches", (("pool", pool_name),)), 0)


def target(srv):
    return pool(srv)["spec"]["configuration"]["name"]


def all_at_once(roots):
    """Every node's ``update --once`` at the same moment: (node -> exit code, stderr)."""
    procs = {n: started("update", "--once", "--root", roots[n]) for n in NODES}
    return {n: (p.wait(120), p.communicate()[1]) for n, p in procs.items()}


@pytest.fixture
def cluster(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    not_layered(str(state))
    worker = state / "machineconfigpools" / "worker.yaml"
    worker.write_text(worker.read_text().replace('maxUnavailable: "25%"', "maxUnavailable: 1"))
    (tmp_path / "admin-token").write_text(ADMIN + "\n")
    with ServerProcess(str(state), tls=make_tls(str(tmp_path / "tls")), token=TOKEN,
                       extra_args=["--admin-token-file", str(tmp_path / "admin-token")]) as srv:
        roots = {}
        for name in NODES:
            roots[name] = make_node_root(str(tmp_path / name), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(),
                                         token=TOKEN, node_name=name)
            r = agent("firstboot", "--root", roots[name])
            assert r.returncode == 0, r.stderr
            reboot(roots[name])  # the reboot its first boot asked for; the next pass reports Done
            assert agent("update", "--once", "--root", roots[name]).returncode == 0
        a = target(srv)
        view = pool(srv)
        assert view["status"]["updatedMachineCount"] == 4 and view["status"]["rollout"]["counts"] == {"Done": 4}
        yield srv, state, roots, a


def test_a_failing_change_reaches_one_node_halts_itself_and_a_revert_recovers_it(cluster):
    srv, state, roots, a = cluster
    for root in roots.values():  # B's file cannot be written on any node: a directory stands there
        os.makedirs(os.path.join(root, BAD_FILE.lstrip("/"), "sub"))
    (state / "machineconfigs" / "60-bond.yaml").write_text(mc("60-bond", BAD_FILE))
    srv.wait_state_read()
    b = wait_for(lambda: (lambda t: t != a and t)(target(srv)), "B is the target", PICKED_UP)

    ran = all_at_once(roots)
    tried = sorted(n for n, (code, _) in ran.items() if code != 0)
    assert tried == ["w0"], ran  # the oldest registration first (sortNodeList: no zone, oldest first)
    assert ran["w0"][0] == 75 and "exists and is a directory" in ran["w0"][1], ran["w0"][1]
    for n in NODES[1:]:
        assert "waiting for its turn" in ran[n][1] and "w0" in ran[n][1], ran[n][1]
    # w0's Failed report wakes the pool's step, which decides the halt a moment later (off the
    # report's path: poolqueue.py); the view's node lists are the reports' at once.
    view = wait_for(lambda: (lambda v: v["status"]["rollout"].get("halted") and v)(pool(srv)),
                    "the step after w0's failure halts the rollout", PICKED_UP)
    rollout, conds = view["status"]["rollout"], {c["type"]: c for c in view["status"]["conditions"]}
    assert rollout["failed"] == ["w0"] and rollout["waiting"] == ["w1", "w2", "w3"]
    assert rollout["halted"].startswith("rollout halted: 1 node(s) failed on the target (w0)")
    assert BAD_FILE in rollout["reasons"]["w0"]
    assert conds["Degraded"]["status"] == "True" and conds["NodeDegraded"]["status"] == "True"
    blocking = srv.session().get(srv.url("/api/v1/cluster")).json()["blocking"]
    assert any(b_["reason"].startswith("rollout halted") for b_ in blocking)
    assert flags(srv) == dict(CALM, rollout_halted=1, degraded_machines=1)  # what the alerts read
    # Again: still only w0 tries B (the rollout stopped itself; the others never fetched B).
    ran = all_at_once(roots)
    assert sorted(n for n, (code, _) in ran.items() if code != 0) == ["w0"]
    for n in NODES[1:]:
        assert not os.path.exists(os.path.join(roots[n], "var/lib/node-agent/status-update.json")) or \
            b not in open(os.path.join(roots[n], "var/lib/node-agent/status-update.json")).read()

    # The revert: B's MachineConfig deleted; A is the target at once, w0 is retargeted and recovers.
    (state / "machineconfigs" / "60-bond.yaml").unlink()
    srv.wait_state_read()
    wait_for(lambda: target(srv) == a, "A is the target again", PICKED_UP)
    view = pool(srv)
    assert {c["type"]: c["status"] for c in view["status"]["conditions"]}["RenderHeld"] == "False"
    ran = all_at_once(roots)
    assert all(code == 0 for code, _ in ran.values()), ran
    assert "reporting Done on it" in ran["w0"][1]
    view = pool(srv)
    conds = {c["type"]: c["status"] for c in view["status"]["conditions"]}
    assert view["status"]["updatedMachineCount"] == 4 and conds["Degraded"] == "False" and conds["Updated"] == "True"
    assert view["status"]["rollout"]["counts"] == {"Done": 4} and "halted" not in view["status"]["rollout"]
    assert flags(srv) == CALM


def test_rollback_says_what_it_will_do_then_targets_the_last_config_every_node_was_done_on(cluster, tmp_path):
    srv, state, roots, a = cluster
    (state / "machineconfigs" / "60-c.yaml").write_text(mc("60-c", C_FILE, "c"))
    srv.wait_state_read()
    c = wait_for(lambda: (lambda t: t != a and t)(target(srv)), "C is the target", PICKED_UP)
    assert agent("update", "--once", "--root", roots["w0"]).returncode == 0  # w0 Done on C; w1 targeted next
    # by the step w0's report wakes (off its path): the plan names the nodes it retargets, so the
    # dry run and the rollback below read the pool once that step ran.
    wait_for(lambda: pool(srv)["status"]["rollout"].get("updating") == ["w1"], "w1 targeted after w0's Done", PICKED_UP)

    assert os.path.exists(os.path.join(roots["w0"], C_FILE.lstrip("/")))
    admin = tmp_path / "admin.yaml"
    admin.write_text(f"server: {srv.base_url}\ncertificateAuthority: {srv.tls.ca_cert}\n"
                     f"tokenFile: {tmp_path / 'admin-token'}\n")

    def ncs(*args):
        return subprocess.run([sys.executable, "-m", "agent.server.cli", *args, "--config", str(admin)],
                              capture_output=True, text=True, cwd=REPO, timeout=60)

    dry = ncs("rollback", "pool", "worker", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"would roll back pool worker from {c} to {a};") and "w0" in dry.stdout
    assert target(srv) == c  # a dry run changes nothing
    done = ncs("rollback", "pool", "worker")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "will " + dry.stdout.splitlines()[0][len("would "):]
    view = pool(srv)
    held = {c_["type"]: c_ for c_ in view["status"]["conditions"]}["RenderHeld"]
    assert view["spec"]["configuration"]["name"] == a and held["status"] == "True" and held["reason"] == "RolledBack"
    assert c in held["message"]
    assert flags(srv) == dict(CALM, held=1)
    for n in NODES:  # w0 is retargeted to A (its file goes), the others are done already
        assert agent("update", "--once", "--root", roots[n]).returncode == 0
    assert not os.path.exists(os.path.join(roots["w0"], C_FILE.lstrip("/")))
    assert pool(srv)["status"]["updatedMachineCount"] == 4
    again = ncs("rollback", "pool", "worker")
    assert again.returncode == 1 and "nothing to roll back" in again.stderr  # A is the last config every node ran
    undo = ncs("rollback", "pool", "worker", "--undo")
    assert undo.returncode == 0, undo.stderr
    assert target(srv) == c and pool(srv)["status"]["rollout"]["updating"] == ["w0"]
    assert flags(srv) == CALM  # the hold lifted


def test_a_waiting_node_learns_its_turn_from_a_held_fetch_not_its_next_poll(cluster):
    """The day-2 loop's fetch is held by the server until the node's desired config changes (a long
    poll): with a poll interval of 10 minutes, w1 still takes its turn as soon as w0 is done."""
    import signal
    import time

    srv, state, roots, a = cluster
    (state / "machineconfigs" / "60-c.yaml").write_text(mc("60-c", C_FILE, "c"))
    srv.wait_state_read()
    wait_for(lambda: target(srv) != a and pool(srv)["status"]["rollout"]["updating"] == ["w0"], "w0 targeted",
             PICKED_UP)
    loop = started("update", "--root", roots["w1"], "--interval", "600")
    try:
        # The loop's first fetch is held (w1 runs what it is served: unchanged): the server's
        # /metrics counts it among the worker pool's held fetches until it is answered.
        wait_for(lambda: held_fetches(srv) >= 1, "w1's loop waits for its turn in a held fetch", PICKED_UP)
        assert agent("update", "--once", "--root", roots["w0"]).returncode == 0
        done = time.monotonic()
        wait_for(lambda: os.path.exists(os.path.join(roots["w1"], C_FILE.lstrip("/"))),
                 "w1 applied C, well before its next poll (600 s)", 60, interval=0.1)
        print(f"w1 applied C {time.monotonic() - done:.2f} s after w0 reported Done")
    finally:
        loop.send_signal(signal.SIGTERM)
        loop.communicate(timeout=30)


def test_a_pool_whose_nodes_all_wait_for_approval_keeps_serving_what_they_run_to_new_nodes(tmp_path):
    """With the bootstrap token alone nobody is approved and no node counts: a new rendering must
    not become what new nodes get before any node ran it (MCO-1940). The pool's current config,
    what its waiting nodes run, stays what new nodes get."""
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    with ServerProcess(str(state), token=TOKEN, auto_approve=None) as srv:
        a = target(srv)
        r = srv.node_session("w-pending").post(srv.url("/api/v1/nodes/w-pending/report"), json={
            "pool": "worker", "state": "Done", "currentConfig": a, "desiredConfig": a})
        assert r.status_code == 200 and r.json()["approval"] == "Pending", r.text
        (state / "machineconfigs" / "60-c.yaml").write_text(mc("60-c", C_FILE, "c"))
        srv.wait_state_read()
        b = wait_for(lambda: (lambda t: t != a and t)(target(srv)), "the new rendering is the target", PICKED_UP)
        view = pool(srv)
        assert view["status"]["machineCount"] == 0 and view["status"]["configuration"]["name"] == a
        assert view["status"]["served"]["config"] == a and "no node runs the target" in view["status"]["served"]["reason"]
        new_node = srv.session().get(srv.url("/config/worker"))
        assert new_node.status_code == 200 and new_node.headers["X-Served-Config"] == a
        assert b != a


def test_a_canary_goes_first_and_the_rest_wait_the_pools_canary_wait_after_it_is_done(cluster):
    """Ours (docs/rollout.md): canary-nodes "1" and a canary-wait: one node takes a new target,
    the others wait until it is Done and then the canary wait more, told why; then they go in turn.

    While w1 is told why it waits the wait is 10 minutes, a window no loaded machine runs past
    (with 4 s a busy machine had w1 targeted before its own run: issue 54); then the pool's wait
    is shortened to end 4 s after the test reads the server's canaryAt (when it took the canary's
    Done), and w1's turn comes no earlier than canaryAt plus that wait."""
    import math
    import time

    srv, state, roots, a = cluster
    worker = state / "machineconfigpools" / "worker.yaml"
    worker.write_text(worker.read_text().replace("  name: worker\n", "  name: worker\n  annotations:\n"
                                                 "    node-config-server.openshift.io/canary-nodes: \"1\"\n"
                                                 "    node-config-server.openshift.io/canary-wait: \"600\"\n", 1))
    (state / "machineconfigs" / "60-c.yaml").write_text(mc("60-c", C_FILE, "c"))
    srv.wait_state_read()
    wait_for(lambda: target(srv) != a and pool(srv)["status"]["rollout"].get("updating") == ["w0"], "the canary",
             PICKED_UP)
    c = target(srv)
    assert "canary: the first 1 node(s) update first" in pool(srv)["status"]["rollout"]["waitReason"]
    before_done = time.time()
    assert agent("update", "--once", "--root", roots["w0"]).returncode == 0
    # The step that takes w0's Done runs off its report's path (poolqueue.py); w1's fetch is told
    # what the last step decided, so it goes once that step ran.
    wait_for(lambda: pool(srv)["status"]["rollout"].get("canaryAt"), "the step takes the canary's Done",
             PICKED_UP)
    waiting = agent("update", "--once", "--root", roots["w1"])
    assert waiting.returncode == 0 and "canary: 1 node(s) Done and Ready" in waiting.stderr, waiting.stderr
    assert "the others wait 600 s after that" in waiting.stderr, waiting.stderr
    assert not os.path.exists(os.path.join(roots["w1"], C_FILE.lstrip("/")))
    rollout = pool(srv)["status"]["rollout"]
    assert "updating" not in rollout and rollout["waiting"] == ["w1", "w2", "w3"], rollout
    assert rollout["waitReason"].startswith(f"canary: 1 node(s) Done and Ready on {c}; the others wait 600 s"), rollout
    canary_at = float(rollout["canaryAt"])  # the server's clock (time.time()) when it took w0's Done
    assert canary_at >= before_done

    wait = math.ceil(time.time() - canary_at) + 4  # ends at least 4 s from now, counted from canaryAt
    worker.write_text(worker.read_text().replace('canary-wait: "600"', f'canary-wait: "{wait}"'))
    srv.wait_state_read()
    wait_for(lambda: pool(srv)["status"]["rollout"].get("updating") == ["w1"], "w1's turn after the canary wait",
             wait + PICKED_UP + 30)
    assert time.time() >= canary_at + wait  # seen after it happened: the server targeted w1 no earlier
    assert target(srv) == c
    assert agent("update", "--once", "--root", roots["w1"]).returncode == 0
    assert os.path.exists(os.path.join(roots["w1"], C_FILE.lstrip("/")))
