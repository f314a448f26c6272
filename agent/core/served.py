"""What the config server puts inside a served Ignition config, read back out (pure).

The server adds a few files to every config it serves (REFERENCE §2): the node annotations,
the encapsulated MachineConfig (OS-level fields), the boot image skew rules and the pool's
identity. The agent reads them from the config itself, before anything is written, so every
decision (skew, pool, OS update) is made on exactly what was served.
"""

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from agent.core.nodeconfig import NodeConfig
from agent.errors import ConfigError, Problem

ANNOTATIONS_PATH = "/etc/machine-config-daemon/node-annotations.json"
ENCAPSULATED_PATH = "/etc/ignition-machine-config-encapsulated.json"
SKEW_RULES_PATH = "/etc/node-agent/boot-image-skew.json"
POOL_INFO_PATH = "/etc/node-agent/pool.json"
POLICY_PATH = "/etc/node-agent/disruption-policy.yaml"
MCS_CONTENT_PATH = "/etc/mcs-machine-config-content.json"  # upstream server.go machineConfigContentPath

# What the server writes for a node's first boot only. The MCS serves these to a booting node
# (openshift/machine-config-operator pkg/server/server.go:49-66 getAppenders, :156
# appendNodeAnnotations), never on day 2 (the MCD applies rendered MachineConfigs, which do
# not carry them), and the MCD reads node-annotations.json only while its node has no
# currentConfig annotation, i.e. once (pkg/daemon/node.go:13-25). A day-2 update keeps what the
# first boot wrote: firstPivotConfig stays the config the node first pivoted to.
FIRST_BOOT_ONLY = (ANNOTATIONS_PATH, MCS_CONTENT_PATH)

ANN = "machineconfiguration.openshift.io/"


@dataclass(frozen=True)
class Served:
    annotations: Dict[str, str] = field(default_factory=dict)
    encapsulated: Optional[Dict[str, Any]] = None
    skew_rules: Optional[Dict[str, Any]] = None
    pool_info: Optional[Dict[str, Any]] = None
    policy_text: Optional[str] = None

    @property
    def config_name(self) -> str:
        return (self.annotations.get(ANN + "firstPivotConfig")
                or self.annotations.get(ANN + "desiredConfig")
                or self.annotations.get(ANN + "currentConfig")
                or (self.pool_info or {}).get("servedConfig", ""))

    @property
    def pool(self) -> str:
        return self.annotations.get(ANN + "pool") or (self.pool_info or {}).get("pool", "")


def file_bytes(ignition: Dict[str, Any], path: str) -> Optional[bytes]:
    """The contents of ``path`` in ``storage.files`` (the last entry for it) when inline (a data:
    URL, optionally gzip-compressed), else None. Undecodable contents name their JSON path."""
    from agent.ignition.dataurl import decode_data_url, decompress

    files = ignition.get("storage", {}).get("files", []) or []
    index = next((i for i in range(len(files) - 1, -1, -1)
                  if isinstance(files[i], dict) and files[i].get("path") == path), None)
    if index is None:
        return None
    contents = files[index].get("contents") or {}
    source = contents.get("source")
    if not isinstance(source, str) or not source.startswith("data:"):
        return None
    where = f"$.storage.files.{index}.contents"
    try:
        return decompress(decode_data_url(source), contents.get("compression"))
    except ConfigError as exc:
        raise ConfigError(f"served file {path} cannot be decoded",
                          [Problem(f"{where}.source", str(exc).splitlines()[0], "served-file")])


def _json_file(ignition: Dict[str, Any], path: str) -> Optional[Any]:
    raw = file_bytes(ignition, path)
    if raw is None:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"served file {path} is not valid JSON: {exc}",
                          [Problem(path, f"not valid JSON: {exc}", "served-file")])


def _skew_rules(ignition: Dict[str, Any]) -> Optional[Any]:
    # JSON or YAML, numbers with a fraction kept as text ("9.10" is not 9.1): agent.core.skew's reader.
    from agent.core.skew import load_rules_text

    raw = file_bytes(ignition, SKEW_RULES_PATH)
    if raw is None:
        return None
    try:
        return load_rules_text(raw.decode("utf-8"), source=SKEW_RULES_PATH)
    except UnicodeDecodeError:
        raise ConfigError(f"served file {SKEW_RULES_PATH} is not UTF-8 text",
                          [Problem(SKEW_RULES_PATH, "not UTF-8 text", "served-file")])


def read_served(ignition: Dict[str, Any]) -> Served:
    annotations = _json_file(ignition, ANNOTATIONS_PATH) or {}
    policy = file_bytes(ignition, POLICY_PATH)
    return Served(
        annotations={str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, dict) else {},
        encapsulated=_json_file(ignition, ENCAPSULATED_PATH),
        skew_rules=_skew_rules(ignition),
        pool_info=_json_file(ignition, POOL_INFO_PATH),
        policy_text=policy.decode("utf-8") if policy is not None else None,
    )


def keep_first_boot_files(target: Dict[str, Any], current: Dict[str, Any]) -> Dict[str, Any]:
    """``target`` (an Ignition config served on day 2) with each FIRST_BOOT_ONLY file as
    ``current`` (the config the node runs) has it: the same entry in the same place, or left out
    when ``current`` has none. Neither argument is changed."""
    files = (target.get("storage") or {}).get("files")
    if not isinstance(files, list) or not any(_path_of(f) in FIRST_BOOT_ONLY for f in files):
        return target
    kept = {_path_of(f): f for f in (current.get("storage") or {}).get("files") or [] if _path_of(f) in FIRST_BOOT_ONLY}
    out: List[Any] = []
    for f in files:
        path = _path_of(f)
        if path not in FIRST_BOOT_ONLY:
            out.append(f)
        elif path in kept:
            out.append(copy.deepcopy(kept.pop(path)))  # once, where the served config had it
    return {**target, "storage": {**target["storage"], "files": out}}


def _path_of(entry: Any) -> Optional[str]:
    return entry.get("path") if isinstance(entry, dict) else None


def node_config_from_served(ignition: Dict[str, Any], served: Optional[Served] = None) -> NodeConfig:
    """The full NodeConfig: the served Ignition plus the OS-level fields of the encapsulated MachineConfig."""
    served = served or read_served(ignition)
    spec = (served.encapsulated or {}).get("spec", {}) or {}
    return NodeConfig(
        ignition=ignition,
        os_image_url=str(spec.get("osImageURL") or ""),
        kernel_arguments=tuple(str(a) for a in spec.get("kernelArguments") or ()),
        kernel_type=str(spec.get("kernelType") or ""),
        extensions=tuple(str(e) for e in spec.get("extensions") or ()),
        fips=bool(spec.get("fips") or False),
        name=served.config_name,
    )


def unrenderable(served: Served) -> Optional[Problem]:
    """Why the served rendered config is not one the MCO could have rendered, or None.

    The MCO's render controller always sets ``osImageURL`` (from the release's ControllerConfig);
    a served rendered config without one means the server rendered from an incomplete state (an
    emptied or half-written MachineConfig). Applying it would remove the files of the missing
    MachineConfig and record an empty OS image, so a node refuses it (exit 65, nothing written).
    Only configs that carry an encapsulated MachineConfig (served by a config server) are judged."""
    if served.encapsulated is None:
        return None
    spec = served.encapsulated.get("spec") if isinstance(served.encapsulated, dict) else None
    if isinstance(spec, dict) and str(spec.get("osImageURL") or ""):
        return None
    name = served.config_name or "the served config"
    return Problem(f"{ENCAPSULATED_PATH}: $.spec.osImageURL",
                   f"{name} has no osImageURL: the MCO never renders a config without one, so the server "
                   "rendered it from an incomplete state (an empty or half-written MachineConfig?); nothing "
                   "was applied. What to do: check the server's /healthz and its state directory, then run again",
                   "unrenderable")
