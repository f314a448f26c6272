"""The day-2 drift monitor: the current config's files, links, directories and units, checked
on disk on start, before every update and on change, as the MCD's config drift monitor does
(machine-config-operator pkg/daemon/config_drift_monitor.go; the comparison, with where we
differ from the MCD: agent/core/drift.py).

- ``DriftMonitor.check(config)``: a full check (every path hashed, streamed), recorded in
  ``<state>/drift.json`` (what ``node-agent status`` shows) and reported to the server when
  what is drifted changes: Degraded with the MCD's reason, naming each path and what differs;
  Done again once nothing is.
- ``DriftMonitor.idle(seconds)``: waits for the next pass. With inotify (agent/host/inotify.py)
  it watches the directories of every path and re-checks the paths an event names (a queue
  overflow or a directory coming or going: everything); without it, it sleeps and the next pass
  checks everything (a periodic check, at the update interval).
- ``DriftMonitor.during(fetch)``: the same watch while the loop's fetch is held by the server
  (up to turn.HOLD seconds, until the node's turn): drift is reported when it happens, and the
  force file is taken at once, not when the hold ends.
- The force file ``/run/node-agent-force`` (under ``--root``), as the MCD's
  ``/run/machine-config-daemon-force``: its presence skips the validation once and re-applies
  the config; it is removed when taken (the MCD removes its own).
"""

import json
import logging
import os
import select
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set

from agent.core import drift as core
from agent.core.nodeconfig import NodeConfig
from agent.errors import EXIT_DRIFTED, NodeAgentError
from agent.host import ondisk
from agent.host.root import Root
from agent.node.status import utc_now

log = logging.getLogger(__name__)

FORCE_FILE = core.FORCE_FILE
RECORD = "drift.json"


class DriftRefused(NodeAgentError):
    """The node's disk is not what the config it is at laid down: an update is not applied
    over it (the MCD's rule). ``reason`` is what the server is told."""

    exit_code = EXIT_DRIFTED

    def __init__(self, message: str, reason: str, hint: str = ""):
        super().__init__(message)
        self.reason = reason
        self.hint = hint  # what to do (agent.node.status.hint_for_error)


def build_expectation(root: Root, config: NodeConfig) -> core.Expectation:
    """What ``config`` laid down, owners resolved in the root's passwd/group and the [Install]
    section of units it enables without writing them read from the root."""
    from agent.host.accounts import read_accounts

    acc = read_accounts(root)

    def lookup(kind: str, name: str) -> Optional[int]:
        return acc.uid_of(name) if kind == "user" else acc.gid_of(name)

    texts: Dict[str, Any] = {}
    for u in config.units:
        if u.get("contents") is None and u.get("enabled") is not None:
            found = ondisk.unit_text(root, u["name"])
            if found:
                texts[u["name"]] = found
    return core.expectation(config, lookup, texts)


def check(root: Root, expect: core.Expectation, only: Optional[Set[str]] = None) -> List[core.Drift]:
    """The drifted paths (``only``: just these, and the expected paths under them)."""
    paths = expect.paths
    if only is not None:
        paths = [p for p in paths if p in only or any(p.startswith(o.rstrip("/") + "/") for o in only)]
    seen = ondisk.observe_all(root, paths, core.digests_wanted(expect))
    stray = ondisk.enablement_links(root, expect.disabled_units)
    return core.compare(expect, seen, stray, None if only is None else set(paths) | only)


def force_requested(root: Root) -> bool:
    try:
        return os.path.lexists(root.path(FORCE_FILE, follow_last=False))
    except OSError:
        return False


def take_force_file(root: Root) -> bool:
    """Remove the force file (taken once, as the MCD takes its own); whether there was one."""
    try:
        os.unlink(root.path(FORCE_FILE, follow_last=False))
    except FileNotFoundError:
        return False
    except OSError as e:
        log.warning("could not remove the force file %s: %s; remove it by hand or it forces every pass",
                    root.path(FORCE_FILE, follow_last=False), e)
    return True


def read_record(root: Root, state_dir: str) -> Optional[Dict[str, Any]]:
    try:
        with open(root.path(os.path.join(state_dir, RECORD)), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_record(root: Root, state_dir: str, data: Dict[str, Any]) -> None:
    from agent.host.files import atomic_write

    path = root.path(os.path.join(state_dir, RECORD))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode(), mode=0o644)


class DriftMonitor:
    """One per ``node-agent update`` process. ``send``: a report to the server (the Reporter's
    send, or None to record only); ``pool``: the node's pool for the report."""

    def __init__(self, root: Root, state_dir: str, *, send: Optional[Callable[[Dict[str, Any]], Any]] = None,
                 pool: str = "", sleep: Callable[[float], None] = time.sleep, use_inotify: bool = True):
        self.root, self.state_dir = root, state_dir
        self.send, self.pool, self.sleep = send, pool, sleep
        self.use_inotify = use_inotify
        self.config: Optional[NodeConfig] = None
        self.expect: Optional[core.Expectation] = None
        self.drifts: Dict[str, core.Drift] = {}
        self.watcher = None
        self._watch_failed = False
        self._left: Optional[threading.Thread] = None  # a held fetch the force file stopped waiting for

    # -- checks ---------------------------------------------------------------------------------

    def _expect(self, config: NodeConfig) -> core.Expectation:
        """The expectation of ``config``, built once per config (decoding and hashing its contents)."""
        if (self.expect is None or self.config is None or self.config.name != config.name
                or self.config.ignition != config.ignition):
            self._close_watch()
            self.config, self.expect = config, build_expectation(self.root, config)
        return self.expect

    def check(self, config: NodeConfig) -> List[core.Drift]:
        """A full check of ``config``'s paths; recorded and reported when it changed. The watch
        (inotify, when there is one) is set up first: a change after that is an event, and one
        before it is seen by this check; set up after, an edit in between was missed until the
        next full check (up to the update interval)."""
        expect = self._expect(config)
        self._watch()
        started = time.monotonic()
        found = check(self.root, expect)
        log.debug("drift check of %d paths of %s in %.3fs: %d drifted", len(expect.entries), config.name,
                  time.monotonic() - started, len(found))
        self._settle({d.path: d for d in found})
        return found

    def check_paths(self, paths: Set[str]) -> None:
        if self.expect is None or self.config is None:
            return
        found = check(self.root, self.expect, only=paths)
        now = {p: d for p, d in self.drifts.items()
               if p not in paths and not any(p.startswith(o.rstrip("/") + "/") for o in paths)}
        now.update({d.path: d for d in found})
        self._settle(now)

    def forget(self) -> None:
        """The config was (re-)applied: what was found before no longer stands."""
        self.drifts = {}
        self.config = self.expect = None
        self._close_watch()

    def _settle(self, now: Dict[str, core.Drift]) -> None:
        config = self.config
        assert config is not None and self.expect is not None
        order = {p: i for i, p in enumerate(self.expect.paths)}
        ordered = sorted(now.values(), key=lambda d: (order.get(d.path, len(order)), d.path))
        before = read_record(self.root, self.state_dir) or {}
        state = core.DriftState(config.name, utc_now(), ordered, self.expect.unchecked_content)
        was = [(d.get("path"), d.get("differences")) for d in before.get("drifted") or []]
        # Reported when drift appears or changes, and when it is gone: a clean check after a
        # clean one (or the first one) says nothing (the update's own reports say Done).
        changed = (bool(ordered) and (was != [(d.path, list(d.differences)) for d in ordered]
                                      or before.get("config") != config.name)) or (not ordered and bool(was))
        self.drifts = {d.path: d for d in ordered}
        _write_record(self.root, self.state_dir, state.to_dict())
        if not changed:
            return
        if ordered:
            for d in ordered:
                log.error("on-disk drift of %s: %s", config.name, d.text())
            log.error("what to do: restore the files named above, or re-apply %s with "
                      "'node-agent update --force' (or touch %s)", config.name, FORCE_FILE)
        elif before.get("drifted"):
            log.info("no on-disk drift of %s any more", config.name)
        self._report(ordered)

    def _report(self, drifts: List[core.Drift]) -> None:
        if self.send is None or self.config is None:
            return
        name = self.config.name
        if drifts:
            payload = {"pool": self.pool, "state": "Degraded", "currentConfig": name, "desiredConfig": name,
                       "reason": core.reason(name, drifts)}
        else:
            from agent.node import nodestate

            if nodestate.reboot_pending(self.root, self.state_dir) is not None:
                return  # Working until the reboot: the loop reports Done after it (update.py)
            payload = {"pool": self.pool, "state": "Done", "currentConfig": name, "desiredConfig": name}
        self.send(payload)

    def refusal(self, target_name: str) -> Optional[DriftRefused]:
        """The error refusing to apply ``target_name`` over the drift found, or None."""
        if not self.drifts or self.config is None:
            return None
        drifts = list(self.drifts.values())
        text = core.reason(self.config.name, drifts)
        first = "; ".join(d.text() for d in drifts[:3]) + (f"; and {len(drifts) - 3} more" if len(drifts) > 3 else "")
        return DriftRefused(
            f"{target_name} was not applied: {core.REASON_PREFIX} {self.config.name}: {first}", text,
            f"restore those paths as {self.config.name} has them (then the next pass applies {target_name}), "
            f"or run 'node-agent update --force' (or touch {FORCE_FILE}) to apply over them")

    # -- waiting --------------------------------------------------------------------------------

    def _close_watch(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None

    def _watch(self):
        if self.watcher is not None or self._watch_failed or not self.use_inotify or self.expect is None:
            return self.watcher
        from agent.host import inotify

        if not inotify.available():
            self._watch_failed = True
            log.info("inotify is not available: on-disk drift is checked at every update pass")
            return None
        try:
            self.watcher = inotify.DirWatcher(self.root, self.expect.watch_dirs() + [os.path.dirname(FORCE_FILE)]
                                              + self._link_dirs())
        except Exception as e:  # out of watches, a path leaving the root...: never stops the loop
            self._watch_failed = True
            log.warning("cannot watch the config's directories (%s): on-disk drift is checked at every "
                        "update pass instead", e)
        return self.watcher

    def _link_dirs(self) -> List[str]:
        """The ``*.wants``/``*.requires``/``*.upholds`` directories there are, where a unit that
        must stay disabled could get a link (a new one appears in /etc/systemd/system: watched)."""
        from agent.core.applyplan.unitfiles import SYSTEM_DIR

        if self.expect is None or not self.expect.disabled_units:
            return []
        try:
            names = os.listdir(self.root.path(SYSTEM_DIR))
        except OSError:
            return []
        return [f"{SYSTEM_DIR}/{n}" for n in sorted(names) if n.endswith((".wants", ".requires", ".upholds"))]

    @property
    def watching(self) -> bool:
        return self.watcher is not None

    def idle(self, seconds: float) -> None:
        """Until the next pass: re-check what changes meanwhile (inotify), else sleep. Returns
        early when the force file appears."""
        watcher = self._watch()
        if watcher is None:
            self.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                changed = watcher.wait(left)
            except Exception as e:  # the watch broke: fall back to the periodic check
                log.warning("watching the config's directories failed (%s): on-disk drift is checked at every "
                            "update pass instead", e)
                self._close_watch()
                self._watch_failed = True
                self.sleep(max(0.0, deadline - time.monotonic()))
                return
            if self._handle(changed):
                return  # the next pass takes the force file
            watcher = self.watcher
            if watcher is None:  # a new link directory could not be watched
                self.sleep(max(0.0, deadline - time.monotonic()))
                return

    def _handle(self, changed) -> bool:
        """Re-check what ``changed`` names (FULL: everything); True when the force file is there
        (a FULL rebuild may have hidden its own event): the wait ends, the next pass takes it."""
        from agent.host.inotify import FULL

        if changed and force_requested(self.root):
            return True
        if changed == FULL:
            if self.config is not None:
                self.check(self.config)
        elif changed:
            self.check_paths(set(changed))
            if any(p.endswith((".wants", ".requires", ".upholds")) for p in changed):
                self._close_watch()  # a new link directory: watch it too, then check all (the gap)
                self._watch()
                if self.config is not None:
                    self.check(self.config)
        return False

    def during(self, fetch: Callable[[], Any]) -> Optional[Any]:
        """``fetch()`` (the loop's held fetch: the server may hold it turn.HOLD seconds, until
        the node's turn) on a thread of its own, while this one re-checks what changes meanwhile
        as ``idle`` does: drift is reported when it happens, not when the hold ends. None: the
        force file appeared; the pass that takes it fetches again, unheld, and this fetch's
        answer is dropped when it comes. Only the fetch runs there (the reports, the records
        and the credential stay on this thread), and one left running at most: then it is
        waited for as before."""
        if self._watch() is None or (self._left is not None and self._left.is_alive()):
            return fetch()
        box: Dict[str, Any] = {}
        wake_r, wake_w = os.pipe()

        def run() -> None:
            try:
                box["answer"] = fetch()
            except BaseException as exc:  # raised on the loop's thread
                box["error"] = exc
            finally:
                try:
                    os.write(wake_w, b".")
                except OSError:  # the loop stopped waiting (the force file) and closed its end
                    pass
                os.close(wake_w)

        thread = threading.Thread(target=run, name="held-fetch", daemon=True)
        thread.start()
        try:
            while not box:  # the fetch's answer or error, set before it wakes this thread
                if self._wait_during(wake_r):
                    self._left = thread
                    return None
        finally:
            os.close(wake_r)
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["answer"]

    def _wait_during(self, wake_fd: int) -> bool:
        """One wait of ``during``: True when the force file ends it."""
        watcher = self.watcher
        if watcher is None:  # the watch broke: only the fetch is waited for
            select.select([wake_fd], [], [])
            return False
        try:
            changed = watcher.wait(None, wake_fd=wake_fd)
        except Exception as e:
            log.warning("watching the config's directories failed (%s): on-disk drift is checked at every "
                        "update pass instead", e)
            self._close_watch()
            self._watch_failed = True
            return False
        return self._handle(changed)


__all__ = ["FORCE_FILE", "DriftMonitor", "DriftRefused", "EXIT_DRIFTED", "build_expectation", "check",
           "force_requested", "read_record", "take_force_file"]
