"""What a node is served as itself is noted once the answer went out, not before it
(approval.Approval.remember_served through httpio.AnsweredBody, which the WSGI server closes after
its last write): at 1,000 nodes the note (a Secret write) was 64-76 ms of a targeted node's wait
for its turn (docs/performance.md, "Rollout at fleet scale"). A Done that comes before
the note proves the config the server targeted to the node (its entry in the pool's row), and no
other (docs/security.md, "How a name comes to count"). In-process, the directory backend,
a server with tokens."""

import json
import logging
import os
import shutil

from agent.server.http.httpio import AnsweredBody
from tests.campaigns.test_hostile_campaign import request_environ, wsgi
from tests.helpers import paths
from tests.helpers.noderoot import not_layered
from tests.helpers.wait import wait_for
from tests.unit.test_held_fetch_inputs import MC

BOOT, ADMIN = "boot-token-0123456789", "admin-token-0123456789"


def approved_members_done_on_a(tmp_path, new_app):
    """A server with tokens whose worker pool (maxUnavailable 1) has n1 and n2, approved by the
    admin, Done on its config A: (app, state, A, {node: credential})."""
    state = tmp_path / "state"
    shutil.copytree(os.path.join(paths.REPO, "examples", "state"), state)
    not_layered(str(state))
    worker = state / "machineconfigpools" / "worker.yaml"
    worker.write_text(worker.read_text().replace('maxUnavailable: "25%"', "maxUnavailable: 1"))
    app = new_app(str(state), token=BOOT, admin_token=ADMIN, reload_interval=0.0, settle=0.0)
    status, view = wsgi(app, "GET", "/api/v1/pools/worker", headers={"Authorization": f"Bearer {BOOT}"})
    assert status == 200, view
    a = json.loads(view)["spec"]["configuration"]["name"]
    creds = {n: app.cluster.register(n, False, approved=True, by="admin") for n in ("n1", "n2")}
    for n in creds:
        assert report(app, creds, n, "Done", a)[0] == 200
    return app, state, a, creds


def report(app, creds, node, state, config):
    body = {"pool": "worker", "state": state, "currentConfig": config, "desiredConfig": config}
    status, out = wsgi(app, "POST", f"/api/v1/nodes/{node}/report", json.dumps(body).encode(),
                       headers={"Authorization": f"Bearer {creds[node]}", "Content-Type": "application/json"})
    return status, json.loads(out)


def n1_targeted_to_a_new_config(app, state, a):
    """A new MachineConfig renders B; the pool's step targets n1 (the oldest, maxUnavailable 1): B."""
    (state / "machineconfigs" / "60-held.yaml").write_text(MC)

    def b_targeted_to_n1():
        row = app.cluster.store.pools()["worker"]
        entry = (row.rollout.get("targets") or {}).get("n1") or {}
        return row.target if row.target != a and entry.get("config") == row.target else None

    return wait_for(b_targeted_to_n1, "B targeted to n1")


def fetch_not_yet_closed(app, creds, node):
    """n1's config fetch as itself through the WSGI app: (status, headers, the body iterable not
    closed yet: the WSGI server has not finished sending it)."""
    got = {}
    environ = request_environ("GET", "/config/worker",
                              headers={"Authorization": f"Bearer {creds[node]}", "X-Node-Name": node})

    def start_response(status, headers):
        got["status"], got["headers"] = int(status.split()[0]), dict(headers)

    body = app(environ, start_response)
    return got["status"], got["headers"], body


def test_a_targeted_nodes_served_config_is_noted_when_its_answer_is_closed_and_not_before(tmp_path, new_app):
    app, state, a, creds = approved_members_done_on_a(tmp_path, new_app)
    b = n1_targeted_to_a_new_config(app, state, a)
    status, headers, body = fetch_not_yet_closed(app, creds, "n1")
    assert (status, headers["X-Served-Config"]) == (200, b)
    assert b not in app.cluster.store.registration("n1").served  # the answer is not held back for the note
    body.close()
    assert b in app.cluster.store.registration("n1").served


def test_a_done_before_the_note_proves_the_config_the_node_was_targeted_to_and_no_other_node_proves_it(
        tmp_path, new_app):
    app, state, a, creds = approved_members_done_on_a(tmp_path, new_app)
    b = n1_targeted_to_a_new_config(app, state, a)
    status, headers, body = fetch_not_yet_closed(app, creds, "n1")
    assert (status, headers["X-Served-Config"]) == (200, b)
    status, out = report(app, creds, "n2", "Done", b)  # never targeted, never served B
    assert status == 200 and out["proof"] is False, out
    status, out = report(app, creds, "n1", "Done", b)  # its answer not closed yet: no note
    assert b not in app.cluster.store.registration("n1").served
    assert status == 200 and "proof" not in out, out
    body.close()


def test_an_answered_body_runs_its_after_once_when_closed_and_logs_what_it_raises(caplog):
    ran = []
    body = AnsweredBody([b"answer"], lambda: ran.append(1))
    assert b"".join(body) == b"answer" and ran == []
    body.close()
    body.close()
    assert ran == [1]

    def broken():
        raise RuntimeError("the store went away")

    with caplog.at_level(logging.ERROR, logger="agent.server.http.httpio"):
        AnsweredBody([b"answer"], broken).close()  # the answer went out: nothing to raise to
    assert any("the store went away" in (r.exc_text or "") or r.exc_info for r in caplog.records)
