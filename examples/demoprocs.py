"""The processes a demo started, recorded so that Ctrl-C or ``--stop`` from elsewhere ends them all.

The demo's components run in sessions of their own (a terminal's Ctrl-C reaches only the demo,
which then stops them in order). ``processes.json`` in the demo's directory names the demo and
each component with its pid and start time (``/proc/PID/stat`` field 22): ``stop`` signals only a
process whose start time still matches, never a pid the system has since given to another
program. The file is removed once everything has ended.
"""

import json
import os
import signal
import time
from typing import Callable, Dict, List, Optional

RECORD = "processes.json"


def start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot, or None when there is no such process
    or it has ended and waits to be reaped (a zombie runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # from field 3 on; the name (field 2) may hold spaces
    return None if fields[0] in ("Z", "X") else fields[19]  # field 3 the state, field 22 the start time


def alive(entry: Dict) -> bool:
    return start_time(entry["pid"]) == entry["start"]


class Recorded:
    """``with Recorded(run) as procs``: ``procs.add(name, pid)`` records a component;
    ``procs.cleanup`` runs in reverse order on leaving (also on Ctrl-C or SIGTERM's SystemExit)."""

    def __init__(self, run: str):
        self.path = os.path.join(run, RECORD)
        self.entries: List[Dict] = []
        self.cleanup: List[Callable[[], None]] = []

    def add(self, name: str, pid: int) -> None:
        self.entries.append({"name": name, "pid": pid, "start": start_time(pid)})
        self._write()

    def _write(self) -> None:
        me = {"name": "demo", "pid": os.getpid(), "start": start_time(os.getpid())}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump([me] + self.entries, f, indent=1)
        os.replace(tmp, self.path)

    def __enter__(self) -> "Recorded":
        self._write()
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        try:
            for stop in reversed(self.cleanup):
                stop()
            if not any(alive(e) for e in self.entries):
                os.remove(self.path)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _recorded(run: str) -> List[Dict]:
    try:
        with open(os.path.join(run, RECORD)) as f:
            return json.load(f)
    except FileNotFoundError:
        return []


def refuse_if_running(run: str) -> None:
    demo = [e for e in _recorded(run) if e["name"] == "demo" and alive(e)]
    if demo:
        raise SystemExit(f"kube-demo: already running (pid {demo[0]['pid']}, {os.path.join(run, RECORD)}); "
                         f"stop it first: make kube-demo-stop")


def servers_of(run: str) -> List[int]:
    """The pids of the running ``node-config-server serve`` processes whose ``--state`` or
    ``--data-dir`` lies under ``run`` (read from /proc: each process's command line and working
    directory), gunicorn's workers left out (their parent is listed): the server a user started
    from a demo's printed command, which ``make demo`` must not wipe the directory under."""
    run = os.path.realpath(run)
    found: Dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            cwd = os.readlink(f"/proc/{name}/cwd")
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone, or not ours to read
        if "serve" in argv and any("node-config-server" in a or "agent.server.cli" in a for a in argv) and \
                any(_under(run, os.path.join(cwd, path)) for path in _paths(argv)):
            found[int(name)] = ppid
    return sorted(pid for pid, ppid in found.items() if ppid not in found)


def _paths(argv: List[str]) -> List[str]:
    out = []
    for i, arg in enumerate(argv):
        for flag in ("--state", "--data-dir"):
            if arg == flag and i + 1 < len(argv):
                out.append(argv[i + 1])
            elif arg.startswith(flag + "="):
                out.append(arg[len(flag) + 1:])
    return out


def _under(top: str, path: str) -> bool:
    path = os.path.realpath(path)
    return path == top or path.startswith(top + os.sep)


def stop(run: str, timeout: float = 60.0) -> int:
    """SIGTERM the demo (it stops its components in order) and wait; then end, by process group,
    any component still running (a demo killed with SIGKILL left them). Exit 0 when nothing of
    the demo runs any more."""
    entries = _recorded(run)
    running = [e for e in entries if alive(e)]
    if not running:
        print(f"kube-demo: nothing running ({os.path.join(run, RECORD)} names no live process)")
        _forget(run)
        return 0
    for e in entries:
        if e["name"] == "demo" and alive(e):
            os.kill(e["pid"], signal.SIGTERM)
            _wait_gone([e], timeout)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = [e for e in entries if e["name"] != "demo" and alive(e)]
        for e in left:
            os.killpg(e["pid"], sig)  # each component leads a session of its own: its group is its own
        _wait_gone(left, 15.0)
    left = [e["name"] for e in entries if alive(e)]
    if left:
        print(f"kube-demo: still running after SIGKILL: {', '.join(left)}")
        return 1
    print(f"kube-demo: stopped {', '.join(e['name'] for e in running)}")
    _forget(run)
    return 0


def _wait_gone(entries: List[Dict], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(e) for e in entries) and time.monotonic() < deadline:
        time.sleep(0.1)


def _forget(run: str) -> None:
    try:
        os.remove(os.path.join(run, RECORD))
    except FileNotFoundError:
        pass
