"""``node-agent status`` after an update that failed and was rolled back (issue 57, item 4): it
shows the config the node runs and that the update failed, not the server's "targeted, updating"
beside the config it did not apply."""

import json

import pytest

from agent.cli import main
from agent.core.nodeconfig import NodeConfig
from agent.host import log
from agent.host.root import Root
from agent.node import nodestate
from agent.node.status import STATE_DIR, RunRecorder

OLD, NEW = "rendered-worker-1", "rendered-worker-2"


@pytest.fixture
def root(tmp_path):
    log.clear_context()
    yield Root(str(tmp_path))
    log.clear_context()


def failed_update(root):
    nodestate.save_current(root, STATE_DIR, NodeConfig(ignition={"ignition": {"version": "3.4.0"}}, name=OLD),
                           None, "https://mcs:22623/config/worker")
    nodestate.save_rollout(root, STATE_DIR, {"state": "updating", "reason": "", "config": NEW,
                                             "since": "2026-11-29T07:00:00Z"})
    rec = RunRecorder(root, "update")
    rec.set(pool="worker", config=NEW)
    rec.finish("failed", 75, error="apply failed and was rolled back: disk full")


def status(capsys, root, *more):
    code = main(["status", "--root", root.top, *more])
    return code, capsys.readouterr().out


def test_status_after_a_rolled_back_update_names_the_running_config_and_the_failure(root, capsys):
    failed_update(root)
    code, out = status(capsys, root)
    assert code == 1
    lines = out.splitlines()
    assert f"config: {NEW} (NOT applied: the update failed; the node runs {OLD})" in lines, out
    assert [line for line in lines if line.startswith("rollout:")] == [
        f"rollout: targeted to {NEW} (since 2026-11-29T07:00:00Z), its update FAILED: the node runs {OLD} "
        f"(the error above says why and what to do)"]
    assert "targeted, updating" not in out
    code, out = status(capsys, root, "--json")
    assert code == 1 and json.loads(out)["runningConfig"] == OLD


def test_status_after_a_done_update_keeps_the_servers_targeted_updating_line(root, capsys):
    failed_update(root)
    log.clear_context()
    RunRecorder(root, "update").finish("done", 0)
    code, out = status(capsys, root)
    assert code == 0 and "rollout: targeted, updating" in out and "NOT applied" not in out
