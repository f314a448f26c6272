"""Two spots that swallowed every exception now catch only what they expect (issue 39)."""

import logging
import os

import pytest

from agent.host.root import Root
from agent.host.units import find_unit
from agent.node.status import _RetryWatcher


def test_a_unit_file_linked_out_of_the_root_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    top = tmp_path / "root"
    os.makedirs(top / "etc/systemd/system")
    os.makedirs(top / "usr/lib/systemd/system")
    os.symlink("../../../../../../../outside.service", top / "etc/systemd/system/a.service")
    (top / "usr/lib/systemd/system/a.service").write_text("[Service]\nExecStart=/bin/true\n")
    with caplog.at_level(logging.WARNING, logger="agent.host.units"):
        found = find_unit(Root(str(top)), "a.service")
    assert found == ("/usr/lib/systemd/system/a.service", "[Service]\nExecStart=/bin/true\n")
    assert "/etc/systemd/system/a.service is skipped" in caplog.text


def test_a_unit_lookup_bug_is_no_longer_hidden():
    class Broken:
        def path(self, p):
            raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="^a bug$"):
        find_unit(Broken(), "a.service")


class Recorder:
    def __init__(self):
        self.persisted = 0

    def persist(self):
        self.persisted += 1


def _record(attempt, delay):
    rec = logging.LogRecord("agent.resource.fetch", logging.WARNING, "f", 1, "fetch failed: x; retrying in 1s", (), None)
    rec.NODE_AGENT_ATTEMPT, rec.NODE_AGENT_DELAY = attempt, delay
    return rec


def test_a_retry_with_a_delay_that_is_no_number_is_left_out_of_the_record_not_raised():
    recorder, record = Recorder(), {}
    _RetryWatcher(recorder, record).emit(_record(2, "soon"))
    assert record == {} and recorder.persisted == 0
    _RetryWatcher(recorder, record).emit(_record(2, 1.5))
    assert record["attempt"] == 2 and record["lastError"] == "x" and recorder.persisted == 1
