"""After the reboot a first boot or an update asked for, the node says what it now runs.

Until then the server has the node Working on a reboot: it must not count as running the config
(nor prove it or its image to new nodes), and without this report it never would.

After an update's reboot the node checks its health first (agent/core/health.py): a failed check
reverts the update (agent/node/revert.py), which may reboot once more; after that reboot it checks
again and reports Degraded, naming the check and the config it reverted to.
"""

import logging
from typing import Any, Callable, Dict, Optional

from agent.core import health
from agent.core.nodeconfig import NodeConfig
from agent.host.root import Root
from agent.node import nodestate

log = logging.getLogger("agent.node.update")  # the update loop's logger: its lines read as the loop's in the journal


def report_rebooted(root: Root, state_dir: str, rpmostree: Any, reporter: Any, pool: str, current: Any,
                    after_for: Optional[Callable[[Dict[str, Any]], Any]] = None) -> bool:
    """Report Done (or Degraded: it booted another image than ``current`` needs, a health check
    failed) once the boot id differs from the one recorded with the pending reboot, with the
    desiredImage the server had targeted (kept with the pending reboot); then forget the pending
    reboot. ``after_for(pending)``: the health checks and revert (revert.AfterUpdate) of an update's
    reboot. Whether a revert reboots the node again (nothing reported yet)."""
    from agent.node import planning

    pending = nodestate.reboot_pending(root, state_dir)
    if pending is None:
        return False
    now_boot = planning.boot_id(root)
    if now_boot is None or now_boot == pending.get("bootId"):
        return False  # the same boot: the reboot has not happened yet
    booted = planning.booted_os(root, rpmostree)
    want = current.os_image_url
    desired = current.name
    if booted.known and want and booted.image != want:
        state, reason = "Degraded", (f"booted {booted.image} after the reboot, but {current.name} needs {want}; "
                                     f"check rpm-ostree status")
    else:
        state, reason = "Done", None
    after = after_for(pending) if after_for is not None and "healthTimeout" in pending else None
    if after is not None and pending.get("revertOf"):
        state, reason, desired = _after_revert(after, pending, current, reason)
    elif after is not None and state == "Done":
        checked = _check_update(after, pending, current)
        if checked is None:
            return True  # reverting: rebooting again, checked after that boot
        state, reason, desired, current = checked
    sent = reporter.send({"pool": pool, "state": state, "currentConfig": current.name,
                          "desiredConfig": desired, "reason": reason,
                          "desiredImage": pending.get("desiredImage") or None,
                          "currentImage": (booted.image if booted.known else want) or None})
    log.info("node booted after its reboot for %s: reported %s%s", current.name, state, "" if sent else " (queued)")
    nodestate.clear_reboot_pending(root, state_dir)
    return False


def _check_update(after: Any, pending: Dict[str, Any], current: Any):
    """The health of the update the node rebooted for: (state, reason, desiredConfig, the config
    it runs), or None when a revert reboots again."""
    from agent.node import revert

    record = revert.load_previous(after.root, after.state_dir)
    previous = nodestate.current_config(record) if record is not None else None
    before = previous if previous is not None else NodeConfig(name="(unknown)")
    result = after.check(before, current, [], True)
    if result.failed is None:
        nodestate.clear_reverted(after.root, after.state_dir)  # a target reverted once, applied again (--force)
        return "Done", health.warning_text(result), current.name, current
    if previous is None or previous.name == current.name:
        return "Degraded", health.failure_reason(result.failed, current.name, "no previous config to revert to"), \
            current.name, current
    out = after.revert(current, previous, result.failed, booted_target=True, previous_record=record)
    if out.rebooting:
        return None
    return "Degraded", out.reason, current.name, (previous if out.runs == previous.name else current)


def _after_revert(after: Any, pending: Dict[str, Any], current: Any, booted_problem: Optional[str]):
    """After the reboot of a revert: check the config put back; (state, reason, desiredConfig)."""
    reverted = str(pending.get("revertOf") or "")
    units = pending.get("revertUnits") if isinstance(pending.get("revertUnits"), list) else []
    failure = str(pending.get("revertFailure") or "a health check")
    if booted_problem:
        outcome = f"could not revert to {current.name}: {booted_problem}"
    else:
        result = after.check(NodeConfig(ignition={"systemd": {"units": units}}), current, [], True)
        outcome = (f"reverted to {current.name}" if result.failed is None else
                   f"could not revert to {current.name}: after the revert, {result.failed.describe()}")
    reason = health.bounded(f"{outcome} after a failed health check of {reverted}: {failure}")
    nodestate.save_reverted(after.root, after.state_dir, {
        "config": reverted, "osImageURL": str(pending.get("revertOsImageURL") or ""), "revertedTo": current.name,
        "reason": reason, "undone": outcome.startswith("reverted")})
    log.warning("%s", reason)
    return "Degraded", reason, reverted
