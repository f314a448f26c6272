"""What the Kubernetes backend writes on a MachineConfigPool besides its counts and conditions,
as the MCO's render and node controllers write it (pure; kube_sync.py writes it):

- ``spec.configuration``: the rendered config the pool targets and the MachineConfigs it was
  rendered from (``source``: ObjectReferences), as pkg/controller/render/render_controller.go
  ``syncGeneratedMachineConfig`` writes it: a merge patch of that field alone, only when it
  differs (writing the spec moves the pool's generation, which the state's signature does not
  read: agent/server/store/kube/state.py ``input_version``);
- ``status.configuration``: the config every node of the pool runs, with its source, as
  pkg/controller/node/status.go ``calculateStatus`` copies ``spec.configuration`` into it once
  every node is updated (our pool row's ``current``);
- each rendered config as the render controller creates it (``rendered_object``), and its Event
  on the pool:
  ``RenderedConfigGenerated`` "<name> successfully generated (release version: <v>, controller
  version: <v>)", source ``machineconfigcontroller-rendercontroller``.

The node controller's Events on the pool as its target and current move ("Pool X now targeting
MachineConfig Y", "Pool X has completed update to MachineConfig Y": status.go
``syncStatusOnly``) are decided with the move itself, by the process that stored it
(rolloutctl.py); ``pool_update_events`` gives their words.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

MCO_V1 = "machineconfiguration.openshift.io/v1"
RENDER_CONTROLLER = "machineconfigcontroller-rendercontroller"  # render_controller.go's recorder
GENERATED_BY = "machineconfiguration.openshift.io/generated-by-controller-version"  # GeneratedByControllerVersion...


def source_refs(names: Sequence[str]) -> List[Dict[str, str]]:
    """``source`` as the render controller lists it: one ObjectReference per MachineConfig."""
    return [{"apiVersion": MCO_V1, "kind": "MachineConfig", "name": str(n)} for n in names]


def configuration(name: str, sources: Optional[Sequence[str]], obj: Dict[str, Any]) -> Dict[str, Any]:
    """``{"name", "source"}`` of rendered config ``name``: ``sources`` when this process rendered
    it, else what the pool object (``obj``, as the API holds it) already says of that name in its
    spec or status (a config this replica did not render: an older target, the pool's current
    one), else the name alone."""
    if not name:
        return {"name": ""}
    if sources is not None:
        return {"name": name, "source": source_refs(sources)}
    for part in ("spec", "status"):
        conf = (obj.get(part) or {}).get("configuration") or {}
        if conf.get("name") == name and isinstance(conf.get("source"), list):
            return {"name": name, "source": [dict(ref) for ref in conf["source"] if isinstance(ref, dict)]}
    return {"name": name}


def spec_patch(obj: Dict[str, Any], target: str, sources: Optional[Sequence[str]]) -> Optional[Dict[str, Any]]:
    """The merge patch that makes the pool's ``spec.configuration`` name ``target`` and its source
    (None when it already does, or when there is no target yet)."""
    if not target:
        return None
    want = configuration(target, sources, obj)
    have = (obj.get("spec") or {}).get("configuration") or {}
    if have.get("name") == target and ("source" not in want or have.get("source") == want["source"]):
        return None
    return {"spec": {"configuration": want}}


def rendered_event(name: str, controller_version: str, release_version: str = "") -> Tuple[str, str]:
    """render_controller.go ``syncGeneratedMachineConfig``'s Event as it creates ``name``. We have
    no release image: its version is "" as upstream prints a missing annotation."""
    return ("RenderedConfigGenerated", f"{name} successfully generated (release version: {release_version}, "
                                       f"controller version: {controller_version})")


def update_line(target: str, image: Optional[str]) -> str:
    """status.go ``getPoolUpdateLine``: "MachineConfig X", with " / Image Y" on a layered pool."""
    return f"MachineConfig {target}" + (f" / Image {image}" if image else "")


def pool_update_events(pool: str, before: Optional[Tuple[str, str]], after: Tuple[str, str],
                       image: Optional[str] = None) -> List[Tuple[str, str]]:
    """(reason, message) of the node controller's Events when the pool's (target, current) moves
    from ``before`` (None: a pool seen for the first time) to ``after`` (status.go
    ``syncStatusOnly``): "Updating" when spec.configuration moved, "Completed" when
    status.configuration did; both print the pool's target (getPoolUpdateLine of the new pool)."""
    target, current = after
    out = []
    if target and (before is None or before[0] != target):
        out.append(("Updating", f"Pool {pool} now targeting {update_line(target, image)}"))
    if current and (before is None or before[1] != current):
        out.append(("Completed", f"Pool {pool} has completed update to {update_line(target, image)}"))
    return out


def rendered_object(name: str, pool: str, pool_uid: str, spec: Dict[str, Any], version: str) -> Dict[str, Any]:
    """A rendered config as the MCO's render controller creates it (pure)."""
    return {"apiVersion": MCO_V1, "kind": "MachineConfig",
            "metadata": {"name": name,
                         "annotations": {GENERATED_BY: version},
                         "ownerReferences": [{"apiVersion": MCO_V1,
                                              "kind": "MachineConfigPool", "name": pool, "uid": pool_uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": spec}


STATUS_FIELDS = ("configuration", "machineCount", "readyMachineCount", "updatedMachineCount",
                 "unavailableMachineCount", "degradedMachineCount", "observedGeneration", "conditions")
CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")


def pool_status(view: Dict[str, Any], generation: Optional[int], previous: Optional[List[Dict[str, Any]]] = None,
                now: str = "") -> Dict[str, Any]:
    """The CRD's status fields of a pool view (pure); the view's other fields stay in our API
    (the API server would prune them: the CRD's schema is structural). A condition whose change
    our history does not date gets its time as the MCO's SetMachineConfigPoolCondition gives it:
    the one the API holds while the status stays the same, else ``now``."""
    status = view.get("status") or {}
    out = {k: status[k] for k in STATUS_FIELDS if k in status}
    out["configuration"] = {"name": (status.get("configuration") or {}).get("name", "")}
    out["observedGeneration"] = int(generation or 1)
    before = {c.get("type"): c for c in previous or [] if isinstance(c, dict)}
    out["conditions"] = []
    for c in status.get("conditions") or []:
        cond = {k: str(c.get(k) or "") for k in CONDITION_FIELDS if c.get(k) is not None}
        if not cond.get("lastTransitionTime"):
            old = before.get(cond.get("type")) or {}
            same = old.get("status") == cond.get("status") and old.get("lastTransitionTime")
            cond["lastTransitionTime"] = str(old["lastTransitionTime"]) if same else now
            if not cond["lastTransitionTime"]:
                del cond["lastTransitionTime"]
        out["conditions"].append(cond)
    return out
