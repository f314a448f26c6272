"""The server's memory: SQLite (WAL) at ``<data-dir>/nodes.db`` (serve --data-dir).

What survives a restart: every rendered config ever made (so a node on an old config can still
be served and diffed), each pool's target and current config with their history, the newest
report of every node, drain leases, the cordon/drain/uncordon record and the hash of each
node's credential.

The schema is versioned with ``PRAGMA user_version``; ``MIGRATIONS[i]`` takes version i to i+1.
Every gunicorn worker and thread opens its own connection (under the gevent worker: one per
worker process, shared by its greenlets); writers serialize on
``BEGIN IMMEDIATE`` so a reconcile is atomic across processes.
"""

import json
import logging
import os
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple

from agent.server.store.changecounter import ChangeCounter

log = logging.getLogger(__name__)

MIGRATIONS = [
    # 0 -> 1
    """
    CREATE TABLE rendered (
        name TEXT PRIMARY KEY, pool TEXT NOT NULL, spec TEXT NOT NULL, sources TEXT NOT NULL,
        created REAL NOT NULL);
    CREATE TABLE pools (
        name TEXT PRIMARY KEY, target TEXT NOT NULL, current TEXT NOT NULL,
        held TEXT NOT NULL DEFAULT '', rendered TEXT NOT NULL DEFAULT '', updated REAL NOT NULL);
    CREATE TABLE pool_history (
        id INTEGER PRIMARY KEY AUTOINCREMENT, pool TEXT NOT NULL, field TEXT NOT NULL,
        config TEXT NOT NULL, at REAL NOT NULL);
    CREATE TABLE reports (
        node TEXT PRIMARY KEY, pool TEXT NOT NULL, body TEXT NOT NULL, received REAL NOT NULL);
    CREATE TABLE leases (
        node TEXT PRIMARY KEY, pool TEXT NOT NULL, config TEXT NOT NULL,
        granted REAL NOT NULL, expires REAL NOT NULL);
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE drain_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, pool TEXT NOT NULL,
        action TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '', at REAL NOT NULL);
    """,
    # 1 -> 2: node state kept incrementally (agent/server/store/sqlite/nodestore.py). The membership
    # columns and counters are filled by the first server to start (no membership_signature yet).
    """
    ALTER TABLE reports ADD COLUMN why TEXT NOT NULL DEFAULT '';
    ALTER TABLE reports ADD COLUMN degraded TEXT NOT NULL DEFAULT '';
    CREATE INDEX reports_by_pool ON reports (pool, node);
    CREATE TABLE pool_counts (
        pool TEXT PRIMARY KEY, machine INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL DEFAULT 0,
        working INTEGER NOT NULL DEFAULT 0, reported_degraded INTEGER NOT NULL DEFAULT 0,
        degraded INTEGER NOT NULL DEFAULT 0, refused INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE proofs (
        pool TEXT NOT NULL, config TEXT NOT NULL, image TEXT NOT NULL, updated INTEGER NOT NULL DEFAULT 0,
        ready INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (pool, config, image));
    CREATE INDEX leases_by_pool ON leases (pool, granted);
    DELETE FROM meta WHERE key = 'membership_signature';
    """,
    # 2 -> 3: renderings shared by workers, keyed by their inputs (claimed while one renders).
    """
    CREATE TABLE renderings (
        inputs TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', claimed REAL NOT NULL);
    """,
    # 3 -> 4: per-node credentials (agent/server/rollout/identity.py): only the SHA-256 of each secret.
    """
    CREATE TABLE credentials (
        node TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, created REAL NOT NULL);
    """,
    # 4 -> 5: approval (docs/security.md "Identity"): approved = when (0: pending), by whom or what
    # rule; the labels the admin vouched for (JSON or NULL); the configs served to the node as
    # itself (JSON list). Nodes registered before approval existed stay counted ("upgrade").
    """
    ALTER TABLE credentials ADD COLUMN approved REAL NOT NULL DEFAULT 0;
    ALTER TABLE credentials ADD COLUMN approved_by TEXT NOT NULL DEFAULT '';
    ALTER TABLE credentials ADD COLUMN labels TEXT;
    ALTER TABLE credentials ADD COLUMN served TEXT NOT NULL DEFAULT '[]';
    UPDATE credentials SET approved = created, approved_by = 'upgrade';
    CREATE INDEX credentials_pending ON credentials (approved, node);
    """,
    # 5 -> 6: the pool's rollout (which nodes the server targeted: agent/server/rollout/targeting.py), JSON.
    """
    ALTER TABLE pools ADD COLUMN rollout TEXT NOT NULL DEFAULT '{}';
    """,
    # 6 -> 7: first boots not done (agent/server/rollout/firstboots.py is_open), indexed so that
    # views and /metrics cost O(open first boots). Reports written before hold no first-boot record.
    """
    ALTER TABLE reports ADD COLUMN firstboot INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX reports_firstboot ON reports (firstboot, pool, node) WHERE firstboot = 1;
    """,
    # 7 -> 8: where each registration came from (docs/security.md "Identity": the pending list
    # shows it, and --max-pending-per-address counts pending names per address).
    """
    ALTER TABLE credentials ADD COLUMN address TEXT NOT NULL DEFAULT '';
    """,
    # 8 -> 9: which nodes' members changed, in order (SqliteNodeStore.member_changes): a pool's step
    # reads only those (agent/server/cluster/members.py). Written by triggers, so that no write of a
    # report or a registration can miss it; the oldest are dropped past MEMBER_CHANGES_KEPT (a reader
    # behind them reads its pool whole).
    """
    CREATE TABLE member_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL);
    CREATE TRIGGER member_report_added AFTER INSERT ON reports
        BEGIN INSERT INTO member_changes (node) VALUES (NEW.node); END;
    CREATE TRIGGER member_report_changed AFTER UPDATE OF pool, body, received ON reports
        BEGIN INSERT INTO member_changes (node) VALUES (NEW.node); END;
    CREATE TRIGGER member_report_gone AFTER DELETE ON reports
        BEGIN INSERT INTO member_changes (node) VALUES (OLD.node); END;
    CREATE TRIGGER member_registered AFTER INSERT ON credentials
        BEGIN INSERT INTO member_changes (node) VALUES (NEW.node); END;
    CREATE TRIGGER member_registration_changed AFTER UPDATE OF created ON credentials
        BEGIN INSERT INTO member_changes (node) VALUES (NEW.node); END;
    CREATE TRIGGER member_registration_gone AFTER DELETE ON credentials
        BEGIN INSERT INTO member_changes (node) VALUES (OLD.node); END;
    CREATE TRIGGER member_changes_kept AFTER INSERT ON member_changes WHEN NEW.seq % 1000 = 0
        BEGIN DELETE FROM member_changes WHERE seq <= NEW.seq - 100000; END;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


def statements(script: str) -> List[str]:
    """The SQL statements of ``script``, whole: a trigger's body holds ``;`` too."""
    out, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                out.append(pending)
            pending = ""
    return out


class SchemaTooNew(Exception):
    pass


class DatabaseUnusable(Exception):
    """nodes.db cannot be used as it is; the message names the file and what to do."""

    exit_code = 74  # EX_IOERR


def _prepare_file(path: str) -> None:
    """Create ``path`` mode 0600 (it holds every node's reports; SQLite gives its -wal and -shm
    files the database's mode), tighten an existing one, and refuse a zero-length file: SQLite
    would silently start an empty database over what was probably a truncated one."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        st = os.stat(path)
        if st.st_size == 0:
            raise DatabaseUnusable(f"{path} is empty (0 bytes), not a node-config-server database: it was "
                                   f"probably truncated. Restore it from a backup, or remove it to start "
                                   f"with no node history (nodes report again)")
        if st.st_mode & 0o077:
            try:
                os.chmod(path, 0o600)
            except OSError:
                pass  # not ours to change (read-only mount): SQLite still works
        return
    os.close(fd)
    c = sqlite3.connect(path)
    try:  # writes the header at once: our own new file is never seen zero-length
        c.execute("PRAGMA journal_mode=WAL")
    finally:
        c.close()


def _os_thread_local() -> Any:
    """Storage per OS thread. Under the gevent worker ``threading.local`` is per greenlet, i.e.
    per client connection: each connection would open (and drop) its own SQLite connection.
    gevent's original class keeps one per OS thread, shared by the worker's greenlets."""
    gevent_monkey = sys.modules.get("gevent.monkey")
    if gevent_monkey is not None and gevent_monkey.is_module_patched("threading"):
        return gevent_monkey.get_original("threading", "local")()
    return threading.local()


class Database:
    def __init__(self, path: str):
        self.path = path
        self._local = _os_thread_local()
        # Greenlets share a connection: one write transaction at a time per process (a write
        # never waits on I/O inside, but the lock makes that an invariant, not an accident).
        # Cooperative under gevent, uncontended with one connection per thread.
        self._write_lock = threading.RLock()
        self.opened = 0  # connections opened by this process (tests check they do not churn)
        self.writes = 0
        if path != ":memory:":
            _prepare_file(path)
        self.changes = ChangeCounter.beside(path)  # commits by every process (fetchmemo.py)
        try:
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise DatabaseUnusable(f"{path} cannot be used: {exc}. It is corrupt or not a node-config-server "
                                   f"database: restore it from a backup, or move it away to start with no "
                                   f"node history") from None

    def _migrate(self) -> None:
        path = self.path
        with self.write() as conn:  # creates the file and migrates once
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(f"{path} has schema version {version}; this server knows up to "
                                   f"{SCHEMA_VERSION}: use a newer node-config-server")
            for i in range(version, SCHEMA_VERSION):
                # One statement at a time: executescript() would commit mid-transaction.
                for stmt in statements(MIGRATIONS[i]):
                    conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {i + 1}")

    def conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=True)
            c.row_factory = sqlite3.Row
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute("PRAGMA busy_timeout=30000")
            self._local.conn = c
            self.opened += 1
        return c

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            c = self.conn()
            before = c.total_changes
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
            except BaseException:
                c.execute("ROLLBACK")
                raise
            else:
                c.execute("COMMIT")
                # A transaction that changed no row (a pool's step that decided nothing new, every
                # second on every worker) is no commit to count: counting it ended every answer the
                # workers keep (fetchmemo.py) once a second on an idle cluster.
                if c.total_changes != before:
                    self.writes += 1
                    if self.changes is not None:
                        self._count_commit()

    def _count_commit(self) -> None:
        try:
            self.changes.bump()
        except OSError as exc:  # committed all the same: what workers keep expires within a second
            log.warning("%s: commit not counted (%s); workers may answer from what they keep for up to "
                        "a second", self.changes.path, exc)

    def generation(self) -> Optional[Tuple[int, int]]:
        """Grows with every commit, this process's and others' (changecounter.py); read it
        before reading what it is to vouch for. None: not known (no counter file)."""
        if self.changes is None:
            return None
        return self.changes.value(), self.writes

    def close(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    # -- reads -------------------------------------------------------------------------------

    def schema_version(self) -> int:
        return self.conn().execute("PRAGMA user_version").fetchone()[0]

    def rendered_spec(self, name: str) -> Optional[Dict[str, Any]]:
        row = self.conn().execute("SELECT spec FROM rendered WHERE name=?", (name,)).fetchone()
        return json.loads(row[0]) if row else None

    def rendered_pool(self, name: str) -> Optional[str]:
        row = self.conn().execute("SELECT pool FROM rendered WHERE name=?", (name,)).fetchone()
        return row[0] if row else None

    def rendered_names(self, pool: Optional[str] = None) -> List[str]:
        if pool is None:
            rows = self.conn().execute("SELECT name FROM rendered ORDER BY created, name").fetchall()
        else:
            rows = self.conn().execute("SELECT name FROM rendered WHERE pool=? ORDER BY created, name",
                                       (pool,)).fetchall()
        return [r[0] for r in rows]

    def pools(self) -> Dict[str, Dict[str, Any]]:
        rows = self.conn().execute("SELECT name, target, current, held, rendered, rollout, updated FROM pools").fetchall()
        return {r["name"]: dict(r) for r in rows}

    def history(self, pool: str) -> List[Dict[str, Any]]:
        rows = self.conn().execute("SELECT field, config, at FROM pool_history WHERE pool=? ORDER BY id",
                                   (pool,)).fetchall()
        return [dict(r) for r in rows]

    def reports(self) -> Dict[str, Dict[str, Any]]:
        out = {}
        for r in self.conn().execute("SELECT node, pool, body, received FROM reports").fetchall():
            body = json.loads(r["body"])
            body["_received"] = r["received"]
            out[r["node"]] = body
        return out

    def report(self, node: str) -> Optional[Dict[str, Any]]:
        r = self.conn().execute("SELECT body FROM reports WHERE node=?", (node,)).fetchone()
        return json.loads(r[0]) if r else None

    def leases(self, now: Optional[float] = None) -> List[Dict[str, Any]]:
        now = time.time() if now is None else now
        rows = self.conn().execute("SELECT node, pool, config, granted, expires FROM leases WHERE expires > ?",
                                   (now,)).fetchall()
        return [dict(r) for r in rows]

    def drain_events(self, node: Optional[str] = None) -> List[Dict[str, Any]]:
        if node:
            rows = self.conn().execute("SELECT * FROM drain_events WHERE node=? ORDER BY id", (node,)).fetchall()
        else:
            rows = self.conn().execute("SELECT * FROM drain_events ORDER BY id").fetchall()
        return [dict(r) for r in rows]

    def meta(self, key: str) -> Optional[str]:
        row = self.conn().execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    # -- writes (inside ``with db.write() as c``) --------------------------------------------

    @staticmethod
    def put_rendered(c: sqlite3.Connection, pool: str, name: str, spec: Dict[str, Any], sources: List[str]) -> None:
        c.execute("INSERT OR IGNORE INTO rendered (name, pool, spec, sources, created) VALUES (?,?,?,?,?)",
                  (name, pool, json.dumps(spec, sort_keys=True), json.dumps(list(sources)), time.time()))

    @staticmethod
    def set_pool(c: sqlite3.Connection, pool: str, target: str, current: str, held: str, rendered: str,
                 old: Optional[Dict[str, Any]], rollout: Optional[Dict[str, Any]] = None) -> None:
        now = time.time()
        c.execute("INSERT INTO pools (name, target, current, held, rendered, rollout, updated) VALUES "
                  "(?,?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET target=excluded.target, current=excluded.current, "
                  "held=excluded.held, rendered=excluded.rendered, rollout=excluded.rollout, updated=excluded.updated",
                  (pool, target, current, held, rendered, json.dumps(rollout or {}, sort_keys=True), now))
        if old is None or old["target"] != target:
            c.execute("INSERT INTO pool_history (pool, field, config, at) VALUES (?,?,?,?)", (pool, "target", target, now))
        if old is None or old["current"] != current:
            c.execute("INSERT INTO pool_history (pool, field, config, at) VALUES (?,?,?,?)",
                      (pool, "current", current, now))

    @staticmethod
    def set_meta(c: sqlite3.Connection, key: str, value: str) -> None:
        c.execute("INSERT INTO meta (key, value) VALUES (?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                  (key, value))

    @staticmethod
    def put_report(c: sqlite3.Connection, node: str, pool: str, body: Dict[str, Any]) -> None:
        c.execute("INSERT INTO reports (node, pool, body, received) VALUES (?,?,?,?) "
                  "ON CONFLICT(node) DO UPDATE SET pool=excluded.pool, body=excluded.body, "
                  "received=excluded.received", (node, pool, json.dumps(body, sort_keys=True), time.time()))

    @staticmethod
    def record_drain(c: sqlite3.Connection, node: str, pool: str, action: str, detail: str = "") -> None:
        c.execute("INSERT INTO drain_events (node, pool, action, detail, at) VALUES (?,?,?,?,?)",
                  (node, pool, action, detail, time.time()))
