"""A report the server refuses for its body (413: larger than the server takes; 400) is kept as
refused and held back; the node's next, different report is sent (issue 39), and the same one
again after REFUSED_BODY_RETRY: a node whose state stands (its next report is the same body) is
never silenced for good by one refusal (the VM run's reverted node, stuck Degraded)."""

import json

from agent.host.root import Root
from agent.node import turn
from agent.node.report import REFUSED_BODY_RETRY, Reporter
from agent.server.cluster.reports import validate_report
from tests.unit.test_drain_lease_client import Answer, Session

TOO_LARGE = {"error": {"code": 413, "message": "a report may have at most 65536 bytes (64 KiB); this one has 3 MiB"}}
# What the VM run's server answered the reverted node's Done report (141 bytes, the server's log).
BROKE = {"error": {"code": 400, "field": "$",
                   "message": "the request body could not be read: BrokenPipeError: [Errno 32] Broken pipe"}}
STATE = "/var/lib/node-agent"


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def reporter(tmp_path, answers, clock=None):
    rep = Reporter("https://127.0.0.1:22623", "n1", Root(str(tmp_path)), STATE, clock=clock or Clock())
    rep.session = Session(answers)
    return rep


def test_a_413_marks_the_report_refused_and_the_same_report_is_not_sent_again(tmp_path):
    rep = reporter(tmp_path, [Answer(413, body=TOO_LARGE)])
    report = {"pool": "worker", "state": "Degraded", "reason": "x"}
    assert rep.send(report) is False
    assert rep.refused["status"] == 413 and "at most 65536 bytes" in rep.refused["message"]
    assert rep.kept()["refused"]["status"] == 413
    assert rep.send(report) is False and rep.flush() is False  # neither asks the server again
    assert rep.session.posts == 1


def test_after_a_413_the_next_different_report_is_sent(tmp_path):
    rep = reporter(tmp_path, [Answer(413, body=TOO_LARGE), Answer(200)])
    assert rep.send({"pool": "worker", "state": "Degraded", "reason": "x"}) is False
    assert rep.send({"pool": "worker", "state": "Done"}) is True
    assert rep.session.posts == 2 and rep.refused is None and rep.kept() is None


def test_a_403_still_stops_every_report_until_the_identity_changes(tmp_path):
    rep = reporter(tmp_path, [Answer(403, body={"error": {"message": "not this node"}})])
    assert rep.send({"pool": "worker", "state": "Degraded"}) is False
    assert rep.send({"pool": "worker", "state": "Done"}) is False
    assert rep.session.posts == 1
    # the same kept refusal, read by a node with another name (the identity changed): asked again
    renamed = Reporter("https://127.0.0.1:22623", "n2", Root(str(tmp_path)), "/var/lib/node-agent")
    renamed.session = Session([Answer(200)])
    assert renamed.kept()["refused"]["status"] == 403
    assert renamed.send({"pool": "worker", "state": "Done"}) is True and renamed.session.posts == 1


def test_a_report_refused_for_its_body_is_sent_again_after_the_retry_time_not_before(tmp_path):
    clock = Clock()
    rep = reporter(tmp_path, [Answer(400, body=BROKE), Answer(200)], clock)
    report = {"pool": "worker", "state": "Done", "currentConfig": "rendered-worker-a"}
    assert rep.send(report) is False and rep.kept()["refused"]["retryAt"] == clock.now + REFUSED_BODY_RETRY
    clock.now += REFUSED_BODY_RETRY - 1
    assert rep.send(report) is False and rep.flush() is False and rep.session.posts == 1
    clock.now += 1
    assert rep.flush() is True  # the kept report, sent again
    assert rep.session.posts == 2 and rep.refused is None and rep.kept() is None


def test_a_body_refusal_whose_retry_time_is_further_off_than_it_can_be_is_tried_again(tmp_path):
    """The clock went back (or the record was edited): the wait stays bounded by REFUSED_BODY_RETRY."""
    clock = Clock()
    rep = reporter(tmp_path, [Answer(413, body=TOO_LARGE), Answer(200)], clock)
    report = {"pool": "worker", "state": "Degraded", "reason": "x"}
    assert rep.send(report) is False
    clock.now -= 3600
    assert rep.send(report) is True and rep.session.posts == 2


def test_a_body_refusal_kept_by_an_older_agent_without_a_retry_time_is_tried_again(tmp_path):
    rep = reporter(tmp_path, [Answer(200)])
    report = {"pool": "worker", "state": "Done"}
    rep._keep(report, {"status": 400, "message": "x", "server": rep.base_url, "node": "n1",
                       "fingerprint": rep._fingerprint(report)})
    assert rep.send(report) is True and rep.session.posts == 1


class Server(Session):
    """The server's own validation of every report body (agent/server/cluster/reports.py), then
    the scripted answers (200 when none is left)."""

    def __init__(self, answers):
        super().__init__(answers)
        self.taken = []

    def post(self, url, data=None, **_kw):
        validate_report(json.loads(data))  # a body the server refuses for its fields fails the test here
        if not self.answers:
            self.answers.append(Answer(200))
        answer = super().post()
        if answer.status_code == 200:
            self.taken.append(json.loads(data))
        return answer


def test_a_reverted_node_whose_done_report_was_answered_400_reports_done_again_and_is_not_stuck(tmp_path):
    """The VM run: the node reverted B (its last report Degraded on its way to B), the admin took
    B back, the node was served A, the config it runs, and confirm_done's Done report was answered
    400 (a connection broken while the server read it). Every later pass builds the same Done
    report: held back until REFUSED_BODY_RETRY, then sent, and the node is Done on A."""
    a, b = "rendered-vm-b54118d5058fc55f4db8816a92db8474", "rendered-vm-632f61c070cb8c782790750d2f458ab0"
    clock = Clock()
    server = Server([Answer(200), Answer(400, body=BROKE)])
    rep = reporter(tmp_path, [], clock)
    rep.session = server
    reason = f"reverted to {a} after a failed health check of {b}: unit vm-probe.service: failed"
    assert rep.send({"pool": "vm", "state": "Degraded", "currentConfig": a, "desiredConfig": b, "reason": reason})
    assert turn.confirm_done(rep, "vm", a, drifted=False) is False  # answered 400
    assert rep.refused["status"] == 400
    for _ in range(5):  # the day-2 loop's next passes, served A: the same report, held back
        clock.now += 60
        assert turn.confirm_done(rep, "vm", a, drifted=False) is False
    assert server.posts == 2
    clock.now += REFUSED_BODY_RETRY
    assert turn.confirm_done(rep, "vm", a, drifted=False) is True
    assert server.taken[-1] == {"pool": "vm", "state": "Done", "currentConfig": a, "desiredConfig": a}
    assert turn.confirm_done(rep, "vm", a, drifted=False) is False and server.posts == 3  # Done: nothing more
    assert rep.kept() is None and rep.refused is None
