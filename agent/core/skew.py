"""Boot image skew: the rules, the booted version from the aleph file, and the decision.

Everything here is a pure function of data (bytes and dicts in, values out); reading files
inside a root is the job of ``agent.node.skewcheck`` and ``agent.commands.skew``. Reading and
validating the rules document is ``agent.core.skewrules`` (its names import from here too).

Rules document (JSON or YAML; served in the config at ``/etc/node-agent/boot-image-skew.json``)::

    {"mode": "Enforce" | "Warn" | "None",
     "minimum": {"rhcosVersion": "9.2"} | {"ocpVersion": "4.13.0"},
     "target": {"rhelMajor": 9, "osImageURL": "quay.io/..."},
     "allowMajorUpgrade": false}

Only ``mode`` is required. ``minimum`` holds exactly one of its two keys.

Decision, in this order (first match wins):

1. no rules served -> warn ``NoSkewRules``; mode ``None`` -> ok ``SkewEnforcementOff``.
2. booted version unknown (aleph missing, corrupt, or an unknown scheme) -> warn
   ``BootImageVersionUnknown``: never refuse for lack of information.
3. ``target.rhelMajor`` given (the target family is then RHCOS/RHEL): a Fedora CoreOS boot ->
   warn ``BootImageFamilyMismatch``. Booted RHEL major above the target's, or the target two or
   more majors above -> refuse ``BootImageMajorMismatch`` (Enforce and Warn alike); the target
   one major above -> refuse ``BootImageMajorMismatch`` unless ``allowMajorUpgrade``.
   Without ``rhelMajor`` the target major (and family) is unknown: these checks are skipped.
4. ``minimum``: a Fedora CoreOS boot cannot be compared with an RHCOS/OpenShift minimum -> warn
   ``BootImageFamilyMismatch``. Below the minimum -> ``BootImageTooOld``: refuse in Enforce,
   warn in Warn. When the answer cannot be known (an OpenShift minimum above 4.19, or with a
   z-stream, against a version that only bounds OpenShift) -> warn ``BootImageSkewUndecided``.
   ``rhcosVersion: X.Y`` compares the RHEL version; a full version compares RHEL version, then
   build date (and time and serial when both sides carry them). ``ocpVersion`` compares the
   OpenShift version: exact for legacy RHCOS; RHEL-based RHCOS means OpenShift 4.19 or later.
5. otherwise ok ``BootImageOK``.

So Fedora CoreOS nodes (OKD) are checked only for "rules present / mode": give no ``rhelMajor``
and no ``minimum`` for an FCOS pool and the decision is ok; anything RHCOS-specific yields a warn.
"""

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from agent.core.skewrules import (  # noqa: F401 (re-exported: the rules live there)
    MODE_ENFORCE,
    MODE_NONE,
    MODE_WARN,
    MODES,
    SkewRules,
    load_rules_text,
    parse_rules,
)
from agent.core.versions import (
    FAMILY_FCOS,
    RHEL_SCHEME_MIN_OCP,
    SCHEME_LEGACY,
    SCHEME_RHEL,
    OcpVersion,
    OSVersion,
    RhcosMinimum,
    VersionError,
    parse_version,
    unknown_dict,
)

OK = "ok"
WARN = "warn"
REFUSE = "refuse"

# Reason codes (reported to the server, shown by `node-agent skew --json` as "code").
CODE_OK = "BootImageOK"
CODE_OFF = "SkewEnforcementOff"
CODE_NO_RULES = "NoSkewRules"
CODE_UNKNOWN = "BootImageVersionUnknown"
CODE_FAMILY = "BootImageFamilyMismatch"
CODE_TOO_OLD = "BootImageTooOld"
CODE_MAJOR = "BootImageMajorMismatch"
CODE_UNDECIDED = "BootImageSkewUndecided"


# ---------------------------------------------------------------------------------------------
# Booted version from the aleph file


@dataclass(frozen=True)
class BootedImage:
    """What was booted: a parsed version, or why it is unknown (``version`` None, ``error`` set)."""

    raw: Optional[str] = None
    version: Optional[OSVersion] = None
    error: str = ""
    source: str = ""

    @property
    def known(self) -> bool:
        return self.version is not None

    def describe(self) -> str:
        if self.version is not None:
            return self.version.describe()
        if self.raw:
            return f"an unrecognised boot image {self.raw!r}"
        return "an unknown boot image"

    def to_dict(self) -> Dict[str, Any]:
        if self.version is not None:
            return self.version.to_dict()
        return unknown_dict(self.raw, self.error)


def booted_from_aleph(data: Optional[bytes], source: str = "", missing: str = "") -> BootedImage:
    """Interpret aleph file bytes: ``version``, else ``build``. Never raises: unknown instead.

    ``data`` None means the file could not be read; ``missing`` then says why.
    """
    if data is None:
        return BootedImage(error=missing or f"{source or 'the aleph file'} could not be read", source=source)
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return BootedImage(error=f"{source or 'the aleph file'} is not valid JSON ({exc})", source=source)
    if not isinstance(doc, dict):
        return BootedImage(error=f"{source or 'the aleph file'} is not a JSON object", source=source)
    raw = None
    for key in ("version", "build"):
        value = doc.get(key)
        if isinstance(value, str) and value.strip():
            raw = value
            break
    if raw is None:
        return BootedImage(error=f"{source or 'the aleph file'} has neither 'version' nor 'build'",
                           source=source)
    try:
        return BootedImage(raw=raw, version=parse_version(raw), source=source)
    except VersionError as exc:
        return BootedImage(raw=raw, error=f"{source or 'the aleph file'}: {exc}", source=source)


# ---------------------------------------------------------------------------------------------
# Decision


@dataclass(frozen=True)
class SkewOutcome:
    decision: str  # OK, WARN or REFUSE
    code: str  # CODE_*
    reason: str  # a sentence a person can act on
    booted: BootedImage = field(default_factory=BootedImage)
    rules: Optional[SkewRules] = None
    needed: str = ""  # what boot image would pass, in words ("" when nothing is needed)

    @property
    def refused(self) -> bool:
        return self.decision == REFUSE

    def to_dict(self) -> Dict[str, Any]:
        """The ``node-agent skew --json`` document."""
        rules = self.rules
        return {
            "decision": self.decision,
            "reason": self.reason,
            "code": self.code,
            "booted": self.booted.to_dict(),
            "mode": rules.mode if rules else None,
            "required": rules.required_dict() if rules else None,
            "target": rules.target_dict() if rules else None,
            "allowMajorUpgrade": rules.allow_major_upgrade if rules else None,
            "needed": self.needed or None,
        }


MEETS = "meets"
BELOW = "below"
UNDECIDED = "undecided"


def _compare_rhcos(v: OSVersion, minimum: RhcosMinimum) -> Tuple[str, str]:
    assert v.rhel is not None
    if v.rhel != minimum.rhel:
        return (MEETS if v.rhel > minimum.rhel else BELOW), "RHEL version"
    full = minimum.full
    if full is None:
        return MEETS, "RHEL version"
    (bd, bt), (md, mt) = v.build_key, full.build_key
    if bd != md:
        return (MEETS if bd > md else BELOW), "build date"
    if bt and mt and bt != mt:
        return (MEETS if bt > mt else BELOW), "build time"
    if v.scheme == full.scheme and v.serial != full.serial:
        return (MEETS if v.serial > full.serial else BELOW), "build serial"
    return MEETS, "build"


def _compare_ocp(v: OSVersion, minimum: OcpVersion) -> Tuple[str, str]:
    want = minimum.minor_key
    needs_patch = bool(minimum.patch)
    if v.scheme == SCHEME_LEGACY:
        have = v.ocp
        assert have is not None
        if have != want:
            return (MEETS if have > want else BELOW), ""
        if needs_patch:
            return UNDECIDED, (f"the boot image is OpenShift {have[0]}.{have[1]} but does not say which "
                               f"z-stream, so it cannot be told whether it is at least {minimum.raw}")
        return MEETS, ""
    if v.scheme == SCHEME_RHEL:
        floor = RHEL_SCHEME_MIN_OCP
        if want < floor or (want == floor and not needs_patch):
            return MEETS, ""
        return UNDECIDED, (f"a RHEL-based RHCOS version only says OpenShift {floor[0]}.{floor[1]} or later, "
                           f"so it cannot be told whether it is at least {minimum.raw}")
    return UNDECIDED, "a Fedora CoreOS version says nothing about the OpenShift version"


def _needed(rules: SkewRules) -> str:
    parts = []
    if rules.target_rhel_major is not None:
        parts.append(f"a RHEL {rules.target_rhel_major} RHCOS boot image")
    if rules.has_minimum:
        parts.append(f"at least {rules.describe_minimum()}")
    if not parts:
        return ""
    return ", ".join(parts)


WHAT_TO_DO = " What to do: "  # where a refusal's reason ends and its one remedy begins


def remedy(code: str, rules: Optional[SkewRules]) -> str:
    """The one fix for a refusal, said alike by ``node-agent skew``, first boot's error and its
    ``what to do``, the console message and the node's Degraded report the server shows: a boot
    image the rules accept, or accepting the skew cluster-wide."""
    if code == CODE_MAJOR and rules is not None and rules.target_rhel_major is not None:
        fix = f"use a RHEL {rules.target_rhel_major} boot image for this pool"
        if rules.has_minimum:
            fix += f" (at least {rules.describe_minimum()})"
    elif rules is not None and rules.has_minimum:
        fix = f"update the boot image to at least {rules.describe_minimum()}"
    else:
        fix = "update the boot image used for new nodes"
    return (f"{fix}, then re-provision this node; or, to accept the skew, set the cluster's "
            "bootImageSkewEnforcement mode to None, then reboot this node")


def _what_to_do(code: str, rules: Optional[SkewRules]) -> str:
    return f"{WHAT_TO_DO}{remedy(code, rules)}."


def decide(booted: BootedImage, rules: Optional[SkewRules]) -> SkewOutcome:
    """The skew decision (see the module docstring for the order of checks)."""
    def out(decision: str, code: str, reason: str) -> SkewOutcome:
        needed = _needed(rules) if rules is not None and decision != OK else ""
        return SkewOutcome(decision=decision, code=code, reason=reason, booted=booted, rules=rules,
                           needed=needed)

    what = booted.describe()
    if rules is None:
        return out(WARN, CODE_NO_RULES,
                   f"No boot image skew rules were served with this node's config, so the booted {what} "
                   "was not checked; proceeding (serve /etc/node-agent/boot-image-skew.json to check it).")
    if rules.mode == MODE_NONE:
        return out(OK, CODE_OFF,
                   f"Boot image skew enforcement is off (mode None), so the booted {what} was not checked.")
    v = booted.version
    if v is None:
        return out(WARN, CODE_UNKNOWN,
                   f"The booted boot image version is unknown ({booted.error}), so skew was not checked; "
                   "proceeding. Check that the aleph file /sysroot/.coreos-aleph-version.json is intact.")

    notes = []
    target = rules.target_rhel_major
    if target is not None:
        if v.family == FAMILY_FCOS:
            return out(WARN, CODE_FAMILY,
                       f"The booted {what} is not RHCOS but the target is RHEL {target}, so skew cannot be "
                       f"checked across OS families; proceeding. Use a RHEL {target} RHCOS boot image for "
                       "this pool.")
        have = v.rhel_major
        assert have is not None
        image = f" ({rules.target_os_image_url})" if rules.target_os_image_url else ""
        if have > target:
            return out(REFUSE, CODE_MAJOR,
                       f"The booted {what} runs RHEL {have}, newer than the target RHEL {target}{image}; a node "
                       f"cannot move to an older RHEL major.{_what_to_do(CODE_MAJOR, rules)}")
        if target - have >= 2:
            return out(REFUSE, CODE_MAJOR,
                       f"The booted {what} runs RHEL {have}, {target - have} majors below the target RHEL "
                       f"{target}{image}; a jump of two or more RHEL majors is never allowed.{_what_to_do(CODE_MAJOR, rules)}")
        if target - have == 1:
            if not rules.allow_major_upgrade:
                return out(REFUSE, CODE_MAJOR,
                           f"The booted {what} runs RHEL {have} but the target is RHEL {target}{image}, and "
                           f"RHEL {have} to {target} upgrades are not allowed (allowMajorUpgrade is false)."
                           f"{_what_to_do(CODE_MAJOR, rules)}")
            notes.append(f"the RHEL {have} to {target} upgrade is allowed by allowMajorUpgrade")

    def ok_reason(base: str) -> str:
        return base + (f"; {notes[0]}" if notes else "") + "."

    if not rules.has_minimum:
        return out(OK, CODE_OK, ok_reason(f"The booted {what} meets the boot image skew rules"))

    minimum = rules.describe_minimum()
    if v.family == FAMILY_FCOS:
        return out(WARN, CODE_FAMILY,
                   f"The booted {what} cannot be compared with the minimum {minimum}, which is for RHCOS; "
                   "proceeding. Remove the minimum from this pool's skew rules if it runs Fedora CoreOS.")
    if rules.minimum_rhcos is not None:
        status, detail = _compare_rhcos(v, rules.minimum_rhcos)
    else:
        assert rules.minimum_ocp is not None
        status, detail = _compare_ocp(v, rules.minimum_ocp)

    if status == MEETS:
        return out(OK, CODE_OK, ok_reason(f"The booted {what} is at least the minimum {minimum}"))
    if status == UNDECIDED:
        return out(WARN, CODE_UNDECIDED,
                   f"Cannot decide whether the booted {what} meets the minimum {minimum}: {detail}; "
                   "proceeding rather than refusing for lack of information. Give the minimum as "
                   "rhcosVersion to check it exactly.")
    by = f" (by {detail})" if detail else ""
    if rules.mode == MODE_ENFORCE:
        return out(REFUSE, CODE_TOO_OLD,
                   f"The booted {what} is older than the minimum {minimum}{by}.{_what_to_do(CODE_TOO_OLD, rules)}")
    return out(WARN, CODE_TOO_OLD,
               f"The booted {what} is older than the minimum {minimum}{by}; proceeding because the mode is "
               f"Warn. Update the boot image to at least {minimum}.")
