"""The name a node reports, registers and fetches under: chosen at its first boot and kept.

A node that first booted as ``firstboot --node-name X`` and later ran ``update`` (which has no
``--node-name``) took the host name: a second identity registered and counted in the pool. Now
first boot records the name in the state directory (``node-name``); every later run uses it, and a
run told another name (``--node-name`` or agent.yaml's ``nodeName``) refuses (ConfigError, exit 65)
naming the recorded one, as the kubelet keeps the Node name it registered with. To rename a node,
delete it on the server and provision it again.
"""

import os
from typing import Any, Optional

from agent.core.settings import default_node_name
from agent.errors import ConfigError
from agent.host.root import Root

NODE_NAME_FILE = "node-name"


def decide(explicit: Optional[str], configured: Optional[str], recorded: Optional[str], hostname: str,
           where: str) -> str:
    """The node's name (pure): the recorded one when there is one (another name asked for is a
    ConfigError naming both and ``where`` the record is), else the one asked for, else the host name."""
    asked = explicit or configured
    if recorded:
        if asked and asked != recorded:
            how = "--node-name" if explicit else "nodeName in agent.yaml"
            raise ConfigError(f"this node first booted as {recorded!r} (recorded in {where}); {how} asks for "
                              f"{asked!r}: a node keeps its first name (drop {how}, or set it to {recorded!r}; to "
                              f"rename the node, delete it on the server and provision it again)")
        return recorded
    return asked or hostname


def _path(root: Root, state_dir: str) -> str:
    return root.path(os.path.join(state_dir, NODE_NAME_FILE))


def recorded_name(root: Root, state_dir: str) -> Optional[str]:
    try:
        with open(_path(root, state_dir), encoding="utf-8") as f:
            return f.read(1024).strip() or None
    except FileNotFoundError:
        return None


def resolve(root: Root, state_dir: str, explicit: Optional[str], settings: Any) -> str:
    """The name for this run. agent.yaml's ``nodeName`` counts as asked for only when it is not
    the default (the host name): Settings does not keep whether the file set it."""
    configured = getattr(settings, "node_name", None)
    hostname = default_node_name()
    return decide(explicit, configured if configured != hostname else None, recorded_name(root, state_dir),
                  hostname, _path(root, state_dir))


def record(root: Root, state_dir: str, name: str) -> None:
    """Keep the first boot's name (once: an existing record is never replaced)."""
    if recorded_name(root, state_dir) is not None:
        return
    from agent.host.files import atomic_write

    path = _path(root, state_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, (name + "\n").encode(), mode=0o644)
