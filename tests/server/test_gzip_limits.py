"""gzip contents: linear in concatenated members, capped per resource and per config, and
bounded in memory: a gzip bomb is refused without holding its output (tracemalloc in-process,
getrusage in a child for the default caps)."""

import base64
import gzip
import os
import subprocess
import sys
import textwrap
import tracemalloc
import zlib

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.core.settings import FetchSettings, Settings
from agent.errors import ConfigError
from agent.ignition import dataurl
from agent.ignition.dataurl import decode_data_url, decompress
from agent.resource.contents import resolve_contents, resolve_resource
from agent.resource.fetch import Fetcher
from tests.helpers import paths
from tests.helpers.httpserver import Reply, ScriptedServer

CAP = 8 << 20  # the cap of a single file in these tests (the limit argument)
ROOT = paths.REPO


def data_url(raw: bytes) -> str:
    return "data:;base64," + base64.b64encode(raw).decode()


def test_many_concatenated_members_decompress_to_their_concatenation():
    # 40000 tiny members (the 768 KB case took minutes: each member copied the rest).
    member = gzip.compress(b"ab")
    assert decompress(member * 40000, "gzip") == b"ab" * 40000
    assert decompress(member + member + b"\0" * 64, "gzip") == b"abab"  # NUL padding after the end


@pytest.mark.parametrize("data,words", [
    (gzip.compress(b"x", mtime=0)[:-3], "truncated"),  # mtime=0: the same test ids in every xdist worker
    (gzip.compress(b"x", mtime=0) + b"junk", "invalid gzip"),
    (b"", "truncated"),
])
def test_bad_gzip(data, words):
    with pytest.raises(ConfigError, match=words):
        decompress(data, "gzip")


def test_limit_per_resource():
    bomb = gzip.compress(b"\0" * (4 << 20))
    with pytest.raises(ConfigError, match="expands beyond 1000 bytes"):
        decompress(bomb, "gzip", 1000)


def test_limit_per_config(monkeypatch):
    monkeypatch.setattr(dataurl, "MAX_CONFIG_DECOMPRESSED", 3000)
    two_k = data_url(gzip.compress(b"y" * 2000))
    files = [{"path": f"/etc/f{i}", "contents": {"source": two_k, "compression": "gzip"}} for i in range(2)]
    cfg = NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {"files": files}}, name="r")
    with pytest.raises(ConfigError, match=r"\$\.storage\.files\.1\.contents\.compression: .*beyond 1000 bytes"):
        resolve_contents(cfg)
    files[1]["contents"] = {"source": data_url(b"z" * 5000)}  # not compressed: the fetch limit bounds it
    assert len(resolve_contents(cfg)["$.storage.files.1.contents"]) == 5000


# --- memory: a bomb is refused without holding its output -------------------------------------------

def zeros_member(size: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    return b"".join([c.compress(block) for _ in range(size >> 20)] + [c.flush()])


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """~1 MB of gzip that expands to 1 GiB: 16 members of 64 MiB of zeros."""
    data = zeros_member(64 << 20) * 16
    assert len(data) < (1200 << 10)
    return data


def peak_of(fn) -> int:
    """Peak bytes allocated (tracemalloc) while ``fn`` runs; it must raise ConfigError."""
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=f"expands beyond {CAP} bytes"):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_bomb_in_a_data_url_is_refused_under_twice_the_cap(bomb):
    res = {"source": "data:;base64," + base64.b64encode(bomb).decode(), "compression": "gzip"}
    peak = peak_of(lambda: resolve_resource(res, "$.storage.files.0.contents", None, CAP))
    # the output held is at most dataurl._GZIP_KEEP (4 MiB) and a 64 KiB piece; the decoded URL is 1 MB
    assert peak < 2 * CAP, f"peak {peak / 2**20:.1f} MiB refusing a bomb with a {CAP >> 20} MiB cap"
    assert peak < CAP  # the output is never held up to the cap (it was: 12 MiB here)


def test_a_bomb_over_http_is_refused_under_twice_the_cap(bomb):
    with ScriptedServer() as srv:
        srv.always("/bomb.gz", Reply(200, bomb))
        fetcher = Fetcher(Settings(node_name="n1", fetch=FetchSettings(total_timeout=30)))
        res = {"source": srv.url("/bomb.gz"), "compression": "gzip"}
        peak = peak_of(lambda: resolve_resource(res, "$.storage.files.0.contents", fetcher, CAP))
    assert peak < 2 * CAP, f"peak {peak / 2**20:.1f} MiB refusing a bomb with a {CAP >> 20} MiB cap"
    assert peak < CAP


def test_a_bomb_is_refused_in_bounded_memory_at_the_default_caps():
    # The agent as it runs: resolve_contents with the default caps (1 GiB a file, 1 GiB a config),
    # in a child so that its peak RSS (getrusage) is the refusal's own. 3 MB of gzip, 3 GiB out:
    # it peaked at ~1.2 GiB when the output up to the cap was held.
    child = textwrap.dedent("""
        import base64, resource, sys, zlib
        from agent.core.nodeconfig import NodeConfig
        from agent.errors import ConfigError
        from agent.resource.contents import resolve_contents
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        member = b"".join([c.compress(bytes(1 << 20)) for _ in range(64)] + [c.flush()])
        url = "data:;base64," + base64.b64encode(member * 48).decode()
        del member
        files = [{"path": "/etc/bomb", "contents": {"source": url, "compression": "gzip"}}]
        cfg = NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {"files": files}}, name="r")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            resolve_contents(cfg)
            sys.exit("not refused")
        except ConfigError as exc:
            assert "expands beyond" in str(exc), exc
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(len(url), before, after)
    """)
    out = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    size, before, after = map(int, out.stdout.split())
    assert size > 3_000_000
    grew = (after - before) << 10  # ru_maxrss is in KiB on Linux
    assert grew < 2 * CAP, f"refusing grew the peak RSS by {grew / 2**20:.1f} MiB"


def test_output_beyond_what_is_kept_at_first_is_decompressed_again_whole(monkeypatch):
    monkeypatch.setattr(dataurl, "_GZIP_KEEP", 100_000)
    payload = os.urandom(50_000) * 6  # 300 KB, in two members
    data = gzip.compress(payload[:123_457]) + gzip.compress(payload[123_457:])
    assert decompress(data, "gzip") == payload
    assert decompress(data, "gzip", len(payload)) == payload
    with pytest.raises(ConfigError, match=f"expands beyond {len(payload) - 1} bytes"):
        decompress(data, "gzip", len(payload) - 1)


@pytest.mark.parametrize("payload", [
    "QQ==", "QQ", "QUJD", " Q Q = =", "QU JD ", "-_8=", "+/8=", "%51Q==", "QR==", "", "SGVsbG8gd29ybGQ",
])
def test_base64_data_urls_decode_as_the_exact_path(payload):
    # the fast path (binascii on the URL's bytes in place) gives what the exact path gives
    url = "data:;base64," + payload
    padded = "".join(payload.split()).replace("%51", "Q").replace("-", "+").replace("_", "/")
    assert decode_data_url(url) == base64.b64decode(padded + "=" * (-len(padded) % 4))
