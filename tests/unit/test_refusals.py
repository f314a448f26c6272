"""Every refusal is a clear answer, every failure fails closed (issue 39): the pure pieces."""

import io
import json

import pytest
import requests

from agent.server.cluster.reports import (
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    ReportInvalid,
    validate_report,
)
from agent.server.cluster.topology import Topology
from agent.server.http.httpio import MAX_REPORT, HTTPError, json_body
from agent.server.http.noderoutes import released_answer
from agent.server.store.errors import ReportTooLarge, StoreUnavailable
from agent.server.store.kube.client import KubeError, KubeUnavailable, _answer
from agent.server.store.kube.mcnrecord import ANNOTATIONS_MAX, report_annotation
from agent.server.store.nodestore import NodeRecord


def _environ(body: bytes) -> dict:
    return {"PATH_INFO": "/api/v1/nodes/n1/report", "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "application/json", "wsgi.input": io.BytesIO(body)}


def _record(report: dict) -> NodeRecord:
    return NodeRecord("n1", "worker", "label", "", report, 1.0)


# -- the Kubernetes store's report annotation ---------------------------------------------------

def test_a_report_of_non_ascii_text_within_the_limit_fits_the_annotation_unescaped():
    """30,000 x "é" (60,000 bytes of UTF-8) is a report under MAX_REPORT; ASCII escaping made it
    180,000 bytes, past the annotation check, and the API answered 500."""
    body = json.dumps({"pool": "worker", "state": "Done", "reason": "é" * 4096, "currentImage": "é" * 4096,
                       "bootImage": "é" * 4096, "labels": {f"k{i}": "é" * 63 for i in range(MAX_LABELS)}},
                      ensure_ascii=False).encode()
    assert len(body) <= MAX_REPORT and body.count("é".encode()) > 28000
    report = validate_report(json_body(_environ(body)))
    value = report_annotation(_record(report))
    assert "é" in value and "\\u00e9" not in value
    assert len(value.encode()) <= ANNOTATIONS_MAX // 2


def test_any_report_within_max_report_bytes_fits_the_annotation():
    """The worst case: the smallest JSON per character (an escape becomes one character again,
    compact separators), so the annotation is never larger than the body plus the record's own
    fields."""
    body = json.dumps({"pool": "worker", "state": "Done", "reason": "\"" * 2000,
                       "labels": {f"{i:x}": "" for i in range(MAX_LABELS)}}, separators=(",", ":")).encode()
    assert len(body) <= MAX_REPORT
    value = report_annotation(_record(validate_report(json_body(_environ(body)))))
    assert len(value.encode()) < len(body) + 200


def test_a_report_too_large_for_the_annotation_raises_report_too_large_naming_the_limit():
    with pytest.raises(ReportTooLarge) as err:
        report_annotation(_record({"reason": "x" * (ANNOTATIONS_MAX // 2)}))
    assert f"at most {ANNOTATIONS_MAX // 2} bytes fit" in str(err.value) and "node n1" in str(err.value)


# -- report fields -------------------------------------------------------------------------------

@pytest.mark.parametrize("labels, field, words", [
    ({"a" * (MAX_LABEL_KEY + 1): "v"}, "$.labels[", f"1 to {MAX_LABEL_KEY} characters"),
    ({"": "v"}, "$.labels[''", "1 to"),
    ({"role": "v" * (MAX_LABEL_VALUE + 1)}, "$.labels['role']", f"at most {MAX_LABEL_VALUE} characters"),
    ({f"l{i}": "" for i in range(MAX_LABELS + 1)}, "$.labels", f"at most {MAX_LABELS}"),
])
def test_report_labels_are_bounded_per_key_per_value_and_in_number(labels, field, words):
    with pytest.raises(ReportInvalid) as err:
        validate_report({"pool": "worker", "state": "Done", "labels": labels})
    assert err.value.field.startswith(field) and words in str(err.value)


@pytest.mark.parametrize("name", ["é", "Rendered-Worker", "r" * 254, "-x", "a_b"])
def test_a_reported_config_name_that_is_no_dns_subdomain_is_a_400_naming_the_field(name):
    """Config names land in the MachineConfigNode's configVersion (maxLength 253, a DNS-1123
    subdomain): the API answered 422 and the report 500."""
    for key in ("currentConfig", "desiredConfig", "firstPivotConfig"):
        with pytest.raises(ReportInvalid) as err:
            validate_report({"pool": "worker", "state": "Done", key: name})
        assert err.value.field == f"$.{key}" and "DNS-1123 subdomain" in str(err.value)


def test_report_labels_at_their_kubernetes_limits_are_taken():
    key = "p" * 253 + "/" + "n" * 63
    assert validate_report({"pool": "worker", "state": "Done", "labels": {key: "v" * 63}})["labels"] == {key: "v" * 63}


def test_a_body_with_a_lone_surrogate_is_a_400_not_a_store_failure():
    with pytest.raises(HTTPError) as err:
        json_body(_environ(b'{"pool": "worker", "state": "Done", "reason": "\\ud800"}'))
    assert err.value.code == 400 and "lone UTF-16 surrogate" in err.value.message
    paired = json_body(_environ(b'{"pool": "worker", "state": "Done", "reason": "\\ud83d\\ude00"}'))
    assert paired["reason"] == "\U0001F600"


class _Breaking(io.RawIOBase):
    """A request body whose connection breaks while it is read (what gunicorn's reader raises)."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def read(self, size=-1):
        raise self.exc


@pytest.mark.parametrize("exc", [BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "Connection reset"),
                                 OSError(5, "Input/output error")])
def test_a_connection_that_breaks_while_the_body_is_read_is_a_408_sent_again_not_a_400(exc):
    """The VM run's 400 of 141 bytes was "the request body could not be read: BrokenPipeError:
    [Errno 32] Broken pipe": the node took it as its report's refusal and never sent it again."""
    environ = dict(_environ(b'{"pool": "worker", "state": "Done"}'), **{"wsgi.input": _Breaking(exc)})
    with pytest.raises(HTTPError) as err:
        json_body(environ)
    assert (err.value.code, err.value.field) == (408, "$")
    assert err.value.message.startswith(f"the connection broke while the request body was read "
                                        f"({type(exc).__name__}: ") and "send the request again" in err.value.message


def test_a_malformed_chunk_is_still_a_400():
    from gunicorn.http.errors import InvalidChunkSize

    environ = dict(_environ(b""), **{"wsgi.input": _Breaking(InvalidChunkSize(b"zz"))})
    del environ["CONTENT_LENGTH"]
    with pytest.raises(HTTPError) as err:
        json_body(environ)
    assert err.value.code == 400 and "InvalidChunkSize" in err.value.message


# -- API errors ----------------------------------------------------------------------------------

def _response(status: int, reason: str) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp._content = json.dumps({"kind": "Status", "reason": reason, "message": "forbidden: RBAC: not ready"}).encode()
    return resp


@pytest.mark.parametrize("status", [401, 403])
def test_an_api_401_or_403_is_a_store_unavailable_that_keeps_its_status(status):
    """A starting kube-apiserver answers 403 until its RBAC cache is filled: a 503 with
    Retry-After (StoreUnavailable), never a 500; callers that test ``status`` still can."""
    with pytest.raises(KubeError) as err:
        _answer(_response(status, "Forbidden"), "PATCH /apis/x")
    assert isinstance(err.value, StoreUnavailable) and err.value.status == status
    assert "deploy/rbac.yaml" in str(err.value)


@pytest.mark.parametrize("status", [404, 409, 422])
def test_an_api_404_409_or_422_stays_a_plain_refusal_that_keeps_its_status(status):
    with pytest.raises(KubeError) as err:
        _answer(_response(status, "X"), "GET /x")
    assert not isinstance(err.value, StoreUnavailable) and err.value.status == status


# -- the drain's topology ------------------------------------------------------------------------

class FakeClient:
    def __init__(self, answers):
        self.answers = list(answers)
        self.gets = 0

    def get(self, path):
        self.gets += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_an_unreadable_topology_is_unknown_says_why_and_is_read_again_after_the_retry_time():
    now = [0.0]
    topology = Topology(retry_seconds=10, clock=lambda: now[0])
    client = FakeClient([KubeError(403, "Forbidden", "cannot get infrastructures", "GET infra"),
                         {"status": {"controlPlaneTopology": "SingleReplica"}}])
    value, unknown = topology.read(client)
    assert value is None and "topology is unknown" in unknown and "403" in unknown
    assert topology.read(client) == (None, unknown) and client.gets == 1  # not asked again before the retry
    now[0] = 10.0
    assert topology.read(client) == ("SingleReplica", "")
    assert topology.read(client) == ("SingleReplica", "") and client.gets == 2  # known: kept


def test_an_api_server_away_leaves_the_topology_unknown():
    topology = Topology()
    value, unknown = topology.read(FakeClient([KubeUnavailable("GET infra: unreachable")]))
    assert value is None and "unreachable" in unknown


def test_no_infrastructure_object_is_a_known_absent_topology():
    topology = Topology()
    client = FakeClient([KubeError(404, "NotFound", "", "GET infra")])
    assert topology.read(client) == (None, "") and topology.read(client) == (None, "") and client.gets == 1


def test_an_unknown_topology_is_no_drain_and_the_answer_says_why():
    from agent.server.cluster.drainpacer import paced_drain

    class Drainer:
        client = FakeClient([KubeError(403, "Forbidden", "no grant", "GET infra")])
        topology = Topology(retry_seconds=7)

        def cordon(self, node):
            raise AssertionError("an unknown topology must not cordon")

    paced = paced_drain(Drainer(), "n1", "rendered-1")
    assert paced is not None and not paced.done and paced.wait == 7
    assert paced.to_dict()["required"] is True and "topology is unknown" in paced.to_dict()["reason"]
    assert Drainer.client.gets == 1  # the Node itself was never read, nor patched


# -- the drain release -------------------------------------------------------------------------------

def test_the_drain_release_says_the_node_stays_cordoned_on_kubernetes():
    out = released_answer("n1", "worker", real_nodes=True)
    assert out["released"] and out["actions"] == [] and "stays cordoned" in out["effect"]


def test_the_drain_release_records_an_uncordon_where_there_are_no_node_objects():
    out = released_answer("n1", "worker", real_nodes=False)
    assert out["actions"] == ["uncordon"] and "drain log" in out["effect"]
    assert released_answer("n1", None, real_nodes=False) == {
        "node": "n1", "released": False, "pool": "", "actions": [], "effect": "node n1 held no drain lease: nothing changed"}


def test_a_drain_asked_while_the_topology_is_unknown_answers_429_saying_why_and_when_to_ask_again():
    from agent.server.http.noderoutes import NodeRoutes

    class Drainer:
        client = FakeClient([KubeUnavailable("GET infra: API server unreachable")])
        topology = Topology(retry_seconds=10)

    class Granted:
        def to_dict(self):
            return {"node": "n1", "pool": "worker", "granted": True, "status": "granted"}

    resp = NodeRoutes._drained(None, Drainer(), "n1", "worker", "rendered-1", Granted())
    body = json.loads(resp.body)
    assert resp.code == 429 and ("Retry-After", "10") in resp.headers
    assert body["granted"] is False and body["status"] == "waiting" and body["retryAfter"] == 10
    assert "topology is unknown" in body["reason"] and "unreachable" in body["reason"]
    assert body["drain"]["required"] is True
