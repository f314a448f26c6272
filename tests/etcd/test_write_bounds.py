"""Writes are bounded (issue 28): a report's size (413 past 64 KiB, chunked bodies read under the
same limit), a response's whole write time (a client that takes it too slowly is cut off), and
etcd's NOSPACE alarm shown by /healthz (a real etcd with a tiny quota). docs/security.md, "Limits".

The real server (gunicorn, gevent worker) on loopback; run on both venvs (gunicorn 21.2 of EPEL 9
and the newest), whose chunked parsers differ.
"""

import base64
import io
import json
import os
import re
import shutil
import socket
import time

import pytest
import requests

from agent.server.http.httpio import MAX_BODY, MAX_REPORT, HTTPError, json_body
from agent.server.http.timedsocket import WRITE_TOTAL_PER
from tests.helpers.etcd_cluster import EtcdCluster, have_etcd
from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

EXAMPLES = os.path.join(REPO, "examples", "state")
REPORT = "/api/v1/nodes/n1/report"




@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("bounds") / "state"
    shutil.copytree(EXAMPLES, d)
    for leftover in d.glob("nodes.db*"):
        leftover.unlink()
    with ServerProcess(str(d), workers=1, extra_args=["--body-timeout", "2"]) as srv:
        yield srv


def biggest_report() -> dict:
    """The largest report the report rules accept (agent/server/cluster/reports.py): every string
    field at its limit, no labels (plain ASCII, as paths and names are): 4096 characters, a config
    name 253 (a DNS-1123 subdomain)."""
    body = {"pool": "worker", "state": "Degraded", "skew": "warn"}
    for key in ("currentImage", "desiredImage", "bootImage", "reason"):
        body[key] = ("/etc/some/path/changed-by-hand " * 200)[:4096]
    for key in ("currentConfig", "desiredConfig", "firstPivotConfig"):  # a rendered config's name: 253 at most
        body[key] = ("rendered-worker-" + "0123456789abcdef" * 16)[:253]
    return body


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def _answer(s: socket.socket) -> bytes:
    """One whole response (head and body by Content-Length), then whatever follows."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


def _chunked(body: bytes, size: int = 4096) -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size))
    return out + b"0\r\n\r\n"


# -- request bodies -----------------------------------------------------------------------------

def _environ(path: str, body: bytes, length=None):
    env = {"PATH_INFO": path, "CONTENT_TYPE": "application/json", "wsgi.input": io.BytesIO(body)}
    if length is not None:
        env["CONTENT_LENGTH"] = str(length)
    return env


def test_the_biggest_legitimate_report_fits_the_report_limit():
    size = len(json.dumps(biggest_report()))
    assert size < MAX_REPORT // 2, size  # about 17 KiB: 64 KiB leaves room (escapes, labels)


def test_body_limits_per_route_without_a_server():
    big = json.dumps({"pool": "worker", "state": "Done", "reason": "x" * MAX_REPORT}).encode()
    for length in (len(big), None):  # Content-Length, or none (chunked: read up to the limit + 1)
        with pytest.raises(HTTPError) as err:
            json_body(_environ(REPORT, big, length))
        assert err.value.code == 413 and f"at most {MAX_REPORT} bytes" in err.value.message
    # Other bodies keep their own limit (1 MiB): the same body is read there.
    assert json_body(_environ("/api/v1/nodes/n1/drain", big, len(big)))["state"] == "Done"
    assert json_body(_environ("/api/v1/nodes/n1/drain", big))["state"] == "Done"
    with pytest.raises(HTTPError) as err:
        json_body(_environ("/api/v1/nodes/n1/drain", b" " * (MAX_BODY + 1)))
    assert err.value.code == 413
    ok = json.dumps(biggest_report()).encode()
    assert json_body(_environ(REPORT, ok))["state"] == "Degraded"


def test_a_report_over_the_limit_gets_413_and_a_fitting_one_is_taken(server):
    s = requests.Session()
    r = s.post(server.url(REPORT), json=biggest_report(), timeout=30)
    assert r.status_code == 200, r.text
    too_big = dict(biggest_report(), labels={f"l{i}": "v" * 100 for i in range(700)})  # about 80 KiB
    r = s.post(server.url(REPORT), json=too_big, timeout=30)
    assert r.status_code == 413, r.text
    err = r.json()["error"]
    assert err["code"] == 413 and f"at most {MAX_REPORT} bytes (64 KiB)" in err["message"], err
    # A node's report of about 1 MiB (the one accepted before): refused before it is read.
    r = s.post(server.url(REPORT), data=b"{" + b" " * (1 << 20) + b"}", timeout=30,
               headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "a report may have at most 65536 bytes" in r.json()["error"]["message"]


def test_a_chunked_report_is_read(server):
    """Transfer-Encoding: chunked, no Content-Length: read whole (it was a 400 "a JSON body is
    required"); the connection is kept for the next request."""
    body = json.dumps(biggest_report()).encode()
    s = _connect(server.port)
    try:
        s.sendall(b"POST " + REPORT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(body))
        answer = _answer(s)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["accepted"] is True
        assert b"connection: keep-alive" in answer.lower()
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _answer(s).startswith(b"HTTP/1.1 200")
    finally:
        s.close()
    # requests sends a generator as a chunked body
    r = requests.post(server.url(REPORT), data=iter([body[:1000], body[1000:]]), timeout=30,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text


def test_a_chunked_report_over_the_limit_gets_413_and_the_connection_closes(server):
    body = b'{"pool": "worker", "state": "Done", "reason": "' + b"x" * (MAX_REPORT + 10) + b'"}'
    s = _connect(server.port)
    try:
        s.sendall(b"POST " + REPORT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(body))
        answer = _answer(s)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
        assert b"connection: close" in answer.lower()
        assert f"at most {MAX_REPORT} bytes".encode() in answer
    finally:
        s.close()


def test_a_chunked_body_that_stops_gets_408_within_the_body_deadline(server):
    s = _connect(server.port)
    try:
        started = time.monotonic()
        s.sendall(b"POST " + REPORT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + b"5\r\n{\"poo\r\n")
        answer = _answer(s)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
        assert time.monotonic() - started < 2 + 10  # --body-timeout 2, and slack for a loaded machine
        assert b"connection: close" in answer.lower()
    finally:
        s.close()


# -- responses ----------------------------------------------------------------------------------

def _trickle(port: int, path: bytes, rate: float, bound: float):
    """Ask for ``path`` and read it at ``rate`` bytes/s: fast enough for the per-256 KiB
    deadline, too slow for the whole response. Returns (bytes received, seconds until the
    server closed, whether it closed)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)  # before connect: a small window
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    got = 0
    started = time.monotonic()
    try:
        s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        while time.monotonic() - started < bound:
            ahead = got / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
            try:
                chunk = s.recv(32 * 1024)
            except (ConnectionResetError, socket.timeout):
                return got, time.monotonic() - started, True
            if not chunk:
                return got, time.monotonic() - started, True
            got += len(chunk)
        return got, time.monotonic() - started, False
    finally:
        s.close()


def make_big_state(directory: str, files: int, size: int) -> None:
    """A worker pool whose config carries ``files`` files of ``size`` bytes each (one
    MachineConfig per file: the state loader takes at most 8 MiB a file)."""
    os.makedirs(os.path.join(directory, "machineconfigpools"))
    os.makedirs(os.path.join(directory, "machineconfigs"))
    with open(os.path.join(directory, "machineconfigpools", "worker.yaml"), "w") as f:
        f.write("metadata: {name: worker}\nspec:\n  machineConfigSelector: {matchLabels: "
                "{machineconfiguration.openshift.io/role: worker}}\n"
                "  nodeSelector: {matchLabels: {node-role.kubernetes.io/worker: ''}}\n")
    for i in range(files):
        blob = base64.b64encode(os.urandom(size * 3 // 4)).decode()
        mc = {"metadata": {"name": f"0{i}-worker", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
              "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                  {"path": f"/etc/big{i}.bin", "mode": 420, "contents": {"source": "data:;base64," + blob}}]}}}}
        with open(os.path.join(directory, "machineconfigs", f"0{i}-worker.yaml"), "w") as f:
            json.dump(mc, f)  # JSON is YAML


def test_a_slow_reader_is_cut_off_at_the_total_write_deadline(tmp_path):
    """A config of about 17 MB read at 2 MiB/s: every 256 KiB is taken within the 1 s per-chunk
    deadline, so before this change the response was held until the client had it all (a
    client reading 256 KiB a minute held a 22 MB answer 88 minutes). With --write-timeout 1 the
    whole response has 1 s per 4 MiB (about 4 s here): the server closes it then (the kernel's
    socket buffers, up to 4 MiB on loopback, count as taken). Both ways a body goes out:
    copied (a worker's first send of it) and by sendfile (later ones)."""
    state = str(tmp_path / "state")
    make_big_state(state, 1, 7 << 20)
    with ServerProcess(state, workers=1, extra_args=["--write-timeout", "1"]) as srv:
        size = int(requests.head(srv.url("/config/worker"), timeout=60).headers["Content-Length"])
        total = max(1.0, size / WRITE_TOTAL_PER)  # x --write-timeout 1
        assert total > 3, size
        for attempt in ("copied", "sendfile"):
            got, took, closed = _trickle(srv.port, b"/config/worker", 2 << 20, bound=60)
            assert closed and got < size, (attempt, got, took)
        # A client that takes it at once still gets it whole.
        r = requests.get(srv.url("/config/worker"), timeout=60)
        assert r.status_code == 200 and len(r.content) == size
        log = srv.log_text()
    cuts = re.findall(r"response of \d+ bytes not taken within its total deadline .*; ([0-9.]+) s so far", log)
    assert len(cuts) == 2 and "per 256 KiB" not in log, log[-3000:]
    # Cut when the deadline passed (the client still drains what the kernel's buffers held).
    assert all(total <= float(t) < total + 3 for t in cuts), (cuts, total)
    assert "Traceback" not in log


def test_a_client_that_never_reads_is_cut_off(tmp_path):
    state = str(tmp_path / "state")
    make_big_state(state, 1, 7 << 20)
    with ServerProcess(state, workers=1, extra_args=["--write-timeout", "1"]) as srv:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.connect(("127.0.0.1", srv.port))
        try:
            s.sendall(b"GET /config/worker HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(6)  # read nothing: past the per-chunk (1 s) and total (1.75 s) deadlines
            s.settimeout(10)
            got, closed = 0, False
            try:
                while True:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        closed = True
                        break
                    got += len(chunk)
            except (ConnectionResetError, socket.timeout) as exc:
                closed = isinstance(exc, ConnectionResetError)
            assert closed and got < 7 << 20, got
        finally:
            s.close()
        assert "response not taken within" in srv.log_text()


# -- paging -------------------------------------------------------------------------------------

def test_the_node_list_is_paged_by_default(state):
    """GET /api/v1/nodes without ?limit answers 500 nodes and a continue token; ?limit is
    honoured up to 5000 (a 400 beyond), and the pages cover every node once."""
    with ServerProcess(state, workers=1) as srv:
        s = requests.Session()
        names = [f"n{i:04d}" for i in range(503)]
        for name in names:
            r = s.post(srv.url(f"/api/v1/nodes/{name}/report"), json={"pool": "worker", "state": "Done"}, timeout=30)
            assert r.status_code == 200, r.text
        first = s.get(srv.url("/api/v1/nodes"), timeout=30).json()
        assert len(first["items"]) == 500 and first["metadata"]["continue"] == names[499]
        rest = s.get(srv.url(f"/api/v1/nodes?continue={first['metadata']['continue']}"), timeout=30).json()
        assert [i["name"] for i in first["items"] + rest["items"]] == names and not rest["metadata"]
        assert len(s.get(srv.url("/api/v1/nodes?limit=5000"), timeout=30).json()["items"]) == 503
        r = s.get(srv.url("/api/v1/nodes?limit=5001"), timeout=30)
        assert r.status_code == 400 and r.json()["error"]["field"] == "limit"


# -- etcd: NOSPACE in /healthz --------------------------------------------------------------------

@pytest.mark.skipif(not have_etcd(), reason="etcd-server is not installed (make test installs it)")
def test_nospace_makes_healthz_unhealthy_and_names_the_alarm(state, tmp_path):
    """A one-member etcd with a 4 MiB quota, filled for real by large writes under another
    prefix: etcd raises NOSPACE, reports get 503, and /healthz answers 503 naming NOSPACE
    (it said healthy true before); disarmed (after a compaction and a defragmentation),
    /healthz is 200 again."""
    from agent.server.store.etcd.client import EtcdClient, EtcdNoSpace, parse_store_url

    with EtcdCluster(str(tmp_path / "etcd"), size=1, quota_bytes=4 << 20) as etcd:
        with ServerProcess(state, workers=1, extra_args=["--store", etcd.url + "/bounds"]) as srv:
            s = requests.Session()
            assert s.post(srv.url(REPORT), json={"pool": "worker", "state": "Done"}, timeout=30).status_code == 200
            health = s.get(srv.url("/healthz"), timeout=30)
            assert health.status_code == 200 and health.json()["store"]["healthy"] is True
            client = EtcdClient(parse_store_url(etcd.url).endpoints, timeout=5)
            with pytest.raises(EtcdNoSpace):
                for i in range(200):
                    client.put(f"/filler/{i}", os.urandom(256 << 10))
            filled = time.monotonic()
            # No write through the server yet: its alarm poll (every 5 s) finds it. A tuple: a
            # 503 Response is falsy and wait_for would never return it.
            health, = wait_for(lambda: (lambda h: (h,) if h.status_code == 503 else None)(
                s.get(srv.url("/healthz"), timeout=30)), "/healthz answers 503 once etcd raised NOSPACE", 30)
            seen = time.monotonic() - filled
            body = health.json()
            assert health.status_code == 503, body
            assert body["status"] == "unhealthy" and "NOSPACE" in body["reason"]
            assert body["store"]["healthy"] is False and body["store"]["alarms"][0]["alarm"] == "NOSPACE"
            assert seen < 5 + 5, seen  # ALARM_POLL, and slack for a loaded machine
            print(f"NOSPACE shown by /healthz {seen:.2f} s after etcd raised it")
            r = s.post(srv.url(REPORT), json={"pool": "worker", "state": "Working"}, timeout=30)
            assert r.status_code == 503 and "NOSPACE" in r.json()["error"]["message"], r.text
            # What an operator does (docs/security.md, "Limits"): compact, defragment, disarm.
            client.delete("/filler/", prefix=True)
            _, rev = client.range("/x")
            client.compact(rev)
            client.call("/v3/maintenance/defragment", {})
            for alarm in client.call("/v3/maintenance/alarm", {"action": "GET"})["alarms"]:  # etcdctl alarm disarm
                client.call("/v3/maintenance/alarm", dict(alarm, action="DEACTIVATE"))
            assert client.alarms() == []
            wait_for(lambda: s.get(srv.url("/healthz"), timeout=30).status_code == 200,
                     "/healthz healthy again once the alarm is disarmed", 30)
            assert s.post(srv.url(REPORT), json={"pool": "worker", "state": "Done"}, timeout=30).status_code == 200
            client.close()
