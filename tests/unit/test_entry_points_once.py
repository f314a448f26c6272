"""gevent_worker.entry_points_once: gevent's patch_all looks its plugins up once per event it
announces; within this, every lookup is answered from one reading of the installed
distributions (the server pod's start, issue 55)."""

import sys
from importlib import metadata

from agent.server.http.gevent_worker import entry_points_once

GROUPS = ("console_scripts", "gevent.plugins.monkey.will_patch_all", "no.such.group")


def _names(eps) -> list:
    return sorted(ep.name for ep in eps)


def _group(lookup, group: str) -> list:
    """As gevent asks: by group from 3.10, the whole dict before (gevent/events.py)."""
    if sys.version_info >= (3, 10):
        return _names(lookup(group=group))
    return _names(lookup().get(group, ()))


def test_within_it_each_group_lookup_answers_as_the_real_one_from_one_reading_and_after_it_the_real_one_is_back(
        monkeypatch):
    real = metadata.entry_points
    expected = {g: _group(real, g) for g in GROUPS}
    readings = []

    def counted(**params):
        readings.append(params)
        return real(**params)

    monkeypatch.setattr(metadata, "entry_points", counted)
    with entry_points_once():
        for _ in range(3):  # patch_all asks about 25 times
            got = {g: _group(metadata.entry_points, g) for g in GROUPS}
            assert got == expected
    assert readings == [{}]  # one reading of everything, no lookup per group
    assert metadata.entry_points is counted


def test_after_an_error_within_it_the_real_lookup_is_back(monkeypatch):
    sentinel = metadata.entry_points
    try:
        with entry_points_once():
            raise RuntimeError("patch_all failed")
    except RuntimeError:
        pass
    assert metadata.entry_points is sentinel
