"""A pool's alert gate holds its rollout (issue 56; agent/server/rollout/alertgate.py), against a real
Prometheus (Debian's ``prometheus``, as ``make sysdeps`` installs it): it scrapes a gauge this test
serves and flips, and evaluates a rule that fires while the gauge is 1. The server runs in process
(the directory backend) with ``StoreConfig(prometheus_url=...)``, as ``serve --prometheus-url``
makes it. Its helpers are the maintenance window test's (tests/server/test_maintenance_window.py).

Every wait is for a state (Prometheus's own answer, or the pool's), never a fixed time. No
Prometheus binary is a failure, never a skip."""

import os
import signal
import subprocess

import pytest
import requests

from agent.server.cli import views
from agent.server.cli.main import build_parser
from agent.server.cluster.alertsource import MAX_BYTES, PrometheusAlerts, check_url
from agent.server.cluster.backends import StoreConfig
from agent.server.http.app import App
from agent.server.rollout import progress
from agent.server.rollout.alertgate import ANNOTATION, UNREACHABLE
from tests.helpers.httpserver import Reply, ScriptedServer, free_port
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for
from tests.server.test_maintenance_window import fetch, new_target, pool, report, target
from tests.server.test_server_api import TOKEN, copy_state, edit_yaml, pool_view, tls  # noqa: F401

PROMETHEUS = "/usr/bin/prometheus"
PICKED_UP = 30
NODES = ("w0", "w1", "w2")
ALERT = "NodeConfigTestAlert"
PATTERN = "NodeConfig.*Alert|Etcd.*"
RULES = f"""groups:
- name: node-config-test
  rules:
  - alert: {ALERT}
    expr: node_config_test_gate == 1
    for: 0s
  - alert: Watchdog
    expr: vector(1)
"""


@pytest.fixture
def prometheus(tmp_path_factory):
    """(Prometheus's URL, the gauge's value as a one-item list, the process): one per test that
    needs one (about a second to start), as one of them kills it."""
    assert os.access(PROMETHEUS, os.X_OK), f"{PROMETHEUS} is missing: apt-get install prometheus (make sysdeps)"
    gauge = [0]
    exporter = ScriptedServer().start()
    exporter.always("/metrics", lambda _: Reply(200, f"# TYPE node_config_test_gate gauge\n"
                                                     f"node_config_test_gate {gauge[0]}\n",
                                                {"Content-Type": "text/plain; version=0.0.4"}))
    home = tmp_path_factory.mktemp("prometheus")
    (home / "rules.yml").write_text(RULES)
    (home / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yml]\nscrape_configs:\n"
        f"- job_name: exporter\n  static_configs:\n  - targets: ['{exporter.netloc}']\n")
    port = free_port()
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={home / 'prometheus.yml'}",
                             f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(home / "prometheus.log", "wb"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: "Watchdog" in firing_now(url), "Prometheus up and evaluating its rules", 60)
        yield url, gauge, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        exporter.stop()


def firing_now(url):
    """The alerts Prometheus itself says fire (the test's own look, beside the server's)."""
    try:
        doc = requests.get(f"{url}/api/v1/alerts", timeout=5).json()
    except (requests.RequestException, ValueError):  # ValueError: requests 2.25 (RHEL 9) on a body
        return []  # that is not JSON, as Prometheus's 503 text while it starts (a CI run failed so)
    return [a["labels"]["alertname"] for a in doc["data"]["alerts"] if a["state"] == "firing"]


@pytest.fixture
def served(tmp_path, prometheus):
    url, gauge, proc = prometheus
    state = copy_state(tmp_path)
    edit_yaml(state / "machineconfigpools" / "worker.yaml", 'maxUnavailable: "25%"', "maxUnavailable: 1")
    app = App(str(state), reload_interval=0.0, store=StoreConfig(prometheus_url=url))
    yield state, app, prometheus
    app.close()


def annotate(state, annotations):
    lines = "".join(f"    {k}: '{v}'\n" for k, v in annotations.items())
    path = state / "machineconfigpools" / "worker.yaml"
    text = path.read_text()
    if "  annotations:\n" not in text:
        edit_yaml(path, "  name: worker\n", "  name: worker\n  annotations:\n")
    edit_yaml(path, "  annotations:\n", "  annotations:\n" + lines)


def rollout_where(app, check, what):
    return wait_for(lambda: (lambda r: check(r) and r)(pool(app)["status"]["rollout"]), what, PICKED_UP)


def test_a_firing_alert_holds_the_pool_until_it_stops_and_an_unanswering_prometheus_holds_it_until_overridden(
        served):
    state, app, (url, gauge, proc) = served
    annotate(state, {ANNOTATION: PATTERN})
    a = target(app)
    for node in NODES:
        report(app, node, a)
    b = new_target(app, state, "/etc/b", (a,))
    rollout = rollout_where(app, lambda r: r.get("updating") == ["w0"] and r.get("alerts"),
                            "w0 targeted while no matching alert fires")
    assert rollout["alerts"] == {"pattern": PATTERN, "holding": False, "firing": [], "count": 0}  # Watchdog fires

    gauge[0] = 1  # the rule fires: no node is newly targeted, w0 finishes
    wait_for(lambda: ALERT in firing_now(url), "Prometheus fires the alert", PICKED_UP)
    rollout = rollout_where(app, lambda r: (r.get("alerts") or {}).get("holding"), "the pool holds on the alert")
    assert rollout["alerts"] == {"pattern": PATTERN, "holding": True, "firing": [ALERT], "count": 1}
    assert rollout["waitReason"] == (f"alerts fire that the pool's alert gate ({PATTERN}) waits for: {ALERT}; "
                                     f"nothing is newly targeted until they stop; 2 node(s) wait for it: w1, w2")
    assert rollout["updating"] == ["w0"] and "estimate" not in rollout
    assert fetch(app, "w0")[:2] == (b, "updating")
    served_w1, turn, why = fetch(app, "w1")
    assert (served_w1, turn) == (a, "waiting") and f"waits for: {ALERT}" in why
    report(app, "w0", b)  # w0 finishes; the report steps the pool: nobody takes its slot
    after = pool(app)
    assert "updating" not in after["status"]["rollout"] and after["status"]["rollout"]["waiting"] == ["w1", "w2"]
    assert f"Alert gate:          {PATTERN}: HOLDING, 1 alert(s) fire: {ALERT}" in views.describe_pool(after, 0.0)
    assert gate_metrics(app) == {"holding": 1, "failed_closed": 0}  # held by design: no page
    assert f"worker: HOLDING on alerts: {PATTERN}: HOLDING, 1 alert(s) fire: {ALERT}" in \
        views.pools_table([after], 0.0, width=None)
    assert f"held by its alert gate ({PATTERN}): 1 alert(s) fire: {ALERT}" in progress.pool_blocking("worker", after)

    gauge[0] = 0  # the alert stops: the rollout goes on
    rollout_where(app, lambda r: r.get("updating") == ["w1"] and not r["alerts"]["holding"],
                  "w1 targeted once the alert stopped")

    proc.send_signal(signal.SIGTERM)  # Prometheus gone: the pool holds (fail closed) and says so
    proc.wait(30)
    rollout = rollout_where(app, lambda r: (r.get("alerts") or {}).get("unanswered"), "the pool sees no answer")
    assert rollout["alerts"]["holding"] is True
    assert rollout["alerts"]["unanswered"] == (f"Prometheus did not answer: GET {url}/api/v1/alerts: the connection "
                                               f"failed: Connection refused")
    assert f"annotate the pool {UNREACHABLE}=proceed to go on without it" in rollout["waitReason"]
    assert gate_metrics(app) == {"holding": 1, "failed_closed": 1}  # what NodePoolGateFailedClosed reads
    report(app, "w1", b)
    rollout_where(app, lambda r: "updating" not in r and r.get("waiting") == ["w2"], "nobody newly targeted")
    assert "nothing is newly targeted (fail closed)" in views.describe_pool(pool(app), 0.0)

    annotate(state, {UNREACHABLE: "proceed"})  # the documented override
    rollout = rollout_where(app, lambda r: r.get("updating") == ["w2"], "w2 targeted with the override")
    assert rollout["alerts"]["override"] == f"{UNREACHABLE}: proceed" and not rollout["alerts"]["holding"]
    assert gate_metrics(app) == {"holding": 0, "failed_closed": 0}


def gate_metrics(app):
    """worker's alert-gate series of /metrics (node_config_server_pool_gate_holding and
    _failed_closed), as the App answers a scrape."""
    from tests.campaigns.test_bad_input_campaign import wsgi
    from tests.unit.test_metrics import samples

    status, _, body = wsgi(app, "GET", "/metrics")
    assert status == 200, body
    labels = (("gate", "alert-gate"), ("pool", "worker"))
    return {kind: samples(body.decode())[(f"node_config_server_pool_gate_{kind}", labels)]
            for kind in ("holding", "failed_closed")}


def test_serve_with_a_prometheus_url_holds_a_gated_pool_while_its_alert_fires(tmp_path, prometheus, tls):  # noqa: F811
    url, gauge, _ = prometheus
    gauge[0] = 1
    state = copy_state(tmp_path)
    annotate(state, {ANNOTATION: PATTERN})
    with ServerProcess(str(state), tls=tls, token=TOKEN, extra_args=["--prometheus-url", url]) as srv:
        alerts = wait_for(lambda: (lambda a: a.get("firing") and a)(
            pool_view(srv, "worker")["status"]["rollout"].get("alerts") or {}), "serve's pool holds", PICKED_UP)
        assert alerts == {"pattern": PATTERN, "holding": True, "firing": [ALERT], "count": 1}
        gauge[0] = 0
        wait_for(lambda: pool_view(srv, "worker")["status"]["rollout"]["alerts"]["holding"] is False,
                 "serve's pool goes on once the alert stops", PICKED_UP)


def test_serve_takes_a_prometheus_url_and_refuses_one_that_is_not_http_or_carries_credentials(tmp_path):
    args = build_parser().parse_args(["serve", "--state", str(tmp_path), "--prometheus-url", "https://p:9090/"])
    assert check_url(args.prometheus_url) == "https://p:9090"
    with pytest.raises(ValueError, match="--prometheus-url 'ftp://p': give an http or https URL"):
        check_url("ftp://p")
    with pytest.raises(ValueError, match="give no user, password, query or fragment"):
        check_url("https://admin:secret@p:9090")


def test_the_alert_source_asks_once_per_interval_and_says_why_an_answer_is_refused():
    with ScriptedServer() as peer:
        peer.always("/api/v1/alerts", Reply(200, '{"status": "success", "data": {"alerts": []}}'))
        source = PrometheusAlerts(peer.url(""), interval=600.0)
        try:
            assert [source.firing() for _ in range(20)][-1].names == ()
            assert source.queries == 1 and len(peer.requests_for("/api/v1/alerts")) == 1  # the rest: the kept answer
        finally:
            source.close()
        for reply, why in [(Reply(302, headers={"Location": "http://example.invalid/"}), "HTTP 302"),
                           (Reply(503, "down"), "HTTP 503"),
                           (Reply(200, b"x" * (MAX_BYTES + 1)), "the answer is over 8 MiB"),
                           (Reply(200, "<html>"), "the answer is not Prometheus's alerts list: the answer is not JSON"),
                           (Reply(200, "{}", delay=3.0), "no answer within 1 s")]:
            peer.script("/api/v1/alerts", reply)
            got = PrometheusAlerts(peer.url(""), timeout=1.0).ask(requests.Session())
            assert got.unanswered.startswith(f"GET {peer.url('/api/v1/alerts')}: ") and why in got.unanswered, got

