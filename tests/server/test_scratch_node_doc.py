"""docs/operations.md "Make a scratch node" is followed word for word (issue 57, item 5): its
shell block, run as written against a real server (TLS and a token), makes a root node-agent
first-boots; the reboot block of "A scratch root completes a reboot", run as written, ends it
Done. Only the variables the section says to set are given (DIR, SERVER, CA, TOKEN_FILE, POOL,
NODE), and ``node-agent`` is this checkout's, on PATH as an installed one would be."""

import os
import re
import shutil
import subprocess
import sys

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

TOKEN = "scratch-doc-token"
DOC = os.path.join(paths.REPO, "docs", "operations.md")


def shell_block(heading: str) -> str:
    """The first ```sh block under ``heading`` (a heading line of docs/operations.md)."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    section = text.split(f"\n{heading}\n", 1)[1]
    found = re.search(r"\n```sh\n(.*?)\n```\n", section, re.S)
    assert found, f"no sh block under {heading!r}"
    return found.group(1)


def bash(script: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, cwd=str(env["DIR"]),
                          env=env, timeout=180)


def test_the_scratch_node_section_makes_a_node_that_first_boots_and_completes_its_reboot(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(paths.REPO, "examples", "state"), state)
    (tmp_path / "token").write_text(TOKEN + "\n")
    bindir = tmp_path / "bin"  # node-agent as installed: a command on PATH, running this checkout
    bindir.mkdir()
    (bindir / "node-agent").write_text(f"#!/bin/sh\nexec {sys.executable} -m agent.cli \"$@\"\n")
    (bindir / "node-agent").chmod(0o755)
    with ServerProcess(str(state), tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        env = dict(os.environ, DIR=str(tmp_path / "w0"), SERVER=srv.base_url, CA=srv.tls.ca_cert,
                   TOKEN_FILE=str(tmp_path / "token"), POOL="worker", NODE="w0",
                   PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                   PYTHONPATH=paths.REPO)
        (tmp_path / "w0").mkdir()
        made = bash(shell_block("## Make a scratch node"), env)
        assert made.returncode == 0, made.stderr
        assert "status: done" in made.stdout and "reboot pending: yes" in made.stdout, made.stdout
        node = srv.session().get(srv.url("/api/v1/nodes/w0")).json()
        assert (node["pool"], node["report"]["state"]) == ("worker", "Working"), node

        rebooted = bash(shell_block("### A scratch root completes a reboot"), env)
        assert rebooted.returncode == 0, rebooted.stderr
        done = wait_for(lambda: (lambda n: n["report"]["state"] == "Done" and n)(
            srv.session().get(srv.url("/api/v1/nodes/w0")).json()), "w0 reported Done", 30)
        assert done["updated"] is True
