"""The VM scenario's Kubernetes side: a real control plane on the host's loopback, the guest's
Node object and a workload pod on it, and what the API server itself recorded about them.

- ``ControlPlane``: tests/helpers/kube_cluster.py's KubeCluster (etcd + kube-apiserver 1.20.2 +
  kube-controller-manager + OpenShift's CRDs); the scenario's state objects applied with kubectl;
  node-config-server's user bound to what deploy/rbac.yaml defines, nothing more. Only
  node-config-server talks to it; the guest talks to node-config-server alone (10.0.2.2).
- ``Kubelet``: no kubelet or scheduler runs here, so this thread plays both for the guest's node
  (the stand-in kubelet inside the guest cannot reach the API): it registers the Node as a
  kubelet does (only the worker role label), heartbeats its Ready condition (else the node
  lifecycle controller taints it and evicts its pods after 5 minutes), binds the ReplicaSet's
  pods to it while it is schedulable, marks them Running/Ready, and finishes a graceful deletion
  as a kubelet does once the containers have stopped: a DELETE with gracePeriodSeconds 0, 1 s
  after it first saw the pod's deletionTimestamp (so a drain sees its pod terminating first).
- ``Recorder``: watches the Node and the workload's pods and keeps every event with the host time
  it arrived and its resourceVersion (one etcd revision counter orders Node and Pod writes).
- ``SerialMarks``: the guest's serial console as QEMU writes it, read as it grows, with the
  kernel's boot and reset lines and systemd's first shutdown line stamped in host time (see
  test_vm_boot.py for why these).
"""

import datetime
import json
import os
import threading
import time
from typing import Any, Callable, Dict, List

import requests
import yaml

from tests.helpers.kube_cluster import REPO, KubeCluster
from tests.helpers.wait import wait_for

WORKLOAD = "vm-workload"  # the namespace of the pod the drain evicts
USER = "node-config-server-vm"  # the server's least-privilege user
ROLE_PREFIX = "node-role.kubernetes.io/"
STOP_SECONDS = 1.0  # how long the test's kubelet takes to stop a deleted pod's containers


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rbac_bindings(docs: List[Dict[str, Any]], user: str) -> List[List[str]]:
    """kubectl arguments binding ``user`` to each ClusterRole and Role that ``docs`` (deploy/rbac.yaml)
    define: the file's own ClusterRoleBinding names its service account, not this test's user."""
    out = []
    for doc in docs:
        kind, meta = (doc or {}).get("kind"), (doc or {}).get("metadata") or {}
        if kind == "ClusterRole":
            out.append(["create", "clusterrolebinding", f"{user}-{meta['name']}",
                        f"--clusterrole={meta['name']}", f"--user={user}"])
        elif kind == "Role":
            out.append(["create", "rolebinding", f"{user}-{meta['name']}", "-n", meta["namespace"],
                        f"--role={meta['name']}", f"--user={user}"])
    return out


class ControlPlane:
    def __init__(self, workdir: str):
        self.kc = KubeCluster(os.path.join(workdir, "kube"))
        self.kubeconfig = ""
        self.serve_args: List[str] = []

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
            namespace = [a[a.index("-n") + 1] for a in bindings if "-n" in a][0]
            self.serve_args = ["--backend", "kubernetes", "--kubeconfig", self.kubeconfig, "--namespace", namespace]
            kc.create_namespace(WORKLOAD)
        except BaseException:
            kc.stop()
            raise
        return self

    def apply(self, text: str) -> None:
        self.kc.kubectl("apply", "-f", "-", input=text)

    def stop(self) -> None:
        self.kc.stop()


def replicaset(name: str) -> Dict[str, Any]:
    labels = {"app": name}
    spec = {"automountServiceAccountToken": False, "containers": [{"name": "c", "image": "registry.vm.test/app:1"}]}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": WORKLOAD},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def is_ready(pod: Dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions", []))


class Kubelet(threading.Thread):
    """Plays the kubelet and the scheduler for ``node`` (see the module docstring)."""

    def __init__(self, kc: KubeCluster, node: str):
        super().__init__(daemon=True, name=f"kubelet-{node}")
        self.kc, self.node = kc, node
        self.halt, self.s, self._beat = threading.Event(), kc.session(), 0.0
        self.errors: List[str] = []  # the last few failed steps, for a failure's message
        self._terminating: Dict[str, float] = {}  # pod UID -> when its deletionTimestamp was first seen

    def register(self) -> Dict[str, Any]:
        """The Node as a kubelet registers it: only the worker role label (the custom pool's label is
        the server's to add, MCO-650), then the ReplicaSet whose pod runs on it."""
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node, "labels": {
            "kubernetes.io/hostname": self.node, ROLE_PREFIX + "worker": ""}}}
        r = self.call("POST", "/api/v1/nodes", body)
        if r.status_code != 201:
            raise AssertionError(f"registering Node {self.node}: {r.status_code} {r.text}")
        self.heartbeat()
        r = self.call("POST", f"/apis/apps/v1/namespaces/{WORKLOAD}/replicasets", replicaset("app"))
        if r.status_code != 201:
            raise AssertionError(f"creating ReplicaSet {WORKLOAD}/app: {r.status_code} {r.text}")
        return r.json()

    def call(self, method: str, path: str, body: Any = None, merge: bool = False) -> requests.Response:
        headers = {"Content-Type": "application/merge-patch+json"} if merge else {}
        return self.s.request(method, self.kc.url + path, json=body, headers=headers, timeout=10)

    def heartbeat(self) -> None:
        cond = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "the VM test's kubelet",
                "lastHeartbeatTime": now(), "lastTransitionTime": now()}
        self.call("PATCH", f"/api/v1/nodes/{self.node}/status", {"status": {"conditions": [cond]}}, merge=True)
        self._beat = time.monotonic()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.step()
            except (requests.RequestException, KeyError, ValueError) as exc:
                self.errors = (self.errors + [repr(exc)])[-5:]
            self.halt.wait(0.2)

    def step(self) -> None:
        if time.monotonic() - self._beat > 3:
            self.heartbeat()
        cordoned = self.call("GET", f"/api/v1/nodes/{self.node}").json()["spec"].get("unschedulable")
        for pod in self.call("GET", f"/api/v1/namespaces/{WORKLOAD}/pods").json()["items"]:
            meta = pod["metadata"]
            base = f"/api/v1/namespaces/{WORKLOAD}/pods/{meta['name']}"
            if meta.get("deletionTimestamp"):
                # Stopping the containers takes a kubelet a moment; then it removes the pod.
                seen = self._terminating.setdefault(meta["uid"], time.monotonic())
                if time.monotonic() - seen >= STOP_SECONDS:
                    self.call("DELETE", base, {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
            elif not pod["spec"].get("nodeName"):
                if not cordoned:  # the scheduler: the only node, unless it is cordoned (then Pending)
                    self.call("POST", base + "/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {
                        "name": meta["name"]}, "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}})
            elif not is_ready(pod):
                self.call("PATCH", base + "/status", {"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]}}, merge=True)

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(15)


def node_summary(obj: Dict[str, Any]) -> Dict[str, Any]:
    meta, ann = obj.get("metadata") or {}, (obj.get("metadata") or {}).get("annotations") or {}
    mco = "machineconfiguration.openshift.io/"
    return {"kind": "Node", "name": meta.get("name"), "unschedulable": bool((obj.get("spec") or {}).get("unschedulable")),
            "roles": sorted(k[len(ROLE_PREFIX):] for k in (meta.get("labels") or {}) if k.startswith(ROLE_PREFIX)),
            "state": ann.get(mco + "state"), "currentConfig": ann.get(mco + "currentConfig"),
            "desiredConfig": ann.get(mco + "desiredConfig"), "reason": ann.get(mco + "reason")}


def pod_summary(obj: Dict[str, Any]) -> Dict[str, Any]:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    owners = [o.get("kind") for o in meta.get("ownerReferences") or [] if o.get("controller")]
    return {"kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid"), "nodeName": spec.get("nodeName"),
            "owner": owners[0] if owners else None, "phase": (obj.get("status") or {}).get("phase"),
            "ready": is_ready(obj), "deleting": bool(meta.get("deletionTimestamp"))}


class Recorder:
    """Every watch event of the Node and of the workload's pods: {"at": host time.time() on arrival,
    "type": ADDED/MODIFIED/DELETED, "rv": resourceVersion (int), ...the summary}."""

    def __init__(self, kc: KubeCluster, node: str):
        self.kc, self.events, self.lock, self.halt = kc, [], threading.Lock(), threading.Event()
        self.threads = [
            threading.Thread(target=self._watch, daemon=True, name="watch-node",
                             args=("/api/v1/nodes", {"fieldSelector": f"metadata.name={node}"}, node_summary)),
            threading.Thread(target=self._watch, daemon=True, name="watch-pods",
                             args=(f"/api/v1/namespaces/{WORKLOAD}/pods", {}, pod_summary))]
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

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(10)

