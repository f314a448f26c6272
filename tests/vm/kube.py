"""The VM scenario's Kubernetes side: a real control plane on the host's loopback, the guest's
kubelet credentials, the workloads an admin runs on the pool, and what the API server itself
recorded about them.

- ``ControlPlane``: tests/helpers/kube_cluster.py's KubeCluster (etcd + kube-apiserver 1.20.2 with
  NodeRestriction + kube-controller-manager + kube-scheduler + OpenShift's CRDs); the scenario's
  state objects applied with kubectl; node-config-server's user bound to what deploy/rbac.yaml
  defines, nothing more. node-config-server and the guest's kubelet talk to it; the agent talks
  to node-config-server alone (10.0.2.2).
- Nothing here plays the kubelet: the guest's own kubelet joins as a real one does (TLS
  bootstrap: with the bootstrap token of ``bootstrap_credentials`` it asks for its client
  certificate for ``system:node:<name>``, the controller manager approves and signs it with the
  cluster's CA, the kubelet keeps it in /var/lib/kubelet/pki/kubelet-client-current.pem), then
  registers the Node, renews its Lease, runs the pods the real scheduler binds there and ends
  their deletion once containerd stopped their containers; ``workloads`` is what the admin deploys.
- ``Recorder``: watches the Node, the workload's pods and the pool, and keeps every event with the
  host time it arrived and its resourceVersion (one etcd revision counter orders Node and Pod
  writes).
- ``SerialMarks``: the guest's serial console as QEMU writes it, read as it grows, with the
  kernel's boot and reset lines and systemd's first shutdown line stamped in host time (see
  test_vm_drain.py for why these).
"""

import base64
import json
import os
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

import requests
import yaml

from tests.helpers.kube_cluster import GUEST_HOST_IP, REPO, KubeCluster
from tests.helpers.wait import wait_for

WORKLOAD = "vm-workload"  # the namespace of the pods the drain evicts
USER = "node-config-server-vm"  # the server's least-privilege user
ROLE_PREFIX = "node-role.kubernetes.io/"
MCO = "machineconfiguration.openshift.io/"
DRAIN_LAST_ERROR = "node-config-server.openshift.io/drain-last-error"  # what blocked the last drain round


def rbac_bindings(docs: List[Dict[str, Any]], user: str) -> List[List[str]]:
    """kubectl arguments binding ``user`` to each ClusterRole and Role that ``docs`` (deploy/rbac.yaml)
    define, and to each Role the file binds its service account to without defining it (the
    cluster's own extension-apiserver-authentication-reader in kube-system): the file's own
    bindings name its service account, not this test's user."""
    out = []
    defined = {((d or {}).get("metadata") or {}).get("name") for d in docs if (d or {}).get("kind") == "Role"}
    for doc in docs:
        kind, meta = (doc or {}).get("kind"), (doc or {}).get("metadata") or {}
        if kind == "ClusterRole":
            out.append(["create", "clusterrolebinding", f"{user}-{meta['name']}",
                        f"--clusterrole={meta['name']}", f"--user={user}"])
        elif kind == "Role":
            out.append(["create", "rolebinding", f"{user}-{meta['name']}", "-n", meta["namespace"],
                        f"--role={meta['name']}", f"--user={user}"])
        elif kind == "RoleBinding" and (doc.get("roleRef") or {}).get("kind") == "Role" and \
                doc["roleRef"]["name"] not in defined:
            out.append(["create", "rolebinding", f"{user}-{meta['name']}", "-n", meta["namespace"],
                        f"--role={doc['roleRef']['name']}", f"--user={user}"])
    return out


class ControlPlane:
    def __init__(self, workdir: str):
        self.kc = KubeCluster(os.path.join(workdir, "kube"), controller_manager_args=CONTROLLER_MANAGER_ARGS,
                              tls_bootstrap=True)
        self.kubeconfig = ""
        self.serve_args: List[str] = []
        self.bootstrap_token = ""  # the guest kubelet's (bootstrap_credentials)

    def start(self, objects: List[str]) -> "ControlPlane":
        """The control plane up, ``objects`` (YAML documents) applied, the server's user bound."""
        kc = self.kc.start()
        try:
            self.apply("---\n".join(objects))
            rbac = os.path.join(REPO, "deploy", "rbac.yaml")
            kc.kubectl("apply", "-f", rbac)
            with open(rbac) as f:
                bindings = rbac_bindings(list(yaml.safe_load_all(f)), USER)
            for args in bindings:
                kc.kubectl(*args)
            self.kubeconfig = kc.kubeconfig_for(USER)
            wait_for(lambda: kc.kubectl("auth", "can-i", "patch", "nodes", f"--as={USER}", check=False)
                     .stdout.strip() == "yes", f"{USER}'s bindings in effect")
            # Node state in the API (the default with this backend), in the namespace rbac.yaml's Role covers.
            namespace = [a[a.index("-n") + 1] for a in bindings if "-n" in a and "kube-system" not in a][0]
            self.serve_args = ["--backend", "kubernetes", "--kubeconfig", self.kubeconfig, "--namespace", namespace]
            kc.create_namespace(WORKLOAD)
            self.bootstrap_token = kc.bootstrap_token()
        except BaseException:
            kc.stop()
            raise
        return self

    def apply(self, text: str) -> None:
        self.kc.kubectl("apply", "-f", "-", input=text)

    def get_mcp(self) -> str:
        """`kubectl get mcp` as an admin reads it."""
        return self.kc.kubectl("get", "mcp").stdout

    def stop(self) -> None:
        self.kc.stop()


APP = "app"  # the ReplicaSet (2 replicas) and its PodDisruptionBudget (minAvailable 1)
DAEMONSET = "node-daemon"  # one pod per node of the pool; a drain leaves it (IgnoreAllDaemonSets)
IMAGE = "localhost/busybox:1.35"  # made at image build time, imported by vm-images.service (no registry)
# PID 1 in the container: stops at once on SIGTERM (a shell waiting in `sleep` would hold the
# grace period), so a drain shows the kubelet stopping it, not a SIGKILL 30 s later.
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; echo started; while true; do sleep 1; done"]
# The pool's role label: workloads land only on a node the server put in pool vm, that is one
# whose first boot applied that pool's config (MCO-650).
POOL_SELECTOR = {ROLE_PREFIX + "vm": ""}
# The node lifecycle controller's view of a rebooting node within the guest's outage (a reboot
# under TCG is a minute or more): the kubelet renews its Lease every 5 s (nodeLeaseDurationSeconds
# 20 in the guest's kubelet-config.yaml), the controller calls a node Unknown after 25 s without
# one (40 s and 10 s by default; 25 s is still five missed renewals).
CONTROLLER_MANAGER_ARGS = ("--node-monitor-grace-period=25s", "--node-monitor-period=2s")


def pod_template(labels: Dict[str, str]) -> Dict[str, Any]:
    return {"metadata": {"labels": labels}, "spec": {
        "automountServiceAccountToken": False, "enableServiceLinks": False, "terminationGracePeriodSeconds": 10,
        "nodeSelector": POOL_SELECTOR,
        "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never", "command": COMMAND}]}}


def workloads() -> List[Dict[str, Any]]:
    """What an admin runs on the pool: a ReplicaSet of 2 guarded by a PDB (minAvailable 1) and a
    DaemonSet, all selecting the pool's role label."""
    app, ds = {"app": APP}, {"app": DAEMONSET}
    meta = {"namespace": WORKLOAD}
    return [
        {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": dict(meta, name=APP),
         "spec": {"minAvailable": 1, "selector": {"matchLabels": app}}},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": dict(meta, name=APP),
         "spec": {"replicas": 2, "selector": {"matchLabels": app}, "template": pod_template(app)}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": dict(meta, name=DAEMONSET),
         "spec": {"selector": {"matchLabels": ds}, "template": pod_template(ds)}},
    ]


def bootstrap_credentials(kc: KubeCluster, token: str) -> Dict[str, Tuple[bytes, int]]:
    """The guest's kubelet credentials as an installer leaves them on an OpenShift node: the
    bootstrap kubeconfig /etc/kubernetes/kubeconfig (the API server at the host's loopback as the
    guest sees it, a bootstrap token), from which the kubelet gets its own client certificate
    (CN system:node:<name>, O system:nodes) once the cluster approved its CSR, and the CA as
    kubelet-ca.crt. The kubelet then writes /var/lib/kubelet/kubeconfig pointing at
    /var/lib/kubelet/pki/kubelet-client-current.pem, which node-agent presents to the server."""
    with open(kc.ca_path, "rb") as f:
        ca = f.read()
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "bootstrap",
           "clusters": [{"name": "vm", "cluster": {"server": f"https://{GUEST_HOST_IP}:{kc.port}",
                                                   "certificate-authority-data": base64.b64encode(ca).decode()}}],
           "users": [{"name": "kubelet-bootstrap", "user": {"token": token}}],
           "contexts": [{"name": "bootstrap", "context": {"cluster": "vm", "user": "kubelet-bootstrap"}}]}
    return {"/etc/kubernetes/kubeconfig": (json.dumps(cfg, indent=1).encode(), 0o600),
            "/etc/kubernetes/kubelet-ca.crt": (ca, 0o644)}


def is_ready(pod: Dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions", []))


def node_ready(obj: Dict[str, Any]) -> str:
    """The Node's Ready condition status: True, False, Unknown (the node lifecycle controller's
    word for a node that stopped renewing), "" before the kubelet wrote one."""
    return next((c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Ready"), "")


def node_summary(obj: Dict[str, Any]) -> Dict[str, Any]:
    meta, ann = obj.get("metadata") or {}, (obj.get("metadata") or {}).get("annotations") or {}
    info = (obj.get("status") or {}).get("nodeInfo") or {}
    return {"kind": "Node", "name": meta.get("name"), "unschedulable": bool((obj.get("spec") or {}).get("unschedulable")),
            "roles": sorted(k[len(ROLE_PREFIX):] for k in (meta.get("labels") or {}) if k.startswith(ROLE_PREFIX)),
            "ready": node_ready(obj), "state": ann.get(MCO + "state"), "currentConfig": ann.get(MCO + "currentConfig"),
            "desiredConfig": ann.get(MCO + "desiredConfig"), "reason": ann.get(MCO + "reason"),
            "drainLastError": ann.get(DRAIN_LAST_ERROR),
            "managers": sorted({m.get("manager", "") for m in meta.get("managedFields") or []}),
            "kubeletVersion": info.get("kubeletVersion"), "containerRuntimeVersion": info.get("containerRuntimeVersion")}


def pod_summary(obj: Dict[str, Any]) -> Dict[str, Any]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    owners = [o.get("kind") for o in meta.get("ownerReferences") or [] if o.get("controller")]
    containers = status.get("containerStatuses") or []
    return {"kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid"), "nodeName": spec.get("nodeName"),
            "app": (meta.get("labels") or {}).get("app"),
            "owner": owners[0] if owners else None, "phase": status.get("phase"),
            "ready": is_ready(obj), "deleting": bool(meta.get("deletionTimestamp")),
            "containerIDs": [c["containerID"] for c in containers if c.get("containerID")],
            "runningIDs": [c["containerID"] for c in containers
                           if c.get("containerID") and (c.get("state") or {}).get("running")],
            "running": [bool((c.get("state") or {}).get("running")) for c in containers]}


def pool_summary(obj: Dict[str, Any]) -> Dict[str, Any]:
    status = obj.get("status") or {}
    counts = ("machineCount", "readyMachineCount", "updatedMachineCount", "unavailableMachineCount",
              "degradedMachineCount")
    return dict({k: status.get(k) for k in counts}, kind="MachineConfigPool", name=(obj.get("metadata") or {}).get("name"),
                updating=next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Updating"),
                              None))


class Recorder:
    """Every watch event of the Node, of the workload's pods and of ``pool``: {"at": host
    time.time() on arrival, "type": ADDED/MODIFIED/DELETED, "rv": resourceVersion (int), ...the
    summary}."""

    def __init__(self, kc: KubeCluster, node: str, pool: str):
        self.kc, self.events, self.lock, self.halt = kc, [], threading.Lock(), threading.Event()
        self.threads = [
            threading.Thread(target=self._watch, daemon=True, name="watch-node",
                             args=("/api/v1/nodes", {"fieldSelector": f"metadata.name={node}"}, node_summary)),
            threading.Thread(target=self._watch, daemon=True, name="watch-pods",
                             args=(f"/api/v1/namespaces/{WORKLOAD}/pods", {}, pod_summary)),
            threading.Thread(target=self._watch, daemon=True, name="watch-pool",
                             args=("/apis/machineconfiguration.openshift.io/v1/machineconfigpools",
                                   {"fieldSelector": f"metadata.name={pool}"}, pool_summary))]
        self.errors: List[str] = []

    def start(self) -> "Recorder":
        for t in self.threads:
            t.start()
        return self

    def _watch(self, path: str, params: Dict[str, str], summary: Callable) -> None:
        s, rv = self.kc.session(), None
        while not self.halt.is_set():
            try:
                if rv is None:  # list first: the watch then starts at the list's revision, missing nothing
                    r = s.get(self.kc.url + path, params=params, timeout=10)
                    r.raise_for_status()
                    rv = r.json()["metadata"]["resourceVersion"]
                    for obj in r.json()["items"]:
                        self._add("LISTED", obj, summary)
                # The API server ends the watch after timeoutSeconds: a stop is seen within 5 s.
                with s.get(self.kc.url + path, params=dict(params, watch="1", resourceVersion=rv, timeoutSeconds="5"),
                           stream=True, timeout=(10, 30)) as r:
                    r.raise_for_status()
                    for line in r.iter_lines():
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # 410 Gone: list again
                            rv = None
                            break
                        rv = event["object"]["metadata"]["resourceVersion"]
                        self._add(event["type"], event["object"], summary)
            except (requests.RequestException, ValueError, KeyError) as exc:
                self.errors = (self.errors + [f"{path}: {exc!r}"])[-5:]
                self.halt.wait(0.5)

    def _add(self, kind: str, obj: Dict[str, Any], summary: Callable) -> None:
        item = dict(summary(obj), at=time.time(), type=kind, rv=int(obj["metadata"]["resourceVersion"]))
        with self.lock:
            self.events.append(item)

    def snapshot(self) -> List[Dict[str, Any]]:
        with self.lock:
            return sorted(self.events, key=lambda e: e["rv"])

    def stop(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(40)


# (substrings a line must all hold, mark). "shutdown": systemd stopping multi-user.target, shown on
# the console because the kernel command line has systemd.show_status=1: the first lines of a
# shutdown (a reboot or the power-off), seconds before the kernel's reset line.
MARKS = [(("Linux version",), "kernel-start"), (("Stopped target", "multi-user.target"), "shutdown"),
         (("reboot: Restarting system",), "reset"), (("reboot: Power down",), "power-off")]


class SerialMarks(threading.Thread):
    """The guest's serial log read as QEMU writes it; each line matching one of ``MARKS`` kept as
    {"at": host time.time() when read (at most 0.1 s late), "mark": ..., "line": ...}."""

    def __init__(self, path: str):
        super().__init__(daemon=True, name="serial-marks")
        self.path, self.marks, self.halt, self._pos, self._partial = path, [], threading.Event(), 0, b""

    def run(self) -> None:
        while not self.halt.is_set():
            self.read()
            self.halt.wait(0.1)
        self.read()

    def read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return
        self._pos += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        at = time.time()
        for raw in lines:
            line = raw.decode("utf-8", "replace").strip()
            for needles, mark in MARKS:
                if all(n in line for n in needles):
                    self.marks.append({"at": at, "mark": mark, "line": line[:200]})

    def seen_after(self, mark: str) -> Callable[[], bool]:
        """Whether the guest's serial log showed ``mark`` (one of MARKS) since this call."""
        def count() -> int:
            return sum(1 for m in list(self.marks) if m["mark"] == mark)

        seen = count()
        return lambda: count() > seen

    def going_down_after(self) -> Callable[[], bool]:
        """Whether the guest began to shut down since this call (its next shutdown line)."""
        return self.seen_after("shutdown")

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(10)

