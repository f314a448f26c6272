"""The operator views against ``oc get mcp`` / ``oc describe mcp`` (issue 31): conditions as the
MCO writes them, tables cut to 100 columns, ISO 8601 times, ``get nodes --watch``, plain help,
the client's own words for a token, a no-op delete logged as one, no ``--backend`` that is not
there."""

import argparse
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from agent.server.cli import client as client_mod
from agent.server.cli import viewcmds, views, watch
from agent.server.cluster import nodes as node_list
from agent.server.cluster import poolview
from agent.server.rollout import progress
from tests.helpers.server_proc import REPO

HASH = "c7f50b7fa4545f0bbd8222ee6d0f9201"
TARGET, OLD = f"rendered-worker-{HASH}", "rendered-worker-00000000000000000000000000000000"
NOW = views.parse_time("2026-11-22T10:00:00Z")
LONG_NAME = "worker-" + "n" * 46  # 53 characters
LONG_REASON = "rpm-ostree failed: " + "x" * 380


def ncs(*args):
    return subprocess.run([sys.executable, "-m", "agent.server.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def counts(machine=3, updated=1, degraded=0):
    return progress.Counts(machine=machine, updated=updated, ready=updated, degraded=degraded)


# -- 1. conditions: type, status, reason, message, lastTransitionTime ---------------------------------

HISTORY = [{"field": "target", "config": OLD, "at": 1763805600.0},  # old stores kept epoch floats
           {"field": "current", "config": OLD, "at": 1763805600.0},
           {"field": "target", "config": TARGET, "at": "2026-11-22T09:00:00Z"}]


def test_conditions_carry_reason_message_and_last_transition_time():
    conds = {c["type"]: c for c in poolview.conditions(counts(degraded=1), TARGET, OLD, {"held": ""}, HISTORY)}
    assert set(conds) == {"Updated", "Updating", "NodeDegraded", "RenderDegraded", "Degraded", "RenderHeld"}
    for c in conds.values():
        assert {"type", "status", "reason", "message"} <= set(c), c
    assert conds["Updating"]["status"] == "True" and conds["Updating"]["reason"] == "RolloutInProgress"
    assert conds["Updating"]["message"] == f"All nodes are updating to MachineConfig {TARGET}"
    assert conds["Updated"]["message"] == f"1 of 3 node(s) updated to {TARGET} (current {OLD})"
    # status.go calculateStatus: NodeDegraded's reason is its sentence; Degraded copies its message, reason ""
    assert conds["NodeDegraded"]["reason"] == "1 nodes are reporting degraded status on sync"
    assert conds["Degraded"]["status"] == "True" and conds["Degraded"]["reason"] == "" and \
        conds["Degraded"]["message"] == conds["NodeDegraded"]["message"]
    assert conds["NodeDegraded"]["status"] == "True" and conds["RenderDegraded"]["status"] == "False"
    # Updating since the target changed (09:00), whatever the time now: stable while it stays so.
    assert conds["Updating"]["lastTransitionTime"] == conds["Updated"]["lastTransitionTime"] == "2026-11-22T09:00:00Z"
    again = poolview.conditions(counts(updated=2, degraded=1), TARGET, OLD, {"held": ""}, HISTORY)
    assert [c.get("lastTransitionTime") for c in again] == [c.get("lastTransitionTime") for c in conds.values()]
    # The history does not record when a pool became degraded: no time rather than a wrong one.
    assert "lastTransitionTime" not in conds["Degraded"] and "lastTransitionTime" not in conds["RenderHeld"]


def test_an_invalid_object_makes_the_pool_render_degraded_and_degraded():
    """As the MCO: Degraded = NodeDegraded or RenderDegraded; RenderDegraded's message is
    render_controller.go syncFailingStatus' and names the object, reason "" (both)."""
    problems = ["machineconfigs/99-bad (API): $.spec.config: not an Ignition config", "second"]
    conds = {c["type"]: c for c in poolview.conditions(counts(updated=3), TARGET, TARGET, {"held": ""}, [],
                                                         problems, pool="worker")}
    assert conds["RenderDegraded"]["status"] == "True" and conds["NodeDegraded"]["status"] == "False"
    assert conds["RenderDegraded"]["message"] == (
        "Failed to render configuration for pool worker: machineconfigs/99-bad (API): $.spec.config: not an "
        "Ignition config (and 1 more problem(s): node-config-server status)")
    assert conds["RenderDegraded"]["reason"] == ""
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"], conds["Degraded"]["message"]) == ("True", "", "")


def test_conditions_when_the_rollout_is_done_and_when_held():
    done = HISTORY + [{"field": "current", "config": TARGET, "at": "2026-11-22T09:30:00Z"}]
    conds = {c["type"]: c for c in progress.conditions(counts(updated=3), TARGET, TARGET, "", done)}
    assert conds["Updated"] == {"type": "Updated", "status": "True", "reason": "AllNodesUpdated",
                                "message": f"All nodes are updated with MachineConfig {TARGET}",
                                "lastTransitionTime": "2026-11-22T09:30:00Z"}
    assert conds["Degraded"]["status"] == "False" and conds["Degraded"]["reason"] == ""
    held = progress.conditions(counts(updated=3), TARGET, TARGET, "rolled back by the admin at ... from x to y")
    held_cond = {c["type"]: c for c in held}["RenderHeld"]
    assert held_cond["reason"] == "RolledBack" and held_cond["message"].startswith("rolled back by the admin")
    assert all("lastTransitionTime" not in c for c in held)  # no history: no time made up


def test_describe_pool_shows_every_field_of_a_condition():
    pool = {"metadata": {"name": "worker", "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {"configuration": {"name": TARGET}},
            "status": {"configuration": {"name": OLD}, "machineCount": 3, "degradedMachineCount": 1,
                       "conditions": progress.conditions(counts(degraded=1), TARGET, OLD, "", HISTORY),
                       "history": HISTORY}}
    text = views.describe_pool(pool, NOW)
    head = next(line for line in text.splitlines() if "TYPE" in line)
    assert head.split() == ["TYPE", "STATUS", "LAST", "TRANSITION", "REASON", "MESSAGE"]
    row = next(line for line in text.splitlines() if line.strip().startswith("Degraded"))
    assert "True" in row and "their reasons: status.nodes" in row
    row = next(line for line in text.splitlines() if line.strip().startswith("Updating"))
    assert "2026-11-22T09:00:00Z" in row and "RolloutInProgress" in row
    assert "2025-11-22T10:00:00Z" in text  # the history's old epoch float, shown as ISO 8601


# -- 2. cells cut to fit; whole values elsewhere --------------------------------------------------------

def node(name, reason="", state="Degraded"):
    item = {"name": name, "pool": "worker", "updated": False, "reportedAt": "2026-11-22T09:59:00Z",
            "report": {"state": state, "currentConfig": TARGET, "skew": "ok"}}
    if reason:
        item["degradedReason"] = reason
    return item


def test_get_nodes_fits_100_columns_with_a_long_name_and_reason_leaving_out_skew_and_reported():
    text = views.nodes_table([node(LONG_NAME, LONG_REASON), node("w1", state="Done")], NOW)
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "POOL", "STATE", "UPDATED", "ROLLOUT", "CONFIG", "REASON"]  # SKEW, REPORTED left out
    assert max(map(len, lines)) <= 100, text
    assert "…" in lines[1] and lines[1].split()[0].startswith("worker-nnn") and "rpm-ostree failed" in lines[1]
    assert lines[2].split()[:3] == ["w1", "worker", "Done"]
    wide = views.nodes_table([node(LONG_NAME, LONG_REASON)], NOW, wide=True)
    assert LONG_NAME in wide and LONG_REASON in wide and TARGET in wide
    described = views.describe_node(node(LONG_NAME, LONG_REASON), None, NOW)
    assert LONG_NAME in described and LONG_REASON in described


def test_a_long_pool_name_is_cut_too():
    pool = {"metadata": {"name": "p" * 120, "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {"configuration": {"name": TARGET}},
            "status": {"configuration": {"name": TARGET}, "conditions": progress.conditions(counts(), TARGET, OLD, "")}}
    text = views.pools_table([pool], NOW)
    assert max(map(len, text.splitlines())) <= 100 and "…" in text
    assert "p" * 120 in views.pools_table([pool], NOW, wide=True)


# -- 4. ISO 8601 times, old floats still read ---------------------------------------------------------

@pytest.mark.parametrize("value", [1763805600.0, 1763805600, "2025-11-22T10:00:00Z", "2025-11-22T10:00:00+00:00"])
def test_times_are_iso_8601_from_floats_or_strings(value):
    assert progress.iso8601(value) == node_list.rfc3339(value) == "2025-11-22T10:00:00Z"
    assert views._when(value) == "2025-11-22T10:00:00Z"


def test_no_time_is_no_time():
    assert node_list.rfc3339(None) == "" and progress.iso8601("not a time") == "" and progress.iso8601(True) == ""


# -- 5. get nodes --watch --------------------------------------------------------------------------------

def test_watch_nodes_without_a_terminal_prints_a_line_when_a_node_changes():
    rounds = [[node("w1", state="Working")], [node("w1", state="Working")], [node("w1", "disk full")]]
    out = io.StringIO()
    assert watch.watch_nodes(lambda: rounds.pop(0), 0.01, sleep=lambda _s: None, out=out, rounds=2) == 0
    lines = out.getvalue().splitlines()
    # READY is the Node object's (--backend kubernetes): these nodes have none
    assert len(lines) == 3 and lines[0].split() == [c for c in views.NODE_COLUMNS if c != "READY"]
    assert lines[1].split()[2] == "Working" and lines[2].endswith("disk full")


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_watch_nodes_on_a_terminal_refreshes_the_table():
    fetched = []

    def fetch():
        fetched.append(1)
        return [node(f"w{len(fetched)}", state="Done")]

    out = Tty()
    assert watch.watch_nodes(fetch, 0.01, sleep=lambda _s: None, out=out, rounds=2) == 0
    text = out.getvalue()
    assert len(fetched) == 3 and "NAME" in text and "REASON" in text and "w3" in text


def test_get_nodes_watch_is_not_refused(monkeypatch):
    class FakeClient:
        def get(self, path):
            assert path.startswith("/api/v1/nodes")
            return {"items": [node("w1", state="Done")], "metadata": {}}

    seen = {}

    def bounded(fetch, interval):
        seen["items"] = fetch()
        return watch.watch(fetch, interval, watch.NODES, sleep=lambda _s: None, out=io.StringIO(), rounds=1)

    monkeypatch.setattr(viewcmds.Client, "from_args", classmethod(lambda cls, args: FakeClient()))
    monkeypatch.setattr(watch, "watch_nodes", bounded)
    args = argparse.Namespace(kind="nodes", name=None, watch=True, interval=0.01, output="table")
    assert viewcmds.cmd_get(args) == 0 and seen["items"][0]["name"] == "w1"


# -- 6. plain help ------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["get", "describe", "delete"])
def test_help_is_plain_text(command):
    r = ncs(command, "--help")
    assert r.returncode == 0 and "Exit codes:" in r.stdout
    assert "``" not in r.stdout, r.stdout


# -- 7. the client's own option; a no-op delete logged as one --------------------------------------------

def test_a_403_names_the_clients_option_not_the_servers():
    message = client_mod.for_client("deleting node w1 needs the admin token (--admin-token-file); the bootstrap "
                                     "token is not enough")
    assert "--admin-token-file" not in message
    assert "pass --token-file FILE holding the admin token" in message
    plain = client_mod.for_client("this API needs a credential (Authorization: Bearer <token>)")
    assert plain.endswith("(pass --token-file FILE, or tokenFile: in the client config)")
    none = "deleting node w1 needs the admin token, and this server has none: start it with --admin-token-file FILE"
    assert client_mod.for_client(none) == none  # that one is about how the server was started


def test_delete_node_exit_77_names_token_file(tmp_path):
    from tests.helpers.httpserver import Reply, ScriptedServer

    body = {"error": {"code": 403, "message": "deleting node w1 needs the admin token (--admin-token-file); "
                                              "the bootstrap token is not enough"}}
    with ScriptedServer() as srv:
        srv.always("/api/v1/nodes/w1", Reply(403, body=json.dumps(body), headers={"Content-Type": "application/json"}))
        r = ncs("delete", "node", "w1", "--server", srv.url("").rstrip("/"))
    assert r.returncode == 77, r.stderr
    assert "--admin-token-file" not in r.stderr and "--token-file FILE holding the admin token" in r.stderr


def test_a_delete_with_nothing_to_delete_is_not_logged_as_a_deletion(tmp_path, caplog, new_app):
    from tests.kube.test_identity import ADMIN, BOOT, EXAMPLE, call

    state = tmp_path / "state"
    shutil.copytree(EXAMPLE, state)
    app = new_app(str(state), token=BOOT, admin_token=ADMIN, reload_interval=0.0)
    with caplog.at_level(logging.INFO, logger="agent.server.http.noderoutes"):
        status, doc = call(app, "DELETE", "/api/v1/nodes/never-seen", ADMIN)
    assert status == 200 and doc["deleted"] is False
    logged = [r.getMessage() for r in caplog.records if "never-seen" in r.getMessage()]
    assert logged and all("deleted by" not in m for m in logged) and "nothing to delete" in logged[0]


# -- 8. --backend offers what there is, and refuses what does not go together ------------------------------

def test_serve_backend_choices_and_their_usage_errors(tmp_path):
    r = ncs("serve", "--help")
    assert r.returncode == 0 and "{dir,kubernetes}" in r.stdout and "--kubeconfig" in r.stdout
    r = ncs("serve", "--backend", "kubernetes", "--state", os.path.join(REPO, "examples", "state"))
    assert r.returncode == 2 and "--state and --backend kubernetes" in r.stderr
    r = ncs("serve", "--state", os.path.join(REPO, "examples", "state"), "--kubeconfig", str(tmp_path / "kc"))
    assert r.returncode == 2 and "--kubeconfig goes with --backend kubernetes" in r.stderr
    r = ncs("serve", "--backend", "kubernetes", "--kubeconfig", str(tmp_path / "missing"))
    assert r.returncode == 2 and "no such file" in r.stderr
    for line in (r.stderr.strip().splitlines()):
        assert line.startswith("node-config-server: ")


# -- 9. pool conditions' times, the pool's age, ISO 8601 times in the API ---------------------------------

ISO = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"


@pytest.fixture
def example_app(tmp_path, new_app):
    from tests.kube.test_identity import ADMIN, BOOT, EXAMPLE

    state = tmp_path / "state"
    shutil.copytree(EXAMPLE, state)
    os.utime(state / "machineconfigpools" / "worker.yaml", (1700000000, 1700000000))
    infra = state / "machineconfigpools" / "infra.yaml"
    text = infra.read_text()
    assert "\nmetadata:\n" in text
    infra.write_text(text.replace("\nmetadata:\n", "\nmetadata:\n  creationTimestamp: \"2026-01-02T03:04:05Z\"\n", 1))
    made = time.time()
    app = new_app(str(state), token=BOOT, admin_token=ADMIN, reload_interval=0.0)  # records each pool's first target
    app.made_at = made  # for a test of "the store's first record: just now"
    return app, state


def test_get_pool_gives_updated_and_updating_a_stable_last_transition_time(example_app):
    from tests.kube.test_identity import ADMIN, call

    app, _ = example_app
    status, first = call(app, "GET", "/api/v1/pools/worker", ADMIN)
    assert status == 200, first
    history = first["status"]["history"]
    assert history and all(re.match(ISO, h["at"]) for h in history)
    conds = {c["type"]: c for c in first["status"]["conditions"]}
    for kind in ("Updated", "Updating"):
        assert re.match(ISO, conds[kind]["lastTransitionTime"]), conds[kind]
    assert conds["Updated"]["lastTransitionTime"] in [h["at"] for h in history]
    for kind in ("NodeDegraded", "RenderDegraded", "Degraded", "RenderHeld"):  # recorded by the pool's step (issue 49)
        assert re.match(ISO, conds[kind]["lastTransitionTime"]), conds[kind]
    time.sleep(1.1)
    _, again = call(app, "GET", "/api/v1/pools/worker", ADMIN)
    assert again["status"]["conditions"] == first["status"]["conditions"]
    out = views.describe_pool(again, NOW)
    assert conds["Updated"]["lastTransitionTime"] in out


def test_a_pool_condition_keeps_its_time_while_its_status_stays_and_takes_a_new_one_when_it_changes(example_app):
    """Issue 49: ``describe pool`` showed ``LAST TRANSITION -`` for every condition but Updated and
    Updating. The pool's step records when each condition took its status (poolview.condition_times)."""
    from agent.server.cluster.service import validate_report

    app, _ = example_app
    before = {c["type"]: c for c in app.cluster.pool_views(only="worker")["worker"]["status"]["conditions"]}
    time.sleep(1.1)
    target = app.cluster.store.pools()["worker"].target
    app.cluster.record_report("w-degraded", validate_report({
        "pool": "worker", "labels": {"node-role.kubernetes.io/worker": ""}, "state": "Degraded",
        "reason": "disk full", "currentConfig": target, "desiredConfig": target}))
    assert app.cluster.pools_stepped()  # the step the report woke records the times (poolqueue.py)
    after = {c["type"]: c for c in app.cluster.pool_views(only="worker")["worker"]["status"]["conditions"]}
    for kind in ("NodeDegraded", "Degraded"):  # False -> True: a new time
        assert (before[kind]["status"], after[kind]["status"]) == ("False", "True")
        assert after[kind]["lastTransitionTime"] > before[kind]["lastTransitionTime"], (before[kind], after[kind])
    for kind in ("RenderDegraded", "RenderHeld"):  # unchanged: the same time
        assert after[kind]["lastTransitionTime"] == before[kind]["lastTransitionTime"]
    text = views.describe_pool(app.cluster.pool_views(only="worker")["worker"], NOW)
    conditions = text.split("Conditions:\n", 1)[1].split("Nodes:", 1)[0].splitlines()[1:]
    assert conditions and all(re.match(r"^\s+\w+\s+(True|False)\s+\d{4}-", line) for line in conditions), text


def test_condition_times_keep_a_status_time_and_write_nothing_when_nothing_changed():
    conds = [{"type": "Degraded", "status": "False"}, {"type": "RenderHeld", "status": "False"}]
    rollout = poolview.condition_times({"targets": {}}, conds, 1800000000.0)
    assert rollout[poolview.TIMES] == {"Degraded": ["False", "2027-01-15T08:00:00Z"],
                                       "RenderHeld": ["False", "2027-01-15T08:00:00Z"]}
    assert poolview.condition_times(rollout, conds, 1800000100.0) is rollout  # no change: the row is not written
    flipped = poolview.condition_times(rollout, [dict(conds[0], status="True"), conds[1]], 1800000100.0)
    assert flipped[poolview.TIMES] == {"Degraded": ["True", "2027-01-15T08:01:40Z"],
                                       "RenderHeld": ["False", "2027-01-15T08:00:00Z"]}


def test_pool_age_is_the_objects_creation_time_else_the_stores_first_record_never_the_files_mtime(example_app):
    from tests.kube.test_identity import ADMIN, call

    app, state = example_app
    # The App recorded the pools' first targets as it was made (in the fixture): a time taken
    # here, later, may be in the next second (creationTimestamp has whole seconds).
    before = app.made_at
    _, listed = call(app, "GET", "/api/v1/pools", ADMIN)
    created = {p["metadata"]["name"]: p["metadata"].get("creationTimestamp") for p in listed["items"]}
    assert created["worker"] != "2023-11-14T22:13:20Z"  # the file's mtime (a clone's age) is no pool's age
    assert views.parse_time(created["worker"]) >= int(before)  # the store's first record: just now
    assert created["infra"] == "2026-01-02T03:04:05Z"  # the object's own
    assert call(app, "GET", "/api/v1/pools/worker", ADMIN)[1]["metadata"]["creationTimestamp"] == created["worker"]
    (state.parent / "data").mkdir()
    r = ncs("status", "--state", str(state), "--data-dir", str(state.parent / "data"), "--json")
    assert r.returncode in (0, 3), r.stderr
    items = {p["metadata"]["name"]: p["metadata"].get("creationTimestamp") for p in json.loads(r.stdout)["items"]}
    assert items["infra"] == created["infra"]  # a fresh data directory: worker's first record is its own
    assert views.parse_time(items["worker"]) >= int(before)


def test_pool_metadata_without_a_file_falls_back_to_the_stores_first_record():
    meta = poolview.metadata({"metadata": {"name": "w"}}, [{"field": "target", "at": 1700000000.0}])
    assert meta["creationTimestamp"] == "2023-11-14T22:13:20Z"
    assert "creationTimestamp" not in poolview.metadata({"metadata": {"name": "w"}}, [])


def test_api_times_are_iso_8601(example_app):
    from tests.kube.test_identity import ADMIN, call, register, report

    app, _ = example_app
    cred = register(app, "w1")
    status, reg = call(app, "GET", "/api/v1/nodes/w1/registration", cred)
    assert status == 200, reg
    assert re.match(ISO, reg["registered"]) and re.match(ISO, reg["approved"]), reg
    _, regs = call(app, "GET", "/api/v1/nodes", ADMIN, query="approval=all")
    assert all(re.match(ISO, r["registered"]) for r in regs["items"])
    target = call(app, "GET", "/api/v1/pools/worker", ADMIN)[1]["spec"]["configuration"]["name"]
    assert report(app, "w1", cred, currentConfig=target, desiredConfig=target)[0] == 200
    body = {"pool": "worker", "config": target}
    assert call(app, "POST", "/api/v1/nodes/w1/drain", cred, body)[0] == 200
    assert call(app, "DELETE", "/api/v1/nodes/w1/drain", cred, body)[0] == 200
    _, node = call(app, "GET", "/api/v1/nodes/w1", ADMIN)
    assert node["drainEvents"] and all(re.match(ISO, e["at"]) for e in node["drainEvents"]), node
    described = views.describe_node(node, None, NOW)
    assert all(f"{e['at']}  {e['action']}" in described for e in node["drainEvents"]), described
    _, cluster = call(app, "GET", "/api/v1/cluster", ADMIN)
    assert cluster["replicas"] and all(re.match(ISO, r["at"]) for r in cluster["replicas"])


@pytest.mark.parametrize("at", [1763805600.0, "2025-11-22T10:00:00Z"])
def test_views_show_old_epoch_and_new_iso_times_alike(at):
    pool = {"metadata": {"name": "worker", "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {"configuration": {"name": TARGET}},
            "status": {"configuration": {"name": TARGET}, "history": [{"field": "target", "config": TARGET, "at": at}]}}
    assert "2025-11-22T10:00:00Z" in views.describe_pool(pool, NOW)
    node = {"node": "w1", "name": "w1", "report": {}, "pool": "worker", "drainEvents": [
        {"action": "granted", "at": at}]}
    assert "2025-11-22T10:00:00Z" in views.describe_node(node, None, NOW)


def test_pool_age_is_the_stores_first_record_not_a_later_change():
    """A later target (an edit of the pool's MachineConfigs) leaves the pool's age as it was."""
    history = [{"field": "target", "at": "2023-11-14T22:13:20Z"}, {"field": "target", "at": "2026-01-01T00:00:00Z"}]
    meta = poolview.metadata({"metadata": {"name": "w"}}, history)
    assert meta["creationTimestamp"] == "2023-11-14T22:13:20Z"
