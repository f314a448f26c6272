"""One QEMU guest of the VM test: a fresh copy of the clean image, per-run files written into it
with debugfs (no mount, no loop device), a bounded run, and the results read back with debugfs.

    image = build_image()                       # tests/vm/build-image.sh, cached
    guest = Guest(image, workdir)
    guest.prepare({"/etc/node-agent/pointer.ign": (data, 0o644)})
    with guest.running():
        ...                                     # wait on the server's API
        guest.powerdown()
    guest.read_back(["/var/log/journal"], out_dir)

TCG only (KVM is not usable on the test machines), one vCPU (see ``Guest``), 1 GiB by default.
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple

from tests.vm.failure import PhaseFailed

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_TIMEOUT = 45 * 60  # a cold debootstrap on a loaded 2-core machine; a warm cache takes seconds


def cache_dir() -> str:
    """Outside the git tree, shared by every clone on the machine (the base image is the slow part)."""
    return os.environ.get("NODE_AGENT_VM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "node-agent-vm")


def build_image() -> str:
    """The clean image's directory (disk.img, vmlinuz, initrd.img), built or taken from the cache."""
    proc = subprocess.run(["bash", os.path.join(HERE, "build-image.sh"), cache_dir()], capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"build-image.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout.strip().splitlines()[-1]


# The guest's one vCPU is a QEMU thread that is busy for the whole scenario (TCG), and every
# wait of the scenario is the guest's work. Beside the test suites (as make test ran them, issue
# 54; docs/development.md) it got half a core: QEMU runs in a session of its own, and the kernel's autogroups
# (sched_autogroup_enabled, on by default in Debian's kernels) share the CPUs between sessions
# alike, whatever a process's nice, and each server and control plane of the suites is a session
# too. So both the process's nice and its session's autogroup are raised: the guest keeps a core
# as when it runs alone, whatever else the machine runs.
GUEST_NICE = -10


def favour(pid: int) -> None:
    """Weight the session ``pid`` leads up to GUEST_NICE in the kernel's autogroup scheduling
    (/proc/PID/autogroup; nothing to do where the kernel has none)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(GUEST_NICE))
    except FileNotFoundError:
        pass


def debugfs(image: str, commands: List[str], write: bool = False) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".debugfs", delete=False) as f:
        f.write("\n".join(commands) + "\n")
    try:
        proc = subprocess.run(["debugfs"] + (["-w"] if write else []) + ["-f", f.name, image],
                              capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        raise RuntimeError(f"debugfs on {image} failed: {proc.stderr}")
    return proc.stdout + proc.stderr


class Guest:
    """One vCPU: with two, QEMU 7.2's multi-threaded TCG hung a guest for good in one run of
    three (both vCPUs at 100%, RCU stalls, one vCPU trapping for ever on an int3 at a static
    branch, get_signal+0xa0, whose bytes the kernel had already patched back to a NOP: the other
    vCPU's code modification never reached its translated code). The kernel patches static
    branches at run time whenever netfilter, cgroups or tracing switch one, which the pods' CNI
    set-up does; one vCPU never executes code another changed."""

    def __init__(self, image_dir: str, workdir: str, memory_mb: int = 1024, cpus: int = 1):
        self.image_dir = image_dir
        self.workdir = workdir
        self.disk = os.path.join(workdir, "disk.img")
        self.serial_log = os.path.join(workdir, "serial.log")
        self.qmp_path = os.path.join(workdir, "qmp.sock")
        self.memory_mb = memory_mb
        self.cpus = cpus
        self.proc: Optional[subprocess.Popen] = None

    def prepare(self, files: Dict[str, Tuple[bytes, int]]) -> None:
        """A fresh copy of the clean image, with ``files`` (guest path -> (bytes, mode)) written
        in as root-owned files (their directories must exist in the image)."""
        os.makedirs(self.workdir, exist_ok=True)
        subprocess.run(["cp", "--sparse=always", os.path.join(self.image_dir, "disk.img"), self.disk],
                       check=True, timeout=600)
        staging = os.path.join(self.workdir, "files")
        os.makedirs(staging, exist_ok=True)
        commands = []
        for i, (path, (data, mode)) in enumerate(sorted(files.items())):
            local = os.path.join(staging, str(i))
            with open(local, "wb") as f:
                f.write(data)
            directory, name = os.path.split(path)
            commands += [f"cd {directory}", f"rm {name}", f"write {local} {name}",
                         f"sif {name} mode 0{0o100000 | mode:o}", f"sif {name} uid 0", f"sif {name} gid 0"]
        debugfs(self.disk, commands, write=True)
        shutil.rmtree(staging)
        for path, (data, _mode) in files.items():  # read back: debugfs reports few errors by exit code
            got = debugfs(self.disk, [f"cat {path}"])
            assert data.decode() in got, f"could not write {path} into {self.disk}:\n{got}"

    def command(self) -> List[str]:
        return [
            "qemu-system-x86_64", "-machine", "pc,accel=tcg", "-cpu", "max", "-smp", str(self.cpus),
            "-m", str(self.memory_mb), "-nodefaults", "-no-user-config", "-display", "none",
            "-kernel", os.path.join(self.image_dir, "vmlinuz"),
            "-initrd", os.path.join(self.image_dir, "initrd.img"),
            "-append", "root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.show_status=1"
            # cgroup v1: the kubelet's and containerd's systemd cgroup driver, as tried (v2 untried)
            " systemd.unified_cgroup_hierarchy=0",
            "-drive", f"file={self.disk},if=virtio,format=raw,cache=unsafe",
            "-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0",
            "-serial", f"file:{self.serial_log}",
            "-qmp", f"unix:{self.qmp_path},server=on,wait=off",
        ]

    @contextmanager
    def running(self) -> Iterator["Guest"]:
        """The guest runs inside the block, ahead of the machine's other work (``favour``); on the
        way out (also on an error or a timeout) a guest still running is killed."""
        self.proc = subprocess.Popen(["nice", "-n", str(GUEST_NICE)] + self.command(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        favour(self.proc.pid)
        try:
            yield self
        finally:
            self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _qmp(self, command: str, arguments: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """One QMP command; its answer ({"return": ...} or {"error": ...})."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(self.qmp_path)
            reader = s.makefile("r")
            reader.readline()  # greeting
            for cmd, args in (("qmp_capabilities", None), (command, arguments)):
                s.sendall(json.dumps(dict({"execute": cmd}, **({"arguments": args} if args else {}))).encode() + b"\n")
                while True:  # skip asynchronous events up to the command's answer
                    answer = json.loads(reader.readline())
                    if "return" in answer or "error" in answer:
                        break
            return answer

    def hmp(self, command_line: str) -> str:
        """A human monitor command (e.g. hostfwd_add, which QMP has no command of its own for):
        the monitor's text, empty when a command such as hostfwd_add succeeded."""
        answer = self._qmp("human-monitor-command", {"command-line": command_line})
        if "error" in answer:
            raise AssertionError(f"QMP human-monitor-command {command_line!r}: {answer['error']}")
        return str(answer.get("return") or "")

    def powerdown(self, timeout: float = 180.0) -> bool:
        """ACPI power button (logind powers off cleanly, the journal is flushed); True if the
        guest stopped within ``timeout``."""
        if not self.alive():
            return True
        self._qmp("system_powerdown")
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()  # qemu is our own child; its session holds nothing else
            self.proc.wait(30)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def qemu_output(self) -> str:
        return "" if self.proc is None or self.alive() or self.proc.stdout.closed else self.proc.stdout.read().decode()

    def serial_text(self, tail: int = 20000) -> str:
        try:
            with open(self.serial_log, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return "(no serial log)"
        return data[-tail:].decode("utf-8", "replace")

    def serial_tail(self) -> str:
        """For a failure's message: a CI log repeats it for every test of the session."""
        return f"the serial console, its tail:\n{self.serial_text(8000)}"

    def read_back(self, paths: List[str], out_dir: str) -> None:
        """Copy guest directories out of the (stopped) disk: ``rdump`` keeps their base names."""
        os.makedirs(out_dir, exist_ok=True)
        debugfs(self.disk, ["rdump " + " ".join(paths) + " " + out_dir])

    def cat(self, path: str) -> Optional[str]:
        out = debugfs(self.disk, [f"cat {path}"])
        lines = out.splitlines()
        text = "\n".join(line for line in lines if not line.startswith("debugfs "))
        return None if "File not found" in text else text


def wait_until(predicate, timeout: float, guest: Guest, what: str, poll: float = 2.0):
    """Poll ``predicate`` until it returns something true; a guest that stops or a timeout fails
    with the serial log's tail (the kernel's and systemd's view of a hung or crashed boot)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if not guest.alive():
            raise PhaseFailed(f"the guest stopped while waiting for {what}", guest.serial_tail())
        if time.monotonic() > deadline:
            raise PhaseFailed(f"{what}: not seen within {timeout:.0f} s", guest.serial_tail())
        time.sleep(poll)
