"""A paused pool is frozen (issue 52), on the directory backend: upstream's
``syncMachineConfigPool`` (openshift/machine-config-operator 7ff337a4, node_controller.go) returns
before it touches any Node while ``spec.paused``. A node targeted to B before the pause keeps B
(it is not moved to the newer C), nobody else is served anything as ``updating``, the pool says it
is paused and who waits; unpaused, the rollout goes on toward the newest rendering."""

from tests.helpers.server_proc import ServerProcess
from tests.server.test_server_api import (  # noqa: F401
    IGN,
    TOKEN,
    copy_state,
    edit_yaml,
    pool_view,
    report,
    settled_view,
    tls,
)

PICKED_UP = 30
NODES = ("w0", "w1", "w2")


def fetch(srv, node):
    got = srv.node_session(node).get(srv.url("/config/worker"), headers={"Accept": IGN + "3.4.0"})
    assert got.status_code == 200, got.text
    return got.headers["X-Served-Config"], got.headers["X-Rollout"], got.headers.get("X-Rollout-Reason", "")


def add_file(state, path):
    edit_yaml(state / "machineconfigs" / "00-worker.yaml", "      files:\n",
              f"      files:\n      - path: {path}\n        contents:\n          source: data:,x\n")


def target(srv):
    return pool_view(srv, "worker")["spec"]["configuration"]["name"]


def test_a_paused_pool_keeps_every_nodes_desired_config_and_goes_on_to_the_newest_once_unpaused(tmp_path, tls):  # noqa: F811
    state = copy_state(tmp_path)
    edit_yaml(state / "machineconfigpools" / "worker.yaml", 'maxUnavailable: "25%"', "maxUnavailable: 1")
    with ServerProcess(str(state), tls=tls, token=TOKEN) as srv:
        a = target(srv)
        for node in NODES:
            report(srv, node, pool="worker", state="Done", currentConfig=a, desiredConfig=a)
        add_file(state, "/etc/b")
        # Each of serve's workers reads the state directory on its own, and each look may reach
        # either: every state below is waited for on every worker (settled_view) before a fetch.
        view = settled_view(srv, "worker", lambda v: v["spec"]["configuration"]["name"] != a and
                            v["status"]["rollout"].get("updating") == ["w0"], "w0 targeted to B", PICKED_UP)
        b = view["spec"]["configuration"]["name"]
        assert fetch(srv, "w0")[:2] == (b, "updating")  # targeted; it has not started (it reports Done on A)

        edit_yaml(state / "machineconfigpools" / "worker.yaml", "maxUnavailable: 1", "maxUnavailable: 1\n  paused: true")
        add_file(state, "/etc/c")
        view = settled_view(srv, "worker", lambda v: v["spec"]["configuration"]["name"] not in (a, b) and
                            "paused" in v["status"]["rollout"].get("waitReason", ""),
                            "C is the paused pool's target, and the pool says it is paused", PICKED_UP)
        c, rollout = view["spec"]["configuration"]["name"], view["status"]["rollout"]
        assert f"nothing is targeted to {c}" in rollout["waitReason"]
        assert "3 node(s) wait for it: w0, w1, w2" in rollout["waitReason"]
        # w0 keeps B (upstream never moves a Node while paused); the others are served what they run
        assert fetch(srv, "w0")[:2] == (b, "updating")
        for node in ("w1", "w2"):
            served, state_, why = fetch(srv, node)
            assert (served, state_) == (a, "waiting") and "paused" in why
        report(srv, "w0", pool="worker", state="Done", currentConfig=b, desiredConfig=b)  # w0 finishes B
        after = pool_view(srv, "worker")["status"]["rollout"]
        assert "updating" not in after and fetch(srv, "w1")[:2] == (a, "waiting")

        edit_yaml(state / "machineconfigpools" / "worker.yaml", "  paused: true\n", "")
        settled_view(srv, "worker", lambda v: v["status"]["rollout"].get("updating") == ["w0"] and
                     not v["spec"].get("paused"), "unpaused: w0 targeted to C", PICKED_UP)
        assert fetch(srv, "w0")[:2] == (c, "updating") and fetch(srv, "w1")[:2] == (a, "waiting")
