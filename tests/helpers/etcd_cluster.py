"""A real etcd cluster of N members on loopback, started and stopped by the tests.

Uses Debian's etcd-server (3.4), which the Makefile installs. Each member gets its own data
directory under the test's tmp dir and free ports; ``kill(i)`` is SIGKILL, ``start(i)`` brings
the same member back with its data. ``quota_bytes`` starts the members with that
``--quota-backend-bytes`` (a small one fills in a second: etcd's NOSPACE alarm for real).
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from typing import List, Optional

import requests

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def have_etcd() -> bool:
    return os.access(ETCD, os.X_OK)


PORTS_FROM = 10000  # below it: the well-known ports of services a developer machine may run


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _free_ports(n: int) -> List[int]:
    """``n`` ports nothing listens on, taken below the kernel's ephemeral range. A component binds
    its port seconds after they are chosen (kube-scheduler once the API server is up; a killed
    etcd member when it comes back), and a port the kernel handed out for ``bind(0)`` is one any
    outgoing connection may take as its local port meanwhile: kube-scheduler failed "address
    already in use" so, while other tests connected. Without room below the range (a tuned
    ``ip_local_port_range``), the kernel's own choice."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            socks.append(s)
            port = rng.randrange(PORTS_FROM, low) if low - PORTS_FROM >= 1000 else 0
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # taken: another one
                continue
            ports.append(s.getsockname()[1])  # held bound until all are chosen: no port twice
    finally:
        for s in socks:
            s.close()
    return ports


class EtcdCluster:
    def __init__(self, base_dir: str, size: int = 3, quota_bytes: Optional[int] = None):
        self.base_dir = base_dir
        self.quota_bytes = quota_bytes
        os.makedirs(base_dir, exist_ok=True)
        self.size = size
        ports = _free_ports(2 * size)
        self.client_ports = ports[:size]
        self.peer_ports = ports[size:]
        self.procs: List[Optional[subprocess.Popen]] = [None] * size
        self.initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(self.peer_ports))

    @property
    def endpoints(self) -> List[str]:
        return [f"127.0.0.1:{p}" for p in self.client_ports]

    @property
    def url(self) -> str:
        return "etcd://" + ",".join(self.endpoints)

    def _cmd(self, i: int) -> List[str]:
        client = f"http://127.0.0.1:{self.client_ports[i]}"
        peer = f"http://127.0.0.1:{self.peer_ports[i]}"
        quota = ["--quota-backend-bytes", str(self.quota_bytes)] if self.quota_bytes else []
        return [ETCD, *quota, "--name", f"m{i}", "--data-dir", os.path.join(self.base_dir, f"m{i}"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", self.initial, "--initial-cluster-state", "new",
                "--initial-cluster-token", "node-agent-test",
                # Short election timers: a killed leader is replaced in about a second.
                "--heartbeat-interval", "100", "--election-timeout", "1000",
                "--logger", "zap", "--log-outputs", os.path.join(self.base_dir, f"m{i}.log")]

    def start(self, i: Optional[int] = None) -> None:
        for j in ([i] if i is not None else range(self.size)):
            if self.procs[j] is None:
                self.procs[j] = subprocess.Popen(self._cmd(j), stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL, start_new_session=True)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Until every running member answers and the cluster has a leader."""
        deadline = time.monotonic() + timeout
        while True:
            ok = True
            for j, proc in enumerate(self.procs):
                if proc is None:
                    continue
                if proc.poll() is not None:
                    raise RuntimeError(f"etcd member m{j} exited ({proc.returncode}); see "
                                       f"{self.base_dir}/m{j}.log")
                try:
                    r = requests.get(f"http://127.0.0.1:{self.client_ports[j]}/health", timeout=2)
                    ok = ok and r.status_code == 200 and r.json().get("health") == "true"
                except requests.RequestException:
                    ok = False
            if ok:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"etcd cluster not healthy within {timeout:.0f}s ({self.base_dir})")
            time.sleep(0.2)

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # it had exited already
                pass
            proc.wait(timeout=10)
            self.procs[i] = None

    def stop(self) -> None:
        for i in range(self.size):
            self.kill(i)

    def __enter__(self) -> "EtcdCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
