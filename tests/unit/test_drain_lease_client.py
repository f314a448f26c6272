"""The agent's drain lease request: a 429 (pool at maxUnavailable) and a 503 (a replica whose
shared store is away) both mean "ask again after Retry-After"; anything else ends the update."""

import pytest

from agent.errors import FetchError
from agent.host.root import Root
from agent.node.report import Reporter


class Answer:
    def __init__(self, status, retry_after=None, body=None):
        self.status_code = status
        self.headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        self._body = body or {}
        self.text = str(self._body)

    def json(self):
        return self._body


class Session:
    def __init__(self, answers):
        self.answers = list(answers)
        self.posts = 0

    def post(self, *_a, **_kw):
        self.posts += 1
        return self.answers.pop(0)


def reporter(tmp_path, answers):
    rep = Reporter("https://127.0.0.1:22623", "n1", Root(str(tmp_path)), "/var/lib/node-agent")
    rep.session = Session(answers)
    return rep


def test_a_store_outage_503_is_waited_out_like_a_full_pool(tmp_path):
    slept = []
    rep = reporter(tmp_path, [Answer(503, 5, {"error": {"message": "the shared store is unavailable"}}),
                              Answer(429, 2, {"reason": "1 of at most 1 node(s) ..."}), Answer(200)])
    assert rep.acquire_drain("worker", "rendered-worker-2", sleep=slept.append, clock=lambda: 0.0)
    assert slept == [5.0, 2.0] and rep.session.posts == 3


def test_other_refusals_end_the_wait(tmp_path):
    rep = reporter(tmp_path, [Answer(403, body={"error": {"message": "not this node"}})])
    with pytest.raises(FetchError, match="HTTP 403"):
        rep.acquire_drain("worker", "c", sleep=lambda s: None, clock=lambda: 0.0)
