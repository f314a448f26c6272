"""A hostile-input campaign (issue 16): HTTP requests, state files and configs, >= 200 inputs.

Pass criteria for every input: no traceback logged, no 5xx other than 503 (a withheld config),
a clear 4xx naming what is wrong, and nothing written (no report, lease or state file).
In process (the WSGI app, load_state, the Ignition parser and validator): fast and bounded.
"""

import gzip
import io
import json
import logging
import os
import shutil
import threading

import pytest

from agent.errors import ConfigError
from agent.ignition.parse import parse_document
from agent.ignition.validate import validate_ignition
from agent.server.http.app import App
from agent.server.store.stateformat import load_state
from tests.helpers.server_proc import REPO

EXAMPLE = os.path.join(REPO, "examples", "state")
TOKEN = "campaign"
MC = "metadata: {name: 99-x, labels: {machineconfiguration.openshift.io/role: worker}}\n"
BOMB = MC + "spec:\n  unknownKey:\n" + "".join(
    f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9 if i else ['"lol"'] * 9) + "]\n" for i in range(9))


def request_environ(method, path, body=b"", headers=None, query=""):
    """A WSGI environ of one request (PEP 3333), headers named as in HTTP."""
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "SERVER_NAME": "t",
               "SERVER_PORT": "80", "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body)),
               "wsgi.url_scheme": "http"}
    for k, v in (headers or {}).items():
        key = k.upper().replace("-", "_")
        environ[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + key] = v
    return environ


def wsgi(app, method, path, body=b"", headers=None, query=""):
    environ = request_environ(method, path, body, headers, query)
    got = {}

    def start_response(status, hdrs):
        got["status"] = int(status.split()[0])

    body = app(environ, start_response)
    try:
        out = b"".join(body)
    finally:
        if hasattr(body, "close"):  # as a WSGI server does (PEP 3333): what runs after the answer
            body.close()
    return got["status"], out


# --- HTTP --------------------------------------------------------------------------------------------

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
PATHS = ["/config/worker", "/config/Worker", "/config/%2e%2e", "/config/" + "a" * 300, "/config/w\x00",
         "/config/worker/extra", "/api/v1/pools", "/api/v1/pools/nope", "/api/v1/pools/BAD!", "/api/v1/cluster",
         "/api/v1/nodes/n1", "/api/v1/nodes/n1/report", "/api/v1/nodes/n1/drain", "/api/v1/nodes/" + "n" * 300,
         "/api/v1/nodes/../../etc/passwd", "/healthz", "/metrics", "/", "//", "/%ff%fe", "/api/v1/nodes/n1/report/x"]
BODIES = [
    b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"pool": "worker", "state": "Happy"}', b'{"pool": 5}',
    b"[" * 100000 + b"]" * 100000, b'{"a":' * 5000 + b"1" + b"}" * 5000, b'{"pool": "' + b"x" * 5000 + b'"}',
    b'{"pool": "worker", "state": "Done", "config": {"nested": [1, 2]}}', b'"\\ud800"',
    b'{"pool": "worker", "state": "Done", "currentConfig": 123}', b'{"pool": "ghost", "config": "c"}',
]
# Identity (agent/server/rollout/identity.py): forged, malformed and oversized credentials, registration and
# deletion without the right token, member fetches naming a node without its credential.
FORGED = [{"Authorization": v} for v in (
    "Bearer nac1_", "Bearer nac1_" + "A" * 43, "Bearer nac1_" + "x" * 100000, "Bearer " + TOKEN + "\x00",
    "Bearer \u00e9\u00e8", "bearer " + TOKEN.upper(), "Bearer  ", "Bearer " + TOKEN + " extra", "Token " + TOKEN,
    "Bearer" + TOKEN)]
IDENTITY_CASES = (
    [("POST", "/api/v1/nodes/n1/register", h, b, "") for h in [{}] + FORGED for b in (b"", b"{}")]
    + [(m, p, h, b"", "") for h in [{}, AUTH] + FORGED for m, p in (
        ("DELETE", "/api/v1/nodes/n1"), ("DELETE", "/api/v1/nodes/n1/drain"), ("GET", "/api/v1/nodes"),
        ("GET", "/api/v1/pools/worker"))]
    + [("POST", "/api/v1/nodes/n1/report", dict(h, **{"Content-Type": "application/json"}),
        b'{"pool": "worker", "state": "Done"}', "") for h in FORGED]
    + [("POST", "/api/v1/nodes/n1/drain", dict(h, **{"Content-Type": "application/json"}), b'{"pool": "worker"}', "")
       for h in [AUTH] + FORGED]
    + [("GET", "/config/worker", dict(h, **extra), b"", q) for h in [{}, AUTH] + FORGED[:3]
       for extra, q in (({"X-Node-Name": "n1"}, ""), ({}, "node=n1"), ({"X-Node-Name": "n2"}, "node=n1"))]
    + [(m, "/api/v1/nodes/n1/register", AUTH, b"", "") for m in ("GET", "PUT", "DELETE", "PATCH")]
    + [("POST", "/api/v1/nodes/n1/register/x", AUTH, b"", ""), ("POST", "/api/v1/nodes/Bad_Name/register", AUTH,
                                                                b"", "")]
    # Approval (issue 28): a node's own credential that is no credential, bodies that are not one,
    # approving without the admin token, listing registrations with a bad filter.
    + [("POST", "/api/v1/nodes/n1/register", AUTH, b, "") for b in (
        b'{"credential": "x"}', b'{"credential": 5}', b'{"credential": null, "more": 1}', b"[1]", b'"nac1_"',
        b'{"credential": "nac1_' + b"A" * 42 + b'"}', b'{"credential": "nac1_' + b"A" * 600 + b'"}',
        b'{"credential": "nac1_' + b"A" * 40 + b'===="}', b'{"credential": "bearer nac1_' + b"A" * 43 + b'"}', b"{")]
    + [(m, "/api/v1/nodes/n1/approve", h, b, "") for m in ("POST", "GET", "DELETE") for h in [{}, AUTH] + FORGED[:4]
       for b in (b"", b'{"labels": {"node-role.kubernetes.io/master": ""}}')]
    + [("GET", "/api/v1/nodes", h, b"", q) for h in ({}, AUTH) for q in (
        "approval=bogus", "approval=", "approval=pending&limit=0", "approval=pending&limit=x")]
    + [("GET", "/api/v1/nodes/n1/registration", h, b"", "") for h in [{}, AUTH] + FORGED[:3]]
)
HTTP_CASES = (
    [(m, p, {}, b"", "") for m in ("GET", "HEAD", "DELETE", "PUT", "PATCH", "OPTIONS") for p in PATHS]
    + [("POST", "/api/v1/nodes/n1/report", AUTH, b, "") for b in BODIES]
    + [("POST", "/api/v1/nodes/n1/drain", AUTH, b, "") for b in BODIES]
    + [("POST", "/api/v1/nodes/n1/report", h, b'{"pool": "worker", "state": "Done"}', "") for h in (
        {}, {"Authorization": "Bearer"}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic eDp5"},
        {"Authorization": "Bearer " + TOKEN + "x"}, {**AUTH, "Content-Type": "text/plain"},
        {**AUTH, "Content-Length": "-5"}, {**AUTH, "Content-Length": "99999999999"},
        {**AUTH, "Content-Length": "abc"})]
    + [("GET", "/config/worker", h, b"", q) for h, q in (
        ({"X-Node-Name": "Bad_Name"}, ""), ({}, "node=" + "n" * 300), ({}, "node=%00"), ({"Accept": "x" * 10000}, ""),
        ({"Accept": "application/vnd.coreos.ignition+json;version=9.9.9"}, ""), ({"If-None-Match": "*" * 10000}, ""),
        ({}, "node=a&node=b"), ({"X-Node-Name": "n1" * 200}, ""))]
    + IDENTITY_CASES
)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    state = tmp_path_factory.mktemp("hostile") / "state"
    shutil.copytree(EXAMPLE, state)
    a = App(str(state), token=TOKEN, reload_interval=0.0)
    a.warm()
    yield a
    a.close()


def test_http_campaign(app, caplog):
    caplog.set_level(logging.ERROR)
    before = app.cluster.db.reports()
    creds_before = app.cluster.db.conn().execute("SELECT * FROM credentials").fetchall()
    bad = []
    for method, path, headers, body, query in HTTP_CASES:
        status, out = wsgi(app, method, path, body, headers, query)
        if status >= 500 and status != 503:
            bad.append((method, path[:40], query[:40], body[:40], status, out[:200]))
        elif status >= 400 and method != "HEAD":
            err = json.loads(out)["error"]
            assert err["message"] and err["code"] == status
    assert not bad, bad
    assert app.cluster.db.reports() == before  # nothing recorded
    assert app.cluster.db.conn().execute("SELECT * FROM credentials").fetchall() == creds_before  # nor registered
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    assert len(HTTP_CASES) >= 150 and len(IDENTITY_CASES) >= 100


# --- state files -----------------------------------------------------------------------------------

STATE_FILES = [
    ("machineconfigs/99-x.yaml", BOMB), ("machineconfigs/99-x.yaml", MC + "spec: &s {k: *s}\n"),
    ("machineconfigs/99-x.yaml", "[" * 100000), ("machineconfigs/99-x.yaml", "{" * 50000 + "}" * 50000),
    ("machineconfigs/99-x.yaml", b"\xff\xfe\x00"), ("machineconfigs/99-x.yaml", "\x00" * 100),
    ("machineconfigs/99-x.yaml", MC + "spec: {config: {ignition: {version: 3.4.0}, storage: {files: "
                                     "[{path: /etc/x, contents: {source: 'data:,x'}, mode: 99999999}]}}}\n"),
    ("machineconfigs/99-x.yaml", MC + "spec: {config: 5}\n"), ("machineconfigs/99-x.yaml", MC + "spec: [1]\n"),
    ("machineconfigs/99-x.yaml", "kind: List\nitems: [1, {metadata: {name: 'A B'}}]\n"),
    ("machineconfigs/99-x.yaml", MC + "---\n" + MC), ("machineconfigs/99-x.yaml", "!!python/object:os.system {}"),
    ("machineconfigs/99-x.yaml", "a: !!binary AAAA\n"), ("machineconfigs/99-x.yaml", "? [a, b]\n: c\n"),
    ("machineconfigs/99-x.yaml", MC + "spec: {kernelArguments: " + "[" * 200 + "]" * 200 + "}\n"),
    ("machineconfigpools/x.yaml", "metadata: {name: x}\nspec: {machineConfigSelector: 5}\n"),
    ("machineconfigpools/x.yaml", "metadata: {name: X}\n"), ("machineconfigpools/x.yaml", "metadata: {name: x}\n"),
    ("machineconfigpools/x.yaml", "metadata: {name: x}\nspec: {machineConfigSelector: {matchLabels: {}},"
                                  " maxUnavailable: '500%%'}\n"),
    ("machineconfiguration.yaml", "spec: {bootImageSkewEnforcement: [1]}\n"),
    ("machineconfiguration.yaml", "spec: {nodeDisruptionPolicy: {files: 5}}\n"),
    ("machineosconfigs/x.yaml", "metadata: {name: x}\nspec: 5\n"), ("machineosbuilds/x.yaml", "- 1\n"),
    ("bootstrap/kubeconfig", "&a [*a]"), ("bootstrap/kubeconfig", "clusters: 5"),
    ("bootstrap/kubelet-ca.crt", "not a cert"),
]


def _special(state, kind):
    path = os.path.join(state, "machineconfigs", "99-x.yaml")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-out":
        os.symlink("/etc/hostname", path)
    elif kind == "dir":
        os.mkdir(path)
    elif kind == "big":
        with open(path, "wb") as f:
            f.truncate(64 << 20)  # sparse: 64 MiB of NULs over the 8 MiB limit


@pytest.mark.parametrize("case", list(range(len(STATE_FILES))) + ["fifo", "link-out", "dir", "big"])
def test_state_file_campaign(tmp_path, case, caplog):
    caplog.set_level(logging.WARNING)
    state = str(tmp_path / "state")
    shutil.copytree(EXAMPLE, state)
    if isinstance(case, int):
        rel, text = STATE_FILES[case]
        os.makedirs(os.path.dirname(os.path.join(state, rel)), exist_ok=True)
        with open(os.path.join(state, rel), "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
    else:
        _special(state, case)
    before = sorted(os.listdir(state))
    out = {}

    def load():
        try:
            out["st"] = load_state(state)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test's thread
            out["error"] = exc

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "load_state blocked"
    if "error" in out:
        raise out["error"]
    st = out["st"]
    assert {"worker", "master"} <= set(st.pools)  # the good objects still load
    assert sorted(os.listdir(state)) == before  # nothing written
    assert not [r for r in caplog.records if r.exc_info]


# --- configs (what a node fetches) ------------------------------------------------------------------

def _cfg(**storage):
    return {"ignition": {"version": "3.4.0"}, "storage": storage}


CONFIGS = [
    b"", b"{", b"[]", b"null", b"5", b"\xff", b"[" * 100000, b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b'{"ignition": {"version": "9.9.9"}}', b'{"ignition": {"version": 3}}', b'{"ignition": 5}',
    json.dumps(_cfg(files=[{"path": "relative"}])).encode(),
    json.dumps(_cfg(files=[{"path": "/etc/../../x"}])).encode(),
    json.dumps(_cfg(files=[{"path": "/etc/x", "mode": -1}])).encode(),
    json.dumps(_cfg(files=[{"path": "/etc/x", "contents": {"source": "data:;base64,%%%"}}])).encode(),
    json.dumps(_cfg(files=[{"path": "/etc/x", "contents": {"source": "gopher://x"}}])).encode(),
    json.dumps(_cfg(files=[{"path": "/etc/x", "contents": {"source": "data:,x", "compression": "xz"}}])).encode(),
    json.dumps(_cfg(files=[{"path": "/etc/x"}] * 3)).encode(),
    json.dumps(_cfg(links=[{"path": "/etc/l", "target": 5}])).encode(),
    json.dumps({"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": 5}]}}).encode(),
    json.dumps({"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "http://x"}] * 3}}}).encode(),
    gzip.compress(b'{"ignition": {"version": "3.4.0"}}'),
    ("\ufeff" + json.dumps(_cfg())).encode(),
]
# Odd, yet valid as Ignition has it (config/v3_4/types): "/" is an absolute, clean path; a unit's
# name is checked for its suffix only (unit.go validateName), so "../x.service" lands in
# /etc/systemd/x.service, inside the root, as Ignition's files stage would put it.
IGNITION_ACCEPTS = [
    json.dumps(_cfg(directories=[{"path": "/"}])).encode(),
    json.dumps({"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "../x.service"}]}}).encode(),
]


@pytest.mark.parametrize("data", CONFIGS, ids=range(len(CONFIGS)))
def test_a_hostile_config_is_refused_naming_what_is_wrong(data):
    try:
        doc = parse_document(data, "campaign")
    except ConfigError as exc:
        assert str(exc).startswith("campaign: ") and len(str(exc)) > len("campaign: "), str(exc)
        return
    errors = [p for p in validate_ignition(doc) if p.is_error]
    assert errors, f"accepted: {data[:80]!r}"
    assert all(p.path.startswith("$") and p.message for p in errors), [str(p) for p in errors]


@pytest.mark.parametrize("data", IGNITION_ACCEPTS, ids=range(len(IGNITION_ACCEPTS)))
def test_an_odd_config_ignition_accepts_is_accepted(data):
    assert [str(p) for p in validate_ignition(parse_document(data, "campaign")) if p.is_error] == []


def test_campaign_size():
    assert len(HTTP_CASES) + len(STATE_FILES) + 4 + len(CONFIGS) + len(IGNITION_ACCEPTS) >= 200
