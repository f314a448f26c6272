"""The state-directory watcher: stale state clears when a bad file goes, settle rule, torn reads.

No timing: the settle rule is driven by file mtimes (os.utime) and interval 0.
"""

import os
import shutil
import time

from agent.server.store.statedir import watcher as watcher_mod
from agent.server.store.statedir.watcher import StateWatcher
from tests.helpers.server_proc import REPO

EXAMPLE = os.path.join(REPO, "examples", "state")
BAD = ("metadata: {name: 99-broken, labels: {machineconfiguration.openshift.io/role: worker}}\n"
       "spec: {kernelType: turbo}\n")
NEW = ("metadata: {name: 99-new, labels: {machineconfiguration.openshift.io/role: worker}}\n"
       "spec: {kernelArguments: [quiet]}\n")


def state_copy(tmp_path):
    """A copy of the example state whose files all look old (a fresh checkout is not)."""
    d = tmp_path / "state"
    shutil.copytree(EXAMPLE, d)
    for where, _dirs, files in os.walk(d, topdown=False):
        for name in files:
            age(os.path.join(where, name))
    return d


def age(path, seconds=7200):
    """Make a file (and its directory: removals count) look ``seconds`` old."""
    t = time.time() - seconds
    os.utime(path, (t, t))
    os.utime(os.path.dirname(path), (t, t))


def test_removing_the_bad_file_clears_stale(tmp_path):
    state = state_copy(tmp_path)
    w = StateWatcher(str(state), interval=0.0)
    good = w.current()
    assert not good.stale
    bad = state / "machineconfigs" / "99-broken.yaml"
    bad.write_text(BAD)
    st = w.current()
    assert st.stale and st.problems[0].source == "machineconfigs/99-broken.yaml"
    assert st.machine_configs == good.machine_configs  # the last good objects keep serving
    bad.unlink()  # back to exactly the good files: their signature is the last good one
    st = w.current()
    assert not st.stale and not st.problems


def test_a_process_started_on_a_bad_directory_reports_stale_too(tmp_path):
    """A gunicorn worker booted (or restarted) after a bad file arrived has no last good state:
    the valid objects serve, and /healthz must say stale like every other worker (it said
    ``stale: false`` with the problem listed, which failed a CI run)."""
    state = state_copy(tmp_path)
    bad = state / "machineconfigs" / "99-broken.yaml"
    bad.write_text(BAD)
    age(str(bad))
    w = StateWatcher(str(state), interval=0.0)
    st = w.current()
    assert st.stale and [p.source for p in st.problems] == ["machineconfigs/99-broken.yaml"]
    assert "99-broken" not in st.machine_configs and st.machine_configs  # the valid objects serve
    (state / "machineconfigs" / "99-new.yaml").write_text(NEW)  # still bad: the newer valid set serves
    st = w.current()
    assert st.stale and "99-new" in st.machine_configs
    bad.unlink()
    st = w.current()
    assert not st.stale and not st.problems and "99-new" in st.machine_configs


def test_a_file_still_being_written_is_not_read(tmp_path):
    state = state_copy(tmp_path)
    w = StateWatcher(str(state), interval=0.0, settle=30.0)  # a file written now is not settled
    new = state / "machineconfigs" / "99-new.yaml"
    new.write_text(NEW)
    assert "99-new" not in w.current().machine_configs  # fresh: maybe half-written
    age(str(new))
    assert "99-new" in w.current().machine_configs


def test_another_workers_settled_signature_is_read_at_once(tmp_path):
    state = state_copy(tmp_path)
    w = StateWatcher(str(state), interval=0.0, settle=30.0)
    (state / "machineconfigs" / "99-new.yaml").write_text(NEW)
    assert "99-new" not in w.current().machine_configs
    sig = watcher_mod.signature(str(state))
    assert "99-new" in w.current(check_now=True, settled=sig).machine_configs


def test_a_view_torn_by_a_concurrent_write_is_not_served(tmp_path, monkeypatch):
    state = state_copy(tmp_path)
    w = StateWatcher(str(state), interval=0.0)
    real = watcher_mod.load_state
    bad = state / "machineconfigs" / "99-broken.yaml"

    def load_then_write(d):  # the writer adds a bad file while the directory is being read
        st = real(d)
        bad.write_text(BAD)
        return st

    (state / "machineconfigs" / "99-new.yaml").write_text(NEW)
    monkeypatch.setattr(watcher_mod, "load_state", load_then_write)
    st = w.current()
    assert "99-new" not in st.machine_configs  # the torn read was thrown away
    monkeypatch.setattr(watcher_mod, "load_state", real)
    st = w.current()
    assert st.stale  # now the bad file is seen ...
    bad.unlink()
    st = w.current()
    assert not st.stale and "99-new" in st.machine_configs  # ... and its removal noticed
