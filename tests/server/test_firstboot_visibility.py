"""Every first boot that goes wrong is named by the server, with its stage and reason, without a
look at the node (issue 47): five real first boots (node-agent processes on scratch roots)
against the real server (gunicorn, TLS, tokens, SQLite), one fault each
(tests/helpers/firstboot_faults.py): a served file whose source is unreachable, a skew refusal,
an apply rolled back, a first boot killed after its fetch, a reboot that never comes back.
The same on etcd (tests/etcd/test_firstboot_visibility_etcd.py) and Kubernetes
(tests/kube/test_kube_firstboots.py)."""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.helpers import firstboot_faults as faults
from tests.helpers.certs import make_tls
from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

TOKEN = "fb-token"
DEADLINE = 5.0  # serve --firstboot-deadline: longer than a loaded machine's gaps between two reports
INFRA_DEADLINE = 4.0  # the infra pool's own (its annotation node-agent.io/firstboot-deadline)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("fb-visibility")
    state = str(top / "state")
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    faults.write_source_pool(state)
    infra = os.path.join(state, "machineconfigpools", "infra.yaml")
    with open(infra) as f:
        pool = yaml.safe_load(f)
    pool["metadata"]["annotations"]["node-agent.io/firstboot-deadline"] = f"{INFRA_DEADLINE:g}s"
    with open(infra, "w") as f:
        yaml.safe_dump(pool, f)
    with ServerProcess(state, tls=make_tls(str(top / "tls")), token=TOKEN,
                       extra_args=["--firstboot-deadline", f"{DEADLINE:g}"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def runs(server, tmp_path_factory):
    """The five first boots, each shown by the server; then what the server showed before and
    after the two stalled nodes went on (``recover``)."""
    top = str(tmp_path_factory.mktemp("fb-nodes"))
    got = faults.run_all(server.session(), server.base_url, server.tls.ca_pem(), TOKEN, top, "fb-", wait_for, DEADLINE)
    print("first boots shown after (s):", faults.summary(got))
    before = {"pools": pools(server), "metrics": server.session().get(server.url("/metrics")).text,
              "get nodes": cli(server, "get", "nodes"),
              "describe": {r.node: cli(server, "describe", "node", r.node) for r in got.values()},
              "get pools": cli(server, "get", "pools")}
    faults.recover(got)
    after = {r.node: faults.node_view(server.session(), server.base_url, r.node) for r in got.values()}
    return got, before, after, server.session().get(server.url("/metrics")).text


def pools(server):
    r = server.session().get(server.url("/api/v1/pools"))
    assert r.status_code == 200, r.text
    return {p["metadata"]["name"]: p for p in r.json()["items"]}


def cli(server, *args):
    r = subprocess.run([sys.executable, "-m", "agent.server.cli", *args, "--server", server.base_url, "--ca",
                        server.tls.ca_cert, "--token-file", server._token_file], capture_output=True, text=True,
                       cwd=REPO, timeout=60, env=dict(os.environ, COLUMNS="250"))
    assert r.returncode == 0, r.stderr
    return r.stdout


def what_to_do(stderr):
    return re.search(r"^what to do: (.*)$", stderr, re.M).group(1)


@pytest.mark.parametrize("name", [s.name for s in faults.SCENARIOS if s.outcome == "Failed"])
def test_a_failed_first_boot_is_shown_with_its_stage_exit_code_reason_and_what_to_do_as_its_journal(runs, name):
    run = runs[0][name]
    fb = run.view
    assert (fb["outcome"], fb["reason"], fb["stage"], fb["exitCode"]) == \
        ("Failed", "FirstBootFailed", run.scenario.stage, run.scenario.exit_code)
    # the node's one journal entry ("firstboot failed (exit N) in Ts: <error>" / "what to do: <hint>"):
    # the same words, from the same exception
    assert f"firstboot failed (exit {run.exit_code})" in run.stderr
    assert fb["error"].split("\n")[0] in run.stderr and fb["hint"] == what_to_do(run.stderr)
    assert run.at_exit["outcome"] == "Failed"  # there at the node's exit: its report's round trip ended before


def test_the_failures_say_why_in_the_nodes_words(runs):
    got = runs[0]
    assert "127.0.0.1:9/fbsource.conf" in got["source-unreachable"].view["error"]
    hint = got["source-unreachable"].view["hint"]  # names that file's source, not the pointer's server
    assert re.search(r"file source \$.storage.files.\d+.contents.source \(http://127.0.0.1:9/", hint), hint
    assert "BootImage" in got["skew-refused"].view["error"]
    assert "No space left on device" in got["apply-rolled-back"].view["error"]
    assert "rolled back" in got["apply-rolled-back"].view["error"]


@pytest.mark.parametrize("name,words", [("killed-after-fetch", "its last report was stage fetch"),
                                        ("reboot-never-back", "has not come back from that reboot")])
def test_a_first_boot_with_no_report_within_the_deadline_is_stalled_naming_its_last_stage(runs, name, words):
    run = runs[0][name]
    fb = run.view
    assert (fb["outcome"], fb["reason"], fb["stage"]) == ("Stalled", "FirstBootStalled", run.scenario.stage)
    deadline = INFRA_DEADLINE if run.scenario.pool == "infra" else DEADLINE  # a pool's own, else serve's
    assert words in fb["message"] and fb["deadlineSeconds"] == deadline
    assert run.after_last_report >= deadline  # never before its deadline (within it plus 30 s: run_all waits so long)


def test_the_pools_count_their_failed_and_stalled_first_boots(runs):
    pool = runs[1]["pools"]
    counts = {name: {k: p["status"]["firstBoots"][k] for k in ("failed", "stalled")} for name, p in pool.items()}
    assert counts["worker"] == {"failed": 2, "stalled": 1}
    assert counts["infra"] == {"failed": 0, "stalled": 1}
    assert counts[faults.SOURCE_POOL] == {"failed": 1, "stalled": 0}
    assert set(pool["worker"]["status"]["firstBoots"]["nodes"]) == {"fb-skew-refused", "fb-apply-rolled-back",
                                                                    "fb-killed-after-fetch"}


def test_get_nodes_describe_node_and_get_pools_name_every_failed_and_stalled_first_boot(runs):
    shown = runs[1]
    rows = {line.split()[0]: line for line in shown["get nodes"].splitlines()[1:]}
    assert "Failed:apply" in rows["fb-apply-rolled-back"] and "Failed:skew" in rows["fb-skew-refused"]
    assert "Stalled:fetch" in rows["fb-killed-after-fetch"] and "FirstBootStalled:" in rows["fb-killed-after-fetch"]
    text = shown["describe"]["fb-apply-rolled-back"]
    assert "First boot:          FirstBootFailed: failed at stage apply (exit 75)" in text
    assert re.search(r"^  What to do:\s+the node is as before", text, re.M)
    assert re.search(r"^\s+apply\s+\S+Z\s+[0-9.]+\s+failed$", text, re.M)  # each stage with its start and seconds
    for node in ("fb-killed-after-fetch", "fb-reboot-never-back", "fb-skew-refused", "fb-source-unreachable"):
        assert f"node {node}: FirstBoot" in shown["get pools"], shown["get pools"]


def samples(text):
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_first_boots_by_pool_stage_and_outcome_and_the_stalled_ones(runs):
    got = samples(runs[1]["metrics"])
    fbs = {k: v for k, v in got.items() if k[0] == "node_config_server_firstboots"}
    assert fbs == {("node_config_server_firstboots", (("outcome", o), ("pool", p), ("stage", s))): 1.0
                   for o, p, s in (("failed", "worker", "skew"), ("failed", "worker", "apply"),
                                   ("failed", faults.SOURCE_POOL, "plan"), ("stalled", "worker", "fetch"),
                                   ("stalled", "infra", "report"))}
    assert got[("node_config_server_firstboots_stalled", (("pool", "worker"),))] == 1.0
    assert got[("node_config_server_firstboots_ended_total", (("outcome", "failed"), ("pool", "worker"),
                                                              ("stage", "apply")))] == 1.0


def test_a_later_report_clears_the_stall_and_done_ends_the_first_boot(runs):
    _, before, after, metrics = runs
    for node in ("fb-killed-after-fetch", "fb-reboot-never-back"):
        fb = after[node]["firstBoot"]
        assert (fb["outcome"], fb["reason"]) == ("Done", "FirstBootDone"), fb
        assert fb["seconds"] > 0 and fb.get("rebooted")
    assert after["fb-killed-after-fetch"]["firstBoot"]["runs"] == 2  # killed, then run again
    got = samples(metrics)
    assert got[("node_config_server_firstboots_stalled", (("pool", "worker"),))] == 0.0
    assert got[("node_config_server_firstboot_duration_seconds_count", (("pool", "worker"),))] == 1.0
    assert got[("node_config_server_firstboot_duration_seconds_count", (("pool", "infra"),))] == 1.0


def test_a_failure_the_server_could_not_take_is_kept_and_sent_by_the_next_run(tmp_path):
    """The server is down for the first run (its fetch gives up: exit 69, the failure report kept
    on the node); the next run, with the server up, sends it before its own reports."""
    import json

    from tests.helpers.noderoot import make_node_root
    from tests.helpers.server_proc import free_port

    state = str(tmp_path / "state")
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    tls = make_tls(str(tmp_path / "tls"))
    srv = ServerProcess(state, tls=tls, token=TOKEN, port=free_port())
    root = make_node_root(str(tmp_path / "fb-later"), srv.base_url, "worker", ca_pem=tls.ca_pem(), token=TOKEN,
                          node_name="fb-later", fetch_budget=1)
    first = faults.agent("firstboot", "--root", root)
    assert first.returncode == 69, first.stderr
    with open(os.path.join(root, "var/lib/node-agent/pending-report.json")) as f:
        kept = json.load(f)["report"]
    assert (kept["state"], kept["firstBoot"]["stage"], kept["firstBoot"]["exitCode"]) == ("Degraded", "fetch", 69)
    assert kept["firstBoot"]["hint"] == what_to_do(first.stderr)
    with srv:
        second = faults.agent("firstboot", "--root", root)
        assert second.returncode == 0, second.stderr
        fb = faults.node_view(srv.session(), srv.base_url, "fb-later")["firstBoot"]
    assert fb["runs"] == 2  # the kept failure's run, then this one
    assert not os.path.exists(os.path.join(root, "var/lib/node-agent/pending-report.json"))
