"""What the config server puts inside a served Ignition config, read back out (pure).

The server adds a few files to every config it serves (REFERENCE §2): the node annotations,
the encapsulated MachineConfig (OS-level fields), the boot image skew rules and the pool's
identity. The agent reads them from the config itself, before anything is written, so every
decision (skew, pool, OS update) is made on exactly what was served.
"""

import base64
import json
import urllib.parse
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from agent.errors import ConfigError, Problem
from agent.nodeconfig import NodeConfig

ANNOTATIONS_PATH = "/etc/machine-config-daemon/node-annotations.json"
ENCAPSULATED_PATH = "/etc/ignition-machine-config-encapsulated.json"
SKEW_RULES_PATH = "/etc/node-agent/boot-image-skew.json"
POOL_INFO_PATH = "/etc/node-agent/pool.json"
POLICY_PATH = "/etc/node-agent/disruption-policy.yaml"

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
                or (self.pool_info or {}).get("servedConfig", ""))

    @property
    def pool(self) -> str:
        return self.annotations.get(ANN + "pool") or (self.pool_info or {}).get("pool", "")


def _data_url_bytes(url: str, where: str) -> bytes:
    # Kept local (not agent.ignition.dataurl) so this module stays a leaf: the server writes
    # these files itself, always as base64 or percent-encoded data URLs.
    if not url.startswith("data:") or "," not in url:
        raise ConfigError(f"{where}: expected a data: URL", [Problem(where, "expected a data: URL", "served-file")])
    meta, _, payload = url[5:].partition(",")
    if meta.endswith(";base64"):
        return base64.b64decode(payload)
    return urllib.parse.unquote_to_bytes(payload)


def file_bytes(ignition: Dict[str, Any], path: str) -> Optional[bytes]:
    """The contents of ``path`` in ``storage.files`` when it is inline (data: URL), else None."""
    for i, entry in enumerate(ignition.get("storage", {}).get("files", []) or []):
        if entry.get("path") != path:
            continue
        source = (entry.get("contents") or {}).get("source")
        if not source or not source.startswith("data:"):
            return None
        data = _data_url_bytes(source, f"$.storage.files.{i}.contents.source")
        if (entry.get("contents") or {}).get("compression") == "gzip":
            data = zlib.decompress(data, 16 + zlib.MAX_WBITS)
        return data
    return None


def _json_file(ignition: Dict[str, Any], path: str) -> Optional[Any]:
    raw = file_bytes(ignition, path)
    if raw is None:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"served file {path} is not valid JSON: {exc}",
                          [Problem(path, f"not valid JSON: {exc}", "served-file")])


def read_served(ignition: Dict[str, Any]) -> Served:
    annotations = _json_file(ignition, ANNOTATIONS_PATH) or {}
    policy = file_bytes(ignition, POLICY_PATH)
    return Served(
        annotations={str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, dict) else {},
        encapsulated=_json_file(ignition, ENCAPSULATED_PATH),
        skew_rules=_json_file(ignition, SKEW_RULES_PATH),
        pool_info=_json_file(ignition, POOL_INFO_PATH),
        policy_text=policy.decode("utf-8") if policy is not None else None,
    )


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
