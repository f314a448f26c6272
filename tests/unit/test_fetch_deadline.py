"""fetch.totalTimeout is a hard deadline at every byte: a server (or a proxy) that trickles its
status line, its headers or its body, each byte well within the read timeout, is cut off at the
budget; fetch.attemptTimeout bounds each attempt's response head the same way.

The servers here are real sockets on 127.0.0.1. Their loops are bounded (a fixed list of
chunks) and stop by themselves: when the client cuts the connection (a send fails), or when the
test leaves the ``with`` block."""

import logging
import socket
import ssl
import threading
import time

import pytest

from agent.core.proxyrules import ProxySettings
from agent.core.settings import FetchSettings, Settings
from agent.errors import EXIT_UNREACHABLE, FetchError
from agent.resource.fetch import Fetcher
from agent.resource.transport import Watchdog, _current
from tests.helpers.certs import make_tls
from tests.helpers.proxyserver import ForwardProxy
from tests.helpers.wait import wait_for

BUDGET = 2.5
SLACK = 1.0  # the brief: a fetch ends within budget + 1 s
NAME = "config.test"  # resolved only by the forward proxy

STATUS_LINE = b"HTTP/1.1 200 " + b"O" * 60 + b"\r\n"  # 74 bytes, a byte every 0.1 s: 7.4 s
HEADERS = [b"X-Slow-%03d: x\r\n" % i for i in range(100)]  # a header every 0.5 s: 50 s
END = b"Content-Length: 2\r\n\r\nok"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy", "no_proxy",
                 "NO_PROXY", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)


def status_line_trickle():
    return [(0.1, bytes([b])) for b in STATUS_LINE] + [(0.0, END)]


def headers_trickle():
    return [(0.0, b"HTTP/1.1 200 OK\r\n")] + [(0.5, h) for h in HEADERS] + [(0.0, END)]


def body_trickle():
    return [(0.0, b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")] + [(0.05, b"x")] * 1000


class Trickle:
    """Answers every connection with ``plan``: (pause, bytes) pairs, sent in order."""

    def __init__(self, plan, tls=None):
        self.plan = plan
        self.context = None
        if tls is not None:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(tls.cert, tls.key)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)  # accept() wakes up to see ``stop``
        self.stop = threading.Event()
        self.cut = threading.Event()  # a send failed: the client shut the connection down
        self.threads = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in [self.thread] + self.threads:
            t.join(10)
        self.sock.close()

    @property
    def port(self):
        return self.sock.getsockname()[1]

    def url(self, host="127.0.0.1"):
        return f"{'https' if self.context else 'http'}://{host}:{self.port}/config/worker"

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _answer(self, conn):
        conn.settimeout(10)
        try:
            if self.context is not None:
                conn = self.context.wrap_socket(conn, server_side=True)
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 65536:
                data = conn.recv(65536)
                if not data:
                    return
                request += data
            for pause, data in self.plan:  # bounded: the plan is a fixed list
                if self.stop.wait(pause):
                    return
                conn.sendall(data)
        except OSError:  # ssl.SSLError is one too
            self.cut.set()
        finally:
            conn.close()


def fetcher(total=BUDGET, attempt=10.0, **kw):
    settings = Settings(node_name="n1", fetch=FetchSettings(total_timeout=total, attempt_timeout=attempt),
                        **kw.pop("settings", {}))
    return Fetcher(settings, jitter=0.0, **kw)


def fails_at_the_deadline(f, url, budget=BUDGET, earliest=BUDGET - 0.2, last_cut_at_the_budget=True):
    start = time.monotonic()
    with pytest.raises(FetchError) as info:
        f.fetch(url)
    elapsed = time.monotonic() - start
    err = info.value
    assert earliest <= elapsed < budget + SLACK, f"took {elapsed:.2f}s with a {budget}s budget"
    text = str(err)
    assert f"fetch budget {budget:g}s" in text and "cut off" in text, text
    if last_cut_at_the_budget:
        assert f"(fetch.totalTimeout {budget:g}s); it was cut off at the deadline" in text, text
    assert err.final is False and err.exit_code == EXIT_UNREACHABLE
    return err, elapsed


@pytest.mark.parametrize("plan,words", [
    (status_line_trickle, "sent no complete response headers within the fetch budget"),
    (headers_trickle, "sent no complete response headers within the fetch budget"),
    (body_trickle, "did not finish within the fetch budget"),
])
def test_a_trickle_ends_at_the_total_budget(plan, words):
    with Trickle(plan()) as srv:
        err, _ = fails_at_the_deadline(fetcher(), srv.url())
        assert words in str(err) and f"server 127.0.0.1:{srv.port}" in str(err)
        assert "raise fetch.totalTimeout in agent.yaml" in str(err)  # what to do
        # the socket was shut down, not just abandoned: the server's next send failed
        assert srv.cut.wait(5), "the server never saw the connection cut"


def test_trickled_headers_over_tls_end_at_the_budget(tmp_path):
    tls = make_tls(str(tmp_path / "tls"))
    with Trickle(headers_trickle(), tls=tls) as srv:
        fails_at_the_deadline(fetcher(ca_pems=[tls.ca_pem()]), srv.url())
        assert srv.cut.wait(5)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_trickled_headers_through_a_proxy_end_at_the_budget(tmp_path, scheme):
    # http: the proxy's pool (absolute-form GET); https: a CONNECT tunnel, then TLS to the server
    tls = make_tls(str(tmp_path / "tls"), hosts=(NAME,)) if scheme == "https" else None
    with Trickle(headers_trickle(), tls=tls) as srv, ForwardProxy(hosts={NAME: "127.0.0.1"}) as fwd:
        proxy = ProxySettings(http_proxy=fwd.url) if scheme == "http" else ProxySettings(https_proxy=fwd.url)
        f = fetcher(settings={"proxy": proxy}, ca_pems=[tls.ca_pem()] if tls else ())
        fails_at_the_deadline(f, srv.url(NAME))
        assert [m for m, _ in fwd.seen] == ["GET" if scheme == "http" else "CONNECT"]


def test_the_attempt_timeout_bounds_each_response_head(caplog):
    # attempts cut at 1 s each and retried: 0-1, 1.2-2.2, then 2.6-3.0 cut at the budget (on a
    # loaded machine the third may not start: no attempt starts that could not begin in time)
    caplog.set_level(logging.WARNING, logger="agent.resource.fetch")
    with Trickle(headers_trickle()) as srv:
        err, _ = fails_at_the_deadline(fetcher(total=3.0, attempt=1.0), srv.url(), budget=3.0, earliest=2.0,
                                       last_cut_at_the_budget=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) >= 2 and all("sent no response headers within 1s (the attempt timeout, "
                                      "fetch.attemptTimeout)" in w for w in warnings), warnings
    assert "within the fetch budget (fetch.totalTimeout 3s); it was cut off at the deadline" in str(err) \
        or "gave up after 2 attempts" in str(err)


def test_a_quick_answer_is_not_cut_and_nothing_fires_later(monkeypatch):
    import agent.resource.fetch as fetch_module

    dogs = []

    class Recorded(Watchdog):  # the fetch's own watchdogs, to see whether any fires later
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            dogs.append(self)

    monkeypatch.setattr(fetch_module, "Watchdog", Recorded)
    plan = [(0.0, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")]
    with Trickle(plan) as srv:
        f = fetcher(total=1.5, attempt=1.0)
        assert f.fetch(srv.url()).body == b"ok"
        time.sleep(1.7)  # past both deadlines: nothing may fire after the fetch ended
    # (the server closes after its answer, so a late cut would not show as srv.cut: ask the watchdogs)
    assert dogs and [d.fired_what for d in dogs] == [None] * len(dogs)
    assert _current() is None


def test_watchdog_arming():
    with Watchdog(None) as w:  # no deadline: never fires
        assert _current() is w
        time.sleep(0.1)
    assert not w.fired and _current() is None
    with Watchdog(0.05, "attempt") as w:
        wait_for(lambda: w.fired, "the 0.05 s attempt watchdog firing", timeout=10)
        assert w.fired_what == "attempt" and w.overdue()
        assert "within 1s (the attempt timeout, fetch.attemptTimeout)" in w.reason("h:1", 1, 0, head=True)
    with Watchdog(5, "budget") as w:
        assert not w.overdue()
        assert "within the fetch budget (fetch.totalTimeout 5s)" in w.reason("h:1", 1, 5, head=True)
    # Re-armed (or left) before it fired: the test must get there before the first deadline, so
    # that deadline is 1 s, not 0.05 s (a thread preempted for 50 ms on a loaded machine let it fire).
    with Watchdog(1.0, "attempt") as w:
        w.arm(None, "budget")  # re-armed before it fired: the old timer is void
        time.sleep(1.3)  # past the old deadline
        assert not w.fired
    with Watchdog(5, "attempt") as w:
        w.arm(0.05, "budget")
        assert wait_for(lambda: w.fired_what, "the re-armed watchdog firing", timeout=10) == "budget"
    w = Watchdog(1.0)
    with w:
        pass
    time.sleep(1.3)  # past its deadline
    assert not w.fired  # nothing fires after the block
