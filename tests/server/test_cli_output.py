"""Issue 31: what each ``node-agent`` command prints when it fails, counted line by line.

docs/commands.md's rule: a fatal error is one line of what and where plus one ``what to do:`` line, on
stderr only, once. Each row of FAILURES runs a command's failure path as a real process (the
log on stderr, as in a terminal or a pipe without a journal) and counts the lines that say it.
Also here: the hints that misled (the fetch hint's port, the skew refusal's three fixes) and
the plan count of first boot.
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root
from tests.helpers.server_proc import ServerProcess, free_port

REPO = paths.REPO
EXAMPLES = os.path.join(REPO, "examples")
TOKEN = "cli-output-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("clioutput")
    state = str(top / "state")
    shutil.copytree(os.path.join(EXAMPLES, "state"), state)
    with ServerProcess(state, tls=make_tls(str(top / "tls")), token=TOKEN) as srv:
        yield srv


def agent(*args):
    env = dict(os.environ)
    env.pop("JOURNAL_STREAM", None)
    env.pop("NODE_AGENT_DEBUG", None)
    env["NODE_AGENT_JOURNAL_SOCKET"] = "/nonexistent/journal"
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, stdin=subprocess.DEVNULL,
                          text=True, timeout=120, cwd=REPO, env=env)


def lines_with(text, phrase):
    return [line for line in text.splitlines() if phrase in line]


# -- the failure paths, set up ---------------------------------------------------------------------

def _unreachable_root(tmp_path):
    port = free_port()
    root = make_node_root(str(tmp_path / "n"), f"https://127.0.0.1:{port}", "worker", node_name="n", fetch_budget=1)
    return root, f"127.0.0.1:{port}"


def _unreachable(tmp_path, server):
    return ["firstboot", "--root", _unreachable_root(tmp_path)[0]], "could not fetch"


def _no_pointer(tmp_path, server):
    root = make_node_root(str(tmp_path / "n"), "https://127.0.0.1:9", "worker", node_name="n")
    os.unlink(os.path.join(root, "etc/node-agent/pointer.ign"))
    return ["firstboot", "--root", root], "pointer.ign does not exist"


def _unknown_pool(tmp_path, server):
    root = make_node_root(str(tmp_path / "n"), server.base_url, "nosuch", ca_pem=server.tls.ca_pem(), token=TOKEN,
                          node_name="lost-1", fetch_budget=5)
    return ["firstboot", "--root", root], "pool nosuch is unknown"


def _skew(tmp_path, server):
    root = make_node_root(str(tmp_path / "n"), server.base_url, "worker", ca_pem=server.tls.ca_pem(), token=TOKEN,
                          node_name="old-1", fetch_budget=5, aleph_version="48.84.202109241901-0")
    return ["firstboot", "--root", root], "boot image refused"


def _update_early(tmp_path, server):
    root = make_node_root(str(tmp_path / "n"), "https://127.0.0.1:9", "worker", node_name="n")
    return ["update", "--once", "--root", root], "first boot has not completed"


def _plan_missing(tmp_path, server):
    return ["plan", "--from", str(tmp_path / "nope.ign"), "--to", os.path.join(EXAMPLES, "ignition/worker.ign")], \
        "no such file"


def _plan_usage(tmp_path, server):
    return ["plan", "--from", os.path.join(EXAMPLES, "ignition/worker.ign")], "plan needs --from FILE and --to FILE"


def _skew_rules(tmp_path, server):
    return ["skew", "--aleph", str(tmp_path / "a.json"), "--rules", str(tmp_path / "r.json")], "no such file"


def _status_corrupt(tmp_path, server):
    path = tmp_path / "var/lib/node-agent/status.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    return ["status", "--root", str(tmp_path)], "is not valid JSON"


# (id, set-up -> (argv, the phrase of the error), exit code, whether a server is needed)
FAILURES = [
    ("firstboot-69-unreachable", _unreachable, 69, False),
    ("firstboot-65-no-pointer", _no_pointer, 65, False),
    ("firstboot-65-unknown-pool", _unknown_pool, 65, True),
    ("firstboot-78-skew", _skew, 78, True),
    ("update-75-before-first-boot", _update_early, 75, False),
    ("plan-66-missing-file", _plan_missing, 66, False),
    ("plan-2-usage", _plan_usage, 2, False),
    ("skew-66-rules-missing", _skew_rules, 66, False),
    ("status-corrupt-record", _status_corrupt, None, False),
]


@pytest.mark.parametrize("setup,code,needs_server", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_a_fatal_error_is_one_line_and_one_what_to_do_on_stderr_once(request, tmp_path, setup, code, needs_server):
    srv = request.getfixturevalue("server") if needs_server else None
    argv, phrase = setup(tmp_path, srv)
    r = agent(*argv)
    if code is not None:
        assert r.returncode == code, r.stderr
    assert r.returncode not in (0, 1) or argv[0] == "status", r.stderr
    said = lines_with(r.stderr, phrase)
    assert len(said) == 1, r.stderr  # the what and where, once
    assert lines_with(r.stdout, phrase) == [], r.stdout  # never on stdout
    assert len(lines_with(r.stderr, "what to do:")) == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_first_boot_already_done_is_said_once(tmp_path):
    root = make_node_root(str(tmp_path / "n"), "https://127.0.0.1:9", "worker", node_name="n")
    stamp = os.path.join(root, "var/lib/node-agent/firstboot.done")
    os.makedirs(os.path.dirname(stamp), exist_ok=True)
    with open(stamp, "w") as f:
        f.write("rendered-worker-1\n")
    r = agent("firstboot", "--root", root)
    assert r.returncode == 0, r.stderr
    assert len(lines_with(r.stdout + r.stderr, "first boot already done")) == 1, (r.stdout, r.stderr)


def test_validate_says_an_unparsable_file_once():
    path = os.path.join(EXAMPLES, "ignition", "invalid-syntax.ign")
    r = agent("validate", path)
    assert r.returncode == 1
    assert len(lines_with(r.stdout, path)) == 1, r.stdout  # the finding, with the file's name
    assert lines_with(r.stderr, path) == [], r.stderr  # not a second time
    assert r.stderr.strip() == "invalid: 1 error(s), 0 warning(s)"


def test_validate_says_a_missing_file_once_exit_66():
    path = os.path.join(EXAMPLES, "ignition", "missing.ign")
    r = agent("validate", path)
    assert r.returncode == 66 and r.stdout == ""
    assert len(lines_with(r.stderr, path)) == 1 and len(lines_with(r.stderr, "what to do:")) == 1, r.stderr


# -- hints that misled ----------------------------------------------------------------------------

def test_the_fetch_hint_names_the_pointers_own_server(tmp_path):
    root, where = _unreachable_root(tmp_path)
    r = agent("firstboot", "--root", root)
    assert r.returncode == 69, r.stderr
    hint = lines_with(r.stderr, "what to do:")
    assert len(hint) == 1 and where in hint[0] and "22623" not in hint[0], r.stderr


def test_the_skew_refusal_says_one_fix_everywhere(server, tmp_path):
    argv, _ = _skew(tmp_path, server)
    r = agent(*argv)
    assert r.returncode == 78, r.stderr
    hint = lines_with(r.stderr, "what to do:")[0].split("what to do: ", 1)[1]
    error = lines_with(r.stderr, "boot image refused")[0]
    assert "re-provision this node" in hint and "bootImageSkewEnforcement" in hint
    # the error line states what and where, no fix of its own
    for advice in ("Update the boot image", "update the boot image", "Boot this node", "bootImageSkewEnforcement"):
        assert advice not in error, error
    root = argv[-1]
    with open(os.path.join(root, "etc/issue.d/50-node-agent-boot-image.issue")) as f:
        console = f.read()
    assert f"What to do: {hint}." in " ".join(console.split()) or f"What to do: {hint}." in console
    assert "Two ways out" not in console


def test_first_boot_plan_count_is_the_number_of_changes_it_lists(server, tmp_path):
    for pool in ("worker", "infra"):
        root = make_node_root(str(tmp_path / pool), server.base_url, pool, ca_pem=server.tls.ca_pem(), token=TOKEN,
                              node_name=f"count-{pool}", fetch_budget=5)
        r = agent("firstboot", "--root", root, "--dry-run")
        assert r.returncode == 0, r.stderr
        listed = r.stdout.split("Changes:\n", 1)[1].split("Actions:", 1)[0].splitlines()
        counts = [line for line in r.stderr.splitlines() if " changed, " in line or "plan: " in line]
        assert counts == [f"info: plan: {len(listed)} changes, reboot"], r.stderr
