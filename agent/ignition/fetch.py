"""Fetching configs (and CA bundles) over HTTP(S) with Ignition's retry behaviour, and resolving
a pointer config (``ignition.config.merge``/``replace``) into the config it points at.

What a node does at first boot when the server is slow, restarting, or withholding a config:
it keeps trying (Ignition's backoff, no attempt limit, an optional overall budget from
``fetch.totalTimeout``), logs each failed attempt, and only stops early on answers that
retrying cannot fix (404, 401/403, other 4xx, a hash mismatch, an insecure redirect).
TLS verification is never turned off; CAs named by the pointer config are *added* to the
system trust store, as Ignition does.
"""

import hashlib
import json
import logging
import os
import random
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import unquote, urljoin, urlsplit

import requests
import tenacity
import urllib3

from agent import __version__
from agent.backoff import Backoff, parse_retry_after
from agent.errors import ConfigError, FetchError, Problem
from agent.ignition import proxy as proxies
from agent.settings import Settings

log = logging.getLogger(__name__)

IGNITION_ACCEPT = "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"
MAX_BODY = 256 * 1024 * 1024  # far above any real config or CA bundle; stops a runaway response
MAX_REDIRECTS = 10  # Go's net/http (Ignition) stops after 10
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")
MAX_DEPTH = 8  # nesting of merge/replace references; Ignition has no limit, loops are caught anyway

_HASHES = {"sha512": hashlib.sha512, "sha256": hashlib.sha256}
# 408 (request timeout) and 429 (rate limited) are transient by definition; every 5xx too.
_RETRIED_4XX = {408, 429}
# urllib3 1.x checks hostnames itself when the context does not (see Fetcher._context).
_URLLIB3_MATCHES_HOSTNAMES = urllib3.__version__.split(".")[0] == "1"


@dataclass(frozen=True)
class FetchResult:
    body: bytes
    url: str  # the URL asked for (not the one redirected to)
    status: int
    headers: Dict[str, str] = field(default_factory=dict)  # keys lower-cased
    attempts: int = 1

    @property
    def etag(self) -> Optional[str]:
        return self.headers.get("etag")


class _Retry(Exception):
    """One failed attempt worth retrying; ``reason`` is what the log and the final error show."""

    def __init__(self, reason: str, status: Optional[int] = None, retry_after: Optional[float] = None):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after


class _TrustAdapter(proxies.RoutedAdapter):
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


def parse_hash(verification: Optional[dict], where: str = "verification.hash") -> Optional[Tuple[str, str]]:
    """``(algorithm, hex digest)`` from an Ignition ``verification`` object, or None when absent."""
    if not verification:
        return None
    value = verification.get("hash")
    if value is None:
        return None
    algo, sep, digest = str(value).partition("-")
    digest = digest.lower()
    ok = sep and algo in _HASHES and len(digest) == _HASHES[algo]().digest_size * 2
    if ok:
        try:
            bytes.fromhex(digest)
        except ValueError:
            ok = False
    if not ok:
        raise ConfigError(f"{where}: expected sha512-<128 hex digits> or sha256-<64 hex digits>",
                          [Problem(where, "expected sha512-<hex> or sha256-<hex>", "hash-format", value=value)])
    return algo, digest


def check_hash(body: bytes, expected: Optional[Tuple[str, str]], url: str) -> None:
    """Raise a final FetchError when ``body`` does not match ``expected`` (from parse_hash)."""
    if expected is None:
        return
    algo, digest = expected
    actual = _HASHES[algo](body).hexdigest()
    if actual != digest:
        raise FetchError(f"content of {_short_url(url)} does not match its verification.hash: expected "
                         f"{algo}-{digest}, got {algo}-{actual}; it was changed or corrupted, not using it",
                         url=url, final=True)


def _short_url(url: str, limit: int = 120) -> str:
    return url if len(url) <= limit else url[: limit - 3] + "..."


def _exception_chain(exc: BaseException) -> List[BaseException]:
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


def _tls_reason(exc: BaseException) -> Tuple[bool, str]:
    """(is a certificate verification failure, short reason) for an SSL error from requests."""
    for item in _exception_chain(exc):
        if isinstance(item, ssl.SSLCertVerificationError):
            return True, item.verify_message or str(item)
        if type(item).__name__ == "CertificateError":  # urllib3 1.26's own name check (a ValueError)
            return True, str(item)
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return True, text.split("certificate verify failed:")[-1].strip(" )'\"") or text
    return False, text


def _transport_reason(exc: BaseException) -> str:
    """The innermost meaningful cause (e.g. "[Errno 111] Connection refused"), not urllib3's wrapper text."""
    for item in reversed(_exception_chain(exc)):
        if isinstance(item, OSError) and item.errno is not None:
            return f"{item.strerror or item} (errno {item.errno})"
    text = str(exc)
    return text if len(text) < 300 else text[:297] + "..."


def _server_message(resp: requests.Response) -> str:
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


class Fetcher:
    """Fetches URLs with retries. One per run: CAs added to it are trusted by every later fetch."""

    def __init__(self, settings: Optional[Settings] = None, ca_pems: Sequence[bytes] = (), *,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 session: Optional[requests.Session] = None, user_agent: Optional[str] = None,
                 rng: Optional[random.Random] = None, jitter: float = 0.1,
                 wall_clock: Callable[[], float] = time.time):
        self.settings = settings or Settings()
        fs = self.settings.fetch
        self.backoff = Backoff(initial=fs.initial_delay, maximum=fs.max_delay, jitter=jitter,
                               max_retry_after=fs.max_retry_after, rng=rng or random.Random())
        self._sleep = sleep
        self._clock = clock
        self._wall = wall_clock
        self.user_agent = user_agent or f"node-agent/{__version__}"
        self.session = session or requests.Session()
        self.max_body = MAX_BODY
        self._ca_pems: List[bytes] = []
        # Proxies are decided per URL by agent.ignition.proxy (environment < agent.yaml <
        # ignition.proxy), for every request of this session: fetches, CAs, reports, drains.
        self.session.trust_env = False
        self.proxy = proxies.from_environment(os.environ).overridden_by(
            self.settings.proxy, tuple(k for k, v in vars(self.settings.proxy).items() if v))
        self.session.mount("http://", proxies.RoutedAdapter(self._proxy_for))
        self._ssl: Optional[ssl.SSLContext] = None
        self._loaded: List[bytes] = []
        for pem in ca_pems:
            self.add_ca(pem, mount=False)
        self._mount_trust()

    # --- trust ------------------------------------------------------------------------------

    def _context(self) -> ssl.SSLContext:
        # create_default_context: system CAs, CERT_REQUIRED, hostname checking. Never weakened.
        # The system store is loaded once per Fetcher; CAs added later go into the same context.
        if self._ssl is not None:
            for pem in self._ca_pems:
                if pem not in self._loaded:
                    self._ssl.load_verify_locations(cadata=pem.decode("ascii"))
                    self._loaded.append(pem)
            return self._ssl
        context = self._ssl = ssl.create_default_context()
        for pem in self._ca_pems:
            context.load_verify_locations(cadata=pem.decode("ascii"))
            self._loaded.append(pem)
        if _URLLIB3_MATCHES_HOSTNAMES:
            # urllib3 1.26 (RHEL 9) sends no SNI to an IP literal and so wraps the socket without
            # server_hostname, which a context with check_hostname refuses ("check_hostname
            # requires server_hostname"). It then matches the name itself (IP SANs included:
            # urllib3/connection.py HTTPSConnection.connect -> _match_hostname), as it does with
            # its own contexts; the certificate is still verified (CERT_REQUIRED stays).
            context.check_hostname = False
        return context

    def _mount_trust(self) -> None:
        old = self.session.adapters.get("https://")
        self.session.mount("https://", _TrustAdapter(self._context(), self._proxy_for))
        if isinstance(old, _TrustAdapter):
            old.close()  # pooled connections were verified against the old trust; start afresh

    def _proxy_for(self, url: str) -> Optional[str]:
        return proxies.proxy_for(url, self.proxy)

    def adopt_proxy(self, cfg: dict, source: str = "") -> None:
        """Use ``cfg``'s ``ignition.proxy`` (the fields it sets) for every later request."""
        given_settings, given = proxies.from_ignition(cfg)
        if given:
            self.proxy = self.proxy.overridden_by(given_settings, given)
            log.info("proxy from %s: http %s, https %s, noProxy %s", source or "config",
                     proxies.redacted(self.proxy.http_proxy) or "direct",
                     proxies.redacted(self.proxy.https_proxy) or "direct", ",".join(self.proxy.no_proxy) or "-",
                     extra={"NODE_AGENT_STAGE": "fetch"})

    def add_ca(self, pem: bytes, source: str = "", mount: bool = True) -> None:
        """Trust the CA certificate(s) in ``pem`` (in addition to the system's) for later fetches."""
        where = f" from {source}" if source else ""
        try:
            text = pem.decode("ascii")
            if "-----BEGIN CERTIFICATE-----" not in text:
                raise ValueError("no PEM certificate in it")
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=text)
        except (ValueError, ssl.SSLError) as exc:
            raise ConfigError(f"CA bundle{where} is not a PEM certificate bundle ({exc}); "
                              "check ignition.security.tls.certificateAuthorities", source=source)
        if pem not in self._ca_pems:
            self._ca_pems.append(pem)
            if mount:
                self._mount_trust()

    @property
    def ca_pems(self) -> Tuple[bytes, ...]:
        return tuple(self._ca_pems)

    # --- fetching ---------------------------------------------------------------------------

    def _headers(self, ignition: bool, extra: Optional[dict], etag: Optional[str]) -> Dict[str, str]:
        headers = {"User-Agent": self.user_agent, "Accept-Encoding": "identity"}
        if ignition:
            headers["Accept"] = IGNITION_ACCEPT
        if etag:
            headers["If-None-Match"] = etag
        for name, value in (extra or {}).items():
            headers[str(name)] = str(value)
        return headers

    def fetch(self, url: str, *, ignition: bool = False, verification: Optional[dict] = None,
              headers: Optional[dict] = None, budget: Optional[float] = None,
              etag: Optional[str] = None) -> FetchResult:
        """Fetch ``url`` (data:, http:, https:), retrying transient failures.

        ``budget`` (seconds) overrides ``fetch.totalTimeout``; 0 means no limit. ``etag`` makes a
        conditional GET: an unchanged resource gives ``FetchResult(status=304, body=b"")``.
        ``verification`` is checked on the body as received: for a compressed resource pass None
        and check the decompressed bytes with check_hash (Ignition hashes decompressed data).
        Raises FetchError (final answer or budget spent) or ConfigError (bad URL or hash syntax).
        """
        expected = parse_hash(verification)
        scheme = urlsplit(url).scheme.lower()
        if scheme == "data":
            from agent.ignition.dataurl import decode_data_url

            body = decode_data_url(url)
            check_hash(body, expected, url)
            return FetchResult(body=body, url=url, status=200, headers={}, attempts=1)
        if scheme not in ("http", "https"):
            raise ConfigError(f"cannot fetch {_short_url(url)!r}: node-agent fetches data:, http: and https: URLs "
                              f"(scheme {scheme or 'missing'!r})", source=url)
        limit = self.settings.fetch.total_timeout if budget is None else budget
        request_headers = self._headers(ignition, headers, etag)
        start = self._clock()
        attempts = [0]
        planned: Dict[int, float] = {}

        def planned_delay(state: tenacity.RetryCallState) -> float:
            # Computed once per attempt: tenacity's stop and wait both ask, in either order by version.
            n = state.attempt_number
            if n not in planned:
                exc = state.outcome.exception() if state.outcome else None
                planned[n] = self.backoff.delay(n, getattr(exc, "retry_after", None))
            return planned[n]

        def stop(state: tenacity.RetryCallState) -> bool:
            # Never sleep past the budget: give up now if the next attempt could not start in time.
            return bool(limit) and (self._clock() - start) + planned_delay(state) > limit

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            delay = planned_delay(state)
            log.warning("attempt %d to fetch %s failed: %s; retrying in %.2fs", state.attempt_number,
                        _short_url(url), getattr(exc, "reason", exc), delay,
                        extra={"NODE_AGENT_ATTEMPT": state.attempt_number, "NODE_AGENT_STAGE": "fetch",
                               "NODE_AGENT_URL": url, "NODE_AGENT_DELAY": round(delay, 3)})

        def attempt() -> FetchResult:
            attempts[0] += 1
            timeout = self.settings.fetch.attempt_timeout
            if limit:
                timeout = max(0.05, min(timeout, limit - (self._clock() - start)))
            log.debug("fetching %s (attempt %d)", _short_url(url), attempts[0],
                      extra={"NODE_AGENT_ATTEMPT": attempts[0], "NODE_AGENT_STAGE": "fetch"})
            deadline = start + limit if limit else None
            result = self._attempt(url, request_headers, timeout, expected, etag, deadline)
            return FetchResult(result.body, url, result.status, result.headers, attempts[0])

        retrying = tenacity.Retrying(sleep=self._sleep, stop=stop, wait=planned_delay,
                                     retry=tenacity.retry_if_exception_type(_Retry), before_sleep=before_sleep)
        try:
            result = retrying(attempt)
        except tenacity.RetryError as err:
            last = err.last_attempt.exception()
            elapsed = self._clock() - start
            reason = getattr(last, "reason", str(last))
            message = (f"could not fetch {_short_url(url)} from server {server_of(url)}: gave up after "
                       f"{attempts[0]} attempt{'s' if attempts[0] != 1 else ''} over {elapsed:.1f}s "
                       f"(fetch budget {limit:g}s); last error: {reason}")
            log.error(message, extra={"NODE_AGENT_ATTEMPT": attempts[0], "NODE_AGENT_STAGE": "fetch"})
            raise FetchError(message, url=url, status=getattr(last, "status", None), final=False)
        if result.attempts > 1:
            log.info("fetched %s on attempt %d", _short_url(url), result.attempts,
                     extra={"NODE_AGENT_ATTEMPT": result.attempts, "NODE_AGENT_STAGE": "fetch"})
        return result

    def _attempt(self, url: str, headers: Dict[str, str], timeout: float,
                 expected: Optional[Tuple[str, str]], etag: Optional[str],
                 deadline: Optional[float] = None) -> FetchResult:
        server = server_of(url)
        try:
            # (connect, read): the read timeout bounds the wait for the response headers and
            # every later read of the body, so a stalled server cannot hang the node.
            resp = self._get(url, headers, timeout)
        except requests.exceptions.SSLError as exc:
            is_verify, reason = _tls_reason(exc)
            if is_verify:
                # Retried like a transport error within the budget: servers rotate certificates and a
                # cluster CA may be replaced while nodes boot; the budget bounds it, and we never fall
                # back to an unverified connection.
                log.warning("TLS verification failed for %s: %s; not retrying insecurely", _short_url(url), reason,
                            extra={"NODE_AGENT_STAGE": "fetch"})
                raise _Retry(f"TLS verification failed for server {server}: {reason} "
                             "(is the pointer config's certificateAuthorities right?)")
            raise _Retry(f"TLS error with server {server}: {reason}")
        except requests.exceptions.ConnectTimeout:
            raise _Retry(f"connecting to server {server} timed out after {timeout:g}s")
        except requests.exceptions.ReadTimeout:
            raise _Retry(f"server {server} sent no response headers within {timeout:g}s")
        except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema,
                requests.exceptions.MissingSchema, requests.exceptions.InvalidHeader) as exc:
            raise ConfigError(f"cannot fetch {_short_url(url)!r}: {exc}", source=url)
        except requests.exceptions.TooManyRedirects:
            raise FetchError(f"too many redirects fetching {_short_url(url)} from server {server}", url=url)
        except requests.exceptions.RequestException as exc:
            raise _Retry(f"cannot connect to server {server}: {_transport_reason(exc)}")

        with resp:
            status = resp.status_code
            if status == 304 and etag:
                return FetchResult(b"", url, 304, {k.lower(): v for k, v in resp.headers.items()})
            if not 200 <= status < 300:
                self._fail(url, resp)
            with _Watchdog(resp, None if deadline is None else max(0.05, deadline - self._clock())) as watchdog:
                try:
                    body = self._read_body(resp, server)
                except _Retry:
                    if not watchdog.fired:
                        raise
            if watchdog.fired:
                raise _Retry(f"the response from server {server} did not finish within the fetch budget "
                             f"(fetch.totalTimeout); it was cut off")
            check_hash(body, expected, url)
            return FetchResult(body, url, status, {k.lower(): v for k, v in resp.headers.items()})

    def _get(self, url: str, headers: Dict[str, str], timeout: float) -> requests.Response:
        """GET ``url`` following redirects ourselves: a redirect from https to anything else is
        refused *before* any request goes out in clear (requests would send it first), and
        credentials are not carried to another host (as Go's net/http, which Ignition uses)."""
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            resp = self.session.get(current, headers=headers, timeout=(timeout, timeout), stream=True,
                                    verify=True, allow_redirects=False)
            if not resp.is_redirect:
                return resp
            target = urljoin(current, resp.headers["Location"])
            resp.close()
            if urlsplit(url).scheme.lower() == "https" and urlsplit(target).scheme.lower() != "https":
                raise FetchError(f"{_short_url(url)} redirected to an unencrypted URL ({_short_url(target)}); "
                                 "refusing to fetch a config insecurely (nothing was sent there)",
                                 url=url, status=resp.status_code, final=True)
            if urlsplit(target).netloc.lower() != urlsplit(current).netloc.lower():
                headers = {k: v for k, v in headers.items() if k.lower() not in _CREDENTIAL_HEADERS}
            current = target
        raise FetchError(f"too many redirects fetching {_short_url(url)} from server {server_of(url)}", url=url)

    def _read_body(self, resp: requests.Response, server: str) -> bytes:
        chunks = []
        size = 0
        try:
            for chunk in resp.iter_content(65536):
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_body:
                    raise FetchError(f"the response from server {server} for {_short_url(resp.url)} is larger than "
                                     f"{self.max_body} bytes; refusing it", url=resp.url, status=resp.status_code)
        except requests.exceptions.RequestException as exc:
            raise _Retry(f"the response from server {server} broke off: {_transport_reason(exc)}")
        body = b"".join(chunks)
        length = resp.headers.get("Content-Length")
        if length is not None and "Content-Encoding" not in resp.headers:
            try:
                want = int(length)
            except ValueError:
                want = None
            if want is not None and want != len(body):
                raise _Retry(f"the response from server {server} was truncated: got {len(body)} of {want} bytes")
        return body

    def _fail(self, url: str, resp: requests.Response) -> None:
        status = resp.status_code
        server = server_of(url)
        said = _server_message(resp)
        said_text = f": {said}" if said else ""
        what = f"HTTP {status} {resp.reason or ''}".rstrip()
        if status >= 500 or status in _RETRIED_4XX:
            retry_after = parse_retry_after(resp.headers.get("Retry-After"), self._wall)
            raise _Retry(f"server {server} answered {what}{said_text}", status=status, retry_after=retry_after)
        if status == 404:
            pool = pool_from_url(url)
            if pool:
                msg = (f"pool {pool} is unknown to server {server}: check the pointer config's URL "
                       f"({_short_url(url)}){said_text}")
            else:
                msg = f"{_short_url(url)} does not exist on server {server} (HTTP 404){said_text}"
        elif status in (401, 403):
            msg = (f"server {server} refused {_short_url(url)} ({what}){said_text}: the credentials sent "
                   "(bearer token from report.tokenFile, or the config's httpHeaders) are missing or not "
                   "accepted for this resource")
        else:
            msg = f"server {server} answered {what} for {_short_url(url)}{said_text}; not retrying"
        raise FetchError(msg, url=url, status=status, final=True)


class _Watchdog:
    """Cuts a response off at the fetch budget: a body that never ends (or trickles a byte at a
    time, each read within the read timeout) cannot outlive ``fetch.totalTimeout``. The timer
    shuts the socket down, which ends the blocked read in the fetching thread."""

    def __init__(self, resp: requests.Response, seconds: Optional[float]):
        self.resp = resp
        self.seconds = seconds
        self.fired = False
        self._timer: Optional[threading.Timer] = None

    def __enter__(self) -> "_Watchdog":
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
        sock = _socket_of(self.resp)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _socket_of(resp: requests.Response) -> Any:
    """The socket under a streamed response (urllib3 1.26 and 2.x: http.client's file object)."""
    fp = getattr(getattr(resp.raw, "_fp", None), "fp", None)
    sock = getattr(getattr(fp, "raw", None), "_sock", None)
    if sock is None:
        sock = getattr(getattr(resp.raw, "_connection", None), "sock", None)
    return sock


# --- pointer resolution ----------------------------------------------------------------------

@dataclass(frozen=True)
class ResolvedConfig:
    ignition: Dict[str, Any]  # the final Ignition config (ignition.config references consumed)
    sources: List[str]  # every config URL fetched, in order
    etag: Optional[str]  # of the pool's config (/config/<pool>), else of the last config fetched
    served_name: Optional[str]  # rendered config name from the served node annotations, if any


@dataclass
class _Walk:
    fetcher: Fetcher
    max_depth: int
    sources: List[str] = field(default_factory=list)
    pool_etag: Optional[str] = None
    last_etag: Optional[str] = None


def _resource_headers(ref: dict) -> Dict[str, str]:
    return {str(h.get("name")): str(h.get("value", "")) for h in ref.get("httpHeaders") or []
            if isinstance(h, dict) and h.get("name")}


def _fetch_resource(walk: _Walk, ref: Any, where: str, ignition: bool) -> Tuple[bytes, FetchResult]:
    """Fetch one Ignition Resource (source, compression, verification, httpHeaders); decompressed body."""
    if not isinstance(ref, dict) or not isinstance(ref.get("source"), str) or not ref["source"]:
        raise ConfigError(f"{where}: expected an object with a source URL",
                          [Problem(f"{where}.source", "expected a URL", "resource-source")])
    compression = ref.get("compression")
    # Ignition's verification.hash describes the *decompressed* config when compression is set
    # (spec 3.1+: "If compression is specified, the hash describes the decompressed config"),
    # so a compressed resource is verified after gunzip, a plain one by the fetcher.
    verification = ref.get("verification")
    expected = parse_hash(verification, f"{where}.verification.hash")
    result = walk.fetcher.fetch(ref["source"], ignition=ignition, verification=None if compression else verification,
                                headers=_resource_headers(ref))
    body = result.body
    if compression:
        from agent.ignition.dataurl import decompress

        body = decompress(body, compression)
        check_hash(body, expected, result.url)
    return body, result


def trust_config_cas(cfg: dict, fetcher: Fetcher, source: str = "pointer config") -> int:
    """Add ``cfg``'s ``ignition.security.tls.certificateAuthorities`` to ``fetcher``'s trust.

    Used by resolve_pointer for every config on the way, and on its own when a run resumes from
    a saved config but still needs the pointer's CAs (reports, file sources). Returns the count.
    """
    return _add_cas(_Walk(fetcher=fetcher, max_depth=MAX_DEPTH), cfg, source)


def _add_cas(walk: _Walk, cfg: dict, source: str) -> int:
    walk.fetcher.adopt_proxy(cfg, source)  # first: the CA bundles themselves come through it
    cas = ((((cfg.get("ignition") or {}).get("security") or {}).get("tls") or {})
           .get("certificateAuthorities") or [])
    for i, ref in enumerate(cas):
        where = f"$.ignition.security.tls.certificateAuthorities.{i}"
        pem, _ = _fetch_resource(walk, ref, where, ignition=False)
        walk.fetcher.add_ca(pem, source=f"{source} {where}")
    return len(cas)


def _fetch_config(walk: _Walk, ref: Any, where: str, chain: Tuple[str, ...]) -> Tuple[dict, str]:
    from agent.ignition.parse import parse_document
    from agent.ignition.validate import validate_ignition

    url = ref.get("source") if isinstance(ref, dict) else None
    if isinstance(url, str) and url in chain:
        loop = " -> ".join([*chain[1:], url])
        raise ConfigError(f"config references loop: {loop}; check {where}",
                          [Problem(where, f"{url} refers back to itself", "config-loop")], chain[-1])
    if len(chain) > walk.max_depth:
        raise ConfigError(f"config references nested deeper than {walk.max_depth} levels at {where}",
                          [Problem(where, "too deeply nested", "config-depth")], chain[-1])
    body, result = _fetch_resource(walk, ref, where, ignition=True)
    label = _short_url(result.url)
    doc = parse_document(body, label)
    if not isinstance(doc, dict):
        raise ConfigError(f"config fetched from {label} is not an Ignition config (JSON object)", source=label)
    problems = validate_ignition(doc)
    errors = [p for p in problems if p.is_error]
    for p in problems:
        if not p.is_error:
            log.warning("config fetched from %s: %s", label, p, extra={"NODE_AGENT_STAGE": "fetch"})
    if errors:
        raise ConfigError(f"config fetched from {label} (referenced at {where}) is invalid", problems, label)
    walk.sources.append(result.url)
    if result.etag:
        walk.last_etag = result.etag
        if walk.pool_etag is None and pool_from_url(result.url):
            walk.pool_etag = result.etag
    return doc, result.url


def _render(walk: _Walk, cfg: dict, chain: Tuple[str, ...]) -> dict:
    """Ignition's renderConfig: trust this config's CAs, then follow replace, else merge each child."""
    from agent.ignition.merge import merge_ignition

    _add_cas(walk, cfg, chain[-1])
    refs = (cfg.get("ignition") or {}).get("config") or {}
    replace = refs.get("replace") or {}
    if replace.get("source"):
        child, url = _fetch_config(walk, replace, f"{chain[-1]} $.ignition.config.replace", chain)
        return _render(walk, child, (*chain, url))
    result = cfg
    for i, ref in enumerate(refs.get("merge") or []):
        child, url = _fetch_config(walk, ref, f"{chain[-1]} $.ignition.config.merge.{i}", chain)
        result = merge_ignition(result, _render(walk, child, (*chain, url)))
    return result


def _strip_references(cfg: dict) -> dict:
    ign = cfg.get("ignition")
    if not isinstance(ign, dict) or "config" not in ign:
        return cfg
    return {**cfg, "ignition": {k: v for k, v in ign.items() if k != "config"}}


def served_config_name(cfg: dict) -> Optional[str]:
    """The rendered config name the server put in the node annotations file, if it did."""
    from agent.served import read_served

    try:
        return read_served(cfg).config_name or None
    except ConfigError:  # an odd annotations file just means "no name"; the pipeline reports it
        return None


def resolve_pointer(pointer: dict, fetcher: Fetcher, *, source: str = "pointer config",
                    max_depth: int = MAX_DEPTH) -> ResolvedConfig:
    """Follow a pointer config's references (CAs, replace, merge[]) to the config it stands for.

    As Ignition: the pointer's CAs are trusted for every later fetch; ``replace`` makes the fetched
    config the result; each ``merge`` child is fetched, resolved in turn, and merged over the
    result so far (parent first, child wins). Each fetched config is validated; problems raise
    ConfigError naming the source URL. Loops and nesting deeper than ``max_depth`` are refused.
    """
    walk = _Walk(fetcher=fetcher, max_depth=max_depth)
    final = _strip_references(_render(walk, pointer, (source,)))
    return ResolvedConfig(ignition=final, sources=list(walk.sources), etag=walk.pool_etag or walk.last_etag,
                          served_name=served_config_name(final))

