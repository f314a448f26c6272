"""The node's turn in its pool's rollout (agent/node/turn.py): what the server says of it is kept
and logged once per change; a node served the config it runs after it was on its way elsewhere
reports Done on it, never over a pending reboot, drift or a Degraded report about that config."""

import logging

import pytest

from agent.host.root import Root
from agent.node import nodestate, turn
from agent.server.cluster.reports import validate_report

STATE = "/var/lib/node-agent"


class Reporter:
    def __init__(self, root):
        self.root, self.state_dir, self.sent = root, STATE, []

    def send(self, body):
        validate_report(body)  # what the server takes: a body it answers 400 fails the test here
        self.sent.append(body)
        turn.remember(self.root, self.state_dir, body)
        return True


@pytest.fixture
def root(tmp_path):
    return Root(str(tmp_path))


def test_with_wait_adds_the_long_poll_to_the_url():
    assert turn.with_wait("https://s:22623/config/worker", 25.0) == "https://s:22623/config/worker?wait=25"
    assert turn.with_wait("https://s/config/w?x=1", 2.5) == "https://s/config/w?x=1&wait=2.5"


def test_what_the_server_says_is_kept_and_logged_once_per_change(root, caplog):
    caplog.set_level(logging.INFO, logger="agent.node.turn")
    headers = {"X-Rollout": "waiting", "X-Rollout-Reason": "maxUnavailable 1 is taken by w0",
               "X-Served-Config": "rendered-a"}
    seen = turn.follow(root, STATE, headers, None, now=0.0)
    assert seen["state"] == "waiting" and nodestate.load_rollout(root, STATE)["reason"].endswith("w0")
    assert turn.follow(root, STATE, headers, seen, now=5.0) is seen  # unchanged: kept, not logged again
    assert [r.message for r in caplog.records if r.name == "agent.node.turn"] == [
        "waiting for its turn: maxUnavailable 1 is taken by w0 (the node keeps rendered-a)"]
    assert turn.not_its_turn(seen) and not turn.not_its_turn({"state": "updating"})
    assert turn.follow(root, STATE, {}, seen) is seen  # an older server says nothing: what was known stays
    assert turn.held({"x-rollout-hold": "25"}) and not turn.held({})


@pytest.mark.parametrize("last,pending,drifted,sent", [
    ({"state": "Degraded", "currentConfig": "a", "desiredConfig": "b"}, False, False, True),  # failed on b: reverted
    ({"state": "Working", "currentConfig": "a", "desiredConfig": "b"}, False, False, True),  # retargeted before b
    ({"state": "Done", "currentConfig": "a", "desiredConfig": "a"}, False, False, False),  # nothing to say
    ({"state": "Degraded", "currentConfig": "a", "desiredConfig": "a"}, False, False, False),  # about a itself
    ({"state": "Degraded", "currentConfig": "a", "desiredConfig": "b"}, True, False, False),  # a reboot pending
    ({"state": "Degraded", "currentConfig": "a", "desiredConfig": "b"}, False, True, False),  # drift stands
    (None, False, False, False),  # nothing ever reported from here
])
def test_a_node_served_what_it_runs_reports_done_only_after_it_was_on_its_way_elsewhere(root, last, pending,
                                                                                        drifted, sent):
    reporter = Reporter(root)
    if last is not None:
        turn.remember(root, STATE, last)
    if pending:
        nodestate.write_json(root.path(f"{STATE}/{nodestate.REBOOT_PENDING}"), {"config": "a", "bootId": "x"})
    assert turn.confirm_done(reporter, "worker", "a", drifted) is sent
    assert reporter.sent == ([{"pool": "worker", "state": "Done", "currentConfig": "a", "desiredConfig": "a"}]
                             if sent else [])


class Answer:
    def __init__(self, status, body):
        self.status_code, self._body = status, body

    def json(self):
        if isinstance(self._body, str):
            raise ValueError("not JSON")
        return self._body


def test_a_drain_answer_saying_deferred_or_retargeted_is_no_failure():
    assert turn.deferral(Answer(409, {"status": "deferred", "reason": "PDB app held it"})) == "PDB app held it"
    assert turn.deferral(Answer(409, {"status": "retargeted", "reason": "now rendered-a"})) == "now rendered-a"
    assert turn.deferral(Answer(409, {"error": {"message": "belongs to pool infra"}})) is None
    assert turn.deferral(Answer(429, {"status": "deferred"})) is None
    assert turn.deferral(Answer(409, "<html>")) is None
    assert turn.UpdateDeferred("x").exit_code == 75  # NotReady: try again later
