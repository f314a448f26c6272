"""The Ignition document a node is served, and its spec version (pure).

To the rendered config's Ignition the server adds (REFERENCE §2; read back by ``agent.served``):

- ``/etc/machine-config-daemon/node-annotations.json``: currentConfig, desiredConfig,
  firstPivotConfig (= the served config), state Done, the node-agent ``pool`` annotation, and
  currentImage/desiredImage when an image is served;
- ``/etc/ignition-machine-config-encapsulated.json``: the MachineConfig with its Ignition
  emptied (osImageURL is the *served* image);
- ``/etc/node-agent/boot-image-skew.json``: the skew rules (from ``bootImageSkewEnforcement``);
- ``/etc/node-agent/disruption-policy.yaml``: the cluster's ``nodeDisruptionPolicy`` as given;
- ``/etc/node-agent/pool.json``: the pool's name, ``nodeSelector.matchLabels`` and what was served.
"""

import base64
import copy
import json
import re
from typing import Any, Dict, List, Optional, Tuple

import yaml

from agent.errors import ConfigError
from agent.served import (
    ANN,
    ANNOTATIONS_PATH,
    ENCAPSULATED_PATH,
    POLICY_PATH,
    POOL_INFO_PATH,
    SKEW_RULES_PATH,
)

MEDIA_TYPE = "application/vnd.coreos.ignition+json"
DEFAULT_SPEC = "3.4.0"
UPSTREAM_FLOOR = {"rhcosVersion": "9.2"}  # RHCOS 9.2 == OpenShift 4.13.0, the upstream limit
RHEL_MAJOR_ANNOTATION = "node-agent.io/rhel-major"


class NotAcceptable(Exception):
    """The client's Accept header names no spec we can produce (or the config needs a newer one)."""


def data_url(data: bytes) -> str:
    return "data:;base64," + base64.b64encode(data).decode("ascii")


def _file(path: str, data: bytes) -> Dict[str, Any]:
    return {"path": path, "mode": 0o644, "overwrite": True, "contents": {"source": data_url(data)}}


def rhel_major(pool: Dict[str, Any], os_image: str) -> Optional[int]:
    """The target RHEL major: the pool annotation ``node-agent.io/rhel-major`` wins, else what the
    image reference encodes (``rhel-coreos-9``, ``rhel-coreos:9.6``, ``rhel10``, ``rhcos-9``)."""
    ann = ((pool.get("metadata") or {}).get("annotations") or {}).get(RHEL_MAJOR_ANNOTATION)
    if ann is not None and str(ann).isdigit():
        return int(ann)
    m = re.search(r"(?:rhel|rhcos)(?:[-_]?coreos)?[-_:]?(\d{1,2})(?:[.\-_@:]|$)", os_image or "")
    return int(m.group(1)) if m else None


def skew_rules(cluster_spec: Dict[str, Any], pool: Dict[str, Any], os_image: str) -> Dict[str, Any]:
    """The node-side rules (agent.skew) from ``spec.bootImageSkewEnforcement``.

    Manual -> Enforce with the stated minimum; Automatic (and no setting at all, the upstream
    default on platforms that manage boot images) -> Enforce with the upstream floor;
    None -> None. ``target.rhelMajor`` comes from the pool annotation or the image name.
    """
    skew = cluster_spec.get("bootImageSkewEnforcement") or {"mode": "Automatic"}
    mode = skew.get("mode", "Automatic")
    if mode == "None":
        return {"mode": "None"}
    rules: Dict[str, Any] = {"mode": "Enforce", "allowMajorUpgrade": False}
    if mode == "Manual":
        manual = skew.get("manual") or {}
        if manual.get("rhcosVersion"):
            rules["minimum"] = {"rhcosVersion": str(manual["rhcosVersion"])}
        else:
            rules["minimum"] = {"ocpVersion": str(manual["ocpVersion"])}
    else:
        auto = skew.get("automatic") or {}
        if auto.get("rhcosVersion"):
            rules["minimum"] = {"rhcosVersion": str(auto["rhcosVersion"])}
        elif auto.get("ocpVersion"):
            rules["minimum"] = {"ocpVersion": str(auto["ocpVersion"])}
        else:
            rules["minimum"] = dict(UPSTREAM_FLOOR)
    target: Dict[str, Any] = {"osImageURL": os_image}
    major = rhel_major(pool, os_image)
    if major is not None:
        target["rhelMajor"] = major
    rules["target"] = target
    return rules


def build_document(pool: Dict[str, Any], config_name: str, spec: Dict[str, Any], image: str,
                   cluster_spec: Dict[str, Any]) -> Dict[str, Any]:
    """The full Ignition document (newest spec) served for ``config_name`` with ``image``."""
    name = pool["metadata"]["name"]
    doc = copy.deepcopy(spec.get("config") or {"ignition": {"version": "3.5.0"}})
    annotations = {
        ANN + "currentConfig": config_name,
        ANN + "desiredConfig": config_name,
        ANN + "firstPivotConfig": config_name,
        ANN + "state": "Done",
        ANN + "pool": name,
    }
    if image:
        annotations[ANN + "currentImage"] = image
        annotations[ANN + "desiredImage"] = image
    encapsulated = {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": config_name},
        "spec": {
            "config": {"ignition": {"version": "3.5.0"}},
            "osImageURL": image,
            "kernelArguments": list(spec.get("kernelArguments") or []),
            "kernelType": spec.get("kernelType") or "default",
            "extensions": list(spec.get("extensions") or []),
            "fips": bool(spec.get("fips")),
        },
    }
    selector = ((pool.get("spec") or {}).get("nodeSelector") or {}).get("matchLabels") or {}
    pool_info = {"pool": name, "nodeSelector": {"matchLabels": dict(selector)},
                 "servedConfig": config_name, "servedImage": image}
    added: List[Dict[str, Any]] = [
        _file(ANNOTATIONS_PATH, json.dumps(annotations, sort_keys=True).encode()),
        _file(ENCAPSULATED_PATH, json.dumps(encapsulated, sort_keys=True).encode()),
        _file(SKEW_RULES_PATH, json.dumps(skew_rules(cluster_spec, pool, image), sort_keys=True).encode()),
        _file(POOL_INFO_PATH, json.dumps(pool_info, sort_keys=True).encode()),
    ]
    policy = cluster_spec.get("nodeDisruptionPolicy")
    if policy:
        added.append(_file(POLICY_PATH, yaml.safe_dump(
            {"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
             "spec": {"nodeDisruptionPolicy": policy}}, sort_keys=True).encode()))
    ours = {f["path"] for f in added}
    storage = doc.setdefault("storage", {})
    storage["files"] = [f for f in storage.get("files") or [] if f.get("path") not in ours] + added
    return doc


def parse_accept(header: Optional[str]) -> Tuple[List[Tuple[float, str]], bool]:
    """Ignition versions named in ``Accept`` with their q, and whether a wildcard was present."""
    asked: List[Tuple[float, str]] = []
    wildcard = False
    for part in (header or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        if not media:
            continue
        params = {}
        for f in fields[1:]:
            k, _, v = f.partition("=")
            params[k.strip().lower()] = v.strip().strip('"')
        try:
            q = float(params.get("q", "1"))
        except ValueError:
            q = 1.0
        if q <= 0:
            continue
        if media == MEDIA_TYPE and "version" in params:
            asked.append((q, params["version"]))
        elif media in ("*/*", "application/*", "application/json", MEDIA_TYPE):
            wildcard = True
    return asked, wildcard


def negotiate(header: Optional[str], doc: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """Pick the spec version and convert ``doc`` to it.

    Versions asked for are tried best first (q, then newest); each is converted down where the
    fields allow. No usable version asked and no wildcard, or a config that no asked version can
    express: NotAcceptable naming the versions and fields. No Accept, or only a wildcard:
    ``DEFAULT_SPEC`` (3.4.0, what every Ignition since 2.15 reads), or the newest spec when the
    config needs it.
    """
    from agent.ignition.spec import SUPPORTED_VERSIONS, best_version, convert_ignition

    asked, wildcard = parse_accept(header)
    if not header or not header.strip():
        wildcard = True
    ordered: List[str] = []
    for _q, v in sorted(asked, key=lambda qv: (-qv[0], _vkey(qv[1]))):
        if re.match(r"^3\.\d+\.\d+$", v):
            pick = v if v in SUPPORTED_VERSIONS else best_version([v])
            if pick and pick not in ordered:
                ordered.append(pick)
    errors: List[str] = []
    for version in ordered:
        try:
            return version, convert_ignition(doc, version)
        except ConfigError as exc:
            errors.append(str(exc).splitlines()[0])
    if wildcard:
        for version in (DEFAULT_SPEC, SUPPORTED_VERSIONS[-1]):
            try:
                return version, convert_ignition(doc, version)
            except ConfigError as exc:
                errors.append(str(exc).splitlines()[0])
    if errors:
        raise NotAcceptable("; ".join(errors))
    named = ", ".join(sorted({v for _, v in asked})) or "none"
    raise NotAcceptable(f"no Ignition spec this server can produce was accepted (asked: {named}); "
                        f"this server serves {MEDIA_TYPE};version=3.0.0 .. {SUPPORTED_VERSIONS[-1]}. "
                        f"Ignition spec 2.x (RHCOS before 4.6) is not supported: boot a newer image")


def _vkey(v: str) -> Tuple[int, ...]:
    try:
        return tuple(-int(x) for x in v.split("."))
    except ValueError:
        return (0,)


def render_bytes(doc: Dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
