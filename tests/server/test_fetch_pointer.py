"""Pointer resolution (ignition.config.merge / replace, CAs) against real local HTTP(S) servers."""

import base64
import gzip
import hashlib
import json
import urllib.parse

import pytest

from agent.core.settings import FetchSettings, Settings
from agent.errors import ConfigError, FetchError
from agent.resource.fetch import Fetcher
from agent.resource.pointer import ResolvedConfig, resolve_pointer, trust_config_cas
from tests.helpers.certs import make_tls
from tests.helpers.httpserver import Reply, ScriptedServer


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


def fetcher(total=5.0) -> Fetcher:
    fake = FakeTime()
    return Fetcher(Settings(node_name="n", fetch=FetchSettings(total_timeout=total)),
                   sleep=fake.sleep, clock=fake.clock, jitter=0)


def data_url(data: bytes) -> str:
    return "data:;base64," + base64.b64encode(data).decode()


def file_entry(path: str, text: str) -> dict:
    return {"path": path, "contents": {"source": "data:," + urllib.parse.quote(text)}}


def config(*files, version="3.4.0", **ignition) -> dict:
    cfg = {"ignition": {"version": version, **ignition}}
    if files:
        cfg["storage"] = {"files": list(files)}
    return cfg


def body(cfg: dict) -> bytes:
    return json.dumps(cfg).encode()


def files_of(cfg: dict) -> dict:
    return {f["path"]: urllib.parse.unquote(f["contents"]["source"][len("data:,"):])
            for f in cfg.get("storage", {}).get("files", [])}


@pytest.fixture
def server():
    with ScriptedServer() as srv:
        yield srv


def test_merge_two_children_in_order_child_wins_parent_kept(server):
    server.always("/a.ign", Reply(200, body(config(file_entry("/etc/a", "A"), file_entry("/etc/common", "from a")))))
    server.always("/b.ign", Reply(200, body(config(file_entry("/etc/b", "B"), file_entry("/etc/common", "from b")))))
    pointer = config(file_entry("/etc/pointer-only", "P"), file_entry("/etc/common", "pointer"),
                     config={"merge": [{"source": server.url("/a.ign")}, {"source": server.url("/b.ign")}]})
    resolved = resolve_pointer(pointer, fetcher())
    assert isinstance(resolved, ResolvedConfig)
    assert files_of(resolved.ignition) == {"/etc/pointer-only": "P", "/etc/common": "from b", "/etc/a": "A",
                                           "/etc/b": "B"}
    assert resolved.sources == [server.url("/a.ign"), server.url("/b.ign")]
    assert "config" not in resolved.ignition["ignition"]  # references consumed
    for path in ("/a.ign", "/b.ign"):
        assert "vnd.coreos.ignition+json" in server.requests_for(path)[0].header("Accept")


def test_replace_discards_the_pointer_and_follows_nested_references(server):
    server.always("/final.ign", Reply(200, body(config(file_entry("/etc/final", "F")))))
    server.always("/middle.ign", Reply(200, body(config(file_entry("/etc/middle", "M"),
                                                        config={"merge": [{"source": server.url("/final.ign")}]}))))
    pointer = config(file_entry("/etc/pointer-only", "P"), config={"replace": {"source": server.url("/middle.ign")}})
    resolved = resolve_pointer(pointer, fetcher())
    assert files_of(resolved.ignition) == {"/etc/middle": "M", "/etc/final": "F"}
    assert resolved.sources == [server.url("/middle.ign"), server.url("/final.ign")]


def test_pointer_ca_trusts_the_tls_server_and_etag_and_served_name(tmp_path):
    tls = make_tls(str(tmp_path / "tls"))
    annotations = json.dumps({"machineconfiguration.openshift.io/currentConfig": "rendered-worker-abc"})
    served = config({"path": "/etc/machine-config-daemon/node-annotations.json",
                     "contents": {"source": data_url(annotations.encode())}})
    with ScriptedServer(tls=tls) as srv:
        srv.always("/config/worker", Reply(200, body(served), {"ETag": '"r1"'}))
        pointer = config(config={"merge": [{"source": srv.url("/config/worker")}]},
                         security={"tls": {"certificateAuthorities": [{"source": data_url(tls.ca_pem())}]}})
        f = fetcher()
        resolved = resolve_pointer(pointer, f)
    assert resolved.etag == '"r1"'
    assert resolved.served_name == "rendered-worker-abc"
    assert f.ca_pems == (tls.ca_pem(),)  # trusted for later fetches (day 2) too
    # The pointer's CA entry stays in the result, as in Ignition's merged config.
    assert resolved.ignition["ignition"]["security"]["tls"]["certificateAuthorities"]


def test_without_the_pointer_ca_the_tls_server_is_not_trusted(tmp_path):
    tls = make_tls(str(tmp_path / "tls"))
    with ScriptedServer(tls=tls) as srv:
        srv.always("/config/worker", Reply(200, body(config())))
        pointer = config(config={"merge": [{"source": srv.url("/config/worker")}]})
        with pytest.raises(FetchError, match="TLS verification failed"):
            resolve_pointer(pointer, fetcher(total=1))


def test_ca_fetched_over_http_with_verification(server, tmp_path):
    tls = make_tls(str(tmp_path / "tls"))
    pem = tls.ca_pem()
    server.always("/ca.pem", Reply(200, pem))
    with ScriptedServer(tls=tls) as secure:
        secure.always("/config/worker", Reply(200, body(config(file_entry("/etc/x", "X")))))
        ca = {"source": server.url("/ca.pem"), "verification": {"hash": "sha512-" + hashlib.sha512(pem).hexdigest()}}
        pointer = config(config={"merge": [{"source": secure.url("/config/worker")}]},
                         security={"tls": {"certificateAuthorities": [ca]}})
        assert files_of(resolve_pointer(pointer, fetcher()).ignition) == {"/etc/x": "X"}


def test_gzip_child_hash_is_over_the_decompressed_config_and_headers_are_sent(server):
    # Ignition spec 3.1+: "If compression is specified, the hash describes the decompressed config".
    plain = body(config(file_entry("/etc/z", "Z")))
    server.always("/z.ign.gz", Reply(200, gzip.compress(plain)))
    ref = {"source": server.url("/z.ign.gz"), "compression": "gzip",
           "verification": {"hash": "sha256-" + hashlib.sha256(plain).hexdigest()},
           "httpHeaders": [{"name": "X-Node", "value": "n1"}]}
    resolved = resolve_pointer(config(config={"merge": [ref]}), fetcher())
    assert files_of(resolved.ignition) == {"/etc/z": "Z"}
    assert server.requests_for("/z.ign.gz")[0].header("X-Node") == "n1"


def test_gzip_child_with_hash_of_the_compressed_bytes_is_refused(server):
    raw = gzip.compress(body(config(file_entry("/etc/z", "Z"))))
    server.always("/z.ign.gz", Reply(200, raw))
    ref = {"source": server.url("/z.ign.gz"), "compression": "gzip",
           "verification": {"hash": "sha512-" + hashlib.sha512(raw).hexdigest()}}
    with pytest.raises(FetchError, match="does not match its verification.hash"):
        resolve_pointer(config(config={"merge": [ref]}), fetcher())


def test_trust_config_cas_alone(tmp_path):
    tls = make_tls(str(tmp_path / "tls"))
    pointer = config(security={"tls": {"certificateAuthorities": [{"source": data_url(tls.ca_pem())}]}})
    f = fetcher()
    assert trust_config_cas(pointer, f, source="pointer.ign") == 1 and f.ca_pems == (tls.ca_pem(),)
    bad = config(security={"tls": {"certificateAuthorities": [{"source": "data:,not%20a%20cert"}]}})
    with pytest.raises(ConfigError, match=r"pointer.ign \$.ignition.security.tls.certificateAuthorities.0"):
        trust_config_cas(bad, f, source="pointer.ign")


def test_invalid_fetched_config_names_its_url(server):
    server.always("/bad.ign", Reply(200, body(config(file_entry("relative/path", "x")))))
    with pytest.raises(ConfigError) as err:
        resolve_pointer(config(config={"merge": [{"source": server.url("/bad.ign")}]}), fetcher())
    text = str(err.value)
    assert server.url("/bad.ign") in text and "$.storage.files.0.path" in text


def test_unparseable_fetched_config_names_its_url(server):
    server.always("/junk.ign", Reply(200, b"<html>proxy login</html>"))
    with pytest.raises(ConfigError) as err:
        resolve_pointer(config(config={"replace": {"source": server.url("/junk.ign")}}), fetcher())
    assert server.url("/junk.ign") in str(err.value)


def test_reference_loop_is_refused(server):
    server.always("/loop.ign", Reply(200, body(config(config={"merge": [{"source": server.url("/loop.ign")}]}))))
    with pytest.raises(ConfigError, match="loop"):
        resolve_pointer(config(config={"merge": [{"source": server.url("/loop.ign")}]}), fetcher())
    assert len(server.requests_for("/loop.ign")) == 1


def test_depth_limit(server):
    for i in range(5):
        server.always(f"/d{i}.ign", Reply(200, body(config(config={"replace": {"source": server.url(f"/d{i + 1}.ign")}}))))
    server.always("/d5.ign", Reply(200, body(config())))
    with pytest.raises(ConfigError, match="deeper than 3"):
        resolve_pointer(config(config={"replace": {"source": server.url("/d0.ign")}}), fetcher(), max_depth=3)


def test_unknown_pool_is_final(server):
    server.always("/config/nope", Reply(404, '{"error": "unknown pool"}'))
    with pytest.raises(FetchError, match=f"pool nope is unknown to server {server.netloc}") as err:
        resolve_pointer(config(config={"merge": [{"source": server.url("/config/nope")}]}), fetcher())
    assert err.value.final and len(server.requests_for("/config/nope")) == 1  # asked once, not retried
