"""Which Prometheus alerts fire (ours; the effect behind agent/server/rollout/alertgate.py): ``serve
--prometheus-url URL`` is asked ``GET URL/api/v1/alerts`` on a thread of its own, every
``INTERVAL`` seconds while a gated pool's step asked in the last ``IDLE`` seconds. A step reads the
latest answer and never waits on the network (but for the first answer of a process, at most
``TIMEOUT`` seconds): a slow or unreachable Prometheus never slows the pools' steps or a report.

kured asks the query API for ``ALERTS`` (kubereboot/kured at e1026ae0, pkg/blockers/prometheus.go:86
``ActiveAlerts``); the alerts API answers the same alerts with their state and needs no query.
TLS is verified (the system's CAs, or ``REQUESTS_CA_BUNDLE``'s); a redirect is not followed; the
answer is bounded in time and size. Anything but a readable answer is "did not answer: why".
"""

import logging
import threading
import time
import urllib.parse
from typing import Any, Dict, Mapping, Optional, Tuple

from agent.server.rollout import alertgate
from agent.server.rollout.alertgate import AlertsUnreadable, Firing

log = logging.getLogger(__name__)

INTERVAL = 2.0  # seconds between two queries (at most one query per interval per process)
TIMEOUT = 5.0  # seconds: a connection, and then the whole answer
IDLE = 300.0  # seconds without a gated pool's step after which the thread stops asking
MAX_BYTES = 8 << 20  # an answer of 10,000 alerts is about 5 MiB


def check_url(text: Optional[str]) -> str:
    """``serve --prometheus-url``: "" without one; ValueError naming the flag otherwise."""
    if not text:
        return ""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--prometheus-url {text!r}: give an http or https URL of a Prometheus, e.g. "
                         f"https://prometheus.example:9090 (its alerts are read from URL/api/v1/alerts)")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"--prometheus-url {parts.scheme}://{parts.hostname}...: give no user, password, query or "
                         f"fragment in the URL (credentials there would be logged)")
    return text.rstrip("/")


def _why(exc: BaseException, timeout: float) -> str:
    """A stable, short reason (the pool's row is written again only when it changes)."""
    import requests

    if isinstance(exc, requests.exceptions.SSLError):
        return "its TLS certificate is not trusted or the handshake failed (a private CA: REQUESTS_CA_BUNDLE=FILE)"
    if isinstance(exc, requests.exceptions.Timeout):
        return f"no answer within {timeout:g} s"
    cause: Optional[BaseException] = exc
    for _ in range(8):  # the OSError under requests' and urllib3's wrappers: "Connection refused"
        if cause is None:
            break
        if isinstance(cause, OSError) and cause.strerror:
            return f"the connection failed: {cause.strerror}"
        cause = cause.__cause__ or cause.__context__
    return f"the request failed ({type(exc).__name__})"


class PrometheusAlerts:
    """The firing alerts of one Prometheus, kept fresh by a daemon thread while they are asked for."""

    def __init__(self, url: str, interval: float = INTERVAL, timeout: float = TIMEOUT):
        self.url = url.rstrip("/") + "/api/v1/alerts"
        self.interval, self.timeout = interval, timeout
        self._lock = threading.Lock()
        self._answered = threading.Event()
        self._stop = threading.Event()
        self._latest: Optional[Tuple[float, Firing]] = None
        self._asked = 0.0
        self._thread: Optional[threading.Thread] = None
        self.queries = 0  # how many were sent (tests: at most one per interval)

    def firing(self) -> Firing:
        now = time.monotonic()
        with self._lock:
            self._asked = now
            if self._thread is None or not self._thread.is_alive():  # the first ask, or after IDLE
                self._stop.clear()
                self._answered.clear()
                self._latest = None
                self._thread = threading.Thread(target=self._run, name="prometheus-alerts", daemon=True)
                self._thread.start()
        if not self._answered.wait(self.timeout + 1.0):
            return Firing(unanswered=f"GET {self.url}: no answer within {self.timeout:g} s")
        with self._lock:
            at, latest = self._latest  # type: ignore[misc]
        age = time.monotonic() - at
        if age > self.interval + 2 * self.timeout + 1.0:  # the thread is stuck or gone: say so, never reuse it
            return Firing(unanswered=f"GET {self.url}: the last answer is {age:.0f} s old")
        return latest

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        import requests

        session = requests.Session()
        try:
            while not self._stop.is_set():
                firing = self.ask(session)
                with self._lock:
                    old = self._latest[1] if self._latest else None
                    self._latest = (time.monotonic(), firing)
                    idle = time.monotonic() - self._asked > IDLE
                self._answered.set()
                if firing != old:
                    log.info("Prometheus %s: %s", self.url, f"did not answer: {firing.unanswered}"
                             if firing.unanswered else f"{len(firing.names)} alert(s) firing")
                if idle or self._stop.wait(self.interval):
                    return
        finally:
            session.close()

    def ask(self, session: Any) -> Firing:
        """One query: the firing alerts, or why there are none to tell."""
        import requests

        self.queries += 1
        begin = time.monotonic()
        try:
            with session.get(self.url, headers={"Accept": "application/json"}, stream=True, allow_redirects=False,
                             timeout=(self.timeout, self.timeout)) as resp:
                body = bytearray()
                for chunk in resp.iter_content(65536):
                    body += chunk
                    if len(body) > MAX_BYTES:
                        return Firing(unanswered=f"GET {self.url}: the answer is over {MAX_BYTES >> 20} MiB")
                    if time.monotonic() - begin > self.timeout:
                        return Firing(unanswered=f"GET {self.url}: the answer took over {self.timeout:g} s")
                if resp.status_code != 200:
                    return Firing(unanswered=f"GET {self.url}: HTTP {resp.status_code} {resp.reason or ''}".rstrip())
            return Firing(names=alertgate.parse_answer(bytes(body)))
        except requests.RequestException as exc:
            return Firing(unanswered=f"GET {self.url}: {_why(exc, self.timeout)}")
        except AlertsUnreadable as exc:
            return Firing(unanswered=f"GET {self.url}: the answer is not Prometheus's alerts list: {exc}")


class Starting:
    """The alerts of ``serve``'s first render, before gunicorn forks its workers (which ask):
    not asked, so a gated pool holds, override or not."""

    def firing(self) -> Firing:
        return Firing(unanswered="not asked yet: the server is starting", starting=True)


def gate_state(pool: Mapping[str, Any], source: Optional[PrometheusAlerts]) -> Tuple[str, Optional[Dict[str, Any]]]:
    """The pool's alert gate now (alertgate.state): Prometheus is asked only for a gated pool."""
    if not alertgate.gated(pool):
        return "", None
    return alertgate.state(pool, source.firing() if source is not None else None)
