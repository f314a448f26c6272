"""KubeCluster.reset's deletes through the API server's REST API, on one HTTPS connection (issue
54): what ten `kubectl delete` runs did, each a process of its own that reads the API's discovery
(and, for `delete`, waits for what it deleted), for every module that shares its worker's control
plane. The semantics are kubectl's: a collection is listed and deleted per namespace (pods with
grace period 0, as ``--force --grace-period=0``; everything else in the background, as kubectl
propagates), and, as ``kubectl delete`` waits by default, the call returns only once every object
it deleted is gone (finalizers run: a CRD's objects, a Node's), but for Events (the deletes make
new ones) and the namespaces it leaves terminating (``--wait=false``: create_namespace waits one
of the same name out).
"""

import time
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import requests

# Where each plural the reset deletes lives (1.20's group versions); the CRDs' from their objects.
BUILT_IN = {
    "pods": "/api/v1", "events": "/api/v1", "configmaps": "/api/v1", "secrets": "/api/v1", "nodes": "/api/v1",
    "namespaces": "/api/v1",
    "deployments": "/apis/apps/v1", "replicasets": "/apis/apps/v1", "daemonsets": "/apis/apps/v1",
    "statefulsets": "/apis/apps/v1", "jobs": "/apis/batch/v1", "cronjobs": "/apis/batch/v1beta1",
    "leases": "/apis/coordination.k8s.io/v1", "poddisruptionbudgets": "/apis/policy/v1beta1",
    "certificatesigningrequests": "/apis/certificates.k8s.io/v1",
    "customresourcedefinitions": "/apis/apiextensions.k8s.io/v1",
}
WORKLOADS = ("deployments", "replicasets", "daemonsets", "statefulsets", "jobs", "cronjobs")
SERVER_NAMESPACE_KINDS = ("configmaps", "leases", "secrets", "poddisruptionbudgets")
FORCE = {"gracePeriodSeconds": 0}
Gone = Tuple[str, str, Optional[str], str]  # (plural, name, namespace, uid): waited for until absent


class Api:
    """The few calls reset needs, failing loudly on an answer it did not expect."""

    def __init__(self, session: requests.Session, url: str):
        self.s, self.url = session, url
        self.prefix = dict(BUILT_IN)
        self.namespaced = {"nodes": False, "namespaces": False, "certificatesigningrequests": False,
                           "customresourcedefinitions": False}
        self.crds = self.items("customresourcedefinitions")  # where the CRDs' kinds live
        for crd in self.crds:
            spec = crd["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("storage"))
            self.prefix[spec["names"]["plural"]] = f"/apis/{spec['group']}/{version}"
            self.namespaced[spec["names"]["plural"]] = spec["scope"] == "Namespaced"

    def _path(self, plural: str, namespace: Optional[str] = None, name: Optional[str] = None) -> str:
        ns = f"/namespaces/{namespace}" if namespace else ""
        return f"{self.prefix[plural]}{ns}/{plural}" + (f"/{name}" if name else "")

    def _check(self, r: requests.Response, what: str, ok=(200, 201, 202)) -> requests.Response:
        if r.status_code not in ok:
            raise RuntimeError(f"{what}: HTTP {r.status_code} from the API server: {r.text[:300]}")
        return r

    def items(self, plural: str, namespace: Optional[str] = None) -> List[dict]:
        path = self._path(plural, namespace)
        return self._check(self.s.get(self.url + path, timeout=30), f"GET {path}").json()["items"]

    def delete_all(self, plural: str, namespace: Optional[str] = None, options: Optional[dict] = None) -> List[Gone]:
        """Every object of ``plural`` (in ``namespace``, else in all), deleted a namespace's at a time."""
        found = self.items(plural, namespace)
        namespaces = {o["metadata"].get("namespace") for o in found}
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background", **(options or {})}
        for ns in sorted(namespaces, key=str):
            path = self._path(plural, ns)
            self._check(self.s.delete(self.url + path, json=body, timeout=60), f"DELETE {path}")
        return [(plural, o["metadata"]["name"], o["metadata"].get("namespace"), o["metadata"]["uid"]) for o in found]

    def delete(self, plural: str, name: str) -> None:
        path = self._path(plural, name=name)
        self._check(self.s.delete(self.url + path, json={"propagationPolicy": "Background"}, timeout=60),
                    f"DELETE {path}", ok=(200, 202, 404))

    def still_there(self, gone: List[Gone]) -> List[str]:
        """What of ``gone`` the API still holds (the same object: its uid), as kind/namespace/name."""
        wanted: Dict[Tuple[str, Optional[str]], Set[str]] = {}
        for plural, _name, namespace, uid in gone:
            wanted.setdefault((plural, namespace if self.namespaced.get(plural, True) else None), set()).add(uid)
        left = []
        for (plural, namespace), uids in sorted(wanted.items(), key=str):
            for o in self.items(plural, namespace):
                if o["metadata"]["uid"] in uids:
                    left.append(f"{plural}/{o['metadata'].get('namespace') or ''}/{o['metadata']['name']}")
        return left


def reset(session: requests.Session, url: str, cluster_kinds: Iterable[str], keep_crds: Iterable[str],
          system_namespaces: Sequence[str], server_namespaces: Sequence[str], timeout: float = 120) -> None:
    """Delete what KubeCluster.reset's docstring lists and wait for it to be gone."""
    api = Api(session, url)
    gone: List[Gone] = []
    for plural in WORKLOADS:
        gone += api.delete_all(plural)
    gone += api.delete_all("pods", options=FORCE)
    api.delete_all("events")
    for ns in server_namespaces:
        for plural in SERVER_NAMESPACE_KINDS:
            gone += api.delete_all(plural, ns)
    gone += api.delete_all("leases", "kube-node-lease")
    for plural in cluster_kinds:
        gone += api.delete_all(plural)
    keep = set(keep_crds)
    for crd in api.crds:  # a CRD a test added goes with its objects (an Infrastructure)
        if crd["metadata"]["name"] not in keep:
            api.delete("customresourcedefinitions", crd["metadata"]["name"])
            gone.append(("customresourcedefinitions", crd["metadata"]["name"], None, crd["metadata"]["uid"]))
    kept = {*system_namespaces, *server_namespaces}
    for ns in api.items("namespaces"):
        if ns["metadata"]["name"] not in kept and not ns["metadata"].get("deletionTimestamp"):
            api.delete("namespaces", ns["metadata"]["name"])
    deadline = time.monotonic() + timeout
    while True:
        left = api.still_there(gone)
        if not left:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"reset: still there after {timeout:.0f} s: {', '.join(left[:10])}")
        time.sleep(0.2)
