"""Fault campaign: the agent's fetch through a real TCP proxy that resets, delays, stalls,
truncates, garbles and answers 5xx at random (seeded), in front of a real HTTP server.

Each round must end in exactly one of two ways: the right config, byte for byte (or, through
``resolve_pointer``, exactly the served Ignition), or a FetchError saying the budget ran out,
no later than the budget allows. Never a wrong or partial config, never another exception.
Real time, small budgets: the whole campaign stays within a few seconds on 2 cores.
"""

import json
import time
import urllib.parse
from collections import Counter

import pytest

from agent.core.settings import FetchSettings, Settings
from agent.errors import FetchError
from agent.resource.fetch import Fetcher
from agent.resource.pointer import resolve_pointer
from tests.helpers.faultproxy import FAULTS, FaultProxy
from tests.helpers.httpserver import Reply, ScriptedServer

# The last test checks what every round saw (module-level counts): under pytest-xdist all of this
# module runs on one worker, in order.
pytestmark = pytest.mark.xdist_group("fault_campaign")

ROUNDS = 30
BUDGET = 1.0
ATTEMPT = 0.25
# The budget may be overrun by at most one attempt's timeout plus scheduling slack.
LATE = ATTEMPT + 0.75
# Per round, how often the proxy misbehaves: most rounds get through, some cannot.
RATES = (0.3, 0.5, 0.7, 1.0)


def served_config() -> dict:
    # ~40 KB so that truncation lands inside the body as often as inside the headers
    files = [{"path": f"/etc/x/file-{i:03d}", "mode": 0o644,
              "contents": {"source": "data:," + urllib.parse.quote(f"line {i}\n" * 60)}} for i in range(60)]
    return {"ignition": {"version": "3.4.0"}, "storage": {"files": files}}


CONFIG = served_config()
BODY = json.dumps(CONFIG, indent=1).encode()
_outcomes: Counter = Counter()
_injected: Counter = Counter()


@pytest.fixture(autouse=True)
def _no_env_proxy(monkeypatch):
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def proxy():
    with ScriptedServer() as server:
        server.always("/config/worker", Reply(200, BODY, {"Content-Type": "application/vnd.coreos.ignition+json"}))
        with FaultProxy(("127.0.0.1", server.port), max_delay=0.35, stall=ATTEMPT * 2.5) as p:
            yield p


def fetcher() -> Fetcher:
    fs = FetchSettings(total_timeout=BUDGET, attempt_timeout=ATTEMPT, initial_delay=0.01, max_delay=0.05,
                       max_retry_after=0.05)
    return Fetcher(Settings(node_name="fault-campaign", fetch=fs))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(ROUNDS), ids=lambda s: f"seed{s}")
def test_fetch_through_faults_gives_the_config_or_a_clear_error(proxy, seed):
    rate = RATES[seed % len(RATES)]
    proxy.reseed(seed, rate)
    before = Counter(proxy.counts)
    url = proxy.url("/config/worker")
    start = time.monotonic()
    via_pointer = seed % 2 == 1
    try:
        if via_pointer:
            pointer = {"ignition": {"version": "3.4.0", "config": {"merge": [{"source": url}]}}}
            resolved = resolve_pointer(pointer, fetcher())
            got = resolved.ignition
            assert got.get("storage") == CONFIG["storage"], "wrong or partial config through resolve_pointer"
            assert got["ignition"]["version"] == "3.4.0"
        else:
            result = fetcher().fetch(url, ignition=True)
            assert result.status == 200
            assert result.body == BODY, f"wrong or partial body: {len(result.body)} of {len(BODY)} bytes"
        outcome = "config"
    except FetchError as exc:
        elapsed = time.monotonic() - start
        text = str(exc)
        assert elapsed <= BUDGET + LATE, f"gave up after {elapsed:.2f}s, budget {BUDGET}s"
        assert exc.exit_code == 69
        assert "127.0.0.1" in text and "gave up after" in text and "budget" in text, text
        assert "Traceback" not in text
        outcome = "error"
    _outcomes[outcome] += 1
    _injected.update(proxy.counts - before)
    # a round that saw only clean passes must have succeeded
    if set(proxy.counts - before) <= {"pass"}:
        assert outcome == "config"


@pytest.mark.slow
def test_campaign_covered_every_fault_and_both_outcomes():
    if sum(_outcomes.values()) < ROUNDS:
        pytest.skip("needs every round of the campaign to have run first")
    print(f"outcomes {dict(_outcomes)}; faults injected {dict(_injected)}")
    for fault in FAULTS:
        assert _injected[fault] > 0, f"fault {fault!r} never injected: {dict(_injected)}"
    assert _outcomes["config"] > 0 and _outcomes["error"] > 0, dict(_outcomes)


def test_proxy_faults_always_on_give_a_fetch_error_within_budget(proxy):
    # every request faulted: no config can arrive, so the budget must end it
    proxy.reseed(12345, 1.0, ("5xx", "reset", "truncate"))
    start = time.monotonic()
    with pytest.raises(FetchError) as info:
        fetcher().fetch(proxy.url("/config/worker"), ignition=True)
    assert time.monotonic() - start <= BUDGET + LATE
    assert info.value.final is False
    assert "gave up after" in str(info.value)


def test_proxy_passes_clean_traffic_byte_for_byte(proxy):
    proxy.reseed(1, 0.0)
    assert fetcher().fetch(proxy.url("/config/worker"), ignition=True).body == BODY
