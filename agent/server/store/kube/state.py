"""The serving ``State`` from the Kubernetes API (``serve --backend kubernetes``): the same
``current()`` as the state directory's watcher, built from watch caches (kube.watch.Reflector)
of MachineConfigs, MachineConfigPools, MachineOSConfigs/Builds and the MachineConfiguration
named ``cluster``.

Each object is admitted by the state directory's rule (statedir.admit: the same checks as
``node-agent validate``); an invalid one is left out and listed in ``problems``, and the service
then holds every pool's target on its last good rendering (service._step_pool) and reports the
pool RenderDegraded, as the MCO's render controller does. Rendered configs we wrote back
(MachineConfigs owned by a pool) are outputs, never inputs.

While the API server is away the caches keep serving the last objects seen; ``store_error``
says so (``/healthz`` and ``status`` show it).
"""

import hashlib
import json
import logging
import threading
import time
from typing import Any, Dict, List, Optional

from agent.core.objectchecks import check_cluster
from agent.server.store.kube.client import (
    MACHINE_CONFIG_POOLS,
    MACHINE_CONFIGS,
    MACHINE_CONFIGURATIONS,
    MACHINE_OS_BUILDS,
    MACHINE_OS_CONFIGS,
    KubeClient,
)
from agent.server.store.kube.watch import Reflector, wait_all_synced
from agent.server.store.stateformat import State, admit, paused_changes

log = logging.getLogger(__name__)

SOURCES = {
    "machineconfigpools": MACHINE_CONFIG_POOLS,
    "machineconfigs": MACHINE_CONFIGS,
    "machineosconfigs": MACHINE_OS_CONFIGS,
    "machineosbuilds": MACHINE_OS_BUILDS,
}
CLUSTER_OBJECT = "cluster"  # the MachineConfiguration the MCO reads (operator.openshift.io/v1)
SERVER_FIELDS = ("resourceVersion", "uid", "generation", "managedFields", "selfLink")


def is_rendered(obj: Dict[str, Any]) -> bool:
    """A rendered config (ours or the MCO's): a MachineConfig owned by a pool."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(o, dict) and o.get("kind") == "MachineConfigPool" for o in owners)


def as_document(obj: Dict[str, Any]) -> Dict[str, Any]:
    """The object as an admin wrote it: the server's bookkeeping fields out of its metadata."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_FIELDS}
    return dict(obj, metadata=meta)


def pool_input(obj: Dict[str, Any]) -> Dict[str, Any]:
    """A pool as an input: without its outputs, ``status`` and ``spec.configuration`` (what the
    render controller writes: kube_pools.py), so that writing them is no new state."""
    out = {k: v for k, v in obj.items() if k != "status"}
    if isinstance(obj.get("spec"), dict) and "configuration" in obj["spec"]:
        out["spec"] = {k: v for k, v in obj["spec"].items() if k != "configuration"}
    return out


def input_version(sub: str, obj: Dict[str, Any]) -> str:
    """What names an object's version as an input. A pool's resourceVersion also moves with every
    status write (ours, once a second while nodes report) and its generation with every
    ``spec.configuration`` we write (each new target), which would make each one a new state in
    every replica: for pools, a hash of the spec the server reads and of its labels and
    annotations instead."""
    meta = obj.get("metadata") or {}
    if sub != "machineconfigpools":
        return str(meta.get("resourceVersion", ""))
    read = json.dumps([pool_input(obj).get("spec"), meta.get("labels") or {}, meta.get("annotations") or {}],
                      sort_keys=True, default=str)
    return f"p:{hashlib.sha256(read.encode()).hexdigest()[:32]}"


def build_state(objects: Dict[str, Dict[str, Dict[str, Any]]], cluster: Optional[Dict[str, Any]]) -> State:
    """A State from the caches' objects (pure). ``signature`` names every object's version, so
    any change of an input is a new state and nothing else is."""
    state = State(loaded_at=time.time(), attributable=True)  # each object whole: a refused one fails its pools only
    h = hashlib.sha256()
    for sub in SOURCES:
        for name in sorted(objects.get(sub) or {}):
            obj = objects[sub][name]
            if sub == "machineconfigs" and is_rendered(obj):
                continue
            h.update(f"{sub}/{name}@{input_version(sub, obj)}\n".encode())
            admit(state, sub, as_document(pool_input(obj) if sub == "machineconfigpools" else obj), f"{sub}/{name} (API)")
    if cluster is not None:
        h.update(f"cluster@{(cluster.get('metadata') or {}).get('resourceVersion', '')}\n".encode())
        where = f"machineconfigurations/{CLUSTER_OBJECT} (API)"
        found = check_cluster(cluster, where)
        if found:
            state.problems.extend(found)
        else:
            state.cluster = as_document(cluster)
    state.signature = "kube:" + h.hexdigest()[:32]
    return state


class KubeStateSource:
    """``current()`` over watch caches; built again only after a cache changed."""

    def __init__(self, client: KubeClient, sync_timeout: float = 30.0):
        self.client = client
        self._changes = 0
        self._built = -1
        self._lock = threading.Lock()
        self._state = State(stale=False)
        self.reflectors: Dict[str, Reflector] = {sub: Reflector(client, res, self._changed)
                                                 for sub, res in SOURCES.items()}
        self.cluster_reflector = Reflector(client, MACHINE_CONFIGURATIONS, self._changed)
        for r in self._all():
            r.start()
        if not wait_all_synced(self._all(), sync_timeout):
            log.error("the API server did not list every kind within %.0fs: %s", sync_timeout, self.store_error)

    def _all(self) -> List[Reflector]:
        return [*self.reflectors.values(), self.cluster_reflector]

    def _changed(self) -> None:
        with self._lock:
            self._changes += 1

    @property
    def store_error(self) -> str:
        errors = [r.error for r in self._all() if r.error]
        missing = [r.resource.plural for r in self._all() if not r.synced.is_set()]
        if missing and not errors:
            errors.append(f"not listed yet: {', '.join(missing)}")
        return f"Kubernetes API: {errors[0]}" if errors else ""

    def current(self, check_now: bool = False, settled: Optional[str] = None) -> State:
        """``check_now``/``settled`` have no use here: a watch event carries a whole object,
        never a half-written file."""
        with self._lock:
            if self._built == self._changes:
                return self._state
            seen = self._changes
        objects = {sub: r.snapshot() for sub, r in self.reflectors.items()}
        cluster = self.cluster_reflector.snapshot().get(CLUSTER_OBJECT)
        state = build_state(objects, cluster)
        for p in state.problems:
            log.error("Kubernetes object refused: %s", p)
        for found in state.warnings.values():
            for p in found:
                log.warning("Kubernetes object admitted with a warning: %s", p)
        with self._lock:
            if seen >= self._built:
                for line in paused_changes(self._state.pools, state.pools):
                    log.info("%s", line)
                self._state, self._built = state, seen
            return self._state

    def close(self) -> None:
        for r in self._all():
            r.stop()
        self.client.close()
