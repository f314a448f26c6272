"""The server's YAML state directory: load, validate, and notice changes.

Layout (ARCHITECTURE, "Server state"): ``machineconfigpools/*.yaml``, ``machineconfigs/*.yaml``,
``machineconfiguration.yaml``, ``machineosconfigs/*.yaml``, ``machineosbuilds/*.yaml``.

A bad object never takes the server down: problems are reported with file and field, and the
last good state keeps serving (on the very first load, the valid objects are used).
Changes are noticed by polling names, mtimes and sizes (no inotify needed).
"""

import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import yaml

from agent.errors import Problem
from agent.server.store.objects import (  # noqa: F401 - DNS1123_* and the check_* are imported from here too
    _CHECKS,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    KERNEL_TYPES,
    check_api_version,
    check_cluster,
    check_machine_config,
    check_os_config,
    check_pool,
)
from agent.server.store.statefiles import StateFileError, load_yaml_docs, read_bounded, read_docs

log = logging.getLogger(__name__)

KINDS = {
    "machineconfigpools": "MachineConfigPool",
    "machineconfigs": "MachineConfig",
    "machineosconfigs": "MachineOSConfig",
    "machineosbuilds": "MachineOSBuild",
}
CLUSTER_FILE = "machineconfiguration.yaml"
BOOTSTRAP_DIR = "bootstrap"  # files served to new nodes as upstream does (agent.server.cluster.content)
BOOTSTRAP_FILES = ("kubeconfig", "kubelet-ca.crt")
MAX_BOOTSTRAP_BYTES = 1 << 20


@dataclass
class State:
    pools: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    machine_configs: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    cluster: Dict[str, Any] = field(default_factory=dict)  # machineconfiguration.yaml
    os_configs: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    os_builds: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    signature: str = ""  # hash of (name, mtime, size) of every file read
    problems: List[Problem] = field(default_factory=list)  # of the newest load attempt
    loaded_at: float = 0.0
    stale: bool = False  # True when the newest files were invalid and an older state serves
    bootstrap: Dict[str, bytes] = field(default_factory=dict)  # bootstrap/kubeconfig, bootstrap/kubelet-ca.crt
    # Validator warnings of the admitted objects ("MachineConfig/50-infra" -> its warnings: an unused
    # key, whatever node-agent validate warns of); the server shows them (docs/machineconfigs.md).
    warnings: Dict[str, List[Problem]] = field(default_factory=dict)
    # (folder, the object as written, its problems) of each object the checks refused: which pools
    # each keeps from rendering (agent/server/rollout/renderstatus.py); the problems of no such
    # object (a file that is not one, the cluster object, a stale directory's) fail every pool
    rejected: List[Tuple[str, Any, List[Problem]]] = field(default_factory=list)
    # Whether a refused object fails only the pools it affects: each API object is written whole
    # (the Kubernetes backend); a state directory may be mid-write (a file cut short, its labels
    # gone), so any problem there holds every pool (docs/security.md, "State directory")
    attributable: bool = False

    def refused_pools(self) -> Dict[str, List[Problem]]:
        """Each invalid pool kept for its Nodes and status (``admit``) -> its problems."""
        return {pool_name(doc): found for sub, doc, found in self.rejected
                if sub == "machineconfigpools" and pool_name(doc) in self.pools}

    def unattributed(self) -> List[Problem]:
        """The problems of no refused object (``rejected``): all of them unless ``attributable``."""
        if not self.attributable:
            return list(self.problems)
        known = {id(p) for _, _, found in self.rejected for p in found}
        return [p for p in self.problems if id(p) not in known]

    def bucket(self, sub: str) -> Dict[str, Dict[str, Any]]:
        """The objects of one ``KINDS`` folder by name."""
        return {"machineconfigpools": self.pools, "machineconfigs": self.machine_configs,
                "machineosconfigs": self.os_configs, "machineosbuilds": self.os_builds}[sub]

    @property
    def cluster_spec(self) -> Dict[str, Any]:
        return (self.cluster or {}).get("spec") or {}


def no_pools_warning(state: State, where: str) -> str:
    """A warning (log and /healthz) when ``state`` holds no MachineConfigPool: an empty or wrong
    state directory, or a cluster without pools, serves every node a 404. Not a problem: nothing
    in it is invalid, and pools may come later; "" when there is a pool."""
    if state.pools:
        return ""
    return (f"{where} has no MachineConfigPool: no node can join a pool (every /config/<pool> answers 404); "
            f"put the pools and their MachineConfigs there (examples/state shows the layout: docs/api.md, "
            f"\"State directory\")")


def paused_changes(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    """The log line of each pool of ``new`` (pools by name) paused or unpaused since ``old``
    (``spec.paused`` turned true or false); a pool new to the state says nothing."""
    out = []
    for name in sorted(set(old) & set(new)):
        was, now = (bool(((p.get(name) or {}).get("spec") or {}).get("paused")) for p in (old, new))
        if was != now:
            out.append(f"pool {name} paused (spec.paused: true): none of its nodes is updated until it is unpaused"
                       if now else f"pool {name} unpaused (spec.paused: false): its nodes are updated again, in turn")
    return out


def pool_name(doc: Any) -> str:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


KEPT_POOL_PROBLEMS = ("$.spec.maxUnavailable", "$.metadata.annotations[")


def kept_pool(doc: Dict[str, Any], found: List[Problem], where: str) -> Optional[Dict[str, Any]]:
    """An invalid MachineConfigPool kept, its refused fields left out (a ``maxUnavailable`` the
    API admits and upstream cannot read, "3" or -1; a rollout policy or first boot annotation), so
    that its Nodes stay its own and its status is written: only that pool's sync fails, as
    upstream's node controller fails only that pool's (``syncStatusOnly``), never moves its Nodes
    to worker. None when anything else is wrong with it (its name, selectors, spec)."""
    if any(not p.path.startswith(KEPT_POOL_PROBLEMS) for p in found):
        return None
    meta, spec = doc.get("metadata"), doc.get("spec")
    out = dict(doc, metadata=dict(meta or {}), spec=dict(spec or {}))
    annotations = dict(out["metadata"].get("annotations") or {})
    for p in found:
        if p.path == "$.spec.maxUnavailable":
            out["spec"].pop("maxUnavailable", None)
        for key in [k for k in annotations if p.path in (f"$.metadata.annotations['{k}']",
                                                         f"$.metadata.annotations[{k!r}]")]:
            del annotations[key]
    if annotations or "annotations" in out["metadata"]:
        out["metadata"]["annotations"] = annotations
    return out if not [p for p in _CHECKS["machineconfigpools"](out, where) if p.is_error] else None


def _yaml_files(directory: str) -> List[str]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.endswith((".yaml", ".yml", ".json")) and not n.startswith("."))


def signature(state_dir: str) -> str:
    """Cheap fingerprint of the directory: changes whenever a file is added, removed or rewritten."""
    return signature_and_newest(state_dir)[0]


def signature_and_newest(state_dir: str) -> Tuple[str, float]:
    """The fingerprint and the newest mtime (files and their directories: a removal counts)."""
    h = hashlib.sha256()
    newest = [0.0]
    for sub in sorted(KINDS):
        d = os.path.join(state_dir, sub)
        _mtime_of(d, newest)
        for name in _yaml_files(d):
            _sig_one(h, os.path.join(d, name), newest)
    _sig_one(h, os.path.join(state_dir, CLUSTER_FILE), newest)
    for name in BOOTSTRAP_FILES:
        _sig_one(h, os.path.join(state_dir, BOOTSTRAP_DIR, name), newest)
    return h.hexdigest(), newest[0]


def _mtime_of(path: str, newest: List[float]) -> None:
    try:
        newest[0] = max(newest[0], os.stat(path).st_mtime)
    except OSError:
        pass


def _sig_one(h: Any, path: str, newest: List[float]) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        h.update(f"{path}:-\n".encode())
        return
    newest[0] = max(newest[0], st.st_mtime)
    h.update(f"{path}:{st.st_mtime_ns}:{st.st_size}:{st.st_ino}\n".encode())


def _spec2_converted(doc: Dict[str, Any], where: str) -> Tuple[Dict[str, Any], List[Problem]]:
    """Spec 2.2 MachineConfigs are converted to 3.2 first, as the MCO does (helpers.go:612-668)."""
    from agent.core.loadconfig import convert_spec2_machine_config

    doc, refused = convert_spec2_machine_config(doc, where)
    found = _CHECKS["machineconfigs"](doc, where)
    return doc, refused + [p for p in found if not (refused and p.path.startswith("$.spec.config"))]


def admit(state: State, sub: str, doc: Dict[str, Any], where: str) -> Optional[str]:
    """Check one object of kind ``KINDS[sub]`` as the API admits it and add it to ``state``
    (its name), or record its problems and leave it out (None). The state directory and the
    Kubernetes backend (agent.server.store.kube.state) admit objects with this one rule."""
    kind = KINDS[sub]
    if doc.get("kind") not in (None, kind):
        state.problems.append(Problem("$.kind", f"expected {kind} in {sub}/", "kind", value=doc.get("kind"),
                                      source=where))
        return None
    found = check_api_version(doc, kind, where)
    if found:
        pass
    elif sub == "machineconfigs":
        doc, found = _spec2_converted(doc, where)
    else:
        found = _CHECKS[sub](doc, where)
    errors = [p for p in found if p.is_error]
    found = [p for p in found if not p.is_error]  # warnings: the object is admitted
    if errors:
        state.problems.extend(errors)
        state.rejected.append((sub, doc, errors))
        kept = kept_pool(doc, errors, where) if sub == "machineconfigpools" else None
        if kept is None:
            return None
        doc = kept
    bucket = state.bucket(sub)
    name = doc["metadata"]["name"]
    if name in bucket:
        state.problems.append(Problem("$.metadata.name", f"duplicate {kind} name", "duplicate", value=name,
                                      source=where))
        return None
    bucket[name] = doc
    if found:  # only warnings: the object serves, and the server says what it warns of
        state.warnings[f"{kind}/{name}"] = found
    return name


def load_state(state_dir: str) -> State:
    """Read and validate everything. Invalid objects are left out and listed in ``problems``."""
    state = State(loaded_at=time.time())
    sig = signature(state_dir)
    for sub in KINDS:
        d = os.path.join(state_dir, sub)
        for fname in _yaml_files(d):
            src = os.path.join(sub, fname)
            for where, doc in read_docs(os.path.join(d, fname), src, state_dir, state.problems):
                admit(state, sub, doc, where)
    cpath = os.path.join(state_dir, CLUSTER_FILE)
    if os.path.exists(cpath):
        docs = read_docs(cpath, CLUSTER_FILE, state_dir, state.problems)
        for where, doc in docs[:1]:
            found = check_cluster(doc, where)
            if found:
                state.problems.extend(found)
            else:
                state.cluster = doc
    state.bootstrap = load_bootstrap(state_dir, state.problems)
    state.signature = sig
    return state


def load_bootstrap(state_dir: str, problems: List[Problem]) -> Dict[str, bytes]:
    """``bootstrap/kubeconfig`` and ``bootstrap/kubelet-ca.crt`` when present and sane (a
    kubeconfig with a cluster server, a PEM certificate), at most 1 MiB each."""
    out: Dict[str, bytes] = {}
    for name in BOOTSTRAP_FILES:
        path = os.path.join(state_dir, BOOTSTRAP_DIR, name)
        src = f"{BOOTSTRAP_DIR}/{name}"
        try:  # a regular file inside the state directory, never a FIFO (agent.server.store.statefiles)
            data = read_bounded(path, state_dir, MAX_BOOTSTRAP_BYTES)
        except FileNotFoundError:
            continue
        except StateFileError as exc:
            problems.append(Problem("$", str(exc), exc.rule, source=src))
            continue
        why = _bootstrap_problem(name, data)
        if why:
            problems.append(Problem("$", why, "bootstrap", source=src))
        else:
            out[name] = data
    return out


def _bootstrap_problem(name: str, data: bytes) -> str:
    if len(data) > MAX_BOOTSTRAP_BYTES:
        return f"too large (at most {MAX_BOOTSTRAP_BYTES} bytes)"
    if name.endswith(".crt"):
        return "" if b"-----BEGIN CERTIFICATE-----" in data else "not a PEM certificate bundle"
    try:
        docs = load_yaml_docs(data)
        doc = docs[0] if docs else None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        return f"not a valid kubeconfig: {exc}"
    clusters = doc.get("clusters") if isinstance(doc, dict) else None
    if not isinstance(clusters, list) or not clusters or not all(
            isinstance(c, dict) and (c.get("cluster") or {}).get("server") for c in clusters):
        return "not a kubeconfig: clusters[].cluster.server is required"
    return ""
