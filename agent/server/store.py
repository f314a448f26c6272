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
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import yaml

from agent.errors import Problem
from agent.ignition.spec import SUPPORTED_VERSIONS
from agent.server.statefiles import StateFileError, load_yaml_docs, read_bounded, read_docs

log = logging.getLogger(__name__)

KINDS = {
    "machineconfigpools": "MachineConfigPool",
    "machineconfigs": "MachineConfig",
    "machineosconfigs": "MachineOSConfig",
    "machineosbuilds": "MachineOSBuild",
}
CLUSTER_FILE = "machineconfiguration.yaml"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
KERNEL_TYPES = ("", "default", "realtime", "64k-pages")
FORCE_ANNOTATION = "node-agent.io/force-rollout"
BOOTSTRAP_DIR = "bootstrap"  # files served to new nodes as upstream does (agent.server.content)
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

    @property
    def cluster_spec(self) -> Dict[str, Any]:
        return (self.cluster or {}).get("spec") or {}

    @property
    def force_rollout(self) -> bool:
        return _truthy(((self.cluster.get("metadata") or {}).get("annotations") or {}).get(FORCE_ANNOTATION)) or \
            bool(self.cluster_spec.get("forceRollout"))


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("true", "1", "yes")


def pool_forced(pool: Dict[str, Any]) -> bool:
    return _truthy(((pool.get("metadata") or {}).get("annotations") or {}).get(FORCE_ANNOTATION))


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


def _meta_name(doc: Dict[str, Any], src: str, problems: List[Problem], label: bool) -> Optional[str]:
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    if not isinstance(name, str) or not name:
        problems.append(Problem("$.metadata.name", "missing: every object needs a name", "name", source=src))
        return None
    pattern = DNS1123_LABEL if label else DNS1123_SUBDOMAIN
    if not pattern.match(name):
        what = "a DNS-1123 label (lower case letters, digits, '-', at most 63)" if label else "a DNS-1123 subdomain"
        problems.append(Problem("$.metadata.name", f"must be {what}", "name", value=name, source=src))
        return None
    return name


def _check_selector(sel: Any, path: str, src: str, problems: List[Problem]) -> None:
    if sel is None:
        problems.append(Problem(path, "missing", "selector", source=src))
        return
    if not isinstance(sel, dict):
        problems.append(Problem(path, "must be a label selector (matchLabels / matchExpressions)", "selector",
                                value=sel, source=src))
        return
    ml = sel.get("matchLabels", {})
    if not isinstance(ml, dict):
        problems.append(Problem(path + ".matchLabels", "must be a map of label to value", "selector", source=src))
    for i, e in enumerate(sel.get("matchExpressions") or []):
        if not isinstance(e, dict) or e.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist"):
            problems.append(Problem(f"{path}.matchExpressions.{i}.operator",
                                    "must be In, NotIn, Exists or DoesNotExist", "selector",
                                    value=e.get("operator") if isinstance(e, dict) else e, source=src))
        elif not isinstance(e.get("key"), str):
            problems.append(Problem(f"{path}.matchExpressions.{i}.key", "missing", "selector", source=src))


def check_pool(doc: Dict[str, Any], src: str) -> List[Problem]:
    problems: List[Problem] = []
    _meta_name(doc, src, problems, label=True)
    spec = doc.get("spec")
    if spec is None:  # "No spec is required for a MachineConfigPool" (openshift/api MCP tests)
        spec = {}
    if not isinstance(spec, dict):
        return problems + [Problem("$.spec", "must be a map", "pool", source=src)]
    if spec.get("machineConfigSelector") is not None:  # absent: the pool selects no MachineConfigs
        _check_selector(spec.get("machineConfigSelector"), "$.spec.machineConfigSelector", src, problems)
    if "nodeSelector" in spec:
        _check_selector(spec.get("nodeSelector"), "$.spec.nodeSelector", src, problems)
    if "paused" in spec and not isinstance(spec["paused"], bool):
        problems.append(Problem("$.spec.paused", "must be true or false", "pool", value=spec["paused"], source=src))
    mu = spec.get("maxUnavailable")
    if mu is not None:
        from agent.server.drains import parse_max_unavailable

        try:
            parse_max_unavailable(mu, 10)
        except ValueError as exc:
            problems.append(Problem("$.spec.maxUnavailable", str(exc), "pool", value=mu, source=src))
    return problems


def _check_ignition(cfg: Any, src: str, problems: List[Problem]) -> None:
    if cfg is None:
        return
    if not isinstance(cfg, dict):
        problems.append(Problem("$.spec.config", "must be an Ignition config object", "ignition", source=src))
        return
    version = (cfg.get("ignition") or {}).get("version") if isinstance(cfg.get("ignition"), dict) else None
    if version not in SUPPORTED_VERSIONS:
        problems.append(Problem("$.spec.config.ignition.version",
                                f"must be an Ignition spec {SUPPORTED_VERSIONS[0]} .. {SUPPORTED_VERSIONS[-1]}",
                                "ignition", value=version, source=src))
        return
    try:  # the full validation of a teammate's module, when present
        from agent.ignition.load import check_node_config  # type: ignore
    except ImportError:
        check_node_config = None
    if check_node_config is not None:
        try:
            _nc, found = check_node_config({"apiVersion": "machineconfiguration.openshift.io/v1",
                                            "kind": "MachineConfig", "metadata": {"name": "x"},
                                            "spec": {"config": cfg}}, src)
        except Exception as exc:  # never let a validator bug take the server down
            log.warning("validator failed on %s: %s", src, exc)
            found = []
        for p in found:
            if p.is_error:
                path = p.path if p.path.startswith("$.spec") else "$.spec.config" + p.path[1:]
                problems.append(Problem(path, p.message, p.rule, source=src))


def check_machine_config(doc: Dict[str, Any], src: str) -> List[Problem]:
    problems: List[Problem] = []
    _meta_name(doc, src, problems, label=False)
    labels = (doc.get("metadata") or {}).get("labels")
    if labels is not None and not isinstance(labels, dict):
        problems.append(Problem("$.metadata.labels", "must be a map", "labels", source=src))
    spec = doc.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return problems + [Problem("$.spec", "must be a map", "machineconfig", source=src)]
    _check_ignition(spec.get("config"), src, problems)
    for key in ("kernelArguments", "extensions"):
        v = spec.get(key)
        if v is not None and (not isinstance(v, list) or not all(isinstance(a, str) for a in v)):
            problems.append(Problem(f"$.spec.{key}", "must be a list of strings", "machineconfig", value=v, source=src))
    if "fips" in spec and not isinstance(spec["fips"], bool):
        problems.append(Problem("$.spec.fips", "must be true or false", "machineconfig", value=spec["fips"], source=src))
    if spec.get("kernelType") not in KERNEL_TYPES and spec.get("kernelType") is not None:
        problems.append(Problem("$.spec.kernelType", "must be default, realtime or 64k-pages", "machineconfig",
                                value=spec.get("kernelType"), source=src))
    if spec.get("osImageURL") is not None and not isinstance(spec.get("osImageURL"), str):
        problems.append(Problem("$.spec.osImageURL", "must be a string", "machineconfig", source=src))
    return problems


def check_cluster(doc: Dict[str, Any], src: str) -> List[Problem]:
    problems: List[Problem] = []
    spec = doc.get("spec") or {}
    if not isinstance(spec, dict):
        return [Problem("$.spec", "must be a map", "machineconfiguration", source=src)]
    if "bootImageSkewEnforcement" in spec:  # as the API admits it (agent.server.skewpolicy)
        from agent.server.skewpolicy import check as check_skew

        problems.extend(check_skew(spec.get("bootImageSkewEnforcement"), src))
    policy = spec.get("nodeDisruptionPolicy")
    if policy is not None:
        if not isinstance(policy, dict):
            problems.append(Problem("$.spec.nodeDisruptionPolicy", "must be a map", "policy", source=src))
        else:
            try:
                from agent.disruption import merge_policy
            except ImportError:
                merge_policy = None
            if merge_policy is not None:
                from agent.errors import ConfigError

                try:
                    merge_policy(policy, source=src)
                except ConfigError as exc:
                    found = [p for p in exc.problems if p.is_error] or [Problem("$.spec.nodeDisruptionPolicy",
                                                                                str(exc), "policy")]
                    for p in found:
                        path = p.path if p.path.startswith("$.spec") else "$.spec.nodeDisruptionPolicy" + p.path[1:]
                        problems.append(Problem(path, p.message, p.rule, source=src))
                except Exception as exc:  # never let a validator bug take the server down
                    log.warning("policy validator failed on %s: %s", src, exc)
    return problems


def _check_named(doc: Dict[str, Any], src: str) -> List[Problem]:
    problems: List[Problem] = []
    _meta_name(doc, src, problems, label=False)
    if not isinstance(doc.get("spec", {}), dict):
        problems.append(Problem("$.spec", "must be a map", "object", source=src))
    return problems


def check_os_config(doc: Dict[str, Any], src: str) -> List[Problem]:
    """A MachineOSConfig names its pool, and its own name is the pool's (openshift/api#2399,
    OCPBUGS-54287: XValidation self.metadata.name == self.spec.machineConfigPool.name)."""
    problems = _check_named(doc, src)
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    pool = (spec.get("machineConfigPool") or {}).get("name") if isinstance(spec.get("machineConfigPool"), dict) \
        else None
    if not isinstance(pool, str) or not pool:
        problems.append(Problem("$.spec.machineConfigPool.name", "required: the pool this MachineOSConfig builds for",
                                "machineosconfig", source=src))
    elif isinstance(name, str) and name and name != pool:
        problems.append(Problem("$.metadata.name", f"must equal spec.machineConfigPool.name ({pool!r}): a "
                                                   f"MachineOSConfig is named after its pool", "machineosconfig",
                                value=name, source=src))
    return problems


API_GROUP = "machineconfiguration.openshift.io"


def check_api_version(doc: Dict[str, Any], kind: str, src: str) -> List[Problem]:
    """Only ``machineconfiguration.openshift.io/v1`` (or no apiVersion) is read; v1alpha1 objects
    (MachineOSConfig/MachineOSBuild before they reached v1) are refused naming v1."""
    version = doc.get("apiVersion")
    if version is None or version == f"{API_GROUP}/v1":
        return []
    if isinstance(version, str) and version.startswith(f"{API_GROUP}/"):
        why = (f"{version} is no longer served: write it as apiVersion {API_GROUP}/v1 (the v1 {kind} has the "
               f"same spec fields)" if version.endswith(("/v1alpha1", "/v1beta1")) else
               f"unknown version {version}: use {API_GROUP}/v1")
    else:
        why = f"a {kind} is apiVersion {API_GROUP}/v1"
    return [Problem("$.apiVersion", why, "apiversion", value=version, source=src)]


_CHECKS = {
    "machineconfigpools": check_pool,
    "machineconfigs": check_machine_config,
    "machineosconfigs": check_os_config,
    "machineosbuilds": _check_named,
}


def _spec2_converted(doc: Dict[str, Any], where: str) -> Tuple[Dict[str, Any], List[Problem]]:
    """Spec 2.2 MachineConfigs are converted to 3.2 first, as the MCO does (helpers.go:612-668)."""
    from agent.ignition.load import convert_spec2_machine_config

    doc, refused = convert_spec2_machine_config(doc, where)
    found = _CHECKS["machineconfigs"](doc, where)
    return doc, refused + [p for p in found if not (refused and p.path.startswith("$.spec.config"))]


def load_state(state_dir: str) -> State:
    """Read and validate everything. Invalid objects are left out and listed in ``problems``."""
    state = State(loaded_at=time.time())
    sig = signature(state_dir)
    buckets = {
        "machineconfigpools": state.pools,
        "machineconfigs": state.machine_configs,
        "machineosconfigs": state.os_configs,
        "machineosbuilds": state.os_builds,
    }
    for sub, kind in KINDS.items():
        d = os.path.join(state_dir, sub)
        for fname in _yaml_files(d):
            src = os.path.join(sub, fname)
            for where, doc in read_docs(os.path.join(d, fname), src, state_dir, state.problems):
                if doc.get("kind") not in (None, kind):
                    state.problems.append(Problem("$.kind", f"expected {kind} in {sub}/", "kind",
                                                  value=doc.get("kind"), source=where))
                    continue
                found = check_api_version(doc, kind, where)
                if found:
                    pass
                elif sub == "machineconfigs":
                    doc, found = _spec2_converted(doc, where)
                else:
                    found = _CHECKS[sub](doc, where)
                if found:
                    state.problems.extend(found)
                    continue
                name = doc["metadata"]["name"]
                if name in buckets[sub]:
                    state.problems.append(Problem("$.metadata.name", f"duplicate {kind} name", "duplicate",
                                                  value=name, source=where))
                    continue
                buckets[sub][name] = doc
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
        try:  # a regular file inside the state directory, never a FIFO (agent.server.statefiles)
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


def __getattr__(name: str) -> Any:
    # StateWatcher moved to agent.server.watcher (it imports this module); old imports still work.
    if name == "StateWatcher":
        from agent.server.watcher import StateWatcher

        return StateWatcher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
