"""A token on plain http (issue 57, item 3): node-agent never sends a token over http, so a server
with ``--token-file`` and no TLS can register no node. serve says so at start and in /healthz, and
the node's refused report says the fix (https) in its "what to do", not only "not registered"."""

import os
import shutil
import subprocess
import sys

from tests.helpers import paths
from tests.helpers.noderoot import make_node_root
from tests.helpers.server_proc import ServerProcess

TOKEN = "plain-http-token"
WARNING = "--token-file on plain http: node-agent sends its token and credential over https only"
FIX = "serve over https (node-config-server serve --tls-cert FILE --tls-key FILE)"


def test_a_token_on_plain_http_is_warned_at_start_in_healthz_and_in_the_nodes_what_to_do(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(paths.REPO, "examples", "state"), state)
    with ServerProcess(str(state), token=TOKEN) as srv:
        assert srv.base_url.startswith("http://")
        assert WARNING in srv.log_text()
        health = srv.session(token=False).get(srv.url("/healthz")).json()
        assert any(w.startswith(WARNING) for w in health["warnings"]), health

        root = make_node_root(str(tmp_path / "w0"), srv.base_url, "worker", token=TOKEN, node_name="w0",
                              fetch_budget=5)
        run = subprocess.run([sys.executable, "-m", "agent.cli", "firstboot", "--root", root], capture_output=True,
                             text=True, cwd=paths.REPO, timeout=120)
        assert run.returncode == 0, run.stderr  # degraded: the node works, the server does not count it
        ended = [line for line in run.stderr.splitlines() if "firstboot degraded" in line]
        assert ended and f"the node did not send its token: {srv.base_url} is plain http" in ended[0], run.stderr
        assert FIX in ended[0], ended[0]
        status = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--root", root], capture_output=True,
                                text=True, cwd=paths.REPO, timeout=60)
        assert status.returncode == 2 and FIX in status.stdout, status.stdout


def test_a_token_over_https_is_not_warned_about(tmp_path):
    from tests.helpers.certs import make_tls

    state = tmp_path / "state"
    shutil.copytree(os.path.join(paths.REPO, "examples", "state"), state)
    with ServerProcess(str(state), tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        health = srv.session(token=False).get(srv.url("/healthz")).json()
        assert not any(WARNING in w for w in health.get("warnings", [])) and WARNING not in srv.log_text()
