"""The apply transaction journal: what an apply is about to change, and what it replaces.

Layout inside the root's state dir (``/var/lib/node-agent``)::

    journal.json        {"state": "applying"|"committed", "entries": [...], "live": [...], "os": [...]}
    journal.d/<n>       private copies (0600) of the files an apply replaces

Protocol (each write atomic and fsynced, see ``agent.host.files``):

1. ``begin``: copy every file that will be replaced into ``journal.d``, note the mode, owner and
   kind of every touched path (or that it did not exist), then write ``journal.json`` with state
   ``applying``. Nothing on the node changes before that write is durable.
2. The apply changes the node; before each live action (systemd) or OS action (rpm-ostree) it
   notes that action in the journal so it can be undone.
3. ``commit``: state ``committed``, then the journal is removed.

After a crash, ``recover`` looks at the journal: ``applying`` -> **roll back** (restore every
noted path, undo noted live/OS actions when the services are at hand; the caller then applies
again from a clean state, so live actions such as daemon-reload are not skipped), ``committed``
-> **roll forward** (only the clean-up was left). Restoring is idempotent, so a crash during
recovery is recovered by the next run the same way.
"""

import json
import logging
import os
import shutil
from typing import Dict, Iterable, List, Optional

from agent.host import files
from agent.host.root import Root

log = logging.getLogger(__name__)

JOURNAL = "journal.json"
BACKUPS = "journal.d"
_BACKUP_BATCH_BYTES = 64 << 20  # backups held in memory before they are written
_INVERSE = {"enable": "disable", "disable": "enable", "mask": "unmask", "unmask": "mask"}


class JournalError(Exception):
    pass


class Journal:
    def __init__(self, root: Root, state_dir: str = "/var/lib/node-agent"):
        self.root = root
        self.state_dir = state_dir
        self.doc: Dict = {}

    # -- locations -------------------------------------------------------------------------
    def _host_state(self) -> str:
        return self.root.path(self.state_dir)

    @property
    def journal_path(self) -> str:
        return os.path.join(self._host_state(), JOURNAL)

    @property
    def backup_dir(self) -> str:
        return os.path.join(self._host_state(), BACKUPS)

    def _host(self, rel: str) -> str:
        return os.path.join(self.root.top, rel) if rel else self.root.top

    def exists(self) -> bool:
        return os.path.exists(self.journal_path)

    def load(self) -> Dict:
        with open(self.journal_path, "rb") as f:
            self.doc = json.loads(f.read().decode("utf-8"))
        return self.doc

    def _save(self) -> None:
        # one line: json's C encoder (indent= takes the pure-Python one: ~0.5 s for 10,000 entries)
        files.atomic_write(self.journal_path, (json.dumps(self.doc) + "\n").encode(), 0o600, 0, 0)

    # -- the protocol ----------------------------------------------------------------------
    def begin(self, config_paths: Iterable, config_name: str = "") -> None:
        """Back up every path about to change, then write the journal (state ``applying``).

        Items are config paths, or (config path, follow last link) pairs.
        """
        host_state = self._host_state()
        files.makedirs(host_state, 0o755, 0, 0, stop=self.root.top)
        if os.path.isdir(self.backup_dir):
            shutil.rmtree(self.backup_dir)  # leftovers of a run killed before its journal existed
        files.makedirs(self.backup_dir, 0o700, 0, 0, stop=self.root.top)
        entries: List[Dict] = []
        seen = set()
        pending: List = []  # backups not yet written: (path, data, mode, uid, gid)
        pending_bytes = 0
        for item in config_paths:
            cp, follow = item if isinstance(item, tuple) else (item, False)
            host = self.root.path(cp, follow_last=follow)
            rel = os.path.relpath(host, self.root.top)
            if rel in seen:
                continue
            seen.add(rel)
            o = files.observe(host, read=False)
            entry = {"path": rel, "config_path": cp, "kind": o.kind}
            if o.kind != "absent":
                entry.update(mode=o.mode, uid=o.uid, gid=o.gid)
            if o.kind == "file":
                backup = os.path.join(self.backup_dir, str(len(entries)))
                with open(host, "rb") as f:
                    pending.append((backup, f.read(), 0o600, -1, -1))
                pending_bytes += len(pending[-1][1])
                if len(pending) >= 256 or pending_bytes >= _BACKUP_BATCH_BYTES:
                    files.write_many(pending)  # durable private copies, one fsync each
                    pending, pending_bytes = [], 0
                entry["backup"] = os.path.relpath(backup, self.root.top)
            elif o.kind == "symlink":
                entry["target"] = o.target
            elif o.kind == "other":
                raise JournalError(f"{cp} is a special file (device, socket or fifo); refusing to replace it")
            entries.append(entry)
        files.write_many(pending)
        files.fsync_dir(self.backup_dir)
        self.doc = {"version": 1, "state": "applying", "config": config_name, "entries": entries,
                    "live": [], "os": []}
        self._save()

    def note_live(self, action: str, units: List[str]) -> None:
        self.doc["live"].append({"action": action, "units": list(units)})
        self._save()

    def note_os(self, action: str) -> None:
        self.doc["os"].append(action)
        self._save()

    def commit(self) -> None:
        self.doc["state"] = "committed"
        self._save()
        self.cleanup()

    def cleanup(self) -> None:
        if os.path.isdir(self.backup_dir):
            shutil.rmtree(self.backup_dir)
        try:
            os.unlink(self.journal_path)
        except FileNotFoundError:
            pass
        files.fsync_dir(self._host_state())

    # -- undo ------------------------------------------------------------------------------
    def rollback(self, systemd=None, rpmostree=None) -> List[str]:
        """Restore every noted path (newest first) and undo noted live/OS actions; then clean up.

        Returns what could not be undone (empty when everything was restored).
        """
        problems: List[str] = []
        entries = self.doc.get("entries", [])
        directories = sorted({os.path.dirname(self._host(e["path"])) for e in entries})
        # First: a temporary file left by a killed write would keep a new directory from being
        # removed (a kill inside files.write_many, which has many temporaries open at once).
        for directory in directories:
            files.sweep_tmp(directory)
        for entry in reversed(entries):
            try:
                self._restore(entry)
            except OSError as e:
                problems.append(f"{entry.get('config_path')}: {e}")
        for directory in directories:
            files.sweep_tmp(directory)
        if self.doc.get("os"):
            if rpmostree is not None:
                try:
                    rpmostree.cleanup_pending()
                except Exception as e:  # a staged deployment left behind is reported, not fatal
                    problems.append(f"rpm-ostree cleanup --pending: {e}")
            else:
                problems.append("staged OS changes (" + ", ".join(self.doc["os"]) +
                                ") not undone: run 'rpm-ostree cleanup --pending'")
        live = self.doc.get("live", [])
        if live:
            if systemd is not None:
                for item in reversed(live):
                    inverse = _INVERSE.get(item["action"])
                    try:
                        if inverse:
                            getattr(systemd, f"{inverse}_unit_files")(item["units"])
                    except Exception as e:
                        problems.append(f"undo {item['action']} {item['units']}: {e}")
                try:
                    systemd.daemon_reload()
                except Exception as e:
                    problems.append(f"daemon-reload: {e}")
            else:
                problems.append("live systemd actions not undone (no systemd connection): "
                                + ", ".join(f"{i['action']} {' '.join(i['units'])}" for i in live))
        for p in problems:
            log.error("rollback: %s", p)
        self.cleanup()
        return problems

    def _restore(self, entry: Dict) -> None:
        host = self._host(entry["path"])
        kind = entry["kind"]
        now = files.observe(host, read=False)
        if kind == "absent":
            if now.kind == "dir":
                if not files.remove(host):
                    log.warning("rollback: directory %s is not empty, left in place", entry["config_path"])
            elif now.kind != "absent":
                files.remove(host)
            return
        if now.kind == "dir" and kind != "dir":
            files.remove(host)
        if kind == "file":
            with open(self._host(entry["backup"]), "rb") as f:
                data = f.read()
            if not (now.kind == "file" and _same_file(host, data, entry)):
                files.atomic_write(host, data, entry["mode"], entry["uid"], entry["gid"])
        elif kind == "symlink":
            if not (now.kind == "symlink" and now.target == entry["target"]):
                if now.kind == "dir":
                    files.remove(host)
                files.replace_symlink(host, entry["target"])
            os.chown(host, entry["uid"], entry["gid"], follow_symlinks=False)
        elif kind == "dir":
            if now.kind not in ("dir", "absent"):
                files.remove(host)
            if not os.path.isdir(host):
                os.mkdir(host, 0o700)
            files.set_attrs(host, entry["mode"], entry["uid"], entry["gid"])


def _same_file(host: str, data: bytes, entry: Dict) -> bool:
    o = files.observe(host, read=True)
    return o.data == data and o.mode == entry["mode"] and o.uid == entry["uid"] and o.gid == entry["gid"]


def recover(root: Root, state_dir: str = "/var/lib/node-agent", systemd=None, rpmostree=None) -> Optional[str]:
    """Finish or undo an apply a crash interrupted: "rolled-forward", "rolled-back" or None."""
    j = Journal(root, state_dir)
    files.sweep_tmp(j._host_state())  # a journal write killed before its rename
    if not j.exists():
        if os.path.isdir(j.backup_dir):
            shutil.rmtree(j.backup_dir)  # killed while preparing: nothing on the node had changed
        return None
    try:
        doc = j.load()
    except (OSError, ValueError) as e:
        raise JournalError(f"transaction journal {root.path(state_dir)}/{JOURNAL} is unreadable ({e}); "
                           "inspect it and the backups in journal.d/ by hand, then remove them")
    if doc.get("state") == "committed":
        j.cleanup()
        log.warning("recovered an interrupted apply of %s: rolled forward (it had committed)",
                    doc.get("config") or "a config", extra={"NODE_AGENT_STAGE": "apply"})
        return "rolled-forward"
    problems = j.rollback(systemd=systemd, rpmostree=rpmostree)
    log.warning("recovered an interrupted apply of %s: rolled back %d paths%s", doc.get("config") or "a config",
                len(doc.get("entries", [])), f" ({len(problems)} problems)" if problems else "",
                extra={"NODE_AGENT_STAGE": "apply"})
    return "rolled-back"
