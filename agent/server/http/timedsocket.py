"""The client socket of node-config-server's gevent worker (agent/server/http/gevent_worker.py): every
read and write of a connection under its phase's deadline, large bodies sent by ``sendfile``.

Deadlines (docs/security.md, "Timeouts"): ``header`` for a request head from its first byte,
``idle`` between kept-alive requests, ``body`` for a request body from the end of its head,
``write`` for each 256 KiB of a response and, for the whole response, ``write`` per 4 MiB of it
(at least ``write``; from its first byte written: a client must take a response at about 68 KiB/s
on average with the default 60 s, so a 22 MB answer is held at most 5.2 minutes, not the 88 a
client reading 256 KiB a minute took). A deadline that passes closes the connection (a late body
gets a 408 first: agent/server/http/app.py).

A response goes out in as few segments as its parts allow (plain HTTP): gunicorn writes the head
and then the body; the head is held until the body's first write, then goes out with it (a small
body: one ``send``), or with ``MSG_MORE`` before a ``sendfile`` (a large one), so the client's
first segment is full, as nginx's ``tcp_nopush`` does. A response without a body (HEAD, 304) has
its head sent when the request ends.
"""

import os
import socket
import ssl
import time
from typing import Any, Optional

import gevent
from gevent.socket import wait_read, wait_write

from agent.server.http.limits import Limits

WRITE_CHUNK = 256 * 1024
WRITE_TOTAL_PER = 4 * 1024 * 1024  # a whole response gets ``write`` seconds per this many bytes
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
        self.kubelet_node = ""  # the node a verified kubelet certificate of this connection names (gevent_worker)
        self.phase = "idle"
        self.first = True
        self.waiting: Any = None  # the greenlet blocked in a read before a request (the worker may stop it)
        self.request: Any = None  # gunicorn's request being served
        self._deadline = time.monotonic() + limits.header
        self._hold = False  # the next write is a response head, to be held (plain HTTP)
        self._head: Optional[bytes] = None  # a held response head
        self._resp_start = 0.0  # when the response's first byte was handed over (0: not yet)
        self._resp_bytes = 0  # bytes of the response handed over so far (head included)
        self._discarding = False  # the app drops the rest of the body (cap_body_wait)

    # -- phases (the worker calls these around each request) ----------------------------------

    def request_started(self, req: Any) -> None:
        self.request = req
        self.phase = "body"
        self._deadline = time.monotonic() + self.limits.body
        self._discarding = False
        self._hold = self.fd >= 0
        self._resp_start, self._resp_bytes = 0.0, 0

    def request_done(self) -> None:
        self._hold = False
        self._resp_start, self._resp_bytes = 0.0, 0
        head, self._head = self._head, None
        if self.phase == "closed":
            return
        if head is not None:  # a response without a body
            self._send_small(head)
        self.phase = "idle"
        self.first = False
        self._deadline = time.monotonic() + self.limits.idle

    def cap_body_wait(self, seconds: float) -> None:
        """What is left of a body the app will not use (httpio._discard) is waited for at most
        ``seconds`` more: a client that declared a large body and stalls holds the answer that
        long, not the whole body deadline."""
        if self.phase == "body":
            self._deadline = min(self._deadline, time.monotonic() + seconds)
            self._discarding = True

    def close_after_response(self) -> None:
        """The app's answer ends this connection (a 413: the rest of its body is not waited for)."""
        if self.request is not None:
            self.request.must_close = True

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
        if phase == "body" and self._discarding:  # the answer is given all the same (httpio._discard)
            self.request.must_close = True
            self.log.info("%s: the rest of an unwanted request body not received in time; closing after the "
                          "answer", self.peer)
            raise BodyTimeout("the rest of an unwanted request body did not arrive in time")
        if phase == "body":
            self.request.must_close = True  # the 408 says "Connection: close" (gevent_worker.py)
            self.log.info("%s: request body not received within %.0f s; answering 408 and closing",
                          self.peer, self.limits.body)
            raise BodyTimeout(f"the request body did not arrive within {self.limits.body:g} s")
        if phase == "head" or self.first:
            self.log.info("%s: request head not received within %.0f s; closing", self.peer, self.limits.header)
        return b""

    def sendall(self, data: Any) -> None:
        if not self._resp_start:
            self._resp_start = time.monotonic()
        self._resp_bytes += len(data)
        if self._hold:  # gunicorn writes a response's head in one piece, before its body
            self._hold = False
            if len(data) < ZERO_COPY_MIN:
                self._head = bytes(data)
                return None
        if self._head is not None:
            head, self._head = self._head, None
            if len(data) < ZERO_COPY_MIN:
                data = head + bytes(data)
            else:  # the body's first bytes fill the head's segment
                self._send_small(head, socket.MSG_MORE)
        if self.zero_copy and type(data) is bytes and len(data) >= ZERO_COPY_MIN:
            return self._sendfile_bytes(data)
        if self.fd >= 0 and len(data) < ZERO_COPY_MIN:
            return self._send_small(data)
        self._sendall_copy(data)

    def _send_small(self, data: bytes, flags: int = 0) -> None:
        """A head or a small body (plain HTTP): the socket buffer almost always takes it at once,
        without a deadline timer; whatever it does not take is sent under the deadline."""
        try:
            sent = self._sock.send(data, flags, 0.0)  # gevent's send: 0.0 = never wait
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            self._sendall_copy(memoryview(data)[sent:])

    def _total_deadline(self) -> float:
        """When the whole response must have been taken: ``write`` seconds per WRITE_TOTAL_PER
        bytes handed over (at least ``write``), from the response's first write."""
        start = self._resp_start or time.monotonic()
        return start + self.limits.write * max(1.0, self._resp_bytes / WRITE_TOTAL_PER)

    def _sendall_copy(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        total = self._total_deadline()
        for start in range(0, len(view), WRITE_CHUNK):
            left = total - time.monotonic()
            if left <= 0:
                raise self._too_slow(whole=True)
            try:
                with gevent.Timeout(min(self.limits.write, left), Expired):
                    self._sock.sendall(view[start:start + WRITE_CHUNK])
            except Expired:
                raise self._too_slow(whole=left <= self.limits.write) from None

    def _too_slow(self, whole: bool = False) -> ConnectionResetError:
        """A write deadline passed (``whole``: the response's total one): close, and the error
        to raise. gunicorn logs ECONNRESET at debug level and closes the socket: what is wanted."""
        self.phase = "closed"
        if whole:
            took = time.monotonic() - (self._resp_start or time.monotonic())
            self.log.info("%s: response of %d bytes not taken within its total deadline (%.0f s per %d MiB, "
                          "at least %.0f s; %.1f s so far); closing", self.peer, self._resp_bytes,
                          self.limits.write, WRITE_TOTAL_PER >> 20, self.limits.write, took)
        else:
            self.log.info("%s: response not taken within %.0f s per %d KiB; closing", self.peer,
                          self.limits.write, WRITE_CHUNK // 1024)
        return ConnectionResetError(104, "client too slow to take the response")

    def _sendfile_bytes(self, data: bytes) -> None:
        """A large body over plain TCP, by ``sendfile(2)`` from a file holding the same bytes
        (made once per body, agent/server/http/bodyfiles.py): the kernel sends the pages without
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
        out = self.fd  # zero copy: plain TCP only
        offset = 0
        total_deadline = self._total_deadline()
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
            whole = total_deadline < deadline
            try:
                wait_write(out, timeout=max(0.0, min(deadline, total_deadline) - time.monotonic()),
                           timeout_exc=Expired())
            except Expired:
                raise self._too_slow(whole) from None

    def send(self, data: Any) -> int:
        # gunicorn sends "100 Continue" this way: at once, the client waits for it to send its body.
        hold, self._hold = self._hold, False
        started, handed = self._resp_start, self._resp_bytes  # an interim answer: not the response
        self.sendall(data)
        self._hold, self._resp_start, self._resp_bytes = hold, started, handed
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
