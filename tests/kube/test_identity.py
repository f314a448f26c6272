"""Per-node identity and secrets behind credentials (issue 16), in process on the WSGI app, on
all three node stores (SQLite, a real etcd cluster: the session fixture of tests/conftest.py, and the
Kubernetes API: tests/helpers/kube_cluster.py).

Every forgery the issue lists is refused with 401/403 and a JSON error naming what and what to
do: a report, a drain lease or its release as another node, moving a node between pools, a
member fetch naming a node (``?node=`` / ``X-Node-Name``) without its credential, re-registering
an existing node with the bootstrap token. A node can be deleted (admin) and counts stay right.
"""

import base64
import io
import json
import os
import shutil
import time

import pytest

from agent.server.cluster.backends import StoreConfig
from agent.server.http.app import App
from agent.server.rollout.identity import CREDENTIAL_PREFIX, credential_hash
from agent.server.store.kube.nodestore import STORE_LABEL
from tests.helpers.kube_cluster import unique
from tests.helpers.server_proc import REPO

EXAMPLE = REPO + "/examples/state"
BOOT, ADMIN = "boot-token", "admin-token"
SECRET_B64 = base64.b64encode(b'{"auths": {"quay.io": {"auth": "dXNlcjpwYXNz"}}}').decode()
PULL_SECRET = """apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata: {name: 99-worker-pull-secret, labels: {machineconfiguration.openshift.io/role: worker}}
spec:
  config:
    ignition: {version: 3.4.0}
    storage:
      files:
      - path: /var/lib/kubelet/config.json
        contents: {source: "data:;base64,SECRET"}
""".replace("SECRET", SECRET_B64)


def call(app, method, path, token=None, body=None, headers=None, query=""):
    raw = json.dumps(body).encode() if body is not None else b""
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "wsgi.input": io.BytesIO(raw),
               "CONTENT_LENGTH": str(len(raw)), "CONTENT_TYPE": "application/json" if raw else ""}
    if token:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    got = {}
    out = b"".join(app(environ, lambda status, hdrs: got.update(status=int(status.split()[0]), headers=dict(hdrs))))
    doc = json.loads(out) if out and got["headers"].get("Content-Type", "").startswith("application/json") else out
    return got["status"], doc


def refused(answer, code, *words):
    status, doc = answer
    assert status == code, (status, doc)
    message = doc["error"]["message"]
    for w in words:
        assert w in message, message
    return message


# "etcd" and "kube" use a session cluster (tests/conftest.py): their tests run where its others do
@pytest.fixture(params=["sqlite", pytest.param("etcd", marks=pytest.mark.xdist_group("etcd")),
                        pytest.param("kube", marks=pytest.mark.xdist_group("kube"))])
def app(request, tmp_path):
    """The app on each node store. "kube": state objects from the examples directory (the
    directory backend), node state in the Kubernetes API (--store kubernetes) in a namespace of
    the test's own."""
    state = tmp_path / "state"
    shutil.copytree(EXAMPLE, state)
    (state / "machineconfigs" / "99-worker-pull-secret.yaml").write_text(PULL_SECRET)
    store = None
    if request.param == "etcd":
        cluster = request.getfixturevalue("etcd_cluster")
        store = StoreConfig(url=f"{cluster.url}/ident-{request.node.name.replace('[', '-').rstrip(']')}/")
    elif request.param == "kube":
        kc = request.getfixturevalue("kube_cluster")
        namespace = unique("ident")
        kc.kubectl("create", "namespace", namespace)
        kc.kubectl("create", "namespace", namespace + "-credentials")  # serve's default for node credentials
        store = StoreConfig(url="kubernetes", kubeconfig=kc.admin_kubeconfig, namespace=namespace)
    a = App(str(state), token=BOOT, admin_token=ADMIN, reload_interval=0.0, store=store)
    yield a
    if store is not None and store.is_etcd:
        a.cluster.store.client.delete(a.cluster.store.prefix, prefix=True)
    a.close()
    if store is not None and not store.is_etcd:
        a.cluster.store.client.close()
        kc.kubectl("delete", "machineconfignodes", "-l", f"{STORE_LABEL}={namespace}", "--wait=false", check=False)
        for ns in (namespace, namespace + "-credentials"):
            kc.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def register(app, node, token=BOOT, approve=True):
    """Register ``node``; on a server with an admin token (which approves new names) the admin
    approves it too, unless ``approve`` is False (tests/server/test_approval.py checks what a pending
    name may not do)."""
    status, doc = call(app, "POST", f"/api/v1/nodes/{node}/register", token)
    assert status == 201, doc
    assert doc["credential"].startswith(CREDENTIAL_PREFIX)
    if approve and app.auth.admin and token != ADMIN:
        assert doc["approval"] == "Pending"
        status, out = call(app, "POST", f"/api/v1/nodes/{node}/approve", ADMIN)
        assert status == 200 and out["state"] == "Approved", out
    return doc["credential"]


def report(app, node, token, **body):
    return call(app, "POST", f"/api/v1/nodes/{node}/report", token, dict({"pool": "worker", "state": "Done"}, **body))


def target(app):
    return call(app, "GET", "/api/v1/pools/worker", ADMIN)[1]["spec"]["configuration"]["name"]


def test_register_once_then_only_the_node_acts_as_itself(app):
    a, b = register(app, "node-a"), register(app, "node-b")
    # The store keeps only the hash of each credential.
    assert app.cluster.store.credential("node-a") == credential_hash(a) != a
    assert report(app, "node-a", a)[0] == 200
    # Forged reports: another node's credential, the bootstrap token, the admin token, nobody.
    refused(report(app, "node-a", b), 403, "node node-b's", "only node node-a")
    refused(report(app, "node-a", BOOT), 403, "only node node-a", "bootstrap token")
    refused(report(app, "node-a", ADMIN), 403, "only node node-a")
    refused(report(app, "node-a", None), 401, "node node-a's own credential")
    refused(report(app, "node-a", "nac1_made-up"), 401, "not one this server issued")
    # A node that never registered cannot report, even with the bootstrap token: register first.
    refused(report(app, "ghost-1", BOOT), 403, "not registered", "/api/v1/nodes/ghost-1/register")
    # Moving a node between pools takes a report as that node: refused the same way.
    infra = call(app, "GET", "/api/v1/pools/infra", ADMIN)[1]["spec"]["configuration"]["name"]
    refused(report(app, "node-a", b, pool="infra", currentConfig=infra), 403)
    assert call(app, "GET", "/api/v1/nodes/node-a", ADMIN)[1]["pool"] == "worker"


def test_reregistering_needs_the_admin(app):
    old = register(app, "node-a")
    refused(call(app, "POST", "/api/v1/nodes/node-a/register", BOOT), 403, "already registered", "admin")
    refused(call(app, "POST", "/api/v1/nodes/node-b/register", old), 403, "bootstrap token")
    refused(call(app, "POST", "/api/v1/nodes/node-b/register"), 401, "bootstrap token")
    status, doc = call(app, "POST", "/api/v1/nodes/node-a/register", ADMIN)
    assert status == 200 and doc["rotated"] is True
    refused(report(app, "node-a", old), 401)  # the old credential stopped working at once
    assert report(app, "node-a", doc["credential"])[0] == 200


def test_drain_leases_belong_to_their_node(app):
    a, b = register(app, "node-a"), register(app, "node-b")
    lease = {"pool": "worker", "config": "c"}
    assert call(app, "POST", "/api/v1/nodes/node-a/drain", a, lease)[0] == 200
    refused(call(app, "POST", "/api/v1/nodes/node-a/drain", b, lease), 403, "node node-b's")
    refused(call(app, "DELETE", "/api/v1/nodes/node-a/drain", b), 403, "only node node-a")
    refused(call(app, "DELETE", "/api/v1/nodes/node-a/drain", BOOT), 403)
    assert [h["node"] for h in app.cluster.store.leases(pool="worker")] == ["node-a"]
    # The admin may release a stuck lease.
    status, doc = call(app, "DELETE", "/api/v1/nodes/node-a/drain", ADMIN)
    assert status == 200 and doc["released"] is True


def test_member_fetch_needs_the_nodes_credential(app):
    a = register(app, "member-1")
    assert report(app, "member-1", a, currentConfig=target(app))[0] == 200
    forged = [({"X-Node-Name": "member-1"}, ""), ({}, "node=member-1")]
    for headers, query in forged:
        for token in (None, BOOT):
            refused(call(app, "GET", "/config/worker", token, headers=headers, query=query),
                    401 if token is None else 403, "names node member-1", "credential")
    other = register(app, "node-b")
    refused(call(app, "GET", "/config/worker", other, query="node=member-1"), 403, "node node-b's")
    status, _ = call(app, "GET", "/config/worker", a, query="node=member-1")
    assert status == 200
    assert call(app, "GET", "/config/worker", a)[0] == 200  # its credential alone names it


def test_gate_is_not_bypassed_by_a_name(app):
    """A new target proven by no node: a new node gets the current config, a member the target;
    naming the member without its credential does not get the target."""
    a = register(app, "member-1")
    old = target(app)
    assert report(app, "member-1", a, currentConfig=old)[0] == 200
    path = os.path.join(app.state_dir, "machineconfigs", "99-worker-new.yaml")
    with open(path, "w") as f:
        f.write(PULL_SECRET.replace("99-worker-pull-secret", "99-worker-new").replace(
            "/var/lib/kubelet/config.json", "/etc/new-file"))
    past = time.time() - 5  # older than the watcher's settle time: read at the next look
    os.utime(path, (past, past))
    os.utime(os.path.dirname(path), (past, past))
    new = target(app)
    assert new != old
    status, body = call(app, "GET", "/config/worker", BOOT)
    assert status == 200 and "/etc/new-file" not in body.decode()  # unproven: not served to new nodes
    for headers, query in ([{"X-Node-Name": "member-1"}, ""], [{}, "node=member-1"]):
        assert call(app, "GET", "/config/worker", BOOT, headers=headers, query=query)[0] == 403
    status, body = call(app, "GET", "/config/worker", a)
    assert status == 200 and "/etc/new-file" in body.decode()


def test_secrets_need_a_credential_and_non_secret_configs_stay_anonymous(app):
    message = refused(call(app, "GET", "/config/worker"), 401, "/var/lib/kubelet/config.json", "httpHeaders")
    assert "bootstrap token" in message
    assert call(app, "GET", "/config/worker", BOOT)[0] == 200
    assert call(app, "GET", "/config/worker", register(app, "n1"))[0] == 200
    assert call(app, "GET", "/config/master")[0] == 200  # no secret in it: as the MCS, for stock Ignition
    assert call(app, "GET", "/healthz")[0] == 200 and call(app, "GET", "/metrics")[0] == 200


def test_get_apis_need_a_credential(app):
    for path in ("/api/v1/pools", "/api/v1/pools/worker", "/api/v1/cluster", "/api/v1/nodes", "/api/v1/nodes/n1"):
        refused(call(app, "GET", path), 401, "needs a credential")
        answered = 404 if path == "/api/v1/nodes/n1" else 200  # no node n1: past the credential check
        assert call(app, "GET", path, BOOT)[0] == answered, path


def test_admin_deletes_a_node_and_counts_stay_right(app):
    a, b = register(app, "node-a"), register(app, "node-b")
    t = target(app)
    assert report(app, "node-a", a, currentConfig=t)[0] == 200
    assert report(app, "node-b", b, currentConfig=t)[0] == 200
    assert call(app, "POST", "/api/v1/nodes/node-a/drain", a, {"pool": "worker", "config": t})[0] == 200
    refused(call(app, "DELETE", "/api/v1/nodes/node-a", BOOT), 403, "admin token")
    refused(call(app, "DELETE", "/api/v1/nodes/node-a", a), 403, "admin token")
    refused(call(app, "DELETE", "/api/v1/nodes/node-a"), 401, "admin token")
    status, doc = call(app, "DELETE", "/api/v1/nodes/node-a", ADMIN)
    assert status == 200 and doc == {"node": "node-a", "deleted": True, "pool": "worker", "leaseReleased": True}
    store = app.cluster.store
    assert store.node("node-a") is None and store.credential("node-a") is None
    assert store.credential_owner(credential_hash(a)) is None
    assert store.leases(pool="worker") == []
    assert store.counts("worker").machine == 1 and store.proof("worker", t).updated == 1
    view = call(app, "GET", "/api/v1/pools/worker", ADMIN)[1]["status"]
    assert view["machineCount"] == 1 and view["updatedMachineCount"] == 1
    refused(report(app, "node-a", a), 401)  # its credential went with it
    assert call(app, "GET", "/api/v1/nodes/node-a", ADMIN)[0] == 404
    # The name can be registered again (a reinstalled machine), with the bootstrap token.
    assert report(app, "node-a", register(app, "node-a"))[0] == 200
    assert call(app, "DELETE", "/api/v1/nodes/never-was", ADMIN)[1]["deleted"] is False


def test_open_server_protects_registered_nodes_and_withholds_secrets(tmp_path, new_app):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLE, state)
    (state / "machineconfigs" / "99-worker-pull-secret.yaml").write_text(PULL_SECRET)
    app = new_app(str(state), reload_interval=0.0)
    refused(call(app, "GET", "/config/worker"), 403, "no --token-file", "--serve-secrets-anonymously")
    assert report(app, "legacy", None)[0] == 200  # never registered: taken at its word (a lab)
    cred = register(app, "n1", token=None)
    refused(report(app, "n1", None), 401, "node n1's own credential")
    assert report(app, "n1", cred)[0] == 200
    refused(call(app, "GET", "/config/master", query="node=n1"), 401, "names node n1")
    mcs = new_app(str(state), reload_interval=0.0, anonymous_secrets=True)
    assert call(mcs, "GET", "/config/worker")[0] == 200
