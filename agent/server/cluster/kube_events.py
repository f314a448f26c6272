"""core/v1 Events as the MCO's controllers record them (``--backend kubernetes``), in one place for
every writer (the drain, the node controller's targeting, first boots).

Every Event goes to the server's own namespace (``serve --namespace``), as the MCO writes its
Events into its own (openshift-machine-config-operator); the involved object carries that
namespace, as the MCO's NamespacedEventRecorder (pkg/controller/common/helpers.go
``ensureEventNamespace``) sets it on a cluster-scoped object: the API refuses an Event whose
object's namespace is neither its own nor "default". A repeat of one reason about one object
counts up a single Event (``count``, ``lastTimestamp``, the newest message), as client-go's event
correlator makes a series of a recurring event, rather than one more object each time.
"""

import hashlib
import logging
from typing import Any, Dict

from agent.server.store.kube.client import KubeError, KubeUnavailable, get_if_exists

log = logging.getLogger(__name__)

NODE_CONTROLLER = "machineconfigcontroller-nodecontroller"  # the MCO node controller's recorder name


def event_name(obj_name: str, uid: str, reason: str) -> str:
    """One Event per object (its UID: an object made again under the same name is another one) and
    reason, named as client-go names them, ``<object>.<suffix>``."""
    suffix = f"{uid[:8]}.{reason.lower()}" if uid else reason.lower()
    name = f"{obj_name}.{suffix}"
    return name if len(name) <= 253 else f"{hashlib.sha256(obj_name.encode()).hexdigest()[:40]}.{suffix}"


def reference(obj: Dict[str, Any], api_version: str, kind: str, namespace: str) -> Dict[str, Any]:
    """The involvedObject of an Event about ``obj`` (a cluster-scoped object: the namespace is the
    Event's own, as ensureEventNamespace sets it)."""
    meta = obj.get("metadata") or {}
    return {"apiVersion": api_version, "kind": kind, "name": str(meta.get("name", "")),
            "uid": str(meta.get("uid", "")), "namespace": namespace}


def event_body(involved: Dict[str, Any], namespace: str, reason: str, message: str, stamp: str,
               event_type: str = "Normal", component: str = NODE_CONTROLLER, name: str = "") -> Dict[str, Any]:
    """An Event (pure); ``name`` defaults to one series per object and reason (``event_name``)."""
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name or event_name(involved["name"], involved.get("uid", ""), reason),
                         "namespace": namespace},
            "involvedObject": involved, "reason": reason, "message": message, "type": event_type, "count": 1,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "source": {"component": component},
            "reportingComponent": component, "reportingInstance": component}


def write_event(client: Any, namespace: str, body: Dict[str, Any]) -> None:
    """Create the Event, or count up the series it belongs to (409: it exists)."""
    events = f"/api/v1/namespaces/{namespace}/events"
    for _ in range(3):
        try:
            client.create(events, body)
            return
        except KubeError as exc:
            if exc.status != 409:
                raise
        # the series exists: one more of it (an Event expires after the API server's --event-ttl)
        old = get_if_exists(client, f"{events}/{body['metadata']['name']}")
        if old is None:
            continue
        client.merge_patch(f"{events}/{body['metadata']['name']}", {
            "count": int(old.get("count") or 1) + 1, "lastTimestamp": body["lastTimestamp"], "message": body["message"]})
        return


def record(client: Any, namespace: str, body: Dict[str, Any]) -> bool:
    """``write_event``, logging a refusal instead of raising: an Event is a notice, and what it
    says is also in the objects' status (deploy/rbac.yaml grants events in the namespace)."""
    try:
        write_event(client, namespace, body)
        return True
    except (KubeError, KubeUnavailable) as exc:
        log.error("%s %s: the %s Event was not written: %s (deploy/rbac.yaml grants events in %s)",
                  body["involvedObject"].get("kind"), body["involvedObject"].get("name"), body["reason"], exc,
                  namespace)
        return False
