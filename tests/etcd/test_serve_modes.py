"""Each way README.md and docs/replicas.md tell a user to start ``node-config-server serve``,
started through the command line as a user would, answering a config fetch and /healthz.

- SQLite (the default) on ``--state DIR``, plain HTTP and TLS + token, each worker class;
- ``--store etcd://...`` with ``--state DIR`` (every replica reads its own copy of the files);
- ``--store etcd://...`` alone (state objects published with ``load-state``).
"""

import shutil
import subprocess
import sys
import uuid

import pytest

from tests.helpers.certs import make_tls
from tests.helpers.etcd_cluster import have_etcd
from tests.helpers.server_proc import REPO, ServerProcess

EXAMPLES = f"{REPO}/examples/state"
needs_etcd = pytest.mark.skipif(not have_etcd(), reason="etcd-server is not installed (make test installs it)")


def state_copy(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLES, state)
    return str(state)


def fetch_works(srv):
    s = srv.session()
    health = s.get(srv.url("/healthz"), timeout=10)
    assert health.status_code == 200, health.text
    r = s.get(srv.url("/config/worker"), headers={"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"},
              timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["ignition"]["version"].startswith("3.")
    assert "Traceback" not in srv.log_text()


@pytest.mark.parametrize("worker_class", ["gevent", "gthread"])
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_sqlite_on_a_state_directory(tmp_path, tls, worker_class):
    certs = make_tls(str(tmp_path / "tls")) if tls else None
    with ServerProcess(state_copy(tmp_path), tls=certs, token="t0ken" if tls else None, workers=1,
                       extra_args=["--worker-class", worker_class]) as srv:
        fetch_works(srv)


@needs_etcd
def test_etcd_store_with_a_state_directory(tmp_path, etcd_cluster):
    url = f"{etcd_cluster.url}/serve-modes-{uuid.uuid4().hex[:8]}/"
    with ServerProcess(state_copy(tmp_path), workers=1, extra_args=["--store", url]) as srv:
        fetch_works(srv)


@needs_etcd
def test_etcd_store_with_state_from_load_state(tmp_path, etcd_cluster):
    url = f"{etcd_cluster.url}/serve-modes-{uuid.uuid4().hex[:8]}/"
    loaded = subprocess.run([sys.executable, "-m", "agent.server.cli", "load-state", "--store", url,
                             state_copy(tmp_path)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert loaded.returncode == 0, loaded.stderr
    with ServerProcess(None, workers=1, extra_args=["--store", url, "--cache-dir", str(tmp_path / "cache")]) as srv:
        fetch_works(srv)
