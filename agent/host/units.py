"""Unit files and enablement links as they are in a root (the [Install] rules: agent.core.applyplan.unitfiles)."""

import logging
import os
from typing import List, Optional, Tuple

from agent.core.applyplan.unitfiles import SYSTEM_DIR, VENDOR_DIRS
from agent.host.root import PathEscapeError

log = logging.getLogger(__name__)


def find_unit(root, name: str) -> Optional[Tuple[str, str]]:
    """(config path, text) of a unit file already in the root, searched as systemd does."""
    for d in VENDOR_DIRS:
        p = f"{d}/{name}"
        try:
            host = root.path(p)
        except PathEscapeError as exc:  # a link out of the root, or a loop: not this root's unit file
            log.warning("unit %s: %s is skipped: %s", name, p, exc)
            continue
        if os.path.isfile(host):
            with open(host, encoding="utf-8", errors="replace") as f:
                return p, f.read()
    return None


def existing_links_to(root, name: str) -> List[str]:
    """Config paths of ``*.wants``/``*.requires``/``*.upholds`` links to ``name`` in /etc."""
    found = []
    top = root.path(SYSTEM_DIR)
    try:
        entries = sorted(os.listdir(top))
    except OSError:
        return found
    for entry in entries:
        if entry.endswith((".wants", ".requires", ".upholds")):
            p = os.path.join(top, entry, name)
            if os.path.islink(p):
                found.append(f"{SYSTEM_DIR}/{entry}/{name}")
    return found
