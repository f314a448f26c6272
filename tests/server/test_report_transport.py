"""Reports never carry the token in clear and never follow a redirect (a 307 to http)."""

import os

from agent.host.root import Root
from agent.node.report import Reporter
from tests.helpers.httpserver import Reply, ScriptedServer


def test_no_token_over_http_and_no_redirect(tmp_path):
    os.makedirs(tmp_path / "var/lib/node-agent")
    with ScriptedServer() as srv, ScriptedServer() as elsewhere:
        srv.always("/api/v1/nodes/n1/report", Reply(307, headers={"Location": elsewhere.url("/x")}))
        elsewhere.always("/x", Reply(200, b"{}"))
        rep = Reporter(srv.url(""), "n1", Root(str(tmp_path)), "/var/lib/node-agent", token="s3cret")
        assert rep.send({"pool": "worker", "state": "Done"}) is False
        seen = srv.requests_for("/api/v1/nodes/n1/report")
        assert seen and seen[0].header("Authorization") is None  # http: the token stays home
        assert not elsewhere.requests_for("/x")  # the redirect was not followed
        assert rep.refused and rep.refused["status"] == 307


def test_a_long_reason_is_cut_so_that_the_report_still_arrives(tmp_path):
    # The server refuses a text field over 4096 characters (400, final): an update's Degraded
    # reason is an exception's first line, of any length, and must not be lost for it.
    import json

    os.makedirs(tmp_path / "var/lib/node-agent")
    with ScriptedServer() as srv:
        srv.always("/api/v1/nodes/n1/report", Reply(200, b"{}"))
        rep = Reporter(srv.url(""), "n1", Root(str(tmp_path)), "/var/lib/node-agent")
        assert rep.send({"pool": "worker", "state": "Degraded", "reason": "x" * 20000}) is True
        sent = json.loads(srv.requests_for("/api/v1/nodes/n1/report")[0].body)
        assert len(sent["reason"]) == 1000 and sent["reason"].startswith("xxx") and sent["pool"] == "worker"
