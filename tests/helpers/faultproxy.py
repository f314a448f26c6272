"""A real TCP proxy on 127.0.0.1 that injects network faults between a client and a server.

One HTTP request per client connection (the proxy answers with ``Connection: close`` semantics:
it closes after each response). For every request it draws, from a seeded ``random.Random``,
whether and how to misbehave:

- ``reset``: abort the client connection with a TCP RST before answering;
- ``5xx``: answer 500/502/503/504 itself (with ``Retry-After: 0`` sometimes), never reaching the server;
- ``garbage``: answer bytes that are not HTTP, then close;
- ``delay``: hold the real response for a while (up to ``max_delay``), then send it whole;
- ``truncate``: send only the first N bytes of the real response (headers included), then close
  (with a FIN or a RST);
- ``stall``: send the headers and part of the body, then go quiet for ``stall`` seconds, then close;
- ``pass``: forward the real response untouched.

``counts`` records what was injected, so a campaign can assert that every fault really happened.

    with FaultProxy(("127.0.0.1", server.port), seed=7, fault_rate=0.5) as proxy:
        url = proxy.url("/config/worker")
"""

import random
import socket
import struct
import threading
from collections import Counter
from typing import Dict, List, Optional, Tuple

FAULTS = ("reset", "5xx", "garbage", "delay", "truncate", "stall")
_HEADER_END = b"\r\n\r\n"


def _rst(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


def _read_request(sock: socket.socket) -> Optional[bytes]:
    """One whole request (headers and a Content-Length body), or None if the client went away."""
    buf = b""
    while _HEADER_END not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = buf.partition(_HEADER_END)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head + _HEADER_END + rest


class FaultProxy:
    def __init__(self, upstream: Tuple[str, int], seed: int = 0, fault_rate: float = 0.5,
                 faults: Tuple[str, ...] = FAULTS, max_delay: float = 0.4, stall: float = 0.6):
        self.upstream = upstream
        self.max_delay = max_delay
        self.stall = stall
        self.counts: Counter = Counter()
        self.log: List[str] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._sock: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self._conns: List[threading.Thread] = []
        self.reseed(seed, fault_rate, faults)

    def reseed(self, seed: int, fault_rate: float, faults: Tuple[str, ...] = FAULTS) -> None:
        """Start a new round: same proxy, new deterministic fault sequence."""
        with self._lock:
            self._rng = random.Random(seed)
            self.fault_rate = fault_rate
            self.faults = tuple(faults)

    # --- lifecycle ---
    def start(self) -> "FaultProxy":
        self._stopping.clear()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.settimeout(0.05)
        self._sock = sock
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        for t in self._conns:
            t.join(5)
        self._conns = []
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._sock is not None
        return self._sock.getsockname()[1]

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    # --- serving ---
    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._conns = [c for c in self._conns if c.is_alive()] + [t]
            t.start()

    def _draw(self) -> Tuple[str, Dict]:
        with self._lock:
            rng = self._rng
            if rng.random() >= self.fault_rate:
                kind = "pass"
            else:
                kind = rng.choice(self.faults)
            params = {
                "status": rng.choice((500, 502, 503, 504)),
                "retry_after": rng.random() < 0.5,
                "delay": rng.uniform(0, self.max_delay),
                "cut": rng.random(),
                "fin": rng.random() < 0.5,
                "garbage": bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))),
            }
            self.counts[kind] += 1
            self.log.append(kind)
        return kind, params

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            request = _read_request(conn)
            if request is None:
                return
            kind, p = self._draw()
            if kind == "reset":
                _rst(conn)
                return
            if kind == "5xx":
                body = b'{"error": {"code": %d, "message": "injected by the fault proxy"}}' % p["status"]
                head = (f"HTTP/1.1 {p['status']} Injected\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n")
                if p["retry_after"]:
                    head += "Retry-After: 0\r\n"
                conn.sendall(head.encode() + b"\r\n" + body)
                return
            if kind == "garbage":
                conn.sendall(b"\x00" + p["garbage"] + b"\r\n\r\n")
                return
            response = self._upstream(request)
            if kind == "delay" and self._stopping.wait(p["delay"]):
                return
            if kind == "truncate":
                cut = max(1, min(len(response) - 1, int(len(response) * p["cut"])))
                conn.sendall(response[:cut])
                if not p["fin"]:
                    _rst(conn)
                return
            if kind == "stall":
                head_end = response.find(_HEADER_END) + len(_HEADER_END)
                body_len = len(response) - head_end
                conn.sendall(response[:head_end + body_len // 2])
                self._stopping.wait(self.stall)
                return
            conn.sendall(response)
        except OSError:
            pass
        finally:
            conn.close()

    def _upstream(self, request: bytes) -> bytes:
        # Ask for a close-delimited exchange so "read until EOF" is the whole response.
        head, _, body = request.partition(_HEADER_END)
        lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
        request = b"\r\n".join(lines) + b"\r\nConnection: close" + _HEADER_END + body
        with socket.create_connection(self.upstream, timeout=5) as up:
            up.sendall(request)
            chunks = []
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks)
