"""Read a node's config: an Ignition config, or a MachineConfig wrapping one, into a NodeConfig.

Problems inside a MachineConfig's Ignition keep their full path
(``$.spec.config.storage.files.0.path``) so the user finds them in the file they wrote.
Ignition spec 2.2 in a MachineConfig is converted to 3.2 as the MCO converts it
(``agent.ignition.translate2``); a warning says so, and problems point into the 2.2 text. A bare
spec 2 Ignition config is refused, as Ignition 3 refuses it.
"""

import copy
import logging
import os
from typing import Any, Dict, List, Optional, Tuple, Union

from agent.core.nodeconfig import NodeConfig
from agent.errors import ConfigError, Problem
from agent.ignition import spec, translate2
from agent.ignition.parse import parse_document_with_warnings
from agent.ignition.positions import with_positions
from agent.ignition.validate import validate_ignition

log = logging.getLogger(__name__)

MC_API_VERSION = "machineconfiguration.openshift.io/v1"
MC_KIND = "MachineConfig"
KERNEL_TYPES = ("", "default", "realtime", "64k-pages")
MC_SPEC_FIELDS = ("config", "osImageURL", "kernelArguments", "kernelType", "extensions", "fips",
                  "baseOSExtensionsContainerImage")


def is_machineconfig(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    return doc.get("kind") == MC_KIND or "apiVersion" in doc or ("spec" in doc and "ignition" not in doc)


def check_node_config(data: Union[bytes, str, dict], source: str = "<input>"
                      ) -> Tuple[Optional[NodeConfig], List[Problem]]:
    """(NodeConfig or None when there is an error, every problem found). Syntax errors raise."""
    if isinstance(data, dict):
        doc, problems = data, []
    else:
        doc, problems = parse_document_with_warnings(data, source)
        problems = list(problems)
    if is_machineconfig(doc):
        nc, found = _check_machineconfig(doc, source)
    elif not isinstance(data, dict) and not _starts_as_json_object(data):
        # Ignition reads JSON only (Go's encoding/json): YAML, a comment or a "---" before the
        # object is refused there, so here too; MachineConfigs may be YAML
        found = [Problem("$", "an Ignition config must be JSON (Ignition reads nothing else): the file must "
                         "start with '{' (only blanks before it)", rule="syntax")]
        nc = None
    else:
        found = validate_ignition(doc)  # a bare spec 2 config is refused, as Ignition 3 refuses it
        nc = None
        if not any(p.is_error for p in found):
            nc = NodeConfig(ignition=_copy(doc, source), name=_name_from_source(source))
    problems.extend(_with_source(p, source) for p in found)
    problems = with_positions(problems, data)  # line and column, as ignition-validate gives them
    if any(p.is_error for p in problems):
        return None, problems
    return nc, problems


def _copy(doc: Any, source: str) -> Any:
    """A deep copy of ``doc``; a document too deep for Python's recursion is a ConfigError
    (parsed text never is: parse refuses more than MAX_DEPTH levels; a dict passed in may be)."""
    try:
        return copy.deepcopy(doc)
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply", source=source) from None


def _starts_as_json_object(data: Union[bytes, str]) -> bool:
    head = data[:4096]
    if isinstance(head, bytes):
        head = head.decode("utf-8", "replace")
    return head.lstrip(" \t\r\n")[:1] == "{"


def load_node_config(data: Union[bytes, str, dict], source: str = "<input>") -> NodeConfig:
    """The NodeConfig, or ConfigError(problems=...) naming every error. Warnings are logged."""
    nc, problems = check_node_config(data, source)
    for p in problems:
        if not p.is_error:
            log.warning("%s", p)
    if nc is None:
        errors = [p for p in problems if p.is_error]
        raise ConfigError(f"invalid config ({len(errors)} error{'s' if len(errors) != 1 else ''})",
                          problems=problems, source=source if source != "<input>" else "")
    return nc


def check_ignition(config: Dict[str, Any]) -> Tuple[Dict[str, Any], List[Problem]]:
    """(the config in spec 3.x, problems): a spec 2.2 config is converted first, as the MCO does."""
    if not translate2.is_spec2(config):
        return config, validate_ignition(config)
    converted, problems = translate2.translate(config)
    if converted is None:
        return config, problems
    back = translate2.source_index(config)
    found = [Problem(back(p.path), p.message, p.rule, p.severity, **_value_kw(p)) for p in validate_ignition(converted)]
    version = config["ignition"]["version"]
    note = Problem("$.ignition.version", f"Ignition spec {version} converted to {converted['ignition']['version']} "
                   "as the MCO does (files' filesystem: root into the path, overwrite: true unless append, "
                   "units' enabled kept)", "converted-spec2", severity="warning")
    return converted, [note] + found


def convert_spec2_machine_config(doc: Dict[str, Any], source: str = "") -> Tuple[Dict[str, Any], List[Problem]]:
    """A MachineConfig whose ``spec.config`` is spec 2.2 with it converted to 3.2 (the server's
    state loader: the MCO accepts such objects, helpers.go:612-668), or the errors that stop it."""
    spec_d = doc.get("spec")
    config = spec_d.get("config") if isinstance(spec_d, dict) else None
    if not translate2.is_spec2(config):
        return doc, []
    converted, problems = check_ignition(config)
    errors = [Problem("$.spec.config" + p.path[1:], p.message, p.rule, **_value_kw(p), source=source)
              for p in problems if p.is_error]
    if errors:
        return doc, errors
    log.info("%s: Ignition spec %s converted to %s", source or "MachineConfig", config["ignition"]["version"],
             converted["ignition"]["version"])
    return dict(doc, spec=dict(spec_d, config=converted)), []


def nodeconfig_to_machineconfig(nc: NodeConfig, name: str) -> Dict[str, Any]:
    """The MachineConfig (MCO shape) carrying ``nc``."""
    return {
        "apiVersion": MC_API_VERSION,
        "kind": MC_KIND,
        "metadata": {"name": name},
        "spec": {
            "config": copy.deepcopy(nc.ignition),
            "osImageURL": nc.os_image_url,
            "kernelArguments": list(nc.kernel_arguments),
            "kernelType": nc.kernel_type,
            "extensions": list(nc.extensions),
            "fips": nc.fips,
        },
    }


def _name_from_source(source: str) -> str:
    if not source or source in ("<input>", "-", "<stdin>"):
        return ""
    return os.path.basename(source)


def _with_source(p: Problem, source: str) -> Problem:
    if p.source or not source or source == "<input>":
        return p
    return Problem(p.path, p.message, p.rule, p.severity, **_value_kw(p), source=source)


def _value_kw(p: Problem) -> dict:
    d = p.to_dict()
    return {"value": d["value"]} if "value" in d else {}


def _prefixed(p: Problem, prefix: str) -> Problem:
    path = prefix + p.path[1:] if p.path.startswith("$") else f"{prefix}.{p.path}"
    return Problem(path, p.message, p.rule, p.severity, **_value_kw(p), source=p.source)


def _check_machineconfig(doc: dict, source: str) -> Tuple[Optional[NodeConfig], List[Problem]]:
    problems: List[Problem] = []

    def err(path: str, message: str, rule: str, **kw: Any) -> None:
        problems.append(Problem(path, message, rule=rule, **kw))

    def warn(path: str, message: str, rule: str, **kw: Any) -> None:
        problems.append(Problem(path, message, rule=rule, severity="warning", **kw))

    api = doc.get("apiVersion")
    if api is not None and api != MC_API_VERSION:
        err("$.apiVersion", f"expected {MC_API_VERSION!r}", "mc-api-version", value=api)
    kind = doc.get("kind")
    if kind != MC_KIND:
        err("$.kind", f"expected {MC_KIND!r}", "mc-kind", value=kind)
    metadata = doc.get("metadata")
    name = ""
    if metadata is not None and not isinstance(metadata, dict):
        err("$.metadata", "wrong type: expected object", "type")
    elif isinstance(metadata, dict):
        raw_name = metadata.get("name")
        if raw_name is not None and not isinstance(raw_name, str):
            err("$.metadata.name", "wrong type: expected string", "type", value=raw_name)
        else:
            name = raw_name or ""
    specd = doc.get("spec")
    if specd is None:
        specd = {}
    if not isinstance(specd, dict):
        err("$.spec", "wrong type: expected object", "type")
        return None, problems
    for key in specd:
        if key not in MC_SPEC_FIELDS:
            warn(f"$.spec.{key}", f"unused key {key}", "unused-key")

    config = specd.get("config")
    if config is None or config == {}:
        ignition: Dict[str, Any] = {"ignition": {"version": spec.DEFAULT_VERSION}}
    elif not isinstance(config, dict):
        err("$.spec.config", "wrong type: expected object (an Ignition config)", "type")
        ignition = {}
    else:
        ignition, found = check_ignition(config)
        problems.extend(_prefixed(p, "$.spec.config") for p in found)

    os_image = specd.get("osImageURL")
    if os_image is not None and not isinstance(os_image, str):
        err("$.spec.osImageURL", "wrong type: expected string", "type", value=os_image)
        os_image = ""
    kargs = _string_list(specd, "kernelArguments", err)
    extensions = _string_list(specd, "extensions", err)
    for i, karg in enumerate(kargs):
        if not karg.strip():
            err(f"$.spec.kernelArguments.{i}", "empty kernel argument", "karg-empty")
    kernel_type = specd.get("kernelType")
    if kernel_type is None:
        kernel_type = ""
    if not isinstance(kernel_type, str) or kernel_type not in KERNEL_TYPES:
        err("$.spec.kernelType", "kernelType must be one of \"\", default, realtime, 64k-pages",
            "kernel-type", value=kernel_type)
        kernel_type = ""
    fips = specd.get("fips")
    if fips is None:
        fips = False
    if not isinstance(fips, bool):
        err("$.spec.fips", "wrong type: expected boolean", "type", value=fips)
        fips = False
    if any(p.is_error for p in problems):
        return None, problems
    nc = NodeConfig(
        ignition=_copy(ignition, source),
        os_image_url=os_image or "",
        kernel_arguments=tuple(kargs),
        kernel_type=kernel_type,
        extensions=tuple(extensions),
        fips=fips,
        name=name or _name_from_source(source),
    )
    return nc, problems


def _string_list(specd: dict, key: str, err) -> List[str]:
    value = specd.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        err(f"$.spec.{key}", "wrong type: expected array of strings", "type")
        return []
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            err(f"$.spec.{key}.{i}", "wrong type: expected string", "type", value=item)
        else:
            out.append(item)
    return out
