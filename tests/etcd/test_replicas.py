"""Three node-config-server replicas on a three-member etcd cluster, behind haproxy: all real
processes on loopback, started and stopped here (issue 20).

Every replica reads its state objects from etcd (published once with ``load-state``) and keeps
node reports, proofs and drain leases there.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.etcd_cluster import EtcdCluster, have_etcd
from tests.helpers.haproxy import HAProxy, have_haproxy
from tests.helpers.server_proc import ServerProcess, free_port
from tests.helpers.wait import wait_for

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (have_etcd() and have_haproxy()),
                                 reason="etcd-server and haproxy are not installed (make test installs them)")]

REPO = paths.REPO
EXAMPLES = os.path.join(REPO, "examples", "state")
TOKEN = "replica-token"
LEASE_TTL = 4


def ncs(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "agent.server.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


class Fleet:
    def __init__(self, top):
        self.top = top
        self.etcd = EtcdCluster(str(top / "etcd"))
        self.tls = make_tls(str(top / "tls"))
        self.replicas = []
        self.lb = None
        self.credentials = {}  # node -> its credential, registered through one replica, valid on all

    def start(self):
        self.etcd.start()
        self.state = str(self.top / "state")
        shutil.copytree(EXAMPLES, self.state)
        r = ncs("load-state", "--store", self.etcd.url, self.state)
        assert r.returncode == 0, r.stderr
        for i in range(3):
            self.replicas.append(self._replica(i).start())
        self.lb = HAProxy(str(self.top), free_port(), [r.port for r in self.replicas]).__enter__()
        return self

    def _replica(self, i, port=None):
        return ServerProcess(None, tls=self.tls, token=TOKEN, workers=1, threads=8, port=port,
                             extra_args=["--store", self.etcd.url, "--cache-dir", str(self.top / f"cache{i}"),
                                         "--lease-ttl", str(LEASE_TTL)])

    def restart_replica(self, i):
        self.replicas[i] = self._replica(i, port=self.replicas[i].port).start()

    def stop(self):
        if self.lb:
            self.lb.__exit__()
        for r in self.replicas:
            r.stop()
        self.etcd.stop()

    @property
    def lb_url(self):
        return f"https://127.0.0.1:{self.lb.port}"

    def session(self, node=None):
        """The bootstrap token's session, or with ``node`` that node's own (registered once)."""
        s = requests.Session()
        s.trust_env = False
        s.verify = self.tls.ca_cert
        s.headers["Authorization"] = f"Bearer {TOKEN}"
        if node is not None:
            if node not in self.credentials:
                r = s.post(self.replicas[0].url(f"/api/v1/nodes/{node}/register"), timeout=10)
                assert r.status_code == 201, r.text
                self.credentials[node] = r.json()["credential"]
            s.headers["Authorization"] = f"Bearer {self.credentials[node]}"
        return s


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("replicas"))
    try:
        yield f.start()
    finally:
        f.stop()


def pool(replica, name="worker"):
    r = replica.session().get(replica.url(f"/api/v1/pools/{name}"), timeout=10)
    assert r.status_code == 200, r.text + "\n--- replica log (tail) ---\n" + replica.log_text()[-4000:]
    return r.json()


def report(replica, node, body, fleet):
    return fleet.session(node).post(replica.url(f"/api/v1/nodes/{node}/report"), data=json.dumps(body), timeout=10)


def test_every_replica_serves_the_same_rendered_config(fleet):
    names = {pool(r)["spec"]["configuration"]["name"] for r in fleet.replicas}
    etags = {r.session().get(r.url("/config/worker"), timeout=10).headers["ETag"] for r in fleet.replicas}
    assert len(names) == 1 and len(etags) == 1
    health = fleet.replicas[0].session().get(fleet.replicas[0].url("/healthz"), timeout=10).json()
    assert health["store"]["kind"] == "etcd" and health["store"]["healthy"]


def test_the_cluster_view_lists_every_replica_and_metrics_time_the_store(fleet):
    r = fleet.replicas[0]

    def three():
        doc = r.session().get(r.url("/api/v1/cluster"), timeout=10).json()
        return doc if len({x["replica"] for x in doc["replicas"]}) == 3 else None

    doc = wait_for(three, "every replica has announced itself", timeout=30, interval=0.5)
    assert doc["store"]["kind"] == "etcd" and doc["store"]["healthy"]
    assert len({x["stateSignature"] for x in doc["replicas"]}) == 1  # all render from the same objects
    assert all(x["pools"]["worker"]["served"] for x in doc["replicas"])
    metrics = r.session().get(r.url("/metrics"), timeout=10).text
    assert 'node_config_server_store_request_seconds_count{operation="/v3/kv/' in metrics
    token = fleet.top / "token"
    token.write_text(TOKEN + "\n")
    out = ncs("status", "--server", fleet.lb_url, "--ca", fleet.tls.ca_cert, "--token-file", str(token))
    assert "store: etcd, healthy" in out.stdout and "replicas: 3 process(es)" in out.stdout, out.stdout + out.stderr


def test_a_report_through_one_replica_is_counted_and_gates_on_the_others(fleet):
    a, b, c = fleet.replicas
    before = [pool(r)["status"]["machineCount"] for r in (b, c)]
    current = pool(a)["status"]["configuration"]["name"]
    resp = report(a, "member-1", {"pool": "worker", "state": "Done", "currentConfig": current,
                                  "desiredConfig": current}, fleet)
    assert resp.status_code == 200, resp.text
    acked = time.monotonic()
    for r, n in zip((b, c), before):
        wait_for(lambda r=r, n=n: pool(r)["status"]["machineCount"] == n + 1, "the other replicas count it", 30)
    propagation = time.monotonic() - acked
    # The gate: a new target is served to new nodes only once a member has proven it.
    with open(os.path.join(fleet.state, "machineconfigs", "99-replica-test.yaml"), "w") as f:
        f.write("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
                "  name: 99-replica-test\n  labels:\n    machineconfiguration.openshift.io/role: worker\n"
                "spec:\n  config:\n    ignition:\n      version: 3.4.0\n    storage:\n      files:\n"
                "      - path: /etc/replica-test\n        contents:\n          source: data:,hello\n")
    r = ncs("load-state", "--store", fleet.etcd.url, fleet.state)
    assert r.returncode == 0, r.stderr
    views = wait_for(lambda: [pool(x) for x in fleet.replicas] if len({pool(x)["spec"]["configuration"]["name"]
                                                                     for x in fleet.replicas} - {None}) == 1
                  and pool(a)["spec"]["configuration"]["name"] != pool(a)["status"]["configuration"]["name"]
                  else None, "every replica has the new target", timeout=20)
    target = views[0]["spec"]["configuration"]["name"]
    old = views[0]["status"]["configuration"]["name"]
    assert {v["status"]["served"]["config"] for v in views} == {old}  # unproven: nobody gets it
    # A Done proves only a config served to that node as itself (docs/security.md "Identity"):
    # the member fetches the target with its credential first, as node-agent does.
    got = fleet.session("member-1").get(a.url("/config/worker"), timeout=10)
    assert got.status_code == 200 and got.headers["X-Served-Config"] == target, got.headers
    resp = report(a, "member-1", {"pool": "worker", "state": "Done", "currentConfig": target}, fleet)
    assert resp.status_code == 200, resp.text
    for r in (b, c):
        wait_for(lambda r=r: pool(r)["status"]["served"]["config"] == target, "the proof reaches every replica", 30)
    # Recorded for the closing note and docs (the behaviour is asserted above; figures in benchmarks).
    print(f"report propagation to the other replicas: {propagation:.3f}s")


def drain_storm(fleet, prefix, live, sample_every=0.02, done=None):
    """30 members of worker (the limit is 25% of 30+ nodes) ask for a drain lease at once, spread
    over the replicas, while ``live()`` (the store's own count of the pool's live leases, not any
    replica's view) is sampled: (nodes, answers, the pool's limit, the peak of ``live()``).
    ``done``: each node's report (default: Done, nothing more)."""
    nodes = [f"{prefix}-{i:02d}" for i in range(30)]
    target = pool(fleet.replicas[0])["spec"]["configuration"]["name"]
    # Done on the pool's target: a lease is only ever for a node's desired config (here, what it runs)
    body = done or {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target}
    config = body["currentConfig"]
    for i, n in enumerate(nodes):
        assert report(fleet.replicas[i % 3], n, body, fleet).status_code == 200

    # Each report was acknowledged by one replica; the others count it once their watch has it,
    # and maxUnavailable is scaled to that count: wait until every replica has all 30.
    wait_for(lambda: every_replica_lists(fleet, nodes), "every replica lists the 30 reported nodes", 30)
    limit = pool(fleet.replicas[0])["status"]["drain"]["maxUnavailable"]
    peak, stop, samples, errors = [0], threading.Event(), [0], []

    def sample():
        try:
            while not stop.is_set():
                peak[0] = max(peak[0], live())
                samples[0] += 1
                stop.wait(sample_every)
        except Exception as exc:  # reported below: a dead sampler would leave the peak at 0
            errors.append(f"{type(exc).__name__}: {exc}")

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    def ask(i):
        r = fleet.replicas[i % 3]
        return fleet.session(nodes[i]).post(r.url(f"/api/v1/nodes/{nodes[i]}/drain"),
                                            data=json.dumps({"pool": "worker", "config": config}), timeout=30)

    try:
        with ThreadPoolExecutor(max_workers=30) as ex:
            answers = list(ex.map(ask, range(30)))
    finally:
        stop.set()
        sampler.join(5)
    assert errors == [] and samples[0] > 0 and not sampler.is_alive(), (errors, samples)
    return nodes, answers, limit, peak[0]


def an_expired_lease_frees_its_slot(fleet, nodes, answers, ttl):
    """After the TTL a node that was told to wait is granted."""
    waiting = nodes[[a.status_code for a in answers].index(429)]
    r = fleet.replicas[1]
    config = pool(r)["spec"]["configuration"]["name"]
    wait_for(lambda: fleet.session(waiting).post(r.url(f"/api/v1/nodes/{waiting}/drain"),
                                              data=json.dumps({"pool": "worker", "config": config}),
                                              timeout=30).status_code == 200,
          "an expired lease frees its slot", timeout=ttl + 15, interval=0.5)


class LeaseHistory:
    """Every change etcd made to one pool's drain leases from ``start`` on, in its own order (a
    watch): the exact count of live leases at each revision, where a sampler can miss a peak and
    a count of 200s cannot tell a slot freed by an expired lease from a slot given twice."""

    def __init__(self, client, store_prefix, pool, start):
        self.client, self.leases, self.events = client, f"{store_prefix}leases/{pool}/", []
        # A watch says nothing until a change: the end is a key of ours written after the storm,
        # in the watched range but outside ``leases/``, where no replica reads it.
        self.end = f"{store_prefix}leases.history-end"
        self.stop = threading.Event()
        client.watch(f"{store_prefix}leases", start, lambda events, _: self.events.extend(events), self.stop)

    def _ended(self):
        return any(e.kv.key.decode() == self.end for e in self.events)

    def read(self):
        """(the most leases live at once, the nodes granted, how many leases ended), to now."""
        self.client.put(self.end, "1")
        wait_for(self._ended, f"the watch of {self.leases} saw {self.end}", 30)
        self.stop.set()
        self.client.delete(self.end)
        live, peak, granted, ended = set(), 0, [], 0
        for e in self.events:
            key = e.kv.key.decode()
            if not key.startswith(self.leases):
                continue
            node = key[len(self.leases):]
            if e.type == "PUT" and node not in live:
                live.add(node)
                granted.append(node)
            elif e.type == "DELETE" and node in live:
                live.discard(node)
                ended += 1
            peak = max(peak, len(live))
        return peak, granted, ended


def test_thirty_concurrent_drains_through_three_replicas_never_hold_more_than_max_unavailable_leases(fleet):
    """At no revision of etcd's history did the pool hold more drain leases than maxUnavailable,
    and every node answered 200 holds one. A node may be granted after the storm's first grants
    only in a slot an expired lease freed (TTL 4 s: a storm on a loaded machine can outlast it;
    a count of 200s against the limit failed so in CI), so there are at most limit + expired."""
    from agent.server.store.etcd import drains
    from agent.server.store.etcd.client import EtcdClient, parse_store_url

    url = parse_store_url(fleet.etcd.url)
    watcher = EtcdClient(url.endpoints, timeout=10)
    _, start = watcher.range(f"{url.prefix}leases/", prefix=True)
    history = LeaseHistory(watcher, url.prefix, "worker", start)
    nodes, answers, limit, sampled = drain_storm(fleet, "drainer",
                                                 lambda: len(drains.holders(watcher, url.prefix, "worker")))
    peak, granted, ended = history.read()
    answered = [n for n, a in zip(nodes, answers) if a.status_code == 200]
    assert all(a.status_code in (200, 429) for a in answers), [a.text for a in answers if a.status_code >= 300]
    assert 1 <= peak <= limit and sampled <= limit, (peak, sampled, limit)
    assert set(answered) <= set(granted) and len(granted) <= limit + ended, (answered, granted, ended, limit)
    assert all(int(a.headers["Retry-After"]) >= 1 for a in answers if a.status_code == 429)
    an_expired_lease_frees_its_slot(fleet, nodes, answers, LEASE_TTL)
    watcher.close()


# -- faults: a storm of first boots while an etcd member and a replica are SIGKILLed --------------

def agent(*args):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def boot_node(fleet, top, name):
    """First boot through the load balancer, the simulated reboot, then day 2 once (it reports
    Done on what the node boots and sends any report kept while the server could not take it)."""
    from benchmarks.scaleup import simulate_reboot
    from tests.helpers.noderoot import make_node_root

    root = make_node_root(str(top / name), fleet.lb_url, "worker", ca_pem=fleet.tls.ca_pem(), token=TOKEN,
                          node_name=name, fetch_budget=120)
    first = agent("firstboot", "--root", root)
    if first.returncode == 0:
        simulate_reboot(root)
    with open(os.path.join(root, "etc/machine-config-daemon/node-annotations.json")) as f:
        served = json.load(f)["machineconfiguration.openshift.io/firstPivotConfig"]
    return {"name": name, "rc": first.returncode, "stderr": first.stderr[-2000:], "served": served, "root": root}


def day2(node):
    r = agent("update", "--once", "--root", node["root"])
    return r.returncode, r.stderr[-2000:]


def new_target(fleet, name, path):
    """A worker MachineConfig ``name`` writing ``path``, published with ``load-state``: the pool's
    new target once every replica has it (old target, new target)."""
    old = pool(fleet.replicas[0])["spec"]["configuration"]["name"]
    with open(os.path.join(fleet.state, "machineconfigs", f"{name}.yaml"), "w") as f:
        f.write("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
                f"  name: {name}\n  labels:\n    machineconfiguration.openshift.io/role: worker\n"
                "spec:\n  config:\n    ignition:\n      version: 3.4.0\n    storage:\n      files:\n"
                f"      - path: {path}\n        contents:\n          source: data:,t\n")
    assert ncs("load-state", "--store", fleet.etcd.url, fleet.state).returncode == 0
    return old, wait_for(lambda: (lambda names: len(names) == 1 and old not in names and names.pop())(
        {pool(r)["spec"]["configuration"]["name"] for r in fleet.replicas}), "every replica has the new target", 20)


def racing_nodes(fleet):
    """The worker pool's 31 nodes the racing rollouts take turns with (the drain storm's and
    member-1, in the module's order), each registered and Done on the pool's target, and listed
    by every replica: made so here, so that a racing test passes alone or in any order."""
    nodes = [f"drainer-{i:02d}" for i in range(30)] + ["member-1"]
    target = pool(fleet.replicas[0])["spec"]["configuration"]["name"]
    body = {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target}
    for i, node in enumerate(nodes):
        assert report(fleet.replicas[i % 3], node, body, fleet).status_code == 200
    wait_for(lambda: every_replica_lists(fleet, nodes), "every replica lists the 31 racing nodes", 30)
    return nodes


def every_replica_lists(fleet, nodes):
    return all(set(nodes) <= {i["name"] for i in r.session().get(r.url("/api/v1/nodes"), timeout=10).json()["items"]}
               for r in fleet.replicas)


def race_turns(fleet, nodes, take_turn, in_flight, what, timeout):
    """Every node's ``take_turn(i)`` (True once it is Done) through the three replicas, 30 at a
    time, in rounds until all are Done, while a sampler reads the worker pool's row from etcd
    itself every 20 ms: the peak of ``in_flight(targets)`` seen, and the sampler's errors."""
    from agent.server.store.etcd.client import EtcdClient, parse_store_url

    url = parse_store_url(fleet.etcd.url)
    watcher = EtcdClient(url.endpoints, timeout=10)
    peak, stop, errors = [0], threading.Event(), []

    def sample():
        try:
            while not stop.is_set():
                kv = watcher.get(f"{url.prefix}pools/worker")
                peak[0] = max(peak[0], in_flight((json.loads(kv.value).get("rollout") or {}).get("targets") or {}))
                stop.wait(0.02)
        except Exception as exc:  # a dead sampler would leave the peak at 0: reported by the caller
            errors.append(f"{type(exc).__name__}: {exc}")

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    done = set()
    try:
        with ThreadPoolExecutor(max_workers=30) as ex:
            def rounds():
                left = [i for i in range(len(nodes)) if i not in done]
                done.update(i for i, ok in zip(left, ex.map(take_turn, left)) if ok)
                return len(done) == len(nodes)
            wait_for(rounds, what, timeout, interval=0.2)
    finally:
        stop.set()
        sampler.join(5)
        watcher.close()
    return peak[0], errors


def all_done_seen_by(replica, count):
    """The pool's view from ``replica`` once it counts ``count`` nodes Done: the last reports went
    to other replicas, and each counts from its own watch of etcd."""
    return wait_for(lambda: (lambda v: v["status"]["rollout"]["counts"].get("Done", 0) == count and v)(pool(replica)),
                    f"{replica.base_url} counts {count} node(s) Done (its watch)", 60)


def fetch_turn(fleet, node, replica, target):
    """What node-agent does first: fetch its desired config; whether it is told to update to ``target``."""
    got = fleet.session(node).get(replica.url("/config/worker"), timeout=10)
    return got.headers.get("X-Served-Config") == target and got.headers.get("X-Rollout") == "updating"


def test_three_replicas_target_at_most_max_unavailable_nodes_while_reports_race_through_them(fleet):
    """The server's targeting (agent/server/rollout/targeting.py) is decided in the pool row's
    compare-and-swap: with the drainers' 30 reports, Done on each target they are given, racing
    through the three replicas, the nodes targeted and not done never exceed maxUnavailable (read
    from etcd itself, not from any replica), and every node ends Done on the new target."""
    nodes = racing_nodes(fleet)
    _old, target = new_target(fleet, "98-targeting", "/etc/targeting")
    limit = pool(fleet.replicas[0])["status"]["drain"]["maxUnavailable"]

    def take_turn(i):  # once told its turn, it reports Done
        node, replica = nodes[i], fleet.replicas[i % 3]
        if not fetch_turn(fleet, node, replica, target):
            return False
        body = {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target}
        return report(replica, node, body, fleet).status_code == 200

    peak, errors = race_turns(fleet, nodes, take_turn,
                              lambda targets: sum(1 for e in targets.values() if e.get("config") == target),
                              "every node Done on the new target, maxUnavailable at a time", 120)
    assert errors == [] and 1 <= peak <= limit, (errors, peak, limit)
    view = all_done_seen_by(fleet.replicas[1], len(nodes))
    assert "updating" not in view["status"]["rollout"]


def test_with_a_failure_budget_failed_nodes_retry_in_free_slots_and_three_replicas_never_let_more_than_maxUnavailable_work(
        fleet):
    """Ours (issue 52): the worker pool gets ``failure-budget: "3"``; every third node fails its first
    try. A failed node is parked (served ``waiting``) and retries only once a free slot is given to
    it (a replica logs each one it lets retry); the entries that may work (targeted or let retry, not parked), read from etcd itself while
    the reports race through the three replicas, never outnumber maxUnavailable, and every node
    ends Done on the new target."""
    nodes = racing_nodes(fleet)
    worker = os.path.join(fleet.state, "machineconfigpools", "worker.yaml")
    with open(worker) as f:
        text = f.read()
    with open(worker, "w") as f:
        f.write(text.replace("metadata:\n  name: worker\n", "metadata:\n  name: worker\n  annotations:\n"
                             "    node-config-server.openshift.io/failure-budget: \"3\"\n", 1))
    old, target = new_target(fleet, "97-budget", "/etc/budget")
    limit = pool(fleet.replicas[0])["status"]["drain"]["maxUnavailable"]
    failed_once, parked_seen = set(), set()

    def take_turn(i):  # every third node fails its first try, then (let retry) is Done
        node, replica = nodes[i], fleet.replicas[i % 3]
        got = fleet.session(node).get(replica.url("/config/worker"), timeout=10)
        if node in failed_once and got.headers.get("X-Rollout") == "waiting":
            parked_seen.add(node)  # served waiting after its failure: parked, as the node sees it
        if not (got.headers.get("X-Served-Config") == target and got.headers.get("X-Rollout") == "updating"):
            return False
        if i % 3 == 0 and node not in failed_once:
            failed_once.add(node)
            body = {"pool": "worker", "state": "Degraded", "currentConfig": old, "desiredConfig": target,
                    "reason": "the registry did not answer"}
            assert report(replica, node, body, fleet).status_code == 200
            return False
        body = {"pool": "worker", "state": "Done", "currentConfig": target, "desiredConfig": target}
        return report(replica, node, body, fleet).status_code == 200

    def may_work(targets):  # parked entries seen by the sampler too (one parked briefly may be missed: the fetches)
        parked_seen.update(n for n, e in targets.items() if e.get("parked"))
        return sum(1 for e in targets.values() if e.get("config") == target and not e.get("parked"))

    peak, errors = race_turns(fleet, nodes, take_turn, may_work,
                              "every node Done on the new target, failed ones after their retry", 180)
    assert errors == [] and 1 <= peak <= limit, (errors, peak, limit)
    # Each failed node was let retry in a free slot, which only a parked one is (targeting.py
    # _grant_retries), as the replica whose step stored it logs. Seeing it parked depends on the
    # timing (a slot free in the step that parks it lets it retry at once), so that is not asked.
    logs = "".join(r.log_text() for r in fleet.replicas)
    let_retry = {n for line in re.findall(rf"pool worker: (.*) may retry {re.escape(target)} in a free slot", logs)
                 for n in line.split(", ")}
    assert let_retry == failed_once and parked_seen <= failed_once, (failed_once - let_retry, parked_seen)
    view = all_done_seen_by(fleet.replicas[2], len(nodes))
    assert "failed" not in view["status"]["rollout"]


def test_a_first_boot_storm_survives_losing_an_etcd_member_and_a_replica(fleet, tmp_path):
    from agent.server.store.errors import StoreUnavailable
    from agent.server.store.etcd import drains
    from agent.server.store.etcd.client import EtcdClient, parse_store_url

    proven = pool(fleet.replicas[0])["status"]["served"]["config"]
    url = parse_store_url(fleet.etcd.url)
    watcher = EtcdClient(url.endpoints, timeout=10)
    limit = pool(fleet.replicas[0])["status"]["drain"]["maxUnavailable"]
    peak, stop = [0], threading.Event()
    lb = {f"drainer-{i:02d}": fleet.session(f"drainer-{i:02d}") for i in range(30)}

    hammer_errors = []
    config = pool(fleet.replicas[0])["spec"]["configuration"]["name"]  # what the drainers run (drain_storm)

    def drain_hammer():  # existing members keep asking for leases through the balancer
        i = 0
        while not stop.is_set():
            node = f"drainer-{i % 30:02d}"
            try:
                r = lb[node].post(f"{fleet.lb_url}/api/v1/nodes/{node}/drain",
                                  data=json.dumps({"pool": "worker", "config": config}), timeout=10)
                if r.status_code == 200:
                    lb[node].delete(f"{fleet.lb_url}/api/v1/nodes/{node}/drain", timeout=10)
            except requests.RequestException:
                pass  # a replica being killed: the node would retry
            except Exception as exc:  # anything else fails the test (below), not the thread alone
                hammer_errors.append(f"{type(exc).__name__}: {exc}")
                return
            i += 1

    samples, sample_errors = [0], []

    def sample():  # an etcd member killed under it is expected (counted); anything else fails the test
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], len(drains.holders(watcher, url.prefix, "worker")))
                samples[0] += 1
            except StoreUnavailable:
                pass  # the member it asked is the one killed: the next sample asks again
            except Exception as exc:
                sample_errors.append(f"{type(exc).__name__}: {exc}")
                return
            stop.wait(0.05)

    helpers = [threading.Thread(target=f, daemon=True) for f in (drain_hammer, sample)]
    for t in helpers:
        t.start()
    names = [f"storm-{i:02d}" for i in range(30)]
    try:
        with ThreadPoolExecutor(max_workers=6) as ex:
            futures = [ex.submit(boot_node, fleet, tmp_path, n) for n in names]
            wait_for(lambda: sum(f.done() for f in futures) >= 6, "the storm is under way", timeout=240, interval=0.2)
            fleet.etcd.kill(0)
            fleet.replicas[1].proc.send_signal(9)
            os.killpg(fleet.replicas[1].proc.pid, 9)
            nodes = [f.result() for f in futures]
    finally:
        stop.set()
        for t in helpers:
            t.join(15)
    fleet.etcd.start(0)
    fleet.restart_replica(1)
    assert [n for n in nodes if n["rc"] != 0] == []
    assert {n["served"] for n in nodes} == {proven}  # only what a member had proven
    results = [day2(n) for n in nodes]
    assert [r for r in results if r[0] != 0] == []

    def states(r):
        seen = {}
        for n in names:
            resp = r.session().get(r.url(f"/api/v1/nodes/{n}"), timeout=10)
            seen[n] = resp.json()["report"].get("state") if resp.status_code == 200 else resp.status_code
        return seen

    for r in fleet.replicas:  # every node Done, on every replica
        # A Done went through the balancer to one replica; the others see it through their watch.
        seen = wait_for(lambda r=r: (lambda s: s if set(s.values()) == {"Done"} else None)(states(r)),
                        f"every node Done on the replica on port {r.port}", 30)
        assert set(seen.values()) == {"Done"}, seen
    assert sample_errors == [] and samples[0] > 0, (sample_errors, samples)
    assert hammer_errors == [], hammer_errors
    assert peak[0] <= limit
    watcher.close()


def test_with_all_of_etcd_down_configs_still_serve_and_reports_wait_for_its_return(fleet, tmp_path):
    served = pool(fleet.replicas[0])["status"]["served"]["config"]
    fleet.session("offline-1")  # registered while etcd is up: credentials are checked from memory
    for i in range(3):
        fleet.etcd.kill(i)
    try:
        r = fleet.replicas[0]
        resp = r.session().get(r.url("/config/worker"), timeout=30)
        assert resp.status_code == 200
        resp = report(r, "offline-1", {"pool": "worker", "state": "Working"}, fleet)
        assert resp.status_code == 503 and int(resp.headers["Retry-After"]) >= 1, resp.text
        node = boot_node(fleet, tmp_path, "offline-2")
        assert node["rc"] == 0, node["stderr"]
        assert node["served"] == served
        assert os.path.exists(os.path.join(node["root"], "var/lib/node-agent/pending-report.json"))
    finally:
        fleet.etcd.start()
    rc, err = day2(node)
    assert rc == 0, err
    assert not os.path.exists(os.path.join(node["root"], "var/lib/node-agent/pending-report.json")), err
    for r in fleet.replicas:
        wait_for(lambda r=r: r.session().get(r.url("/api/v1/nodes/offline-2"), timeout=10).status_code == 200,
              "the kept report arrives once etcd is back", timeout=30)
