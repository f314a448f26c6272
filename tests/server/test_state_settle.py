"""A pool's target changes only from a complete, settled, problem-free state directory.

The issue's probes against a real SQLite store and the real watcher, 50 rounds each: an emptied
file, a rewrite in place that pauses up to 5 s half-way, a file cut at a line boundary (valid
YAML, fewer entries), a worker that starts while a file is bad (empty or invalid), a server killed
and started again while a file is bad. The target never changes. Time is a fake clock (the watcher reads
``time.monotonic``/``time.time`` and file mtimes set to it), so a 5 s pause costs nothing.
One more test does the empty window end to end through ``node-config-server serve`` with its
default settle period, in real time.
"""

import os
import shutil
import time

import pytest

from agent.server.cluster.service import Cluster
from agent.server.store.statedir import watcher as watcher_module
from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

EXAMPLES = os.path.join(REPO, "examples", "state")
SETTLE = 10.0  # serve's default (--settle-seconds)
ROUNDS = 50


class Clock:
    def __init__(self):
        self.now = 1_700_000_000.0

    def monotonic(self):
        return self.now

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(watcher_module, "time", c)
    return c


@pytest.fixture
def state(tmp_path, clock):
    d = tmp_path / "state"
    shutil.copytree(EXAMPLES, d)
    for top, _, files in os.walk(d):
        for f in files:
            os.utime(os.path.join(top, f), (clock.now - 3600, clock.now - 3600))
    return d


def write(clock, path, text):
    path.write_text(text)
    os.utime(path, (clock.now, clock.now))


def cluster(state, tmp_path):
    return Cluster(str(state), db_path=str(tmp_path / "nodes.db"), reload_interval=0.0, settle=SETTLE)


def targets(c):
    c.state()
    return {name: row.target for name, row in c.store.pools().items()}


def look(c, clock, seconds, step=0.5):
    """Serve requests for ``seconds`` of fake time; the targets seen on the way."""
    seen = []
    end = clock.now + seconds
    while clock.now < end:
        clock.sleep(step)
        seen.append(targets(c))
    return seen


def test_an_emptied_file_never_changes_a_target(state, tmp_path, clock):
    c = cluster(state, tmp_path)
    before = targets(c)
    mc = state / "machineconfigs" / "00-worker.yaml"
    text = mc.read_text()
    for _ in range(ROUNDS):
        write(clock, mc, "")
        seen = look(c, clock, 1.0) + look(c, clock, SETTLE + 1)  # empty long enough to be read
        assert all(s == before for s in seen)
        assert any("holds no object" in str(p) for p in c.watcher.current().problems)
        write(clock, mc, text)
        assert all(s == before for s in look(c, clock, SETTLE + 1))
        assert not c.watcher.current().problems


@pytest.mark.parametrize("pause", [0.7, 2.0, 5.0])
def test_a_rewrite_in_place_pausing_half_way_never_changes_a_target(state, tmp_path, clock, pause):
    c = cluster(state, tmp_path)
    before = targets(c)
    mc = state / "machineconfigs" / "00-worker.yaml"
    text = mc.read_text()
    lines = text.splitlines(keepends=True)
    for i in range(ROUNDS):
        cut = 1 + i % (len(lines) - 1)  # every line boundary in turn: valid YAML with fewer entries, or not
        write(clock, mc, "".join(lines[:cut]))
        assert all(s == before for s in look(c, clock, pause))
        write(clock, mc, text)
        assert all(s == before for s in look(c, clock, SETTLE + 1))


def test_a_worker_started_while_a_file_is_bad_commits_nothing(state, tmp_path, clock):
    first = cluster(state, tmp_path)
    before = targets(first)
    mc = state / "machineconfigs" / "00-worker.yaml"
    text = mc.read_text()
    for i in range(ROUNDS):
        write(clock, mc, "" if i % 2 else text.split("spec:")[0] + "spec: {config: [\n")  # empty, or cut mid-value
        late = cluster(state, tmp_path)  # a gunicorn worker booted late, or a server restarted
        assert targets(late) == before and look(late, clock, 2.0) == [before] * 4
        assert targets(first) == before
        write(clock, mc, text)
        clock.sleep(SETTLE + 1)
        assert targets(late) == before and targets(first) == before


def test_a_legitimate_change_is_served_once_settled(state, tmp_path, clock):
    c = cluster(state, tmp_path)
    before = targets(c)
    mc = state / "machineconfigs" / "50-worker-new.yaml"
    write(clock, mc, "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\n"
                     "metadata: {name: 50-worker-new, labels: {machineconfiguration.openshift.io/role: worker}}\n"
                     "spec: {config: {ignition: {version: 3.4.0}}, kernelArguments: [nosmt]}\n")
    assert look(c, clock, SETTLE - 1) == [before] * int((SETTLE - 1) / 0.5)  # not yet settled
    after = look(c, clock, 2.0)[-1]
    assert after["worker"] != before["worker"] and after["master"] == before["master"]


def test_an_emptied_file_through_the_server_with_its_default_settle(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLES, state)
    with ServerProcess(str(state), workers=2, settle=None) as srv:
        s = srv.session()

        def target():
            pools = s.get(srv.url("/api/v1/pools"), timeout=10).json()
            items = pools.get("items", pools) if isinstance(pools, dict) else pools
            return {p["metadata"]["name"]: (p["spec"]["configuration"]["name"], p["status"]["configuration"]["name"])
                    for p in items}

        before = target()
        mc = state / "machineconfigs" / "00-worker.yaml"
        text = mc.read_text()
        mc.write_text("")
        deadline = time.monotonic() + 3.0

        def unchanged_for_3s():  # every look within the 3 s serves the targets from before
            assert target() == before
            return time.monotonic() >= deadline

        wait_for(unchanged_for_3s, "3 s of looks at the pools with the file emptied", 10, interval=0.2)
        mc.write_text(text)

        def state_clean():
            state = s.get(srv.url("/healthz"), timeout=10).json()["state"]
            return state if state["stale"] is False and state["problems"] == [] else None

        wait_for(state_clean, "/healthz: the state directory read with no problem, not stale", 30)
        assert target() == before
