"""The server's words for a node that reverted an update after a failed health check (issue 56):
a Warning Event on the pool, NodeReverted (NodeRevertFailed when it could not), naming the node,
the check and the config it reverted to, once per new reason; the MachineConfigNode's
NodeDegraded says the same, in upstream's "Node X upgrade failure. <reason>"."""

import shutil

import pytest

from agent.server.cluster.service import Cluster, validate_report
from agent.server.rollout import mcnconditions, nodestatus
from tests.helpers import paths

WORKER = {"pool": "worker", "labels": {"node-role.kubernetes.io/worker": ""}}
REASON = ("reverted to rendered-worker-a after a failed health check of rendered-worker-b: unit vm-probe.service: "
          "failed (restarted by the update; see 'journalctl -u vm-probe.service')")


@pytest.fixture
def cluster(tmp_path):
    shutil.copytree(paths.REPO + "/examples/state", tmp_path / "state")
    made = Cluster(str(tmp_path / "state"), db_path=str(tmp_path / "nodes.db"))
    events = []
    made.pool_listeners.append(lambda pool, kind, reason, message: events.append((pool, kind, reason, message)))
    yield made, events
    made.db.close()


def test_a_reverted_node_is_a_warning_event_on_its_pool_once(cluster):
    made, events = cluster
    target = made.store.pools()["worker"].target
    body = dict(WORKER, state="Degraded", currentConfig=target, desiredConfig="rendered-worker-b", reason=REASON)
    made.record_report("w1", validate_report(body))
    made.record_report("w1", validate_report(body))  # the same reason again: no second Event
    assert [e for e in events if e[1] == "Warning"] == [("worker", "Warning", "NodeReverted", f"Node w1 {REASON}")]


def test_a_node_that_could_not_revert_is_NodeRevertFailed():
    reason = "could not revert to A (applying A failed: disk full); it keeps B after a failed health check of B: x"
    assert nodestatus.revert_event("w1", None, {"state": "Degraded", "reason": reason}) == (
        "Warning", "NodeRevertFailed", f"Node w1 {reason}")
    assert nodestatus.revert_event("w1", None, {"state": "Degraded", "reason": "applying failed: disk full"}) is None
    assert nodestatus.revert_event("w1", None, {"state": "Done", "reason": REASON}) is None


def test_the_machineconfignode_says_which_check_failed_and_that_the_node_reverted():
    report = {"pool": "worker", "state": "Degraded", "currentConfig": "rendered-worker-a",
              "desiredConfig": "rendered-worker-b", "reason": REASON}
    conds = mcnconditions.node_conditions(None, mcnconditions.Facts(node="w1", desired="rendered-worker-b",
                                                                     report=report), "2026-11-29T14:00:00Z")
    degraded = next(c for c in conds if c["type"] == "NodeDegraded")
    assert (degraded["status"], degraded["message"]) == ("True", f"Node w1 upgrade failure. {REASON}")
