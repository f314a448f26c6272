"""What the agent keeps about this node under its state directory (``/var/lib/node-agent``).

- ``firstboot.done``: the stamp; ``node-agent-firstboot.service`` has a condition on it.
- ``current-config.json``: the config the node is at (the day-2 loop plans against it).
- ``<command>-progress.json``: what an interrupted run already did, so it resumes.
- ``rollout.json``: the node's turn in its pool's rollout, as the server last said it.
Every write is atomic (temporary file, fsync, rename, fsync of the directory).
"""

import datetime
import json
import logging
import os
from typing import Any, Dict, Optional

from agent.core.nodeconfig import NodeConfig
from agent.host.root import Root

log = logging.getLogger(__name__)

FIRSTBOOT_STAMP = "firstboot.done"
CURRENT = "current-config.json"
REBOOT_PENDING = "reboot-pending.json"
IRRECONCILABLE = "irreconcilable.json"
REVERTED = "reverted.json"  # the target a failed health check reverted (agent/node/revert.py)
ROLLOUT = "rollout.json"  # the node's turn in its pool's rollout, as the server last said it (agent/node/turn.py)


def write_json(path: str, data: Any, mode: int = 0o600) -> None:
    from agent.host.files import atomic_write

    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, (json.dumps(data, sort_keys=True, indent=1) + "\n").encode(), mode=mode)


def read_json(path: str) -> Optional[Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError:
        log.warning("ignoring unreadable state file %s", path)
        return None


class Progress:
    """What a previous, interrupted run already did."""

    def __init__(self, root: Root, state_dir: str, command: str):
        self.root = root
        self.dir = root.path(state_dir)
        self.path = os.path.join(self.dir, f"{command}-progress.json")
        self.command = command
        self.data: Dict[str, Any] = read_json(self.path) or {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def mark(self, **fields: Any) -> None:
        self.data.update(fields)
        write_json(self.path, self.data)

    def save_json(self, name: str, data: Any) -> None:
        write_json(os.path.join(self.dir, f"{self.command}-{name}.json"), data)

    def load_json(self, name: str) -> Optional[Any]:
        return read_json(os.path.join(self.dir, f"{self.command}-{name}.json"))

    def forget_json(self, name: str) -> bool:
        """Remove what save_json(name) kept; whether there was anything."""
        try:
            os.unlink(os.path.join(self.dir, f"{self.command}-{name}.json"))
        except FileNotFoundError:
            return False
        return True

    def clear(self) -> None:
        for name in os.listdir(self.dir) if os.path.isdir(self.dir) else []:
            if name.startswith(f"{self.command}-") and name.endswith(".json"):
                os.unlink(os.path.join(self.dir, name))
        self.data = {}


def write_stamp(root: Root, state_dir: str, config_name: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(root.path(os.path.join(state_dir, FIRSTBOOT_STAMP)), {"config": config_name, "at": now},
                mode=0o644)


def firstboot_done(root: Root, state_dir: str) -> bool:
    return os.path.exists(root.path(os.path.join(state_dir, FIRSTBOOT_STAMP)))


def save_current(root: Root, state_dir: str, config: NodeConfig, etag: Optional[str], url: str) -> None:
    write_json(root.path(os.path.join(state_dir, CURRENT)), {
        "name": config.name, "etag": etag, "url": url, "ignition": config.ignition,
        "osImageURL": config.os_image_url, "kernelArguments": list(config.kernel_arguments),
        "kernelType": config.kernel_type, "extensions": list(config.extensions), "fips": config.fips,
    })


def load_current(root: Root, state_dir: str) -> Optional[Dict[str, Any]]:
    return read_json(root.path(os.path.join(state_dir, CURRENT)))


def current_config(record: Dict[str, Any]) -> NodeConfig:
    return NodeConfig(ignition=record["ignition"], os_image_url=record.get("osImageURL", ""),
                      kernel_arguments=tuple(record.get("kernelArguments", ())),
                      kernel_type=record.get("kernelType", ""), extensions=tuple(record.get("extensions", ())),
                      fips=bool(record.get("fips")), name=record.get("name", ""))


def mark_reboot_pending(root: Root, state_dir: str, config: NodeConfig, boot_id: Optional[str],
                        desired_image: Optional[str] = None, **extra: Any) -> None:
    """The node asked for a reboot to finish ``config``: the day-2 loop reports it Done once the
    node has booted again (another boot id), not before (it does not run the config yet).
    ``desired_image``: the layered image the server targeted, reported with that Done."""
    record = {"config": config.name, "osImageURL": config.os_image_url, "bootId": boot_id}
    if desired_image:
        record["desiredImage"] = desired_image
    record.update({k: v for k, v in extra.items() if v is not None})  # the health check's (agent/node/revert.py)
    write_json(root.path(os.path.join(state_dir, REBOOT_PENDING)), record)


def reboot_pending(root: Root, state_dir: str) -> Optional[Dict[str, Any]]:
    return read_json(root.path(os.path.join(state_dir, REBOOT_PENDING)))


def clear_reboot_pending(root: Root, state_dir: str) -> None:
    try:
        os.unlink(root.path(os.path.join(state_dir, REBOOT_PENDING)))
    except FileNotFoundError:
        pass


def save_irreconcilable(root: Root, state_dir: str, config_name: str, differences: list) -> None:
    """The storage sections the config differs in from the install-time one (kept, not applied:
    irreconcilableValidationOverrides.storage); nothing recorded when there are none."""
    path = root.path(os.path.join(state_dir, IRRECONCILABLE))
    if not differences:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    write_json(path, {"config": config_name, "differences": list(differences)}, mode=0o644)


def load_irreconcilable(root: Root, state_dir: str) -> Optional[Dict[str, Any]]:
    return read_json(root.path(os.path.join(state_dir, IRRECONCILABLE)))


def read_token(root: Root, settings: Any) -> Optional[str]:
    path = settings.report.token_file
    if not path:
        return None
    try:
        return root.read_text(path).strip() or None
    except FileNotFoundError:
        log.warning("report token file %s does not exist; reporting without a token", root.path(path))
        return None


def save_rollout(root: Root, state_dir: str, data: Dict[str, Any]) -> None:
    write_json(root.path(os.path.join(state_dir, ROLLOUT)), data, mode=0o644)


def load_rollout(root: Root, state_dir: str) -> Optional[Dict[str, Any]]:
    data = read_json(root.path(os.path.join(state_dir, ROLLOUT)))
    return data if isinstance(data, dict) else None


def save_reverted(root: Root, state_dir: str, data: Dict[str, Any]) -> None:
    write_json(root.path(os.path.join(state_dir, REVERTED)), data)


def load_reverted(root: Root, state_dir: str) -> Optional[Dict[str, Any]]:
    data = read_json(root.path(os.path.join(state_dir, REVERTED)))
    return data if isinstance(data, dict) else None


def clear_reverted(root: Root, state_dir: str) -> None:
    try:
        os.unlink(root.path(os.path.join(state_dir, REVERTED)))
    except FileNotFoundError:
        pass
