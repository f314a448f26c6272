"""Health after every update, on the node (ours; pure): what to check once a config is applied,
how to read what was seen, and the words of the node's report.

After an update (and after the reboot it needs) the node checks, within the pool's time limit
(``node-config-server.openshift.io/health-timeout``, default DEFAULT_TIMEOUT), before it reports
Done:

1. the units the update touched (``unit_checks``): a unit it restarted or reloaded must not fail;
   after a reboot, every unit entry the config changed is as the config says (enabled: not
   failed; masked or ``enabled: false``: not running). A unit still activating is waited for.
   Without a reboot a disabled or masked unit keeps running (systemd does not stop it, nor does
   the MCD), so only the units the update (re)started are checked then;
2. the kubelet's health endpoint (KUBELET_HEALTHZ), on a node that runs a kubelet;
3. the admin's checks: the executables in REQUIRED_DIR, then WANTED_DIR, in name order, each
   with its own time limit (``check_timeout``). A failed required check is a failed update (the
   node reverts: agent/node/revert.py); a failed wanted check is a warning on the Done report.

The layout follows greenboot's (fedora-iot/greenboot usr/libexec/greenboot/greenboot:5-35: its
``check/required.d`` stops at the first failure, ``check/wanted.d`` only warns, each script's
output goes to the journal under the script's name), under node-agent's own directory: greenboot
runs its checks at every boot and answers a failure with its own reboots and rollback (boot
counting), which would act a second time on one failure, and it does not run after an update
that needs no reboot.
"""

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

HEALTH_DIR = "/etc/node-agent/health"
REQUIRED_DIR = HEALTH_DIR + "/required.d"
WANTED_DIR = HEALTH_DIR + "/wanted.d"
DEFAULT_TIMEOUT = 300.0  # seconds for all the checks of one update
MAX_TIMEOUT = 3600.0
DEFAULT_CHECK_TIMEOUT = 60.0  # seconds one admin check may run, unless its timeout line says otherwise
SETTLE = 2.0  # a unit must look healthy twice this far apart (a service that fails at once after its start job)
KUBELET_UNIT = "kubelet.service"
KUBELET_HEALTHZ = "http://127.0.0.1:10248/healthz"
REASON_MAX = 1000  # characters of a report's reason (agent/node/report.py MAX_TEXT)
OUTPUT_KEPT = 600  # characters of a check's output in a report (its end: where the error usually is)
OUTPUT_READ = 64 * 1024  # bytes of a check's output read (and logged); the rest is discarded
HEAD_READ = 4096  # bytes of a check read for its timeout line
TIMEOUT_HEADER = "X-Health-Timeout"  # the server's answer carries the pool's limit (seconds)

RUNNING, STOPPED = "running", "stopped"
REQUIRED, WANTED, UNIT, KUBELET = "required", "wanted", "unit", "kubelet"
OK, WAIT, FAIL = "ok", "wait", "fail"

_TIMEOUT_LINE = re.compile(rb"^#\s*node-agent-health-timeout:[ \t]*(\S*)[ \t]*$", re.M)
_TRANSIENT = ("activating", "deactivating", "reloading", "refreshing", "maintenance")


@dataclass(frozen=True)
class UnitCheck:
    name: str
    want: str  # RUNNING (not failed) or STOPPED (not running)
    why: str  # what the update did to it: "restarted", "enabled in the config", ...


@dataclass(frozen=True)
class CheckResult:
    kind: str  # UNIT, KUBELET, REQUIRED or WANTED
    name: str  # the unit, the endpoint or the check's file name
    ok: bool
    output: str = ""  # what it said (bounded) or what was seen

    def describe(self) -> str:
        what = {UNIT: "unit", KUBELET: "kubelet health", REQUIRED: "required check",
                WANTED: "wanted check"}[self.kind]
        return f"{what} {self.name}" + (f": {self.output}" if self.output else "")


@dataclass(frozen=True)
class HealthResult:
    results: Tuple[CheckResult, ...] = ()
    not_performed: Tuple[str, ...] = ()  # checks left out, and why (a root that is not the running system)

    @property
    def failed(self) -> Optional[CheckResult]:
        """The first failure that fails the update (a unit, the kubelet, a required check)."""
        return next((r for r in self.results if not r.ok and r.kind != WANTED), None)

    @property
    def warnings(self) -> List[CheckResult]:
        return [r for r in self.results if not r.ok and r.kind == WANTED]

    @property
    def ok(self) -> bool:
        return self.failed is None


def _entries(units: Sequence[Dict]) -> Dict[str, Dict]:
    return {str(u.get("name")): u for u in units if isinstance(u, dict) and u.get("name")}


def unit_checks(previous_units: Sequence[Dict], target_units: Sequence[Dict], restarted: Sequence[str],
                rebooted: bool) -> List[UnitCheck]:
    """The units to check after an update from ``previous_units`` to ``target_units`` (Ignition
    ``systemd.units`` entries), of which the update restarted or reloaded ``restarted``;
    ``rebooted``: checked after the reboot the update needed. In name order, each unit once."""
    out: Dict[str, UnitCheck] = {name: UnitCheck(name, RUNNING, "restarted by the update")
                                 for name in restarted if name}
    if rebooted:
        before = _entries(previous_units)
        for name, entry in _entries(target_units).items():
            if before.get(name) == entry:
                continue
            if entry.get("mask"):
                out[name] = UnitCheck(name, STOPPED, "masked in the config")
            elif entry.get("enabled") is False:
                out[name] = UnitCheck(name, STOPPED, "disabled in the config")
            elif entry.get("enabled"):
                out[name] = UnitCheck(name, RUNNING, "enabled in the config")
    return [out[k] for k in sorted(out)]


def unit_verdict(state: str, want: str) -> str:
    """OK, WAIT or FAIL for a unit in ActiveState ``state`` that should be ``want``. Running: a
    failed unit fails, active or inactive (a oneshot that ran) is fine. Stopped: an active unit
    fails. A unit between states is waited for."""
    if state in _TRANSIENT:
        return WAIT
    if want == RUNNING:
        return FAIL if state == "failed" else OK
    return FAIL if state == "active" else OK


def check_timeout(head: bytes, default: float) -> Tuple[float, str]:
    """(seconds, problem) from a check's first bytes: a line ``# node-agent-health-timeout: 30s``
    (a duration: ``90``, ``90s``, ``2m``) sets its limit; ``default`` without one. A line that does
    not parse keeps ``default`` and says why (the problem is logged, naming the check)."""
    from agent.core.rolloutpolicy import parse_duration

    m = _TIMEOUT_LINE.search(head[:HEAD_READ])
    if m is None:
        return default, ""
    text = m.group(1).decode("utf-8", "replace")
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        return default, f"node-agent-health-timeout: {exc}; using {default:g} s"
    if seconds <= 0:
        return default, f"node-agent-health-timeout: {text!r} is not a positive duration; using {default:g} s"
    return seconds, ""


def parse_timeout(value: Optional[str]) -> Tuple[float, str]:
    """(seconds, problem) from the server's X-Health-Timeout (the pool's annotation, in seconds);
    DEFAULT_TIMEOUT when absent or unreadable (said), at most MAX_TIMEOUT."""
    if value is None or not str(value).strip():
        return DEFAULT_TIMEOUT, ""
    try:
        seconds = float(str(value).strip()[:32])
    except ValueError:
        return DEFAULT_TIMEOUT, f"{TIMEOUT_HEADER} {value!r} is not a number of seconds; using {DEFAULT_TIMEOUT:g} s"
    if not 0 < seconds <= MAX_TIMEOUT:  # also NaN
        return DEFAULT_TIMEOUT, f"{TIMEOUT_HEADER} {value!r} is out of range; using {DEFAULT_TIMEOUT:g} s"
    return seconds, ""


def tail(text: str, limit: int = OUTPUT_KEPT) -> str:
    """The end of a check's output, on one line per line break kept, at most ``limit`` characters."""
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-(limit - 3):]


def failure_reason(failed: CheckResult, config: str, outcome: str) -> str:
    """The Degraded reason after a failed health check of ``config``: what the node did about it
    first (``outcome``: "reverted to A", "could not revert ..."; a report's reason is cut at 1000
    characters), then the check and what it said."""
    return bounded(f"{outcome} after a failed health check of {config}: {failed.describe()}")


def bounded(text: str) -> str:
    """A report's text cut as the node's reporter cuts it (REASON_MAX characters)."""
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 1] + "\u2026"


def warning_text(result: HealthResult) -> Optional[str]:
    """The Done report's words for failed wanted checks (None: none failed)."""
    warned = result.warnings
    if not warned:
        return None
    return "wanted health check(s) failed: " + "; ".join(r.describe() for r in warned)
