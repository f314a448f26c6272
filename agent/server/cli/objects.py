"""What ``get|describe -o json|yaml|name`` print (pure): objects as kubectl prints them.

A pool is the API's MachineConfigPool as it is. A node is no Kubernetes object in our API
(``GET /api/v1/nodes/<node>``: the server's record of what the node reported and what the server
decided about it), so it is printed in a Kubernetes object's shape, of our own kind
(``node_object``): ``apiVersion``, ``kind: ManagedNode``, ``metadata.name``, ``spec`` (what the
server decided: the node's pool and the config it targets the node to) and ``status`` (what was
observed: the node's last report and the server's view of it). Internal fields stay out: the
server's own mark on a stored report (``report._server``: whether and how the name was approved,
docs/api.md), and the API's duplicate ``node`` key. The kind is ours, not the core ``Node``:
nothing serves it, and ``kubectl get nodes`` shows the Node of the same name (``--backend
kubernetes``).
"""

import json
from typing import Any, Dict, List

POOL_RESOURCE = "machineconfigpool.machineconfiguration.openshift.io"  # kubectl get mcp -o name
NODE_API_VERSION = "node-agent.openshift.io/v1"
NODE_KIND = "ManagedNode"
NODE_LEFT_OUT = ("name", "node", "pool", "report")  # spec, metadata, or rebuilt below


def as_list(items: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A list as ``kubectl get -o json|yaml`` prints one (its List of the items it got)."""
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def kind_name(item: Dict[str, Any], pool: bool) -> str:
    """``-o name``: ``machineconfigpool.machineconfiguration.openshift.io/worker`` as kubectl
    names a pool, ``node/worker-0`` for a node."""
    if pool:
        return f"{POOL_RESOURCE}/{(item.get('metadata') or {}).get('name', '')}"
    return f"node/{item.get('name') or item.get('node', '')}"


def node_object(node: Dict[str, Any]) -> Dict[str, Any]:
    """The API's node entry (``GET /api/v1/nodes[/<node>]``) in a Kubernetes object's shape,
    without internal fields (module docstring)."""
    name = str(node.get("name") or node.get("node") or "")
    rollout = node.get("rollout") or {}
    spec: Dict[str, Any] = {"pool": node.get("pool") or ""}
    if rollout.get("desiredConfig"):
        spec["desiredConfig"] = rollout["desiredConfig"]
    report = {k: v for k, v in (node.get("report") or {}).items() if not str(k).startswith("_")}
    status = {k: v for k, v in node.items() if k not in NODE_LEFT_OUT}
    status["report"] = report
    return {"apiVersion": NODE_API_VERSION, "kind": NODE_KIND, "metadata": {"name": name}, "spec": spec,
            "status": status}


def dump(obj: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(obj, indent=2, sort_keys=True) + "\n"
    import yaml

    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False)
