"""This node's own credential on disk: ``<stateDir>/node-credential`` (0600, under ``--root``),
``{"server", "node", "credential", "registered"}`` (agent/node/report.py registers with it;
docs/security.md "Identity")."""

import json
import logging
import os
import secrets
from typing import Any, Dict, Optional, Tuple

from agent.host.root import Root

log = logging.getLogger(__name__)

CREDENTIAL = "node-credential"


def _load_json(path: str) -> Tuple[Any, bool]:
    """A state file's JSON: (data, True); (None, True) when there is no file; (None, False)
    when it cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), True
    except FileNotFoundError:
        return None, True
    except (OSError, ValueError):
        return None, False


def credential_path(root: Root, state_dir: str) -> str:
    return root.path(os.path.join(state_dir, CREDENTIAL))


CREDENTIAL_PREFIX = "nac1_"  # as the server's (agent/server/rollout/identity.py)


def new_credential() -> str:
    """This node's own credential: 256 random bits, URL-safe (what the server would make)."""
    return CREDENTIAL_PREFIX + secrets.token_urlsafe(32)


def read_credential(root: Root, state_dir: str, quiet: bool = False,
                    registered_only: bool = True) -> Optional[Dict[str, Any]]:
    """The credential record a run kept (``server``, ``node``, ``credential``, ``registered``),
    if any and whole; with ``registered_only`` (the default), only once the server took it. A
    record without ``registered`` was kept after the server's answer (an older node-agent)."""
    path = credential_path(root, state_dir)
    data, readable = _load_json(path)
    if not readable and not quiet:
        log.warning("ignoring unreadable node credential %s; the node registers again", path)
    if isinstance(data, dict) and all(isinstance(data.get(k), str) and data[k] for k in ("server", "node", "credential")):
        data["registered"] = data.get("registered") is not False
        if registered_only and not data["registered"]:
            return None
        return data
    return None


def remove_credential(root: Root, state_dir: str) -> None:
    """Drop a credential the server no longer accepts (the node then registers again)."""
    path = credential_path(root, state_dir)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.error("could not remove the stale node credential %s: %s", path, exc)
