"""The layered change of benchmarks/bench_rollout.py (issue 52), its pure parts: the objects an
on-cluster build leaves behind, and the checks of what the light agents did.

A pool opted in to image mode (a MachineOSConfig naming it) is held while its target's image is not
built: the server targets nobody until a MachineOSBuild of the target's rendered config succeeded
(targeting.hold_reason, upstream ``canLayeredPoolContinue``), then each candidate gets the rendered
config and the build's image together. The benchmark plays the build controller's part: the
MachineOSConfig's ``status.currentImagePullSpec`` and a MachineOSBuild whose status says Succeeded
with its ``digestedImagePushSpec``; no image is built or pulled (the light agents take the update's
fixed time, as for any change).

Each node reports Working, then Done with ``currentImage`` and ``desiredImage`` the image it was
targeted to, as node-agent does (agent/node/update.py); the server keeps a layered node's entry
until its report carries that image (targeting ``_done_on``). Before both, a node Done without the
desiredImage was a candidate again, retargeted first (the oldest) wave after wave: the first
maxUnavailable nodes kept the slots and the pool stopped after its first wave (checked with the
server of c63767b and light agents leaving desiredImage out: 3 of 30 nodes Done, the rest Waiting).
``problems`` and ``stalled_for`` make the benchmark say so loudly.
"""

import hashlib
import time
from typing import Any, Dict, List, Optional, Sequence

API = "machineconfiguration.openshift.io/v1"
REGISTRY = "registry.example.com/bench/os-image"
PUSH_SPEC = REGISTRY + ":latest"


def image_for(rendered: str) -> str:
    """The build's image of ``rendered``, by digest (as a build reports ``digestedImagePushSpec``)."""
    return f"{REGISTRY}@sha256:{hashlib.sha256(rendered.encode()).hexdigest()}"


def os_config(pool: str) -> Dict[str, Any]:
    """A MachineOSConfig opting ``pool`` in (as examples/state's infra one), no image built yet."""
    return {"apiVersion": API, "kind": "MachineOSConfig", "metadata": {"name": pool},
            "spec": {"machineConfigPool": {"name": pool}, "imageBuilder": {"imageBuilderType": "Job"},
                     "renderedImagePushSecret": {"name": "push-secret"}, "renderedImagePushSpec": PUSH_SPEC,
                     "containerFile": [{"content": "FROM configs AS final\nRUN dnf install -y tcpdump\n"}]}}


def os_build(pool: str, rendered: str) -> Dict[str, Any]:
    """The MachineOSBuild of ``rendered`` for ``pool``'s MachineOSConfig (its status: ``build_status``)."""
    return {"apiVersion": API, "kind": "MachineOSBuild", "metadata": {"name": f"{pool}-{rendered.rsplit('-', 1)[-1]}"},
            "spec": {"machineOSConfig": {"name": pool}, "machineConfig": {"name": rendered},
                     "renderedImagePushSpec": PUSH_SPEC}}


def build_status(image: str, now: Optional[float] = None) -> Dict[str, Any]:
    """A build that succeeded with ``image`` (the conditions the build controller sets)."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))

    def cond(kind: str, status: str) -> Dict[str, str]:
        return {"type": kind, "status": status, "reason": kind, "message": "bench_rollout", "lastTransitionTime": at}

    return {"conditions": [cond("Building", "False"), cond("Succeeded", "True"), cond("Failed", "False")],
            "digestedImagePushSpec": image}


def problems(events: Sequence[Dict[str, Any]], names: Sequence[str], target: str, image: str) -> List[str]:
    """What the light agents did that a layered rollout must not show: a node never told its
    turn, told it without the build's image (the served annotations' desiredImage), or Done
    with another currentImage, or not Done at all. Empty: every node went to ``image``."""
    learned: Dict[str, str] = {}
    done: Dict[str, str] = {}
    for e in events:
        if e.get("c") != target:
            continue
        if e["e"] == "learned":
            learned[e["n"]] = e.get("img", "")
        elif e["e"] == "done":
            done[e["n"]] = e.get("img", "")
    out: List[str] = []
    for kind, seen in (("never told its turn", learned), ("never Done", done)):
        missing = [n for n in names if n not in seen]
        if missing:
            out.append(f"{len(missing)} node(s) {kind} on {target}: {', '.join(missing[:5])}")
    for kind, seen in (("served without the build's image", learned), ("Done on another image", done)):
        wrong = sorted(n for n, img in seen.items() if img != image)
        if wrong:
            out.append(f"{len(wrong)} node(s) {kind} (want {image}): "
                       + ", ".join(f"{n} {seen[n] or '(none)'}" for n in wrong[:5]))
    return out


def plans(events: Sequence[Dict[str, Any]], target: str) -> Dict[str, int]:
    """The turns to ``target`` the agents were told, and how many of them node-agent's planner
    drained and rebooted (a new OS image: both, on every node)."""
    told = [e for e in events if e["e"] == "learned" and e.get("c") == target]
    return {"told": len(told), "drain": sum(1 for e in told if e.get("drain")),
            "reboot": sum(1 for e in told if e.get("reboot"))}


def stalled_for(dones: Sequence[float], since: float, now: float) -> float:
    """Seconds without a new Done: since the latest of ``dones`` (or ``since``, the build's success)."""
    return now - max([since, *dones])


def stall_limit(update_s: float) -> float:
    """How long a rollout may go without any node's Done before the benchmark calls it stopped: a
    few updates' time and a refused drain lease's Retry-After (30 s) to spare."""
    return 4 * update_s + 60.0
