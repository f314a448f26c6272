"""The HTTP layer under the Fetcher (agent.resource.fetch): TLS trust through the proxy route,
the watchdog that holds a response to the fetch budget, and the names and reasons its messages
give (server, pool, TLS and transport causes, a server's own error text)."""

import json
import socket
import ssl
import threading
from typing import Any, Callable, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

import requests

from agent.resource import proxy as proxies


class TrustAdapter(proxies.RoutedAdapter):
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


class Watchdog:
    """Cuts a response off at the fetch budget: a body that never ends (or trickles a byte at a
    time, each read within the read timeout) cannot outlive ``fetch.totalTimeout``. The timer
    shuts the socket down, which ends the blocked read in the fetching thread."""

    def __init__(self, resp: requests.Response, seconds: Optional[float]):
        self.resp = resp
        self.seconds = seconds
        self.fired = False
        self._timer: Optional[threading.Timer] = None

    def __enter__(self) -> "Watchdog":
        if self.seconds is not None:
            if self.seconds <= 0:
                self._fire()
            else:
                self._timer = threading.Timer(self.seconds, self._fire)
                self._timer.daemon = True
                self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _fire(self) -> None:
        self.fired = True
        sock = socket_of(self.resp)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def socket_of(resp: requests.Response) -> Any:
    """The socket under a streamed response (urllib3 1.26 and 2.x: http.client's file object)."""
    fp = getattr(getattr(resp.raw, "_fp", None), "fp", None)
    sock = getattr(getattr(fp, "raw", None), "_sock", None)
    if sock is None:
        sock = getattr(getattr(resp.raw, "_connection", None), "sock", None)
    return sock
