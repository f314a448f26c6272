"""What node-config-server's API client takes from its environment, read once when it is made
(agent/server/store/kube/client.py): the HTTPS proxy and NO_PROXY, the CA bundle when the
kubeconfig names none, and never a .netrc credential in place of its bearer token. Against a real
TLS server and a real forward proxy on the loopback."""

import json

import pytest

from agent.server.store.kube.client import Credentials, KubeClient, KubeUnavailable
from tests.helpers.certs import make_tls
from tests.helpers.httpserver import Reply, ScriptedServer
from tests.helpers.proxyserver import ForwardProxy

NODES = "/api/v1/nodes"
LIST = Reply(200, json.dumps({"kind": "NodeList", "items": [], "metadata": {"resourceVersion": "5"}}),
             {"Content-Type": "application/json"})
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
              "NO_PROXY", "no_proxy", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no .netrc but the test's own


def api_server(tmp_path, host="127.0.0.1"):
    tls = make_tls(str(tmp_path / "tls"), hosts=(host,))
    server = ScriptedServer(tls=tls).start()
    server.always(NODES, LIST)
    return server, tls


def test_the_client_reaches_the_api_server_through_the_https_proxy_of_its_environment(tmp_path, monkeypatch):
    server, tls = api_server(tmp_path, host="api.test")
    with ForwardProxy(hosts={"api.test": "127.0.0.1"}) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        client = KubeClient(Credentials(server=f"https://api.test:{server.port}", ca_file=tls.ca_cert, token="t"))
        try:
            assert client.get(NODES)["kind"] == "NodeList"
            assert client.get(NODES)["kind"] == "NodeList"  # the same proxy at every request
        finally:
            client.close()
            server.stop()
    assert proxy.seen and all(seen == ("CONNECT", f"api.test:{server.port}") for seen in proxy.seen)


def test_no_proxy_naming_the_api_server_sends_its_requests_direct(tmp_path, monkeypatch):
    server, tls = api_server(tmp_path)
    with ForwardProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
        client = KubeClient(Credentials(server=server.url("").rstrip("/"), ca_file=tls.ca_cert, token="t"))
        try:
            assert client.get(NODES)["kind"] == "NodeList"
        finally:
            client.close()
            server.stop()
    assert proxy.seen == [] and len(server.requests_for(NODES)) == 1


def test_a_proxy_set_after_the_client_was_made_is_not_used(tmp_path, monkeypatch):
    server, tls = api_server(tmp_path)
    client = KubeClient(Credentials(server=server.url("").rstrip("/"), ca_file=tls.ca_cert, token="t"))
    with ForwardProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        try:
            assert client.get(NODES)["kind"] == "NodeList"
        finally:
            client.close()
            server.stop()
    assert proxy.seen == []


def test_with_no_ca_in_the_kubeconfig_the_environments_ca_bundle_verifies_the_api_server(tmp_path, monkeypatch):
    server, tls = api_server(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", tls.ca_cert)
    client = KubeClient(Credentials(server=server.url("").rstrip("/"), token="t"))
    try:
        assert client.get(NODES)["kind"] == "NodeList"
    finally:
        client.close()
        server.stop()


def test_with_no_ca_anywhere_the_api_servers_certificate_is_refused(tmp_path):
    server, _ = api_server(tmp_path)
    client = KubeClient(Credentials(server=server.url("").rstrip("/"), token="t"))
    try:
        with pytest.raises(KubeUnavailable):
            client.get(NODES)
    finally:
        client.close()
        server.stop()
    assert server.requests_for(NODES) == []


def test_a_netrc_entry_for_the_api_server_does_not_replace_the_bearer_token(tmp_path):
    (tmp_path / ".netrc").write_text("machine 127.0.0.1 login someone password secret\n")
    (tmp_path / ".netrc").chmod(0o600)
    server, tls = api_server(tmp_path)
    client = KubeClient(Credentials(server=server.url("").rstrip("/"), ca_file=tls.ca_cert, token="the-token"))
    try:
        client.get(NODES)
    finally:
        client.close()
        server.stop()
    [request] = server.requests_for(NODES)
    assert request.header("Authorization") == "Bearer the-token"
