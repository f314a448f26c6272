"""Which Ignition spec version a client gets, from its ``Accept`` header, as the MCS decides (pure).

Upstream: openshift/machine-config-operator pkg/server/api.go:266-313 (parseAcceptHeader,
detectSpecVersionFromAcceptHeader) and the conversion switch of server.go:275-293:

- Media ranges are split on ``,``; parameters on ``;``. A range without ``/`` is ignored.
  ``version`` must be a full semantic version (``3.2`` is not one and counts as absent); ``q``
  defaults to 1. Ranges are ordered by q, highest first, keeping the header's order on ties.
- The first ``application/vnd.coreos.ignition+json`` range with a version decides: a version in
  [2.2.0, 3.0.0) gets spec 2.2.0; a version in [3.0.0, 4.0.0) gets the newest spec this server
  produces that is not newer than it (3.2.0 -> 3.2.0, 3.7.0 -> 3.6.0). Any other versioned
  Ignition range (1.x, 2.0/2.1, 4.x) is unsupported, unless a later range decides.
- No Ignition range with a version (no header, ``*/*``, ``application/json``, curl): spec 2.2.0,
  as the MCS ("we don't want to break existing behaviour").
- Only unsupported versions: ``UnsupportedVersion`` (the MCS answers 400).
"""

import re
from typing import List, NamedTuple, Optional, Tuple

from agent.ignition.spec import SUPPORTED_VERSIONS

IGNITION_SUBTYPE = "vnd.coreos.ignition+json"
SPEC2 = "2.2.0"
# every 3.x spec node-agent parses and converts to (agent/ignition/spec.py): 3.0.0 .. 3.6.0. The
# MCS stops at 3.5.0 (the MCO's internal spec); an Ignition asking for 3.6.0 gets 3.6.0 here.
SPEC3 = SUPPORTED_VERSIONS
KARGS_SINCE = (3, 3, 0)  # kernelArguments entered Ignition in spec 3.3.0
_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


class UnsupportedVersion(Exception):
    """Every versioned Ignition range named a spec this server cannot produce (HTTP 400)."""


class Range(NamedTuple):
    media: str
    version: Optional[Tuple[int, int, int, int]]  # (major, minor, patch, 0 if pre-release else 1)
    q: float


def _semver(text: str) -> Optional[Tuple[int, int, int, int]]:
    m = _SEMVER.match(text.strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), 0 if m.group(4) else 1


def parse_accept(header: Optional[str]) -> List[Range]:
    """The media ranges of ``header``, highest q first (stable), as upstream parseAcceptHeader."""
    out: List[Range] = []
    for value in (header or "").split(","):
        parts = [p.strip() for p in value.strip().split(";")]
        if "/" not in parts[0]:
            continue
        version = None
        q = None
        for ext in parts[1:]:
            if "=" not in ext:
                continue
            key, _, val = ext.partition("=")
            key, val = key.strip(), val.strip().strip('"')
            if key == "version" and version is None:
                version = _semver(val)
            elif key == "q" and q is None:
                try:
                    q = float(val)
                except ValueError:
                    q = None
        out.append(Range(parts[0].lower(), version, 1.0 if q is None else q))
    return sorted(out, key=lambda r: -r.q)


def spec_for(version: Tuple[int, int, int, int]) -> Optional[str]:
    """The spec served to a client asking for ``version``, or None when unsupported."""
    if (2, 2, 0, 1) <= version < (3, 0, 0, 0):
        return SPEC2
    if (3, 0, 0, 1) <= version < (4, 0, 0, 0):
        best = None
        for text in SPEC3:
            major, minor, patch = (int(x) for x in text.split("."))
            if (major, minor, patch, 1) <= version:
                best = text
        return best
    return None


def negotiate_version(header: Optional[str]) -> str:
    """The spec version to serve for ``Accept: header``; UnsupportedVersion when none fits."""
    unsupported = []
    for rng in parse_accept(header):
        if rng.media.split("/", 1)[1] != IGNITION_SUBTYPE or rng.version is None:
            continue
        spec = spec_for(rng.version)
        if spec is not None:
            return spec
        unsupported.append(".".join(str(x) for x in rng.version[:3]))
    if unsupported:
        raise UnsupportedVersion(
            f"unsupported Ignition version in Accept header ({', '.join(unsupported)}): this server serves "
            f"application/{IGNITION_SUBTYPE} version {SPEC2} and {SPEC3[0]} .. {SPEC3[-1]}")
    return SPEC2


def needs_kargs_in_machineconfig(spec_version: str) -> bool:
    """Below spec 3.3.0 Ignition has no kernelArguments: they go into the MachineConfig instead
    (upstream MigrateKernelArgsIfNecessary, server.go)."""
    return tuple(int(x) for x in spec_version.split(".")) < KARGS_SINCE
