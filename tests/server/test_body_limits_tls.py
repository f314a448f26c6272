"""An over-limit body gets its 413 even when it is large and the connection is TLS (issue 39).

The server used to answer 413 and close at once while the client was still sending 1 or 3 MiB:
the client saw a TLS EOF (plain HTTP: a broken pipe) instead of the answer, and the agent kept the
report and sent it again for ever. Now the server reads and drops the rest of such a body (bounded:
httpio.MAX_DISCARD bytes, DISCARD_SECONDS), as nginx's lingering close does, then closes."""

import pytest
import requests

from agent.server.http.httpio import MAX_BODY, MAX_DISCARD, MAX_REPORT
from tests.helpers.certs import make_tls
from tests.helpers.server_proc import REPO, ServerProcess

EXAMPLES = f"{REPO}/examples/state"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    tls = make_tls(str(tmp_path_factory.mktemp("tls")))
    with ServerProcess(EXAMPLES, tls=tls, workers=1) as srv:
        yield srv


@pytest.mark.parametrize("size", [1 << 20, 3 << 20])
def test_a_report_of_megabytes_over_tls_gets_413_naming_the_limit(tls_server, size):
    body = b'{"pool": "worker", "state": "Done", "reason": "' + b"x" * size + b'"}'
    r = tls_server.session().post(tls_server.url("/api/v1/nodes/n1/report"), data=body, timeout=60,
                                  headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert f"a report may have at most {MAX_REPORT} bytes" in r.json()["error"]["message"]
    assert r.headers.get("Connection", "").lower() == "close"


def test_a_drain_body_of_3_mib_over_tls_gets_413_naming_the_limit(tls_server):
    r = tls_server.session().post(tls_server.url("/api/v1/nodes/n1/drain"), data=b" " * (3 << 20), timeout=60,
                                  headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert f"a request body may have at most {MAX_BODY} bytes" in r.json()["error"]["message"]


def test_a_chunked_report_of_megabytes_over_tls_gets_413(tls_server):
    chunks = iter([b'{"reason": "'] + [b"x" * (256 << 10)] * 12 + [b'"}'])  # 3 MiB, no Content-Length
    r = tls_server.session().post(tls_server.url("/api/v1/nodes/n1/report"), data=chunks, timeout=60,
                                  headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text


def test_the_server_still_answers_after_a_body_larger_than_it_reads_to_drop():
    """Past MAX_DISCARD the server stops reading and closes: the client may then see a reset, but
    the server is bounded and goes on serving."""
    assert MAX_DISCARD >= 3 << 20  # the 1 and 3 MiB of the issue are read to their end
    with ServerProcess(EXAMPLES, workers=1) as srv:
        try:
            seen = requests.post(srv.url("/api/v1/nodes/n1/report"), data=b" " * (MAX_DISCARD + (4 << 20)),
                                 timeout=60, headers={"Content-Type": "application/json"}).status_code
        except requests.ConnectionError:
            seen = "reset"
        assert seen in (413, "reset")
        assert requests.get(srv.url("/healthz"), timeout=30).status_code == 200
