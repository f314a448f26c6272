"""A pool's members from the directory store (agent/server/cluster/members.py): the memo gives
what reading every record gives, and parses only the reports that changed since its last read."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.server.cluster import members
from agent.server.cluster.members import MemberMemo, read_members
from agent.server.rollout.poolindex import PoolIndex
from agent.server.rollout.progress import Membership
from agent.server.store.sqlite.db import Database, statements
from agent.server.store.sqlite.nodestore import SqliteNodeStore


@pytest.fixture
def store(tmp_path):
    s = SqliteNodeStore(Database(str(tmp_path / "nodes.db")))
    yield s
    s.close()


def report(store, node, state="Done", pool="worker", now=1.0, **extra):
    body = {"pool": pool, "state": state, "currentConfig": "A", "labels": {"node-role.kubernetes.io/worker": ""},
            **extra}
    store.record_report(node, body, Membership(pool, "label"), now)


def test_the_memo_gives_the_members_that_reading_every_record_gives(store):
    for i in range(30):
        report(store, f"n{i:02d}", state=("Done", "Working")[i % 2], now=float(i))
    store.put_credential("n03", "h3", 123.0, replace=False)
    report(store, "first-boot", firstPivotConfig="A", state="Working", _server={"firstBoot": True})
    report(store, "infra-1", pool="infra")
    got = MemberMemo().members(store, "worker")
    assert got == read_members(store, "worker")
    assert len(got) == 30 and {m.name: m.created for m in got}["n03"] == 123.0  # the first boot is no member


def test_a_second_read_parses_only_the_reports_that_changed(store, monkeypatch):
    for i in range(50):
        report(store, f"n{i:02d}")
    memo = MemberMemo()
    memo.members(store, "worker")
    report(store, "n07", state="Working", now=2.0)
    report(store, "n51", now=2.0)
    parsed = []
    real = json.loads
    monkeypatch.setattr(members.json, "loads", lambda text: parsed.append(text) or real(text))
    got = memo.members(store, "worker")
    monkeypatch.undo()
    assert len(parsed) == 2 and {m.name: m.report["state"] for m in got}["n07"] == "Working"
    assert got == read_members(store, "worker")


def index_of(memo, store, pool, index):
    """A PoolIndex kept up to date as a pool's step keeps it (rolloutctl._file_members)."""
    delta = memo.changes(store, pool, index.cursor)
    if delta is None:
        members_now, index.cursor = memo.read(store, pool)
        index.sync(members_now)
    else:
        index.cursor = delta[0]
        index.apply(delta[1], delta[2])
    return index


OPS = st.lists(st.tuples(st.sampled_from(["report", "move", "delete", "register", "first-boot"]),
                         st.sampled_from([f"n{i}" for i in range(6)]), st.sampled_from(["Done", "Working"])),
               max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS, st.integers(1, 4))
def test_members_read_by_the_stores_changes_are_what_reading_every_record_gives(tmp_path_factory, ops, every):
    """Reports, moves to another pool, deletions and registrations, read every few writes: the
    memo's members and an index fed only the changes both equal a read of every record."""
    store = SqliteNodeStore(Database(str(tmp_path_factory.mktemp("db") / "nodes.db")))
    memo, index = MemberMemo(), PoolIndex()
    try:
        for i, (op, node, state) in enumerate(ops):
            if op == "report":
                report(store, node, state=state, now=float(i))
            elif op == "move":
                report(store, node, pool="infra", now=float(i))
            elif op == "delete":
                store.delete_node(node, float(i))
            elif op == "register":
                store.put_credential(node, f"h{i}", float(i), replace=True)
            else:
                report(store, node, state="Working", firstPivotConfig="A", _server={"firstBoot": True})
            if i % every == 0:
                want = read_members(store, "worker")
                assert memo.members(store, "worker") == sorted(want, key=lambda m: m.name)
                assert index_of(memo, store, "worker", index).members == {m.name: m for m in want}
    finally:
        store.close()


def test_a_step_after_one_report_reads_that_report_alone(store, monkeypatch):
    for i in range(50):
        report(store, f"n{i:02d}")
    memo = MemberMemo()
    index = index_of(memo, store, "worker", PoolIndex())
    report(store, "n07", state="Working", now=2.0)
    monkeypatch.setattr(store, "member_texts", lambda pool: pytest.fail("read every member"))
    parsed = []
    real = json.loads
    monkeypatch.setattr(members.json, "loads", lambda text: parsed.append(text) or real(text))
    index_of(memo, store, "worker", index)
    assert len(parsed) == 1 and index.members["n07"].report["state"] == "Working"


def test_a_second_store_on_the_same_file_reads_the_changes_the_first_one_wrote(tmp_path):
    """Two workers on one file: the triggers number every writer's changes."""
    path = str(tmp_path / "nodes.db")
    one, two = SqliteNodeStore(Database(path)), SqliteNodeStore(Database(path))
    try:
        report(one, "a")
        memo = MemberMemo()
        index = index_of(memo, two, "worker", PoolIndex())
        report(one, "b", state="Working")
        one.delete_node("a", 2.0)
        assert memo.changes(two, "worker", index.cursor)[1:] == ([index_of(memo, two, "worker", PoolIndex())
                                                                  .members["b"]], ["a"])
    finally:
        one.close()
        two.close()


def test_a_reader_behind_the_changes_the_store_kept_reads_the_pool_whole(store, monkeypatch):
    report(store, "a")
    head = store.member_changes(None)[0]
    report(store, "b")
    assert [row[0] for row in store.member_changes(head)[1]] == ["b"]
    store.db.conn().execute("DELETE FROM member_changes")  # as the trigger drops the oldest
    report(store, "c")
    assert store.member_changes(head) is None
    monkeypatch.setattr("agent.server.store.sqlite.nodestore.MEMBER_CHANGES_READ", 1)
    report(store, "d")
    assert store.member_changes(head + 1) is None  # c and d: more than it reads one by one


def test_a_database_of_schema_8_numbers_its_changes_once_migrated(tmp_path):
    path = str(tmp_path / "nodes.db")
    old = SqliteNodeStore(Database(path))
    report(old, "a")
    conn = old.db.conn()
    for trigger in [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]:
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE member_changes")
    conn.execute("PRAGMA user_version = 8")
    old.close()
    store = SqliteNodeStore(Database(path))
    try:
        memo = MemberMemo()
        index = index_of(memo, store, "worker", PoolIndex())
        report(store, "b")
        assert memo.changes(store, "worker", index.cursor)[1][0].name == "b"
        assert sorted(index_of(memo, store, "worker", index).members) == ["a", "b"]
    finally:
        store.close()


def test_migrations_split_into_whole_statements_a_trigger_body_included():
    script = "CREATE TABLE t (a);\nCREATE TRIGGER x AFTER INSERT ON t BEGIN INSERT INTO t VALUES (1); END;\n"
    assert [s.strip() for s in statements(script)] == [
        "CREATE TABLE t (a);", "CREATE TRIGGER x AFTER INSERT ON t BEGIN INSERT INTO t VALUES (1); END;"]
