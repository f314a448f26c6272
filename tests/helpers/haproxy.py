"""A real load balancer in front of server replicas: Debian's haproxy in TCP mode on loopback.

TLS passes through to the replicas (they share one certificate); a replica that refuses
connections is skipped (``option redispatch`` with retries), as a cluster's API load balancer
would do for the MCS on every control-plane node.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import List

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def have_haproxy() -> bool:
    return os.access(HAPROXY, os.X_OK)


class HAProxy:
    def __init__(self, workdir: str, port: int, backends: List[int]):
        self.port = port
        self.config = os.path.join(workdir, "haproxy.cfg")
        servers = "\n".join(f"    server r{i} 127.0.0.1:{p} check inter 500 fall 1 rise 1"
                            for i, p in enumerate(backends))
        with open(self.config, "w") as f:
            f.write(f"""global
    maxconn 4096
defaults
    mode tcp
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    retries 3
    option redispatch
frontend replicas
    bind 127.0.0.1:{port}
    default_backend servers
backend servers
    balance roundrobin
{servers}
""")
        self.proc = None

    def __enter__(self) -> "HAProxy":
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", self.config], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"haproxy did not start (config {self.config})")
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
