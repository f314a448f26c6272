"""A member's held fetch (``?wait=`` with ``If-None-Match``, agent/server/http/app.py ``_held``) makes its
answer again only when what it is made from changed (the state, the pool's row, the node's own
record), not on every change of the store: a thousand held fetches and a report a few milliseconds
apart made every answer again twice a second (docs/performance.md, "Rollout at fleet scale").
In-process, the directory backend, an open server (a node is taken at its name)."""

import json
import os
import shutil
import threading
import time

from tests.campaigns.test_hostile_campaign import wsgi
from tests.helpers import paths
from tests.helpers.noderoot import not_layered
from tests.helpers.wait import wait_for

MC = ("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 60-held\n"
      "  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n  config:\n    ignition: {version: 3.4.0}\n"
      "    storage:\n      files:\n      - {path: /etc/nmstate/openshift/held.yml, mode: 420, contents: {source: 'data:,x'}}\n")


def two_members_done_on_a(tmp_path, new_app):
    """An app whose worker pool (maxUnavailable 1) has n1 and n2 Done on its config A: (app, state, A)."""
    state = tmp_path / "state"
    shutil.copytree(os.path.join(paths.REPO, "examples", "state"), state)
    not_layered(str(state))
    worker = state / "machineconfigpools" / "worker.yaml"
    worker.write_text(worker.read_text().replace('maxUnavailable: "25%"', "maxUnavailable: 1"))
    app = new_app(str(state), reload_interval=0.0, settle=0.0)
    status, a = wsgi(app, "GET", "/api/v1/pools/worker")
    a = json.loads(a)["spec"]["configuration"]["name"]
    done = {"pool": "worker", "state": "Done", "currentConfig": a, "desiredConfig": a}
    for n in ("n1", "n2"):
        assert wsgi(app, "POST", f"/api/v1/nodes/{n}/report", json.dumps(done).encode())[0] == 200
    return app, state, a


def test_a_held_fetch_is_made_again_only_when_its_inputs_change_and_answers_once_its_node_is_targeted(tmp_path, new_app):
    app, state, a = two_members_done_on_a(tmp_path, new_app)
    app.max_hold = 3.0
    done = {"pool": "worker", "state": "Done", "currentConfig": a, "desiredConfig": a}
    answer = {}

    def held():  # n1's answer: its ETag on A, held
        first = app._config_answer(app.caller({}), "n1", "worker", None)
        answer["etag"] = first[1]
        made = []
        inner = app._config_answer
        app._config_answer = lambda *args: made.append(1) or inner(*args)
        start = time.monotonic()
        answer["status"], _ = wsgi(app, "GET", "/config/worker", headers={
            "X-Node-Name": "n1", "If-None-Match": first[1]}, query="wait=3")
        answer["made"], answer["took"] = len(made), time.monotonic() - start

    t = threading.Thread(target=held)
    t.start()
    for i in range(12):  # n2's reports move the store's generation; nothing n1's answer is made from
        body = dict(done, reason=f"report {i}")
        assert wsgi(app, "POST", "/api/v1/nodes/n2/report", json.dumps(body).encode())[0] == 200
        time.sleep(0.2)
    t.join(10)
    assert answer["status"] == 304 and answer["took"] >= 2.9
    assert answer["made"] == 1  # the first answer only: none made again while its inputs stood still

    # B: n1 (the oldest registration) is targeted; its held fetch answers with B. Held long enough
    # that only the targeting ends it (a 3 s hold timed out, 304, while a loaded machine was still
    # reading and rendering B); how soon is benchmarks/bench_rollout.py's to measure.
    app.max_hold = 60.0
    (state / "machineconfigs" / "60-held.yaml").write_text(MC)
    got = {}

    def targeted():
        start = time.monotonic()
        got["status"], got["body"] = wsgi(app, "GET", "/config/worker", headers={
            "X-Node-Name": "n1", "If-None-Match": answer["etag"]}, query="wait=60")
        got["took"] = time.monotonic() - start

    t = threading.Thread(target=targeted)
    t.start()
    wait_for(lambda: json.loads(wsgi(app, "GET", "/api/v1/pools/worker")[1])["spec"]["configuration"]["name"] != a,
             "B is the target")
    t.join(70)
    assert got["status"] == 200, got  # woken by its targeting: a hold that ran out answers 304


def test_a_targeting_committed_while_the_held_answer_is_made_ends_the_hold_at_once(tmp_path, new_app):
    """The store's generation and the answer's inputs are read before the answer is made, as a
    memo's are: a targeting committed between the answer (n1 waits on A) and the hold's first
    look is a change, so n1 gets B at once. Read after the answer, that commit was the baseline
    and the fetch waited out its whole hold (a loaded CI run: 304 after 60 s)."""
    app, state, a = two_members_done_on_a(tmp_path, new_app)
    app.cluster.stop_stepper()  # only this test steps the pools
    app.max_hold = 60.0
    etag = app._config_answer(app.caller({}), "n1", "worker", None)[1]
    inner, calls = app._config_answer, []

    def answer_then_target(*args):
        made = inner(*args)
        if not calls:  # the held fetch's first answer (n1 waits on A); then B, and the server targets n1
            (state / "machineconfigs" / "60-held.yaml").write_text(MC)
            for _ in range(3):
                app.cluster.step_pools()
        calls.append(made[1])
        return made

    app._config_answer = answer_then_target
    start = time.monotonic()
    status, body = wsgi(app, "GET", "/config/worker", headers={"X-Node-Name": "n1", "If-None-Match": etag},
                        query="wait=60")
    took = time.monotonic() - start
    target = json.loads(wsgi(app, "GET", "/api/v1/pools/worker")[1])["spec"]["configuration"]["name"]
    assert target != a and calls[0] == etag, (target, calls)  # the first answer was made before the targeting
    assert status == 200 and took < 30, (status, took)  # answered B, not a hold run out
    assert b"/etc/nmstate/openshift/held.yml" in body


def test_a_row_change_about_other_nodes_is_compared_not_answered_and_the_hold_ends_saying_why_now(tmp_path, new_app):
    """A step that changes only the other nodes' part of the pool's row (their entries, why the
    pool waits) does not make n2's held answer again (serving.HoldInputs.same_config); the answer
    the hold ends with is made once more, so that its X-Rollout-Reason says why n2 waits then."""
    import dataclasses

    app, state, a = two_members_done_on_a(tmp_path, new_app)
    app.cluster.stop_stepper()  # only this test steps the pools and writes the pool's row
    (state / "machineconfigs" / "60-held.yaml").write_text(MC)  # B: n1 (the oldest) is targeted, n2 waits
    for _ in range(3):
        app.cluster.step_pools()
    assert app.cluster.store.pools()["worker"].rollout["targets"].keys() == {"n1"}
    app.max_hold = 600.0  # ended by the test below, never by the clock
    etag = app._config_answer(app.caller({}), "n2", "worker", None)[1]
    inner, made = app._config_answer, []
    app._config_answer = lambda *args: made.append(1) or inner(*args)
    inputs, looks = app.cluster.hold_inputs, []
    app.cluster.hold_inputs = lambda *args: looks.append(1) or inputs(*args)
    got = {}

    def held():
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/config/worker", "QUERY_STRING": "wait=600",
                   "SERVER_NAME": "t", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
                   "HTTP_X_NODE_NAME": "n2", "HTTP_IF_NONE_MATCH": etag}
        b"".join(app(environ, lambda status, headers: got.update(status=int(status.split()[0]),
                                                                 headers=dict(headers))))

    t = threading.Thread(target=held)
    t.start()
    wait_for(lambda: made, "n2's first answer made")
    for i in range(5):  # another node's entry and the pool's reason change; n2's part does not
        def other(row, i=i):
            targets = {"n1": dict(row.rollout["targets"]["n1"], note=i)}
            rollout = dict(row.rollout, waiting=f"reason {i}", targets=targets)
            return dataclasses.replace(row, rollout=rollout)
        before = len(looks)
        app.cluster.store.update_pool("worker", other)
        app.cluster.bell.ring(None)
        wait_for(lambda before=before: len(looks) > before, f"the held fetch looked at change {i}")
    app.stopping.set()  # the hold ends (as when the worker stops): answered from the row as it is now
    t.join(60)
    assert got["status"] == 304, got
    assert len(made) == 2  # the first answer, and once more as the hold ended: none per change
    assert got["headers"]["X-Rollout-Reason"].endswith("reason 4"), got["headers"]


def test_the_state_part_of_a_held_answer_ignores_machineconfigs_and_follows_the_pool_cluster_and_bootstrap():
    """``pool_serving_key``: a rendered config is named by its content's hash, so a new MachineConfig
    is no change of what a member of the pool is served besides its config (the new target reaches
    a node only through its own targeting); the pool object, the cluster's spec and the bootstrap
    files are, and so is another pool's key left alone when one pool changes."""
    import copy

    from agent.server.cluster.serving import pool_serving_key
    from agent.server.store.stateformat import State

    def state():
        return State(pools={"worker": {"metadata": {"name": "worker"}, "spec": {"maxUnavailable": 1}},
                            "infra": {"metadata": {"name": "infra"}, "spec": {}}},
                     machine_configs={"00-worker": {"spec": {"config": {}}}},
                     cluster={"spec": {"nodeDisruptionPolicy": {}}}, bootstrap={"kubeconfig": b"one"},
                     signature="s1")

    base = state()
    key = pool_serving_key(base, "worker")
    new_mc = state()
    new_mc.machine_configs["60-new"] = {"spec": {"config": {"storage": {"files": []}}}}
    new_mc.signature = "s2"
    assert pool_serving_key(new_mc, "worker") == key
    changed_pool, changed_cluster, changed_bootstrap = state(), state(), state()
    changed_pool.pools["worker"] = copy.deepcopy(base.pools["worker"])
    changed_pool.pools["worker"]["spec"]["nodeSelector"] = {"matchLabels": {"x": "y"}}
    changed_cluster.cluster = {"spec": {"nodeDisruptionPolicy": {"files": [{"path": "/etc/x"}]}}}
    changed_bootstrap.bootstrap = {"kubeconfig": b"two"}
    assert len({key, pool_serving_key(changed_pool, "worker"), pool_serving_key(changed_cluster, "worker"),
                pool_serving_key(changed_bootstrap, "worker")}) == 4
    assert pool_serving_key(changed_pool, "infra") == pool_serving_key(base, "infra")
    gone = state()
    del gone.pools["worker"]
    assert pool_serving_key(gone, "worker") != key


def test_held_inputs_are_the_same_config_exactly_when_what_decides_the_body_is_the_same():
    """``HoldInputs.same_config`` compares what the body is made from (``decides``) only: another
    record or row with the same decision is the same config (the answer is not made again); another
    decision is not, and no inputs (a node that left the pool) never are."""
    from agent.server.cluster.serving import HoldInputs

    made = HoldInputs(("key", "rendered-worker-a", "", False, False), {"state": "Done"}, {"target": "a"})
    assert made.same_config(HoldInputs(made.decides, {"state": "Working"}, {"target": "b"}))
    assert not made.same_config(HoldInputs(("key", "rendered-worker-b", "", False, False), made.rec, made.row))
    assert not made.same_config(HoldInputs(("other", "rendered-worker-a", "", False, False), made.rec, made.row))
    assert not made.same_config(None)


def test_a_held_fetch_not_targeted_by_a_new_machineconfig_is_not_made_again_and_answers_it_once_targeted(
        tmp_path, new_app):
    """n1 and n2 Done on A, maxUnavailable 1; n2's fetch is held on A when B (a new MachineConfig)
    comes: the state changes and the pool's target moves to B, n1 (the oldest) is targeted, and
    n2's held answer is compared, not made again (at 1,000 nodes, the thousand answers made again
    kept the targeted nodes waiting: docs/performance.md). Once n1 is Done on B, n2 is targeted and
    its held fetch answers B."""
    app, state, a = two_members_done_on_a(tmp_path, new_app)
    app.max_hold = 600.0  # only n2's targeting ends it
    etag = app._config_answer(app.caller({}), "n2", "worker", None)[1]
    inner, made = app._config_answer, []
    app._config_answer = lambda *args: made.append(1) or inner(*args)
    inputs, looks = app.cluster.hold_inputs, []

    def look(*args):
        seen = inputs(*args)
        looks.append(seen)
        return seen

    app.cluster.hold_inputs = look
    got = {}

    def held():
        got["status"], got["body"] = wsgi(app, "GET", "/config/worker", headers={
            "X-Node-Name": "n2", "If-None-Match": etag}, query="wait=600")

    t = threading.Thread(target=held)
    t.start()
    wait_for(lambda: made, "n2's first answer made")
    (state / "machineconfigs" / "60-held.yaml").write_text(MC)

    def n1_targeted_seen():
        return any(i is not None and i.row.target != a and "n1" in i.row.rollout.get("targets", {})
                   for i in list(looks))

    wait_for(n1_targeted_seen, "n2's held fetch looked at B targeted to n1")
    b = next(i.row.target for i in list(looks) if i is not None and i.row.target != a)
    assert t.is_alive() and len(made) == 1  # still held on A, its answer not made again
    assert "n2" not in app.cluster.store.pools()["worker"].rollout.get("targets", {})
    done_b = {"pool": "worker", "state": "Done", "currentConfig": b, "desiredConfig": b}
    assert wsgi(app, "POST", "/api/v1/nodes/n1/report", json.dumps(done_b).encode())[0] == 200
    t.join(120)
    assert got["status"] == 200, got  # woken by its targeting: the hold ran 600 s otherwise
    assert b"/etc/nmstate/openshift/held.yml" in got["body"]
    assert "n2" in app.cluster.store.pools()["worker"].rollout["targets"]
