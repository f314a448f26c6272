"""Start the real node-config-server (gunicorn) on a free loopback port, wait for /healthz, stop.

    with ServerProcess(state_dir, tls=make_tls(tmp), token="s3cret") as srv:
        r = srv.session().get(srv.url("/config/worker"))

Reusable by end-to-end tests: ``base_url``, ``verify`` (the CA file, or True), ``token``,
``url(path)``, ``session()`` (a requests.Session with verify and the token set), ``log_text()``,
``wait_state_read()`` (after editing the state directory: every worker serves it as it is now).
``data_dir`` (serve --data-dir: nodes.db) is a temporary directory of this object's own (kept
across stop() and start(), removed on leaving the ``with`` or when the object goes), unless one is
given: a test never writes to /var/lib/node-config-server, serve's default.

Approval: serve's default keeps a newly registered name out of every count until approved
(docs/security.md "Identity"). Most tests register nodes that must count at once, so the harness
says so explicitly: ``auto_approve=EVERY_NAME`` (serve ``--auto-approve '.*'``) is its default,
and a test of approval itself passes ``auto_approve=None`` to get serve's own default (or its own
``--auto-approve`` in ``extra_args``).
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence

import requests

from agent.server.store.stateformat import signature
from tests.helpers.wait import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVERY_NAME = ".*"  # serve --auto-approve: every registered name counts at once (a deliberate choice)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def terminate(proc: subprocess.Popen, timeout: float) -> None:
    """Stop a server started in a session of its own: SIGTERM (gunicorn's master stops its workers
    gracefully), then SIGKILL to that session if it is still there after ``timeout`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own session only
            proc.wait()


class ServerProcess:
    def __init__(self, state_dir: Optional[str], tls=None, token: Optional[str] = None, workers: int = 2,
                 threads: int = 8, extra_args: Sequence[str] = (), port: Optional[int] = None,
                 settle: Optional[float] = 0.5, data_dir: Optional[str] = None,
                 auto_approve: Optional[str] = EVERY_NAME, kubelet: Optional[Callable[[str], Any]] = None):
        self.state_dir = state_dir
        self._data_dir_cleanup = None
        if data_dir is None:
            data_dir = tempfile.mkdtemp(prefix="node-config-server-data-")
            self._data_dir_cleanup = weakref.finalize(self, shutil.rmtree, data_dir, True)
        self.data_dir = data_dir
        self.tls = tls
        self.token = token
        self.workers = workers
        self.threads = threads
        self.extra_args = list(extra_args)
        self.auto_approve = auto_approve
        # Tests that edit the state directory want it read within a second; serve's own default
        # (10 s, the settle rule of docs/security.md) is kept by settle=None.
        self.settle = settle
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None
        self._logfile = tempfile.NamedTemporaryFile(prefix="node-config-server-", suffix=".log", delete=False)
        self._log_kept = ""  # the log's text once stop() has removed the file
        self._token_file: Optional[str] = None
        self.credentials: Dict[str, str] = {}  # node -> its credential (node_session registers it)
        # node -> its kubelet's client certificate (a path, or (cert, key)), which node_session
        # presents: on a server with that cluster's client CA it proves the node's name
        # (docs/security.md "Identity"; with --backend kubernetes a report counts only then, or
        # once the admin approved the name).
        self.kubelet = kubelet

    @property
    def base_url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def verify(self):
        return self.tls.ca_cert if self.tls else True

    def url(self, path: str) -> str:
        return self.base_url + path

    def session(self, token: bool = True) -> requests.Session:
        s = requests.Session()
        s.trust_env = False  # else REQUESTS_CA_BUNDLE (and proxies) from the environment beat s.verify
        s.verify = self.verify
        if token and self.token:
            s.headers["Authorization"] = f"Bearer {self.token}"
        return s

    def node_session(self, node: str, kubelet: bool = True) -> requests.Session:
        """A session that is node ``node``: registered once with the bootstrap token, then its
        own credential on every request (agent/server/rollout/identity.py); with ``kubelet`` and
        a ``kubelet`` source, presenting the node's kubelet client certificate on each too."""
        cert = self.kubelet(node) if kubelet and self.kubelet is not None else None
        cred = self.credentials.get(node)
        if cred is None:
            reg = self.session()
            reg.cert = cert
            r = reg.post(self.url(f"/api/v1/nodes/{node}/register"))
            assert r.status_code == 201, r.text
            cred = self.credentials[node] = r.json()["credential"]
        s = self.session(token=False)
        s.headers["Authorization"] = f"Bearer {cred}"
        s.cert = cert
        return s

    def wait_state_read(self, timeout: float = 60.0) -> str:
        """Wait until each worker serves the state directory as it is on disk now, and return its
        signature. Each gunicorn worker reads the directory on its own (a second or so after an
        edit, tests' settle time): until both have, a request may be answered from the old state
        by whichever worker takes it. Each look is a fresh connection (any worker may take it);
        its /api/v1/cluster names the answering worker's pid and the signature it serves, and a
        worker never goes back to an older signature, so the pids seen serving this one suffice."""
        want = signature(self.state_dir)
        seen = set()

        def every_worker_read():
            with self.session() as look:
                look.headers["Connection"] = "close"
                replicas = look.get(self.url("/api/v1/cluster"), timeout=30).json()["replicas"]
            seen.update(r["pid"] for r in replicas if r.get("stateSignature") == want)
            return len(seen) >= self.workers

        wait_for(every_worker_read, f"each of the {self.workers} workers serves the state directory as edited "
                 f"(signature {want[:12]})", timeout, interval=0.02)
        return want

    def command(self) -> List[str]:
        cmd = [sys.executable, "-m", "agent.server.cli", "serve"]
        if self.state_dir:  # None: state objects come from the store (--store etcd://...)
            cmd += ["--state", self.state_dir]
        if "--data-dir" not in self.extra_args:
            cmd += ["--data-dir", self.data_dir]
        cmd += ["--listen", f"127.0.0.1:{self.port}", "--workers", str(self.workers), "--threads", str(self.threads)]
        if self.settle is not None and "--settle-seconds" not in self.extra_args:
            cmd += ["--settle-seconds", str(self.settle)]
        if self.tls:
            cmd += ["--tls-cert", self.tls.cert, "--tls-key", self.tls.key]
        if self.token:
            fd, self._token_file = tempfile.mkstemp(prefix="nc-token-")
            with os.fdopen(fd, "w") as f:
                f.write(self.token + "\n")
            cmd += ["--token-file", self._token_file]
        if self.auto_approve is not None and "--auto-approve" not in self.extra_args:
            cmd += ["--auto-approve", self.auto_approve]
        return cmd + self.extra_args

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        if self._logfile is None:  # started again after stop()
            self._logfile = tempfile.NamedTemporaryFile(prefix="node-config-server-", suffix=".log", delete=False)
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(self.command(), stdout=self._logfile, stderr=subprocess.STDOUT, env=env,
                                     cwd=REPO, start_new_session=True)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise RuntimeError(f"node-config-server exited with {code}:\n{self.log_text()}")
            try:
                r = requests.get(self.url("/healthz"), verify=self.verify, timeout=2)
                if r.status_code == 200:
                    return self
                last = f"HTTP {r.status_code}"
            except requests.RequestException as exc:
                last = exc
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"node-config-server did not become healthy in {timeout}s ({last}):\n{self.log_text()}")

    def stop(self, timeout: float = 15.0) -> None:
        try:
            self._stop(timeout)
        finally:
            self._drop_log()

    def _drop_log(self) -> None:
        """Keep the log's text for log_text() and remove the file: tests leave nothing in /tmp."""
        if self._logfile is None:
            return
        text = self.log_text()
        self._logfile.close()
        self._log_kept = text
        try:
            os.unlink(self._logfile.name)
        except FileNotFoundError:
            pass
        self._logfile = None

    def _stop(self, timeout: float) -> None:
        if self.proc is None:
            return
        terminate(self.proc, timeout)
        self.proc = None
        if self._token_file:
            os.unlink(self._token_file)
            self._token_file = None

    def log_text(self) -> str:
        if self._logfile is None:
            return self._log_kept
        self._logfile.flush()
        with open(self._logfile.name, encoding="utf-8", errors="replace") as f:
            return self._log_kept + f.read()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._data_dir_cleanup is not None:
            self._data_dir_cleanup()  # our own temporary data directory, nodes.db with it
