"""A report the server missed (it was down, e.g. the node's own server pod restarting after the
node's reboot) goes before a held fetch: while a report waits to be sent, the day-2 fetch asks the
server to hold nothing, so the pass ends as soon as the server answers and the report is sent then.
(A VM run: the Done after the reboot waited out a 25 s hold of the fetch that found the server up.)"""

from types import SimpleNamespace

import pytest

from agent.host.root import Root
from agent.node import turn, update
from agent.resource.fetch import FetchResult


class Reporter:
    credential = "nac1_x"

    def __init__(self, kept):
        self._kept = kept

    def kept(self):
        return self._kept

    def member_headers(self):
        return {}


class Fetcher:
    def __init__(self):
        self.holds = []

    def fetch(self, url, **kw):
        self.holds.append(kw["hold"])
        return FetchResult(b"", url, 304, {})


def updater(tmp_path, kept):
    u = update.Updater.__new__(update.Updater)
    u.root, u.state_dir, u.hold, u.drift = Root(str(tmp_path)), "/var/lib/node-agent", turn.HOLD, None
    u.settings = SimpleNamespace(fetch=SimpleNamespace(total_timeout=0.0))
    u.reporter, u.fetcher = Reporter(kept), Fetcher()
    return u


RECORD = {"url": "https://server:22623/config/worker", "etag": '"a"'}


@pytest.mark.parametrize("kept, held", [
    (None, True),  # nothing waits: held until its turn
    ({"report": {"state": "Done"}, "error": "not delivered: connection refused"}, False),
    ({"report": {"state": "Done"}, "refused": {"status": 403}}, True),  # refused: not sent again, nothing waits
])
def test_a_fetch_is_held_only_while_no_report_waits_to_be_sent(tmp_path, kept, held):
    u = updater(tmp_path, kept)
    u._fetch(RECORD, hold=True)
    assert u.fetcher.holds == [turn.HOLD if held else 0.0]
    assert u.undelivered is (not held)
