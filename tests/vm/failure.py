"""What a failed VM scenario prints, its cause last.

A CI run shows the end of its output only, and a wait that fails prints the serial console (the
kernel's view, silent while the guest is up). So the failure's message goes on with what the
cluster and the server showed when the wait failed, then the guest's own journal and the server
pod's log (read back from the disk once QEMU is stopped), and ends with the one line that names
the wait. Every part is bounded, and a part that cannot be read says why instead.
"""

import glob
import os
import subprocess
from typing import Any, Callable, Dict, List

LINES = 25  # per part: the digest is read at the end of a CI log
WIDTH = 300
GUEST_UNITS = ("node-agent-firstboot.service", "node-agent.service")


class PhaseFailed(AssertionError):
    """A wait of the scenario failed: ``cause`` names it in one line, ``detail`` (the serial
    console's tail, what the waiter adds) comes before it in the message."""

    def __init__(self, cause: str, detail: str):
        super().__init__(f"{detail}\n{cause}")
        self.cause, self.detail = cause, detail

    def with_detail(self, more: str) -> "PhaseFailed":
        """The same failure, ``more`` said first."""
        return PhaseFailed(self.cause, f"{more}\n{self.detail}")


def _cut(lines: List[str]) -> List[str]:
    return [line if len(line) <= WIDTH else line[:WIDTH] + " ..." for line in lines[-LINES:]]


def _part(title: str, read: Callable[[], List[str]]) -> str:
    try:
        lines = _cut(read()) or ["(nothing)"]
    except Exception as exc:  # a digest of a failure: whatever one part hits, the others are shown
        lines = [f"(could not be read: {type(exc).__name__}: {exc})"]
    return "\n".join([f"--- {title}"] + ["  " + line for line in lines])


def _node_lines(cp: Any, node: str) -> List[str]:
    obj = cp.kc.get(f"/api/v1/nodes/{node}").json()
    if obj.get("kind") != "Node":
        return [f"Node {node}: {obj.get('reason') or obj}"]
    ready = [c.get("status") for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    notes = {k: v for k, v in (obj["metadata"].get("annotations") or {}).items()
             if "machineconfiguration" in k or "drain" in k}
    return [f"Node {node}: Ready={ready[0] if ready else '?'} unschedulable={bool(obj['spec'].get('unschedulable'))}"] + \
        [f"  {k}: {v}" for k, v in sorted(notes.items())]


def _pod_line(pod: Dict[str, Any]) -> str:
    meta, status = pod["metadata"], pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    containers = [f"{c.get('name')}: restarts={c.get('restartCount', 0)} state={','.join(c.get('state') or {})} "
                  f"last={','.join(c.get('lastState') or {}) or '-'}" for c in status.get("containerStatuses") or []]
    return (f"{meta['namespace']}/{meta['name']} on {pod['spec'].get('nodeName') or '-'}: {status.get('phase')} "
            f"ready={ready}{' deleting' if meta.get('deletionTimestamp') else ''} " + "; ".join(containers))


def _pod_lines(cp: Any, namespaces: List[str]) -> List[str]:
    return [_pod_line(p) for ns in namespaces for p in cp.kc.get(f"/api/v1/namespaces/{ns}/pods").json()["items"]]


def _server_lines(srv: Any, node: str, pool: str) -> List[str]:
    session = srv.session()
    p = session.get(srv.url(f"/api/v1/pools/{pool}"), timeout=10).json()
    report = session.get(srv.url(f"/api/v1/nodes/{node}"), timeout=10).json().get("report") or {}
    counts = {k: v for k, v in (p.get("status") or {}).items() if k.endswith("MachineCount")}
    return [f"pool {pool}: target {((p.get('spec') or {}).get('configuration') or {}).get('name')} {counts}",
            "node's report: " + ", ".join(f"{k}={report.get(k)}" for k in
                                          ("state", "currentConfig", "desiredConfig", "reason", "reportedAt"))]


def state(cp: Any, srv: Any, node: str, pool: str, namespaces: List[str]) -> str:
    """What the cluster and the server show now (called as the wait fails, both still running)."""
    return "\n".join([_part("the Node, as the API server holds it", lambda: _node_lines(cp, node)),
                      _part("the pods", lambda: _pod_lines(cp, namespaces)),
                      _part("the pool and the node, as the server answers", lambda: _server_lines(srv, node, pool))])


def _journal_lines(directory: str, *args: str) -> List[str]:
    proc = subprocess.run(["journalctl", "-D", directory, "--no-pager", "-o", "short-precise", "-n", str(LINES),
                           *args], capture_output=True, text=True, timeout=120)
    return proc.stdout.splitlines() + ([f"(journalctl: {proc.stderr.strip()})"] if proc.returncode else [])


def _server_log_lines(readback: str) -> List[str]:
    logs = sorted(glob.glob(os.path.join(readback, "pods", "node-config-server_*", "*", "*.log")), key=os.path.getmtime)
    if not logs:
        return ["(no log of the server's pod on the guest's disk)"]
    with open(logs[-1], errors="replace") as f:  # the kubelet's probes every 5 s would fill the part
        return [os.path.relpath(logs[-1], readback) + ":"] + [line for line in f.read().splitlines()
                                                              if "GET /healthz" not in line]


def guest_story(readback: str) -> str:
    """The guest's side, from what was read back off its disk after QEMU stopped."""
    journal = os.path.join(readback, "journal")
    return "\n".join([
        _part("node-agent's journal, its last lines", lambda: _journal_lines(journal, *sum((["-u", u] for u in
                                                                                              GUEST_UNITS), []))),
        _part("the guest's warnings and errors, the last", lambda: _journal_lines(journal, "-p", "warning")),
        _part("the server pod's log on the guest, its last lines", lambda: _server_log_lines(readback))])


class ScenarioFailed(AssertionError):
    """The scenario's failure: its message (``report``) and ``digest``, the same without the
    serial console, which `make test` prints after its phases' times (the VM boot's output may
    come before the suites' there)."""

    def __init__(self, message: str, digest: str):
        super().__init__(message)
        self.digest = digest


def report(exc: Exception, at_failure: str, story: str) -> ScenarioFailed:
    """The whole message: the cause, the wait's own message (the serial console), the state, the
    guest's story, and the cause again as the last line (pytest's summary shows a message's first
    line, or under CI the whole of it)."""
    cause = exc.cause if isinstance(exc, PhaseFailed) else str(exc).splitlines()[0] if str(exc) else repr(exc)
    head = tail = f"THE VM SCENARIO FAILED: {cause}"
    return ScenarioFailed("\n".join([head, str(exc), at_failure, story, tail]),
                          "\n".join([head, at_failure, story, tail]))
