"""A pool's blocking pods, read for its step (ours; the rules and the selector's syntax:
agent/server/rollout/blockingpods.py; docs/rollout.md, "Blocking pods (ours)").

With ``--backend kubernetes``, each step of a pool whose annotation is set lists the pods of
every namespace once, with the selector and kured's phases given to the API server
(``labelSelector``, ``fieldSelector``) so that only the matching pods come back, paged
(``KubeClient.list``, each kept slim). This happens on the pool's step only (the queue thread, the
sync loop), never while a node's report or fetch is answered. A list that fails holds the pool's
new targeting (kured: a query error blocks the reboot), as an annotation that does not parse does.

The directory backend has no pods: the annotation is still read (an invalid one holds the pool all
the same, so a typo is found before it matters), and the pool says it has no effect there.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from agent.server.rollout import blockingpods
from agent.server.store.kube.client import KubeError, KubeUnavailable

PODS = "/api/v1/pods"  # every namespace: the server's role may list pods cluster-wide (deploy/rbac.yaml)
NO_PODS = ("the directory backend has no pods: the selector has no effect here; it keeps nodes from being targeted "
           "with --backend kubernetes")


@dataclass
class Blocking:
    hold: str = ""  # why nothing is newly targeted ("" when the pods do not hold the pool)
    nodes: Dict[str, List[str]] = field(default_factory=dict)  # node -> its blocking pods, namespace/name
    record: Optional[Dict[str, Any]] = None  # the base of status.rollout.blockingPods; None: no annotation


def _slim(pod: Dict[str, Any]) -> Dict[str, Any]:
    """What blocking_by_node reads of a pod: a page of whole pods at a time, never the list."""
    meta = pod.get("metadata") or {}
    return {"metadata": {k: meta.get(k) for k in ("namespace", "name", "labels")},
            "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")},
            "status": {"phase": (pod.get("status") or {}).get("phase")}}


def read(cluster: Any, pool: Mapping[str, Any]) -> Blocking:
    """The pool's blocking pods now, by Node; with the Kubernetes backend one list of pods."""
    selector, invalid = blockingpods.selector_of(pool)
    if invalid:
        return Blocking(f"the pool's blocking-pod selector is invalid, so nothing is newly targeted until it is "
                        f"fixed: {invalid}", {}, {"invalid": invalid})
    if selector is None:
        return Blocking()
    text = selector.text()
    drainer = getattr(cluster, "drainer", None)  # set with --backend kubernetes only (backends.start_writers)
    if drainer is None:
        return Blocking("", {}, {"selector": text, "ignored": NO_PODS})
    try:
        pods, _ = drainer.client.list(PODS, {"labelSelector": text, "fieldSelector": blockingpods.FIELD_SELECTOR},
                                      transform=_slim)
    except (KubeError, KubeUnavailable) as exc:
        return Blocking(f"the pods matching the pool's blocking-pod selector {text!r} could not be listed, so nothing "
                        f"is newly targeted until they can (a node might run one): {exc}", {},
                        {"selector": text, "unavailable": str(exc)[:500]})
    return Blocking("", blockingpods.blocking_by_node(selector, pods), {"selector": text})


def attach(rollout: Dict[str, Any], blocking: Blocking, skipped: List[str]) -> None:
    """Put ``status.rollout.blockingPods`` in the pool's rollout record: what ``read`` found, and
    the nodes this step skipped for their pods (blockingpods.record)."""
    rollout.pop("blockingPods", None)
    if blocking.record is None:
        return
    out = dict(blocking.record)
    if "selector" in out:
        out.update(blockingpods.record(out["selector"], skipped, blocking.nodes))
    rollout["blockingPods"] = out
