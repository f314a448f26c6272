"""Every exit code of docs/commands.md's tables, one test per row, against the real server where one is needed.

Also: a report the server refuses ends first boot degraded (and is not sent again), a closed
pipe ends quietly, no abbreviated options, and a fatal error is said once with what to do.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root
from tests.helpers.server_proc import ServerProcess

REPO = paths.REPO
EXAMPLES = os.path.join(REPO, "examples", "state")
TOKEN = "exit-codes-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("exitcodes")
    state = str(top / "state")
    shutil.copytree(EXAMPLES, state)
    with ServerProcess(state, tls=make_tls(str(top / "tls")), token=TOKEN) as srv:
        yield srv


def agent(*args, stdout=subprocess.PIPE, env=None):
    env = dict(os.environ, **(env or {}))
    env.pop("JOURNAL_STREAM", None)
    env["NODE_AGENT_JOURNAL_SOCKET"] = "/nonexistent/journal"  # stderr, as in a terminal or a pipe
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=120, cwd=REPO, env=env)


def node(server, tmp_path, name, pool="worker", token=TOKEN, **kw):
    return make_node_root(str(tmp_path / name), server.base_url, pool, ca_pem=server.tls.ca_pem(), token=token,
                          node_name=name, fetch_budget=5, **kw)


# -- node-agent firstboot ---------------------------------------------------------------------------

def test_firstboot_0_done_and_status_0(server, tmp_path):
    root = node(server, tmp_path, "ok-0")
    r = agent("firstboot", "--root", root)
    assert r.returncode == 0, r.stderr
    assert agent("status", "--root", root).returncode == 0


@pytest.mark.parametrize("argv,named", [
    (["firstboot", "--node-name", "Bad_Name"], "--node-name: 'Bad_Name'"),
    (["firstboot", "--node-name", "-x." + "a" * 10], "--node-name"),
    (["firstboot", "--stat", "/x"], "--stat"),  # no abbreviations (--state is not an option here anyway)
    (["firstboot", "--dry"], "--dry"),          # would have meant --dry-run
    (["update", "--interval", "-5"], "--interval: '-5'"),
    (["update", "--interval", "0"], "--interval: '0'"),
    (["update", "--interval", "nan"], "--interval: 'nan'"),
    (["status", "--js"], "--js"),
    (["nosuch"], "'nosuch'"),
    ([], None),  # no command: the usage, naming the commands
])
def test_usage_errors_exit_2_and_name_the_option(argv, named):
    r = agent(*argv)
    assert r.returncode == 2, (argv, r.stderr)
    assert "Traceback" not in r.stderr
    if named is None:
        assert r.stderr.startswith("usage: node-agent ") and "firstboot" in r.stderr, r.stderr
        return
    # the error line, not the usage above it (which lists every option)
    errors = [line for line in r.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and named in errors[0], r.stderr


def test_node_name_rule_is_agent_yaml_s(tmp_path):
    r = agent("firstboot", "--root", str(tmp_path), "--node-name", "Worker_1")
    assert r.returncode == 2 and "not a node name" in r.stderr and "nodeName" in r.stderr


def test_firstboot_65_unknown_pool_is_not_server_unreachable(server, tmp_path):
    root = node(server, tmp_path, "lost-0", pool="nosuch")
    r = agent("firstboot", "--root", root)
    assert r.returncode == 65, r.stderr
    assert "pool nosuch is unknown" in r.stderr
    # said once, with what to do, in one format
    assert r.stderr.count("pool nosuch is unknown") == 1, r.stderr
    assert "what to do:" in r.stderr and "<3>" not in r.stderr and "\033[" not in r.stderr
    assert agent("status", "--root", root).returncode == 1


def test_firstboot_65_missing_pointer(tmp_path):
    root = make_node_root(str(tmp_path / "n"), "https://127.0.0.1:9", "worker", node_name="n")
    os.unlink(os.path.join(root, "etc/node-agent/pointer.ign"))
    r = agent("firstboot", "--root", root)
    assert r.returncode == 65 and r.stderr.count("pointer.ign does not exist") == 1, r.stderr


def test_firstboot_69_server_unreachable_within_the_budget(tmp_path):
    from tests.helpers.server_proc import free_port

    root = make_node_root(str(tmp_path / "n"), f"http://127.0.0.1:{free_port()}", "worker", node_name="n",
                          fetch_budget=1)
    r = agent("firstboot", "--root", root)
    assert r.returncode == 69, r.stderr
    assert "gave up after" in r.stderr and "what to do:" in r.stderr


def test_firstboot_70_internal_error_says_how_to_get_a_traceback(tmp_path, monkeypatch, capsys):
    from agent import cli
    from agent.node import firstboot

    def boom(*_a, **_k):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(firstboot, "run", boom)
    monkeypatch.setenv("NODE_AGENT_JOURNAL_SOCKET", str(tmp_path / "absent"))
    monkeypatch.delenv("NODE_AGENT_DEBUG", raising=False)
    assert cli.main(["firstboot", "--root", str(tmp_path)]) == 70
    err = capsys.readouterr().err
    assert err.count("ZeroDivisionError") == 1 and "NODE_AGENT_DEBUG=1" in err


def test_firstboot_78_skew_refused_said_once(server, tmp_path):
    root = node(server, tmp_path, "old-0", aleph_version="48.84.202109241901-0")
    r = agent("firstboot", "--root", root)
    assert r.returncode == 78, r.stderr
    assert r.stderr.count("what to do:") == 1, r.stderr
    assert agent("status", "--root", root).returncode == 1


# 75 (apply failed and rolled back) is tests/unit/test_apply.py::test_* (exit_code == 75) and
# tests/host/test_apply_dbus.py; the command-line path is the same NodeAgentError branch as 65 above.


# -- a report the server refuses ---------------------------------------------------------------------

def test_refused_report_ends_first_boot_degraded_and_status_says_why(server, tmp_path):
    root = node(server, tmp_path, "notoken-0", token=None)
    r = agent("firstboot", "--root", root)
    assert r.returncode == 0, r.stderr  # the node is provisioned
    st = agent("status", "--root", root)
    assert st.returncode == 2, st.stdout
    assert st.stdout.startswith("status: degraded\n")
    assert "HTTP 401" in st.stdout and "report.tokenFile" in st.stdout
    data = json.loads(agent("status", "--root", root, "--json").stdout)
    assert data["result"] == "degraded" and data["keptReport"]["refused"]["status"] == 401
    # refused once: the first report (after the fetch); the later ones were kept without asking again
    assert r.stderr.count("refused (HTTP 401") == 1, r.stderr
    assert server.session().get(server.url("/api/v1/nodes/notoken-0")).status_code == 404

    # fixing the cause (a token) lets the next run deliver it; status is done again
    tok = os.path.join(root, "etc/node-agent/token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    with open(os.path.join(root, "etc/node-agent/agent.yaml"), "a") as f:
        f.write("report:\n  tokenFile: /etc/node-agent/token\n")
    from agent.host.root import Root
    from agent.node.report import Reporter
    from agent.node.settingsfile import load_settings

    settings = load_settings(Root(root), None)
    rep = Reporter(server.base_url, "notoken-0", Root(root), settings.state_dir, token=TOKEN)
    rep.session = server.session(token=False)
    assert rep.flush() is True
    assert agent("status", "--root", root).returncode == 0
    assert server.session().get(server.url("/api/v1/nodes/notoken-0")).status_code == 200


# -- node-agent update ------------------------------------------------------------------------------

def test_update_before_first_boot_is_75_not_an_internal_error(tmp_path):
    root = make_node_root(str(tmp_path / "n"), "https://127.0.0.1:9", "worker", node_name="n")
    r = agent("update", "--once", "--root", root)
    assert r.returncode == 75, r.stderr
    assert "first boot has not completed" in r.stderr and "internal error" not in r.stderr


# -- node-agent status ------------------------------------------------------------------------------

def test_status_1_never_run(tmp_path):
    assert agent("status", "--root", str(tmp_path)).returncode == 1


def test_closed_pipe_ends_quietly_with_the_sigpipe_status(tmp_path):
    from agent.host.root import Root
    from agent.node.status import RunRecorder

    rec = RunRecorder(Root(str(tmp_path)), "firstboot")
    for i in range(200):  # more than a pipe buffer holds
        with rec.stage(f"stage-{i:03d}-" + "x" * 300):
            pass
    rec.finish("done", 0)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before we write: `| head -1` that has already exited
    try:
        r = agent("status", "--root", str(tmp_path), "--json", stdout=write)
    finally:
        os.close(write)
    assert r.returncode == 141, r.stderr
    assert r.stderr == ""


def _first_booted(server, tmp_path, name):
    root = node(server, tmp_path, name)
    r = agent("firstboot", "--root", root)
    assert r.returncode == 0, r.stderr
    path = os.path.join(root, "var/lib/node-agent/current-config.json")
    with open(path) as f:
        record = json.load(f)
    return root, path, record


def test_update_65_when_the_server_refuses_the_pool(server, tmp_path):
    root, path, record = _first_booted(server, tmp_path, "upd-65")
    record["url"] = record["url"].replace("/config/worker", "/config/nosuch")
    record.pop("etag", None)
    with open(path, "w") as f:
        json.dump(record, f)
    r = agent("update", "--once", "--root", root)
    assert r.returncode == 65, r.stderr
    assert "pool nosuch is unknown" in r.stderr and r.stderr.count("pool nosuch is unknown") == 1, r.stderr


def test_update_69_when_the_server_is_unreachable(server, tmp_path):
    from tests.helpers.server_proc import free_port

    root, path, record = _first_booted(server, tmp_path, "upd-69")
    # the day-2 loop follows the server the pointer config names (issue 49): both name one that is down
    old, down = record["url"].split("/config/")[0], f"https://127.0.0.1:{free_port()}"
    record["url"] = f"{down}/config/worker"
    with open(path, "w") as f:
        json.dump(record, f)
    pointer = os.path.join(root, "etc/node-agent/pointer.ign")
    with open(pointer) as f:
        text = f.read()
    assert old in text, text
    with open(pointer, "w") as f:
        f.write(text.replace(old, down))
    r = agent("update", "--once", "--root", root)
    assert r.returncode == 69, r.stderr
    assert "gave up after" in r.stderr
