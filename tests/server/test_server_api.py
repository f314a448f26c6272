"""node-config-server's HTTP API against the real server process (gunicorn, TLS, bearer token)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import requests

from agent.core.served import read_served
from tests.helpers.certs import make_tls
from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

EXAMPLE = os.path.join(REPO, "examples", "state")
TOKEN = "t0ken-for-tests"
IGN = "application/vnd.coreos.ignition+json;version="
ANN = "machineconfiguration.openshift.io/"
LAYERED = "registry.example.com/infra/os-image@sha256:4b2c8e5d0f1a7c3e9b6d2a8f4c1e7b3d9a5f2c8e6b4d1a7f3c9e5b2d8a6f4c1e"


def copy_state(tmp_path):
    d = tmp_path / "state"
    shutil.copytree(EXAMPLE, d)
    return d


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls(str(tmp_path_factory.mktemp("tls")))


@pytest.fixture(scope="module")
def shared(tmp_path_factory, tls):
    state = copy_state(tmp_path_factory.mktemp("shared"))
    with ServerProcess(str(state), tls=tls, token=TOKEN) as srv:
        yield srv


def served(srv, pool, **kw):
    kw.setdefault("headers", {"Accept": IGN + "3.4.0, */*;q=0.1"})  # what node-agent and Ignition 2.15+ send
    r = srv.session().get(srv.url(f"/config/{pool}"), **kw)
    assert r.status_code == 200, r.text
    return read_served(r.json()), r


def pool_view(srv, pool):
    r = srv.session().get(srv.url(f"/api/v1/pools/{pool}"))
    assert r.status_code == 200, r.text
    return r.json()


def report(srv, node, **body):
    r = srv.node_session(node).post(srv.url(f"/api/v1/nodes/{node}/report"), json=body)
    assert r.status_code == 200, r.text
    return r.json()


# The server looks at the directory every second and reads a change 0.5 s (--settle-seconds)
# after it; 2.3 s of wall clock failed under load (a 2-core machine, each look a TLS request, 12 of
# them per every_worker), so the budget is generous but still below serve's default settle (10 s):
# a server that ignored --settle-seconds would fail.
PICKED_UP = 8.0


def edit_yaml(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


# -- serving ------------------------------------------------------------------------------------

def test_tls_is_real_and_plain_http_is_refused(shared):
    with pytest.raises(requests.exceptions.SSLError):
        s = requests.Session()
        s.trust_env = False
        s.get(shared.url("/healthz"))  # system trust store does not know the test CA
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(shared.url("/healthz").replace("https:", "http:"), timeout=5)


def test_config_with_additions_etag_and_head(shared):
    srv_served, r = served(shared, "worker")
    assert r.headers["Content-Type"] == IGN + "3.4.0"
    assert r.json()["ignition"]["version"] == "3.4.0"
    name = pool_view(shared, "worker")["status"]["served"]["config"]
    assert srv_served.config_name == name and srv_served.pool == "worker"
    assert srv_served.annotations[ANN + "state"] == "Done"
    assert srv_served.annotations[ANN + "currentConfig"] == name
    assert srv_served.encapsulated["spec"]["kernelArguments"] == ["systemd.unified_cgroup_hierarchy=1", "cgroup_no_v1=all"]
    assert srv_served.skew_rules["mode"] == "Enforce"
    # Manual rhcosVersion 9.2.20240101-0: compared by RHEL major.minor only (MCO status.go:796-856)
    assert srv_served.skew_rules["minimum"] == {"rhcosVersion": "9.2"}
    assert srv_served.skew_rules["target"]["rhelMajor"] == 9  # from rhel-coreos-9 in the image name
    assert srv_served.pool_info == {"pool": "worker", "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
                                    "servedConfig": name, "servedImage": srv_served.encapsulated["spec"]["osImageURL"]}
    assert "chronyd.service" in srv_served.policy_text
    etag = r.headers["ETag"]
    again = shared.session().get(shared.url("/config/worker"), headers={"If-None-Match": etag,
                                                                        "Accept": IGN + "3.4.0, */*;q=0.1"})
    assert again.status_code == 304 and again.content == b""
    head = shared.session().head(shared.url("/config/worker"), headers={"Accept": IGN + "3.4.0, */*;q=0.1"})
    assert head.status_code == 200 and head.content == b"" and head.headers["ETag"] == etag
    assert int(head.headers["Content-Length"]) == len(r.content)


def test_errors_are_json(shared):
    s = shared.session()
    r = s.get(shared.url("/config/nosuchpool"))
    assert r.status_code == 404 and r.json()["error"]["code"] == 404 and "worker" in r.json()["error"]["message"]
    r = s.get(shared.url("/config/Not_A_Pool"))
    assert r.status_code == 400 and "DNS-1123" in r.json()["error"]["message"]
    r = s.post(shared.url("/config/worker"), data=b"x")
    assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD"
    r = s.get(shared.url("/nothing/here"))
    assert r.status_code == 404 and r.json()["error"]["message"]


def test_reports_need_the_token_and_a_valid_body(shared):
    anon = shared.session(token=False)
    r = anon.post(shared.url("/api/v1/nodes/n1/report"), json={"pool": "worker", "state": "Done"})
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    bad = shared.session(token=False)
    bad.headers["Authorization"] = "Bearer wrong"
    assert bad.post(shared.url("/api/v1/nodes/n1/report"), json={"pool": "worker", "state": "Done"}).status_code == 401
    r = shared.node_session("n1").post(shared.url("/api/v1/nodes/n1/report"), json={"pool": "worker", "state": "Sleeping"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "$.state"
    r = shared.node_session("n1").post(shared.url("/api/v1/nodes/n1/report"), data=b"{not json",
                              headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert shared.session().get(shared.url("/api/v1/nodes/n1")).status_code == 404  # nothing stored


def test_metrics_and_healthz(shared):
    shared.session().get(shared.url("/config/master"))
    from tests.unit.test_metrics import samples

    key = ("node_config_server_requests_total", (("code", "200"), ("method", "GET"), ("pool", "master")))
    # Any worker answers the scrape with the counts of all of them (prometheus-client multiprocess
    # mode: each count is in a shared file before the answer is sent, so no wait is needed).
    got = samples(shared.session().get(shared.url("/metrics")).text)
    assert got.get(key, 0) >= 1
    assert [k for k in got if k[0] == "node_config_server_served_config_info" and ("pool", "infra") in k[1]
            and dict(k[1])["config"].startswith("rendered-infra-")]
    assert ("node_config_server_nodes", (("pool", "worker"), ("state", "Done"))) in got
    health = shared.session().get(shared.url("/healthz")).json()
    assert health["status"] == "ok" and health["state"]["problems"] == [] and health["schemaVersion"] >= 1


# -- gating and rollout -------------------------------------------------------------------------

def test_gating_a_second_change_is_the_target_at_once_and_the_state_survives_a_restart(tmp_path, tls):
    state = copy_state(tmp_path)
    with ServerProcess(str(state), tls=tls, token=TOKEN) as srv:
        c0 = pool_view(srv, "worker")["spec"]["configuration"]["name"]
        report(srv, "w1", pool="worker", state="Done", currentConfig=c0, desiredConfig=c0)
        # A new MachineConfig content: picked up without a restart (PICKED_UP).
        edit_yaml(state / "machineconfigs" / "00-worker.yaml", "- cgroup_no_v1=all", "- cgroup_no_v1=all\n  - quiet")
        view = settled_view(srv, "worker", lambda v: v["spec"]["configuration"]["name"] != c0 and
                            v["status"]["rollout"]["updating"], "new target, w1 targeted")
        t1 = view["spec"]["configuration"]["name"]
        assert view["status"]["configuration"]["name"] == c0  # current: w1 is not on t1 yet
        assert view["status"]["served"]["config"] == c0 and "no node runs the target" in view["status"]["served"]["reason"]
        assert view["status"]["rollout"]["updating"] == ["w1"]  # the server targeted it (maxUnavailable 1)
        pending = view["status"]["pendingDisruption"]  # a kernel argument change: reboot (and drain)
        assert pending["from"] == c0 and pending["to"] == t1 and pending["reboot"] is True
        assert [a["type"] for a in pending["actions"]] == ["Reboot"]
        assert served(srv, "worker")[0].config_name == c0  # a new node gets the proven config
        cluster = srv.session().get(srv.url("/api/v1/cluster")).json()
        assert not cluster["complete"] and cluster["pools"]["master"]["complete"]
        assert any(b["pool"] == "worker" and b["reason"].startswith("updating") for b in cluster["blocking"])
        # Another change while the rollout of t1 is incomplete: the target at once (a revert would be too),
        # and w1, targeted to t1 but not started on it (no report of it desires t1), takes t2 in its slot.
        edit_yaml(state / "machineconfigs" / "00-worker.yaml", "- quiet", "- quiet\n  - loglevel=3")
        view = settled_view(srv, "worker", lambda v: v["spec"]["configuration"]["name"] not in (c0, t1),
                            "the second change is the target")
        t2 = view["spec"]["configuration"]["name"]
        assert not view["status"]["held"]
        # A Done proves only a config served to that node as itself (docs/security.md "Identity"):
        # w1, a member, fetches with its credential and gets its desired config, t2.
        # (the step that retargets w1 follows each worker's reading of the change)
        got = wait_for(lambda: on_every_worker(
            lambda: srv.node_session("w1").get(srv.url("/config/worker"), headers={"Accept": IGN + "3.4.0"}),
            lambda r: r.status_code == 200 and r.headers["X-Served-Config"] == t2), "w1 is served t2", PICKED_UP)
        assert got.headers["X-Rollout"] == "updating"
        report(srv, "w1", pool="worker", state="Done", currentConfig=t2, desiredConfig=t2)
        # every node Done on the target: current moves (at the pool's next step, woken by the report)
        view = wait_for(lambda: (lambda v: v["status"]["configuration"]["name"] == t2 and v)(pool_view(srv, "worker")),
                        "the pool's current is t2", PICKED_UP)
        assert view["status"]["served"]["config"] == t2 and view["status"]["rollout"]["counts"] == {"Done": 1}
        history = [(h["field"], h["config"]) for h in view["status"]["history"]]
        assert ("target", t1) in history and ("target", t2) in history and ("current", t2) in history
        assert ("current", t1) not in history  # no node ever ran t1
        # Restart: history, reports, the rollout and pool state survive (SQLite).
        srv.stop()
        srv.start()
        after = pool_view(srv, "worker")
        assert after["spec"]["configuration"]["name"] == t2 and after["status"]["configuration"]["name"] == t2
        assert [(h["field"], h["config"]) for h in after["status"]["history"]] == history
        assert after["status"]["rollout"]["counts"] == {"Done": 1}
        assert srv.session().get(srv.url("/api/v1/nodes/w1")).json()["report"]["currentConfig"] == t2
        assert after["status"]["machineCount"] == 1 and after["status"]["updatedMachineCount"] == 1


def test_a_paused_pool_moves_its_target_and_targets_no_node(tmp_path, tls):
    state = copy_state(tmp_path)
    edit_yaml(state / "machineconfigpools" / "infra.yaml", "maxUnavailable: 1", "maxUnavailable: 1\n  paused: true")
    with ServerProcess(str(state), tls=tls, token=TOKEN) as srv:
        i0 = pool_view(srv, "infra")["spec"]["configuration"]["name"]
        report(srv, "i1", pool="infra", state="Done", currentConfig=i0, desiredConfig=i0)
        edit_yaml(state / "machineconfigs" / "50-infra.yaml", "      files:\n",
                  "      files:\n      - path: /etc/paused\n        contents:\n          source: data:,x\n")
        # As upstream's render controller: spec.configuration moves; the node controller targets nobody.
        view = settled_view(srv, "infra", lambda v: v["spec"]["configuration"]["name"] != i0,
                            "the paused pool's new target")
        i1 = view["spec"]["configuration"]["name"]
        assert view["status"]["configuration"]["name"] == i0 and view["status"]["rollout"]["waiting"] == ["i1"]
        conds = {c["type"]: c for c in view["status"]["conditions"]}
        assert conds["Updating"]["status"] == "False" and conds["Updating"]["message"] == \
            f"Pool is paused; will not update to MachineConfig {i1}"
        got = srv.node_session("i1").get(srv.url("/config/infra"), headers={"Accept": IGN + "3.4.0"})
        assert got.headers["X-Served-Config"] == i0 and got.headers["X-Rollout"] == "waiting"
        assert "paused" in got.headers["X-Rollout-Reason"]
        blocking = srv.session().get(srv.url("/api/v1/cluster")).json()["blocking"]
        assert any(b["pool"] == "infra" and "paused" in b["reason"] for b in blocking)
        from tests.unit.test_metrics import flags_of, samples

        got = samples(srv.session().get(srv.url("/metrics")).text)  # what NodePoolPaused reads
        assert flags_of(got, "infra")["paused"] == 1 and flags_of(got, "worker")["paused"] == 0


def test_layered_image_served_only_when_proven(tmp_path, tls):
    state = copy_state(tmp_path)
    with ServerProcess(str(state), tls=tls, token=TOKEN) as srv:
        target = pool_view(srv, "infra")["spec"]["configuration"]["name"]
        base = served(srv, "infra")[0].encapsulated["spec"]["osImageURL"]
        assert base.startswith("quay.io/openshift-release-dev/rhel-coreos-9")
        report(srv, "i1", pool="infra", state="Done", currentConfig=target, currentImage=base)
        view = pool_view(srv, "infra")
        assert view["status"]["updatedMachineCount"] == 0  # right config, not the layered image
        assert view["status"]["served"]["image"] == base
        report(srv, "i1", pool="infra", state="Done", currentConfig=target, currentImage=LAYERED)
        view = pool_view(srv, "infra")
        assert view["status"]["updatedMachineCount"] == 1 and view["status"]["served"]["image"] == LAYERED
        got = served(srv, "infra")[0]
        assert got.encapsulated["spec"]["osImageURL"] == LAYERED
        assert got.annotations[ANN + "currentImage"] == LAYERED and got.pool_info["servedImage"] == LAYERED
        # The build turns out failed: never served, whatever the nodes run.
        edit_yaml(state / "machineosbuilds" / "infra-build-1.yaml", "- type: Succeeded\n    status: \"True\"",
                  "- type: Succeeded\n    status: \"False\"")
        # Each of serve's workers reads the state directory on its own: each look may reach either,
        # and one may read the edit a reload later than the other (a fresh-clone CI saw the pool's
        # view in one and the config still layered in the other), so each state is waited for.
        def failed_build_seen():
            seen = pool_view(srv, "infra")["status"]["served"]
            return seen["image"] == base and "has not succeeded" in seen["reason"]

        wait_for(failed_build_seen, "build failure in the pool's view", PICKED_UP)
        wait_for(lambda: served(srv, "infra")[0].encapsulated["spec"]["osImageURL"] == base,
                 "build failure in the served config", PICKED_UP)


# -- custom pools ---------------------------------------------------------------------------------

def test_custom_pool_membership(tmp_path, tls):
    state = copy_state(tmp_path)
    (state / "machineconfigpools" / "gpu.yaml").write_text(
        "metadata: {name: gpu}\nspec:\n  machineConfigSelector: {matchLabels: {machineconfiguration.openshift.io/role: gpu}}\n"
        "  nodeSelector: {matchLabels: {node-role.kubernetes.io/gpu: ''}}\n")
    (state / "machineconfigs" / "50-gpu.yaml").write_text(
        "metadata: {name: 50-gpu, labels: {machineconfiguration.openshift.io/role: gpu}}\n"
        "spec: {kernelArguments: [iommu=pt]}\n")
    with ServerProcess(str(state), tls=tls, token=TOKEN) as srv:
        infra = pool_view(srv, "infra")["spec"]["configuration"]["name"]
        out = report(srv, "c1", pool="worker", state="Working", firstPivotConfig=infra)
        assert out["pool"] == "infra" and "custom pool infra" in out["membership"]
        assert pool_view(srv, "infra")["status"]["machineCount"] == 1
        assert pool_view(srv, "worker")["status"]["machineCount"] == 0
        r = srv.node_session("c1").get(srv.url("/config/worker?node=c1"))
        assert r.status_code == 409 and "custom pool infra" in r.json()["error"]["message"]
        r = srv.node_session("c1").get(srv.url("/config/worker"), headers={"X-Node-Name": "c1"})
        assert r.status_code == 409
        assert srv.node_session("c1").get(srv.url("/config/infra?node=c1")).status_code == 200
        # Labels of worker + one custom pool: the custom pool. Two custom pools: Degraded with the reason.
        out = report(srv, "c2", pool="worker", state="Done",
                     labels={"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": ""})
        assert out["pool"] == "gpu"
        out = report(srv, "c3", pool="worker", state="Done", labels={
            "node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": "", "node-role.kubernetes.io/infra": ""})
        assert "more than one custom pool" in out["degradedReason"]
        pool = pool_view(srv, out["pool"])
        assert pool["status"]["degradedMachineCount"] == 1
        assert "more than one custom pool" in pool["status"]["nodes"]["c3"]["degradedReason"]
        blocking = srv.session().get(srv.url("/api/v1/cluster")).json()["blocking"]
        assert any(b["pool"] == out["pool"] and b["reason"].startswith("degraded") for b in blocking)


# -- drains ----------------------------------------------------------------------------------------

def drain(srv, node, pool="infra", config="c"):
    # infra: maxUnavailable 1; these names are approved by the harness's rule, which never reaches
    # master (a rule-approved name gets no master lease: tests/server/test_kubelet_identity.py)
    return srv.node_session(node).post(srv.url(f"/api/v1/nodes/{node}/drain"), json={"pool": pool, "config": config})


LEASE_TTL = 8.0  # every held-lease step below must run within it: 1.5 s did not under load


def test_drain_leases(tmp_path, tls):
    state = copy_state(tmp_path)
    with ServerProcess(str(state), tls=tls, token=TOKEN, extra_args=["--lease-ttl", str(LEASE_TTL)]) as srv:
        assert srv.session(token=False).post(srv.url("/api/v1/nodes/m1/drain"),
                                             json={"pool": "master"}).status_code == 401
        for n in ("m1", "m2", "m3", "m4", "m5"):  # registered now, not inside a lease's lifetime
            srv.node_session(n)
        r = drain(srv, "m1")
        assert r.status_code == 200 and r.json()["status"] == "granted" and r.json()["maxUnavailable"] == 1
        r = drain(srv, "m2")
        assert r.status_code == 429 and r.json()["status"] == "wait" and r.json()["holders"] == ["m1"]
        assert int(r.headers["Retry-After"]) >= 1
        assert drain(srv, "m1").json()["renewed"] is True
        r = srv.node_session("m1").delete(srv.url("/api/v1/nodes/m1/drain"))
        assert r.json()["released"] is True and r.json()["actions"] == ["uncordon"]
        assert drain(srv, "m2").status_code == 200
        # m2 dies and never renews: its lease expires and frees the slot.
        # (Each lease below must outlive the few requests that follow its grant: the TTL leaves
        # them LEASE_TTL seconds; the expiry itself is waited for with room.)
        wait_for(lambda: drain(srv, "m3").status_code == 200, "lease expiry", LEASE_TTL + 30)
        # A Done report on the leased config releases the lease too.
        report(srv, "m3", pool="infra", state="Done", currentConfig="c")
        assert drain(srv, "m4").status_code == 200
        assert pool_view(srv, "infra")["status"]["drain"] == {"maxUnavailable": 1, "holders": ["m4"]}
        r = drain(srv, "m5", pool="nosuch")
        assert r.status_code == 404 and r.json()["error"]["field"] == "$.pool"
        # The record of cordon/drain/uncordon, with the reason, is kept per node.
        events = [(e["action"], e["detail"]) for e in
                  srv.session().get(srv.url("/api/v1/nodes/m3")).json()["drainEvents"]]
        assert [a for a, _ in events] == ["cordon", "drain", "uncordon"] and events[-1][1] == "node reported Done"


# -- bad state ---------------------------------------------------------------------------------------

def test_invalid_object_keeps_last_good_state(tmp_path, tls):
    state = copy_state(tmp_path)
    with ServerProcess(str(state), tls=tls, token=TOKEN) as srv:
        before = served(srv, "worker")[1]
        # Written whole (temp file, then rename): a watcher that catches a file half-written waits
        # for it to settle again (0.5 s more).
        (tmp_path / "99-broken.yaml").write_text(
            "metadata: {name: 99-broken, labels: {machineconfiguration.openshift.io/role: worker}}\n"
            "spec: {kernelType: turbo}\n")
        os.replace(tmp_path / "99-broken.yaml", state / "machineconfigs" / "99-broken.yaml")
        # Each gunicorn worker has its own watcher: wait until every worker serves the stale state
        # (fresh connections land on any worker), then until every worker has recovered.
        # This once failed in CI even at 10 s: a worker that booted after the write reported
        # stale: false (tests/server/test_state_watcher.py::test_a_process_started_on_a_bad_directory_*).
        health = wait_for(lambda: every_worker(srv, lambda h: h["state"]["stale"]), "stale state", PICKED_UP)
        problem = health["state"]["problems"][0]
        assert problem["source"] == "machineconfigs/99-broken.yaml" and problem["path"] == "$.spec.kernelType"
        after = served(srv, "worker")[1]
        assert after.headers["ETag"] == before.headers["ETag"]  # the last good state keeps serving
        warnings = srv.session().get(srv.url("/api/v1/cluster")).json()["warnings"]
        assert any("99-broken.yaml" in w for w in warnings)
        # One worker says it (agent/server/http/saidonce.py): it claims the saying, then logs; the
        # other may serve the stale state meanwhile, so the line is waited for, not read at once.
        wait_for(lambda: "99-broken.yaml" in srv.log_text() and "$.spec.kernelType" in srv.log_text(),
                 "the problem in the server's log", 60)
        (state / "machineconfigs" / "99-broken.yaml").unlink()
        wait_for(lambda: every_worker(srv, lambda h: not h["state"]["stale"]), "recovery on every worker", PICKED_UP)


def every_worker(srv, predicate, probes=12):
    """The last /healthz answer when ``predicate`` holds for all of ``probes`` fresh connections."""
    return on_every_worker(lambda: srv.session().get(srv.url("/healthz")).json(), predicate, probes)


def on_every_worker(look, predicate, probes=12):
    """The last of ``probes`` looks in a row when ``predicate`` holds for each, else None. Each
    look is a fresh connection, which either of serve's workers may take, and each worker reads
    the state directory on its own: a state seen in one look may not be the next look's yet."""
    value = None
    for _ in range(probes):
        value = look()
        if not predicate(value):
            return None
    return value


def settled_view(srv, pool, predicate, what, timeout=PICKED_UP):
    """The pool's view once ``predicate`` holds for it on every worker (on_every_worker)."""
    return wait_for(lambda: on_every_worker(lambda: pool_view(srv, pool), predicate), what, timeout)


# -- command line ---------------------------------------------------------------------------------------

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "agent.server.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def test_cli(tmp_path):
    state = copy_state(tmp_path)
    r = run_cli("serve", "--state", str(state), "--backend", "kubernetes")
    assert r.returncode == 2 and "--state and --backend kubernetes exclude each other" in r.stderr
    r = run_cli("--version")
    assert r.returncode == 0 and "node-config-server" in r.stdout
    r = run_cli("render", "--state", str(state))
    assert r.returncode == 0
    names = dict(line.split("\t") for line in r.stdout.splitlines())
    assert set(names) == {"master", "worker", "infra"} and names["infra"].startswith("rendered-infra-")
    r = run_cli("status", "--state", str(state), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["complete"] is True
    assert not (state / "nodes.db").exists()  # asked to read the directory, status writes nothing there
    r = run_cli("status", "--stat", str(state))  # no abbreviations
    assert r.returncode == 2
    r = run_cli("serve", "--state", str(state), "--tls-cert", "x.pem")
    assert r.returncode == 2 and "go together" in r.stderr
    (state / "machineconfigs" / "bad.yaml").write_text("metadata: {name: BAD}\n")
    r = run_cli("render", "--state", str(state))
    assert r.returncode == 65 and "machineconfigs/bad.yaml" in r.stderr
