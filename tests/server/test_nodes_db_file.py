"""nodes.db: created 0600 (with its -wal/-shm), and an empty or corrupt file is a clear error."""

import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

from agent.server.store.sqlite.db import Database, DatabaseUnusable
from tests.helpers.server_proc import REPO


def test_created_0600_whatever_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        Database(str(tmp_path / "nodes.db")).close()
    finally:
        os.umask(old)
    for name in os.listdir(tmp_path):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600, name


def test_an_existing_readable_file_is_tightened(tmp_path):
    path = str(tmp_path / "nodes.db")
    Database(path).close()
    os.chmod(path, 0o644)
    Database(path).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize("content,words", [(b"", "is empty (0 bytes)"), (b"garbage" * 1000, "cannot be used")])
def test_empty_or_corrupt_database_is_named_with_what_to_do(tmp_path, content, words):
    path = tmp_path / "nodes.db"
    path.write_bytes(content)
    with pytest.raises(DatabaseUnusable, match=re.escape(words)):
        Database(str(path))
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    shutil.copy(path, state / "nodes.db")
    # --data-dir named: the default (/var/lib/node-config-server) is the machine's, and a nodes.db
    # there would be served instead (a test run once failed so, after a manual serve made one).
    r = subprocess.run([sys.executable, "-m", "agent.server.cli", "serve", "--state", str(state),
                        "--data-dir", str(state), "--listen", "127.0.0.1:9"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 74, r.stderr
    assert "nodes.db" in r.stderr and words in r.stderr and "backup" in r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


def test_a_drain_slot_when_unavailable_nodes_use_up_maxUnavailable_getAllCandidateMachines(tmp_path):
    """--backend kubernetes passes the capacity left by the pool's unavailable Nodes, which may be
    0 with no lease held: a wait naming why, not an error; a holder still renews its lease."""
    from agent.server.rollout.drains import request_drain
    from agent.server.store.sqlite.nodestore import SqliteNodeStore

    store = SqliteNodeStore(Database(str(tmp_path / "nodes.db")))
    answer = request_drain(store, "w1", "worker", "c", 0, 60.0, now=100.0)
    assert not answer.granted and answer.retry_after >= 1
    assert "use up all of its maxUnavailable" in answer.to_dict()["reason"]
    assert request_drain(store, "w1", "worker", "c", 1, 60.0, now=100.0).granted
    assert request_drain(store, "w1", "worker", "c", 0, 60.0, now=110.0).renewed
