"""/metrics with prometheus-client: counts summed across worker processes, stale directories removed."""

import os
import subprocess
import sys

from agent.server.http import metrics
from tests.helpers import paths


def samples(text):
    """(name, sorted labels) -> value, parsed by prometheus-client's own parser (label order free)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}

REPO = paths.REPO

# A "worker": counts in its own process, in multiprocess mode, then exits.
WORKER = """
import sys
from agent.server.http.metrics import RequestCounter
c = RequestCounter(sys.argv[1])
for _ in range(int(sys.argv[2])):
    c.inc("worker", 200, "GET")
"""


def test_counts_of_every_worker_process_are_summed(tmp_path):
    d = str(tmp_path)
    for n in (3, 4):  # two worker processes, both gone by the scrape
        subprocess.run([sys.executable, "-c", WORKER, d, str(n)], check=True, cwd=REPO, timeout=60)
    scrape = """
import sys
from agent.server.http.metrics import RequestCounter, exposition
c = RequestCounter(sys.argv[1])
c.inc("master", 404, "GET")
print(exposition(c, {}, 0, False))
"""
    out = subprocess.run([sys.executable, "-c", scrape, d], check=True, cwd=REPO, timeout=60, capture_output=True,
                         text=True).stdout
    got = samples(out)
    assert got[("node_config_server_requests_total", (("code", "200"), ("method", "GET"), ("pool", "worker")))] == 7
    assert got[("node_config_server_requests_total", (("code", "404"), ("method", "GET"), ("pool", "master")))] == 1
    assert got[("node_config_server_state_stale", ())] == 0


def test_single_process_counter_and_state_gauges():
    c = metrics.RequestCounter(None)
    c.inc("infra", 503, "GET")
    views = {"infra": {"spec": {"configuration": {"name": "rendered-infra-1"}},
                       "status": {"configuration": {"name": "rendered-infra-0"},
                                  "served": {"config": "rendered-infra-0", "image": "quay.io/x"},
                                  "nodeStates": {"Done": 1, "Working": 0, "Degraded": 0}, "machineCount": 1}}}
    text = metrics.exposition(c, views, 2, True)
    got = samples(text)
    assert got[("node_config_server_requests_total", (("code", "503"), ("method", "GET"), ("pool", "infra")))] == 1
    assert got[("node_config_server_served_config_info",
                (("config", "rendered-infra-0"), ("image", "quay.io/x"), ("pool", "infra")))] == 1
    assert got[("node_config_server_nodes", (("pool", "infra"), ("state", "Done")))] == 1
    assert got[("node_config_server_state_problems", ())] == 2 and got[("node_config_server_state_stale", ())] == 1
    import prometheus_client

    if hasattr(prometheus_client, "disable_created_metrics"):  # 0.17+; older ones add _created series
        assert not [k for k in got if k[0].endswith("_created")]


def test_a_dead_servers_directory_is_removed_a_live_ones_kept(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = tmp_path / f"{metrics.DIR_PREFIX}{child.pid}-abc"
    live = tmp_path / f"{metrics.DIR_PREFIX}{os.getpid()}-def"
    other = tmp_path / "unrelated-123-x"
    for d in (dead, live, other):
        d.mkdir()
        (d / "counter_1.db").write_bytes(b"x")
    assert metrics.remove_stale_dirs(str(tmp_path)) == [str(dead)]
    assert not dead.exists() and live.exists() and other.exists()
