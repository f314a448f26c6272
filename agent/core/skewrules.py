"""Boot image skew rules (pure): the rules document as served in a node's config
(``/etc/node-agent/boot-image-skew.json``, JSON or YAML) read and validated into ``SkewRules``.
The document's fields and the decision they drive are described in ``agent.core.skew``, which also
exports every name of this module."""

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import yaml

from agent.core.versions import OcpVersion, RhcosMinimum, VersionError, parse_ocp_version, parse_rhcos_minimum
from agent.errors import ConfigError, Problem
from agent.ignition.yamlsafe import guard, safe_load

MODE_ENFORCE = "Enforce"
MODE_WARN = "Warn"
MODE_NONE = "None"
MODES = (MODE_ENFORCE, MODE_WARN, MODE_NONE)

_TOP_KEYS = ("mode", "minimum", "target", "allowMajorUpgrade")
_MIN_KEYS = ("rhcosVersion", "ocpVersion")
_TARGET_KEYS = ("rhelMajor", "osImageURL")


@dataclass(frozen=True)
class SkewRules:
    mode: str
    minimum_rhcos: Optional[RhcosMinimum] = None
    minimum_ocp: Optional[OcpVersion] = None
    target_rhel_major: Optional[int] = None
    target_os_image_url: Optional[str] = None
    allow_major_upgrade: bool = False
    source: str = ""

    @property
    def has_minimum(self) -> bool:
        return self.minimum_rhcos is not None or self.minimum_ocp is not None

    def required_dict(self) -> Optional[Dict[str, str]]:
        if self.minimum_rhcos is not None:
            return {"rhcosVersion": self.minimum_rhcos.raw}
        if self.minimum_ocp is not None:
            return {"ocpVersion": self.minimum_ocp.raw}
        return None

    def target_dict(self) -> Optional[Dict[str, Any]]:
        if self.target_rhel_major is None and self.target_os_image_url is None:
            return None
        return {"rhelMajor": self.target_rhel_major, "osImageURL": self.target_os_image_url}

    def describe_minimum(self) -> str:
        if self.minimum_rhcos is not None:
            return f"RHCOS {self.minimum_rhcos.raw}"
        if self.minimum_ocp is not None:
            return f"OpenShift {self.minimum_ocp.raw}"
        return ""


class _TextFloatLoader(yaml.SafeLoader):
    """YAML loader that keeps floats as their text, so ``rhcosVersion: 9.10`` is "9.10", not 9.1."""


_TextFloatLoader.add_constructor(
    "tag:yaml.org,2002:float", lambda loader, node: loader.construct_scalar(node))
guard(_TextFloatLoader)  # a scalar PyYAML cannot read (2001-13-45, !!int x) is a YAML error


def load_rules_text(text: str, source: str = "") -> Any:
    """Parse a rules document (JSON, else YAML). Numbers with a fraction stay text (see above)."""
    try:
        return json.loads(text, parse_float=str)
    except (ValueError, RecursionError):  # not JSON, or too deep for it: YAML says why
        pass
    try:
        return safe_load(text, _TextFloatLoader)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"boot image skew rules are neither JSON nor YAML{where}: {problem}",
                          [Problem("$", f"not JSON or YAML{where}: {problem}", source=source)],
                          source=source)


def _version_field(problems: List[Problem], path: str, value: Any, parse, source: str):
    if isinstance(value, float):
        problems.append(Problem(path, "must be a string, quoted (as a number, '9.10' would read as 9.1)",
                                value=value, source=source))
        return None
    try:
        return parse(value)
    except VersionError as exc:
        problems.append(Problem(path, str(exc), source=source))
        return None


def _unknown_keys(problems: List[Problem], obj: dict, known: Tuple[str, ...], prefix: str, source: str):
    for key in obj:
        if key not in known:
            problems.append(Problem(f"{prefix}.{key}", f"unknown field (known: {', '.join(known)})",
                                    source=source))


def parse_rules(doc: Any, source: str = "") -> SkewRules:
    """Validate a rules document strictly; ConfigError lists every problem with its JSON path."""
    problems: List[Problem] = []
    if not isinstance(doc, dict):
        what = "empty" if doc is None else f"a {type(doc).__name__}"
        problems.append(Problem("$", f"the skew rules must be an object with at least 'mode', not {what}",
                                source=source))
        raise ConfigError("invalid boot image skew rules", problems, source=source)
    if "kind" in doc or "spec" in doc:
        problems.append(Problem("$", "this looks like a Kubernetes object (MachineConfiguration?); the "
                                "node-side rules are {\"mode\": ..., \"minimum\": ..., \"target\": ...}",
                                source=source))
        raise ConfigError("invalid boot image skew rules", problems, source=source)
    _unknown_keys(problems, doc, _TOP_KEYS, "$", source)

    mode = doc.get("mode")
    if "mode" not in doc:
        problems.append(Problem("$.mode", f"required: one of {', '.join(MODES)}", source=source))
    elif mode not in MODES:
        hint = ""
        if isinstance(mode, str) and mode.lower() in [m.lower() for m in MODES]:
            hint = " (case matters)"
        elif mode in ("Manual", "Automatic"):
            hint = " (the cluster API's Manual/Automatic become Enforce on nodes)"
        problems.append(Problem("$.mode", f"must be one of {', '.join(MODES)}{hint}", value=mode,
                                source=source))

    min_rhcos = min_ocp = None
    minimum = doc.get("minimum")
    if "minimum" in doc and minimum is not None:
        if not isinstance(minimum, dict):
            problems.append(Problem("$.minimum", "must be an object with rhcosVersion or ocpVersion",
                                    value=minimum, source=source))
        else:
            _unknown_keys(problems, minimum, _MIN_KEYS, "$.minimum", source)
            given = [k for k in _MIN_KEYS if k in minimum]
            if len(given) != 1:
                problems.append(Problem("$.minimum", "must hold exactly one of rhcosVersion, ocpVersion "
                                        f"(got {len(given)})", source=source))
            if "rhcosVersion" in minimum:
                min_rhcos = _version_field(problems, "$.minimum.rhcosVersion", minimum["rhcosVersion"],
                                           parse_rhcos_minimum, source)
            if "ocpVersion" in minimum:
                min_ocp = _version_field(problems, "$.minimum.ocpVersion", minimum["ocpVersion"],
                                         parse_ocp_version, source)

    rhel_major = image = None
    target = doc.get("target")
    if "target" in doc and target is not None:
        if not isinstance(target, dict):
            problems.append(Problem("$.target", "must be an object with rhelMajor and/or osImageURL",
                                    value=target, source=source))
        else:
            _unknown_keys(problems, target, _TARGET_KEYS, "$.target", source)
            if "rhelMajor" in target:
                rhel_major = target["rhelMajor"]
                if isinstance(rhel_major, bool) or not isinstance(rhel_major, int):
                    problems.append(Problem("$.target.rhelMajor", "must be an integer such as 9",
                                            value=rhel_major, source=source))
                    rhel_major = None
                elif rhel_major < 8:
                    problems.append(Problem("$.target.rhelMajor", "must be 8 or more (RHCOS is RHEL 8 and later)",
                                            value=rhel_major, source=source))
                    rhel_major = None
            if "osImageURL" in target:
                image = target["osImageURL"]
                if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
                    problems.append(Problem("$.target.osImageURL", "must be a non-empty image reference "
                                            "without spaces", value=image, source=source))
                    image = None

    allow = doc.get("allowMajorUpgrade")
    if allow is None:  # absent or null, as for the other optional fields
        allow = False
    elif not isinstance(allow, bool):
        problems.append(Problem("$.allowMajorUpgrade", "must be true or false", value=allow, source=source))
        allow = False

    if problems:
        raise ConfigError("invalid boot image skew rules", problems, source=source)
    return SkewRules(mode=mode, minimum_rhcos=min_rhcos, minimum_ocp=min_ocp, target_rhel_major=rhel_major,
                     target_os_image_url=image, allow_major_upgrade=allow, source=source)
