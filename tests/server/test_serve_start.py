"""What ``node-config-server serve`` says as it starts (issue 49): a ``--listen`` address another
process holds is said before any line that claims to serve, with what to do and exit 69; an
address this machine does not have is a usage error (2); a state directory with no pool serves,
with a warning in the log and in /healthz."""

import os
import shutil
import socket
import subprocess
import sys

import requests

from tests.helpers.server_proc import REPO, ServerProcess

EXAMPLES = os.path.join(REPO, "examples", "state")


def serve(tmp_path, *args):
    state = tmp_path / "state"
    if not state.exists():
        shutil.copytree(EXAMPLES, state)
    return subprocess.run([sys.executable, "-m", "agent.server.cli", "serve", "--state", str(state), "--data-dir",
                           str(tmp_path / "data"), *args], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_a_busy_listen_port_exits_69_saying_so_before_any_serving_line_and_makes_no_data_dir(tmp_path):
    with socket.socket() as holder:  # another process's listener, as a first serve's
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        r = serve(tmp_path, "--listen", f"127.0.0.1:{port}")
    assert r.returncode == 69, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert lines == [f"node-config-server: --listen 127.0.0.1:{port}: the address is in use: another process "
                     f"listens there (another node-config-server? ss -ltnp 'sport = :{port}' names it)",
                     "what to do: stop that process, or serve on a free port with --listen HOST:PORT"], r.stderr
    assert r.stdout == "" and "Starting gunicorn" not in r.stderr
    assert not (tmp_path / "data").exists()  # --data-dir is made only once the address is free (issue 57)


def test_a_listen_address_this_machine_does_not_have_is_a_usage_error_and_makes_no_data_dir(tmp_path):
    r = serve(tmp_path, "--listen", "192.0.2.1:22623")  # TEST-NET-1: never a local address
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("node-config-server: --listen 192.0.2.1:22623: cannot listen there: ")
    assert r.stderr.splitlines()[1].startswith("what to do: ") and "Starting gunicorn" not in r.stderr
    assert not (tmp_path / "data").exists()


def test_an_empty_state_directory_serves_with_a_warning_in_the_log_and_healthz(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with ServerProcess(str(empty), workers=1) as srv:
        health = requests.get(srv.url("/healthz"), timeout=10)
        log = srv.log_text()
    assert health.status_code == 200 and health.json()["state"]["pools"] == []
    warned = [w for w in health.json().get("warnings", []) if "has no MachineConfigPool" in w]
    assert warned == [f"state directory {empty} has no MachineConfigPool: no node can join a pool (every "
                      f"/config/<pool> answers 404); put the pools and their MachineConfigs there (examples/state "
                      f"shows the layout: docs/api.md, \"State directory\")"], health.json()
    assert f"WARNING agent.server.store.statedir.watcher: state directory {empty} has no MachineConfigPool" in log


def test_a_state_directory_with_pools_has_no_such_warning(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLES, state)
    with ServerProcess(str(state), workers=1) as srv:
        health = requests.get(srv.url("/healthz"), timeout=10).json()
        log = srv.log_text()
    assert not [w for w in health.get("warnings", []) if "MachineConfigPool" in w] and "MachineConfigPool:" not in log
