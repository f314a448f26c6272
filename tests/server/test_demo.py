"""``make demo`` runs examples/demo.py: it must keep working (it broke once unnoticed, when
fetching a pool's target by node name started to need the node's own credential). Run as
make demo does, in a scratch directory; the demo itself checks every exit code it expects.

It ends by printing the commands that reopen its cluster (a TLS + token server on the demo's
state and data, then get and describe): they are run here as printed, the watch bounded. While
that server runs, a second demo refuses to wipe the directory under it; Ctrl-C ends a demo with
one line (issue 49)."""

import os
import shlex
import signal
import subprocess
import sys

import pytest

from examples import demoprocs
from tests.helpers import paths
from tests.helpers.server_proc import free_port, terminate
from tests.helpers.wait import healthz_ok, wait_for

REPO = paths.REPO


def demo_env(run, port):
    # run as from a terminal, not under make (make test sets MAKELEVEL, which makes a Ctrl-C'd demo exit 0)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    return dict(env, NODE_AGENT_DEMO_DIR=str(run), NODE_AGENT_DEMO_PORT=str(port), NO_COLOR="1")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    run = tmp_path_factory.mktemp("demo") / "demo-run"
    port = free_port()
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", "demo.py")], cwd=REPO,
                         env=demo_env(run, port), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out, run, port


def serve_as_printed(serve, run, port) -> subprocess.Popen:
    """The printed serve command, started and answering /healthz."""
    log = open(run / "serve.log", "w")
    srv = subprocess.Popen(serve, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()

    def up():
        assert srv.poll() is None, (run / "serve.log").read_text()
        return healthz_ok(f"https://127.0.0.1:{port}/healthz", verify=str(run / "tls" / "ca.pem"))

    try:
        wait_for(up, f"the demo's server answers /healthz (its log: {run / 'serve.log'})", 120, interval=0.2)
    except BaseException:
        terminate(srv, 20)
        raise
    return srv


def test_make_demo_runs_to_the_end(demo):
    out = demo[0]
    assert "demo finished in" in out.stdout
    assert "Restart chronyd.service" in out.stdout  # step 4: the plan under the node disruption policy
    assert "(exit 78)" in out.stdout  # step 3: worker-0's boot image refused by the skew rules


def test_the_agents_stage_started_lines_are_left_out(demo):
    out = demo[0]
    assert "stage fetch ok in" in out.stdout
    assert "stage fetch started" not in out.stdout and " started\n" not in out.stdout


def printed_commands(stdout: str):
    """The commands under the demo's last title, as printed (4 spaces in, one a line)."""
    tail = stdout.split("== to look at this cluster again", 1)[1]
    return [shlex.split(line) for line in tail.splitlines() if line.startswith("    ")]


def test_the_printed_commands_reopen_the_cluster(demo):
    out, run, port = demo
    commands = printed_commands(out.stdout)
    assert [c[1:3] for c in commands] == [["serve", "--state"], ["get", "pools"], ["describe", "pool"],
                                          ["describe", "node"], ["get", "pools"]]
    serve, *looks, watch = commands
    assert "--watch" in watch and "--tls-cert" in serve and "--token-file" in serve
    assert serve[serve.index("--listen") + 1] == f"127.0.0.1:{port}"
    assert serve[serve.index("--data-dir") + 1] == str(run / "data")
    srv = serve_as_printed(serve, run, port)
    try:
        shown = {}
        for argv in looks:
            r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, (argv, r.stdout, r.stderr)
            shown[" ".join(argv[1:4])] = r.stdout
        # The demo's cluster as it left it: its pools, and infra-0 with the report it sent.
        assert all(pool in shown["get pools --config"] for pool in ("master", "worker", "infra"))
        assert "worker" in shown["describe pool worker"]
        assert "infra-0" in shown["describe node infra-0"] and "infra" in shown["describe node infra-0"]
        assert "Done" in shown["describe node infra-0"]
        # Its nodes name the reopened server: their day-2 loop reaches it.
        assert f"https://127.0.0.1:{port}/config/infra" in (run / "infra-0/etc/node-agent/pointer.ign").read_text()
        upd = subprocess.run([sys.executable, "-m", "agent.cli", "update", "--once", "--root", str(run / "infra-0")],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
        # Exit 0: the server answered its fetch (an unreachable one is a non-zero exit). Its answer is
        # a 304, quietly: the node asks with the ETag of the config it has, which the server still serves.
        assert upd.returncode == 0 and "failed" not in upd.stderr, upd.stderr
        # The watch, bounded: it draws the pools, then is stopped as a user would (Ctrl-C).
        # Ctrl-C's default action restored in the child: a shell runs a background job with SIGINT
        # ignored, and Python then installs no KeyboardInterrupt handler (seen once: .ci/run
        # started in the background left this watch running after the signal).
        w = subprocess.Popen(watch, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        first = _first_line(w, 60)  # the table is drawn: the watch is in its loop, not starting up
        if first.split()[:1] == ["NAME"]:  # to a pipe, as kubectl get -w: the header, then the rows (one flush)
            first += w.stdout.readline()
        w.send_signal(signal.SIGINT)
        wout, werr = w.communicate(timeout=20)
        assert w.returncode == 0 and "infra" in first + wout and "Traceback" not in werr, (first, wout, werr)
    finally:
        terminate(srv, 20)


def test_a_second_demo_refuses_to_wipe_the_directory_its_reopened_server_serves(demo):
    out, run, port = demo
    srv = serve_as_printed(printed_commands(out.stdout)[0], run, port)
    try:
        db = run / "data" / "nodes.db"
        before = db.stat().st_ino
        again = subprocess.run([sys.executable, os.path.join(REPO, "examples", "demo.py")], cwd=REPO,
                               env=demo_env(run, port), capture_output=True, text=True, timeout=120)
        assert again.returncode == 1 and again.stdout == "", (again.stdout, again.stderr)
        lines = again.stderr.splitlines()
        assert len(lines) == 2 and f"(pid {srv.pid})" in lines[0] and "is in use" in lines[0], again.stderr
        assert lines[1].startswith("what to do: stop that server") and f"kill {srv.pid}" in lines[1], again.stderr
        assert db.stat().st_ino == before and srv.poll() is None  # nothing wiped, the server still up
        assert demoprocs.servers_of(str(run)) == [srv.pid]  # its gunicorn workers are not listed
    finally:
        terminate(srv, 20)
    assert demoprocs.servers_of(str(run)) == []


def test_ctrl_c_ends_the_demo_with_one_line_and_stops_its_server(tmp_path):
    """As a terminal's Ctrl-C: SIGINT to the demo's process group (the demo and the node-agent it
    runs), mid-way through its first boots."""
    run = tmp_path / "demo-run"
    demo = subprocess.Popen([sys.executable, os.path.join(REPO, "examples", "demo.py")], cwd=REPO,
                            env=demo_env(run, free_port()), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = ""
        while "== 2." not in seen:  # its server is up and the first boots run
            line = demo.stdout.readline()
            assert line, demo.communicate(timeout=60)
            seen += line
        os.killpg(demo.pid, signal.SIGINT)
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    assert demo.returncode == 130, (out[-2000:], err)
    assert [line for line in err.splitlines() if line.strip()] == [
        "demo: interrupted (Ctrl-C); its server is stopped, and what it made is under "
        f"{run}/ (make demo starts over)"], err
    assert demoprocs.servers_of(str(run)) == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop is the case
def test_a_ctrl_c_python_dropped_in_a_del_still_ends_the_demo_at_its_next_step(monkeypatch, capsys):
    # The collector runs a __del__ at any allocation; a KeyboardInterrupt the handler raises there is
    # dropped ("Exception ignored in"), and the demo ran on to exit 0 (a fresh-clone CI, once).
    from examples import demo

    monkeypatch.setattr(demo.Interrupt, "seen", False)

    class Collected:
        def __del__(self):
            demo.Interrupt.handler(signal.SIGINT, None)

    Collected()  # its __del__ runs here, and its KeyboardInterrupt goes no further
    with pytest.raises(KeyboardInterrupt):
        demo.title("3. the next step")
    assert "== 3." not in capsys.readouterr().out
    demo.Interrupt.handler(signal.SIGINT, None)  # a second Ctrl-C: the server's stop goes on


def _first_line(proc, timeout):
    """The first line ``proc`` prints, waiting at most ``timeout`` seconds for it."""
    import select

    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready and proc.poll() is None, proc.communicate()
    return proc.stdout.readline()


def test_the_demo_takes_its_port_while_the_last_runs_connections_are_in_time_wait():
    # make demo run twice in a row: the first run's server closed its connections, which stay in
    # TIME_WAIT on the demo's port for 60 s; the server binds through them (SO_REUSEADDR), and
    # the demo's own check of the port must too (it refused a second run for a minute)
    import socket

    from examples import demo as demo_module

    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn's (Linux keeps it in TIME_WAIT)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server side closes first: its end goes to TIME_WAIT
        client.recv(1)
        client.close()
    assert "TIME-WAIT" in subprocess.run(["ss", "-tan", f"sport = :{port}"], capture_output=True,
                                         text=True).stdout
    assert demo_module._free(port) == port
