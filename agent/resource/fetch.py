"""Fetching configs (and CA bundles) over HTTP(S) with Ignition's retry behaviour.

What a node does at first boot when the server is slow, restarting, or withholding a config:
it keeps trying (Ignition's backoff, no attempt limit, an optional overall budget from
``fetch.totalTimeout``: a hard deadline, at every byte of status line, headers and body), logs
each failed attempt, and only stops early on answers that retrying cannot fix (404, 401/403,
other 4xx, a hash mismatch, an insecure redirect). TLS verification is never turned off; CAs named by the pointer config are
*added* to the system trust store, as Ignition does.

Beside it: ``agent.resource.transport`` (TLS adapter, watchdog, message texts, FetchResult),
``agent.resource.verification`` (``verification.hash``) and ``agent.resource.pointer``
(resolving a pointer config's references); their public names are importable from here too.
"""

import logging
import os
import random
import ssl
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urljoin, urlsplit

import requests
import tenacity
import urllib3

from agent import __version__
from agent.core.backoff import MIN_ATTEMPT, Backoff, fit_to_deadline, parse_retry_after
from agent.core.settings import Settings
from agent.errors import ConfigError, FetchError
from agent.resource import proxy as proxies
from agent.resource.transport import (  # noqa: F401 (pool_from_url, FetchResult re-exported)
    FetchResult,
    TrustAdapter,
    Watchdog,
    WatchedAdapter,
    pool_from_url,
    server_message,
    server_of,
    short_url,
    tls_reason,
    transport_reason,
)
from agent.resource.verification import check_hash, parse_hash  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

IGNITION_ACCEPT = "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"
MAX_BODY = 256 * 1024 * 1024  # far above any real config or CA bundle; stops a runaway response
MAX_REDIRECTS = 10  # Go's net/http (Ignition) stops after 10
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")

# 408 (request timeout) and 429 (rate limited) are transient by definition; every 5xx too.
_RETRIED_4XX = {408, 429}
# urllib3 1.x checks hostnames itself when the context does not (see Fetcher._context).
_URLLIB3_MATCHES_HOSTNAMES = urllib3.__version__.split(".")[0] == "1"


class _Retry(Exception):
    """One failed attempt worth retrying; ``reason`` is what the log and the final error show."""

    def __init__(self, reason: str, status: Optional[int] = None, retry_after: Optional[float] = None):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after


class Fetcher:
    """Fetches URLs with retries. One per run: CAs added to it are trusted by every later fetch."""

    def __init__(self, settings: Optional[Settings] = None, ca_pems: Sequence[bytes] = (), *,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 session: Optional[requests.Session] = None, user_agent: Optional[str] = None,
                 rng: Optional[random.Random] = None, jitter: float = 0.1,
                 wall_clock: Callable[[], float] = time.time):
        self.settings = settings or Settings()
        self._member: Optional[Tuple[str, Dict[str, str]]] = None  # (config URL prefix, headers): as_member
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
        # Proxies are decided per URL by agent.resource.proxy (environment < agent.yaml <
        # ignition.proxy), for every request of this session: fetches, CAs, reports, drains.
        self.session.trust_env = False
        self.proxy = proxies.from_environment(os.environ).overridden_by(
            self.settings.proxy, tuple(k for k, v in vars(self.settings.proxy).items() if v))
        self.session.mount("http://", WatchedAdapter(self._proxy_for))
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
        self.session.mount("https://", TrustAdapter(self._context(), self._proxy_for))
        if isinstance(old, TrustAdapter):
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

    def as_member(self, server: Optional[str], headers: Optional[Dict[str, str]] = None) -> None:
        """Send ``headers`` (a node naming itself with its credential) on config fetches from
        ``server`` (``https://host:port``), so that a node that already joined a pool and runs its
        first boot again gets the pool's target, as on day 2; ``None``: fetch as a new node."""
        self._member = (server.rstrip("/").lower() + "/config/", dict(headers or {})) if server else None

    def _member_headers(self, url: str) -> Dict[str, str]:
        return self._member[1] if self._member and url.lower().startswith(self._member[0]) else {}

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
              etag: Optional[str] = None, hold: float = 0.0) -> FetchResult:
        """Fetch ``url`` (data:, http:, https:), retrying transient failures.

        ``budget`` (seconds) overrides ``fetch.totalTimeout``; 0 means no limit. ``etag`` makes a
        conditional GET: an unchanged resource gives ``FetchResult(status=304, body=b"")``; ``hold``: seconds the server may hold it (a long poll).
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
            raise ConfigError(f"cannot fetch {short_url(url)!r}: node-agent fetches data:, http: and https: URLs "
                              f"(scheme {scheme or 'missing'!r})", source=url)
        limit = self.settings.fetch.total_timeout if budget is None else budget
        request_headers = self._headers(ignition, {**(headers or {}), **self._member_headers(url)}, etag)
        start = self._clock()
        attempts = [0]
        planned: Dict[int, float] = {}
        final_after = set()  # attempt numbers after which one last attempt is left (fit_to_deadline)
        failed_before: list = []  # the reason of the attempt before the current one

        def planned_delay(state: tenacity.RetryCallState) -> float:
            # Computed once per attempt: tenacity's stop and wait both ask, in either order by version.
            n = state.attempt_number
            if n not in planned:
                exc = state.outcome.exception() if state.outcome else None
                planned[n] = self.backoff.delay(n, getattr(exc, "retry_after", None))
                if limit:  # a wait past the deadline is cut: one last attempt just before it
                    planned[n], final = fit_to_deadline(planned[n], start + limit - self._clock(), limit,
                                                        self.settings.fetch.attempt_timeout)
                    final_after.update([n] if final else [])
            return planned[n]

        def stop(state: tenacity.RetryCallState) -> bool:
            # Never past the budget: stop after the last attempt, or when no time is left for one.
            return bool(limit) and (state.attempt_number - 1 in final_after
                                    or start + limit - self._clock() <= MIN_ATTEMPT)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            delay = planned_delay(state)
            failed_before[:] = [getattr(exc, "reason", exc)]
            log.warning("attempt %d to fetch %s failed: %s; retrying in %.2fs", state.attempt_number,
                        short_url(url), failed_before[0], delay,
                        extra={"NODE_AGENT_ATTEMPT": state.attempt_number, "NODE_AGENT_STAGE": "fetch",
                               "NODE_AGENT_URL": url, "NODE_AGENT_DELAY": round(delay, 3)})

        def attempt() -> FetchResult:
            attempts[0] += 1
            timeout = self.settings.fetch.attempt_timeout + hold  # the last attempt's: what is left of the budget
            timeout = max(MIN_ATTEMPT, min(timeout, start + limit - self._clock())) if limit else timeout
            log.debug("fetching %s (attempt %d)", short_url(url), attempts[0],
                      extra={"NODE_AGENT_ATTEMPT": attempts[0], "NODE_AGENT_STAGE": "fetch"})
            deadline = start + limit if limit else None
            result = self._attempt(url, request_headers, timeout, expected, etag, deadline, limit)
            return FetchResult(result.body, url, result.status, result.headers, attempts[0])

        retrying = tenacity.Retrying(sleep=self._sleep, stop=stop, wait=planned_delay,
                                     retry=tenacity.retry_if_exception_type(_Retry), before_sleep=before_sleep)
        try:
            result = retrying(attempt)
        except tenacity.RetryError as err:
            last = err.last_attempt.exception()
            reason = getattr(last, "reason", last)
            message = (f"could not fetch {short_url(url)} from server {server_of(url)}: gave up after "
                       f"{attempts[0]} attempt{'s' if attempts[0] != 1 else ''} over {self._clock() - start:.1f}s "
                       f"(fetch budget {limit:g}s); last error: {reason}")
            # The last attempt had only what was left of the budget (fit_to_deadline): what the one
            # before it met with its whole time, a wrong CA say, tells more than its cut-off does.
            if attempts[0] - 1 in final_after and failed_before and str(failed_before[0]) != str(reason):
                message += f"; the attempt before it: {failed_before[0]}"
            raise FetchError(message, url=url, status=getattr(last, "status", None), final=False)
        if result.attempts > 1:
            log.info("fetched %s on attempt %d", short_url(url), result.attempts,
                     extra={"NODE_AGENT_ATTEMPT": result.attempts, "NODE_AGENT_STAGE": "fetch"})
        return result

    def _attempt(self, url: str, headers: Dict[str, str], timeout: float,
                 expected: Optional[Tuple[str, str]], etag: Optional[str],
                 deadline: Optional[float] = None, budget: float = 0.0) -> FetchResult:
        """One attempt, held to its deadlines at every byte by a Watchdog (the sockets are shut
        down when one passes): the response head (connecting, TLS, redirects, status line and
        headers) must arrive within ``timeout`` (the attempt timeout, never past the budget), the
        body by ``deadline`` (the end of the fetch budget, if any). requests' own (connect, read)
        timeouts only bound each wait for data, which a server sending a byte at a time never
        trips."""
        server = server_of(url)
        now = self._clock()
        head_end = now + timeout
        head_what = "attempt"
        if deadline is not None and deadline <= head_end:
            head_end, head_what = deadline, "budget"
        # a floor of 50 ms, as for ``timeout``: an attempt that started is given a moment
        with Watchdog(max(0.05, head_end - now), head_what) as watchdog:
            try:
                resp = self._get(url, headers, timeout, head_end)
            except Exception as exc:  # a read timeout can beat the watchdog to the same deadline
                if watchdog.fired or (isinstance(exc, requests.exceptions.ReadTimeout) and watchdog.overdue()):
                    raise _Retry(watchdog.reason(server, timeout, budget, head=True)) from None
                raise self._failed_request(exc, url, server, timeout)
            watchdog.watch(resp)  # a session whose adapters are not watched: at least the body
            with resp:
                if watchdog.fired:  # the headers were cut short: http.client took the cut for their end
                    raise _Retry(watchdog.reason(server, timeout, budget, head=True))
                status = resp.status_code
                if status == 304 and etag:
                    return FetchResult(b"", url, 304, {k.lower(): v for k, v in resp.headers.items()})
                if not 200 <= status < 300:
                    self._fail(url, resp)  # reads a little of the error body: still under the head deadline
                # the body: until the end of the budget (none: each read bounded by the read timeout)
                watchdog.arm(None if deadline is None else max(0.05, deadline - self._clock()), "budget")
                try:
                    body = self._read_body(resp, server)
                except _Retry:
                    if not watchdog.fired:
                        raise
                if watchdog.fired:
                    raise _Retry(watchdog.reason(server, timeout, budget, head=False))
                check_hash(body, expected, url)
                return FetchResult(body, url, status, {k.lower(): v for k, v in resp.headers.items()})

    @staticmethod
    def _failed_request(exc: Exception, url: str, server: str, timeout: float) -> Exception:
        """The error to raise for an exception out of ``_get`` (a request that got no response)."""
        if isinstance(exc, requests.exceptions.SSLError):
            is_verify, reason = tls_reason(exc)
            if is_verify:
                # Retried like a transport error within the budget: servers rotate certificates and a
                # cluster CA may be replaced while nodes boot; the budget bounds it, and we never fall
                # back to an unverified connection.
                log.warning("TLS verification failed for %s: %s; not retrying insecurely", short_url(url), reason,
                            extra={"NODE_AGENT_STAGE": "fetch"})
                return _Retry(f"TLS verification failed for server {server}: {reason} "
                              "(is the pointer config's certificateAuthorities right?)")
            return _Retry(f"TLS error with server {server}: {reason}")
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return _Retry(f"connecting to server {server} timed out after {timeout:g}s")
        if isinstance(exc, requests.exceptions.ReadTimeout):
            return _Retry(f"server {server} sent no response headers within {timeout:g}s")
        if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema,
                            requests.exceptions.MissingSchema, requests.exceptions.InvalidHeader)):
            return ConfigError(f"cannot fetch {short_url(url)!r}: {exc}", source=url)
        if isinstance(exc, requests.exceptions.TooManyRedirects):
            return FetchError(f"too many redirects fetching {short_url(url)} from server {server}", url=url)
        if isinstance(exc, requests.exceptions.RequestException):
            return _Retry(f"cannot connect to server {server}: {transport_reason(exc)}")
        return exc  # ours (FetchError, ConfigError) or a bug: as it is

    def _get(self, url: str, headers: Dict[str, str], timeout: float,
             head_end: Optional[float] = None) -> requests.Response:
        """GET ``url`` following redirects ourselves: a redirect from https to anything else is
        refused *before* any request goes out in clear (requests would send it first), and
        credentials are not carried to another host (as Go's net/http, which Ignition uses).
        Each hop's (connect, read) timeout is what is left until ``head_end``."""
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            hop = timeout if head_end is None else max(0.05, min(timeout, head_end - self._clock()))
            resp = self.session.get(current, headers=headers, timeout=(hop, hop), stream=True,
                                    verify=True, allow_redirects=False)
            if not resp.is_redirect:
                return resp
            target = urljoin(current, resp.headers["Location"])
            resp.close()
            if urlsplit(url).scheme.lower() == "https" and urlsplit(target).scheme.lower() != "https":
                # Final (retrying cannot fix it) and exit 69 ("could not fetch"), never insecure.
                raise FetchError(f"{short_url(url)} redirected to an unencrypted URL ({short_url(target)}); "
                                 "refusing to fetch a config insecurely (nothing was sent there): make server "
                                 f"{server_of(url)} (or a proxy in front of it) answer over https, or point the "
                                 "pointer config at the https URL that serves the config",
                                 url=url, status=resp.status_code, final=True)
            if urlsplit(target).netloc.lower() != urlsplit(current).netloc.lower():
                headers = {k: v for k, v in headers.items() if k.lower() not in _CREDENTIAL_HEADERS}
            current = target
        raise FetchError(f"too many redirects fetching {short_url(url)} from server {server_of(url)}", url=url)

    def _read_body(self, resp: requests.Response, server: str) -> bytes:
        chunks = []
        size = 0
        try:
            for chunk in resp.iter_content(65536):
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_body:
                    raise FetchError(f"the response from server {server} for {short_url(resp.url)} is larger than "
                                     f"{self.max_body} bytes; refusing it", url=resp.url, status=resp.status_code)
        except requests.exceptions.RequestException as exc:
            raise _Retry(f"the response from server {server} broke off: {transport_reason(exc)}")
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
        said = server_message(resp)
        said_text = f": {said}" if said else ""
        what = f"HTTP {status} {resp.reason or ''}".rstrip()
        if status >= 500 or status in _RETRIED_4XX:
            retry_after = parse_retry_after(resp.headers.get("Retry-After"), self._wall)
            raise _Retry(f"server {server} answered {what}{said_text}", status=status, retry_after=retry_after)
        if status == 404:
            pool = pool_from_url(url)
            if pool:
                msg = (f"pool {pool} is unknown to server {server}: check the pointer config's URL "
                       f"({short_url(url)}){said_text}")
            else:
                msg = f"{short_url(url)} does not exist on server {server} (HTTP 404){said_text}"
        elif status in (401, 403):
            msg = (f"server {server} refused {short_url(url)} ({what}){said_text}: the credentials sent "
                   "(at first boot the bootstrap token in the pointer config's httpHeaders, after it this "
                   "node's credential, <stateDir>/node-credential) are missing or not accepted for this resource")
        else:
            msg = f"server {server} answered {what} for {short_url(url)}{said_text}; not retrying"
        raise FetchError(msg, url=url, status=status, final=True)
