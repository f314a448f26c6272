"""A real forward proxy on 127.0.0.1 for tests (the peer, not the product): plain HTTP requests in
absolute form and CONNECT tunnels for HTTPS, each recorded; ``hosts`` maps names only the proxy
can resolve (so a request that reaches the origin must have gone through it).

    with ForwardProxy(hosts={"config.test": "127.0.0.1"}) as proxy:
        ... proxy.url ...   # http://127.0.0.1:PORT
        assert proxy.seen == [("CONNECT", "config.test:8443")]

``on_request(method, target)``, when set, is called with each request as it is recorded, before
the proxy answers it (a CONNECT: before its "200 Connection Established", so before the TLS
handshake through the tunnel): a test moves its own clock there.
"""

import select
import socket
import socketserver
import threading
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

_TIMEOUT = 10.0


class _Handler(socketserver.StreamRequestHandler):
    timeout = _TIMEOUT
    rbufsize = 0  # unbuffered: nothing the client sent after the headers is left in a buffer

    def handle(self) -> None:
        line = self.rfile.readline(65536).decode("latin-1")
        parts = line.split()
        if len(parts) != 3:
            return
        method, target, version = parts
        headers = []
        while True:
            header = self.rfile.readline(65536)
            if header in (b"\r\n", b"\n", b""):
                break
            headers.append(header)
        proxy: ForwardProxy = self.server.owner  # type: ignore[attr-defined]
        proxy._record(method, target, headers)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = proxy._connect(host, int(port))
            if upstream is None:
                self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            self.wfile.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            self.wfile.flush()
            self._pipe(upstream)
            return
        url = urlsplit(target)
        upstream = proxy._connect(url.hostname or "", url.port or 80)
        if upstream is None:
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        kept = [h for h in headers if not h.lower().startswith((b"proxy-", b"connection:"))]
        upstream.sendall(f"{method} {path} {version}\r\n".encode("latin-1") + b"".join(kept)
                         + b"Connection: close\r\n\r\n")
        self._pipe(upstream)

    def _pipe(self, upstream: socket.socket) -> None:
        client = self.connection
        socks = [client, upstream]
        try:
            while True:
                readable, _, _ = select.select(socks, [], [], _TIMEOUT)
                if not readable:
                    return
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    (upstream if s is client else client).sendall(data)
        except OSError:
            return
        finally:
            upstream.close()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class ForwardProxy:
    def __init__(self, hosts: Optional[Dict[str, str]] = None):
        self.hosts = dict(hosts or {})
        self.seen: List[Tuple[str, str]] = []
        self.headers: List[List[bytes]] = []
        self.on_request: Optional[Callable[[str, str], None]] = None
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _record(self, method: str, target: str, headers: List[bytes]) -> None:
        with self._lock:
            self.seen.append((method, target))
            self.headers.append(headers)
        if self.on_request is not None:
            self.on_request(method, target)

    def _connect(self, host: str, port: int) -> Optional[socket.socket]:
        address = self.hosts.get(host, host)
        if not address.startswith("127."):
            return None  # loopback only: this proxy never reaches out
        try:
            return socket.create_connection((address, port), timeout=_TIMEOUT)
        except OSError:
            return None

    def __enter__(self) -> "ForwardProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=_TIMEOUT)
