"""After an update: check the node's health (agent/core/health.py), and when a check that fails
the update fails, put back the config the node ran before (ours).

The revert applies the previous config over the target with the same apply engine (files,
units, live systemd actions: agent/node/apply.py, its own transaction), then carries out what
the served disruption policy says for that change (the restart that brings a service back).
An OS change (image, kernel arguments, kernel type, extensions) is undone with ``rpm-ostree
rollback`` (the deployment booted before becomes the default) and one reboot; the checks run
again after it (agent/node/rebooted.py). Then the node checks again and reports Degraded: "reverted
to A after a failed health check of B: <the check, what it said>", or "could not revert ...".

A reverted target is recorded (``reverted.json``): the node does not apply it again on its own
(``still_reverted``); the server counts the node as failing on it, so the pool halts as for any
failure. Under the pool's failure budget the server parks a failed node and later lets it retry
in a free slot (agent/server/rollout/targeting.py): a node parked since its revert applies the
target again then (``parked``). The MCD retries a failed update at every sync (a Degraded node tries again); a revert
that tried again would break the service again in a loop, so here an admin's fix is a new
target (a new rendered config), or ``node-agent update --force`` re-applies it on purpose.
"""

import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Sequence, Tuple

from agent.core import health
from agent.core.health import CheckResult, HealthResult
from agent.core.nodeconfig import NodeConfig
from agent.errors import NodeAgentError
from agent.host.root import Root
from agent.node import nodestate

log = logging.getLogger("agent.node.update")  # the update loop's logger: its lines read as the loop's
_STAGE = {"NODE_AGENT_STAGE": "revert"}
PREVIOUS = "previous-config.json"  # the current-config record the node ran before its last update


def remember_previous(root: Root, state_dir: str) -> None:
    """Keep the record of the config the node runs before an update replaces it (what a revert
    after the update's reboot puts back)."""
    record = nodestate.load_current(root, state_dir)
    if record is not None:
        nodestate.write_json(root.path(os.path.join(state_dir, PREVIOUS)), record)


def load_previous(root: Root, state_dir: str) -> Optional[Dict[str, Any]]:
    data = nodestate.read_json(root.path(os.path.join(state_dir, PREVIOUS)))
    return data if isinstance(data, dict) and isinstance(data.get("ignition"), dict) else None


def still_reverted(root: Root, state_dir: str, target: NodeConfig) -> Optional[Dict[str, Any]]:
    """The revert record when ``target`` is the config a failed health check reverted (the node
    does not apply it again on its own); None otherwise (a new target: the record is dropped)."""
    record = nodestate.load_reverted(root, state_dir)
    if record is None:
        return None
    if record.get("config") == target.name and record.get("osImageURL", "") == target.os_image_url \
            and not record.get("parked"):
        return record
    nodestate.clear_reverted(root, state_dir)
    return None


def keep_served_etag(root: Root, state_dir: str, etag: Optional[str]) -> None:
    """Keep the ETag the reverted target is served with (ours): the node's next fetch asks
    If-None-Match it (if_none_match), so the server holds it until the target changes, instead of
    sending the whole config it will not apply at every pass."""
    record = nodestate.load_reverted(root, state_dir)
    if record is not None and etag and record.get("etag") != etag:
        nodestate.save_reverted(root, state_dir, dict(record, etag=etag))


def if_none_match(root: Root, state_dir: str, current: Dict[str, Any]) -> Tuple[Optional[str], bool]:
    """The ETag a day-2 fetch sends, and whether it is the reverted target's: while the node keeps
    a target it reverted (not parked), that target's, so that a 304 means "still that target";
    else the config's it runs (``current``, the recorded current config)."""
    record = nodestate.load_reverted(root, state_dir)
    if record is not None and not record.get("parked") and isinstance(record.get("etag"), str):
        return record["etag"], True
    return current.get("etag"), False


def parked(root: Root, state_dir: str) -> None:
    """The server parked this node (served ``waiting``: under the pool's failure budget a failed node
    waits for a free slot, docs/rollout.md "A failing change stops itself"): once it is served its
    target again, that is the retry the server granted, and the node applies the reverted target again."""
    record = nodestate.load_reverted(root, state_dir)
    if record is not None and not record.get("parked"):
        nodestate.save_reverted(root, state_dir, dict(record, parked=True))


@dataclass(frozen=True)
class Reverted:
    reason: str  # the Degraded report's
    undone: bool  # the node runs the previous config again, and it passed its checks
    rebooting: bool  # the revert finishes after a reboot (checked again then)
    runs: str  # the config the node runs now (the target when the previous one could not be put back)


def os_changed(a: NodeConfig, b: NodeConfig) -> bool:
    return a.os_fields() != b.os_fields()


class AfterUpdate:
    """The health check and the revert of one update, with the update loop's host handles."""

    def __init__(self, root: Root, state_dir: str, *, systemd: Any = None, logind: Any = None,
                 rpmostree: Any = None, fetcher: Any = None, timeout: float = health.DEFAULT_TIMEOUT,
                 policy_text: Optional[str] = None, clock=time.monotonic, sleep=time.sleep, kubelet_get=None):
        self.root, self.state_dir = root, state_dir
        self.systemd, self.logind, self.rpmostree, self.fetcher = systemd, logind, rpmostree, fetcher
        self.timeout, self.policy_text = timeout, policy_text
        self.clock, self.sleep, self.kubelet_get = clock, sleep, kubelet_get

    def check(self, before: NodeConfig, after: NodeConfig, restarted: Sequence[str], rebooted: bool) -> HealthResult:
        from agent.node.health import Runner

        units = health.unit_checks(before.units, after.units, restarted, rebooted)
        runner = Runner(self.root, self._systemd(), timeout=self.timeout, clock=self.clock, sleep=self.sleep,
                        kubelet_get=self.kubelet_get)
        return runner.run(units)

    def _systemd(self) -> Any:
        if self.systemd is None and self.root.is_live:
            from agent.host.systemd import Systemd

            self.systemd = Systemd()
        return self.systemd

    def revert(self, target: NodeConfig, previous: NodeConfig, failed: CheckResult, *,
               booted_target: bool, previous_record: Optional[Dict[str, Any]] = None) -> Reverted:
        """Put ``previous`` back over ``target`` after ``failed``. ``booted_target``: the node
        booted into the target (the check ran after its reboot). ``previous_record``: the
        previous config's current-config record, saved back once the node runs it again."""
        log.error("health check failed after applying %s: %s; reverting to %s", target.name, failed.describe(),
                  previous.name, extra=_STAGE)
        os_revert = booted_target and os_changed(previous, target)
        try:
            plan, applied_with = self._put_back(target, previous, os_revert)
        except (NodeAgentError, OSError) as exc:  # the apply rolled its own changes back: the node runs the target
            outcome = f"could not revert to {previous.name} ({str(exc).splitlines()[0]}); it keeps {target.name}"
            return self._settle(target, previous, failed, outcome, False, None, target.name)
        try:  # the previous config is on disk now: what follows failing leaves the node on it, unhealthy
            self._finish(target, plan, os_revert)
        except (NodeAgentError, OSError) as exc:
            outcome = f"could not revert to {previous.name}: its files are back, but {str(exc).splitlines()[0]}"
            return self._settle(target, previous, failed, outcome, False, previous_record, previous.name)
        if os_revert or plan.reboot:
            self._reboot_into(target, previous, failed, os_revert, previous_record)
            reason = health.failure_reason(failed, target.name, f"reverting to {previous.name} (rebooting)")
            return Reverted(reason, True, True, previous.name)
        again = self.check(applied_with, previous, [a.target_unit for a in plan.actions if a.target_unit], False)
        if again.failed is not None:
            outcome = f"could not revert to {previous.name}: after the revert, {again.failed.describe()}"
            return self._settle(target, previous, failed, outcome, False, previous_record, previous.name)
        return self._settle(target, previous, failed, f"reverted to {previous.name}", True, previous_record,
                            previous.name)

    def _put_back(self, target: NodeConfig, previous: NodeConfig, os_revert: bool):
        """Apply ``previous`` over ``target``; (the plan of that change, what was applied over).
        An OS revert keeps the target's OS fields in this apply: rpm-ostree rollback undoes them."""
        from agent.node import planning
        from agent.node.apply import apply_config

        files_of = replace(previous, os_image_url=target.os_image_url, kernel_arguments=target.kernel_arguments,
                           kernel_type=target.kernel_type, extensions=target.extensions) if os_revert else previous
        apply_config(self.root, files_of, target, fetcher=self.fetcher, systemd=self._systemd(),
                     rpmostree=self.rpmostree, state_dir=self.state_dir)
        return planning.make_plan(target, files_of, self.policy_text, firstboot=False), target

    def _finish(self, target: NodeConfig, plan: Any, os_revert: bool) -> None:
        """The policy's restarts for the revert (none when it reboots), or rpm-ostree rollback."""
        from agent.node import planning

        if not plan.reboot and not os_revert:
            planning.carry_out(plan, self.root, self._systemd(), self.logind, firstboot=False)
        if os_revert:
            from agent.host.rpmostree import RpmOstree

            self.rpmostree = self.rpmostree or RpmOstree()
            log.warning("rpm-ostree rollback: the deployment booted before %s becomes the default", target.name,
                        extra=_STAGE)
            self.rpmostree.rollback()

    def _reboot_into(self, target: NodeConfig, previous: NodeConfig, failed: CheckResult, os_revert: bool,
                     previous_record: Optional[Dict[str, Any]]) -> None:
        """Record the revert (checked again after the reboot, agent/node/rebooted.py), then reboot once."""
        from agent.node import planning

        self._save_current(previous, previous_record)
        nodestate.mark_reboot_pending(self.root, self.state_dir, previous, planning.boot_id(self.root),
                                      revertOf=target.name, revertFailure=failed.describe(),
                                      revertOsImageURL=target.os_image_url, healthTimeout=self.timeout,
                                      revertUnits=target.units)
        nodestate.save_reverted(self.root, self.state_dir, {
            "config": target.name, "osImageURL": target.os_image_url, "revertedTo": previous.name,
            "reason": health.failure_reason(failed, target.name, f"reverting to {previous.name} (rebooting)"),
            "undone": True})
        log.warning("rebooting to finish the revert to %s%s", previous.name,
                    " (rpm-ostree rollback)" if os_revert else "", extra=_STAGE)
        planning.reboot(self.root, self.logind)

    def _settle(self, target: NodeConfig, previous: NodeConfig, failed: CheckResult, outcome: str, undone: bool,
                previous_record: Optional[Dict[str, Any]], runs: str) -> Reverted:
        reason = health.failure_reason(failed, target.name, outcome)
        if runs == previous.name:
            self._save_current(previous, previous_record)
        nodestate.save_reverted(self.root, self.state_dir, {
            "config": target.name, "osImageURL": target.os_image_url, "revertedTo": previous.name,
            "reason": reason, "undone": undone})
        (log.warning if undone else log.error)("%s", reason, extra=_STAGE)
        return Reverted(reason, undone, False, runs)

    def _save_current(self, previous: NodeConfig, record: Optional[Dict[str, Any]]) -> None:
        if record is not None:  # the node runs the previous config again: its record (ETag, URL) back
            nodestate.save_current(self.root, self.state_dir, previous, record.get("etag"), record.get("url", ""))


def pool_timeout(headers: Any) -> float:
    """The pool's health time limit the server sent with the config (X-Health-Timeout), else the default."""
    found = {str(k).lower(): v for k, v in dict(headers or {}).items()}.get(health.TIMEOUT_HEADER.lower())
    seconds, problem = health.parse_timeout(found)
    if problem:
        log.warning("%s", problem, extra=_STAGE)
    return seconds


def carry_out(plan: Any, root: Root, systemd: Any, logind: Any) -> Optional[CheckResult]:
    """The plan's reloads and restarts; a failed one (a service that does not start with the new
    config) is a failed health check of its unit, reverted as one (None: all done)."""
    from agent.node import planning
    from agent.node.actions import ActionFailed

    try:
        planning.carry_out(plan, root, systemd, logind, firstboot=False)
    except ActionFailed as exc:
        unit = next((o.action.target_unit for o in exc.result.outcomes if o.status == "failed"), "") or "action"
        failed = CheckResult(health.UNIT, unit, False, health.tail(str(exc)))
        log.error("health: FAILED %s", failed.describe(), extra={"NODE_AGENT_STAGE": "health", "NODE_AGENT_CHECK": unit})
        return failed
    return None


def verify(after: AfterUpdate, current: NodeConfig, target: NodeConfig, plan: Any, failed: Optional[CheckResult],
           etag: Optional[str], url: str, record: Optional[Dict[str, Any]]) -> Optional[str]:
    """Check an update applied without a reboot (``failed``: an action of it already failed).
    Healthy: the warning for failed wanted checks (or None). Not: revert, then raise UpdateReverted
    (``runs``: the config the node runs now, recorded as current)."""
    from agent.errors import UpdateReverted

    restarted = [a.target_unit for a in plan.actions if a.target_unit]
    result = HealthResult((failed,)) if failed is not None else after.check(current, target, restarted, False)
    if result.failed is None:
        nodestate.clear_reverted(after.root, after.state_dir)  # a target reverted once, applied again (--force)
        return health.warning_text(result)
    out = after.revert(target, current, result.failed, booted_target=False, previous_record=record)
    if out.runs == target.name:
        nodestate.save_current(after.root, after.state_dir, target, etag, url)
    error = UpdateReverted(out.reason, out.undone)
    error.runs = out.runs  # type: ignore[attr-defined]
    raise error


def report_reverted(reporter: Any, root: Root, state_dir: str, pool: str, current: NodeConfig,
                    target: NodeConfig) -> bool:
    """When ``target`` is the config a failed health check reverted: say Degraded on it again
    (only when the server's last report differs) and apply nothing. Whether it was."""
    from agent.node import turn

    record = still_reverted(root, state_dir, target)
    if record is None:
        return False
    body = {"pool": pool, "state": "Degraded", "currentConfig": current.name, "desiredConfig": target.name,
            "reason": record.get("reason") or f"reverted {target.name}"}
    last = turn.last_sent(root, state_dir) or {}
    if any(last.get(k) != v for k, v in body.items()):
        reporter.send(body)
    log.info("%s was reverted after a failed health check: not applied again (a new rendered config, or "
             "'node-agent update --force', applies one)", target.name, extra=_STAGE)
    return True
