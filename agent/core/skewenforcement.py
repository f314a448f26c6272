"""``spec.bootImageSkewEnforcement`` as the API admits it (pure; the server's
``agent.server.rollout.skewpolicy`` and ``node-agent validate`` both check it here).

The API (openshift/api machineconfiguration/v1 types_machineconfiguration.go,
BootImageSkewEnforcementConfig and ClusterBootImageManual):

- ``mode`` is required and only ``Manual`` or ``None`` (``Automatic`` is a status-only mode the
  operator picks when the field is omitted);
- ``manual`` is required when mode is Manual and forbidden otherwise;
- ``manual.mode`` (``OCPVersion`` | ``RHCOSVersion``) discriminates: ``ocpVersion`` is required
  with OCPVersion and forbidden otherwise (``^[0-9]+\\.[0-9]+\\.[0-9]+$``, 5-10 characters);
  ``rhcosVersion`` is required with RHCOSVersion and forbidden otherwise
  (``^[0-9]+\\.[0-9]+\\.([0-9]{8}|[0-9]{12})-[0-9]+$``, 14-21 characters).

A Manual ``rhcosVersion`` states the oldest boot image in use; like the MCO's skew check
(pkg/operator/status.go:796-856) only its RHEL major.minor is compared, never its build date.
"""

import re
from typing import Any, List

from agent.errors import Problem

PATH = "$.spec.bootImageSkewEnforcement"
SPEC_MODES = ("Manual", "None")
MANUAL_MODES = {"OCPVersion": "ocpVersion", "RHCOSVersion": "rhcosVersion"}
OCP_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
RHCOS_RE = re.compile(r"^[0-9]+\.[0-9]+\.([0-9]{8}|[0-9]{12})-[0-9]+$")
LENGTHS = {"ocpVersion": (5, 10), "rhcosVersion": (14, 21)}


def check(skew: Any, src: str) -> List[Problem]:
    """Problems of ``spec.bootImageSkewEnforcement`` (None when absent: nothing to check)."""
    out: List[Problem] = []

    def bad(path: str, message: str, value: Any = None) -> None:
        kw = {"value": value} if value is not None else {}
        out.append(Problem(path, message, "skew", source=src, **kw))

    if not isinstance(skew, dict):
        bad(PATH, "must be a map with mode (Manual or None) and, for Manual, manual")
        return out
    for key in sorted(set(skew) - {"mode", "manual"}, key=str):  # YAML keys may be of any type
        bad(f"{PATH}.{key}", "unknown field: the API has mode and manual only")
    mode = skew.get("mode")
    if not isinstance(mode, str) or mode not in SPEC_MODES:
        bad(f"{PATH}.mode", "must be Manual or None (Automatic is what the cluster uses when "
                            "bootImageSkewEnforcement is left out; it cannot be set)", mode)
        return out
    manual = skew.get("manual")
    if mode == "None":
        if manual is not None:
            bad(f"{PATH}.manual", "forbidden when mode is None (manual is required when mode is Manual, "
                                  "and forbidden otherwise)")
        return out
    if not isinstance(manual, dict) or not manual:
        bad(f"{PATH}.manual", "required when mode is Manual: {mode: OCPVersion, ocpVersion: 4.13.0} or "
                              "{mode: RHCOSVersion, rhcosVersion: 9.2.20240101-0}")
        return out
    for key in sorted(set(manual) - {"mode", "ocpVersion", "rhcosVersion"}, key=str):
        bad(f"{PATH}.manual.{key}", "unknown field: manual has mode, ocpVersion and rhcosVersion")
    kind = manual.get("mode")
    if not isinstance(kind, str) or kind not in MANUAL_MODES:
        bad(f"{PATH}.manual.mode", "must be OCPVersion or RHCOSVersion (it says which version field is set)", kind)
        return out
    for mkind, key in MANUAL_MODES.items():
        present = manual.get(key) is not None
        where = f"{PATH}.manual.{key}"
        if mkind == kind and not present:
            bad(where, f"required when manual.mode is {kind}")
        elif mkind != kind and present:
            bad(where, f"forbidden when manual.mode is {kind} ({key} goes with mode {mkind})")
        elif present:
            _check_version(key, manual[key], where, bad)
    return out


def _check_version(key: str, value: Any, where: str, bad) -> None:
    if not isinstance(value, str):
        bad(where, "must be a string (quote it in YAML: a bare 9.2 is a number)", value)
        return
    low, high = LENGTHS[key]
    pattern = OCP_RE if key == "ocpVersion" else RHCOS_RE
    if not pattern.match(value) or not low <= len(value) <= high:
        if key == "ocpVersion":
            bad(where, "must match the OCP semver format x.y.z (5 to 10 characters), e.g. 4.13.0", value)
        else:
            bad(where, "must match [major].[minor].[datestamp(YYYYMMDD)]-[buildnumber] or the legacy "
                       "[major].[minor].[timestamp(YYYYMMDDHHmm)]-[buildnumber] (14 to 21 characters), e.g. "
                       "9.2.20240101-0 or 415.92.202311241643-0", value)
