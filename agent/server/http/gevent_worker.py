"""The default gunicorn worker of node-config-server: gevent, with a deadline on every phase of a
connection.

Why an event loop: with threads (gunicorn's ``gthread``), a client that opens a connection and
sends one byte, or never finishes its TLS handshake, holds a thread; a few hundred of them
stopped everyone else (issue 16), and a storm of 200 TLS connections spent every thread in
``do_handshake``/``read`` (issue 19). Here each connection is a greenlet: a slow or idle socket
costs a file descriptor and a few KiB, never a thread.

Why not gunicorn's own gevent worker (``-k gevent``): it bounds only the wait for a request
head (by ``keepalive``), not the TLS handshake (done before its handler runs), the body or the
response, so a client could still hold a connection for ever. This worker does what Go's
net/http server does when its timeouts are set (``ReadHeaderTimeout``, ``ReadTimeout``,
``IdleTimeout``, ``WriteTimeout``; the MCS sets none of them, pkg/server/api.go), per phase
(docs/security.md, "Timeouts"):

- ``handshake``: the TLS handshake must be done this many seconds after the accept;
- ``header``: a request's head must be complete this many seconds after its first byte (the
  first request of a connection: after the handshake, as Go);
- ``idle``: a kept-alive connection waits this long for the next request's first byte
  (gunicorn's ``keepalive``);
- ``body``: a request body must have arrived this many seconds after its head;
- ``write``: the client must take each 256 KiB of the response within this many seconds, and
  the whole response within this many seconds per 4 MiB of it (at least this many: a client
  reading 256 KiB a minute held a 22 MB answer 88 minutes; now at most 5.2). docs/security.md,
  "Limits".

A connection past a deadline is closed (a late body gets a 408 first: agent/server/http/app.py).

Client certificates (issue 45): with the cluster's client CA (gunicorn_app.ssl_context_hook) the
handshake asks for one and verifies one it gets; this worker, which does the handshake itself,
reads the verified certificate and hands the app the node a kubelet's certificate names in each
request's environ (identity.KUBELET_NODE). gunicorn's gthread worker hands over no such proof.

gevent monkey-patches the worker process after the fork (before the app is built), so the
app's locks, ``threading.local``, sleeps, and the etcd watch and heartbeat threads become
cooperative; ``agent/server/store/sqlite/db.py`` keeps one SQLite connection per OS thread, not per greenlet.
"""

import signal
import socket
import sys
import time
from contextlib import contextmanager
from functools import partial
from typing import Any, Dict, Iterator, Set

import gevent
from gevent import monkey
from gevent.pool import Pool
from gevent.server import StreamServer
from gunicorn.http.body import ChunkedReader, LengthReader
from gunicorn.workers.base_async import AsyncWorker

from agent.server.http.bodyfiles import BodyFiles
from agent.server.http.limits import Limits
from agent.server.http.timedsocket import Expired, TimedSocket
from agent.server.rollout.identity import KUBELET_NODE, kubelet_node


class FrozenConfig:
    """gunicorn's Config as a worker reads it, each setting looked up once.

    Config answers every attribute through ``__getattr__`` (a dict lookup and a call of the
    setting's ``get``), and gunicorn reads about 21 settings per request: its request path took
    110 µs in-process, 82 µs with this (docs/performance.md, "Config storm"). A worker's settings
    never change after it starts (a reload starts new workers), so the first answer is kept as a
    plain attribute.
    """

    def __init__(self, cfg: Any):
        self._cfg = cfg

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._cfg, name)
        self.__dict__[name] = value
        return value

class Worker(AsyncWorker):
    """gunicorn's async worker loop on gevent; TLS handshakes and reads under deadlines."""

    limits = Limits()

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._conns: Set[TimedSocket] = set()
        self._ssl_ctx: Any = None
        self._bodies = BodyFiles() if BodyFiles.available() else None

    # -- process set-up -------------------------------------------------------------------------

    def init_process(self) -> None:
        # A graceful stop must not be lost while this worker starts. Until gunicorn's
        # init_signals (in super().init_process(), after the monkey-patching below) a forked
        # worker still has the master's handler, which queues the signal in the master's queue:
        # in this process, where nobody reads it. A SIGTERM arriving then was lost, and the
        # worker served on until the master killed it at the end of the graceful timeout (10 s).
        # handle_exit only clears ``alive``; gunicorn installs it again.
        signal.signal(signal.SIGTERM, self.handle_exit)
        # After the fork and before the app is loaded: everything the app builds (locks, thread
        # locals, the etcd watch and heartbeat threads, requests' sockets) is cooperative.
        import ssl
        import warnings

        unpatched = ssl.SSLContext
        with warnings.catch_warnings(), entry_points_once():  # the hazard it warns of is undone just below
            warnings.simplefilter("ignore", monkey.MonkeyPatchWarning)
            monkey.patch_all()
        _repoint_ssl_context(unpatched)
        self.sockets = [socket.socket(s.FAMILY, socket.SOCK_STREAM, fileno=s.sock.detach()) for s in self.sockets]
        gevent.get_hub()  # this process's own hub (the arbiter never started one)
        super().init_process()

    def notify(self) -> None:
        super().notify()
        import os

        if self.ppid != os.getppid():
            self.log.info("Parent changed, shutting down: %s", self)
            raise SystemExit(0)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi = _WithKubeletNode(self.wsgi)

    def timeout_ctx(self) -> Any:
        # gunicorn wraps each wait for a request head in this; the deadlines of TimedSocket apply.
        return _NoTimeout()

    def handle_quit(self, sig: int, frame: Any) -> None:
        gevent.spawn(super().handle_quit, sig, frame)  # out of the signal handler (gunicorn #1126)

    def handle_usr1(self, sig: int, frame: Any) -> None:
        gevent.spawn(super().handle_usr1, sig, frame)

    # -- serving ------------------------------------------------------------------------------

    def run(self) -> None:
        self.cfg = FrozenConfig(self.cfg)
        if self.cfg.is_ssl:
            from gunicorn.sock import ssl_context

            self._ssl_ctx = ssl_context(self.cfg)
        servers = []
        for s in self.sockets:
            s.setblocking(1)
            server = StreamServer(s, handle=partial(self.handle, s), spawn=Pool(self.worker_connections))
            if self.cfg.workers > 1:
                server.max_accept = 1  # leave the next connection to a less busy worker
            server.start()
            servers.append(server)
        while self.alive:
            self.notify()
            gevent.sleep(1.0)
        self._stop(servers)

    def _stop(self, servers: list) -> None:
        """Graceful stop (SIGTERM): no new connections; those idle or still sending a request
        head are closed at once (Go's ``Server.Shutdown`` closes idle ones); requests in flight
        get up to ``graceful_timeout`` to finish."""
        for server in servers:
            server.close()
        stopping = getattr(self.wsgi, "stopping", None)
        if stopping is not None:  # held fetches (long polls) are answered now: nothing waits on them
            stopping.set()
        deadline = time.monotonic() + self.cfg.graceful_timeout
        while time.monotonic() < deadline:
            for conn in list(self._conns):
                conn.close_if_idle()
            if all(server.pool.free_count() == server.pool.size for server in servers):
                return
            self.notify()
            gevent.sleep(0.1)
        self.log.warning("Worker graceful timeout (pid:%s)", self.pid)
        for server in servers:
            server.stop(timeout=1)

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        peer = _peer(addr)
        client.setblocking(1)
        if self._ssl_ctx is not None:
            try:
                with gevent.Timeout(self.limits.handshake, Expired):
                    client = self._ssl_ctx.wrap_socket(client, server_side=True, do_handshake_on_connect=False,
                                                       suppress_ragged_eofs=True)
                    client.do_handshake()
            except Expired:
                self.log.info("%s: TLS handshake not done within %.0f s; closing", peer, self.limits.handshake)
                client.close()
                return
            except OSError as exc:  # not TLS, bad client hello, reset: nothing to answer
                self.log.debug("%s: TLS handshake failed: %s", peer, exc)
                client.close()
                return
        conn = TimedSocket(client, self.limits, self.log, peer, self._bodies)
        conn.kubelet_node = _kubelet_node(client, self.log, peer) if self._ssl_ctx is not None else ""
        self._conns.add(conn)
        try:
            super().handle(listener, conn, addr)
        finally:
            self._conns.discard(conn)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        sock.request_started(req)
        # gunicorn asks the request whether to close (its response's "Connection" header, the
        # keep-alive loop): ours also closes after an answer that left the body unread.
        req.should_close = partial(_should_close, req, req.should_close)
        try:
            return super().handle_request(listener_name, req, sock, addr)
        except gevent.GreenletExit:
            return False
        finally:
            del req.should_close  # gunicorn's own again (no cycle through the request)
            sock.request_done()


def _kubelet_node(client: Any, log: Any, peer: str) -> str:
    """The node a kubelet client certificate presented in the handshake names (identity.kubelet_node),
    or "". The context verifies a client certificate against the cluster's client CA alone
    (gunicorn_app.ssl_context_hook, CERT_OPTIONAL): a certificate it could not verify failed the
    handshake, so whatever ``getpeercert`` returns here was verified; a client without one still
    connected, and proves nothing."""
    try:
        cert = client.getpeercert()
    except (ValueError, OSError):
        return ""
    name = kubelet_node(cert)
    if cert and not name:
        log.debug("%s: a client certificate the cluster's CA signed, but not a kubelet's (CN system:node:<name>, "
                  "O system:nodes): it proves no node", peer)
    return name


class _WithKubeletNode:
    """The app, handed the proven node of each request's connection in its environ
    (identity.KUBELET_NODE; "" without a kubelet certificate). Everything else is the app's own
    (gunicorn's hooks call ``warm`` and ``retire`` on it)."""

    def __init__(self, app: Any):
        self.app = app

    def __call__(self, environ: Dict[str, Any], start_response: Any) -> Any:
        environ[KUBELET_NODE] = getattr(environ.get("gunicorn.socket"), "kubelet_node", "")
        return self.app(environ, start_response)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


class _NoTimeout:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


def _should_close(req: Any, gunicorn_says: Any) -> bool:
    """Whether the connection closes after this request's response: as gunicorn decides, and
    also when the request was marked so (``must_close``: the body deadline, timedsocket.py) or
    its body was not all read (an error answered early: 408, 413, 415, 401...). gunicorn would
    otherwise keep the connection and read that body to its end before the next request.

    Newer gunicorn (27) honours ``must_close`` itself (http/message.py Message.should_close);
    21.2 (EPEL 9) has no such flag on a request (http/message.py:156): a 408 said "keep-alive"."""
    return getattr(req, "must_close", False) or _body_unread(req.body) or gunicorn_says()


def _body_unread(body: Any) -> bool:
    """Whether part of a request body is still unread (the readers of gunicorn's http/body.py)."""
    if body is None:
        return False
    if body.buf.tell():  # read from the socket but not handed to the app yet
        return True
    reader = body.reader
    if isinstance(reader, LengthReader):
        return reader.length > 0
    if isinstance(reader, ChunkedReader):  # its last chunk not reached yet
        return reader.parser is not None or reader.buf.tell() > 0
    return False


def _peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


def worker_class(limits: Limits) -> type:
    """A Worker subclass carrying these limits (gunicorn takes a class as ``worker_class``)."""
    return type("GeventWorkerWithDeadlines", (Worker,), {"limits": limits, "__module__": __name__})


@contextmanager
def entry_points_once() -> Iterator[None]:
    """Within it, ``importlib.metadata.entry_points`` answers from one reading of the installed
    distributions' entry points. gevent's ``patch_all`` looks its plugins up for each of the
    about 25 events it announces (gevent/events.py, ``notify_and_call_entry_points``), and each
    lookup reads every installed distribution's metadata again: two thirds of ``patch_all``'s
    time in the image (34 distributions: 0.2 s of CPU on the 2-core host, 0.06 s with this), which
    each worker spends before it can answer, and which a small or emulated CPU multiplies (the VM
    test's pod starts three times: docs/vm-test.md, "Timings"). Nothing installs or removes a
    distribution while a worker starts, so the one reading answers every lookup the same."""
    from importlib import metadata

    real = metadata.entry_points
    every = real()  # Python 3.9: a dict by group; 3.10 on: selectable (group=...)
    metadata.entry_points = lambda **params: every.select(**params) if params else every  # type: ignore[assignment]
    try:
        yield
    finally:
        metadata.entry_points = real


def _repoint_ssl_context(unpatched: type) -> None:
    """Modules imported before the patching that keep their own ``SSLContext`` name (urllib3's
    ``from ssl import SSLContext``: serve's master reads the Kubernetes API or etcd over TLS
    before it forks) would make contexts of the standard library's class, whose property setters
    then reach gevent's patched ``ssl.SSLContext`` and recurse (RecursionError on the first TLS
    connection; gevent issue 1016). Point each at the patched class, as an import after the
    patching would have."""
    import ssl

    if ssl.SSLContext is unpatched:
        return
    for module in list(sys.modules.values()):
        if getattr(module, "SSLContext", None) is unpatched and module is not ssl:
            module.SSLContext = ssl.SSLContext
