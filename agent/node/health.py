"""Run the health checks after an update (the shell of agent/core/health.py, which decides what to
check and how to read it): units through systemd over D-Bus, the kubelet's health endpoint over
loopback HTTP, the admin's checks as processes. All of it within one time limit.

On a root that is not the running system (``--root DIR``) units and the kubelet are not checked
(said in ``not_performed``); the admin's checks are found under the root and run with
``NODE_AGENT_ROOT`` set to it (``/`` on a live node), so a check can look at the root it is about.
Each check's output goes to the journal with ``NODE_AGENT_STAGE=health`` and
``NODE_AGENT_CHECK=<name>`` (``journalctl NODE_AGENT_CHECK=50-probe``).
"""

import http.client
import logging
import os
import signal
import subprocess
import threading
import time
from typing import Any, Callable, List, Optional, Sequence

from agent.core import health
from agent.core.health import CheckResult, HealthResult, UnitCheck
from agent.errors import HostError
from agent.host.root import Root

log = logging.getLogger(__name__)
POLL = 0.5  # seconds between two looks at a unit or the kubelet


def _extra(name: str) -> dict:
    return {"NODE_AGENT_STAGE": "health", "NODE_AGENT_CHECK": name}


class Runner:
    def __init__(self, root: Root, systemd: Any = None, *, timeout: float = health.DEFAULT_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 kubelet_get: Optional[Callable[[float], str]] = None):
        self.root, self.systemd = root, systemd
        self.clock, self.sleep = clock, sleep
        self.deadline = clock() + timeout
        self.timeout = timeout
        self.kubelet_get = kubelet_get or _kubelet_healthz

    def left(self) -> float:
        return max(0.0, self.deadline - self.clock())

    def run(self, units: Sequence[UnitCheck]) -> HealthResult:
        """Units, the kubelet, required checks (each stops the run at its first failure), wanted checks."""
        results: List[CheckResult] = []
        skipped: List[str] = []
        if self.root.is_live and self.systemd is not None:
            results += self._units(units)
            if all(r.ok for r in results):
                kubelet = self._kubelet()
                results += [kubelet] if kubelet is not None else []
        elif units:
            skipped.append(f"units {', '.join(u.name for u in units)} and the kubelet (the root is not the running system)")
        if all(r.ok for r in results):
            results += self._scripts(health.REQUIRED, health.REQUIRED_DIR, stop_at_failure=True)
        if all(r.ok for r in results):
            results += self._scripts(health.WANTED, health.WANTED_DIR, stop_at_failure=False)
        out = HealthResult(tuple(results), tuple(skipped))
        for line in skipped:
            log.info("health checks not performed on %s: %s", self.root.top, line, extra={"NODE_AGENT_STAGE": "health"})
        log.info("health checks (time limit %g s): %d passed, %s", self.timeout, sum(1 for r in results if r.ok),
                 "failed: " + out.failed.describe() if out.failed else
                 f"{len(out.warnings)} wanted check(s) failed" if out.warnings else "none failed",
                 extra={"NODE_AGENT_STAGE": "health"})
        return out

    # --- units -----------------------------------------------------------------------------

    def _units(self, units: Sequence[UnitCheck]) -> List[CheckResult]:
        out: List[CheckResult] = []
        for unit in units:
            result = self._unit(unit)
            out.append(result)
            if not result.ok:
                break
        return out

    def _unit(self, unit: UnitCheck) -> CheckResult:
        """Healthy twice SETTLE seconds apart (a service whose start job is done can still fail at
        once), failed at once, or still between states when the time is up."""
        healthy_since: Optional[float] = None
        while True:
            try:
                state = self.systemd.active_state(unit.name)
            except HostError as exc:
                return self._said(CheckResult(health.UNIT, unit.name, False, str(exc)))
            verdict = health.unit_verdict(state, unit.want)
            now = self.clock()
            if verdict == health.FAIL:
                seen = f"{state} ({unit.why}; see 'journalctl -u {unit.name}')"
                return self._said(CheckResult(health.UNIT, unit.name, False, seen))
            if verdict == health.OK:
                healthy_since = now if healthy_since is None else healthy_since
                if now - healthy_since >= health.SETTLE or self.left() <= 0:
                    return self._said(CheckResult(health.UNIT, unit.name, True, state))
            else:
                healthy_since = None
                if self.left() <= 0:
                    return self._said(CheckResult(health.UNIT, unit.name, False,
                                                  f"still {state} after {self.timeout:g} s ({unit.why})"))
            self.sleep(min(POLL, max(self.left(), 0.01)))

    # --- the kubelet -----------------------------------------------------------------------

    def _kubelet(self) -> Optional[CheckResult]:
        """The kubelet's /healthz answers "ok", on a node whose kubelet.service runs (a node
        without a kubelet is not failed for it)."""
        try:
            state = self.systemd.active_state(health.KUBELET_UNIT)
        except HostError as exc:
            log.warning("kubelet health not checked: %s", exc, extra=_extra(health.KUBELET_UNIT))
            return None
        if state not in ("active", "activating", "reloading"):
            return None
        said = ""
        while True:
            try:
                said = self.kubelet_get(min(5.0, max(self.left(), 0.5)))
                if said.strip() == "ok":
                    return self._said(CheckResult(health.KUBELET, health.KUBELET_HEALTHZ, True, "ok"))
            except (OSError, http.client.HTTPException) as exc:
                said = str(exc) or type(exc).__name__
            if self.left() <= 0:
                return self._said(CheckResult(health.KUBELET, health.KUBELET_HEALTHZ, False,
                                              f"no 'ok' within {self.timeout:g} s: {health.tail(said, 200)}"))
            self.sleep(min(POLL * 2, max(self.left(), 0.01)))

    # --- the admin's checks ----------------------------------------------------------------

    def _scripts(self, kind: str, where: str, stop_at_failure: bool) -> List[CheckResult]:
        host_dir = self.root.path(where)
        try:
            names = sorted(os.listdir(host_dir))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out: List[CheckResult] = []
        for name in names:
            path = os.path.join(host_dir, name)
            if not os.path.isfile(path):
                continue
            result = self._script(kind, name, path)
            out.append(result)
            if stop_at_failure and not result.ok:
                break
        return out

    def _script(self, kind: str, name: str, path: str) -> CheckResult:
        if not os.access(path, os.X_OK):
            return self._said(CheckResult(kind, name, False, f"{path} is not executable: give it mode 0755 "
                                          "in the MachineConfig (files[].mode: 493)"))
        try:
            with open(path, "rb") as f:
                head = f.read(health.HEAD_READ)
        except OSError as exc:
            return self._said(CheckResult(kind, name, False, f"cannot read {path}: {exc}"))
        limit, problem = health.check_timeout(head, health.DEFAULT_CHECK_TIMEOUT)
        if problem:
            log.warning("%s: %s", path, problem, extra=_extra(name))
        limit = min(limit, self.left())
        if limit <= 0:
            return self._said(CheckResult(kind, name, False, f"not run: the health time limit ({self.timeout:g} s) "
                                          "was used up before it"))
        code, output = run_bounded(path, limit, {"NODE_AGENT_ROOT": self.root.top})
        if output.strip():
            log.info("%s said:\n%s", name, output.rstrip(), extra=_extra(name))
        if code is None:
            return self._said(CheckResult(kind, name, False, f"did not finish within {limit:g} s (killed); "
                                          f"{health.tail(output)}".rstrip("; ")))
        if code != 0:
            return self._said(CheckResult(kind, name, False, f"exit code {code}: {health.tail(output)}".rstrip(": ")))
        return self._said(CheckResult(kind, name, True, health.tail(output, 200)))

    def _said(self, result: CheckResult) -> CheckResult:
        level = logging.INFO if result.ok else (logging.WARNING if result.kind == health.WANTED else logging.ERROR)
        log.log(level, "health: %s %s", "passed" if result.ok else "FAILED", result.describe(), extra=_extra(result.name))
        return result


def run_bounded(path: str, limit: float, env_add: dict) -> tuple:
    """(exit code or None when killed at ``limit``, the first OUTPUT_READ bytes of stdout and
    stderr as text). The check runs in its own session; at its limit the whole group is killed."""
    env = dict(os.environ, **env_add)
    proc = subprocess.Popen([path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd="/", env=env, start_new_session=True)
    kept = bytearray()

    def read() -> None:
        assert proc.stdout is not None
        while True:
            chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.read(65536)
            if not chunk:
                return
            if len(kept) < health.OUTPUT_READ:
                kept.extend(chunk[:health.OUTPUT_READ - len(kept)])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code: Optional[int] = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        code = None
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    reader.join(timeout=5.0)  # a grandchild holding the pipe open is not waited for longer
    if proc.stdout is not None:
        proc.stdout.close()
    return code, bytes(kept).decode("utf-8", "replace")


def _kubelet_healthz(timeout: float) -> str:
    """GET the kubelet's healthz on loopback (never through a proxy): its body."""
    conn = http.client.HTTPConnection("127.0.0.1", 10248, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        body = resp.read(1024).decode("utf-8", "replace")
        return body if resp.status == 200 else f"HTTP {resp.status}: {body}"
    finally:
        conn.close()
