"""examples/demoprocs.py: what ``make kube-demo-stop`` ends, and what it leaves alone."""

import json
import os
import subprocess
import sys

from tests.helpers.paths import REPO

sys.path.insert(0, REPO)
from examples import demoprocs  # noqa: E402


def _sleeper(session: bool) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"], start_new_session=session)


def _record(run, entries) -> None:
    with open(os.path.join(run, demoprocs.RECORD), "w") as f:
        json.dump(entries, f)


def test_stop_ends_the_demo_and_every_component_it_recorded(tmp_path):
    demo, component = _sleeper(False), _sleeper(True)
    try:
        _record(tmp_path, [{"name": "demo", "pid": demo.pid, "start": demoprocs.start_time(demo.pid)},
                           {"name": "etcd", "pid": component.pid, "start": demoprocs.start_time(component.pid)}])
        assert demoprocs.stop(str(tmp_path), timeout=10) == 0
        assert demo.wait(10) is not None and component.wait(10) is not None
        assert not (tmp_path / demoprocs.RECORD).exists()
    finally:
        for p in (demo, component):
            p.kill()
            p.wait()


def test_stop_leaves_alone_a_pid_now_held_by_another_process(tmp_path):
    other = _sleeper(True)
    try:
        _record(tmp_path, [{"name": "etcd", "pid": other.pid, "start": "1"}])  # not its start time
        assert demoprocs.stop(str(tmp_path), timeout=1) == 0
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_second_demo_is_refused_while_one_runs(tmp_path):
    _record(tmp_path, [{"name": "demo", "pid": os.getpid(), "start": demoprocs.start_time(os.getpid())}])
    try:
        demoprocs.refuse_if_running(str(tmp_path))
    except SystemExit as exc:
        assert "make kube-demo-stop" in str(exc)
    else:
        raise AssertionError("a running demo was not noticed")
