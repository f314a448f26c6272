"""Files that hold credentials are written mode 0600, whatever the config says.

A MachineConfig may give the pull secret no mode at all (Ignition's default is 0644), which
made it readable by every user of the node. These paths are forced to 0600 (owner unchanged);
the plan shows the mode actually written. docs/security.md lists them.
"""

from typing import Optional

SECRET_MODE = 0o600
SECRET_PATHS = frozenset({
    "/var/lib/kubelet/config.json",  # the cluster pull secret (MCO templates: mode 0600)
    "/etc/kubernetes/kubeconfig",  # the bootstrap kubeconfig (the MCS serves it 0600)
    "/etc/mco/internal-registry-pull-secret.json",  # the MCO's internal registry pull secret
    "/root/.docker/config.json",  # a pull secret for root's podman/docker
})


def file_mode(path: str, mode: Optional[int]) -> Optional[int]:
    """The mode to write ``path`` with: 0600 for a secret, else ``mode`` (None: the default)."""
    return SECRET_MODE if path in SECRET_PATHS else mode


def is_secret(path: str, mode: Optional[int] = None) -> bool:
    """Whether a file's content (or any digest of it) must never appear in a report or a log:
    one of SECRET_PATHS, or a file the config keeps from other users (no read bit for others:
    a key, a token). A drift of it says only "content differs"."""
    if path in SECRET_PATHS:
        return True
    return mode is not None and not mode & 0o004
