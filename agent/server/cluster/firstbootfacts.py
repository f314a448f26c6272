"""What a node's first boot established, kept across its day-2 reports (pure).

A node's report replaces the one before it. First boot reports the config the node first pivoted
to, the boot image it came up from and that image's skew verdict (agent/node/firstboot.py); the
day-2 loop reports only what it changes (agent/node/update.py), so without this a node's first
update erased them and ``describe node`` said ``First pivot config: <none>`` and ``Boot image
skew: <not checked>`` for a node whose first boot logged both. Upstream records the first boot's
config once, too: the MCS puts the node's initial annotations into the config it serves a new node
(openshift/machine-config-operator pkg/server/server.go ``appendNodeAnnotations``,
``InitialNodeAnnotationsFilePath``), read once at the node's first start.
"""

from typing import Any, Dict, Optional

FIRST_BOOT_FACTS = ("firstPivotConfig", "bootImage", "skew")


def with_first_boot_facts(previous: Optional[Dict[str, Any]], body: Dict[str, Any]) -> Dict[str, Any]:
    """``body`` with the first-boot facts of ``previous`` it does not carry itself. A report that
    names a ``firstPivotConfig``, or carries a ``firstBoot`` object (every report a first boot
    sends does, before its pool stage too), comes from a first boot (a new or reinstalled node):
    its facts stand as sent, nothing is carried over. With a shared store (etcd, Kubernetes) ``previous``
    comes from this replica's watch index: a day-2 report within the watch's lag of the first
    boot's, on another replica, would not see it (a node's first update follows its first boot by
    far more than that lag)."""
    if not previous or body.get("firstPivotConfig") or isinstance(body.get("firstBoot"), dict):
        return body
    carried = {k: previous[k] for k in FIRST_BOOT_FACTS if previous.get(k) and not body.get(k)}
    return dict(body, **carried) if carried else body


def with_current_image(previous: Optional[Dict[str, Any]], body: Dict[str, Any]) -> Dict[str, Any]:
    """``body`` with ``previous``'s currentImage when it names none and reports the same current
    config: a failure (Degraded) changes the node's state, not the image it runs, as the MCD's
    ``currentImage`` annotation stays while it writes ``state`` and ``reason``. Without it a node
    older than its own fix (node-agent sends the image on a failed update) showed
    ``Current image: <none>`` after a Degraded report."""
    if not previous or body.get("currentImage") or not previous.get("currentImage"):
        return body
    if body.get("state") != "Degraded" or body.get("currentConfig") != previous.get("currentConfig"):
        return body
    return dict(body, currentImage=previous["currentImage"])
