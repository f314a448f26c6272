"""A report the server refuses for its body (413: larger than the server takes) is kept as
refused, not resent for ever; the node's next, different report is sent (issue 39)."""

from agent.host.root import Root
from agent.node.report import Reporter
from tests.unit.test_drain_lease_client import Answer, Session

TOO_LARGE = {"error": {"code": 413, "message": "a report may have at most 65536 bytes (64 KiB); this one has 3 MiB"}}


def reporter(tmp_path, answers):
    rep = Reporter("https://127.0.0.1:22623", "n1", Root(str(tmp_path)), "/var/lib/node-agent")
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
