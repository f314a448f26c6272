"""serve's access log (``--access-log``, deploy/daemonset.yaml's ``--access-log=-``) ends each line
with the answer's ETag: which config a node was answered, so a log reader (and the VM scenario's
test_vm_server_pod) tells a config sent again from a 304 and from another config of the same size."""

import time

from tests.helpers.server_proc import ServerProcess
from tests.server.test_server_api import IGN, TOKEN, copy_state, tls  # noqa: F401

SETTLE = 30  # gunicorn writes the line after the answer is sent: waited for, never assumed


def logged_config_lines(path, want):
    deadline = time.monotonic() + SETTLE
    while True:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f if '"GET /config/worker' in line]
        if len(lines) >= want or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def test_each_access_log_line_ends_with_the_etag_its_answer_carried_200_and_304_alike(tmp_path, tls):  # noqa: F811
    log = tmp_path / "access.log"
    with ServerProcess(str(copy_state(tmp_path)), tls=tls, token=TOKEN, extra_args=["--access-log", str(log)]) as srv:
        node = srv.node_session("w0")
        first = node.get(srv.url("/config/worker"), headers={"Accept": IGN + "3.4.0"})
        assert first.status_code == 200, first.text
        etag = first.headers["ETag"]
        again = node.get(srv.url("/config/worker"), headers={"Accept": IGN + "3.4.0", "If-None-Match": etag})
        assert again.status_code == 304, again.text
        lines = logged_config_lines(log, 2)
    assert [line.split('" ', 1)[1].split()[0] for line in lines] == ["200", "304"], lines
    # gunicorn escapes the quotes of a logged header (\"): the ETag's own quotes
    assert [line.rsplit(" ", 1)[1].replace('\\"', '"') for line in lines] == [etag, etag], lines
