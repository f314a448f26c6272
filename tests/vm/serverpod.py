"""The VM scenario's move of node-config-server from the host's process into a pod on the guest's
own kubelet, as an admin installs it (docs/install.md, "Kubernetes") and as the MCS runs: after
the node joined (phase 2) and before day 2 (phase 3).

1. The admin's part, with kubectl: the namespace's Secrets (the host server's own TLS certificate
   and key, so the guest's pinned CA and the name node-config-server.vm.test still verify; the
   same bootstrap token, and an admin token), the ConfigMap naming the API server as the guest
   reaches it (https://10.0.2.2:PORT: the API server's certificate names 10.0.2.2), the Node
   labelled node-config-server.openshift.io/serve, then `kubectl apply -k deploy-overlays/kube-1.20`:
   deploy/ unchanged but for the PodDisruptionBudget's apiVersion. The image is in the guest's
   containerd already (tests/vm/build-image.sh, vm-images.service).
2. The DaemonSet's pod runs on the guest (hostNetwork, port 22623) and passes its readiness probe.
3. The host's server process is stopped, and QEMU's user network forwards the host's loopback port
   the guest was configured with (10.0.2.2:PORT is the host's 127.0.0.1:PORT) to the guest's
   22623 (QMP ``hostfwd_add``, at run time): the load balancer in front of the serving nodes, as
   api-int:22623 is in front of the MCS. From here every request of the guest, and the test's own
   views of the server (the same URL), reach the pod.

``move(...)`` returns what the test asserts on (result.kube["serverPod"]).
"""

import os
import time
from typing import Any, Dict, List, Optional

import requests

from tests.helpers import rbac_list
from tests.helpers.kube_cluster import GUEST_HOST_IP, REPO
from tests.vm.failure import PhaseFailed
from tests.vm.guest import Guest, wait_until
from tests.vm.kube import ControlPlane, is_ready
from tests.vm.logfollow import TEXT_MAX

NAMESPACE = "node-config-server"  # deploy/rbac.yaml's
APP_LABEL = "app.kubernetes.io/name=node-config-server"
SERVE_LABEL = "node-config-server.openshift.io/serve"  # deploy/daemonset.yaml's nodeAffinity
OVERLAY = os.path.join(REPO, "deploy-overlays", "kube-1.20")
POD_PORT = 22623
ADMIN_TOKEN = "vm-test-admin-token"


def pod_view(pod: Dict[str, Any]) -> Dict[str, Any]:
    """What the test asserts on: where and as whom the pod runs, its container's arguments,
    mounts and security context, its conditions and restarts."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or [{}]
    statuses = status.get("containerStatuses") or [{}]
    return {"name": pod["metadata"]["name"], "uid": pod["metadata"].get("uid"), "nodeName": spec.get("nodeName"),
            "serviceAccountName": spec.get("serviceAccountName"), "hostNetwork": spec.get("hostNetwork"),
            "priorityClassName": spec.get("priorityClassName"), "podSecurityContext": spec.get("securityContext"),
            "owner": [o.get("kind") for o in pod["metadata"].get("ownerReferences") or []],
            "args": containers[0].get("args"), "env": containers[0].get("env"),
            "volumeMounts": containers[0].get("volumeMounts"), "securityContext": containers[0].get("securityContext"),
            "image": containers[0].get("image"), "phase": status.get("phase"), "ready": is_ready(pod),
            "conditions": status.get("conditions"), "restartCount": statuses[0].get("restartCount"),
            "state": statuses[0].get("state"), "lastState": statuses[0].get("lastState")}


def server_pods(cp: ControlPlane) -> List[Dict[str, Any]]:
    r = cp.kc.get(f"/api/v1/namespaces/{NAMESPACE}/pods", params={"labelSelector": APP_LABEL})
    r.raise_for_status()
    return r.json()["items"]


def install(cp: ControlPlane, tls: Any, token: str, node: str, workdir: str) -> None:
    """The admin's commands of docs/install.md ("Kubernetes"), in order."""
    kc = cp.kc
    tokens = os.path.join(workdir, "server-tokens")
    os.makedirs(tokens, exist_ok=True)
    for name, value in (("bootstrap.token", token), ("admin.token", ADMIN_TOKEN)):
        with open(os.path.join(tokens, name), "w") as f:
            f.write(value + "\n")
    kc.kubectl("-n", NAMESPACE, "create", "secret", "tls", "node-config-server-tls", f"--cert={tls.cert}",
               f"--key={tls.key}")
    kc.kubectl("-n", NAMESPACE, "create", "secret", "generic", "node-config-server-tokens",
               f"--from-file=bootstrap={tokens}/bootstrap.token", f"--from-file=admin={tokens}/admin.token")
    kc.kubectl("-n", NAMESPACE, "create", "configmap", "node-config-server-config",
               f"--from-literal=apiserver-url=https://{GUEST_HOST_IP}:{kc.port}")
    kc.kubectl("label", "node", node, f"{SERVE_LABEL}=")
    kc.kubectl("apply", "-k", OVERLAY)


def wait_ready(cp: ControlPlane, node: str, guest: Guest, timeout: float) -> Dict[str, Any]:
    """The DaemonSet's pod on ``node``, Ready (its readiness probe passed); a miss says the pod's
    status and the namespace's events."""
    def ready() -> Optional[Dict[str, Any]]:
        pods = [p for p in server_pods(cp) if (p.get("spec") or {}).get("nodeName") == node]
        return next((p for p in pods if is_ready(p) and not p["metadata"].get("deletionTimestamp")), None)

    try:
        return wait_until(ready, timeout, guest, f"node-config-server's DaemonSet pod Ready on {node}")
    except PhaseFailed as exc:
        pods = [pod_view(p) for p in server_pods(cp)]
        events = cp.kc.kubectl("-n", NAMESPACE, "get", "events", "--sort-by=.lastTimestamp", check=False).stdout
        raise exc.with_detail(f"server pods: {pods}\nevents in {NAMESPACE}:\n{events[-6000:]}") from None


def forward(guest: Guest, port: int) -> str:
    """QEMU's user network: the host's 127.0.0.1:``port`` to the guest's POD_PORT, from now on."""
    answer = guest.hmp(f"hostfwd_add net0 tcp:127.0.0.1:{port}-:{POD_PORT}")
    if answer.strip():  # the monitor answers nothing on success, the reason otherwise
        raise AssertionError(f"hostfwd_add 127.0.0.1:{port} -> guest :{POD_PORT}: {answer.strip()}")
    return answer


def wait_serving(srv: Any, guest: Guest, timeout: float, what: str) -> None:
    """Until the server answers /healthz at the address the guest was configured with."""
    session = srv.session()

    def healthy() -> bool:
        try:
            return session.get(srv.url("/healthz"), timeout=10).status_code == 200
        except requests.RequestException:
            return False

    wait_until(healthy, timeout, guest, what)


def move(cp: ControlPlane, srv: Any, guest: Guest, tls: Any, token: str, node: str, workdir: str,
         timeout: float) -> Dict[str, Any]:
    """Install the pod, wait for it, stop the host's process, forward its port to the pod; the
    server answers there again (its /healthz through the forward) before this returns."""
    out: Dict[str, Any] = {"installedAt": time.time()}
    install(cp, tls, token, node, workdir)
    pod = wait_ready(cp, node, guest, timeout)
    out["readyAt"] = time.time()
    out["podAtReady"] = pod_view(pod)
    # What the pod's account may do, where it runs (tests/helpers/rbac_list.py)
    out["canIList"] = rbac_list.against_rbac_yaml(cp.kc.kubectl, os.path.join(REPO, "deploy", "rbac.yaml"),
                                                  rbac_list.NAMESPACES)
    srv.stop()  # the host's node-config-server: from here nothing answers on its port until the forward
    out["hostStoppedAt"] = time.time()
    out["hostExited"] = srv.proc is None
    forward(guest, srv.port)
    out["forwardedAt"] = time.time()
    wait_serving(srv, guest, timeout, f"the pod's /healthz through the host's 127.0.0.1:{srv.port}")
    out["servingAt"] = time.time()
    return out


def kubectl_logs(cp: ControlPlane, pod: str) -> Dict[str, Any]:
    """`kubectl logs` and `kubectl logs --previous` of the server's container, run on the host
    against the host's API server, which fetches them from the guest's kubelet (its containerLogs
    endpoint, at the Node's InternalIP and kubelet port: tests/vm/kubeletroute.py)."""
    out: Dict[str, Any] = {}
    for key, extra in (("current", ()), ("previous", ("--previous",))):
        proc = cp.kc.kubectl("-n", NAMESPACE, "logs", pod, "-c", "node-config-server", *extra, check=False,
                             timeout=120)
        out[key] = {"exit": proc.returncode, "text": proc.stdout[-TEXT_MAX:], "stderr": proc.stderr[-2000:]}
    return out


def restarted_and_ready(cp: ControlPlane) -> Optional[List[Dict[str, Any]]]:
    """The server's pods once each reads Ready with its container's restart counted. The kubelet
    posts a pod's status after it started the container again, and may post it after the server
    in that container already answered (a fresh-clone CI read Ready false, restartCount 0, while
    the restarted server was uncordoning the node)."""
    pods = server_pods(cp)
    counted = all(is_ready(p) and any(s.get("restartCount", 0) >= 1 for s in p["status"].get("containerStatuses") or [])
                  for p in pods)
    return pods if pods and counted else None


def terminated_posted(cp: ControlPlane) -> Optional[List[Dict[str, Any]]]:
    """The server's pods once the container each replaced is posted as terminated
    (``lastState.terminated``: what `kubectl logs --previous` reads)."""
    pods = server_pods(cp)
    done = all(any((s.get("lastState") or {}).get("terminated") for s in p["status"].get("containerStatuses") or [])
               for p in pods)
    return pods if pods and done else None


# A bound, not a speed: the kubelet posted lastState with the restart in every run that had it
# (docs/vm-test.md); without it the scenario goes on with boot 2's log as LogFollower read it.
LAST_STATE_WAIT = 120


def pods_and_logs(cp: ControlPlane, guest: Guest, timeout: float, followed: Dict[str, Any]) -> Dict[str, Any]:
    """The server's pods after a reboot restarted the container, once the kubelet has posted that
    (restarted_and_ready), and their logs: `kubectl logs`, `kubectl logs --previous` (kubectl_logs)
    and boot 2's as `kubectl logs -f` read it up to the reboot (``followed``, logfollow.LogFollower)."""
    pods = wait_until(lambda: restarted_and_ready(cp), timeout, guest,
                      "the server's pod Ready again in the API with the reboot's restart counted", poll=1)
    deadline = time.monotonic() + LAST_STATE_WAIT
    posted = terminated_posted(cp)
    while posted is None and time.monotonic() < deadline:
        time.sleep(1)
        posted = terminated_posted(cp)
    pods = posted or server_pods(cp)
    return {"pods": [pod_view(p) for p in pods], "lastStatePosted": posted is not None,
            "followed": followed,
            "logs": {p["metadata"]["name"]: kubectl_logs(cp, p["metadata"]["name"]) for p in pods}}


COUNTS = ("machineCount", "updatedMachineCount", "readyMachineCount", "unavailableMachineCount",
          "degradedMachineCount")


def _views(srv: Any, node: str, pool: str) -> Dict[str, Any]:
    """The pool's target and counts and the node's last report, as the server answers them."""
    session = srv.session()
    p = session.get(srv.url(f"/api/v1/pools/{pool}"), timeout=30).json()
    report = (session.get(srv.url(f"/api/v1/nodes/{node}"), timeout=30).json().get("report") or {})
    return {"target": p["spec"]["configuration"]["name"], "counts": {k: p["status"].get(k) for k in COUNTS},
            "report": {k: report.get(k) for k in ("state", "currentConfig", "desiredConfig")}}


def _answered_views(srv: Any, guest: Guest, node: str, pool: str, timeout: float, when: str) -> Dict[str, Any]:
    """``_views`` once the server answers both: the pod on the loaded guest closed a connection
    without an answer once (a fresh-clone CI run, before the rolling update)."""
    def views() -> Optional[Dict[str, Any]]:
        try:
            return _views(srv, node, pool)
        except (requests.RequestException, ValueError):
            return None

    return wait_until(views, timeout, guest, f"the server's answers on pool {pool} and node {node} {when}")


def roll(cp: ControlPlane, srv: Any, guest: Guest, node: str, pool: str, timeout: float) -> Dict[str, Any]:
    """A rolling update of the running server, as an admin starts one: ``kubectl rollout restart``
    (a new pod template; the DaemonSet's RollingUpdate replaces the pod on the one node, the old
    one stopped first: hostNetwork, one port). Meanwhile the guest's loop goes on (its held fetch
    broken, then retried). Returns the server's views before and after, the pods and the rollout's
    status."""
    out: Dict[str, Any] = {"before": _answered_views(srv, guest, node, pool, timeout, "before the rolling update")}
    old = sorted(p["metadata"]["uid"] for p in server_pods(cp))
    cp.kc.kubectl("-n", NAMESPACE, "rollout", "restart", "daemonset/node-config-server")
    out["restartedAt"] = time.time()

    def replaced() -> Optional[Dict[str, Any]]:
        pods = server_pods(cp)
        new = [p for p in pods if p["metadata"]["uid"] not in old and is_ready(p)
               and not p["metadata"].get("deletionTimestamp")]
        return new[0] if new and len(pods) == 1 else None

    pod = wait_until(replaced, timeout, guest, "the DaemonSet's new pod Ready and the old one gone after "
                                                "kubectl rollout restart")
    out["readyAt"] = time.time()
    out["status"] = cp.kc.kubectl("-n", NAMESPACE, "rollout", "status", "daemonset/node-config-server",
                                  "--timeout=300s", timeout=330).stdout
    wait_serving(srv, guest, timeout, "the new pod's /healthz through the forward")
    out.update(oldPods=old, newPod=pod_view(pod), after=_answered_views(srv, guest, node, pool, timeout, "after the rolling update"))
    return out
