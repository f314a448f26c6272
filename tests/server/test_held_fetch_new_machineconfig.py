"""A member's held fetch across a new MachineConfig (issue 53), end to end: ``serve`` (gunicorn, two
gevent workers, the directory backend), n1 and n2 Done on A, the worker pool's maxUnavailable 1.

n2 holds its fetch on A (``?wait=25``, ``If-None-Match``, as node-agent asks) when B comes: the
state changes, the pool's target moves to B and n1 (the oldest) is targeted. What n2 is served
does not change, so its fetch keeps holding (a 304 when a hold runs out, never a 200 while it is
not targeted); once n1 is Done on B, n2 is targeted and its held fetch answers B. How soon, at
1,000 nodes, is benchmarks/bench_rollout.py's to measure (docs/performance.md).
"""

import os
import shutil
import threading

from tests.helpers import paths
from tests.helpers.noderoot import not_layered
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

HELD_FILE = "/etc/nmstate/openshift/held.yml"  # the default policy: None (no drain, no reboot)
MC = ("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 60-held\n"
      "  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n  config:\n    ignition: {version: 3.4.0}\n"
      f"    storage:\n      files:\n      - {{path: {HELD_FILE}, mode: 420, contents: {{source: 'data:,x'}}}}\n")


def view(srv):
    r = srv.session().get(srv.url("/api/v1/pools/worker"))
    assert r.status_code == 200, r.text
    return r.json()


def report_done(srv, node, config):
    r = srv.session().post(srv.url(f"/api/v1/nodes/{node}/report"), json={
        "pool": "worker", "state": "Done", "currentConfig": config, "desiredConfig": config})
    assert r.status_code == 200, r.text


def test_a_held_fetch_keeps_holding_across_a_new_machineconfig_until_its_node_is_targeted_then_answers_it(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(paths.REPO, "examples", "state"), state)
    not_layered(str(state))
    worker = state / "machineconfigpools" / "worker.yaml"
    worker.write_text(worker.read_text().replace('maxUnavailable: "25%"', "maxUnavailable: 1"))
    with ServerProcess(str(state)) as srv:
        a = view(srv)["spec"]["configuration"]["name"]
        for node in ("n1", "n2"):
            report_done(srv, node, a)
        first = srv.session().get(srv.url("/config/worker"), headers={"X-Node-Name": "n2"})
        assert first.status_code == 200 and first.headers["X-Rollout"] == "done", first.headers
        etag, answers, holding = first.headers["ETag"], [], threading.Event()

        def held():  # as node-agent: held fetches with A's ETag until one answers
            session = srv.session()
            while True:
                holding.set()
                r = session.get(srv.url("/config/worker"), params={"wait": "25"}, timeout=120,
                                headers={"X-Node-Name": "n2", "If-None-Match": etag})
                answers.append((r.status_code, r.content))
                if r.status_code != 304:
                    return

        t = threading.Thread(target=held, daemon=True)
        t.start()
        holding.wait(30)
        (state / "machineconfigs" / "60-held.yaml").write_text(MC)
        srv.wait_state_read()
        wait_for(lambda: view(srv)["spec"]["configuration"]["name"] != a
                 and view(srv)["status"]["rollout"].get("updating", []) == ["n1"], "B targeted to n1", timeout=120)
        b = view(srv)["spec"]["configuration"]["name"]
        assert all(status == 304 for status, _ in answers), answers  # n2 is served A still: it holds
        report_done(srv, "n1", b)
        wait_for(lambda: "n2" in view(srv)["status"]["rollout"].get("updating", []), "n2 targeted", timeout=120)
        t.join(120)
        assert not t.is_alive(), "n2's held fetch did not answer once n2 was targeted"
        status, body = answers[-1]
        assert status == 200 and HELD_FILE.encode() in body, (status, body[:200])
        assert all(s == 304 for s, _ in answers[:-1]), answers  # a 200 only once n2 was targeted
