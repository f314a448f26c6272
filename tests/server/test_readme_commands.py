"""README's commands leave a checkout as they found it (issue 31): run in a clean clone, then
``git status --porcelain`` is still empty. Once, `serve --state examples/state` made
examples/state/nodes.db{,-gen,-shm,-wal}, which git did not ignore and the RPM's Source0 packed.

The clone is of this working tree as it is (tracked files as edited, new files git does not
ignore), committed in the clone, so that the test judges the code and README under test. The
commands run the clone's code (``python -m``), in a HOME of their own."""

import os
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.helpers import paths
from tests.helpers.server_proc import free_port, terminate
from tests.helpers.wait import healthz_ok, wait_for

REPO = paths.REPO

# As README.md ("Commands") and docs/commands.md show them; each must be in one of them word for word.
SERVE = "node-config-server serve --state examples/state --data-dir ~/.local/share/node-config-server"
RENDER = "render --state DIR"
STATUS = "status [--json] [--state DIR [--data-dir DIR]]"
GET = "node-config-server get pools"
DESCRIBE = "describe pool worker"
DEMO = "make demo"

# .git: a directory in a clone, a file in a worktree (git worktree add): both are checkouts.
pytestmark = pytest.mark.skipif(shutil.which("git") is None or not os.path.exists(os.path.join(REPO, ".git")),
                                reason="needs git and a git checkout")


def git(*args: str, cwd: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def clean_clone(top) -> str:
    """A clone of REPO whose HEAD is REPO's working tree (tracked and new, not ignored, files)."""
    clone = str(top / "clone")
    git("clone", "-q", "--no-hardlinks", REPO, clone, cwd=str(top))
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO).split("\0")
    for rel in filter(None, listed):
        src, dst = os.path.join(REPO, rel), os.path.join(clone, rel)
        if os.path.isfile(src) and not os.path.islink(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)
        elif not os.path.lexists(src) and os.path.lexists(dst):
            os.unlink(dst)  # deleted in the working tree
    git("add", "-A", cwd=clone)
    git("-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "--allow-empty",
        "-m", "the working tree under test", cwd=clone)
    assert git("status", "--porcelain", cwd=clone) == ""
    return clone


def shims(top, clone: str) -> dict:
    """An environment whose node-config-server and node-agent are the clone's code."""
    bindir, home = top / "bin", top / "home"
    bindir.mkdir()
    home.mkdir()
    for name, module in (("node-config-server", "agent.server.cli"), ("node-agent", "agent.cli")):
        path = bindir / name
        path.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m {module} \"$@\"\n")
        path.chmod(0o755)
    return dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", HOME=str(home), PYTHONPATH=clone,
                NO_COLOR="1")


def sh(command: str, clone: str, env: dict, codes=(0,)) -> subprocess.CompletedProcess:
    r = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode in codes, (command, r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return r


def test_readme_commands_leave_the_checkout_clean(tmp_path):
    documents = ""
    for name in ("README.md", os.path.join("docs", "commands.md")):
        with open(os.path.join(REPO, name), encoding="utf-8") as f:
            documents += f.read()
    for documented in (SERVE, RENDER, STATUS, GET, DESCRIBE, DEMO):
        assert documented in documents, documented
    clone = clean_clone(tmp_path)
    env = shims(tmp_path, clone)

    sh("node-config-server render --state examples/state", clone, env)
    sh("node-config-server status --state examples/state", clone, env, codes=(0, 1))
    sh("node-config-server status --json --state examples/state --data-dir ~", clone, env, codes=(0, 1))

    # The documented serve, briefly, on a free port (its default, 22624, may be taken here).
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    srv = subprocess.Popen(["bash", "-c", f"exec {SERVE} --listen 127.0.0.1:{port} --settle-seconds 0.5"],
                           cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def up():
            assert srv.poll() is None, (tmp_path / "serve.log").read_text()
            return healthz_ok(f"http://127.0.0.1:{port}/healthz")

        wait_for(up, f"the README's server answers /healthz (its log: {tmp_path / 'serve.log'})", 120, interval=0.2)
        server = f" --server http://127.0.0.1:{port}"
        assert "worker" in sh(GET + server, clone, env).stdout
        assert "worker" in sh(f"node-config-server {DESCRIBE}{server}", clone, env).stdout
    finally:
        terminate(srv, 30)
        log.close()
    data = tmp_path / "home" / ".local" / "share" / "node-config-server"
    assert (data / "nodes.db").is_file(), (tmp_path / "serve.log").read_text()

    # make demo, as the Makefile has it, with this Python instead of a .venv made in the clone.
    demo = sh(f"make --no-print-directory -o venv demo PY={shlex.quote(sys.executable)}", clone, env)
    assert "demo finished in" in demo.stdout

    assert git("status", "--porcelain", cwd=clone) == ""
    ignored = git("status", "--porcelain", "--ignored", cwd=clone).splitlines()
    assert all(line == "!! demo-run/" or "__pycache__/" in line for line in ignored), ignored
    assert not [n for n in os.listdir(os.path.join(clone, "examples", "state")) if n.startswith("nodes.db")]


# -- the data directory (serve --data-dir, status --state --data-dir) --------------------------------

def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.server.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def state_copy(tmp_path) -> str:
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    return str(state)


def test_serve_keeps_node_state_in_the_data_dir_it_makes(tmp_path):
    from tests.helpers.server_proc import ServerProcess

    state, data = state_copy(tmp_path), tmp_path / "made" / "data"
    with ServerProcess(state, data_dir=str(data)) as srv:
        r = srv.session().post(srv.url("/api/v1/nodes/w1/register"))
        assert r.status_code == 201, r.text
    assert (data / "nodes.db").is_file() and oct(data.stat().st_mode & 0o777) == "0o700"
    assert not [n for n in os.listdir(state) if n.startswith("nodes.db")]
    # status --state reads that nodes.db (w1 counted) and makes no file anywhere. SQLite's own
    # -wal/-shm are left out: whether the stopped server's last connection removed them depends on
    # when its worker's threads were collected, and the last reader to close removes them.
    def files() -> list:
        return sorted(n for n in os.listdir(data) if not n.endswith(("-wal", "-shm")))

    before = files()
    r = run_cli("status", "--json", "--state", state, "--data-dir", str(data))
    assert r.returncode in (0, 1), r.stderr
    assert files() == before and not [n for n in os.listdir(state) if n.startswith("nodes.db")]


def test_status_data_dir_usage(tmp_path):
    state = state_copy(tmp_path)
    r = run_cli("status", "--data-dir", str(tmp_path))
    assert r.returncode == 2 and "--data-dir goes with --state" in r.stderr
    r = run_cli("status", "--state", state, "--data-dir", str(tmp_path / "missing"))
    assert r.returncode == 2 and "not a directory" in r.stderr


def test_serve_refuses_a_data_dir_it_cannot_make(tmp_path):
    state = state_copy(tmp_path)
    (tmp_path / "file").write_text("")
    r = run_cli("serve", "--state", state, "--data-dir", str(tmp_path / "file" / "data"), "--listen", "127.0.0.1:9")
    assert r.returncode == 2 and "--data-dir" in r.stderr and "cannot make it" in r.stderr, r.stderr


def test_an_older_versions_nodes_db_in_the_state_dir_is_used_with_a_warning(tmp_path):
    """Before --data-dir, nodes.db was kept in the state directory: it holds the nodes' credentials,
    so it is used where it is (not moved, not ignored), and each start says how to move it."""
    from tests.helpers.server_proc import ServerProcess

    state, data = state_copy(tmp_path), tmp_path / "data"
    with ServerProcess(state, data_dir=state) as old:  # as an older version: nodes.db in the state directory
        cred = old.node_session("w1").headers["Authorization"]
    data.mkdir()
    with ServerProcess(state, data_dir=str(data)) as srv:
        s = srv.session(token=False)
        s.headers["Authorization"] = cred
        r = s.get(srv.url("/config/worker"), params={"node": "w1"})
        assert r.status_code == 200, r.text  # w1's credential is still known
        log = srv.log_text()
    assert "older version" in log and f"mv {state}/nodes.db*" in log, log
    assert not os.listdir(data)
    r = run_cli("status", "--state", state, "--data-dir", str(data))
    assert r.returncode in (0, 1) and "older version" in r.stderr, r.stderr
