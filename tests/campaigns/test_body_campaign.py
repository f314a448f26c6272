"""A hypothesis campaign over the report, register and drain bodies against each node store
(SQLite, etcd, the Kubernetes API): whatever a client sends (unicode of every plane, sizes up to
and past the limits, nesting, wrong types), the answer is never a 5xx (issue 39: 30,000 x "é"
answered 500 on the Kubernetes store, a config name the MachineConfigNode's CRD refused too).

In process: the WSGI app of each store on a copy of examples/state, a real etcd (one member) and
the session's real kube-apiserver. Modest example counts: about a minute per store.
"""

import io
import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.server.cluster.backends import StoreConfig
from agent.server.http.app import App
from agent.server.http.httpio import MAX_REPORT
from tests.helpers.etcd_cluster import EtcdCluster, have_etcd
from tests.helpers.kube_cluster import unique
from tests.helpers.server_proc import REPO

EXAMPLES = os.path.join(REPO, "examples", "state")
EXAMPLES_PER_ROUTE = 40
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

# -- what a client may send -------------------------------------------------------------------------

def repeated(alphabet, size):
    """Long text from a short drawn seed (hypothesis cannot draw thousands of characters one by one)."""
    return st.text(alphabet=alphabet, min_size=1, max_size=8).map(lambda seed: (seed * size)[:size])


text = st.one_of(st.text(max_size=40), repeated(st.characters(min_codepoint=0x80), 4096),
                 st.sampled_from(["worker", "master", "infra", "rendered-worker-1", "", "é" * 4096,
                                  "\U0001F600" * 1100, "a" * 254, "\x00", "Done"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_subnormal=False), text)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(text, inner, max_size=4)), max_leaves=12)
labels = st.one_of(values, st.dictionaries(st.text(max_size=330), st.text(max_size=70), max_size=300))
report_body = st.one_of(values, st.fixed_dictionaries(
    {"pool": st.one_of(st.just("worker"), text), "state": st.sampled_from(["Done", "Working", "Degraded", "x"])},
    optional={k: st.one_of(text, values) for k in ("currentConfig", "desiredConfig", "firstPivotConfig",
                                                   "currentImage", "desiredImage", "bootImage", "reason")}
    | {"skew": st.sampled_from(["ok", "warn", "refuse", "x"]), "labels": labels}))
wide = st.characters(min_codepoint=0x80, max_codepoint=0x7FF)  # 2 bytes each in UTF-8, 6 when escaped
near_limit = st.builds(  # within the 64 KiB limit as sent, 3 to 6 times past it if the store escapes it
    lambda reason, label, n: {"pool": "worker", "state": "Degraded", "reason": reason, "currentImage": reason,
                              "bootImage": reason, "labels": {f"k{i}": label for i in range(n)}},
    repeated(wide, 4096), repeated(wide, 63),
    st.integers(150, 256))
register_body = st.one_of(values, st.fixed_dictionaries({"credential": st.one_of(
    text, st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=43,
                  max_size=60).map(lambda s: "nac1_" + s))}))
drain_body = st.one_of(values, st.fixed_dictionaries({"pool": st.one_of(st.just("worker"), text),
                                                      "config": st.one_of(text, values)}))
encodings = st.sampled_from(["ascii", "utf8", "raw"])  # JSON escapes, UTF-8 as sent, or raw bytes
raw_bytes = st.binary(max_size=2000)


def encode(body, how):
    """Bytes as they are; a document as JSON (ASCII escapes or UTF-8), or cut in half ("raw")."""
    if isinstance(body, bytes):
        return body
    data = json.dumps(body, ensure_ascii=how == "ascii").encode("utf-8", "surrogatepass")
    return data[: len(data) // 2] if how == "raw" else data


def call(app, method, path, data):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "t",
               "SERVER_PORT": "80", "wsgi.input": io.BytesIO(data), "CONTENT_LENGTH": str(len(data)),
               "CONTENT_TYPE": "application/json", "wsgi.url_scheme": "http"}
    got = {}

    def start_response(status, headers):
        got["status"] = int(status.split()[0])

    out = b"".join(app(environ, start_response))
    return got["status"], out


def no_5xx(app, method, path, data):
    status, out = call(app, method, path, data)
    assert status < 500, (status, out[:500], data[:300])
    if len(data) > MAX_REPORT and path.endswith("/report"):
        assert status == 413, (status, out[:300])
    return status


def campaign(app):
    """Each route with its own bodies; a drain asked by a node that never reported, and by one
    that did (the lease then given back), so both paths of the drain are walked."""
    assert call(app, "POST", "/api/v1/nodes/seen/report",
                json.dumps({"pool": "worker", "state": "Done"}).encode())[0] == 200

    @settings(max_examples=EXAMPLES_PER_ROUTE, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(body=st.one_of(report_body, near_limit, raw_bytes), how=st.sampled_from(["utf8", "utf8", "ascii", "raw"]),
           node=st.one_of(st.just("seen"), st.integers(0, 10 ** 6).map("fresh-{}".format)))
    def reports(body, how, node):  # a new node each time too: its MachineConfigNode is made, not patched
        no_5xx(app, "POST", f"/api/v1/nodes/{node}/report", encode(body, how))

    @settings(max_examples=EXAMPLES_PER_ROUTE, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(body=st.one_of(register_body, raw_bytes), how=encodings, n=st.integers(0, 10 ** 6))
    def registers(body, how, n):
        no_5xx(app, "POST", f"/api/v1/nodes/reg-{n}/register", encode(body, how))

    @settings(max_examples=EXAMPLES_PER_ROUTE, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(body=st.one_of(drain_body, raw_bytes), how=encodings, node=st.sampled_from(["seen", "fresh-2"]))
    def drains(body, how, node):
        if no_5xx(app, "POST", f"/api/v1/nodes/{node}/drain", encode(body, how)) == 200:
            assert call(app, "DELETE", f"/api/v1/nodes/{node}/drain", b"")[0] == 200

    reports()
    registers()
    drains()
    big = json.dumps({"pool": "worker", "state": "Done", "reason": "é" * 40000}, ensure_ascii=False).encode()
    assert no_5xx(app, "POST", "/api/v1/nodes/seen/report", big) == 413


def state_copy(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLES, state)
    for leftover in state.glob("nodes.db*"):
        leftover.unlink()
    return str(state)


def test_no_body_gets_a_5xx_on_the_sqlite_store(tmp_path, new_app):
    data = tmp_path / "data"
    data.mkdir()
    campaign(new_app(state_copy(tmp_path), data_dir=str(data), reload_interval=3600))


@pytest.mark.skipif(not have_etcd(), reason="etcd is not installed (make sysdeps installs etcd-server)")
def test_no_body_gets_a_5xx_on_the_etcd_store(tmp_path):
    with EtcdCluster(str(tmp_path / "etcd"), size=1) as etcd:
        app = App(state_copy(tmp_path), store=StoreConfig(url=etcd.url, cache_dir=str(tmp_path / "cache")),
                  reload_interval=3600)
        try:
            campaign(app)
        finally:
            app.close()


def test_no_body_gets_a_5xx_on_the_kubernetes_store(tmp_path, kube_cluster):
    ns = unique("campaign")
    kube_cluster.kubectl("create", "namespace", ns)
    app = App(state_copy(tmp_path), reload_interval=3600,
              store=StoreConfig(url="kubernetes", kubeconfig=kube_cluster.admin_kubeconfig, namespace=ns))
    try:
        campaign(app)
    finally:
        app.close()
        kube_cluster.kubectl("delete", "machineconfignodes", "-l", f"node-agent.openshift.io/store={ns}",
                             "--wait=false", check=False)
        kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
