"""Proxies: which URL goes through which proxy (Go's httpproxy rules, as Ignition), where the
settings come from, and fetches, CA bundles and reports through a real proxy process on loopback."""

from typing import Optional

import pytest

from agent.core.settings import FetchSettings, Settings, parse_settings
from agent.errors import ConfigError, FetchError
from agent.resource import proxy
from agent.resource.fetch import Fetcher
from agent.resource.pointer import resolve_pointer
from agent.resource.proxy import ProxySettings, bypasses, proxy_for
from tests.helpers.certs import make_tls
from tests.helpers.httpserver import Reply, ScriptedServer
from tests.helpers.proxyserver import ForwardProxy

BODY = b'{"ignition": {"version": "3.4.0"}}'
# A name only the proxy resolves: a request that reaches the server went through the proxy.
NAME = "config.test"


# --- pure: which URLs bypass the proxy -------------------------------------------------------------

@pytest.mark.parametrize("url, no_proxy, direct", [
    ("https://api.example.com/x", (), False),
    ("https://localhost:22623/x", (), True),           # never proxied (httpproxy useProxy)
    ("https://127.0.0.1:22623/x", (), True),
    ("https://[::1]:22623/x", (), True),
    ("https://api.example.com/x", ("*",), True),
    ("https://api.example.com/x", ("example.com",), True),   # the domain and its subdomains
    ("https://example.com/x", ("example.com",), True),
    ("https://example.com/x", (".example.com",), False),     # leading dot: subdomains only
    ("https://a.example.com/x", (".example.com",), True),
    ("https://a.example.com/x", ("*.example.com",), True),
    ("https://notexample.com/x", ("example.com",), False),
    ("https://10.0.0.5:22623/x", ("10.0.0.0/16",), True),
    ("https://10.1.0.5:22623/x", ("10.0.0.0/16",), False),
    ("https://10.0.0.5:22623/x", ("10.0.0.5",), True),
    ("https://10.0.0.5:22623/x", ("10.0.0.5:22623",), True),
    ("https://10.0.0.5:22623/x", ("10.0.0.5:443",), False),
    ("https://api.example.com/x", ("api.example.com:443",), True),
    ("http://api.example.com/x", ("api.example.com:443",), False),
    ("https://API.Example.COM/x", ("api.example.com",), True),
])
def test_no_proxy_rules(url, no_proxy, direct):
    assert bypasses(url, no_proxy) is direct


def test_proxy_for_picks_by_scheme_and_adds_http_scheme():
    s = ProxySettings(http_proxy="proxy:3128", https_proxy="http://secure:3128", no_proxy=("internal",))
    assert proxy_for("http://a.example/x", s) == "http://proxy:3128"
    assert proxy_for("https://a.example/x", s) == "http://secure:3128"
    assert proxy_for("https://internal/x", s) is None
    assert proxy_for("https://a.example/x", ProxySettings(http_proxy="http://p:1")) is None


def test_sources_environment_agent_yaml_and_ignition():
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:1", "NO_PROXY": "a, .b ,,c"}
    assert proxy.from_environment(env) == ProxySettings("", "http://lower:1", ("a", ".b", "c"))
    settings, given = proxy.from_ignition({"ignition": {"proxy": {"httpsProxy": "http://ign:1", "noProxy": ["x"]}}})
    assert given == ("https_proxy", "no_proxy")
    merged = proxy.from_environment(env).overridden_by(settings, given)
    assert merged == ProxySettings("", "http://ign:1", ("x",))
    assert proxy.from_ignition({"ignition": {"version": "3.4.0"}}) == (ProxySettings(), ())
    assert proxy.redacted("http://u:secret@p:3128") == "http://u:***@p:3128"


def test_agent_yaml_proxy_section_is_validated():
    s = parse_settings({"proxy": {"httpsProxy": "http://p:3128", "noProxy": ["a", ".b"]}})
    assert s.proxy == ProxySettings("", "http://p:3128", ("a", ".b"))
    with pytest.raises(ConfigError, match="proxy.httpProxy"):
        parse_settings({"proxy": {"httpProxy": "ftp://p"}})
    with pytest.raises(ConfigError, match="proxy.noProxy"):
        parse_settings({"proxy": {"noProxy": "a,b"}})


# --- through a real proxy process ---------------------------------------------------------------------

class FakeTime:
    def __init__(self):
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def _no_env_proxy(monkeypatch):
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


# The fetch budget counts on the test's clock (FakeTime: it moves when the fetcher sleeps between
# attempts, or when a test moves it), but an attempt's watchdog (agent.resource.transport.Watchdog)
# gives it, in real seconds, what is left of the budget on that clock, at most the attempt
# timeout: here ATTEMPT real seconds (the last attempt of a spent budget 1 s), which no loaded
# machine spends on a request to loopback. A budget of 0.5 gave the attempts 0.5, 0.3 and 0.05 real
# seconds, and the last one's TLS handshake through the proxy on a busy machine ran past them
# (issue 54: "sent no complete response headers within the fetch budget").
BUDGET, ATTEMPT = 60.0, 30.0


def fetcher(proxy_settings: ProxySettings, fake: Optional[FakeTime] = None, **kw) -> Fetcher:
    fake = fake or FakeTime()
    settings = Settings(node_name="n1", fetch=FetchSettings(total_timeout=BUDGET, attempt_timeout=ATTEMPT),
                        proxy=proxy_settings)
    return Fetcher(settings, sleep=fake.sleep, clock=fake.clock, jitter=0.0, **kw)


def named(url: str) -> str:
    return url.replace("127.0.0.1", NAME)


def test_http_fetch_and_report_go_through_the_proxy():
    with ScriptedServer() as srv, ForwardProxy(hosts={NAME: "127.0.0.1"}) as fwd:
        srv.always("/config/worker", Reply(200, BODY))
        srv.always("/api/v1/report", Reply(200, b"{}"))
        f = fetcher(ProxySettings(http_proxy=fwd.url))
        assert f.fetch(named(srv.url("/config/worker")), ignition=True).body == BODY
        # Reports and drains use the fetcher's session (agent.node.firstboot / agent.node.update).
        assert f.session.post(named(srv.url("/api/v1/report")), data=b"{}", timeout=5).status_code == 200
        assert [m for m, _ in fwd.seen] == ["GET", "POST"]
        assert fwd.seen[0][1] == named(srv.url("/config/worker"))
        assert [r.path for r in srv.requests] == ["/config/worker", "/api/v1/report"]


def test_https_through_the_proxy_still_verifies_the_server(tmp_path):
    good = make_tls(str(tmp_path / "good"), hosts=(NAME,))
    other = make_tls(str(tmp_path / "other"), hosts=(NAME,), ca_name="other CA")
    with ScriptedServer(tls=good) as srv, ForwardProxy(hosts={NAME: "127.0.0.1"}) as fwd:
        srv.always("/c", Reply(200, b"ok"))
        url = named(srv.url("/c"))
        assert fetcher(ProxySettings(https_proxy=fwd.url), ca_pems=[good.ca_pem()]).fetch(url).body == b"ok"
        connect = ("CONNECT", f"{NAME}:{url.split(':')[2].split('/')[0]}")
        assert fwd.seen == [connect]
        # Verified against another CA: the handshake through the tunnel fails, and the fetch gives
        # up with that error. Retried within the budget (a rotated CA), so the budget is spent on
        # the test's clock while the proxy opens the tunnel: one attempt, with all its real time.
        clock = FakeTime()
        fwd.on_request = lambda method, target: clock.sleep(BUDGET)
        with pytest.raises(FetchError, match=r"gave up after 1 attempt .*TLS verification failed"):
            fetcher(ProxySettings(https_proxy=fwd.url), clock, ca_pems=[other.ca_pem()]).fetch(url)
        assert fwd.seen == [connect, connect]
        assert len(srv.requests) == 1  # the unverified attempt never got a request through


def test_no_proxy_goes_direct():
    with ScriptedServer() as srv, ForwardProxy(hosts={NAME: "127.0.0.1"}) as fwd:
        srv.always("/c", Reply(200, b"ok"))
        f = fetcher(ProxySettings(http_proxy=fwd.url, no_proxy=("test",)))
        with pytest.raises(FetchError):  # direct: config.test resolves nowhere but in the proxy
            f.fetch(named(srv.url("/c")), budget=0.5)  # any failure will do: 3 attempts (BUDGET: 17)
        assert fwd.seen == []
        assert f.fetch(srv.url("/c")).body == b"ok"  # loopback: always direct
        assert fwd.seen == []


def test_pointer_ignition_proxy_is_used_for_the_configs_it_references():
    with ScriptedServer() as srv, ForwardProxy(hosts={NAME: "127.0.0.1"}) as fwd:
        srv.always("/config/worker", Reply(200, BODY))
        pointer = {"ignition": {"version": "3.4.0", "proxy": {"httpProxy": fwd.url},
                                "config": {"merge": [{"source": named(srv.url("/config/worker"))}]}}}
        f = fetcher(ProxySettings())
        resolved = resolve_pointer(pointer, f)
        assert resolved.ignition["ignition"]["version"] == "3.4.0"
        assert [m for m, _ in fwd.seen] == ["GET"]
