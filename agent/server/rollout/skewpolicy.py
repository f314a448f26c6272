"""``spec.bootImageSkewEnforcement``: what the cluster makes of it (pure): the oldest boot image
in use and what it means for the rules served to nodes. What the API admits (modes, manual,
version formats) is checked in ``agent.core.skewenforcement``, where the API's rules are cited.
A Manual ``rhcosVersion`` is compared by its RHEL major.minor only, never its build date, like
the MCO's skew check (pkg/operator/status.go:796-856).
"""

import re
from typing import Any, Dict, Optional, Tuple

from agent.core.skewenforcement import (  # noqa: F401 - the checks moved to the core (node-agent validate)
    LENGTHS,
    MANUAL_MODES,
    OCP_RE,
    PATH,
    RHCOS_RE,
    SPEC_MODES,
    check,
)

RHEL_SCHEME_RE = re.compile(r"([0-9]+)\.([0-9]+)\.[0-9]{8}-[0-9]+")
# The skew limit a release states (upstream: OpenShift 4.13.0 / RHCOS on RHEL 9.2).
FLOOR_OCP = (4, 13, 0)
FLOOR_RHEL = (9, 2)


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
