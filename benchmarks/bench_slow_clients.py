"""Slow clients: a normal client's latency while 500 slow sockets are held open (issue 16).

    .venv/bin/python benchmarks/bench_slow_clients.py [--quick] [--json]

The real node-config-server over TLS (4 workers, the defaults otherwise) on loopback. A round
is a batch of normal requests (each a new connection and TLS handshake, then
``GET /config/worker``, as a node's first fetch) with no slow sockets, then the same batch while
500 slow sockets are held: a third stalled inside the TLS handshake (one byte of a ClientHello),
a third past the handshake with one byte of a request head, a third plain-TCP connections that
sent nothing. Rounds interleave the two cases; the figure is the p99 over every request of a
case (target: under 1 s), its ratio to the case without slow sockets, and failures (a request
gets at most 10 s). ``--gthread`` adds the same rounds against ``--worker-class gthread`` (the
earlier default) for comparison; its requests fail rather than wait there.
"""

import argparse
import os
import shutil
import socket
import ssl
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.helpers.server_proc import ServerProcess  # noqa: E402

SLOW = 500
REQUEST_TIMEOUT = 10.0


def _client_ctx() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _slow_socket(port: int, kind: int, ctx: ssl.SSLContext) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    if kind == 0:
        s.sendall(b"\x16")  # one byte of a TLS record: the handshake stalls
    elif kind == 1:
        s.settimeout(5)
        try:
            s = ctx.wrap_socket(s)
            s.sendall(b"G")  # handshake done, one byte of a request head
        except OSError:
            pass  # a server whose threads are all held never answers: still a held socket
    return s  # kind 2: connected, nothing sent


def hold_slow_sockets(port: int, count: int) -> List[socket.socket]:
    ctx = _client_ctx()
    with ThreadPoolExecutor(64) as pool:  # handshakes a stalled server never answers wait in parallel
        return list(pool.map(lambda i: _slow_socket(port, i % 3, ctx), range(count)))


def one_request(port: int, ctx: ssl.SSLContext) -> float:
    """A new TLS connection, GET /config/worker, the whole body read; seconds (inf on failure)."""
    t0 = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT) as raw:
            raw.settimeout(REQUEST_TIMEOUT)
            with ctx.wrap_socket(raw) as s:
                s.sendall(b"GET /config/worker HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                if not data.startswith(b"HTTP/1.1 200"):
                    return float("inf")
    except OSError:
        return float("inf")
    return time.perf_counter() - t0


def p99(xs: List[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def run_case(srv: ServerProcess, requests: int, slow: int) -> List[float]:
    held = hold_slow_sockets(srv.port, slow) if slow else []
    try:
        ctx = _client_ctx()
        return [one_request(srv.port, ctx) for _ in range(requests)]
    finally:
        for s in held:
            s.close()


def measure(rounds: int, requests: int, worker_classes: List[str]) -> Dict[str, Any]:
    from tests.helpers.certs import make_tls

    tmp = tempfile.mkdtemp(prefix="bench-slow-")
    servers = {}
    try:
        state = os.path.join(tmp, "state")
        shutil.copytree(os.path.join(REPO, "examples", "state"), state)
        tls = make_tls(os.path.join(tmp, "tls"))
        for wc in worker_classes:
            servers[wc] = ServerProcess(state, tls=tls, workers=4, threads=32,
                                        extra_args=["--worker-class", wc]).start()
        samples: Dict[str, List[float]] = {}
        for _ in range(rounds):
            for wc, srv in servers.items():
                for slow in (0, SLOW):
                    samples.setdefault(f"{wc}, {slow} slow sockets", []).extend(run_case(srv, requests, slow))
    finally:
        for srv in servers.values():
            srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    cases = {}
    for name, xs in samples.items():
        ok = [x for x in xs if x != float("inf")]
        cases[name] = {"requests": len(xs), "failed": len(xs) - len(ok),
                       "p50_s": statistics.median(ok) if ok else None, "p99_s": p99(xs) if ok else None,
                       "max_s": max(xs)}
    return {"benchmark": "slow_clients", "slow_sockets": SLOW, "rounds": rounds, "requests_per_round": requests,
            "load_average": os.getloadavg(), "cases": cases}


def rows_from(doc: Dict[str, Any]) -> list:
    from benchmarks.common import Row

    rows = []
    for name, c in doc["cases"].items():
        wc = name.split(",")[0]
        floor = f"{wc}, 0 slow sockets"
        p99_s = c["p99_s"] if c["p99_s"] is not None and c["p99_s"] != float("inf") else None
        note = (f"p99 latency of {c['requests']} requests (new TLS connection + GET /config/worker each), "
                f"{c['failed']} failed (> {REQUEST_TIMEOUT:g} s)")
        if c["p50_s"] is not None:
            note += f", p50 {c['p50_s'] * 1e3:.1f} ms"
        if name.endswith(f"{doc['slow_sockets']} slow sockets"):
            note += "; target p99 < 1 s: " + ("met" if p99_s is not None and p99_s < 1 and not c["failed"] else "NOT met")
        rows.append(Row("slow clients (500 held)", name, p99_s, floor=floor, is_floor=name == floor, note=note))
    la = doc["load_average"]
    rows[0].note += f"; {doc['rounds']} interleaved rounds; load average {la[0]:.1f} {la[1]:.1f} {la[2]:.1f}"
    return rows


def run(quick: bool = False) -> list:
    doc = measure(1 if quick else 3, 20 if quick else 50, ["gevent"])
    from benchmarks.common import save_json

    save_json("slow_clients.json", doc)
    return rows_from(doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one round of 20 requests per case")
    ap.add_argument("--gthread", action="store_true", help="also measure --worker-class gthread (slow: requests "
                                                            "time out there)")
    ap.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    args = ap.parse_args()
    doc = measure(1 if args.quick else 3, 20 if args.quick else 50, ["gevent"] + (["gthread"] if args.gthread else []))
    from benchmarks.common import print_result

    return print_result(doc, rows_from(doc), args.json)


if __name__ == "__main__":
    sys.exit(main())
