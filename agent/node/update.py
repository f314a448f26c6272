"""``node-agent update``: the day-2 loop.

Each pass: check the node's disk against the config it is at (agent/node/drift.py: on start, then
on change), poll the pool's config (conditional GET with the last ETag), validate the disk again
and refuse to apply over drift (the MCD's rule), plan against the config the node is at, ask the
server for a drain lease when the plan drains, apply, carry out the actions, report Done or
Degraded with a reason, release the lease. ``--force`` (or the force file
``/run/node-agent-force``) skips the validation once and re-applies the config through the same
apply and policy. One update at a time: a lock file under the state directory (flock, so a
crashed run never leaves it held).
"""

import fcntl
import logging
import os
import time
from dataclasses import replace
from functools import partial
from typing import Any, Dict, Optional

from agent.core.paths import DEFAULT_POINTER
from agent.core.served import ANN
from agent.errors import EXIT_OK, FetchError, NodeAgentError, NotReady
from agent.host import files, selinux
from agent.host.root import Root
from agent.node import nodename, nodestate, revert, turn

log = logging.getLogger(__name__)

LOCK = "update.lock"


class UpdateBusy(NotReady):
    """Another update holds the lock (exit 75: try again later)."""


class Updater:
    def __init__(self, opts: Any, *, systemd=None, logind=None, rpmostree=None, sleep=time.sleep):
        from agent.node.settingsfile import load_settings

        self.opts = opts
        self.root = Root(opts.root)
        self.settings = load_settings(self.root, opts.settings)
        files.use_labeller(selinux.labeller_for(self.root.top))  # SELinux labels on what we write
        self.state_dir = self.settings.state_dir
        self.node = nodename.resolve(self.root, self.state_dir, getattr(opts, "node_name", None), self.settings)
        self.systemd, self.logind, self.rpmostree = systemd, logind, rpmostree
        self.sleep = sleep
        self.fetcher = self.reporter = None
        self.force = bool(getattr(opts, "force", False))
        self.drift = None
        # The loop asks the server to hold an unchanged fetch until its turn (agent/node/turn.py); --once does not wait.
        self.hold = 0.0 if getattr(opts, "once", False) else turn.HOLD
        self.held = False  # the last fetch was held by the server: the next pass may start at once
        self.rollout: Optional[Dict[str, Any]] = None

    def _lock(self):
        path = self.root.path(os.path.join(self.state_dir, LOCK))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UpdateBusy(f"another node-agent update is running (lock {path} is held); try again later")
        return fd

    def _pointer_path(self) -> str:
        return getattr(self.opts, "pointer", None) or DEFAULT_POINTER

    def _pointer(self):
        """(the pointer config's path, its document or None when there is none), read every pass."""
        from agent.ignition.parse import parse_document

        path = self._pointer_path()
        if not self.root.exists(path):
            return path, None
        return path, parse_document(self.root.read_bytes(path), source=self.root.path(path))

    def _connect(self, record) -> Dict[str, Any]:
        """Connected to the server the pointer config names (agent/node/follow.py: the loop follows
        it when it changes); returns ``record`` with that server's URL."""
        from agent.node import follow
        from agent.node.report import Reporter, server_base
        from agent.resource.fetch import Fetcher
        from agent.resource.pointer import trust_config_cas

        pointer_path, pointer = self._pointer()
        record = follow.follow(self.root, self.state_dir, record, pointer, self.root.path(pointer_path))
        if self.fetcher is not None and self.reporter.base_url == server_base(record["url"]):
            return record
        self.fetcher = Fetcher(self.settings)
        if pointer is not None:
            trust_config_cas(pointer, self.fetcher, source=self.root.path(pointer_path))
        token = nodestate.read_token(self.root, self.settings)
        self.reporter = Reporter(server_base(record["url"]), self.node, self.root, self.state_dir,
                                 session=self.fetcher.session, token=token,
                                 kubelet_cert=self.settings.report.kubelet_cert_file, fetcher=self.fetcher)
        self.reporter.ensure_registered()  # a node that first booted before registration existed
        if self.drift is not None:  # reports go to the server followed
            self.drift.send = self.reporter.send
        return record

    def run(self) -> int:
        if getattr(self.opts, "once", False):
            self.once()
            return EXIT_OK
        interval = getattr(self.opts, "interval", None) or self.settings.update.interval
        last_problem = ""
        while True:
            problem, said = "", False
            try:
                self.once()
            except (FetchError, NotReady) as exc:
                problem = f"update pass skipped: {exc}"
            except NodeAgentError as exc:
                problem = f"update pass failed: {exc}"
                said = getattr(exc, "reported", False)  # the run's record and log said it once
            # Quiet when nothing happens: a problem is logged when it starts or changes, and its
            # end once; the same one pass after pass (a server down for hours) goes to debug.
            if problem and problem != last_problem and not said:
                log.warning("%s (said once; the loop keeps trying every %g s)", problem, interval)
            elif problem:
                log.debug("%s", problem)
            elif last_problem:
                log.info("update pass succeeded again")
            last_problem = problem
            wait = turn.HELD_IDLE if getattr(self, "held", False) and not problem else interval
            monitor = getattr(self, "drift", None)
            idle = monitor.idle if monitor is not None else self.sleep  # the monitor re-checks the disk meanwhile
            reporter = getattr(self, "reporter", None)
            if reporter is not None:
                reporter.wait(wait, idle)  # ends early once the kubelet's certificate appears
            else:
                idle(wait)

    def once(self) -> str:
        """One pass; returns what happened: unchanged, updated, reboot."""
        from agent.node.status import RunRecorder

        if not nodestate.firstboot_done(self.root, self.state_dir):
            raise NotReady("first boot has not completed on this node: run node-agent firstboot first "
                           "(node-agent-firstboot.service); 'node-agent status --wait' waits for it")
        fd = self._lock()
        try:
            record = nodestate.load_current(self.root, self.state_dir)
            if record is None:
                raise NotReady(f"no current config recorded in {self.state_dir}/{nodestate.CURRENT}; "
                               "first boot did not finish: check node-agent status")
            record = self._connect(record)
            self.reporter.flush()
            current = nodestate.current_config(record)
            if self._report_rebooted(record, current):
                return "reboot"  # a revert after the update's reboot reboots again
            forced = self._forced()
            monitor = self._monitor(record, current)
            if not forced and (monitor.config is None or monitor.config.name != current.name or not monitor.watching):
                monitor.check(current)  # on start, then on change (inotify) or at every pass
            # Naming itself (with its credential) makes the server answer as to a member of the
            # pool: the pool's target, not only what a new node may have.
            result = self._fetch(record, hold=not forced)
            if self.undelivered:  # the server answers again: the report it missed first
                self.reporter.flush()
            if result is None:  # the force file came while the fetch was held (drift.during)
                forced, result = True, self._fetch(record, hold=False)
            self.rollout = turn.follow(self.root, self.state_dir, result.headers, self.rollout)
            if turn.not_its_turn(self.rollout) and not forced:
                revert.parked(self.root, self.state_dir)  # the server may let it retry a reverted target later
                return "waiting"  # the server serves what it runs, informational: nothing to apply
            if forced:
                self._take_force()
            if result.status == 304 and not forced:
                log.debug("config unchanged (ETag %s)", record.get("etag"))
                if self.asked_reverted:  # still served the target it reverted: nothing to do, nothing to say
                    return "reverted"
                self._confirm(record, current)
                return "unchanged"
            rec = RunRecorder(self.root, "update", state_dir=self.state_dir)
            try:
                return self._update(rec, record, current, result, forced)
            except NodeAgentError as exc:
                rec.finish("failed", exc.exit_code, error=str(exc), exc=exc)
                # The node still runs its current config, and that config's image (the apply rolled
                # back): a Degraded report without it showed "Current image: <none>".
                self.reporter.send({"pool": record.get("pool") or self._pool(current), "state": "Degraded",
                                    "currentConfig": getattr(exc, "runs", None) or current.name,
                                    "desiredConfig": getattr(self, "trying", None),
                                    "desiredImage": getattr(self, "trying_image", None),
                                    "currentImage": current.os_image_url or None,
                                    "reason": getattr(exc, "reason", None) or str(exc).splitlines()[0]})
                raise
        finally:
            os.close(fd)

    def _forced(self) -> bool:
        """``--force`` or the force file (the MCD's /run/machine-config-daemon-force): the
        on-disk validation is skipped once and the config re-applied. Only asked here; taken
        (the file removed, the flag spent) by _take_force once the config is fetched, so a pass
        that cannot reach the server leaves it for the next one."""
        from agent.node.drift import force_requested

        return self.force or force_requested(self.root)

    def _take_force(self) -> None:
        from agent.node.drift import FORCE_FILE, take_force_file

        flag, self.force = self.force, False
        if take_force_file(self.root):
            log.warning("force file %s found and removed: on-disk validation skipped once, the config is "
                        "re-applied", self.root.path(FORCE_FILE, follow_last=False))
        elif flag:
            log.warning("--force: on-disk validation skipped once, the config is re-applied")

    def _monitor(self, record, current):
        from agent.node.drift import DriftMonitor

        if self.drift is None:
            self.drift = DriftMonitor(self.root, self.state_dir, send=self.reporter.send, sleep=self.sleep,
                                      pool=record.get("pool") or self._pool(current))
        return self.drift

    def _report_rebooted(self, record, current) -> bool:
        from agent.node.rebooted import report_rebooted

        return report_rebooted(self.root, self.state_dir, self.rpmostree, self.reporter,
                               record.get("pool") or self._pool(current), current,
                               after_for=lambda p: self._after(float(p["healthTimeout"]), p.get("policyText")))

    def _after(self, timeout: float, policy_text: Optional[str]) -> "revert.AfterUpdate":
        return revert.AfterUpdate(self.root, self.state_dir, systemd=self.systemd, logind=self.logind,
                                  rpmostree=self.rpmostree, fetcher=self.fetcher, timeout=timeout,
                                  policy_text=policy_text)

    @staticmethod
    def _pool(config) -> str:
        from agent.core.served import read_served

        return read_served(config.ignition).pool

    def _fetch(self, record: Dict[str, Any], hold: bool) -> Any:
        # A member (its credential names it) may be held until its turn comes (agent/node/turn.py);
        # the drift monitor watches the disk meanwhile (None: the force file ended the wait). Not while
        # a report waits to be sent (the server was down): the server needs it before anything moves.
        kept = self.reporter.kept()
        self.undelivered = kept is not None and not kept.get("refused")
        wait = self.hold if hold and self.reporter.credential and not self.undelivered else 0.0
        etag, self.asked_reverted = revert.if_none_match(self.root, self.state_dir, record)

        def fetch() -> Any:
            url = turn.with_wait(record["url"], wait) if wait else record["url"]
            call = partial(self.fetcher.fetch, url, ignition=True, etag=etag, hold=wait,
                           headers=self.reporter.member_headers(),
                           budget=(self.settings.fetch.total_timeout or 300.0) + wait)
            return self.drift.during(call) if wait and self.drift is not None else call()

        try:
            try:
                result = fetch()
            except FetchError as exc:
                if exc.status != 401 or not self.reporter.credential:
                    raise
                self.reporter.forget_credential(f"HTTP 401 on {record['url']}")  # deleted by an admin?
                self.reporter.ensure_registered()
                result = fetch()
        except FetchError as exc:  # what to do, naming the file that holds what to fix
            from agent.node.follow import fetch_hint

            exc.hint = fetch_hint(exc, self.root, self._pointer_path(), self.state_dir,  # type: ignore[attr-defined]
                                  self.settings.report.token_file)
            raise
        self.held = result is not None and bool(wait) and turn.held(result.headers)
        return result

    def _confirm(self, record: Dict[str, Any], current: Any) -> None:
        """Served the config the node runs after it reported something else on another (a revert,
        a retarget): it says it is Done on it (turn.confirm_done)."""
        turn.confirm_done(self.reporter, record.get("pool") or self._pool(current), current.name,
                          bool(self.drift is not None and self.drift.drifts))

    def _update(self, rec, record, current, result, forced: bool = False) -> str:
        from agent.node import planning

        url = record["url"]
        with rec.stage("fetch"):
            target, served = self._target(record, current, result)
            rec.set(pool=served.pool, config=target.name)
        self.trying = target.name  # a failure is reported as Degraded on its way to it
        self.health_timeout = revert.pool_timeout(result.headers)
        # The layered image the server targeted (the served node annotations name it only then): the
        # node reports it as its desiredImage, as upstream's Node keeps the annotation once set.
        self.trying_image = served.annotations.get(ANN + "desiredImage") or None
        etag = result.etag if result.status != 304 else record.get("etag")  # kept: the next fetch is held or 304
        same = target.name == current.name and target.ignition == current.ignition
        if not forced and revert.report_reverted(self.reporter, self.root, self.state_dir, served.pool, current, target):
            revert.keep_served_etag(self.root, self.state_dir, etag)
            rec.finish("done", EXIT_OK)
            return "reverted"  # not applied again on its own: a new target, or --force
        if same and not forced:
            nodestate.save_current(self.root, self.state_dir, current, etag, url)
            self._confirm(record, current)
            rec.finish("done", EXIT_OK)
            return "unchanged"
        with rec.stage("validate") as stage:
            if forced:
                stage.skip("forced: on-disk validation skipped once")
            else:  # the MCD validates the disk against the config it is at before every update
                self.drift.check(current)
                refused = self.drift.refusal(target.name)
                if refused is not None:
                    raise refused
        with rec.stage("plan"):
            kept = planning.check_reconcilable(self.root, current, target, firstboot=False,
                                               policy_text=served.policy_text)
            self._irreconcilable = self._record_irreconcilable(target, kept)
            # Forced: what differs on disk is planned as a change too (the policy decides its actions).
            baseline = planning.on_disk_baseline(self.root, current, self.fetcher, self.state_dir) if forced else current
            plan = planning.make_plan(baseline, target, served.policy_text, firstboot=False)
            log.info("plan:\n%s", plan.explain())
        return self._carry_out(rec, current, target, served, plan, etag, url)

    def _record_irreconcilable(self, target, kept) -> Optional[str]:
        """Storage changes an override let through: recorded (``irreconcilable.json``, shown by
        ``node-agent status``) and reported with Done; the node keeps what it was installed with."""
        from agent.core.reconcilable import irreconcilable_differences
        from agent.node import planning

        diffs = irreconcilable_differences(planning.installed_ignition(target), target.ignition)
        nodestate.save_irreconcilable(self.root, self.state_dir, target.name, diffs)
        if not diffs:
            return None
        text = (f"irreconcilable differences kept ({', '.join(diffs)} differ from the install-time config; "
                "allowed by irreconcilableValidationOverrides.storage): new nodes get them, this node keeps "
                "what it was installed with")
        for section in kept:
            log.warning("storage.%s changed in %s: not applied to this running node (allowed by "
                        "irreconcilableValidationOverrides.storage); recorded and reported", section, target.name)
        return text

    def _target(self, record, current, result):
        """The served target (the current config itself for a forced pass that got no new one)."""
        from agent.core.served import keep_first_boot_files, read_served
        from agent.ignition.parse import parse_document
        from agent.node import planning

        if result.status == 304:
            return current, read_served(current.ignition)
        url = record["url"]
        ignition = parse_document(result.body, source=url)
        target, served = planning.target_from_served(ignition, source=url)
        target = planning.with_pool_files(self.root, target, planning.identity_of(served))
        # The node annotations (firstPivotConfig) and the MCS content file stay as first boot wrote them.
        target = replace(target, ignition=keep_first_boot_files(target.ignition, current.ignition))
        return target, served

    def _carry_out(self, rec, current, target, served, plan, etag, url) -> str:
        from agent.node import planning
        from agent.node.apply import apply_config
        from agent.node.report import UpdateDeferred

        lease = False
        if plan.drain:
            try:
                with rec.stage("drain"):
                    lease = self.reporter.acquire_drain(served.pool, target.name, sleep=self.sleep,
                                                        timeout=self.settings.update.drain_timeout)
            except UpdateDeferred as exc:  # not a failure: the node keeps its config until its turn comes again
                log.warning("%s; the node keeps %s", exc, current.name)
                rec.finish("done", EXIT_OK)
                return "deferred"
        try:
            self.reporter.send({"pool": served.pool, "state": "Working", "currentConfig": current.name,
                                "desiredConfig": target.name, "desiredImage": self.trying_image})
            with rec.stage("apply"):
                applied = apply_config(self.root, target, current, fetcher=self.fetcher, systemd=self.systemd,
                                       rpmostree=self.rpmostree, state_dir=self.state_dir)
                for line in applied.not_performed:
                    log.info("not performed on %s: %s", self.root.top, line)
            booted = planning.booted_os(self.root, self.rpmostree)
            reboot = plan.reboot
            with rec.stage("act"):
                failed = revert.carry_out(plan, self.root, self.systemd, self.logind)
                rec.set(reboot_pending=reboot)
            warning = None
            if not reboot:  # checked now (after the reboot otherwise); a failure reverts (UpdateReverted)
                with rec.stage("health"):
                    warning = revert.verify(self._after(self.health_timeout, served.policy_text), current, target,
                                            plan, failed, etag, url, nodestate.load_current(self.root, self.state_dir))
            revert.remember_previous(self.root, self.state_dir)
            nodestate.save_current(self.root, self.state_dir, target, etag, url)
            self.drift.forget()  # checked again from the new config (after the reboot, if one is due)
            if reboot:
                nodestate.mark_reboot_pending(self.root, self.state_dir, target, planning.boot_id(self.root),
                                              self.trying_image, healthTimeout=self.health_timeout,
                                              policyText=served.policy_text)
            with rec.stage("report"):
                self.reporter.send({"pool": served.pool, "state": "Working" if reboot else "Done",
                                    "currentConfig": target.name, "desiredConfig": target.name,
                                    "desiredImage": self.trying_image,
                                    "currentImage": (booted.image if reboot else target.os_image_url) or None,
                                    "reason": "reboot pending" if reboot else "; ".join(
                                        w for w in (getattr(self, "_irreconcilable", None), warning) if w) or None})
        finally:
            if lease and not plan.reboot:
                self.reporter.release_drain()
        rec.finish("done", EXIT_OK)
        if reboot:
            planning.reboot(self.root, self.logind)
            return "reboot"
        self.drift.check(target)
        return "updated"


def run(opts: Any, **host) -> int:
    return Updater(opts, **host).run()


__all__ = ["Updater", "run"]
