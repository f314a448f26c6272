"""Checks of the MachineConfig-family objects, as the API admits them (pure).

Each ``check_*`` returns the problems of one document with their JSON paths. Two consumers, one
set of rules: the server's state loader (``agent.server.store.objects``/``statedir`` leaves an
object with problems out; the last good state keeps serving) and ``node-agent validate``
(``agent.core.documents``). Sources:
openshift/api machineconfiguration/v1 (MachineConfigPool, MachineConfig, MachineOSConfig) and
operator/v1 MachineConfiguration; ``agent.core.skewenforcement`` for bootImageSkewEnforcement.
"""

import logging
import math
import re
from typing import Any, Dict, List, Optional

from agent.core.loadconfig import MC_SPEC_FIELDS
from agent.core.rolloutpolicy import policy_problems
from agent.errors import Problem
from agent.ignition.spec import SUPPORTED_VERSIONS

log = logging.getLogger(__name__)

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
KERNEL_TYPES = ("", "default", "realtime", "64k-pages")
# A pool's own first-boot deadline (ours): how long a first boot may stay silent before the server
# shows it FirstBootStalled (agent/server/rollout/firstboots.py); serve --firstboot-deadline else.
FIRSTBOOT_DEADLINE_ANNOTATION = "node-agent.io/firstboot-deadline"
MAX_FIRSTBOOT_DEADLINE = 7 * 86400.0
_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_deadline(value: Any) -> float:
    """Seconds of a first-boot deadline: whole seconds (``"1800"``) or a duration as Kubernetes
    writes one (metav1.Duration, Go's ``time.ParseDuration`` in hours, minutes and seconds:
    ``"30m"``, ``"1h30m"``, ``"90s"``); more than 0 and at most 7 days. ValueError says what is
    expected."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    seconds = None
    if len(text) > 32:  # no deadline needs more; a long number is refused before it is read
        text = ""
    if text.isdigit():
        seconds = float(text)
    else:
        m = _DURATION.fullmatch(text)
        if text and m:
            hours, minutes, secs = (int(g or 0) for g in m.groups())
            seconds = hours * 3600.0 + minutes * 60.0 + secs
    if seconds is None or not 0 < seconds <= MAX_FIRSTBOOT_DEADLINE:
        raise ValueError("must be a duration such as \"30m\", \"1h30m\" or \"1800\" (seconds), more than 0 "
                         "and at most 7 days (168h)")
    return seconds


def parse_max_unavailable(value: Any, machine_count: int) -> int:
    """``spec.maxUnavailable`` for a pool of ``machine_count`` nodes, as the MCO's node controller
    reads it (node_controller.go ``maxUnavailable``): default 1; an int is itself; a string must
    be a percentage (any whole number of percent, "150%" and "+10%" too, as Go's strconv.Atoi reads it) of the pool, rounded down
    (apimachinery intstr ``GetScaledValueFromIntOrPercent``, roundUp false); 0 becomes 1. A bare
    number in a string ("3") is refused, as upstream refuses it. Differs on purpose: a negative
    value is refused here (upstream it would hold every update of the pool for ever, silently).
    """
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("must be a whole number or a percentage like \"10%\"")
    if isinstance(value, int):
        scaled = value
    else:
        m = re.fullmatch(r"([+-]?\d+)%", value)  # strconv.Atoi takes a sign: "+10%" is 10%
        if not m:
            why = "a number must not be quoted" if re.fullmatch(r"\d+", value.strip()) else \
                "must be a whole number or a percentage like \"10%\""
            raise ValueError(f"invalid value for IntOrString: string {value!r} is not a percentage ({why})")
        scaled = math.floor(machine_count * int(m.group(1)) / 100)
    if scaled < 0:
        raise ValueError("must not be negative")
    return max(1, scaled)


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
    expressions = sel.get("matchExpressions") or []
    if not isinstance(expressions, list):
        problems.append(Problem(path + ".matchExpressions", "must be a list of {key, operator, values}", "selector",
                                value=expressions, source=src))
        expressions = []
    for i, e in enumerate(expressions):
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
    _unused_keys(spec, POOL_SPEC_FIELDS, src, problems)
    if "paused" in spec and not isinstance(spec["paused"], bool):
        problems.append(Problem("$.spec.paused", "must be true or false", "pool", value=spec["paused"], source=src))
    mu = spec.get("maxUnavailable")
    if mu is not None:
        try:
            parse_max_unavailable(mu, 10)
        except ValueError as exc:
            problems.append(Problem("$.spec.maxUnavailable", str(exc), "pool", value=mu, source=src))
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    for key, why in sorted(policy_problems(annotations).items()):
        problems.append(Problem(f"$.metadata.annotations['{key}']", f"{why} (the pool's rollout policy: "
                                f"docs/rollout.md)", "pool", value=annotations[key], source=src))
    deadline = annotations.get(FIRSTBOOT_DEADLINE_ANNOTATION)
    if deadline is not None:
        try:
            parse_deadline(deadline)
        except ValueError as exc:
            problems.append(Problem(f"$.metadata.annotations[{FIRSTBOOT_DEADLINE_ANNOTATION!r}]", str(exc), "pool",
                                    value=deadline, source=src))
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
        from agent.core.loadconfig import check_node_config  # type: ignore
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
        for p in found:  # errors leave the object out; warnings are kept with it (the server shows them)
            path = p.path if p.path.startswith("$.spec") else "$.spec.config" + p.path[1:]
            problems.append(Problem(path, p.message, p.rule, severity=p.severity, source=src))


def check_machine_config(doc: Dict[str, Any], src: str) -> List[Problem]:
    """Its errors (the object is refused) and warnings (``severity`` "warning": an unused key,
    whatever else ``node-agent validate`` warns of; the object is admitted and the server shows
    them: docs/machineconfigs.md "Warnings")."""
    problems: List[Problem] = []
    _meta_name(doc, src, problems, label=False)
    metadata = doc.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if labels is not None and not isinstance(labels, dict):
        problems.append(Problem("$.metadata.labels", "must be a map", "labels", source=src))
    spec = doc.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return problems + [Problem("$.spec", "must be a map", "machineconfig", source=src)]
    _check_ignition(spec.get("config"), src, problems)
    _unused_keys(spec, MC_SPEC_FIELDS, src, problems)
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


# What a MachineConfigPool's spec holds (deploy/crds/machineconfigpools.crd.yaml, v1).
POOL_SPEC_FIELDS = ("configuration", "machineConfigSelector", "maxUnavailable", "nodeSelector", "osImageStream",
                    "paused", "pinnedImageSets")


def _unused_keys(spec: Dict[str, Any], known: tuple, src: str, problems: List[Problem]) -> None:
    """A key the object's spec does not have (a typo such as ``pasued``): a warning, as
    ``node-agent validate`` gives one (the API server would prune it)."""
    for key in spec:
        if key not in known:
            problems.append(Problem(f"$.spec.{key}", f"unused key {key}", "unused-key", severity="warning", source=src))


def check_cluster(doc: Dict[str, Any], src: str) -> List[Problem]:
    problems: List[Problem] = []
    spec = doc.get("spec") or {}
    if not isinstance(spec, dict):
        return [Problem("$.spec", "must be a map", "machineconfiguration", source=src)]
    if "bootImageSkewEnforcement" in spec:  # as the API admits it (agent.server.rollout.skewpolicy)
        from agent.core.skewenforcement import check as check_skew

        problems.extend(check_skew(spec.get("bootImageSkewEnforcement"), src))
    policy = spec.get("nodeDisruptionPolicy")
    if policy is not None:
        if not isinstance(policy, dict):
            problems.append(Problem("$.spec.nodeDisruptionPolicy", "must be a map", "policy", source=src))
        else:
            try:
                from agent.core.disruption import merge_policy
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
    if "irreconcilableValidationOverrides" in spec:  # as the CRD admits it (agent.core.reconcilable)
        from dataclasses import replace

        from agent.core.reconcilable import override_problems

        problems.extend(replace(p, source=src) for p in override_problems(spec["irreconcilableValidationOverrides"]))
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
