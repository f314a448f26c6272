"""What the VM scenario's records say happened, in host time: the Node's and the pods' histories
as the API server recorded them (tests/vm/kube.py Recorder), set beside the serial console's
marks and the server's reports. Pure functions of a scenario.Result: test_vm_node.py asserts on
them, ``write`` saves them as build/vm-test/summary.json.

Times are the host's ``time.time()`` when the host saw the record (a watch event, a serial line),
never the guest's clock (a TCG guest's clock drifts).
"""

import calendar
import json
import os
import time
from typing import Any, Dict, List, Optional

from tests.vm.kube import APP, DAEMONSET, ROLE_PREFIX


def epoch(rfc3339: str) -> float:
    return calendar.timegm(time.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ"))


def of_kind(run: Any, kind: str) -> List[Dict[str, Any]]:
    """The recorded events of ``kind`` (Node, Pod, MachineConfigPool), in the API's order."""
    return [e for e in run.api_events if e["kind"] == kind]


def changes(events: List[Dict[str, Any]], key: str) -> List[Dict[str, Any]]:
    """The events where ``key`` took a new value (the first event counts as one)."""
    out: List[Dict[str, Any]] = []
    for e in events:
        if not out or e[key] != out[-1][key]:
            out.append(e)
    return out


def node_flips(run: Any) -> List[Dict[str, Any]]:
    """The Node's events where spec.unschedulable changed: cordons and uncordons."""
    return changes(of_kind(run, "Node"), "unschedulable")[1:]


def ready_changes(run: Any) -> List[Dict[str, Any]]:
    """The Node's events where its Ready condition changed (True, False, Unknown; "" before one)."""
    return changes(of_kind(run, "Node"), "ready")


def pods_by_uid(run: Any) -> Dict[str, List[Dict[str, Any]]]:
    out: Dict[str, List[Dict[str, Any]]] = {}
    for e in of_kind(run, "Pod"):
        out.setdefault(e["uid"], []).append(e)
    return out


def first(events: List[Dict[str, Any]], **want: Any) -> Optional[Dict[str, Any]]:
    return next((e for e in events if all(e.get(k) == v for k, v in want.items())), None)


def stopped(events: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """When the kubelet reported a deleted pod's containers stopped: its status with no container
    running, or the pod's removal (a kubelet removes a pod only once its containers stopped)."""
    return next((e for e in events if e["deleting"] and (e["type"] == "DELETED" or (
        e["running"] and not any(e["running"])))), None)


def serial_marks(run: Any, mark: str) -> List[Dict[str, Any]]:
    return [m for m in run.serial_marks if m["mark"] == mark]


def _pod_events(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    name = events[0]["name"]
    out = []
    placed = next((e for e in events if e["nodeName"]), None)
    if placed:
        out.append({"what": f"pod {name} bound to {placed['nodeName']}", "at": placed["at"]})
    evicted, gone = first(events, deleting=True), stopped(events)
    if evicted:
        out.append({"what": f"pod {name} evicted (deletionTimestamp set)", "at": evicted["at"]})
    if gone:
        ids = sorted({i for e in events for i in e["containerIDs"]})
        out.append({"what": f"pod {name}: containers stopped ({', '.join(ids)})", "at": gone["at"]})
    return out


def timeline(run: Any) -> List[Dict[str, Any]]:
    """Everything the scenario saw happen on the cluster's side, in host time order."""
    nodes = of_kind(run, "Node")
    out: List[Dict[str, Any]] = []
    if nodes:
        out.append({"what": f"Node registered ({nodes[0]['type']}, by {', '.join(nodes[0]['managers'])})",
                    "at": nodes[0]["at"]})
    labelled = next((e for e in nodes if "vm" in e["roles"]), None)
    if labelled:
        out.append({"what": f"Node labelled {ROLE_PREFIX}vm (pool vm)", "at": labelled["at"]})
    out += [{"what": "cordon" if e["unschedulable"] else "uncordon", "at": e["at"]} for e in node_flips(run)]
    out += [{"what": f"Node Ready={e['ready']}", "at": e["at"]} for e in ready_changes(run)[1:]]
    done = changes([dict(e, done=(e["state"], e["currentConfig"])) for e in nodes], "done")
    out += [{"what": f"Done on {e['currentConfig']} (Node annotations)", "at": e["at"]}
            for e in done if e["state"] == "Done"]
    for events in pods_by_uid(run).values():
        out += _pod_events(events)
    names = {"shutdown": "shutdown begins (serial console)", "reset": "reboot: the guest resets (serial console)",
             "kernel-start": "kernel starts (serial console)", "power-off": "power off (serial console)"}
    out += [{"what": names[m["mark"]], "at": m["at"]} for m in run.serial_marks]
    blocked = run.kube.get("blocked")
    if blocked:
        out.append({"what": f"drain blocked, the Node says: {blocked['message']}", "at": blocked["at"]})
    if run.kube.get("pdbRelaxedAt"):
        out.append({"what": f"admin: PodDisruptionBudget {APP} minAvailable 0", "at": run.kube["pdbRelaxedAt"]})
    return sorted(out, key=lambda e: e["at"])


def pod_histories(run: Any) -> List[Dict[str, Any]]:
    """Each workload pod: name, owner, node, container IDs and its phase over time."""
    out = []
    for uid, events in pods_by_uid(run).items():
        phases = changes([dict(e, state=(e["phase"], e["ready"], e["deleting"], e["type"] == "DELETED"))
                          for e in events], "state")
        out.append({"name": events[0]["name"], "uid": uid, "app": events[0]["app"], "owner": events[0]["owner"],
                    "node": next((e["nodeName"] for e in reversed(events) if e["nodeName"]), None),
                    "containerIDs": sorted({i for e in events for i in e["containerIDs"]}),
                    "phases": [{"at": e["at"], "phase": e["phase"], "ready": e["ready"], "deleting": e["deleting"],
                                "type": e["type"]} for e in phases]})
    return out


def summary(run: Any) -> Dict[str, Any]:
    info = (run.kube.get("nodeAtEnd") or {}).get("nodeInfo") or {}
    return {"node": {"name": "vm-node-0", "kubeletVersion": info.get("kubeletVersion"),
                     "containerRuntimeVersion": info.get("containerRuntimeVersion"),
                     "osImage": info.get("osImage"), "kernelVersion": info.get("kernelVersion")},
            "workloads": {"replicaSet": APP, "daemonSet": DAEMONSET},
            "pods": pod_histories(run), "events": timeline(run),
            "mcp": {k: run.kube.get(k) for k in ("mcpAfterSecondBoot", "mcpWhileDraining", "mcpAtEnd")},
            "timings": run.timings, "wallTime": run.timings.get("total")}


def write(run: Any, path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(summary(run), f, indent=1)
    return path
