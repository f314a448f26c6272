"""Where a test run's CPU goes: every process it starts, its CPU, and what it was (issue 54).

    cd REPO && NODE_AGENT_NO_SKIP=1 PYTHONPATH=$PWD python3 tools/suite_cpu.py run build/suite-cpu -- \\
        .venv/bin/pytest -q -p no:cacheprovider -m "not vm" -n 3 --dist loadgroup --durations=30
    python3 tools/suite_cpu.py report build/suite-cpu      # the tables again, from the files kept

As root (acct(2) needs CAP_SYS_PACCT; a kernel with BSD process accounting, v3 records). ``run``
turns process accounting on into DIR/pacct, which the kernel appends one record to as each process
ends (its user and system CPU, pid, parent, start), becomes the child subreaper of what it runs (a
daemon that forks away stays in the tree), runs the command, reaps every process left, turns
accounting off and prints ``tools/suite_cpu_report.py``'s tables (also DIR/report.md).

A record names only the command (``python3``), so beside it: a sampler thread writes each new
process's command line (DIR/procs.jsonl, every 50 ms), and this module, loaded into pytest and its
xdist workers as a plugin (``PYTEST_PLUGINS``), writes each test's start, end and the worker's own
CPU, and each subprocess the worker starts (DIR/tests-<pid>.jsonl): the report counts a process
to the test its worker was running when it started, and so to the test's folder.
"""

import ctypes
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

PR_SET_CHILD_SUBREAPER = 36
SAMPLE_EVERY = 0.05  # seconds; a process shorter than this may go without its command line
REAP_LEFTOVERS_FOR = 60.0  # seconds the runner waits for processes still running after the command
LOCK = "/run/lock/suite_cpu.lock"  # the kernel keeps one accounting file: one run at a time


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def accounting(path: Optional[str]) -> None:
    """acct(2): append a record for each process that ends to ``path``; None turns it off."""
    arg = path.encode() if path is not None else None
    if _libc().acct(arg) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"acct({path!r}): {os.strerror(err)}; what to do: run as root on a kernel "
                           "with BSD process accounting (CONFIG_BSD_PROCESS_ACCT_V3)")


def wall_clock_of_start(starttime_ticks: int) -> float:
    """/proc/PID/stat's start time (clock ticks since boot) as a wall-clock time."""
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.time() - since_boot + starttime_ticks / os.sysconf("SC_CLK_TCK")


def read_proc(pid: str) -> Optional[dict]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("utf-8", "replace")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:  # it ended between the listing and the read
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command may hold spaces and parentheses
    return {"pid": int(pid), "ppid": int(fields[1]), "start": wall_clock_of_start(int(fields[19])),
            "comm": stat[stat.index("(") + 1:stat.rindex(")")], "argv": argv}


def sample(out_path: str, stop: threading.Event) -> None:
    """Write each process's command line when it is first seen (a new pid in the listing), and
    again a tick later if it changed: a process seen between its fork and its exec showed its
    parent's. The report takes the last line of a pid."""
    known: set = set()  # the pids of the last listing
    young: Dict[str, dict] = {}  # the pids new in the last listing -> what was read then
    with open(out_path, "a", encoding="utf-8") as out:
        while not stop.is_set():
            now = {p for p in os.listdir("/proc") if p.isdigit()}
            for pid, first in young.items():  # the second look
                info = read_proc(pid) if pid in now else None
                if info is not None and info["argv"] != first["argv"] and abs(info["start"] - first["start"]) < 0.5:
                    out.write(json.dumps(info) + "\n")
            young = {}
            for pid in now - known:
                info = read_proc(pid)
                if info is not None:
                    out.write(json.dumps(info) + "\n")
                    young[pid] = info
            known = now
            stop.wait(SAMPLE_EVERY)


def reap(main_pid: int) -> int:
    """Wait for the command and, as subreaper, for every process it left; its exit status."""
    status = None
    deadline = None
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG if deadline is not None else 0)
        except ChildProcessError:
            break
        if pid == main_pid:
            status = os.waitstatus_to_exitcode(code)
            deadline = time.monotonic() + REAP_LEFTOVERS_FOR
        elif pid == 0:
            if time.monotonic() > deadline:
                print(f"suite_cpu: processes still running {REAP_LEFTOVERS_FOR:.0f} s after the command "
                      "ended are not counted", file=sys.stderr)
                break
            time.sleep(0.2)
    return status if status is not None else 1


def run(out_dir: str, command: List[str]) -> int:
    os.makedirs(os.path.dirname(LOCK), exist_ok=True)
    lock = open(LOCK, "w")  # held until this process ends
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"suite_cpu: another run holds {LOCK}: the kernel keeps one accounting file, and a "
                         "second run would take it from the first; what to do: wait for it to end") from None
    os.makedirs(out_dir, exist_ok=True)
    pacct = os.path.abspath(os.path.join(out_dir, "pacct"))
    for name in os.listdir(out_dir):  # one run per directory
        os.unlink(os.path.join(out_dir, name))
    open(pacct, "wb").close()
    if _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(os.path.join(out_dir, "procs.jsonl"), stop), daemon=True)
    plugins = [p for p in os.environ.get("PYTEST_PLUGINS", "").split(",") if p] + ["tools.suite_cpu"]
    env = dict(os.environ, PYTEST_PLUGINS=",".join(plugins), SUITE_CPU_DIR=os.path.abspath(out_dir))
    accounting(pacct)
    try:
        sampler.start()
        started = time.time()
        proc = subprocess.Popen(command, env=env)
        status = reap(proc.pid)
        ended = time.time()
    finally:
        accounting(None)
        stop.set()
    sampler.join()
    with open(os.path.join(out_dir, "run.json"), "w", encoding="utf-8") as f:
        json.dump({"runner": os.getpid(), "command_pid": proc.pid, "command": command, "status": status,
                   "start": started, "end": ended, "clk_tck": os.sysconf("SC_CLK_TCK")}, f)
    from tools.suite_cpu_report import report  # the plugin side never needs it
    print(report(out_dir))
    return status


# -- the pytest plugin (PYTEST_PLUGINS=tools.suite_cpu; only with SUITE_CPU_DIR set) -----------------

_LOG: Dict[str, object] = {}


def _log(record: dict) -> None:
    out = _LOG.get("file")
    if out is None:
        path = os.path.join(os.environ["SUITE_CPU_DIR"], f"tests-{os.getpid()}.jsonl")
        out = _LOG["file"] = open(path, "a", encoding="utf-8", buffering=1)  # kept open: a line per test
    out.write(json.dumps(record) + "\n")


def pytest_configure(config):
    if not os.environ.get("SUITE_CPU_DIR") or _LOG.get("patched"):
        return  # a pytest a test runs in this process (pytester) is not the suite: its tests are not logged
    _LOG["patched"], _LOG["config"] = True, config
    original = subprocess.Popen._execute_child

    def execute_child(self, args, *rest, **kwargs):
        original(self, args, *rest, **kwargs)
        argv = [args] if isinstance(args, (str, bytes)) else list(args)
        _log({"popen": self.pid, "argv": [os.fsdecode(a) for a in argv], "t": time.time()})

    subprocess.Popen._execute_child = execute_child


def pytest_runtest_protocol(item, nextitem):
    if os.environ.get("SUITE_CPU_DIR") and item.config is _LOG.get("config"):
        _LOG["running"] = item.nodeid
        _log({"test": item.nodeid, "pid": os.getpid(), "t": time.time(), "cpu": time.process_time(), "at": "start"})


def pytest_runtest_logfinish(nodeid, location):
    # xdist's controller hears each worker's logfinish too: only the process that ran the test logs
    if os.environ.get("SUITE_CPU_DIR") and _LOG.get("running") == nodeid:
        _log({"test": nodeid, "pid": os.getpid(), "t": time.time(), "cpu": time.process_time(), "at": "end"})


def main(argv: List[str]) -> int:
    if len(argv) >= 4 and argv[1] == "run" and argv[3] == "--":
        return run(argv[2], argv[4:])
    if len(argv) == 3 and argv[1] == "report":
        from tools.suite_cpu_report import report

        print(report(argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main(sys.argv))
