"""Boot image / OS version strings: parse, describe and compare.

Three schemes are in use (REFERENCE §5):

* legacy RHCOS, up to OpenShift 4.18: ``415.92.202311241643-0`` is OpenShift 4.15 on RHEL 9.2,
  built 2023-11-24 16:43 (UTC), serial 0. The first segment is ``4`` + the OpenShift minor, the
  second the RHEL major digit + the RHEL minor. Early builds used an 8-digit date and a ``.``
  before the serial (``42.80.20191002.0``); both are accepted. The 4.1 form ``410.8.…`` (one
  RHEL digit) is not, since its first segment cannot be told apart from OpenShift 4.10.
* RHEL-based RHCOS, from OpenShift 4.19: ``9.6.20250121-0`` is RHEL 9.6 built 2025-01-21. It
  says nothing exact about OpenShift except that it is 4.19 or later.
* Fedora CoreOS: ``39.20240101.3.0`` is Fedora 39, snapshot 2024-01-01, stream 3, serial 0.

Versions are totally ordered. Within RHCOS the order is "newer boot image": legacy by
(OpenShift, RHEL, build time, serial), every legacy build before every RHEL-scheme build (the
scheme started with 4.19, after the last legacy release), RHEL-scheme by (RHEL, date, serial).
Fedora CoreOS sorts before RHCOS: an arbitrary but stable choice, because comparing versions of
different families means nothing; the skew decision never does it.
"""

import datetime
import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from agent.errors import ConfigError

SCHEME_LEGACY = "rhcos-legacy"
SCHEME_RHEL = "rhcos"
SCHEME_FCOS = "fcos"
SCHEME_UNKNOWN = "unknown"

FAMILY_RHCOS = "rhcos"
FAMILY_FCOS = "fcos"

# The first OpenShift release whose RHCOS versions follow RHEL (9.6.…).
RHEL_SCHEME_MIN_OCP = (4, 19)

_LEGACY_RE = re.compile(r"^4(\d{1,2})\.([89])(\d{1,2})\.(\d{8}|\d{12})[-.](\d+)$")
_RHEL_RE = re.compile(r"^(\d{1,2})\.(\d{1,2})\.(\d{8})-(\d+)$")
_FCOS_RE = re.compile(r"^(\d{2,3})\.(\d{8})\.(\d+)\.(\d+)$")
_RHEL_SHORT_RE = re.compile(r"^(\d{1,2})\.(\d{1,2})$")
_OCP_RE = re.compile(r"^(\d{1,2})\.(\d{1,3})(?:\.(\d{1,4}))?$")


class VersionError(ConfigError, ValueError):
    """A version string that is none of the known schemes. The message names the string."""


def _date(raw: str, digits: str) -> Tuple[datetime.date, Optional[str]]:
    """``YYYYMMDD`` or ``YYYYMMDDHHMM`` as (date, "HH:MM" or None); invalid dates are errors."""
    # Fixed-width slices, not strptime: its 1-or-2-digit fields can split a stamp the wrong way.
    hour, minute = (int(digits[8:10]), int(digits[10:12])) if len(digits) == 12 else (0, 0)
    try:
        stamp = datetime.datetime(int(digits[0:4]), int(digits[4:6]), int(digits[6:8]), hour, minute)
    except ValueError:
        raise VersionError(f"version {raw!r}: {digits!r} is not a valid build date")
    return stamp.date(), (stamp.strftime("%H:%M") if len(digits) == 12 else None)


def _no_leading_zero(raw: str, *numbers: str) -> None:
    for n in numbers:
        if len(n) > 1 and n.startswith("0"):
            raise VersionError(f"version {raw!r}: {n!r} has a leading zero")


@dataclass(frozen=True, eq=False)
class OSVersion:
    """One parsed boot image / OS version. Compare with ``<``, ``==`` etc. (total order)."""

    raw: str
    scheme: str  # SCHEME_LEGACY, SCHEME_RHEL or SCHEME_FCOS
    build_date: datetime.date
    serial: int
    rhel_major: Optional[int] = None
    rhel_minor: Optional[int] = None
    ocp_major: Optional[int] = None  # exact OpenShift version: legacy RHCOS only
    ocp_minor: Optional[int] = None
    build_time: Optional[str] = None  # "HH:MM", legacy 12-digit stamps only
    fedora_major: Optional[int] = None
    stream: Optional[int] = None  # FCOS stream number

    @property
    def family(self) -> str:
        return FAMILY_FCOS if self.scheme == SCHEME_FCOS else FAMILY_RHCOS

    @property
    def rhel(self) -> Optional[Tuple[int, int]]:
        if self.rhel_major is None or self.rhel_minor is None:
            return None
        return (self.rhel_major, self.rhel_minor)

    @property
    def ocp(self) -> Optional[Tuple[int, int]]:
        """The exact OpenShift (major, minor), when the version says it (legacy RHCOS)."""
        if self.ocp_major is None or self.ocp_minor is None:
            return None
        return (self.ocp_major, self.ocp_minor)

    @property
    def ocp_at_least(self) -> Optional[Tuple[int, int]]:
        """A lower bound on OpenShift: exact for legacy, 4.19 for RHEL-scheme, None for FCOS."""
        if self.scheme == SCHEME_LEGACY:
            return self.ocp
        if self.scheme == SCHEME_RHEL:
            return RHEL_SCHEME_MIN_OCP
        return None

    @property
    def build_key(self) -> Tuple[str, str]:
        """(YYYYMMDD, HHMM or "") for comparing build times across schemes."""
        return (self.build_date.strftime("%Y%m%d"), (self.build_time or "").replace(":", ""))

    def sort_key(self) -> tuple:
        date, time = self.build_key
        if self.scheme == SCHEME_FCOS:
            return (0, self.fedora_major, date, self.stream, self.serial)
        if self.scheme == SCHEME_LEGACY:
            return (1, 0, self.ocp_major, self.ocp_minor, self.rhel_major, self.rhel_minor,
                    date, time, self.serial)
        return (1, 1, self.rhel_major, self.rhel_minor, date, time, self.serial)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, OSVersion):
            return NotImplemented
        return self.sort_key() == other.sort_key()

    def __hash__(self) -> int:
        return hash(self.sort_key())

    def __lt__(self, other: "OSVersion") -> bool:
        if not isinstance(other, OSVersion):
            return NotImplemented
        return self.sort_key() < other.sort_key()

    def __le__(self, other: "OSVersion") -> bool:
        if not isinstance(other, OSVersion):
            return NotImplemented
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: "OSVersion") -> bool:
        if not isinstance(other, OSVersion):
            return NotImplemented
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: "OSVersion") -> bool:
        if not isinstance(other, OSVersion):
            return NotImplemented
        return self.sort_key() >= other.sort_key()

    def describe(self) -> str:
        """Human words: ``RHCOS 415.92.202311241643-0 (OpenShift 4.15, RHEL 9.2)``."""
        if self.scheme == SCHEME_FCOS:
            return f"Fedora CoreOS {self.raw} (Fedora {self.fedora_major})"
        if self.scheme == SCHEME_LEGACY:
            return (f"RHCOS {self.raw} (OpenShift {self.ocp_major}.{self.ocp_minor}, "
                    f"RHEL {self.rhel_major}.{self.rhel_minor})")
        return (f"RHCOS {self.raw} (RHEL {self.rhel_major}.{self.rhel_minor}, "
                f"OpenShift {RHEL_SCHEME_MIN_OCP[0]}.{RHEL_SCHEME_MIN_OCP[1]} or later)")

    def to_dict(self) -> Dict[str, Any]:
        """The ``booted`` object of ``node-agent skew --json``."""
        at_least = self.ocp_at_least
        return {
            "raw": self.raw,
            "scheme": self.scheme,
            "family": self.family,
            "rhel": f"{self.rhel_major}.{self.rhel_minor}" if self.rhel else None,
            "rhelMajor": self.rhel_major,
            "rhelMinor": self.rhel_minor,
            "ocp": f"{self.ocp_major}.{self.ocp_minor}" if self.ocp else None,
            "ocpAtLeast": f"{at_least[0]}.{at_least[1]}" if at_least else None,
            "fedora": self.fedora_major,
            "buildDate": self.build_date.isoformat(),
            "buildTime": self.build_time,
            "serial": self.serial,
            "stream": self.stream,
        }


def unknown_dict(raw: Optional[str], error: str) -> Dict[str, Any]:
    """The ``booted`` object when the version is unknown: same keys, nulls, plus ``error``."""
    return {
        "raw": raw, "scheme": SCHEME_UNKNOWN, "family": None, "rhel": None, "rhelMajor": None,
        "rhelMinor": None, "ocp": None, "ocpAtLeast": None, "fedora": None, "buildDate": None,
        "buildTime": None, "serial": None, "stream": None, "error": error,
    }


def parse_version(raw: Any) -> OSVersion:
    """Parse a boot image version of any known scheme; VersionError (naming it) otherwise."""
    if not isinstance(raw, str):
        raise VersionError(f"version {raw!r} is not a string")
    m = _LEGACY_RE.fullmatch(raw)
    if m:
        ocp_minor, rhel_major, rhel_minor, stamp, serial = m.groups()
        _no_leading_zero(raw, ocp_minor, rhel_minor, serial)
        date, time = _date(raw, stamp)
        return OSVersion(raw=raw, scheme=SCHEME_LEGACY, build_date=date, build_time=time,
                         serial=int(serial), rhel_major=int(rhel_major), rhel_minor=int(rhel_minor),
                         ocp_major=4, ocp_minor=int(ocp_minor))
    m = _RHEL_RE.fullmatch(raw)
    if m:
        major, minor, stamp, serial = m.groups()
        _no_leading_zero(raw, major, minor, serial)
        if int(major) < 9:
            raise VersionError(
                f"version {raw!r}: RHEL-based RHCOS versions start at RHEL 9 (OpenShift 4.19)")
        date, _ = _date(raw, stamp)
        return OSVersion(raw=raw, scheme=SCHEME_RHEL, build_date=date, serial=int(serial),
                         rhel_major=int(major), rhel_minor=int(minor))
    m = _FCOS_RE.fullmatch(raw)
    if m:
        major, stamp, stream, serial = m.groups()
        _no_leading_zero(raw, major, stream, serial)
        date, _ = _date(raw, stamp)
        return OSVersion(raw=raw, scheme=SCHEME_FCOS, build_date=date, serial=int(serial),
                         fedora_major=int(major), stream=int(stream))
    raise VersionError(
        f"version {raw!r} is not a known boot image version (expected legacy RHCOS like "
        "'415.92.202311241643-0', RHEL-based RHCOS like '9.6.20250121-0', or Fedora CoreOS "
        "like '39.20240101.3.0')")


@dataclass(frozen=True)
class RhcosMinimum:
    """A ``minimum.rhcosVersion``: ``X.Y`` (RHEL version only) or a full RHCOS version."""

    raw: str
    rhel_major: int
    rhel_minor: int
    full: Optional[OSVersion] = None  # set when a build is named: compare its build time too

    @property
    def rhel(self) -> Tuple[int, int]:
        return (self.rhel_major, self.rhel_minor)


def parse_rhcos_minimum(raw: Any) -> RhcosMinimum:
    """``9.2``, ``9.2.20240101-0`` or legacy ``415.92.202311241643-0``; VersionError otherwise."""
    if not isinstance(raw, str):
        raise VersionError(f"RHCOS version {raw!r} is not a string")
    m = _RHEL_SHORT_RE.fullmatch(raw)
    if m:
        major, minor = m.groups()
        _no_leading_zero(raw, major, minor)
        if int(major) < 8:
            raise VersionError(
                f"RHCOS version {raw!r} names RHEL {major}, which RHCOS never used; if it is an "
                "OpenShift version, give it as ocpVersion")
        return RhcosMinimum(raw=raw, rhel_major=int(major), rhel_minor=int(minor))
    try:
        full = parse_version(raw)
    except VersionError:
        full = None
    if full is None or full.family != FAMILY_RHCOS:
        raise VersionError(
            f"RHCOS version {raw!r} is neither 'X.Y' (a RHEL version such as '9.2') nor a full "
            "RHCOS version such as '9.2.20240101-0' or '415.92.202311241643-0'")
    assert full.rhel_major is not None and full.rhel_minor is not None
    return RhcosMinimum(raw=raw, rhel_major=full.rhel_major, rhel_minor=full.rhel_minor, full=full)


@dataclass(frozen=True)
class OcpVersion:
    """An OpenShift release ``X.Y`` or ``X.Y.Z`` (``patch`` None when not given)."""

    raw: str
    major: int
    minor: int
    patch: Optional[int] = None

    @property
    def minor_key(self) -> Tuple[int, int]:
        return (self.major, self.minor)


def parse_ocp_version(raw: Any) -> OcpVersion:
    if not isinstance(raw, str):
        raise VersionError(f"OpenShift version {raw!r} is not a string")
    m = _OCP_RE.fullmatch(raw)
    if not m:
        raise VersionError(f"OpenShift version {raw!r} is not 'X.Y' or 'X.Y.Z' (such as '4.13.0')")
    major, minor, patch = m.groups()
    _no_leading_zero(raw, major, minor, *([patch] if patch else []))
    if int(major) < 4:
        raise VersionError(f"OpenShift version {raw!r}: boot image skew applies to OpenShift 4 and later")
    if int(major) >= 8:
        raise VersionError(
            f"OpenShift version {raw!r} looks like a RHEL version; give it as rhcosVersion")
    return OcpVersion(raw=raw, major=int(major), minor=int(minor),
                      patch=int(patch) if patch is not None else None)
