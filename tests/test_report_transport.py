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
