"""``node-agent firstboot``: the first-boot pipeline.

Stages: fetch, validate, skew, pool, plan, apply, act, report. Each is timed and logged (the
run record in ``status.json``), and progress is kept under the state directory so that a crash
or a power loss resumes where it stopped:

- the served config is saved once fetched, and a resumed run uses that same config (a node
  never mixes two configs because the server moved on in between);
- the apply engine's journal finishes or rolls back an interrupted apply;
- an OS update, once staged, is recorded, so a resumed run never stages it twice (no double
  pivot), and the one reboot it needs is asked for only once everything is durable;
- a done-stamp ends it: ``node-agent-firstboot.service`` does not run again.
"""

import logging
import os
from typing import Any, Dict, Optional, Tuple

from agent.core.nodeconfig import NodeConfig
from agent.core.paths import DEFAULT_POINTER
from agent.core.served import ANN
from agent.errors import EXIT_OK, ConfigError, FetchError, SkewRefused
from agent.host import files, selinux
from agent.host.root import Root
from agent.node import nodename, nodestate
from agent.node.firstbootreport import failed_stage, failure_words, first_boot_object, pointer_url
from agent.node.report import refusal_text

log = logging.getLogger(__name__)


class Options:
    def __init__(self, root: str = "/", pointer: Optional[str] = None, settings: Optional[str] = None,
                 node_name: Optional[str] = None, dry_run: bool = False):
        self.root = root
        self.pointer = pointer
        self.settings = settings
        self.node_name = node_name
        self.dry_run = dry_run


class FirstBoot:
    def __init__(self, opts: Options, *, systemd=None, logind=None, rpmostree=None):
        from agent.node.settingsfile import load_settings

        self.opts = opts
        self.root = Root(opts.root)
        self.settings = load_settings(self.root, opts.settings)
        files.use_labeller(selinux.labeller_for(self.root.top))  # SELinux labels on what we write
        self.state_dir = self.settings.state_dir
        self.node = nodename.resolve(self.root, self.state_dir, opts.node_name, self.settings)
        self.systemd = systemd
        self.logind = logind
        self.rpmostree = rpmostree
        self.progress = nodestate.Progress(self.root, self.state_dir, "firstboot")
        self.reporter = None
        self.fetcher = None
        self.config_url = ""
        self.etag: Optional[str] = None
        self.boot_image: Optional[str] = None
        self.skew_decision: Optional[str] = None
        self._contents: Optional[Tuple[NodeConfig, Dict[str, bytes]]] = None
        self._joined: Optional[Dict[str, Any]] = None  # the Working report of the pool join, once sent
        self.rec: Any = None  # the run's record: each report says the stage and the stages so far
        self._served: Dict[str, Any] = {}  # the served config's pool and name, once validated
        self.validated = False  # the fetch validated the served config whole (validate it once)

    # -- stages -------------------------------------------------------------------------------

    def _pointer(self) -> Dict[str, Any]:
        from agent.ignition.parse import parse_document

        path = self.opts.pointer or DEFAULT_POINTER
        try:
            data = self.root.read_bytes(path)
        except FileNotFoundError:
            raise ConfigError(f"pointer config {self.root.path(path)} does not exist: write it "
                              f"(see docs/install.md, 'Configure') or pass --pointer")
        return parse_document(data, source=self.root.path(path))

    def fetch(self) -> Dict[str, Any]:
        from agent.resource.fetch import Fetcher
        from agent.resource.pointer import resolve_pointer, trust_config_cas

        pointer = self._pointer()
        self.fetcher = Fetcher(self.settings)
        # The server the pointer names hears of a fetch that fails too (kept for later when it
        # cannot be reached): the pool asked for is in its URL.
        self.config_url = pointer_url(pointer)
        self._make_reporter(flush=False)
        saved = self.progress.load_json("served")
        if saved is not None:
            log.info("resuming: using the config the interrupted run fetched from %s",
                     ", ".join(saved.get("sources", [])) or "the pointer")
            # The pointer's CAs still have to be trusted for reports and file sources.
            trust_config_cas(pointer, self.fetcher, source=self.opts.pointer or DEFAULT_POINTER)
            ignition, sources, etag = saved["ignition"], saved.get("sources", []), saved.get("etag")
        else:
            resolved = self._resolve(pointer, resolve_pointer)
            ignition, sources, etag = resolved.ignition, resolved.sources, resolved.etag
            self.validated = resolved.validated
            if not self.opts.dry_run:
                self.progress.save_json("served", {"ignition": ignition, "sources": sources, "etag": etag})
        self.etag = etag
        self.config_url = next((s for s in sources if "/config/" in s), sources[0] if sources else "")
        self._make_reporter()
        return ignition

    def _resolve(self, pointer: Dict[str, Any], resolve_pointer: Any) -> Any:
        named = self._fetch_as_member()
        try:
            return resolve_pointer(pointer, self.fetcher)
        except FetchError as exc:
            if exc.status != 401 or not named:
                raise
            # The server no longer knows the credential (the admin deleted the node): forget it
            # (the node registers again) and fetch as a new node.
            log.warning("the server refused node %s's credential (%s); fetching as a new node", self.node, exc)
            from agent.node.report import remove_credential

            self.fetcher.as_member(None)
            remove_credential(self.root, self.state_dir)
            return resolve_pointer(pointer, self.fetcher)

    def _fetch_as_member(self) -> bool:
        """A node that registered in an earlier, failed run is a member of its pool: it fetches
        naming itself with its credential (https only) and gets the pool's target. Anonymous, it
        got the pool's proven config again, the one that failed it, even after the fix: its
        own Degraded membership held the fixed config's rollout incomplete."""
        from agent.node.report import read_credential

        kept = read_credential(self.root, self.state_dir, quiet=True)  # the reporter says it, once
        if kept and kept["node"] == self.node and kept["server"].lower().startswith("https://"):
            log.info("node %s registered with %s in an earlier run: fetching as a member of its pool",
                     self.node, kept["server"])
            self.fetcher.as_member(kept["server"], {"X-Node-Name": self.node,
                                                    "Authorization": f"Bearer {kept['credential']}"})
            return True
        return False

    def _make_reporter(self, flush: bool = True) -> None:
        from agent.node.report import Reporter, server_base

        if not self.config_url.startswith(("http://", "https://")):
            return
        base = server_base(self.config_url)
        if self.reporter is None or self.reporter.base_url != base.rstrip("/"):
            token = nodestate.read_token(self.root, self.settings)
            self.reporter = Reporter(base, self.node, self.root, self.state_dir, session=self.fetcher.session,
                                     token=token, kubelet_cert=self.settings.report.kubelet_cert_file,
                                     fetcher=self.fetcher)
        if flush and not self.opts.dry_run:
            self.reporter.flush()

    def report(self, payload: Dict[str, Any]) -> None:
        if self.reporter is not None and not self.opts.dry_run:
            self.reporter.send(payload)

    # -- the pipeline -------------------------------------------------------------------------

    def run(self) -> int:
        from agent.node.status import RunRecorder

        stamp = self.root.path(os.path.join(self.state_dir, nodestate.FIRSTBOOT_STAMP))
        if os.path.exists(stamp):
            # Said once, on stdout (under systemd that is the journal too); the log has it at debug.
            log.debug("first boot already done (%s); nothing to do", stamp)
            print(f"first boot already done ({stamp}); nothing to do")
            return EXIT_OK

        rec = self.rec = RunRecorder(self.root, "firstboot", state_dir=self.state_dir, persist=not self.opts.dry_run)
        try:
            code = self._run(rec)
        except Exception as exc:
            error, hint, exit_code = failure_words(exc)  # the words of the run's journal entry
            self.forget_unapplied_config(exc)
            self.report_failure(error, hint, exit_code)
            rec.finish("failed", exit_code, error=error, exc=exc)
            raise
        return code

    def asked_pool(self) -> str:
        """The pool of the reports: the one joined, else the served config's, else the one the
        pointer's URL asks for."""
        from agent.core.pool import pool_from_url

        return str((self._joined or {}).get("pool") or self._served.get("pool") or pool_from_url(self.config_url)
                   or "")

    def report_progress(self, stage: str) -> None:
        """Working, from ``stage``: the server learns the first boot began (and which run, which
        stage) from the first stage that reached it, and notices if it stops (FirstBootStalled)."""
        pool = self.asked_pool()
        if pool:
            self.report({"pool": pool, "state": "Working", "firstBoot": first_boot_object(self.rec, stage, "running")})

    def report_failure(self, error: str, hint: str, exit_code: int) -> None:
        """Every failed run says Degraded, the stage, the exit code, why and what to do, in the
        journal's words, from the first stage that reached the server on (a server that cannot be
        reached gets it later: the report is kept); else the server shows the node working on its
        first boot for ever, or not at all."""
        pool = self.asked_pool()
        if self.rec is None or not pool:
            return
        body = dict(self._joined or {}, pool=pool, state="Degraded", reason=error,
                    firstBoot=first_boot_object(self.rec, failed_stage(self.rec), "failed", exit_code, hint))
        body.setdefault("desiredConfig", self._served.get("config"))
        for key, value in (("bootImage", self.boot_image), ("skew", self.skew_decision)):
            body.setdefault(key, value)
        try:
            self.report(body)
        except Exception as exc:  # the failure being reported matters more; the report is best effort
            log.warning("could not report the failure to the server: %s", exc)

    def forget_unapplied_config(self, exc: Exception) -> None:
        """After a failed run that left nothing of its config on the node, drop the saved config
        so that the next try fetches afresh (issue 16: a config refused at validation, planning
        or apply, exit 65/78/75, was kept and refused again on every retry, so fixing it on the
        server did not help). A config that reached the disk (applied, or an apply interrupted
        or not fully rolled back) is kept: the resumed run must never mix two configs."""
        from agent.errors import ApplyError
        from agent.node.txjournal import Journal

        if self.opts.dry_run or self.progress.get("appliedBootId"):
            return
        if isinstance(exc, ApplyError) and not exc.undone:
            return
        if Journal(self.root, self.state_dir).exists():
            return
        if self.progress.forget_json("served"):
            log.info("the fetched config was not applied; the next run fetches it again")

    def contents(self, target: NodeConfig) -> Dict[str, bytes]:
        """The target's file contents, fetched and decompressed once per run (the apply preview
        and the apply share them; a second fetch could even see other bytes)."""
        from agent.resource.contents import resolve_contents

        if self._contents is None or self._contents[0] is not target:
            self._contents = (target, resolve_contents(target, self.fetcher))
        return self._contents[1]

    def _run(self, rec) -> int:
        from agent.node import planning
        from agent.node.apply import apply_config

        if not self.opts.dry_run:
            nodename.record(self.root, self.state_dir, self.node)  # the name every later run uses
        with rec.stage("fetch"):
            ignition = self.fetch()
        self.report_progress("fetch")

        with rec.stage("validate"):
            target, served = planning.target_from_served(ignition, source=self.config_url or "served config",
                                                         validated=self.validated)
            rec.set(config=target.name)
            self._served = {"pool": served.pool, "config": target.name,
                            "image": served.annotations.get(ANN + "desiredImage") or None}

        with rec.stage("skew"):
            self.check_skew(served, target)

        with rec.stage("pool"):
            identity = self.join_pool(served, target)
            rec.set(pool=identity.pool)
            target = planning.with_pool_files(self.root, target, identity)

        with rec.stage("plan") as plan_stage:
            planning.check_reconcilable(self.root, None, target, firstboot=True)
            booted = planning.booted_os(self.root, self.rpmostree)
            plan = planning.make_plan(planning.firstboot_baseline(target, booted, self.laid_by_ignition(target, booted)),
                                       target, served.policy_text, firstboot=True)
            plan_stage.note(plan_summary(plan))
            log.info("plan: %s\n%s", plan_summary(plan), plan.explain())
            if self.opts.dry_run:
                print(plan.explain())

        if self.opts.dry_run:
            rec.finish("done", EXIT_OK)
            return EXIT_OK

        applied_in_boot = self.progress.get("appliedBootId")
        with rec.stage("apply"):
            result = apply_config(self.root, target, None, fetcher=self.fetcher, systemd=self.systemd,
                                  rpmostree=self.rpmostree, state_dir=self.state_dir,
                                  booted=(booted.image, booted.kargs) if booted.known else None,
                                  contents=self.contents(target))
            if result.recovered:
                log.warning("an interrupted apply was found and %s", result.recovered)
            for line in result.not_performed:
                log.info("not performed on %s: %s", self.root.top, line)
            self.progress.mark(appliedBootId=planning.boot_id(self.root))

        reboot = plan.reboot
        if reboot and not plan.changes.os and applied_in_boot and applied_in_boot != planning.boot_id(self.root):
            # An interrupted run applied this config, then the node went down and came back: the
            # reboot the files needed has happened. Another would be the double reboot we avoid.
            log.info("the node has rebooted since this config was applied; no further reboot needed")
            reboot = False
        with rec.stage("act"):
            planning.carry_out(plan, self.root, self.systemd, self.logind, firstboot=True)
            rec.set(reboot_pending=reboot)

        nodestate.save_current(self.root, self.state_dir, target, self.etag, self.config_url)
        if reboot:
            nodestate.mark_reboot_pending(self.root, self.state_dir, target, planning.boot_id(self.root),
                                          self._served.get("image"))
        with rec.stage("report"):
            self.report({"pool": identity.pool, "state": "Working" if reboot else "Done",
                         "currentConfig": target.name, "desiredConfig": target.name,
                         "firstPivotConfig": identity.config, "desiredImage": self._served.get("image"),
                         "currentImage": (booted.image if reboot else target.os_image_url) or None,
                         "bootImage": self.boot_image, "skew": self.skew_decision,
                         "reason": "reboot pending" if reboot else None,
                         "firstBoot": first_boot_object(rec, "report", "done", reboot_pending=reboot)})

        nodestate.write_stamp(self.root, self.state_dir, target.name)
        self.progress.clear()
        refused = self.reporter.refused if self.reporter is not None else None
        if refused:
            # The node is provisioned, but the server does not count it: degraded, as cloud-init
            # calls a run that finished with something to fix (exit 2 from `node-agent status`).
            rec.data["degradedBy"] = "report"  # status shows done again once it is delivered
            rec.finish("degraded", EXIT_OK, error=refusal_text(refused))
        else:
            rec.finish("done", EXIT_OK)
        if reboot:
            planning.reboot(self.root, self.logind)
        return EXIT_OK

    def laid_by_ignition(self, target: NodeConfig, booted):
        """JSON paths of the target's entries the disk does not hold yet (a dry run of the apply),
        or None when the disk cannot be trusted for that: a resumed run, whose earlier attempt
        may have written files itself (then every entry counts as a change, as before)."""
        from agent.node.apply import apply_config
        from agent.node.txjournal import Journal

        if self.progress.get("appliedBootId") or Journal(self.root, self.state_dir).exists():
            return None
        # The preview's own "N changed" line counts apply operations (a unit is two, its file and its
        # enablement; OS changes none: rpm-ostree's), not the plan's changes, and stood above a plan
        # listing another number; the plan stage says the plan's count (plan_summary).
        quiet = _BelowWarning()
        logging.getLogger("agent.node.apply").addFilter(quiet)
        try:
            preview = apply_config(self.root, target, None, fetcher=self.fetcher, state_dir=self.state_dir,
                                   dry_run=True, booted=(booted.image, booted.kargs) if booted.known else None,
                                   contents=self.contents(target))
        finally:
            logging.getLogger("agent.node.apply").removeFilter(quiet)
        return preview.changed_where

    def check_skew(self, served, target: NodeConfig) -> None:
        from agent.node.skewcheck import (
            check_boot_image,
            clear_console_message,
            refusal_facts,
            refusal_fix,
            report_fields,
            write_console_message,
        )

        outcome = check_boot_image(self.root, served.skew_rules)
        fields = report_fields(outcome)
        self.boot_image = fields.get("bootImage")
        self.skew_decision = fields.get("skew")
        if fields.get("skew") == "refuse":
            # The error says what and where; the one fix goes in "what to do" (and the console).
            what = f"boot image refused: {outcome.code}: {refusal_facts(outcome)}"
            if self.opts.dry_run:
                refused = SkewRefused(f"{what} (dry run: no console message written)")
            else:  # the failure report (report_failure) tells the server, with the skew's fields
                path = write_console_message(self.root, outcome)
                refused = SkewRefused(f"{what} (kubelet will not start; console message {path})")
            refused.hint = refusal_fix(outcome)  # type: ignore[attr-defined]
            raise refused
        if not self.opts.dry_run:
            clear_console_message(self.root)
        if fields.get("skew") == "warn":
            log.warning("boot image check: %s", fields.get("reason"))

    def join_pool(self, served, target: NodeConfig):
        from agent.core.pool import pool_from_url, resolve_pool

        identity = resolve_pool(pool_from_url(self.config_url), served)
        log.info("node %s joins pool %s (first pivot config %s, labels %s)", self.node, identity.pool,
                 identity.config, ",".join(f"{k}={v}" for k, v in sorted(identity.labels.items())) or "none")
        # Tell the server at once, before kubelet starts, so it never counts us in another pool.
        joined = {"pool": identity.pool, "state": "Working", "firstPivotConfig": identity.config,
                  "desiredConfig": target.name, "bootImage": self.boot_image, "skew": self.skew_decision}
        self.report(dict(joined, firstBoot=first_boot_object(self.rec, "pool", "running")))
        self._joined = joined
        return identity


class _BelowWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def plan_summary(plan) -> str:
    """``N change(s)``, counted as the plan lists them (the lines under "Changes:")."""
    changes = plan.changes
    n = sum(len(group) for group in (changes.os, changes.files, changes.units, changes.ssh_keys, changes.users))
    return f"{n} change{'s' if n != 1 else ''}, {'reboot' if plan.reboot else 'no reboot'}"


def run(opts: Options, **host) -> int:
    return FirstBoot(opts, **host).run()



