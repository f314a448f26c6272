"""After the reboot a first boot or an update asked for, the node says what it now runs.

Until then the server has the node Working on a reboot: it must not count as running the config
(nor prove it or its image to new nodes), and without this report it never would.
"""

import logging
from typing import Any

from agent.host.root import Root
from agent.node import nodestate

log = logging.getLogger("agent.node.update")  # the update loop's logger: its lines read as the loop's in the journal


def report_rebooted(root: Root, state_dir: str, rpmostree: Any, reporter: Any, pool: str, current: Any) -> None:
    """Report Done (or Degraded: it booted another image than ``current`` needs) once the boot id
    differs from the one recorded with the pending reboot, with the desiredImage the server had
    targeted (kept with the pending reboot); then forget the pending reboot."""
    from agent.node import planning

    pending = nodestate.reboot_pending(root, state_dir)
    if pending is None:
        return
    now_boot = planning.boot_id(root)
    if now_boot is None or now_boot == pending.get("bootId"):
        return  # the same boot: the reboot has not happened yet
    booted = planning.booted_os(root, rpmostree)
    want = current.os_image_url
    if booted.known and want and booted.image != want:
        state, reason = "Degraded", (f"booted {booted.image} after the reboot, but {current.name} needs {want}; "
                                     f"check rpm-ostree status")
    else:
        state, reason = "Done", None
    sent = reporter.send({"pool": pool, "state": state, "currentConfig": current.name,
                          "desiredConfig": current.name, "reason": reason,
                          "desiredImage": pending.get("desiredImage") or None,
                          "currentImage": (booted.image if booted.known else want) or None})
    log.info("node booted after its reboot for %s: reported %s%s", current.name, state, "" if sent else " (queued)")
    nodestate.clear_reboot_pending(root, state_dir)
