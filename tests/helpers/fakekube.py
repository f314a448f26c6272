"""MachineConfigNodes held in memory as a kube-apiserver holds a custom resource with a status
subresource, for unit tests of the writers (tests/kube/ checks the same against the real one):

- ``create``: 409 when the name is there; uid, resourceVersion, generation 1, creationTimestamp;
  the status of a created object is dropped (the status subresource is the only way to write it);
- ``merge_patch`` (RFC 7386, None removes) of the object or of ``/status``: the object's patch
  leaves the status alone, the status patch everything else; ``metadata.resourceVersion`` in a
  patch is a precondition (409); ``generation`` grows when the spec changes; 404 when absent;
- ``json_patch`` (RFC 6902: test, add, replace, remove; 422 when a test fails), of either;
- ``delete`` with ``preconditions.uid``; ``get``.

Every stored version is kept in ``history`` as ``(old, new)`` (old None for a create), so that a
test can validate each write against the CRD, transition rules (``oldSelf``) included.
"""

import copy
import itertools
from typing import Any, Dict, List, Optional, Tuple

from agent.server.store.kube.client import KubeError

PREFIX = "/apis/machineconfiguration.openshift.io/v1/machineconfignodes"


def merge_patch(target: Dict[str, Any], patch: Dict[str, Any]) -> None:
    """RFC 7386, as the API server applies a merge patch (None removes a key; lists replace)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):  # into what is there, or into {} (a null inside removes nothing)
            if not isinstance(target.get(key), dict):
                target[key] = {}
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeKube:
    def __init__(self) -> None:
        self.objects: Dict[str, Dict[str, Any]] = {}
        self.history: List[Tuple[Optional[Dict[str, Any]], Dict[str, Any]]] = []
        self.calls: List[Tuple[str, str]] = []
        self._versions = itertools.count(100)

    def _name(self, path: str) -> Tuple[str, bool]:
        assert path.startswith(PREFIX), path
        rest = path[len(PREFIX):].strip("/")
        name, _, sub = rest.partition("/")
        return name, sub == "status"

    def _store(self, name: str, old: Optional[Dict[str, Any]], new: Dict[str, Any]) -> Dict[str, Any]:
        new["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[name] = new
        self.history.append((copy.deepcopy(old), copy.deepcopy(new)))
        return copy.deepcopy(new)

    def get(self, path: str, params: Any = None) -> Dict[str, Any]:
        name, _ = self._name(path)
        self.calls.append(("GET", name))
        if name not in self.objects:
            raise KubeError(404, "NotFound", f"{name} not found", f"GET {path}")
        return copy.deepcopy(self.objects[name])

    def create(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        name = body["metadata"]["name"]
        self.calls.append(("CREATE", name))
        if name in self.objects:
            raise KubeError(409, "AlreadyExists", f"{name} exists", f"POST {path}")
        obj = copy.deepcopy(body)
        obj.pop("status", None)
        obj["metadata"].update(uid=f"uid-mcn-{name}", generation=1, creationTimestamp="2026-11-27T04:00:00Z")
        return self._store(name, None, obj)

    def merge_patch(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        name, status = self._name(path)
        self.calls.append(("PATCH" + ("/status" if status else ""), name))
        if name not in self.objects:
            raise KubeError(404, "NotFound", f"{name} not found", f"PATCH {path}")
        old = self.objects[name]
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != old["metadata"]["resourceVersion"]:
            raise KubeError(409, "Conflict", "the object has been modified", f"PATCH {path}")
        new = copy.deepcopy(old)
        patch = copy.deepcopy(body)
        (patch.get("metadata") or {}).pop("resourceVersion", None)
        if status:
            merge_patch(new, {"status": patch.get("status")} if "status" in patch else {})
        else:
            patch.pop("status", None)
            merge_patch(new, patch)
            if new.get("spec") != old.get("spec"):
                new["metadata"]["generation"] = int(old["metadata"].get("generation") or 1) + 1
        return self._store(name, old, new)

    def json_patch(self, path: str, ops: List[Dict[str, Any]]) -> Dict[str, Any]:
        """RFC 6902's test, add, replace and remove (what the writers send); a failed ``test`` or a
        missing path is 422, as the API server answers it. Of ``/status``: only the status changes."""
        name, status = self._name(path)
        self.calls.append(("JSONPATCH" + ("/status" if status else ""), name))
        if name not in self.objects:
            raise KubeError(404, "NotFound", f"{name} not found", f"PATCH {path}")
        old = self.objects[name]
        new = copy.deepcopy(old)
        for op in ops:
            *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
            at = new
            for key in parents:
                if not isinstance(at, dict) or key not in at:
                    raise KubeError(422, "Invalid", f"{op['path']}: missing", f"PATCH {path}")
                at = at[key]
            if op["op"] == "test" and at.get(last) != op["value"]:
                raise KubeError(422, "Invalid", f"testing {op['path']} failed", f"PATCH {path}")
            if op["op"] in ("add", "replace"):
                if op["op"] == "replace" and last not in at:
                    raise KubeError(422, "Invalid", f"{op['path']}: missing", f"PATCH {path}")
                at[last] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                if last not in at:
                    raise KubeError(422, "Invalid", f"{op['path']}: missing", f"PATCH {path}")
                del at[last]
        if status:
            new = dict(copy.deepcopy(old), status=new.get("status"))
        elif new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = int(old["metadata"].get("generation") or 1) + 1
        return self._store(name, old, new)

    def delete(self, path: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        name, _ = self._name(path)
        self.calls.append(("DELETE", name))
        if name not in self.objects:
            raise KubeError(404, "NotFound", f"{name} not found", f"DELETE {path}")
        uid = ((body or {}).get("preconditions") or {}).get("uid")
        if uid is not None and uid != self.objects[name]["metadata"]["uid"]:
            raise KubeError(409, "Conflict", "uid precondition failed", f"DELETE {path}")
        return self.objects.pop(name)


class FakeCache:
    """A Reflector's face over a FakeKube (``get``, ``snapshot``, ``synced``), each object as
    ``transform`` keeps it."""

    def __init__(self, kube: FakeKube, transform: Any = None) -> None:
        import threading

        self.kube, self.transform = kube, transform or (lambda o: o)
        self.synced = threading.Event()
        self.synced.set()

    def get(self, name: str) -> Optional[Dict[str, Any]]:
        obj = self.kube.objects.get(name)
        return self.transform(copy.deepcopy(obj)) if obj is not None else None

    def snapshot(self) -> Dict[str, Dict[str, Any]]:
        return {n: self.transform(copy.deepcopy(o)) for n, o in self.kube.objects.items()}
