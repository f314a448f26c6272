"""A real, scriptable HTTP(S) server on 127.0.0.1 for tests (the peer, not the product).

Each path has a queue of ``Reply`` objects, served in order; when a queue runs dry, the path's
sticky default (``always``) answers, and otherwise a 404 with a JSON error. Every request is
recorded (method, path, headers) so tests can assert what the client really sent.

    with ScriptedServer() as srv:                  # or ScriptedServer(tls=make_tls(tmp))
        srv.script("/config/worker", Reply(500), Reply(200, body=b"{}"))
        srv.always("/healthz", Reply(200, body=b"ok"))
        url = srv.url("/config/worker")
        ...
        assert srv.requests_for("/config/worker")[0].headers["User-Agent"] == ...

Reply knobs: ``delay`` before the status line is sent (to trip client timeouts), ``truncate``
(send only N body bytes, keep the full Content-Length, then close), ``reset`` (abort the
connection with a TCP RST instead of answering), ``chunked`` (Transfer-Encoding: chunked).
"""

import json
import socket
import ssl
import struct
import threading
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Deque, Dict, List, Optional, Union
from urllib.parse import urlsplit

from tests.helpers.certs import TLSFiles


@dataclass
class Reply:
    status: int = 200
    body: Union[bytes, str] = b""
    headers: Dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before sending the status line
    truncate: Optional[int] = None  # send only this many body bytes, then close
    reset: bool = False  # abort the connection (RST) instead of answering
    chunked: bool = False

    def body_bytes(self) -> bytes:
        return self.body.encode("utf-8") if isinstance(self.body, str) else self.body


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str  # with the query string
    headers: Dict[str, str]  # as received (case kept; lookups below are case-insensitive)
    body: bytes

    def header(self, name: str) -> Optional[str]:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


def _abort(sock: socket.socket) -> None:
    # SO_LINGER with a zero timeout makes close() send RST: a "connection reset by peer".
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format: str, *args) -> None:  # quiet: tests read .requests instead
        pass

    def _serve(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = urlsplit(self.path).path
        owner._record(Recorded(self.command, self.path, dict(self.headers.items()), body))
        reply = owner._next(path)
        if callable(reply):
            reply = reply(self)
        if reply.delay and owner._stopping.wait(reply.delay):
            return
        if reply.reset:
            _abort(self.connection)
            self.close_connection = True
            raise ConnectionAbortedError("scripted reset")
        data = reply.body_bytes()
        self.send_response(reply.status)
        headers = {k.lower(): (k, v) for k, v in reply.headers.items()}
        for key, value in headers.values():
            self.send_header(key, value)
        if reply.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif "content-length" not in headers and reply.status not in (204, 304):
            self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if self.command == "HEAD" or reply.status in (204, 304):
            return
        if reply.truncate is not None:
            data = data[: reply.truncate]
            self.wfile.write(data if not reply.chunked else b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            return
        if reply.chunked:
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.wfile.write(data)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, ssl.SSLError, BrokenPipeError):
            self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: "ScriptedServer", address, context: Optional[ssl.SSLContext]):
        self.owner = owner
        self.context = context
        super().__init__(address, _Handler)

    def finish_request(self, request, client_address) -> None:
        # The TLS handshake runs here, in the connection's own thread, so a client that rejects
        # our certificate (or stalls) never blocks the accept loop.
        if self.context is not None:
            try:
                request.settimeout(10)
                request = self.context.wrap_socket(request, server_side=True)
                request.settimeout(None)
            except (ssl.SSLError, OSError) as exc:
                self.owner._tls_failures.append(str(exc))
                return
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address) -> None:  # a client hanging up is not news
        pass


class ScriptedServer:
    """See the module docstring. ``port=0`` picks a free port; a fixed port lets a test start late."""

    def __init__(self, tls: Optional[TLSFiles] = None, port: int = 0, host: str = "127.0.0.1"):
        self.tls = tls
        self.host = host
        self._port = port
        self._lock = threading.Lock()
        self._queues: Dict[str, Deque] = defaultdict(deque)
        self._sticky: Dict[str, object] = {}
        self._stopping = threading.Event()
        self._tls_failures: List[str] = []
        self.requests: List[Recorded] = []
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    # --- lifecycle ---
    def start(self) -> "ScriptedServer":
        context = None
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls.cert, self.tls.key)
        self._stopping.clear()
        self._server = _Server(self, (self.host, self._port), context)
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"scripted-http-{self._port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- addressing ---
    @property
    def port(self) -> int:
        return self._port

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self._port}"

    def url(self, path: str = "/") -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.netloc}{path}"

    # --- scripting ---
    def script(self, path: str, *replies: Union[Reply, Callable[[BaseHTTPRequestHandler], Reply]]) -> None:
        """Queue replies for ``path`` (served once each, in order)."""
        with self._lock:
            self._queues[path].extend(replies)

    def always(self, path: str, reply: Union[Reply, Callable[[BaseHTTPRequestHandler], Reply]]) -> None:
        """The reply for ``path`` once its queue is empty."""
        with self._lock:
            self._sticky[path] = reply

    def _next(self, path: str):
        with self._lock:
            queue = self._queues.get(path)
            if queue:
                return queue.popleft()
            if path in self._sticky:
                return self._sticky[path]
        return Reply(404, json.dumps({"error": f"no scripted reply for {path}"}),
                     {"Content-Type": "application/json"})

    def _record(self, rec: Recorded) -> None:
        with self._lock:
            self.requests.append(rec)

    def requests_for(self, path: str) -> List[Recorded]:
        with self._lock:
            return [r for r in self.requests if urlsplit(r.path).path == path]

    @property
    def tls_failures(self) -> List[str]:
        return list(self._tls_failures)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (for connection-refused tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
