"""Bad-input campaign: malformed Ignition configs and MachineConfigs, policies, skew rules and
aleph files, agent.yaml, server state files and HTTP requests to the real server.

Every case must end in a clear error: the exit code of the contract, a message naming the
file and the field (JSON path) that is wrong, no traceback, and nothing written. The inputs are
tables (one row per case, with an id), not files; the CLI runs in-process through
``agent.cli.main`` (the same parsing, dispatch and error mapping as the console script, minus
~100 ms of interpreter start per case), and a sample of them also runs as real processes.
"""

import io
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from typing import Dict, Tuple

import pytest
import requests

from agent import cli
from tests.helpers import paths

REPO = paths.REPO
EXAMPLES = os.path.join(REPO, "examples")
ALEPH_OK = os.path.join(EXAMPLES, "skew", "aleph-rhel-9.6.json")
RULES_OK = os.path.join(EXAMPLES, "skew", "rules-enforce-rhel9.2.json")
V = '"ignition":{"version":"3.4.0"}'
MC = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata: {name: x}\n"
POL = "apiVersion: operator.openshift.io/v1\nkind: MachineConfiguration\nmetadata: {name: cluster}\n"
NDP = POL + "spec:\n  nodeDisruptionPolicy:\n"
EMPTY_CFG = "{" + V + "}"


def W(rest: str) -> str:
    """An Ignition config: the version plus ``rest`` (JSON members)."""
    return "{" + V + "," + rest + "}"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("NODE_AGENT_DEBUG", raising=False)
    # firstboot installs the journald handler on the root logger; in-process that would leak
    import agent.host.log

    monkeypatch.setattr(agent.host.log, "setup_logging", lambda *a, **k: None)


def run_cli(argv) -> Tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def write(path: str, data) -> str:
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def tree(top: str) -> Dict[str, bytes]:
    out = {}
    for dirpath, dirs, names in os.walk(top):
        for name in dirs + names:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, top)
            out[rel] = open(full, "rb").read() if os.path.isfile(full) else b"<dir>"
    return out


def assert_clean(code: int, out: str, err: str, want_code: int) -> None:
    assert code == want_code, (code, out, err)
    for text in (out, err):
        assert "Traceback" not in text
        assert "internal error" not in text


# --- 1. Ignition configs and MachineConfigs: node-agent validate -------------------------------------

VALIDATE = [
    # (id, contents, what the first line must start with / contain)
    ("empty", "", "empty document"),
    ("not-json", "{nope", "invalid JSON at line 1, column 2"),
    ("not-utf8", b"\xff\xfe\x00garbage", "not UTF-8"),
    ("array", "[]", "$: "),
    ("number", "42", "$: "),
    ("string", '"ignition"', "$: "),
    ("no-version", '{"storage":{}}', "$.ignition.version"),
    ("version-9", '{"ignition":{"version":"9.9.9"}}', "$.ignition.version"),
    ("version-2x", '{"ignition":{"version":"2.2.0"}}', "$.ignition.version"),
    ("version-number", '{"ignition":{"version":3.4}}', "$.ignition.version"),
    ("ignition-not-object", '{"ignition":"3.4.0"}', "$.ignition"),
    ("relative-path", W('"storage":{"files":[{"path":"etc/x"}]}'), "$.storage.files.0.path"),
    ("dotdot-path", W('"storage":{"files":[{"path":"/etc/../x"}]}'), "$.storage.files.0.path"),
    ("path-number", W('"storage":{"files":[{"path":5}]}'), "$.storage.files.0.path"),
    ("mode-string", W('"storage":{"files":[{"path":"/etc/x","mode":"644"}]}'), "$.storage.files.0.mode"),
    ("mode-too-big", W('"storage":{"files":[{"path":"/etc/x","mode":99999}]}'), "$.storage.files.0.mode"),
    ("ftp-source", W('"storage":{"files":[{"path":"/etc/x","contents":{"source":"ftp://h/x"}}]}'),
     "$.storage.files.0.contents.source"),
    ("bad-base64", W('"storage":{"files":[{"path":"/etc/x","contents":{"source":"data:;base64,@@@"}}]}'),
     "$.storage.files.0.contents.source"),
    ("md5-hash", W('"storage":{"files":[{"path":"/etc/x","contents":{"source":"data:,x",'
                 '"verification":{"hash":"md5-abc"}}}]}'), "$.storage.files.0.contents.verification.hash"),
    ("xz-compression", W('"storage":{"files":[{"path":"/etc/x","contents":{"source":"data:,x",'
                       '"compression":"xz"}}]}'), "$.storage.files.0.contents.compression"),
    ("duplicate-file", W('"storage":{"files":[{"path":"/etc/x"},{"path":"/etc/x"}]}'), "$.storage.files.1"),
    # Ignition blames the later entry in Go's field order (directories, files, links)
    ("file-and-dir", W('"storage":{"files":[{"path":"/etc/x"}],"directories":[{"path":"/etc/x"}]}'),
     "$.storage.files.0"),
    ("files-not-list", W('"storage":{"files":{"path":"/etc/x"}}'), "$.storage.files"),
    ("unit-no-name", W('"systemd":{"units":[{"enabled":true}]}'), "$.systemd.units.0.name"),
    ("unit-bad-suffix", W('"systemd":{"units":[{"name":"foo"}]}'), "$.systemd.units.0.name"),
    ("unit-bad-contents", W('"systemd":{"units":[{"name":"a.service","contents":"[Unit\\nX=1"}]}'),
     "$.systemd.units.0.contents"),
    # (a user without a name is valid in Ignition; a key given twice is not)
    ("user-same-key-twice", W('"passwd":{"users":[{"name":"a","sshAuthorizedKeys":["x","x"]}]}'),
     "$.passwd.users.0.sshAuthorizedKeys.1"),
    ("mc-yaml-error", "apiVersion: v1\nkind: MachineConfig\nspec: [\n", "invalid YAML at line 4"),
    ("mc-kargs-number", MC + "spec:\n  kernelArguments: 5\n", "$.spec.kernelArguments"),
    ("mc-config-relative-path", MC + "spec:\n  config:\n    ignition: {version: 3.4.0}\n"
                                     "    storage: {files: [{path: rel}]}\n", "$.spec.config.storage.files.0.path"),
    ("mc-kernel-type", MC + "spec:\n  kernelType: bogus\n", "$.spec.kernelType"),
    ("mc-fips-string", MC + "spec:\n  fips: maybe\n", "$.spec.fips"),
    ("mc-extensions-numbers", MC + "spec:\n  extensions: [1, 2]\n", "$.spec.extensions.0"),
    ("mc-osimage-number", MC + "spec:\n  osImageURL: 7\n", "$.spec.osImageURL"),
]


@pytest.mark.parametrize("contents,expect", [c[1:] for c in VALIDATE], ids=[c[0] for c in VALIDATE])
def test_validate_rejects(tmp_path, contents, expect):
    path = write(str(tmp_path / "input.cfg"), contents)
    before = tree(str(tmp_path))
    code, out, err = run_cli(["validate", path])
    assert_clean(code, out, err, 1)
    first = out.strip().splitlines()[0]
    if expect.startswith("$"):
        assert first.startswith(expect), out  # every problem line starts with its JSON path
        assert path in first, out  # ... and names the file
    else:
        assert expect in first and path in first, out
    assert tree(str(tmp_path)) == before


# --- 2. policies: node-agent plan --policy ---------------------------------------------------------

POLICIES = [
    ("yaml-error", "spec: [", "$", "not valid YAML"),
    ("not-mapping", "- a\n", "$", "MachineConfiguration"),
    ("wrong-kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "$.kind", "MachineConfiguration"),
    ("not-utf8", b"\xff\xfe\x00", "$", "YAML"),
    ("ndp-list", POL + "spec:\n  nodeDisruptionPolicy: []\n", "$.spec.nodeDisruptionPolicy", "mapping"),
    ("files-mapping", NDP + "    files: {path: /etc/x}\n", "$.spec.nodeDisruptionPolicy.files", "list"),
    ("relative-path", NDP + "    files:\n    - path: etc/x\n      actions: [{type: None}]\n",
     "$.spec.nodeDisruptionPolicy.files.0.path", "absolute"),
    ("no-actions", NDP + "    files:\n    - path: /etc/x\n", "$.spec.nodeDisruptionPolicy.files.0.actions", "required"),
    ("actions-string", NDP + "    files:\n    - path: /etc/x\n      actions: Reboot\n",
     "$.spec.nodeDisruptionPolicy.files.0.actions", "list"),
    ("unknown-type", NDP + "    files:\n    - path: /etc/x\n      actions: [{type: Explode}]\n",
     "$.spec.nodeDisruptionPolicy.files.0.actions.0.type", "Explode"),
    ("reboot-not-alone", NDP + "    files:\n    - path: /etc/x\n      actions: [{type: Reboot}, {type: Drain}]\n",
     "$.spec.nodeDisruptionPolicy.files.0.actions", "only action"),
    ("restart-no-service", NDP + "    files:\n    - path: /etc/x\n      actions: [{type: Restart}]\n",
     "$.spec.nodeDisruptionPolicy.files.0.actions.0.restart.serviceName", "serviceName"),
    ("reload-no-suffix", NDP + "    files:\n    - path: /etc/x\n      actions: [{type: Reload, reload: "
                               "{serviceName: chronyd}}]\n",
     "$.spec.nodeDisruptionPolicy.files.0.actions.0.reload.serviceName", "chronyd"),
    ("unit-bad-name", NDP + "    units:\n    - name: kubelet\n      actions: [{type: None}]\n",
     "$.spec.nodeDisruptionPolicy.units.0.name", "kubelet"),
    ("sshkey-list", NDP + "    sshkey: [1]\n", "$.spec.nodeDisruptionPolicy.sshkey", "actions"),
    ("sshkey-restart-no-service", NDP + "    sshkey:\n      actions: [{type: Restart}]\n",
     "$.spec.nodeDisruptionPolicy.sshkey.actions.0.restart.serviceName", "serviceName"),
    ("duplicate-path", NDP + "    files:\n    - path: /etc/x\n      actions: [{type: None}]\n"
                             "    - path: /etc/x\n      actions: [{type: None}]\n",
     "$.spec.nodeDisruptionPolicy.files.1.path", "duplicate"),
    ("missing-file", None, None, "no such file"),  # EX_NOINPUT (66), not an invalid policy
]


@pytest.mark.parametrize("contents,field,words", [c[1:] for c in POLICIES], ids=[c[0] for c in POLICIES])
def test_plan_rejects_policy(tmp_path, contents, field, words):
    cfg = write(str(tmp_path / "a.ign"), EMPTY_CFG)
    policy = str(tmp_path / "policy.yaml")
    if contents is not None:
        write(policy, contents)
    before = tree(str(tmp_path))
    code, out, err = run_cli(["plan", "--from", cfg, "--to", cfg, "--policy", policy, "--json"])
    assert_clean(code, out, err, 65 if field else 66)
    assert out == ""  # nothing half-printed on stdout
    assert policy in err and words in err, err
    assert not field or any(line.startswith(field + ":") for line in err.splitlines()), err
    assert tree(str(tmp_path)) == before


# --- 3. skew rules and aleph files: node-agent skew --------------------------------------------------

RULES = [
    ("empty", "", "$", "at least 'mode'"),
    ("yaml-error", "mode: [", "$", "JSON or YAML"),
    ("list", "[1,2]", "$", "not a list"),
    ("not-utf8", b"\xff\xfe", "$", "UTF-8"),
    ("bad-mode", '{"mode": "Sometimes"}', "$.mode", "Sometimes"),
    ("minimum-string", '{"mode": "Enforce", "minimum": "9.2"}', "$.minimum", "object"),
    ("minimum-bad-rhcos", '{"mode": "Enforce", "minimum": {"rhcosVersion": "nine"}}', "$.minimum.rhcosVersion", "nine"),
    ("minimum-unknown-key", '{"mode": "Enforce", "minimum": {"foo": "1"}}', "$.minimum.foo", "unknown field"),
    ("minimum-bad-ocp", '{"mode": "Enforce", "minimum": {"ocpVersion": "4.x"}}', "$.minimum.ocpVersion", "4.x"),
    ("target-rhel-string", '{"mode": "Enforce", "minimum": {"rhcosVersion": "9.2"}, "target": {"rhelMajor": "nine"}}',
     "$.target.rhelMajor", "integer"),
    ("allow-string", '{"mode": "Enforce", "minimum": {"rhcosVersion": "9.2"}, "allowMajorUpgrade": "yes"}',
     "$.allowMajorUpgrade", "true or false"),
    ("unknown-key", '{"mode": "None", "bogus": 1}', "$.bogus", "unknown field"),
    ("missing-file", None, None, "no such file"),  # EX_NOINPUT (66), not invalid rules
]


@pytest.mark.parametrize("contents,field,words", [c[1:] for c in RULES], ids=[c[0] for c in RULES])
def test_skew_rejects_rules(tmp_path, contents, field, words):
    rules = str(tmp_path / "rules.json")
    if contents is not None:
        write(rules, contents)
    code, out, err = run_cli(["skew", "--aleph", ALEPH_OK, "--rules", rules, "--json"])
    assert_clean(code, out, err, 65 if field else 66)
    assert out == ""
    assert words in err and rules in err, err
    assert not field or any(line.startswith(field + ":") for line in err.splitlines()), err


ALEPHS = [
    pytest.param("", "not valid JSON", id="empty"),
    pytest.param("{", "not valid JSON", id="not-json"),
    pytest.param("[]", "not a JSON object", id="list"),
    pytest.param('{"ref": "x"}', "neither 'version' nor 'build'", id="no-version"),
    pytest.param('{"version": 9.6}', "neither 'version' nor 'build'", id="version-number"),
    pytest.param(b"\xff\x00", "not valid JSON", id="not-utf8"),
    pytest.param(None, "does not exist", id="missing"),
    pytest.param('{"version": "banana"}', "banana", id="unknown-version"),
]


@pytest.mark.parametrize("contents,words", ALEPHS)
def test_skew_with_corrupt_aleph_warns_naming_the_file(tmp_path, contents, words):
    # Contract: an unknown booted version is a warning (exit 0), never a refusal or a crash.
    aleph = str(tmp_path / "aleph.json")
    if contents is not None:
        write(aleph, contents)
    code, out, err = run_cli(["skew", "--aleph", aleph, "--rules", RULES_OK, "--json"])
    assert_clean(code, out, err, 0)
    doc = json.loads(out)
    assert doc["decision"] == "warn"
    assert words in doc["reason"] and aleph in doc["reason"], doc["reason"]


# --- 4. agent.yaml: node-agent firstboot --root --settings -------------------------------------------

SETTINGS = [
    ("yaml-error", "fetch: [", "$", "not valid YAML at line 1"),
    ("tab-indent", "fetch:\n\tattemptTimeout: 1\n", "$", "line 2"),
    ("list", "- a", "$", "mapping"),
    ("scalar", "hello", "$", "mapping"),
    ("not-utf8", b"\xff\xfe", None, "not UTF-8"),
    ("fetch-list", "fetch: [1]", "fetch", "mapping"),
    ("total-negative", "fetch:\n  totalTimeout: -1\n", "fetch.totalTimeout", ">= 0"),
    ("attempt-zero", "fetch:\n  attemptTimeout: 0\n", "fetch.attemptTimeout", "> 0"),
    ("attempt-string", "fetch:\n  attemptTimeout: ten\n", "fetch.attemptTimeout", "'ten'"),
    ("delay-bool", "fetch:\n  initialDelay: true\n", "fetch.initialDelay", "True"),
    ("max-delay-nan", "fetch:\n  maxDelay: .nan\n", "fetch.maxDelay", "nan"),
    ("max-below-initial", "fetch:\n  initialDelay: 10\n  maxDelay: 1\n", "fetch.maxDelay", "fetch.initialDelay"),
    ("retry-after-huge", "fetch:\n  maxRetryAfter: 100000\n", "fetch.maxRetryAfter", "86400"),
    ("state-dir-relative", "stateDir: var/lib\n", "stateDir", "absolute"),
    ("node-name-upper", "nodeName: Node_1\n", "nodeName", "lower-case"),
    ("token-relative", "report:\n  tokenFile: token\n", "report.tokenFile", "absolute"),
    ("interval-zero", "update:\n  interval: 0\n", "update.interval", "> 0"),
    ("drain-string", "update:\n  drainTimeout: '10'\n", "update.drainTimeout", "'10'"),
    ("missing-file", None, None, "does not exist"),
]


@pytest.mark.parametrize("contents,field,words", [c[1:] for c in SETTINGS], ids=[c[0] for c in SETTINGS])
def test_firstboot_rejects_settings_and_writes_nothing(tmp_path, contents, field, words):
    top = str(tmp_path / "root")
    os.makedirs(os.path.join(top, "etc/node-agent"))
    write(os.path.join(top, "etc/node-agent/pointer.ign"), EMPTY_CFG)
    # an explicit, non-default path: it must exist (the default one missing means "all defaults")
    if contents is not None:
        write(os.path.join(top, "etc/node-agent/test-agent.yaml"), contents)
    before = tree(top)
    code, out, err = run_cli(["firstboot", "--root", top, "--settings", "/etc/node-agent/test-agent.yaml",
                              "--node-name", "n1"])
    assert_clean(code, out, err, 65)
    assert "/etc/node-agent/test-agent.yaml" in err and words in err, err
    if field:
        assert any(line.startswith(field + ":") for line in err.splitlines()), err
    assert tree(top) == before  # no state dir, no status.json, no stamp


# --- 5. server state files: load_state, and the last good state keeps serving -----------------------

POOL = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfigPool\n"
MCH = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\n"
STATE_FILES = [
    ("pool-yaml-error", "machineconfigpools/bad.yaml", "metadata: [", "$", "YAML"),
    ("pool-scalar", "machineconfigpools/bad.yaml", "just text\n", "$", "map"),
    ("pool-no-name", "machineconfigpools/bad.yaml", POOL + "metadata: {}\nspec: {}\n", "$.metadata.name", ""),
    ("pool-bad-name", "machineconfigpools/bad.yaml", POOL + "metadata: {name: Bad_Pool}\nspec: {}\n",
     "$.metadata.name", ""),
    ("pool-wrong-kind", "machineconfigpools/bad.yaml", MCH + "metadata: {name: x}\nspec: {}\n", "$.kind", ""),
    ("pool-selector-list", "machineconfigpools/bad.yaml",
     POOL + "metadata: {name: p}\nspec:\n  machineConfigSelector: [1]\n", "$.spec.machineConfigSelector", ""),
    ("mc-relative-path", "machineconfigs/99-bad.yaml",
     MCH + "metadata:\n  name: 99-bad\n  labels: {machineconfiguration.openshift.io/role: worker}\nspec:\n  config:\n"
           "    ignition: {version: 3.4.0}\n    storage: {files: [{path: etc/rel}]}\n",
     "$.spec.config.storage.files.0.path", ""),
    ("mc-bad-version", "machineconfigs/99-bad.yaml",
     MCH + "metadata: {name: 99-bad}\nspec:\n  config:\n    ignition: {version: 9.0.0}\n",
     "$.spec.config.ignition.version", ""),
    ("mc-not-utf8", "machineconfigs/99-bad.yaml", b"\xff\xfe\x00", "$", ""),
    ("mc-kargs-string", "machineconfigs/99-bad.yaml",
     MCH + "metadata: {name: 99-bad}\nspec:\n  kernelArguments: quiet\n", "$.spec.kernelArguments", ""),
    ("cluster-yaml-error", "machineconfiguration.yaml", "spec: [", "$", "YAML"),
    ("cluster-bad-policy", "machineconfiguration.yaml",
     POL + "spec:\n  nodeDisruptionPolicy:\n    files: [{path: rel, actions: [{type: None}]}]\n",
     "$.spec.nodeDisruptionPolicy.files.0.path", "absolute"),
]


def good_state(tmp_path) -> str:
    state = str(tmp_path / "state")
    shutil.copytree(os.path.join(EXAMPLES, "state"), state)
    return state


@pytest.mark.parametrize("rel,contents,field,words", [
    c if hasattr(c, "marks") else pytest.param(*c[1:], id=c[0]) for c in STATE_FILES])
def test_server_state_problem_names_file_and_field_and_good_objects_stay(tmp_path, rel, contents, field, words):
    from agent.server.store.stateformat import load_state

    state = good_state(tmp_path)
    good = load_state(state)
    assert not good.problems
    write(os.path.join(state, rel), contents)
    st = load_state(state)
    assert st.problems, "the bad file was accepted"
    hits = [p for p in st.problems if rel in (p.source or "") and str(p).startswith(field)]
    assert hits, [str(p) for p in st.problems]
    assert words in str(hits[0])
    # the valid objects of the same directory are still loaded
    assert {"worker", "master"} <= set(st.pools)


def test_server_keeps_serving_the_last_good_state_after_a_bad_edit(tmp_path, new_app):
    state = good_state(tmp_path)
    app = new_app(state, reload_interval=0.0)
    status, _, body = wsgi(app, "GET", "/config/worker")
    assert status == 200
    write(os.path.join(state, "machineconfigs/00-worker.yaml"), "metadata: [")  # a bad edit of a live file
    status, _, after = wsgi(app, "GET", "/config/worker")
    assert status == 200 and after == body  # the last good rendering still serves
    status, _, health = wsgi(app, "GET", "/healthz")
    doc = json.loads(health)
    assert doc["state"]["stale"] is True
    assert any(p["source"] == "machineconfigs/00-worker.yaml" for p in doc["state"]["problems"]), doc


def wsgi(app, method: str, path: str, body: bytes = b"", headers=None):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "t",
               "SERVER_PORT": "80", "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body)),
               "wsgi.url_scheme": "http"}
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    got = {}

    def start_response(status, hdrs):
        got["status"], got["headers"] = int(status.split()[0]), hdrs

    out = b"".join(app(environ, start_response))
    return got["status"], got["headers"], out


# --- 6. HTTP requests to the real server ------------------------------------------------------------

TOKEN = "campaign-token"  # the bootstrap token
BOOT = {"Authorization": f"Bearer {TOKEN}"}
AUTH = {"Authorization": "Bearer {n1}", "Content-Type": "application/json"}  # node n1's own credential
AS_N2 = {"Authorization": "Bearer {n2}", "Content-Type": "application/json"}  # another node's
REPORT = json.dumps({"pool": "worker", "state": "Done"}).encode()
HTTP = [
    # (id, method, path, headers, body, status, field or None, words)
    ("post-config", "POST", "/config/worker", {}, b"", 405, None, "not allowed"),
    ("delete-config", "DELETE", "/config/worker", {}, b"", 405, None, "not allowed"),
    ("put-pools", "PUT", "/api/v1/pools", {}, b"{}", 405, None, "not allowed"),
    ("get-report", "GET", "/api/v1/nodes/n1/report", {}, b"", 405, None, "not allowed"),
    ("unknown-pool", "GET", "/config/nosuchpool", {}, b"", 404, None, "unknown pool"),
    ("pool-uppercase", "GET", "/config/Worker", {}, b"", 400, "pool", "invalid pool name"),
    ("pool-underscore", "GET", "/config/my_pool", {}, b"", 400, "pool", "invalid pool name"),
    ("pool-too-long", "GET", "/config/" + "a" * 64, {}, b"", 400, "pool", "invalid pool name"),
    ("pool-percent-escape", "GET", "/config/%2e%2e", {}, b"", 400, "pool", "invalid pool name"),
    ("api-pool-bad-name", "GET", "/api/v1/pools/BAD!", BOOT, b"", 400, "pool", "invalid pool name"),
    ("api-no-credential", "GET", "/api/v1/pools", {}, b"", 401, "Authorization", "needs a credential"),
    ("unknown-route", "GET", "/nope", {}, b"", 404, None, "no such resource"),
    ("node-bad-name", "POST", "/api/v1/nodes/Bad_Node/report", AUTH, REPORT, 400, "node", "invalid node name"),
    ("report-no-token", "POST", "/api/v1/nodes/n1/report", {"Content-Type": "application/json"}, REPORT, 401,
     "Authorization", "own credential"),
    ("report-wrong-token", "POST", "/api/v1/nodes/n1/report",
     {"Authorization": "Bearer nope", "Content-Type": "application/json"}, REPORT, 401, None, "bearer token"),
    ("report-basic-auth", "POST", "/api/v1/nodes/n1/report",
     {"Authorization": "Basic dXNlcjpwYXNz", "Content-Type": "application/json"}, REPORT, 401, None, "credential"),
    ("report-not-json", "POST", "/api/v1/nodes/n1/report", AUTH, b"{pool", 400, "$", "not valid JSON"),
    ("report-empty", "POST", "/api/v1/nodes/n1/report", AUTH, b"", 400, "$", "JSON body is required"),
    ("report-text-type", "POST", "/api/v1/nodes/n1/report", {**AUTH, "Content-Type": "text/plain"}, REPORT, 415,
     None, "must be JSON"),
    ("report-array", "POST", "/api/v1/nodes/n1/report", AUTH, b"[]", 400, None, "invalid report"),
    ("report-no-pool", "POST", "/api/v1/nodes/n1/report", AUTH, b'{"state": "Done"}', 400, None, "pool"),
    ("report-bad-state", "POST", "/api/v1/nodes/n1/report", AUTH, b'{"pool": "worker", "state": "Happy"}', 400,
     None, "state"),
    ("report-not-utf8", "POST", "/api/v1/nodes/n1/report", AUTH, b"\xff\xfe", 400, "$", "not valid JSON"),
    ("drain-no-pool", "POST", "/api/v1/nodes/n1/drain", AUTH, b"{}", 400, "$.pool", "pool"),
    ("drain-unknown-pool", "POST", "/api/v1/nodes/n1/drain", AUTH, b'{"pool": "ghost"}', 404, "$.pool",
     "unknown pool"),
    ("drain-config-number", "POST", "/api/v1/nodes/n1/drain", AUTH, b'{"pool": "worker", "config": 5}', 400,
     "$.config", "string"),
    ("drain-no-token", "POST", "/api/v1/nodes/n1/drain", {"Content-Type": "application/json"},
     b'{"pool": "worker"}', 401, None, "credential"),
    # identity (agent/server/rollout/identity.py): each forgery names what is wrong and what to do
    ("report-as-another-node", "POST", "/api/v1/nodes/n1/report", AS_N2, REPORT, 403, "Authorization",
     "only node n1"),
    ("report-with-bootstrap", "POST", "/api/v1/nodes/n1/report", {**BOOT, "Content-Type": "application/json"},
     REPORT, 403, "Authorization", "only node n1"),
    ("report-ghost-node", "POST", "/api/v1/nodes/ghost/report", {**BOOT, "Content-Type": "application/json"},
     REPORT, 403, "Authorization", "not registered"),
    ("drain-as-another-node", "POST", "/api/v1/nodes/n1/drain", AS_N2, b'{"pool": "worker"}', 403, None,
     "node n2's"),
    ("release-another-nodes-lease", "DELETE", "/api/v1/nodes/n1/drain", AS_N2, b"", 403, None, "only node n1"),
    ("reregister-with-bootstrap", "POST", "/api/v1/nodes/n1/register", BOOT, b"", 403, None, "already registered"),
    ("register-no-token", "POST", "/api/v1/nodes/n9/register", {}, b"", 401, None, "bootstrap token"),
    ("register-with-a-node-credential", "POST", "/api/v1/nodes/n9/register", AS_N2, b"", 403, None,
     "bootstrap token"),
    ("delete-node-with-bootstrap", "DELETE", "/api/v1/nodes/n1", BOOT, b"", 403, None, "admin token"),
    ("member-fetch-by-header", "GET", "/config/worker", {"X-Node-Name": "n1"}, b"", 401, None, "names node n1"),
    ("member-fetch-by-query", "GET", "/config/worker?node=n1", BOOT, b"", 403, None, "names node n1"),
    ("member-fetch-as-another", "GET", "/config/worker?node=n1", AS_N2, b"", 403, None, "node n2's"),
    ("made-up-credential", "GET", "/config/worker", {"Authorization": "Bearer nac1_xyz"}, b"", 401, None,
     "not one this server issued"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.helpers.server_proc import ServerProcess

    state = str(tmp_path_factory.mktemp("badinput") / "state")
    shutil.copytree(os.path.join(EXAMPLES, "state"), state)
    with ServerProcess(state, token=TOKEN, workers=1, threads=4) as srv:
        yield srv
    assert "Traceback" not in srv.log_text()


@pytest.mark.parametrize("method,path,headers,body,status,field,words", [c[1:] for c in HTTP],
                         ids=[c[0] for c in HTTP])
def test_server_rejects_bad_request(server, method, path, headers, body, status, field, words):
    s = server.session(token=False)
    creds = {n: server.node_session(n).headers["Authorization"][7:] for n in ("n1", "n2")}
    headers = {k: v.format(**creds) if k == "Authorization" else v for k, v in headers.items()}
    # a raw path: requests must not normalise "%2e%2e" or case
    req = requests.Request(method, server.url("/"), headers=headers, data=body or None).prepare()
    req.url = server.base_url + path
    r = s.send(req, timeout=10)
    assert r.status_code == status, (r.status_code, r.text)
    if method != "HEAD":
        err = r.json()["error"]
        assert err["code"] == status and words.lower() in err["message"].lower(), err
        if field:
            assert err.get("field") == field, err
    assert "Traceback" not in r.text
    if status == 405:
        assert r.headers.get("Allow")
    if status == 401:
        assert r.headers.get("WWW-Authenticate", "").startswith("Bearer")


def test_server_survived_the_campaign(server):
    accept = "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"  # as node-agent asks
    r = server.session().get(server.url("/config/worker"), headers={"Accept": accept}, timeout=10)
    assert r.status_code == 200 and json.loads(r.content)["ignition"]["version"] == "3.4.0"


# --- 7. a sample as real processes: exit code and no traceback at the process level ------------------

SAMPLE = [
    (["validate", "{bad}"], "{nope", 1),
    (["plan", "--from", "{good}", "--to", "{good}", "--policy", "{bad}"], NDP + "    files: {path: /etc/x}\n", 65),
    (["skew", "--aleph", ALEPH_OK, "--rules", "{bad}"], '{"mode": "Sometimes"}', 65),
    (["plan", "--from", "{good}"], "", 2),
    (["nosuchcommand"], "", 2),
]


@pytest.mark.parametrize("argv,bad,code", SAMPLE, ids=["validate", "plan-policy", "skew-rules", "plan-usage",
                                                      "unknown-command"])
def test_real_process_sample(tmp_path, argv, bad, code):
    good = write(str(tmp_path / "good.ign"), EMPTY_CFG)
    badf = write(str(tmp_path / "bad.input"), bad)
    argv = [a.replace("{good}", good).replace("{bad}", badf) for a in argv]
    env = {k: v for k, v in os.environ.items() if k != "NODE_AGENT_DEBUG"}
    env["PYTHONPATH"] = REPO
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "agent"] + argv, capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=60)
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert proc.stderr.strip()  # says what was wrong
    assert time.monotonic() - start < 30
