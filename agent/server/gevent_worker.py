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
- ``write``: the client must take each 256 KiB of the response within this many seconds.

A connection past a deadline is closed (a late body gets a 408 first: agent/server/app.py).

gevent monkey-patches the worker process after the fork (before the app is built), so the
app's locks, ``threading.local``, sleeps, and the etcd watch and heartbeat threads become
cooperative; ``agent/server/db.py`` keeps one SQLite connection per OS thread, not per greenlet.
"""

import os
import signal
import socket
import ssl
import time
from functools import partial
from typing import Any, Optional, Set

import gevent
from gevent import monkey
from gevent.pool import Pool
from gevent.server import StreamServer
from gevent.socket import wait_read, wait_write
from gunicorn.workers.base_async import AsyncWorker

from agent.server.bodyfiles import BodyFiles
from agent.server.gunicorn_app import Limits

WRITE_CHUNK = 256 * 1024
ZERO_COPY_MIN = 64 * 1024  # smaller bodies: one send() is cheaper than a sendfile set-up


class Expired(Exception):
    """A connection's deadline passed (raised into the greenlet by a gevent.Timeout)."""


class _Closing(Exception):
    """The worker is stopping: an idle connection is closed."""


class BodyTimeout(TimeoutError):
    """The request body did not arrive in time: the app answers 408, the connection closes."""


class TimedSocket:
    """The client socket as gunicorn's parser and response writer see it, with the deadlines.

    Phases: ``idle`` (waiting for a request's first byte), ``head`` (reading the request line
    and headers), ``body`` (the app has the request: reading its body, writing the response),
    ``closed`` (a deadline passed: reads see end of file, so gunicorn closes quietly).
    """

    def __init__(self, sock: Any, limits: Limits, log: Any, peer: str, bodies: Any = None):
        self._sock = sock
        self.bodies = bodies
        self.plain = not isinstance(sock, ssl.SSLSocket)
        self.fd = sock.fileno() if self.plain else -1  # non-blocking (gevent): read/write it directly first
        self.zero_copy = bodies is not None and self.plain
        self.limits = limits
        self.log = log
        self.peer = peer
        self.phase = "idle"
        self.first = True
        self.waiting: Any = None  # the greenlet blocked in a read before a request (the worker may stop it)
        self.request: Any = None  # gunicorn's request being served
        self._deadline = time.monotonic() + limits.header

    # -- phases (the worker calls these around each request) ----------------------------------

    def request_started(self, req: Any) -> None:
        self.request = req
        self.phase = "body"
        self._deadline = time.monotonic() + self.limits.body

    def request_done(self) -> None:
        if self.phase != "closed":
            self.phase = "idle"
            self.first = False
            self._deadline = time.monotonic() + self.limits.idle

    def close_if_idle(self) -> None:
        """Called by a stopping worker: a connection waiting for a request, or for the rest of
        its head, is closed (no request was dispatched on it: the client may retry at once).
        The exception is thrown from the hub (as gevent.kill does), and only if the greenlet
        is still waiting in a read outside a request's body then."""
        gevent.get_hub().loop.run_callback(self._throw_if_idle)

    def _throw_if_idle(self) -> None:
        g = self.waiting
        if self.phase in ("idle", "head") and g is not None and not g.dead:
            g.throw(_Closing())

    # -- the socket interface gunicorn uses ---------------------------------------------------

    def recv(self, size: int) -> bytes:
        if self.phase == "closed":
            return b""
        left = self._deadline - time.monotonic()
        idle = self.phase == "idle"
        if left <= 0:
            return self._expire()
        data = self._ready(size)
        if data is None:
            data = self._wait_recv(size, left)
        if idle and data:
            self.phase = "head"
            if not self.first:  # the first request's head counts from the handshake, as Go's
                self._deadline = time.monotonic() + self.limits.header
        return data

    def _ready(self, size: int) -> Optional[bytes]:
        """What a plain socket has already received (None: nothing yet, or TLS). Most reads of a
        kept-alive client find their data waiting: reading it at once spares a deadline timer
        (a gevent.Timeout set up and cancelled per read)."""
        if self.fd < 0:
            return None
        try:
            return os.read(self.fd, size)
        except BlockingIOError:
            return None

    def _wait_recv(self, size: int, left: float) -> bytes:
        try:
            self.waiting = gevent.getcurrent() if self.phase != "body" else None
            if self.fd >= 0:
                return self._wait_plain(size, time.monotonic() + left)
            with gevent.Timeout(left, Expired):
                return self._sock.recv(size)
        except Expired:
            return self._expire()
        except _Closing:
            self.phase = "closed"
            return b""
        finally:
            self.waiting = None

    def _wait_plain(self, size: int, deadline: float) -> bytes:
        while True:  # a wake-up without data (spurious) waits again
            wait_read(self.fd, timeout=max(0.0, deadline - time.monotonic()), timeout_exc=Expired())
            data = self._ready(size)
            if data is not None:
                return data

    def _expire(self) -> bytes:
        phase, self.phase = self.phase, "closed"
        if phase == "body":
            self.request.must_close = True  # the 408 says "Connection: close"
            self.log.info("%s: request body not received within %.0f s; answering 408 and closing",
                          self.peer, self.limits.body)
            raise BodyTimeout(f"the request body did not arrive within {self.limits.body:g} s")
        if phase == "head" or self.first:
            self.log.info("%s: request head not received within %.0f s; closing", self.peer, self.limits.header)
        return b""

    def sendall(self, data: Any) -> None:
        if self.zero_copy and type(data) is bytes and len(data) >= ZERO_COPY_MIN:
            return self._sendfile_bytes(data)
        if self.fd >= 0 and len(data) < ZERO_COPY_MIN:  # a response head: the socket buffer takes it at once
            try:
                sent = os.write(self.fd, data)
            except BlockingIOError:
                sent = 0
            if sent == len(data):
                return None
            data = memoryview(data)[sent:]
        self._sendall_copy(data)

    def _sendall_copy(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), WRITE_CHUNK):
            try:
                with gevent.Timeout(self.limits.write, Expired):
                    self._sock.sendall(view[start:start + WRITE_CHUNK])
            except Expired:
                raise self._too_slow() from None

    def _too_slow(self) -> ConnectionResetError:
        """The write deadline passed: close, and the error to raise. gunicorn logs ECONNRESET at
        debug level and closes the socket: what is wanted."""
        self.phase = "closed"
        self.log.info("%s: response not taken within %.0f s per %d KiB; closing", self.peer,
                      self.limits.write, WRITE_CHUNK // 1024)
        return ConnectionResetError(104, "client too slow to take the response")

    def _sendfile_bytes(self, data: bytes) -> None:
        """A large body over plain TCP, by ``sendfile(2)`` from a file holding the same bytes
        (made once per body, agent/server/bodyfiles.py): the kernel sends the pages without
        copying them through Python, as nginx serves a static file. Same deadline: 256 KiB per
        ``write`` seconds."""
        fd = self.bodies.acquire(data)
        if fd is None:  # first time this body is sent
            return self._sendall_copy(data)
        try:
            self._sendfile_fd(fd, len(data))
        finally:
            self.bodies.release(fd)

    def _sendfile_fd(self, fd: int, total: int) -> None:
        out = self._sock.fileno()
        offset = 0
        mark, deadline = 0, time.monotonic() + self.limits.write
        while offset < total:
            try:
                sent = os.sendfile(out, fd, offset, total - offset)
            except BlockingIOError:
                sent = None
            if sent == 0:
                raise ConnectionResetError(104, "sendfile sent nothing")
            if sent:
                offset += sent
                if offset - mark >= WRITE_CHUNK:
                    mark, deadline = offset, time.monotonic() + self.limits.write
                continue
            try:
                wait_write(out, timeout=max(0.0, deadline - time.monotonic()), timeout_exc=Expired())
            except Expired:
                raise self._too_slow() from None

    def send(self, data: Any) -> int:
        self.sendall(data)
        return len(data)

    def sendfile(self, file: Any, offset: int = 0, count: Optional[int] = None) -> int:
        file.seek(offset)
        left = count
        sent = 0
        while left is None or left > 0:
            chunk = file.read(WRITE_CHUNK if left is None else min(WRITE_CHUNK, left))
            if not chunk:
                break
            self.sendall(chunk)
            sent += len(chunk)
            if left is not None:
                left -= len(chunk)
        return sent

    def close(self) -> None:
        self.phase = "closed"
        self._sock.close()

    def __getattr__(self, name: str) -> Any:  # fileno, getpeername, shutdown, setsockopt, ...
        return getattr(self._sock, name)


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
        monkey.patch_all()
        self.sockets = [socket.socket(s.FAMILY, socket.SOCK_STREAM, fileno=s.sock.detach()) for s in self.sockets]
        gevent.get_hub()  # this process's own hub (the arbiter never started one)
        super().init_process()

    def notify(self) -> None:
        super().notify()
        import os

        if self.ppid != os.getppid():
            self.log.info("Parent changed, shutting down: %s", self)
            raise SystemExit(0)

    def timeout_ctx(self) -> Any:
        # gunicorn wraps each wait for a request head in this; the deadlines of TimedSocket apply.
        return _NoTimeout()

    def handle_quit(self, sig: int, frame: Any) -> None:
        gevent.spawn(super().handle_quit, sig, frame)  # out of the signal handler (gunicorn #1126)

    def handle_usr1(self, sig: int, frame: Any) -> None:
        gevent.spawn(super().handle_usr1, sig, frame)

    # -- serving ------------------------------------------------------------------------------

    def run(self) -> None:
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
        self._conns.add(conn)
        try:
            super().handle(listener, conn, addr)
        finally:
            self._conns.discard(conn)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        sock.request_started(req)
        try:
            return super().handle_request(listener_name, req, sock, addr)
        except gevent.GreenletExit:
            return False
        finally:
            sock.request_done()


class _NoTimeout:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


def _peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


def worker_class(limits: Limits) -> type:
    """A Worker subclass carrying these limits (gunicorn takes a class as ``worker_class``)."""
    return type("GeventWorkerWithDeadlines", (Worker,), {"limits": limits, "__module__": __name__})
