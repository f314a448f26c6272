"""A pool's maintenance window holds its rollout (issue 56; agent/server/rollout/windows.py), on the
directory backend, in process: the Cluster's clock is the test's (``Cluster.clock``), never the
wall clock. Outside the window nobody is newly targeted and the pool says when the window opens
and who waits; a node already targeted finishes; once the clock is inside the window the next node
is targeted. As a paused pool (tests/server/test_paused_frozen.py), whose helpers it shares."""

import datetime

import pytest

from agent.server.cli import views
from agent.server.http.app import App
from agent.server.rollout import progress
from agent.server.rollout.windows import ANNOTATION
from tests.helpers.wait import wait_for
from tests.kube.test_identity import call
from tests.server.test_paused_frozen import add_file
from tests.server.test_server_api import IGN, copy_state, edit_yaml

PICKED_UP = 30
NODES = ("w0", "w1", "w2")
LABELS = {"node-role.kubernetes.io/worker": ""}
SATURDAYS = '{"days": ["saturday"], "startTime": "22:00", "endTime": "04:00", "timeZone": "UTC"}'


def utc(text: str) -> float:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.timezone.utc).timestamp()


def annotate(state, value: str) -> None:
    edit_yaml(state / "machineconfigpools" / "worker.yaml", "  name: worker\n",
              f"  name: worker\n  annotations:\n    {ANNOTATION}: '{value}'\n")


@pytest.fixture
def served(tmp_path):
    """(state directory, in-process app, the clock's time as a one-item list the test moves)."""
    state = copy_state(tmp_path)
    edit_yaml(state / "machineconfigpools" / "worker.yaml", 'maxUnavailable: "25%"', "maxUnavailable: 1")
    app = App(str(state), reload_interval=0.0)
    now = [utc("2026-12-05 23:00")]  # a Saturday, inside the window
    app.cluster.clock = lambda: now[0]
    yield state, app, now
    app.close()


def report(app, node, config):
    status, doc = call(app, "POST", f"/api/v1/nodes/{node}/report", body={
        "pool": "worker", "state": "Done", "currentConfig": config, "desiredConfig": config, "labels": LABELS})
    assert status == 200, doc


def pool(app):
    status, doc = call(app, "GET", "/api/v1/pools/worker")
    assert status == 200, doc
    return doc


def target(app):
    return pool(app)["spec"]["configuration"]["name"]


def fetch(app, node):
    """(served config, X-Rollout, X-Rollout-Reason) of node ``node``'s config fetch."""
    got = {}
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/config/worker", "QUERY_STRING": "",
               "HTTP_ACCEPT": IGN + "3.4.0", "HTTP_X_NODE_NAME": node}
    b"".join(app(environ, lambda s, hdrs: got.update(status=int(s.split()[0]), headers=dict(hdrs))))
    assert got["status"] == 200, got
    headers = got["headers"]
    return headers["X-Served-Config"], headers["X-Rollout"], headers.get("X-Rollout-Reason", "")


def new_target(app, state, path, old):
    add_file(state, path)
    return wait_for(lambda: (lambda t: t not in old and t)(target(app)), f"{path} makes a new target", PICKED_UP)


def test_outside_its_window_a_pool_targets_nobody_new_lets_a_targeted_node_finish_and_says_when_it_opens(served):
    state, app, now = served
    annotate(state, SATURDAYS)
    a = target(app)
    for node in NODES:
        report(app, node, a)
    b = new_target(app, state, "/etc/b", (a,))
    wait_for(lambda: pool(app)["status"]["rollout"].get("updating") == ["w0"], "w0 targeted inside the window",
             PICKED_UP)

    now[0] = utc("2026-12-06 04:00")  # Sunday 04:00: the window has just closed
    rollout = wait_for(lambda: (lambda r: (r.get("window") or {}).get("open") is False and r)(
        pool(app)["status"]["rollout"]), "the pool sees its window closed", PICKED_UP)
    assert rollout["window"] == {"schedule": "saturday 22:00-04:00 UTC", "open": False,
                                 "opensAt": "2026-12-12T22:00:00Z"}
    assert rollout["waitReason"] == ("outside the pool's maintenance window (saturday 22:00-04:00 UTC): nothing is "
                                     "newly targeted until it opens at 2026-12-12 22:00 UTC (2026-12-12T22:00:00Z); "
                                     "2 node(s) wait for it: w1, w2")
    assert rollout["updating"] == ["w0"] and "estimate" not in rollout
    assert fetch(app, "w0")[:2] == (b, "updating")  # targeted before it closed: it finishes
    served_w1, turn, why = fetch(app, "w1")
    assert (served_w1, turn) == (a, "waiting") and "outside the pool's maintenance window" in why

    report(app, "w0", b)  # w0 finishes B; the report steps the pool: nobody takes its slot
    after = pool(app)
    assert "updating" not in after["status"]["rollout"] and after["status"]["rollout"]["waiting"] == ["w1", "w2"]
    assert fetch(app, "w1")[:2] == (a, "waiting")
    text = views.describe_pool(after, now[0])
    assert ("Maintenance window:  saturday 22:00-04:00 UTC: closed, opens at 2026-12-12T22:00:00Z (in 162.0 h); "
            "2 node(s) wait for it (w1, w2)") in text, text
    assert "held: outside its maintenance window (saturday 22:00-04:00 UTC) until 2026-12-12T22:00:00Z" in \
        progress.pool_blocking("worker", after)  # node-config-server status: why the update is not complete
    table = views.pools_table([after], now[0], width=None)
    assert "worker: OUTSIDE its maintenance window (saturday 22:00-04:00 UTC): closed, opens at " \
           "2026-12-12T22:00:00Z" in table, table

    now[0] = utc("2026-12-12 22:00")  # the next Saturday's window opens
    wait_for(lambda: pool(app)["status"]["rollout"].get("updating") == ["w1"], "w1 targeted once the window opens",
             PICKED_UP)
    rollout = pool(app)["status"]["rollout"]
    assert rollout["window"] == {"schedule": "saturday 22:00-04:00 UTC", "open": True,
                                 "closesAt": "2026-12-13T04:00:00Z"}
    assert fetch(app, "w1")[:2] == (b, "updating") and fetch(app, "w2")[:2] == (a, "waiting")


def test_an_invalid_window_holds_the_pool_and_the_pool_says_what_is_wrong(served):
    state, app, _ = served
    annotate(state, '{"days": ["caturday"], "startTime": "22:00", "endTime": "04:00"}')
    a = target(app)
    for node in NODES:
        report(app, node, a)
    new_target(app, state, "/etc/b", (a,))
    rollout = wait_for(lambda: (lambda r: r.get("window") and r)(pool(app)["status"]["rollout"]),
                       "the pool reads its window", PICKED_UP)
    assert rollout["window"]["invalid"].startswith(f"annotation {ANNOTATION}: field days: 'caturday' is not a day")
    assert rollout["waitReason"].startswith("the pool's maintenance window is invalid, so nothing is newly targeted "
                                            f"until it is fixed: annotation {ANNOTATION}: field days")
    assert "updating" not in rollout and rollout["waiting"] == list(NODES)
    assert "Maintenance window:  INVALID, nothing is newly targeted until it is fixed: annotation " \
           in views.describe_pool(pool(app), 0.0)
