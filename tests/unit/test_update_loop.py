"""The day-2 loop is quiet when nothing happens: a problem is logged when it starts, changes or ends."""

import logging

import pytest

from agent.errors import FetchError
from agent.node import update


class Stop(Exception):
    pass


def test_loop_logs_a_repeated_problem_once_and_its_end(monkeypatch, caplog):
    outcomes = ["unchanged", FetchError("server down", final=False), FetchError("server down", final=False),
                FetchError("server down", final=False), "unchanged", "unchanged"]
    updater = update.Updater.__new__(update.Updater)
    updater.opts = type("O", (), {"once": False, "interval": 60.0})()

    def once():
        out = outcomes.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    def sleep(_s):
        if not outcomes:
            raise Stop()

    updater.once, updater.sleep = once, sleep
    updater.settings = None
    with caplog.at_level(logging.DEBUG, logger="agent.node.update"), pytest.raises(Stop):
        updater.run()
    infos = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert [r.levelname for r in infos] == ["WARNING", "INFO"], [r.getMessage() for r in infos]
    assert "server down" in infos[0].getMessage() and "succeeded again" in infos[1].getMessage()
    assert sum(1 for r in caplog.records if r.levelno == logging.DEBUG and "server down" in r.getMessage()) == 2
