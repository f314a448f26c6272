"""``spec.bootImageSkewEnforcement`` as the API admits it, and what the cluster makes of it (pure).

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
from typing import Any, Dict, List, Optional, Tuple

from agent.errors import Problem

PATH = "$.spec.bootImageSkewEnforcement"
SPEC_MODES = ("Manual", "None")
MANUAL_MODES = {"OCPVersion": "ocpVersion", "RHCOSVersion": "rhcosVersion"}
OCP_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
RHCOS_RE = re.compile(r"^[0-9]+\.[0-9]+\.([0-9]{8}|[0-9]{12})-[0-9]+$")
RHEL_SCHEME_RE = re.compile(r"([0-9]+)\.([0-9]+)\.[0-9]{8}-[0-9]+")
LENGTHS = {"ocpVersion": (5, 10), "rhcosVersion": (14, 21)}
# The skew limit a release states (upstream: OpenShift 4.13.0 / RHCOS on RHEL 9.2).
FLOOR_OCP = (4, 13, 0)
FLOOR_RHEL = (9, 2)


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


def rhel_of(rhcos_version: str) -> Optional[Tuple[int, int]]:
    """The RHEL (major, minor) an RHCOS version names: ``9.6.20250121-0`` -> (9, 6), legacy
    ``416.94.202411202104-0`` -> (9, 4)."""
    from agent.core.versions import VersionError, parse_version

    try:
        return parse_version(rhcos_version).rhel
    except VersionError:
        pass
    # The API's pattern admits X.Y.YYYYMMDD-N below RHEL 9 too (e.g. 8.6.20220101-0), which
    # no RHCOS build carries and agent.core.versions refuses as a full version: its X.Y is still
    # the RHEL it states. Passing the raw text on made every node refuse the served rules (65).
    m = RHEL_SCHEME_RE.fullmatch(rhcos_version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def manual_minimum(skew: Dict[str, Any]) -> Dict[str, str]:
    """The node-side minimum (agent.core.skew rules) for a valid Manual setting: an RHCOS boot image
    is compared by RHEL major.minor only, an OpenShift version as given."""
    manual = skew.get("manual") or {}
    kind = manual.get("mode") or ("RHCOSVersion" if manual.get("rhcosVersion") else "OCPVersion")
    if kind == "RHCOSVersion":
        rhel = rhel_of(str(manual.get("rhcosVersion")))
        return {"rhcosVersion": f"{rhel[0]}.{rhel[1]}" if rhel else str(manual.get("rhcosVersion"))}
    return {"ocpVersion": str(manual.get("ocpVersion"))}


def upgradeable(cluster_spec: Dict[str, Any]) -> Dict[str, Any]:
    """The cluster's Upgradeable condition from the boot image skew setting (upstream the MCO sets
    Upgradeable=False when the stated boot image is below the release's skew limit)."""
    skew = cluster_spec.get("bootImageSkewEnforcement")
    if not isinstance(skew, dict):
        return {"status": "True", "reason": "AsExpected",
                "message": "bootImageSkewEnforcement is not set: boot images are expected to be kept current "
                           "(Automatic)"}
    if skew.get("mode") == "None":
        return {"status": "True", "reason": "BootImageSkewEnforcementNone",
                "message": "boot image skew is not enforced (mode None): new nodes may fail to join "
                           "with old boot images"}
    manual = skew.get("manual") or {}
    if manual.get("mode") == "RHCOSVersion":
        image = str(manual.get("rhcosVersion"))
        rhel = rhel_of(image)
        below = rhel is not None and rhel < FLOOR_RHEL
        limit = f"RHCOS on RHEL {FLOOR_RHEL[0]}.{FLOOR_RHEL[1]}"
    else:
        image = str(manual.get("ocpVersion"))
        try:
            below = tuple(int(x) for x in image.split(".")) < FLOOR_OCP
        except ValueError:
            below = False
        limit = "OpenShift " + ".".join(map(str, FLOOR_OCP))
    if below:
        return {"status": "False", "reason": "BootImageSkewLimitExceeded",
                "message": f"the cluster's boot image {image} (spec.bootImageSkewEnforcement.manual) is older "
                           f"than the skew limit {limit}: update the boot images of the machine sets, then "
                           f"set manual to the new oldest boot image"}
    return {"status": "True", "reason": "AsExpected",
            "message": f"the cluster's boot image {image} is within the skew limit {limit}"}
