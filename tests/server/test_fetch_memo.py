"""Workers keep the answer to a new node's config fetch while nothing it depends on changed
(agent/server/http/fetchmemo.py), and a commit by any process ends it at once
(agent/server/store/changecounter.py).

In process: two ``App`` objects on one state directory are two gunicorn workers (each its own
SQLite connection; the counter file is shared). Kept answers live for an hour here, so an answer
that follows a commit can only come from the counter, never from the answer's age.
"""

import multiprocessing
import os
import shutil
import threading

import pytest

from agent.server.http.app import App
from agent.server.http.fetchmemo import MAX_ENTRIES, FetchMemo
from agent.server.store.changecounter import ChangeCounter
from agent.server.store.sqlite.db import Database
from tests.helpers.server_proc import REPO
from tests.kube.test_identity import call

EXAMPLE = os.path.join(REPO, "examples", "state")
ACCEPT = {"Accept": "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"}


def _bump(path: str, times: int) -> None:
    counter = ChangeCounter(path)
    for _ in range(times):
        counter.bump()


def test_the_counter_loses_no_commit_of_processes_or_threads(tmp_path):
    path = str(tmp_path / "nodes.db-gen")
    counter = ChangeCounter(path)
    assert counter.value() == 0
    threads = [threading.Thread(target=lambda: [counter.bump() for _ in range(500)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter.value() == 2000
    # Processes, one of them with the parent's counter (opened before the fork).
    fork = multiprocessing.get_context("fork")
    procs = [fork.Process(target=_bump, args=(path, 500)) for _ in range(3)]
    procs.append(fork.Process(target=lambda: [counter.bump() for _ in range(500)]))
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert counter.value() == 4000
    assert ChangeCounter(path).value() == 4000


def test_a_database_generation_grows_with_every_commit_of_any_connection_that_changed_a_row(tmp_path):
    one, other = Database(str(tmp_path / "nodes.db")), Database(str(tmp_path / "nodes.db"))
    before = one.generation()
    with other.write() as c:
        c.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")
    after = one.generation()
    assert after != before and after[0] == before[0] + 1
    with other.write() as c:  # a pool's step that decided nothing new: what workers keep stays good
        c.execute("SELECT value FROM meta WHERE key='k'").fetchone()
        c.execute("UPDATE meta SET value='v' WHERE key='none'")
    assert one.generation() == after
    assert oct(os.stat(tmp_path / "nodes.db-gen").st_mode & 0o777) == "0o600"
    assert Database(":memory:").generation() is None  # no counter: nothing is kept


def test_the_memo_keeps_an_answer_for_its_generation_and_its_time():
    now = [100.0]
    memo = FetchMemo(ttl=1.0, clock=lambda: now[0])
    memo.put("k", 1, "answer")
    assert memo.get("k", 1) == "answer"
    assert memo.get("k", 2) is None  # a commit since
    now[0] += 1.0
    assert memo.get("k", 1) is None  # too old: a commit the counter may have missed
    memo.put("k", None, "answer")  # no generation: never kept
    assert memo.get("k", None) is None
    for i in range(MAX_ENTRIES + 10):  # Accept is the client's to vary: bounded
        memo.put(("accept", i), 1, i)
    assert len(memo._entries) == MAX_ENTRIES and memo.get(("accept", MAX_ENTRIES + 9), 1) == MAX_ENTRIES + 9
    memo.put("k", 2, "new")  # a newer generation: nothing older can be used again, nor is held
    assert list(memo._entries) == ["k"]


@pytest.fixture
def workers(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLE, state)
    apps = [App(str(state), reload_interval=0.0) for _ in range(2)]
    for a in apps:
        a.memo.ttl = 3600.0
    yield state, apps
    for a in apps:
        a.close()


def served(app, **headers):
    got = {}
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/config/worker", "QUERY_STRING": ""}
    environ.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in {**ACCEPT, **headers}.items()})
    b"".join(app(environ, lambda status, hdrs: got.update(status=int(status.split()[0]), headers=dict(hdrs))))
    return got["status"], got["headers"]


def report(app, node, config):
    body = {"pool": "worker", "state": "Done", "currentConfig": config, "desiredConfig": config,
            "labels": {"node-role.kubernetes.io/worker": ""}}
    status, doc = call(app, "POST", f"/api/v1/nodes/{node}/report", body=body)
    assert status == 200, doc


def target(app):
    status, doc = call(app, "GET", "/api/v1/pools/worker")
    assert status == 200, doc
    return doc["spec"]["configuration"]["name"]


def test_another_workers_commit_ends_what_a_worker_keeps_at_once(workers):
    state, (a, b) = workers
    _, headers = served(a)
    c0 = headers["X-Served-Config"]
    report(b, "w1", c0)
    # A new MachineConfig: b reconciles (new target t1, unproven), a must not keep serving what
    # it had; a new node still gets c0 (no node runs t1), then t1 as soon as w1 proves it.
    mc = state / "machineconfigs" / "00-worker.yaml"
    mc.write_text(mc.read_text().replace("- cgroup_no_v1=all", "- cgroup_no_v1=all\n  - quiet"))
    t1 = target(b)
    assert t1 != c0
    assert served(a)[1]["X-Served-Config"] == c0  # a reconciles the change
    # what a's reconcile and w1's report queued is stepped and stored (commits of their own)
    assert a.cluster.pools_stepped(timeout=60) and b.cluster.pools_stepped(timeout=60)
    assert served(a)[1]["X-Served-Config"] == c0  # made afresh after those commits, then kept
    hits = a.memo.hits
    assert served(a)[1]["X-Served-Config"] == c0 and a.memo.hits == hits + 1
    report(b, "w1", t1)
    assert served(a)[1]["X-Served-Config"] == t1  # b's commit, not the answer's age


def test_kept_answers_spare_the_store_and_named_fetches_are_never_kept(workers):
    _, (a, _) = workers
    status, first = served(a)
    assert status == 200
    calls = []
    real = a.cluster.store.serving
    a.cluster.store.serving = lambda *args: calls.append(args) or real(*args)
    for _ in range(20):
        status, again = served(a)
        assert status == 200 and again == first
    assert calls == [] and a.memo.hits >= 20
    status, _ = served(a, **{"If-None-Match": first["ETag"]})  # a kept answer, still conditional
    assert status == 304
    hits = a.memo.hits
    status, _ = served(a, **{"X-Node-Name": "w9"})  # a member's fetch: its own store round trip
    assert status == 200 and a.memo.hits == hits and calls == [("worker", "w9")]
