"""``node-config-server get|describe|status`` against the real server, and the pure views."""

import io
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from agent.server.cli import views, watch
from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root
from tests.helpers.server_proc import ServerProcess, free_port

REPO = paths.REPO
EXAMPLES = os.path.join(REPO, "examples", "state")
TOKEN = "views-token"
HASH = "c7f50b7fa4545f0bbd8222ee6d0f9201"


def pool(name, machines=3, updated=1, degraded=0, created="2026-11-20T10:00:00Z", updating=True):
    cond = [{"type": "Updated", "status": str(not updating)}, {"type": "Updating", "status": str(updating)},
            {"type": "Degraded", "status": str(bool(degraded))}]
    return {"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"configuration": {"name": f"rendered-{name}-{HASH}"}},
            "status": {"configuration": {"name": f"rendered-{name}-{HASH}"}, "machineCount": machines,
                       "updatedMachineCount": updated, "readyMachineCount": updated,
                       "degradedMachineCount": degraded, "conditions": cond,
                       "served": {"config": f"rendered-{name}-{HASH}", "image": "quay.io/x@sha256:1",
                                  "reason": "proven by 1 node"}}}


# -- pure ------------------------------------------------------------------------------------------

def test_pools_table_has_oc_get_mcp_columns_and_fits_100_columns():
    now = views.parse_time("2026-11-22T10:00:00Z")
    text = views.pools_table([pool("worker"), pool("infra-gpu-large", degraded=1)], now)
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "CONFIG", "UPDATED", "UPDATING", "DEGRADED", "MACHINES", "READY",
                                "UPDATED-M", "DEGRADED-M", "AGE"]
    assert max(len(line) for line in lines) <= 100, text
    assert lines[1].split()[2:] == ["False", "True", "False", "3", "1", "1", "0", "2d"]
    assert lines[1].split()[1] == "c7f50b7f…"  # a long pool name: only the hash fits
    short = views.pools_table([pool("worker")], now).splitlines()  # the whole name fits without 3 count columns
    assert short[0].split() == ["NAME", "CONFIG", "UPDATED", "UPDATING", "DEGRADED", "MACHINES", "AGE"]
    assert short[1].split()[1] == f"rendered-worker-{HASH}" and max(len(line) for line in short) <= 100
    wide = views.pools_table([pool("worker")], now, wide=True)
    assert f"rendered-worker-{HASH}" in wide


@pytest.mark.parametrize("seconds,text", [(5, "5s"), (119, "119s"), (600, "10m"), (7300, "2h"),
                                          (3 * 86400, "3d"), (3 * 365 * 86400, "3y"), (None, "<unknown>")])
def test_age_as_kubectl_prints_it(seconds, text):
    assert views.age(seconds) == text


def test_describe_pool_says_what_new_nodes_get_and_why():
    text = views.describe_pool(pool("worker"), views.parse_time("2026-11-22T10:00:00Z"))
    assert "Served to new nodes:" in text and "Why:               proven by 1 node" in text
    assert "Conditions:" in text and "Updating  True" in text


def test_watch_without_a_terminal_prints_the_tables_columns_header_once_and_a_row_per_change():
    rounds = [[pool("worker", updated=2)], [pool("worker", updated=2)], [pool("worker", updated=3, updating=False)]]
    out = io.StringIO()
    code = watch.watch_pools(lambda: rounds.pop(0), 0.01, sleep=lambda _s: None, out=out, rounds=2)
    assert code == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].split() == list(views.POOL_COLUMNS)
    assert lines[1].split()[:3] == ["worker", f"rendered-worker-{HASH}", "False"] and lines[1].split()[7] == "2"
    assert lines[2].split()[2:4] == ["True", "False"] and lines[2].split()[7] == "3"


def test_watch_on_a_terminal_draws_a_progress_bar_per_pool():
    from rich.console import Console

    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    console.print(watch.render([pool("worker", updated=1), pool("infra", machines=0, updated=0)]))
    text = console.file.getvalue()
    assert "worker" in text and "1/3" in text and "━" in text and "Updating" in text


# -- against the real server -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("views")
    state = str(top / "state")
    shutil.copytree(EXAMPLES, state)
    srv = ServerProcess(state, tls=make_tls(str(top / "tls")), token=TOKEN).start()
    try:
        root = make_node_root(str(top / "w1"), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(), token=TOKEN,
                              node_name="w1", fetch_budget=5)
        r = subprocess.run([sys.executable, "-m", "agent.cli", "firstboot", "--root", root], capture_output=True,
                           text=True, cwd=REPO, timeout=120)
        assert r.returncode == 0, r.stderr
        token_file = top / "token"
        token_file.write_text(TOKEN + "\n")
        srv.client_args = ["--server", srv.base_url, "--ca", srv.tls.ca_cert, "--token-file", str(token_file)]
        yield srv
    finally:
        srv.stop()


def ncs(*args, columns=None):
    """node-config-server as a user runs it; ``columns``: $COLUMNS for it (None: none at all, as on a pipe)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "agent.server.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60, env=env)


def test_api_v1_nodes_lists_nodes_with_pool_and_updated(server):
    r = server.session().get(server.url("/api/v1/nodes"))
    assert r.status_code == 200
    items = r.json()["items"]
    assert [i["name"] for i in items] == ["w1"]
    assert items[0]["pool"] == "worker" and items[0]["updated"] is False  # Working: reboot pending
    assert items[0]["report"]["state"] == "Working" and items[0]["reportedAt"].endswith("Z")


def test_get_pools_and_nodes(server):
    r = ncs("get", "pools", *server.client_args, columns=100)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("NAME") and "AGE" in lines[0] and max(map(len, lines)) <= 100
    assert [line.split()[0] for line in lines[1:4]] == ["infra", "master", "worker"]
    assert lines[4:] == ["3 columns hidden at this width (READY, UPDATED-M, DEGRADED-M): -o wide shows every column"]
    r = ncs("get", "nodes", *server.client_args)
    assert r.returncode == 0 and r.stdout.splitlines()[1].split()[:3] == ["w1", "worker", "Working"]
    r = ncs("get", "nodes", "-o", "json", *server.client_args)
    assert json.loads(r.stdout)["items"][0]["metadata"]["name"] == "w1"
    r = ncs("get", "pool", "worker", "-o", "yaml", *server.client_args)
    assert yaml.safe_load(r.stdout)["metadata"]["name"] == "worker"


def test_describe_pool_and_node(server):
    r = ncs("describe", "pool", "worker", *server.client_args)
    assert r.returncode == 0, r.stderr
    assert "Served to new nodes:" in r.stdout and "Conditions:" in r.stdout and "w1" in r.stdout
    assert "RolloutInProgress" in r.stdout  # w1 has a reboot pending: the reason, not an empty cell
    r = ncs("describe", "pool", "worker", "-o", "json", *server.client_args)
    conditions = {c["type"]: c for c in json.loads(r.stdout)["status"]["conditions"]}
    assert conditions["Updating"]["status"] == "True" and conditions["Updating"]["reason"] == "RolloutInProgress"
    assert all({"type", "status", "reason", "message"} <= set(c) for c in conditions.values())
    r = ncs("describe", "node", "w1", *server.client_args)
    assert r.returncode == 0, r.stderr
    assert "Pool:                worker" in r.stdout and "Why:" in r.stdout


@pytest.mark.parametrize("args,code,words", [
    (["get", "pool", "nosuch"], 1, "unknown pool"),
    (["describe", "node", "nosuch"], 1, "has not reported"),
    (["get", "pools", "--server", "http://127.0.0.1:{port}"], 69, "cannot reach"),
    (["get", "pools", "--server", "nope"], 2, "expected an http"),
    (["get", "pools", "--watch", "--interval", "0"], 2, "> 0"),
    (["get", "pools", "--out", "json"], 2, "--out"),  # no abbreviations (of --output)
    # a name that is no Kubernetes name: the server's 400 is a usage error with its fix, never 69 (issue 49)
    (["describe", "node", "INFRA-0"], 2, "what to do: did you mean infra-0? node names are lower case"),
    (["get", "pool", "Worker"], 2, "what to do: did you mean worker? pool names are lower case"),
])
def test_get_and_describe_exit_codes(server, args, code, words):
    args = [a.replace("{port}", str(free_port())) for a in args]
    r = ncs(*args, *server.client_args) if "--server" not in args else ncs(*args)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert words in r.stderr and "Traceback" not in r.stderr


def test_a_malformed_name_is_said_once_in_two_lines_without_a_url_or_http_status(server):
    r = ncs("describe", "node", "INFRA-0", *server.client_args)
    assert r.stderr.splitlines() == [
        "node-config-server: describe: invalid node name 'INFRA-0': a node name is a DNS-1123 subdomain",
        "what to do: did you mean infra-0? node names are lower case (letters, digits, '-' and '.'): "
        "node-config-server get nodes lists them"], r.stderr


def test_a_node_as_yaml_or_json_is_a_kubernetes_shaped_object_without_internal_fields(server):
    """Issue 49: ``get nodes NAME -o yaml`` showed the API's record, with the server's own mark
    ``report._server``; now a ManagedNode object, the same from get and describe, one or listed."""
    got = yaml.safe_load(ncs("get", "nodes", "w1", "-o", "yaml", *server.client_args).stdout)
    assert (got["apiVersion"], got["kind"], got["metadata"]) == ("node-agent.openshift.io/v1", "ManagedNode",
                                                                 {"name": "w1"})
    assert got["spec"]["pool"] == "worker" and set(got) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert got["status"]["report"]["state"] == "Working" and got["status"]["membership"]
    raw = server.session().get(server.url("/api/v1/nodes/w1")).json()
    assert "_server" in raw["report"]  # the API keeps its mark (docs/api.md); the view leaves it out
    assert "_server" not in json.dumps(got) and "node" not in got["status"] and "name" not in got["status"]
    described = json.loads(ncs("describe", "node", "w1", "-o", "json", *server.client_args).stdout)
    listed = json.loads(ncs("get", "nodes", "-o", "json", *server.client_args).stdout)["items"]
    assert described["metadata"] == got["metadata"] and described["spec"] == got["spec"]
    assert [i for i in listed if i["metadata"]["name"] == "w1"][0]["kind"] == "ManagedNode"


def test_status_asks_the_running_server(server):
    r = ncs("status", *server.client_args)
    assert r.returncode == 1 and "cluster update: NOT complete" in r.stdout  # w1 has a reboot pending
    r = ncs("status", "--json", *server.client_args)
    assert r.returncode == 1 and not json.loads(r.stdout)["complete"]


def test_closed_pipe_ends_quietly(server):
    read, write = os.pipe()
    os.close(read)
    try:
        r = subprocess.run([sys.executable, "-m", "agent.server.cli", "get", "pools", "-o", "json",
                            *server.client_args], stdout=write, stderr=subprocess.PIPE, text=True, cwd=REPO,
                           timeout=60)
    finally:
        os.close(write)
    assert r.returncode == 141 and r.stderr == ""


def test_api_v1_nodes_is_paged(server):
    s = server.session()
    root = make_node_root(os.path.join(os.path.dirname(server.state_dir), "w2"), server.base_url, "worker",
                          ca_pem=server.tls.ca_pem(), token=TOKEN, node_name="w2", fetch_budget=5)
    r = subprocess.run([sys.executable, "-m", "agent.cli", "firstboot", "--root", root], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    first = s.get(server.url("/api/v1/nodes?limit=1")).json()
    assert [i["name"] for i in first["items"]] == ["w1"] and first["metadata"]["continue"] == "w1"
    second = s.get(server.url("/api/v1/nodes?limit=1&continue=w1")).json()
    assert [i["name"] for i in second["items"]] == ["w2"]
    assert s.get(server.url("/api/v1/nodes?limit=0")).status_code == 400
    out = ncs("get", "nodes", *server.client_args).stdout
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["w1", "w2"]


def test_get_77_when_the_server_wants_a_token_and_69_when_it_is_not_ours(tmp_path):
    from tests.helpers.httpserver import Reply, ScriptedServer

    with ScriptedServer() as srv:
        srv.always("/api/v1/pools", Reply(401, body=json.dumps({"error": {"code": 401, "message": "token wanted"}}),
                                          headers={"Content-Type": "application/json"}))
        srv.always("/api/v1/nodes", Reply(200, body=b"<html>not us</html>"))
        r = ncs("get", "pools", "--server", srv.url("").rstrip("/"))
        assert r.returncode == 77 and "token wanted" in r.stderr and "--token-file" in r.stderr, r.stderr
        r = ncs("get", "nodes", "--server", srv.url("").rstrip("/"))
        assert r.returncode == 69 and "did not answer JSON" in r.stderr, r.stderr


@pytest.mark.parametrize("content,words", [("server: [", "not valid YAML"), ("servr: http://x\n", "unknown key"),
                                           ("- a\n", "must be a map")])
def test_get_65_for_an_invalid_client_config(tmp_path, content, words):
    conf = tmp_path / "client.yaml"
    conf.write_text(content)
    r = ncs("get", "pools", "--config", str(conf))
    assert r.returncode == 65 and words in r.stderr and str(conf) in r.stderr, r.stderr


def test_client_config_file_names_the_server(server, tmp_path):
    conf = tmp_path / "client.yaml"
    args = dict(zip(server.client_args[::2], server.client_args[1::2]))
    conf.write_text(f"server: {args['--server']}\ncertificateAuthority: {args['--ca']}\n"
                    f"tokenFile: {args['--token-file']}\n")
    r = ncs("get", "pools", "--config", str(conf))
    assert r.returncode == 0 and r.stdout.startswith("NAME"), r.stderr


def test_get_pools_to_a_pipe_prints_every_column_and_whole_config_names(server):
    r = ncs("get", "pools", *server.client_args)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0].split() == list(views.POOL_COLUMNS), r.stdout
    assert all(line.split()[1].startswith(f"rendered-{line.split()[0]}-") and "…" not in line for line in lines[1:])


def test_get_o_yaml_of_a_list_is_a_kubectl_list_and_o_name_names_kind_and_name(server):
    r = ncs("get", "pools", "-o", "yaml", *server.client_args)
    listed = yaml.safe_load(r.stdout)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List") and r.stdout.startswith("apiVersion: v1\n")
    assert [p["metadata"]["name"] for p in listed["items"]] == ["infra", "master", "worker"]
    r = ncs("get", "mcp", "-o", "name", *server.client_args)
    assert r.stdout.splitlines() == [f"machineconfigpool.machineconfiguration.openshift.io/{p}"
                                     for p in ("infra", "master", "worker")]
    r = ncs("get", "nodes", "-o", "name", *server.client_args)  # other tests of the module add nodes too
    names = r.stdout.splitlines()
    assert "node/w1" in names and all(n.startswith("node/") and n.count("/") == 1 for n in names), r.stdout
    r = ncs("describe", "node", "w1", "-o", "name", *server.client_args)
    assert (r.returncode, r.stdout) == (0, "node/w1\n")


def test_plain_http_to_the_tls_port_says_to_use_https(server):
    r = ncs("get", "pools", "--server", f"http://127.0.0.1:{server.port}", "--ca", server.tls.ca_cert)
    assert r.returncode == 69, r.stderr
    assert f"answers TLS, not plain HTTP: use --server https://127.0.0.1:{server.port}" in r.stderr
    assert "is it running" not in r.stderr


def test_a_bad_option_shows_the_subcommands_usage():
    r = ncs("get", "pools", "--bogus")
    assert r.returncode == 2 and r.stderr.startswith("usage: node-config-server get ")
    assert "node-config-server get: error: unrecognized arguments: --bogus" in r.stderr


def test_render_and_status_take_o_yaml_as_get_does(tmp_path):
    r = ncs("render", "--state", EXAMPLES, "-o", "yaml")
    assert r.returncode == 0 and yaml.safe_load(r.stdout)["worker"]["name"].startswith("rendered-worker-"), r.stderr
    (tmp_path / "data").mkdir()
    r = ncs("status", "--state", EXAMPLES, "--data-dir", str(tmp_path / "data"), "-o", "yaml")
    assert r.returncode in (0, 1) and [p["metadata"]["name"] for p in yaml.safe_load(r.stdout)["items"]] == \
        ["infra", "master", "worker"], r.stderr
