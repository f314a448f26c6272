"""The HTTP layer under the Fetcher (agent.resource.fetch): TLS trust through the proxy route,
the watchdog that holds every byte of an attempt (status line, headers, body) to its deadline,
and the names and reasons its messages give (server, pool, TLS and transport causes, a server's
own error text)."""

import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

import requests
import urllib3

from agent.resource import proxy as proxies


@dataclass(frozen=True)
class FetchResult:
    """What a fetch gave (agent.resource.fetch.Fetcher.fetch)."""
    body: bytes
    url: str  # the URL asked for (not the one redirected to)
    status: int
    headers: Dict[str, str] = field(default_factory=dict)  # keys lower-cased
    attempts: int = 1

    @property
    def etag(self) -> Optional[str]:
        return self.headers.get("etag")


def server_of(url: str) -> str:
    """``host:port`` of an http(s) URL (default port filled in), for messages."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or {"https": 443, "http": 80}.get(parts.scheme.lower())
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def pool_from_url(url: str) -> Optional[str]:
    """The pool named by a config server URL ``http(s)://host:port/config/<pool>``, else None."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return None
    segments = [s for s in parts.path.split("/") if s]
    if len(segments) == 2 and segments[0] == "config":
        pool = unquote(segments[1])
        return pool or None
    return None



def short_url(url: str, limit: int = 120) -> str:
    return url if len(url) <= limit else url[: limit - 3] + "..."


def exception_chain(exc: BaseException) -> List[BaseException]:
    seen: List[BaseException] = []
    todo: List[Any] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or any(item is s for s in seen):
            continue
        seen.append(item)
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None)]
        todo += [a for a in getattr(item, "args", ()) if isinstance(a, BaseException)]
    return seen


def tls_reason(exc: BaseException) -> Tuple[bool, str]:
    """(is a certificate verification failure, short reason) for an SSL error from requests."""
    for item in exception_chain(exc):
        if isinstance(item, ssl.SSLCertVerificationError):
            return True, item.verify_message or str(item)
        if type(item).__name__ == "CertificateError":  # urllib3 1.26's own name check (a ValueError)
            return True, str(item)
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return True, text.split("certificate verify failed:")[-1].strip(" )'\"") or text
    return False, text


def transport_reason(exc: BaseException) -> str:
    """The innermost meaningful cause (e.g. "[Errno 111] Connection refused"), not urllib3's wrapper text."""
    for item in reversed(exception_chain(exc)):
        if isinstance(item, OSError) and item.errno is not None:
            return f"{item.strerror or item} (errno {item.errno})"
    text = str(exc)
    return text if len(text) < 300 else text[:297] + "..."


def server_message(resp: requests.Response) -> str:
    """A short explanation from an error response body (our server answers JSON ``{"error": ...}``)."""
    try:
        raw = resp.raw.read(4096, decode_content=True) or b""
    except Exception:  # an error body that cannot be read adds nothing; the status says enough
        return ""
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            data = err  # node-config-server's {"error": {"code", "message"}}
        for key in ("error", "message", "reason"):
            if isinstance(data.get(key), str):
                text = data[key]
                break
    text = " ".join(text.split())
    return text[:200] + ("..." if len(text) > 200 else "")


# --- the deadline watchdog ------------------------------------------------------------------------
#
# requests and urllib3 only give each recv() a timeout, so a server that sends its status line, its
# headers or its body a byte at a time (each byte within the read timeout) would hold an attempt
# for ever. A Watchdog is a timer that shuts the attempt's socket down at the deadline: the blocked
# recv() in the fetching thread then returns at once (EOF, or an error), whatever it was reading.
# To know the socket before there is a response, the adapters below give their pool managers
# connection pools that tell the watchdog active in the calling thread about every connection they
# hand out or connect. Only urllib3 names that 1.26 (RHEL 9) and 2.x share are used:
# PoolManager.pool_classes_by_scheme, HTTPConnectionPool._get_conn / ConnectionCls,
# HTTPConnection.connect / .sock.

_active = threading.local()


def _current() -> Optional["Watchdog"]:
    return getattr(_active, "watchdog", None)


class Watchdog:
    """Cuts an attempt off at a deadline, at every byte: connecting (once the socket exists), the
    TLS handshake, a proxy's CONNECT answer, the status line, the headers and the body.

    ``with Watchdog(seconds, what) as dog:`` makes it the watchdog of the calling thread: every
    connection the watched pools hand out or connect meanwhile is watched (``watch`` takes a
    response too). When the time is up the watched sockets are shut down and ``fired`` is True;
    ``fired_what`` is the ``what`` of the deadline that passed. ``arm`` sets a new deadline
    (e.g. the total budget for the body once the head arrived); None disarms. Nothing is cut after
    the ``with`` block ends, so a connection back in the pool is never touched."""

    def __init__(self, seconds: Optional[float], what: str = "deadline"):
        self.seconds = seconds
        self.what = what
        self.fired = False
        self.fired_what: Optional[str] = None
        self._lock = threading.Lock()
        self._watched: List[Any] = []
        self._timer: Optional[threading.Timer] = None
        self._due: Optional[float] = None  # time.monotonic() of the deadline armed
        self._generation = 0
        self._done = False
        self._outer: Optional[Watchdog] = None

    def __enter__(self) -> "Watchdog":
        self._outer = _current()
        _active.watchdog = self
        self.arm(self.seconds, self.what)
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._done = True
            self._watched.clear()
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        _active.watchdog = self._outer

    def arm(self, seconds: Optional[float], what: str) -> None:
        """From now on, cut off after ``seconds`` (None: never), naming ``what``."""
        with self._lock:
            if self._done or self.fired:
                return
            self._generation += 1
            old, self._timer = self._timer, None
            self.seconds, self.what = seconds, what
            self._due = None if seconds is None else time.monotonic() + seconds
            if seconds is not None and seconds > 0:
                self._timer = threading.Timer(seconds, self._fire, (self._generation,))
                self._timer.daemon = True
                self._timer.start()
        if old is not None:
            old.cancel()
        if seconds is not None and seconds <= 0:
            self._fire(self._generation)

    def watch(self, item: Any) -> None:
        """Watch a connection (urllib3's) or a streamed response; cut it at once if already fired."""
        with self._lock:
            if self._done:
                return
            if not any(w is item for w in self._watched):
                self._watched.append(item)
            if self.fired:
                _cut(item)

    def overdue(self) -> bool:
        """Fired, or its deadline is (all but) here: a read timeout that ends with it is its cut."""
        return self.fired or (self._due is not None and time.monotonic() >= self._due - 0.02)

    def reason(self, server: str, timeout: float, budget: float, head: bool) -> str:
        """What the log and the final error say of an attempt this watchdog cut off."""
        if (self.fired_what or self.what) == "attempt":
            return (f"server {server} sent no response headers within {timeout:g}s (the attempt timeout, "
                    "fetch.attemptTimeout): it answered too slowly or not at all; the connection was cut off")
        what = f"server {server} sent no complete response headers" if head else \
            f"the response from server {server} did not finish"
        return (f"{what} within the fetch budget (fetch.totalTimeout {budget:g}s); it was cut off at the "
                "deadline. A server (or proxy) this slow is overloaded or sends a byte at a time: check it, "
                "or raise fetch.totalTimeout in agent.yaml")

    def _fire(self, generation: int) -> None:
        with self._lock:  # under the lock: never a cut after __exit__, or for an older deadline
            if self._done or self.fired or generation != self._generation:
                return
            self.fired = True
            self.fired_what = self.what
            for item in self._watched:
                _cut(item)


def _cut(item: Any) -> None:
    """Shut the socket under ``item`` down (reads and writes), if it has one yet."""
    sock = socket_of(item) if isinstance(item, requests.Response) else getattr(item, "sock", None)
    for _ in range(4):  # urllib3 2.x's TLS-in-TLS transport wraps the real socket as .socket
        if sock is None or isinstance(sock, socket.socket):
            break
        sock = getattr(sock, "socket", None)
    if isinstance(sock, socket.socket):
        try:
            # the plain socket's shutdown, also for an SSLSocket: its own would drop the TLS state
            # under the reading thread; this ends the recv() and the TLS layer reports EOF
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:  # already closed, or not connected yet
            pass


def socket_of(resp: requests.Response) -> Any:
    """The socket under a streamed response (urllib3 1.26 and 2.x: http.client's file object)."""
    fp = getattr(getattr(resp.raw, "_fp", None), "fp", None)
    sock = getattr(getattr(fp, "raw", None), "_sock", None)
    if sock is None:
        sock = getattr(getattr(resp.raw, "_connection", None), "sock", None)
    return sock


class _WatchedPool:
    """Mixed into a urllib3 connection pool class: the connection handed out is watched."""

    def _get_conn(self, timeout: Any = None) -> Any:
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        dog = _current()
        if dog is not None:
            dog.watch(conn)
        return conn


class _WatchedConnection:
    """Mixed into a urllib3 connection class: a connection made after the deadline is cut at once
    (while the TCP connect itself runs there is no socket to shut down; the connect timeout,
    never beyond the deadline, bounds it)."""

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        dog = _current()
        if dog is not None:
            dog.watch(self)


_watched_classes: Dict[type, type] = {}


def _watched_pool_class(cls: type) -> type:
    if issubclass(cls, _WatchedPool):
        return cls
    if cls not in _watched_classes:
        attrs: Dict[str, Any] = {}
        conn_cls = getattr(cls, "ConnectionCls", None)
        if isinstance(conn_cls, type) and hasattr(conn_cls, "connect") and conn_cls.__name__ != "DummyConnection":
            attrs["ConnectionCls"] = type("Watched" + conn_cls.__name__, (_WatchedConnection, conn_cls), {})
        _watched_classes[cls] = type("Watched" + cls.__name__, (_WatchedPool, cls), attrs)
    return _watched_classes[cls]


def watch_pools(manager: Any) -> Any:
    """Make ``manager`` (a urllib3 PoolManager, ProxyManager or SOCKSProxyManager) create watched
    pools; idempotent. Returns ``manager``."""
    classes = getattr(manager, "pool_classes_by_scheme", None)
    if isinstance(classes, dict):
        manager.pool_classes_by_scheme = {scheme: _watched_pool_class(cls) for scheme, cls in classes.items()}
    return manager


class WatchedAdapter(proxies.RoutedAdapter):
    """The http adapter of a Fetcher: proxies per URL, connections watched (see Watchdog)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        watch_pools(self.poolmanager)

    def proxy_manager_for(self, *args: Any, **kwargs: Any) -> Any:
        return watch_pools(super().proxy_manager_for(*args, **kwargs))


class TrustAdapter(WatchedAdapter):
    """An HTTPS adapter whose connections verify against our SSLContext (system CAs + added ones),
    through the proxy ``route`` picks for each URL (a CONNECT tunnel: the server is still verified)."""

    def __init__(self, context: ssl.SSLContext, route: Callable[[str], Optional[str]], **kwargs: Any):
        self._context = context
        super().__init__(route, **kwargs)

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        super().cert_verify(conn, url, verify, cert)
        if verify is True:  # the trust is in our context, loaded once: no CA file loaded per connection
            conn.ca_certs = None
            conn.ca_cert_dir = None

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._context
        super().init_poolmanager(*args, **kwargs)

    def proxy_manager_for(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["ssl_context"] = self._context
        return super().proxy_manager_for(*args, **kwargs)


def present_certificate(session: Any, server: str, certfile: Optional[str], ca_pems: Any) -> None:
    """Mount on ``session`` (a Fetcher's), for URLs under ``server`` (``https://host:port``) only,
    an adapter whose TLS context trusts what the Fetcher's does (the system's CAs and
    ``ca_pems``), routes as its https adapter does (proxies), and presents ``certfile`` (client
    certificate and key in one PEM) as the client certificate: the kubelet's, which proves the
    node's name to the config server (agent/node/kubeletid.py) and is shown to no other host.
    None: remove it (the session's own adapter serves again). Raises ssl.SSLError when
    certificate and key do not load together."""
    prefix = server.rstrip("/").lower() + "/"
    old = session.adapters.pop(prefix, None)
    if old is not None:
        old.close()
    if certfile is None:
        return
    context = ssl.create_default_context()
    for pem in ca_pems:
        context.load_verify_locations(cadata=pem.decode("ascii"))
    # urllib3 1.26 (RHEL 9) matches the name itself and sends no SNI to an IP literal (fetch.py _context)
    context.check_hostname = not urllib3.__version__.startswith("1.")
    context.load_cert_chain(certfile)
    base = session.adapters.get("https://")
    route = getattr(base, "_route", None) or (lambda url: None)
    session.mount(prefix, TrustAdapter(context, route))
