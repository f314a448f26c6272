"""Fetcher against a real local HTTP(S) server: retries, timeouts, TLS trust, hashes, final answers.

Time is injected (a fake clock advanced by the fake sleep), so backoff schedules and budgets are
asserted exactly and no test sleeps. Only the attempt-timeout test waits on a real socket timeout
(two seconds), because that timeout lives in the kernel, not in our code.
"""

import email.utils
import hashlib
import logging
import random
import re

import pytest

from agent import __version__
from agent.core.backoff import Backoff, parse_retry_after
from agent.core.settings import FetchSettings, Settings
from agent.errors import EXIT_UNREACHABLE, ConfigError, FetchError
from agent.resource.fetch import IGNITION_ACCEPT, Fetcher, pool_from_url, server_of
from tests.helpers.certs import make_tls
from tests.helpers.httpserver import Reply, ScriptedServer, free_port

BODY = b'{"ignition": {"version": "3.4.0"}}'


class FakeTime:
    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy",
                 "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake():
    return FakeTime()


@pytest.fixture
def server():
    with ScriptedServer() as srv:
        yield srv


def make(fake, *, total=0.0, attempt=5.0, jitter=0.0, **kw) -> Fetcher:
    settings = Settings(node_name="n1", fetch=FetchSettings(total_timeout=total, attempt_timeout=attempt))
    return Fetcher(settings, sleep=fake.sleep, clock=fake.clock, jitter=jitter, **kw)


def attempt_records(caplog):
    return [r for r in caplog.records if hasattr(r, "NODE_AGENT_ATTEMPT") and r.levelno == logging.WARNING]


# --- headers and plain success -----------------------------------------------------------------

def test_ignition_fetch_sends_accept_user_agent_and_identity_encoding(server, fake):
    server.script("/config/worker", Reply(200, BODY, {"ETag": '"v1"'}))
    result = make(fake).fetch(server.url("/config/worker"), ignition=True)
    assert (result.body, result.status, result.attempts, result.etag) == (BODY, 200, 1, '"v1"')
    [req] = server.requests_for("/config/worker")
    assert req.header("Accept") == IGNITION_ACCEPT == "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"
    assert req.header("User-Agent") == f"node-agent/{__version__}"
    assert req.header("Accept-Encoding") == "identity"
    assert fake.sleeps == []


def test_plain_fetch_has_no_ignition_accept_and_passes_extra_headers(server, fake):
    server.script("/ca.pem", Reply(200, b"pem"))
    make(fake).fetch(server.url("/ca.pem"), headers={"Authorization": "Bearer t0k"})
    [req] = server.requests_for("/ca.pem")
    assert "ignition" not in (req.header("Accept") or "")
    assert req.header("Authorization") == "Bearer t0k"


def test_data_url_is_decoded_locally_with_hash_check(fake):
    fetcher = make(fake)
    assert fetcher.fetch("data:,hello%20world").body == b"hello world"
    good = {"hash": "sha256-" + hashlib.sha256(b"hi").hexdigest()}
    assert fetcher.fetch("data:;base64,aGk=", verification=good).body == b"hi"
    with pytest.raises(FetchError, match="does not match"):
        fetcher.fetch("data:,ho", verification=good)


def test_unsupported_scheme_is_a_config_error(fake):
    with pytest.raises(ConfigError, match="tftp"):
        make(fake).fetch("tftp://server/config")


# --- retried failures --------------------------------------------------------------------------

def test_refused_connection_is_retried_until_the_server_comes_up(fake, caplog):
    port = free_port()
    srv = ScriptedServer(port=port)
    srv.always("/config/worker", Reply(200, BODY))

    def sleep(seconds):
        fake.sleep(seconds)
        if not srv.running and len(fake.sleeps) == 2:
            srv.start()

    caplog.set_level(logging.DEBUG, logger="agent.resource.fetch")
    try:
        fetcher = Fetcher(Settings(node_name="n"), sleep=sleep, clock=fake.clock, jitter=0)
        result = fetcher.fetch(f"http://127.0.0.1:{port}/config/worker")
    finally:
        srv.stop()
    assert (result.body, result.attempts) == (BODY, 3)
    assert fake.sleeps == [0.2, 0.4]
    records = attempt_records(caplog)
    assert [r.NODE_AGENT_ATTEMPT for r in records] == [1, 2]
    assert "refused" in records[0].getMessage().lower()
    assert "retrying in 0.20s" in records[0].getMessage()


def test_server_errors_are_retried_then_success(server, fake):
    server.script("/config/worker", Reply(500), Reply(502), Reply(200, BODY))
    result = make(fake).fetch(server.url("/config/worker"), ignition=True)
    assert (result.body, result.attempts) == (BODY, 3)
    assert fake.sleeps == [0.2, 0.4]
    assert len(server.requests_for("/config/worker")) == 3


def test_503_retry_after_seconds_is_what_we_sleep(server, fake):
    server.script("/config/worker", Reply(503, '{"error": "withheld"}', {"Retry-After": "7"}), Reply(200, BODY))
    result = make(fake).fetch(server.url("/config/worker"))
    assert result.attempts == 2 and fake.sleeps == [7.0]


def test_retry_after_http_date_and_cap(server, fake):
    wall = 1_700_000_000.0
    date = email.utils.formatdate(wall + 30, usegmt=True)
    server.script("/c", Reply(429, headers={"Retry-After": date}), Reply(503, headers={"Retry-After": "86400"}),
                  Reply(200, b"ok"))
    result = make(fake, wall_clock=lambda: wall).fetch(server.url("/c"))
    # 30 s from the date; a day is capped at fetch.maxRetryAfter (60 s by default).
    assert result.body == b"ok" and fake.sleeps == [30.0, 60.0]


def test_429_is_retried(server, fake):
    server.script("/c", Reply(429), Reply(200, b"ok"))
    assert make(fake).fetch(server.url("/c")).attempts == 2
    assert fake.sleeps == [0.2]


def test_slow_headers_beyond_attempt_timeout_are_retried(server, fake, caplog):
    # The second, prompt answer must also arrive within the attempt timeout: 0.2 s was too little
    # on a loaded machine (a third attempt then found the script used up); the first answer's
    # delay stays far beyond it (the server's delay ends when the server stops).
    server.script("/c", Reply(200, b"late", delay=60), Reply(200, b"ok"))
    result = make(fake, attempt=2.0).fetch(server.url("/c"))
    assert (result.body, result.attempts) == (b"ok", 2)
    assert "no response headers within 2s" in attempt_records(caplog)[0].getMessage()


@pytest.mark.parametrize("chunked", [False, True])
def test_truncated_body_is_retried_and_never_returned(server, fake, chunked):
    full = bytes(range(256)) * 40
    server.script("/c", Reply(200, full, truncate=1000, chunked=chunked), Reply(200, full, chunked=chunked))
    result = make(fake).fetch(server.url("/c"))
    assert result.body == full and result.attempts == 2


def test_connection_reset_is_retried(server, fake):
    server.script("/c", Reply(reset=True), Reply(200, b"ok"))
    result = make(fake).fetch(server.url("/c"))
    assert (result.body, result.attempts) == (b"ok", 2)


def test_truncation_forever_spends_the_budget_and_returns_nothing_partial(server, fake):
    server.always("/c", Reply(200, b"x" * 5000, truncate=10))
    with pytest.raises(FetchError) as err:
        make(fake, total=3).fetch(server.url("/c"))
    assert "truncated" in str(err.value) or "broke off" in str(err.value)
    assert err.value.final is False


# --- budget and schedule ------------------------------------------------------------------------

def test_budget_exhaustion_names_attempts_duration_and_last_reason(server, fake, caplog):
    server.always("/config/worker", Reply(500, '{"error": "render failed"}'))
    with pytest.raises(FetchError) as err:
        make(fake, total=10).fetch(server.url("/config/worker"))
    # 0.2+0.4+0.8+1.6+3.2 = 6.2 s; the next wait (5 s) would end past the 10 s budget, so it is
    # cut to 2.8 s: one last attempt 1 s (the last-attempt window) before the deadline.
    assert fake.sleeps == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 2.8])
    msg = str(err.value)
    assert "gave up after 7 attempts over 9.0s" in msg
    assert "fetch budget 10s" in msg
    assert "HTTP 500" in msg and "render failed" in msg
    assert err.value.exit_code == EXIT_UNREACHABLE == 69
    assert err.value.status == 500 and err.value.final is False
    assert len(server.requests_for("/config/worker")) == 7


def test_a_last_attempt_cut_off_by_the_budget_also_names_what_the_attempt_before_it_met(server, fake):
    """The last attempt has only what is left of the budget (its last tenth here: 0.1 s): a server
    slow to answer it (or a busy machine) cuts it off, and its error alone would hide why the
    attempts with their whole time failed."""
    server.script("/config/worker", Reply(500, '{"error": "render failed"}'), Reply(500, '{"error": "render failed"}'),
                  Reply(500, '{"error": "render failed"}'))
    server.always("/config/worker", Reply(200, BODY, delay=2))
    with pytest.raises(FetchError) as err:
        make(fake, total=1).fetch(server.url("/config/worker"))
    assert fake.sleeps == pytest.approx([0.2, 0.4, 0.3])  # the last wait cut to the window's start
    msg = str(err.value)
    last, _, before = msg.partition("; the attempt before it: ")
    assert "gave up after 4 attempts" in last and "within the fetch budget" in last
    assert "HTTP 500" in before and "render failed" in before


def test_last_attempt_is_made_at_the_end_of_the_budget_never_past_it(fake):
    """Issue 31: the fetch gave up when the next backoff would pass the deadline (after 11.6 s of a
    15 s budget). A server that refuses connections until late in the budget is now reached by one
    last attempt just before the deadline, and no attempt or wait goes past it."""
    port = free_port()
    srv = ScriptedServer(port=port)
    srv.always("/config/worker", Reply(200, BODY))
    start = fake.now

    def sleep(seconds):
        fake.sleep(seconds)
        if not srv.running and fake.now - start >= 13.5:  # the server comes up 13.5 s into 15
            srv.start()

    try:
        fetcher = Fetcher(Settings(node_name="n", fetch=FetchSettings(total_timeout=15, attempt_timeout=5)),
                          sleep=sleep, clock=fake.clock, jitter=0)
        result = fetcher.fetch(f"http://127.0.0.1:{port}/config/worker")
    finally:
        srv.stop()
    assert result.body == BODY
    # 0.2 .. 5 s doubling: attempts at 0, 0.2, 0.6, 1.4, 3.0, 6.2, 11.2; the next wait (5 s) is cut
    # to end 1 s before the deadline (14.0), where the last attempt finds the server up.
    assert fake.sleeps == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 2.8])
    assert result.attempts == 8
    assert fake.now - start <= 15


def test_no_wait_or_attempt_passes_the_deadline(server, fake):
    server.always("/c", Reply(503, headers={"Retry-After": "30"}))
    with pytest.raises(FetchError, match="gave up after 2 attempts over 4.5s"):
        make(fake, total=5).fetch(server.url("/c"))
    assert fake.sleeps == pytest.approx([4.5])  # Retry-After 30 cut to the last attempt's start


def test_budget_argument_overrides_settings(server, fake):
    server.always("/c", Reply(500))
    with pytest.raises(FetchError, match="gave up after 4 attempts over 0.9s"):
        make(fake, total=0).fetch(server.url("/c"), budget=1.0)


def test_backoff_schedule_doubles_from_200ms_and_caps_at_5s(server, fake):
    server.script("/c", *[Reply(500)] * 9, Reply(200, b"ok"))
    result = make(fake).fetch(server.url("/c"))
    assert result.attempts == 10
    assert fake.sleeps == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5, 5, 5, 5])


def test_backoff_jitter_stays_within_ten_percent(server, fake):
    server.script("/c", *[Reply(500)] * 8, Reply(200, b"ok"))
    make(fake, jitter=0.1, rng=random.Random(7)).fetch(server.url("/c"))
    bases = [0.2, 0.4, 0.8, 1.6, 3.2, 5, 5, 5]
    assert len(fake.sleeps) == len(bases)
    for got, base in zip(fake.sleeps, bases):
        assert base * 0.9 <= got <= base * 1.1
    assert fake.sleeps != bases  # jitter really happened


def test_backoff_base_delay_never_overflows():
    b = Backoff(jitter=0)
    assert b.base_delay(0) == 0 and b.base_delay(1) == 0.2 and b.base_delay(10_000) == 5.0
    assert b.delay(3, retry_after=1000) == 60.0 and b.delay(3, retry_after=2) == 2


def test_parse_retry_after():
    assert parse_retry_after("12") == 12.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=lambda: 1445412480.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=lambda: 1445412490.0) == 0.0


# --- final answers -------------------------------------------------------------------------------

def test_404_on_pool_is_final_and_names_pool_and_server(server, fake):
    server.always("/config/infra", Reply(404, '{"error": "unknown pool infra"}'))
    with pytest.raises(FetchError) as err:
        make(fake, total=100).fetch(server.url("/config/infra"), ignition=True)
    msg = str(err.value)
    assert msg.startswith(f"pool infra is unknown to server {server.netloc}: check the pointer config's URL")
    assert server.url("/config/infra") in msg
    assert err.value.final and err.value.status == 404
    assert fake.sleeps == [] and len(server.requests_for("/config/infra")) == 1


def test_404_elsewhere_is_final(server, fake):
    with pytest.raises(FetchError, match=r"/bundle.pem does not exist on server 127\.0\.0\.1:\d+"):
        make(fake).fetch(server.url("/bundle.pem"))


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_are_final_and_mention_credentials(server, fake, status):
    server.always("/config/worker", Reply(status))
    with pytest.raises(FetchError) as err:
        make(fake, total=100).fetch(server.url("/config/worker"))
    assert f"HTTP {status}" in str(err.value) and "token" in str(err.value)
    assert len(server.requests_for("/config/worker")) == 1 and err.value.final


def test_other_4xx_is_final(server, fake):
    server.always("/c", Reply(400, "bad request body"))
    with pytest.raises(FetchError, match="HTTP 400.*bad request body; not retrying"):
        make(fake).fetch(server.url("/c"))
    assert fake.sleeps == []


@pytest.mark.parametrize("algo", ["sha512", "sha256"])
def test_hash_mismatch_is_final_with_both_hashes(server, fake, algo):
    server.always("/c", Reply(200, b"tampered"))
    wanted = getattr(hashlib, algo)(b"original").hexdigest()
    actual = getattr(hashlib, algo)(b"tampered").hexdigest()
    with pytest.raises(FetchError) as err:
        make(fake).fetch(server.url("/c"), verification={"hash": f"{algo}-{wanted}"})
    assert f"expected {algo}-{wanted}" in str(err.value) and f"got {algo}-{actual}" in str(err.value)
    assert err.value.final and len(server.requests_for("/c")) == 1


def test_hash_match_and_bad_hash_syntax(server, fake):
    server.always("/c", Reply(200, b"original"))
    digest = hashlib.sha512(b"original").hexdigest()
    assert make(fake).fetch(server.url("/c"), verification={"hash": f"sha512-{digest}"}).body == b"original"
    for bad in ("md5-abc", "sha512-xyz", "sha256", f"sha256-{digest}"):
        with pytest.raises(ConfigError, match="verification.hash"):
            make(fake).fetch(server.url("/c"), verification={"hash": bad})


def test_oversized_body_is_refused(server, fake):
    server.always("/c", Reply(200, b"x" * 300_000, chunked=True))
    fetcher = make(fake)
    fetcher.max_body = 100_000
    with pytest.raises(FetchError, match="larger than 100000 bytes"):
        fetcher.fetch(server.url("/c"))
    assert len(server.requests_for("/c")) == 1


def test_conditional_get_304(server, fake):
    def reply(handler):
        if handler.headers.get("If-None-Match") == '"v7"':
            return Reply(304, headers={"ETag": '"v7"'})
        return Reply(200, BODY, {"ETag": '"v7"'})

    server.always("/config/worker", reply)
    fetcher = make(fake)
    first = fetcher.fetch(server.url("/config/worker"), ignition=True)
    again = fetcher.fetch(server.url("/config/worker"), ignition=True, etag=first.etag)
    assert (first.status, first.body) == (200, BODY)
    assert (again.status, again.body, again.etag) == (304, b"", '"v7"')


# --- TLS --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("tls")
    return make_tls(str(base / "good")), make_tls(str(base / "other"), ca_name="other CA")


def test_tls_with_added_ca_succeeds(tls_pair, fake):
    good, _ = tls_pair
    with ScriptedServer(tls=good) as srv:
        srv.always("/config/worker", Reply(200, BODY))
        result = make(fake, ca_pems=[good.ca_pem()]).fetch(srv.url("/config/worker"))
        assert result.body == BODY


def test_tls_ca_added_later_is_trusted(tls_pair, fake):
    good, _ = tls_pair
    with ScriptedServer(tls=good) as srv:
        srv.always("/c", Reply(200, b"ok"))
        # A TLS verification failure is final (never retried), so a generous budget costs nothing;
        # 0.5 s ran out before the handshake on a loaded machine and the test saw a timeout.
        fetcher = make(fake, total=10)
        with pytest.raises(FetchError, match="TLS verification failed"):
            fetcher.fetch(srv.url("/c"))
        fetcher.add_ca(good.ca_pem())
        assert fetcher.fetch(srv.url("/c")).body == b"ok"


@pytest.mark.parametrize("which", ["other CA", "no CA"])
def test_wrong_ca_fails_clearly_and_never_insecurely(tls_pair, fake, caplog, which):
    good, other = tls_pair
    cas = [other.ca_pem()] if which == "other CA" else []
    with ScriptedServer(tls=good) as srv:
        srv.always("/config/worker", Reply(200, BODY))
        with pytest.raises(FetchError) as err:
            make(fake, total=60, attempt=30, ca_pems=cas).fetch(srv.url("/config/worker"))
        assert srv.requests == []  # no request ever got through the failed handshake
    # The reason of the TLS library's own (not pinned here) between our words: never empty. It is
    # the last error, or the one before it when the last attempt, with only the budget's last
    # second (the clock is the test's, the handshake's time is not), was cut off on a busy machine.
    reason = re.search(r"TLS verification failed for server 127\.0\.0\.1:\d+: (.*?) \(is the pointer config's "
                       r"certificateAuthorities right\?\)", str(err.value))
    assert reason and reason.group(1).strip(), str(err.value)
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"TLS verification failed for {srv.url('/config/worker')}") and
               m.endswith("not retrying insecurely") for m in logged)


@pytest.mark.parametrize("sans", [("127.0.0.1",), ("localhost",)])
def test_ip_literal_url_is_verified_against_the_ip_san(tmp_path, fake, sans):
    # https://<IP>/: urllib3 1.26 (RHEL 9) sends no SNI to an IP literal; with our own context
    # that used to be "check_hostname requires server_hostname" (exit 70). The name is still
    # checked: a certificate for another name (only "localhost") is refused.
    tls = make_tls(str(tmp_path / "tls"), hosts=sans)
    with ScriptedServer(tls=tls) as srv:
        srv.always("/c", Reply(200, b"ok"))
        assert srv.url("/c").startswith("https://127.0.0.1:")
        fetcher = make(fake, total=10, ca_pems=[tls.ca_pem()])  # see test_tls_ca_added_later_is_trusted
        if sans == ("127.0.0.1",):
            assert fetcher.fetch(srv.url("/c")).body == b"ok"
        else:
            with pytest.raises(FetchError, match="TLS verification failed.*127.0.0.1"):
                fetcher.fetch(srv.url("/c"))
            assert srv.requests == []


def test_add_ca_rejects_non_pem(fake):
    with pytest.raises(ConfigError, match="not a PEM certificate bundle"):
        make(fake).add_ca(b"hello", source="pointer")


def test_https_redirect_to_http_is_refused(tls_pair, fake):
    good, _ = tls_pair
    with ScriptedServer() as plain, ScriptedServer(tls=good) as secure:
        plain.always("/c", Reply(200, b"insecure"))
        secure.always("/c", Reply(302, headers={"Location": plain.url("/c")}))
        with pytest.raises(FetchError, match="unencrypted") as err:
            make(fake, ca_pems=[good.ca_pem()]).fetch(secure.url("/c"))
        assert not plain.requests_for("/c")  # refused before anything went out in clear
    assert fake.sleeps == []  # final: retrying cannot make it secure
    # exit 69, "could not fetch", documented as covering a fetch refused as insecure
    # (docs/troubleshooting.md, docs/operations.md "Fetch deadlines and exit 69")
    assert err.value.final and err.value.status == 302 and err.value.exit_code == EXIT_UNREACHABLE
    assert "answer over https, or point the pointer config at the https URL" in str(err.value)  # what to do


def test_credentials_are_not_carried_to_another_host(server, fake):
    with ScriptedServer() as other:
        other.always("/c", Reply(200, BODY))
        server.always("/c", Reply(307, headers={"Location": other.url("/c")}))
        got = make(fake).fetch(server.url("/c"), headers={"Authorization": "Bearer s3cret", "X-Other": "kept"})
        assert got.body == BODY
        seen = other.requests_for("/c")[0]
        assert seen.header("Authorization") is None and seen.header("X-Other") == "kept"


# --- small helpers ------------------------------------------------------------------------------------

def test_pool_from_url_and_server_of():
    assert pool_from_url("https://api.example.com:22623/config/worker") == "worker"
    assert pool_from_url("https://h:22623/config/infra-gpu/") == "infra-gpu"
    assert pool_from_url("https://h/other/worker") is None
    assert pool_from_url("data:,x") is None
    assert server_of("https://h/config/x") == "h:443" and server_of("http://h:22624/x") == "h:22624"
