"""The tables of ``tools/suite_cpu.py``: a run's CPU by kind of process, by test folder, by module.

Reads what the run kept in its directory: ``pacct`` (the kernel's BSD process accounting, acct_v3
records, include/uapi/linux/acct.h), ``procs.jsonl`` (command lines seen), ``tests-*.jsonl`` (each
test's start and end on its worker, the worker's own CPU then, the subprocesses it started) and
``run.json``. Pure but for reading those files; ``python3 tools/suite_cpu.py report DIR`` prints them.
"""

import bisect
import glob
import json
import os
import struct
from collections import defaultdict
from typing import Dict, Iterator, List, Optional, Tuple

# struct acct_v3: flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float),
# utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t each), comm[16]
V3 = struct.Struct("<BBHIIIIIIf8H16s")
AFORK = 0x01  # the process forked and did not exec: it is still its parent's program
AHZ = 100  # the unit of a v3 record's times

SERVE = "serve: gunicorn master"
SERVE_WORKER = "serve: gunicorn workers"
WORKER = "pytest workers themselves (xdist)"
# By the command's name (a record keeps 15 characters of it): kinds whose children count as theirs.
BY_COMM = {
    "etcd": "etcd", "kube-apiserver": "kube-apiserver", "kube-controller": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler", "kubelet": "kubelet", "prometheus": "prometheus",
    "promtool": "promtool", "openssl": "openssl", "haproxy": "haproxy", "dbus-daemon": "dbus-daemon",
    "rpmbuild": "rpmbuild, rpm", "rpm": "rpmbuild, rpm", "git": "git", "systemd-analyze": "systemd-analyze",
    "qemu-system-x86": "qemu", "kubectl": "kubectl", "etcdctl": "etcdctl",
}
CONTAINERS = ("podman", "conmon", "crun", "runc", "containerd", "ctr", "netavark", "aardvark-dns",
              "catatonit", "slirp4netns", "fuse-overlayfs", "pasta")


def comp_t(value: int) -> int:
    """A comp_t: 13 bits of mantissa, 3 of base-8 exponent (kernel/acct.c encode_comp_t)."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 7))


def records(data: bytes) -> Iterator[dict]:
    """The v3 records of a pacct file: pid, ppid, comm, CPU seconds, start (wall, whole seconds),
    elapsed seconds, whether it forked without exec."""
    for off in range(0, len(data) - V3.size + 1, V3.size):
        f = V3.unpack_from(data, off)
        if f[1] & 0x0F != 3:
            raise ValueError(f"pacct record at byte {off}: version {f[1] & 0x0F}, not 3; what to do: "
                             "a kernel with CONFIG_BSD_PROCESS_ACCT_V3")
        yield {"pid": f[6], "ppid": f[7], "btime": f[8], "elapsed": f[9] / AHZ,
               "cpu": (comp_t(f[10]) + comp_t(f[11])) / AHZ, "forked": bool(f[0] & AFORK),
               "comm": f[18].split(b"\0", 1)[0].decode("utf-8", "replace")}


def kind_of(comm: str, argv: Optional[List[str]], forked: bool, parent_kind: Optional[str]) -> Optional[str]:
    """What a process was, by its command line where seen, else its name; None: not known."""
    line = " ".join(argv or [])
    if forked and parent_kind in (SERVE, SERVE_WORKER):  # gunicorn forks its workers, no exec
        return SERVE_WORKER
    if argv:
        if "exec(eval(sys.stdin.readline()))" in line:  # execnet's popen gateway: an xdist worker
            return WORKER
        if "agent.server.cli serve" in line or "node-config-server serve" in line:
            return SERVE
        if "agent.server.cli" in line or os.path.basename(argv[0]) == "node-config-server":
            return "server CLI (get, describe, ...)"
        if "-m agent" in line or os.path.basename(argv[0]) == "node-agent":
            return "node-agent CLI"
        if "dbusmock" in line:
            return "python-dbusmock"
        if any(os.path.basename(a) in ("pytest", "py.test") for a in argv[:2]) or "-m pytest" in line:
            return "pytest controller"
    if comm in BY_COMM:
        return BY_COMM[comm]
    if comm.startswith(CONTAINERS):
        return "podman, containerd (and their children)"
    if forked and parent_kind:
        return parent_kind
    return None


class Run:
    """A run's processes as a tree, each with its kind, CPU and the test it belongs to."""

    def __init__(self, out_dir: str):
        with open(os.path.join(out_dir, "run.json"), encoding="utf-8") as f:
            self.meta = json.load(f)
        with open(os.path.join(out_dir, "pacct"), "rb") as f:
            self.procs = list(records(f.read()))
        self.seen: Dict[int, List[dict]] = defaultdict(list)  # pid -> sampler entries (pids are reused)
        with open(os.path.join(out_dir, "procs.jsonl"), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    e = json.loads(line)
                    self.seen[e["pid"]].append(e)
        self.tests: Dict[int, List[dict]] = defaultdict(list)  # worker pid -> its start/end lines
        for path in glob.glob(os.path.join(out_dir, "tests-*.jsonl")):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    e = json.loads(line) if line.strip() else {}
                    if "popen" in e:
                        self.seen[e["popen"]].append({"start": e["t"], "argv": e["argv"], "ppid": None})
                    elif "test" in e:
                        self.tests[e["pid"]].append(e)
        for lines in self.tests.values():
            lines.sort(key=lambda e: e["t"])
        self.by_pid: Dict[int, List[dict]] = defaultdict(list)
        for p in self.procs:
            self._match_sampler(p)
            self.by_pid[p["pid"]].append(p)
        for p in self.procs:
            p["parent"] = self._parent(p)
        for p in self.procs:
            self._kind(p)

    def _match_sampler(self, p: dict) -> None:
        """The command line and exact start seen for this pid at its start: the argv a worker
        passed to exec, else the sampler's last look."""
        p["start"], p["argv"], p["seen_ppid"] = p["btime"] + 0.5, None, None
        exact = None
        for e in self.seen.get(p["pid"], ()):
            if p["btime"] - 1 <= e["start"] <= p["btime"] + 2:
                p["start"] = e["start"]
                p["argv"] = e.get("argv") or p["argv"]
                p["seen_ppid"] = e.get("ppid") or p["seen_ppid"]
                exact = e["argv"] if e.get("ppid") is None else exact  # a worker's Popen line
        p["argv"] = exact or p["argv"]

    def _parent(self, p: dict) -> Optional[dict]:
        if p["pid"] == self.meta["command_pid"]:
            return None  # the runner's: outside the run
        ppid = p["ppid"]
        if ppid == self.meta["runner"] and p["pid"] != self.meta["command_pid"] and p["seen_ppid"]:
            ppid = p["seen_ppid"]  # an orphan the runner adopted: the parent the sampler saw
        alive = [q for q in self.by_pid.get(ppid, ()) if q["btime"] - 1 <= p["start"] <= q["btime"] + q["elapsed"] + 2]
        return max(alive, key=lambda q: q["btime"]) if alive else None

    def _kind(self, p: dict) -> str:
        if "kind" not in p:
            parent = p["parent"]
            parent_kind = self._kind(parent) if parent is not None else None
            own = kind_of(p["comm"], p["argv"], p["forked"], parent_kind)
            if own is None and parent_kind not in (None, WORKER, "pytest controller"):
                own = parent_kind  # a tool's helper processes count as the tool's
            p["kind"] = own or python_other(p["argv"]) if p["comm"].startswith("python") else own or f"other: {p['comm']}"
        return p["kind"]

    def ours(self) -> List[dict]:
        """The processes of the run: the command and all its descendants."""
        def root(p):
            while p["parent"] is not None:
                p = p["parent"]
            return p
        # the command's and its workers' own records are missing while they still run
        tops = {self.meta["command_pid"], *self.tests}
        return [p for p in self.procs if root(p)["pid"] in tops or root(p)["ppid"] in tops]

    def test_of(self, p: dict) -> Tuple[str, str]:
        """(folder, module) of the test whose worker started this process's branch."""
        if p["pid"] in self.tests:
            return ("(no test: controller, start-up)", "")
        child = p
        while child["parent"] is not None and child["parent"]["pid"] not in self.tests:
            child = child["parent"]
        # the worker's record, or its pid only while it still runs (no record yet)
        worker = child["parent"]["pid"] if child["parent"] is not None else child["seen_ppid"] or child["ppid"]
        if worker not in self.tests:
            return ("(no test: controller, start-up)", "")
        return where(self.tests[worker], child["start"])


def python_other(argv: Optional[List[str]]) -> str:
    """A Python process of no kind above: its module (-m) or script."""
    if not argv:
        return "python: command line not seen"
    if "-c" in argv[:-1]:
        return "python -c (inline code)"
    if "-m" in argv[:-1]:
        return f"python -m {argv[argv.index('-m') + 1]}"
    scripts = [a for a in argv[1:] if not a.startswith("-")]
    return f"python {os.path.basename(scripts[0])}" if scripts else "python: other"


def where(lines: List[dict], t: float) -> Tuple[str, str]:
    """The (folder, module) of the test running at ``t`` among a worker's start/end lines."""
    i = bisect.bisect_right([e["t"] for e in lines], t) - 1
    if i < 0 or lines[i]["at"] != "start":
        return ("(between tests)", "")
    module = lines[i]["test"].split("::")[0]
    return (os.path.dirname(module), module)


def table(rows: List[Tuple[str, ...]], head: Tuple[str, ...]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * (len(head) - 1)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def report(out_dir: str) -> str:
    run = Run(out_dir)
    procs = run.ours()
    total = sum(p["cpu"] for p in procs) or 1.0
    kinds: Dict[str, List[float]] = defaultdict(lambda: [0, 0.0])
    folders: Dict[str, Dict[str, float]] = defaultdict(lambda: defaultdict(float))
    modules: Dict[str, float] = defaultdict(float)
    starts: Dict[str, Dict[str, int]] = defaultdict(lambda: defaultdict(int))  # module -> kind -> count
    for p in procs:
        kinds[p["kind"]][0] += 1
        kinds[p["kind"]][1] += p["cpu"]
        if p["pid"] in run.tests:  # a worker: its own CPU split by the tests it ran
            spent = own_cpu_by_test(run.tests[p["pid"]], folders, modules)
            folders["(no test: controller, start-up)"]["workers"] += max(0.0, p["cpu"] - spent)
            continue
        folder, module = run.test_of(p)
        folders[folder]["children"] += p["cpu"]
        if module:
            modules[module] += p["cpu"]
            starts[module][p["kind"]] += 1
    wall = run.meta["end"] - run.meta["start"]
    by_kind = sorted(kinds.items(), key=lambda kv: -kv[1][1])
    out = [f"command: {' '.join(run.meta['command'])}", f"exit status {run.meta['status']}, wall {wall:.0f} s, "
           f"CPU {total:.0f} s ({total / wall:.2f} CPUs on average), {len(procs)} processes", "",
           table([(k, str(n), f"{c:.1f}", f"{c / n:.2f}", f"{100 * c / total:.1f}") for k, (n, c) in by_kind],
                 ("kind", "processes", "CPU s", "CPU s each", "%")), ""]
    rows = sorted(((f, v) for f, v in folders.items() if sum(v.values()) >= 0.05), key=lambda kv: -sum(kv[1].values()))
    out += [table([(f, f"{v['workers']:.1f}", f"{v['children']:.1f}", f"{sum(v.values()):.1f}",
                    f"{100 * sum(v.values()) / total:.1f}") for f, v in rows],
                  ("test folder", "worker CPU s", "its processes' CPU s", "CPU s", "%")), ""]
    top = sorted(modules.items(), key=lambda kv: -kv[1])[:25]
    out += [table([(m, f"{c:.1f}", f"{100 * c / total:.1f}", str(starts[m][SERVE]), str(starts[m]["kube-apiserver"]),
                     str(sum(starts[m].values()))) for m, c in top],
                  ("module (top 25)", "CPU s", "%", "servers", "API servers", "processes"))]
    text = "\n".join(out) + "\n"
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write(text)
    return text


def own_cpu_by_test(lines: List[dict], folders, modules) -> float:
    """Add a worker's own CPU in each test (end minus start) to its folder and module; the sum."""
    spent = 0.0
    for start, end in zip(lines, lines[1:]):
        if start["at"] == "start" and end["at"] == "end" and start["test"] == end["test"]:
            module = start["test"].split("::")[0]
            folders[os.path.dirname(module)]["workers"] += end["cpu"] - start["cpu"]
            modules[module] += end["cpu"] - start["cpu"]
            spent += end["cpu"] - start["cpu"]
    return spent
