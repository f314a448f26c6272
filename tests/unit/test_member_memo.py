"""A pool's members from the directory store (agent/server/cluster/members.py): the memo gives
what reading every record gives, and parses only the reports that changed since its last read."""

import json

import pytest

from agent.server.cluster import members
from agent.server.cluster.members import MemberMemo, read_members
from agent.server.rollout.progress import Membership
from agent.server.store.sqlite.db import Database
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
