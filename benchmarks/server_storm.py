"""Config storm: many nodes fetch a large rendered config at once, node-config-server vs nginx.

    .venv/bin/python benchmarks/server_storm.py [--quick] [--json] [--seconds S] [--rounds R]

wrk (a C load generator, Debian package ``wrk``) drives both, so the client never caps the
floor: 200 keep-alive connections fetch ``/config/worker`` (a ~1 MB rendered config) for a
few seconds per run. The cases run interleaved, round after round, on the same machine:
nginx serving the same bytes as a static file (the floor; ``sendfile on; tcp_nopush on``, as
Debian's and RHEL's nginx.conf), and node-config-server (gunicorn)
with an empty node database and with 10,000 nodes in it, over plain HTTP and TLS; plus the
10,000-node server while 10 reports a second arrive. Per case: requests/s, p99 latency (wrk's
latency distribution) and server CPU per request (user + system time of the server's process
group over the run, divided by the requests it answered). Ratios are taken per round (server
against the nginx run of the same round and protocol) and reported as median (min-max).

Honest limits: client and servers share the machine's CPUs; wrk's own CPU is not counted in
CPU per request but does compete for the cores.
"""


import argparse
import base64
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.helpers.server_proc import ServerProcess, free_port  # noqa: E402

NGINX = "/usr/sbin/nginx"
WRK = shutil.which("wrk") or "/usr/bin/wrk"
ACCEPT = "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"


def make_state(directory: str, size: int) -> None:
    os.makedirs(os.path.join(directory, "machineconfigpools"))
    os.makedirs(os.path.join(directory, "machineconfigs"))
    with open(os.path.join(directory, "machineconfigpools", "worker.yaml"), "w") as f:
        f.write("metadata: {name: worker}\nspec:\n  machineConfigSelector: {matchLabels: "
                "{machineconfiguration.openshift.io/role: worker}}\n"
                "  nodeSelector: {matchLabels: {node-role.kubernetes.io/worker: ''}}\n")
    blob = base64.b64encode(os.urandom(size * 3 // 4)).decode()
    mc = {"metadata": {"name": "00-worker", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
          "spec": {"osImageURL": "quay.io/openshift-release-dev/rhel-coreos-9:9.6",
                   "config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                       {"path": "/etc/big.bin", "mode": 420, "contents": {"source": "data:;base64," + blob}}]}}}}
    with open(os.path.join(directory, "machineconfigs", "00-worker.yaml"), "w") as f:
        json.dump(mc, f)  # JSON is YAML


def start_nginx(root: str, port: int, workers: int, tls: Any = None) -> subprocess.Popen:
    conf = os.path.join(root, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""
worker_processes {workers};
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  client_body_temp_path {root}/tmp; proxy_temp_path {root}/tmp; fastcgi_temp_path {root}/tmp;
  uwsgi_temp_path {root}/tmp; scgi_temp_path {root}/tmp;
  server {{
    listen 127.0.0.1:{port}{" ssl" if tls else ""};
    {f"ssl_certificate {tls.cert}; ssl_certificate_key {tls.key};" if tls else ""}
    location = /config/worker {{
      default_type "application/vnd.coreos.ignition+json;version=3.4.0";
      alias {root}/worker.json;
      etag on;
    }}
  }}
}}
""")
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    proc = subprocess.Popen([NGINX, "-c", conf, "-p", root], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    if _answers(port, bool(tls), within=10):
        return proc
    os.killpg(proc.pid, signal.SIGKILL)  # the master and its workers: our own session only
    proc.wait()
    log = open(os.path.join(root, "error.log")).read() if os.path.exists(os.path.join(root, "error.log")) else ""
    raise RuntimeError("nginx did not start: " + proc.stderr.read().decode(errors="replace") + log)



def _answers(port: int, tls: bool, within: float) -> bool:
    """Whether ``GET /config/worker`` on the port answers 200 within ``within`` seconds (a server
    just started)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            c = (http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=ssl._create_unverified_context())
                 if tls else http.client.HTTPConnection("127.0.0.1", port, timeout=2))
            c.request("GET", "/config/worker")
            if c.getresponse().status == 200:
                return True
        except OSError:
            time.sleep(0.05)
    return False


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU of every live process in the process group (gunicorn master and
    workers, nginx master and workers), children that exited included."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: pgrp
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s|m)$", text)
    if not m:
        raise ValueError(f"not a wrk duration: {text}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def wrk(url: str, seconds: float, connections: int, threads: int = 2) -> Dict[str, float]:
    out = subprocess.run([WRK, f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "30s", "--latency",
                          "-H", f"Accept: {ACCEPT}", url], capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed ({out.returncode}): {(out.stderr or out.stdout).strip()[-300:]}")
    text = out.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    requests = int(re.search(r"(\d+) requests in", text).group(1))
    p99 = _seconds(re.search(r"^\s+99%\s+(\S+)", text, re.M).group(1))
    p50 = _seconds(re.search(r"^\s+50%\s+(\S+)", text, re.M).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errors = (int(bad.group(1)) if bad else 0) + (sum(int(x) for x in sock.groups()) if sock else 0)
    return {"rps": rps, "requests": requests, "p50_s": p50, "p99_s": p99, "errors": errors}


class Reporter(threading.Thread):
    """Posts ``rate`` node reports a second to the server while a storm runs."""

    def __init__(self, port: int, nodes: int, rate: float):
        super().__init__(daemon=True)
        self.port, self.nodes, self.rate = port, nodes, rate
        self.stop = threading.Event()
        self.sent = 0
        self.latencies: List[float] = []

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        next_at = time.monotonic()
        i = 0
        while not self.stop.is_set():
            i += 1
            body = json.dumps({"pool": "worker", "state": "Done" if i % 2 else "Working",
                               "labels": {"node-role.kubernetes.io/worker": ""}})
            t0 = time.perf_counter()
            conn.request("POST", f"/api/v1/nodes/node-{(i * 7919) % self.nodes:06d}/report", body,
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"report: HTTP {resp.status}")
            self.latencies.append(time.perf_counter() - t0)
            self.sent += 1
            next_at += 1.0 / self.rate
            self.stop.wait(max(0.0, next_at - time.monotonic()))
        conn.close()


def populate(state: str, nodes: int) -> None:
    """``nodes`` nodes in the state's database (bulk insert + the server's own rebuild)."""
    from agent.server.http.app import App
    from benchmarks.bench_scale import fill

    app = App(state)
    fill(app, nodes)
    app.close()


def measure(case: Dict[str, Any], seconds: float, connections: int) -> Dict[str, float]:
    reporter = None
    if case.get("reports"):
        reporter = Reporter(case["port"], case["nodes"], case["reports"])
        reporter.start()
    cpu0 = group_cpu_seconds(case["pgid"])
    try:
        r = wrk(case["url"], seconds, connections)
    finally:
        if reporter is not None:
            reporter.stop.set()
            reporter.join(30)
    r["cpu_per_request_s"] = (group_cpu_seconds(case["pgid"]) - cpu0) / max(1, r["requests"])
    if reporter is not None:
        r["reports_sent"] = reporter.sent
        r["report_p50_s"] = statistics.median(reporter.latencies) if reporter.latencies else 0.0
    return r


def summary(xs: List[float]) -> Dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def run_storm(seconds: float, rounds: int, connections: int, size: int, nodes: int, workers: Optional[int],
              threads: Optional[int], worker_class: str = "gevent") -> Dict[str, Any]:
    for tool in (NGINX, WRK):
        if not os.path.exists(tool):
            raise RuntimeError(f"{tool} not found: install nginx-light and wrk (make bench does)")
    sys.path.insert(0, REPO)
    from agent.server.http.gunicorn_app import default_threads, default_workers

    workers = workers or default_workers()
    threads = threads or default_threads()
    tmp, tls = _scratch("server-storm-")
    servers: List[ServerProcess] = []
    nginxes: List[subprocess.Popen] = []
    try:
        cases: Dict[str, Dict[str, Any]] = {}
        body = b""
        for db in ("empty", f"{nodes // 1000}k nodes"):
            state = os.path.join(tmp, f"state-{db.split()[0]}")
            make_state(state, size)
            if db != "empty":
                populate(state, nodes)
            for proto in ("plain", "TLS"):
                srv = ServerProcess(state, tls=tls if proto == "TLS" else None, workers=workers, threads=threads,
                                    extra_args=["--worker-class", worker_class])
                servers.append(srv.start())
                url = srv.url("/config/worker")
                cases[f"server {proto} {db}"] = {"url": url, "pgid": srv.proc.pid, "proto": proto, "port": srv.port,
                                                 "nodes": nodes if db != "empty" else 0}
                if db != "empty" and proto == "plain":
                    cases[f"server {proto} {db} + 10 reports/s"] = dict(cases[f"server {proto} {db}"], reports=10)
                if not body:
                    body = _body(srv.port)
        if worker_class == "gevent":
            proc, url = _trivial_app(tmp, body, workers)
            nginxes.append(proc)
            cases["gunicorn + gevent worker, trivial app, plain"] = {"url": url, "pgid": proc.pid, "proto": "plain"}
        for proto in ("plain", "TLS"):
            proc, url = _nginx_serving(tmp, proto, body, workers, tls)
            nginxes.append(proc)
            cases[f"nginx {proto}"] = {"url": url, "pgid": proc.pid, "proto": proto, "floor": True}
        measured = _interleaved(cases, seconds, rounds, connections)
        runs, load_before = measured["runs"], measured["load_before"]
    finally:
        _stop(servers, nginxes, tmp)
    return report(cases, runs, dict(body_bytes=len(body), seconds=seconds, rounds=rounds, connections=connections,
                                    workers=workers, threads=threads, worker_class=worker_class, cpus=os.cpu_count(),
                                    nodes=nodes, load_average_before=load_before, load_average_after=os.getloadavg()))


def run_worker_sweep(seconds: float, rounds: int, connections: int, size: int, counts: List[int],
                     nginx_workers: Optional[int]) -> Dict[str, Any]:
    """Server worker counts only: the server (empty database, plain and TLS) with each count in
    ``counts``, nginx always with the same count (the server's default unless given), all
    interleaved round after round. What the row is about is the server's worker count; nginx
    and the load do not change between its cases."""
    from agent.server.http.gunicorn_app import default_workers

    nginx_workers = nginx_workers or default_workers()
    tmp, tls = _scratch("server-storm-workers-")
    servers: List[ServerProcess] = []
    nginxes: List[subprocess.Popen] = []
    try:
        state = os.path.join(tmp, "state")
        make_state(state, size)
        cases: Dict[str, Dict[str, Any]] = {}
        for proto in ("plain", "TLS"):
            for count in counts:
                srv = ServerProcess(state, tls=tls if proto == "TLS" else None, workers=count, threads=1,
                                    extra_args=["--worker-class", "gevent"])
                servers.append(srv.start())
                cases[f"server {proto} {count} workers"] = {"url": srv.url("/config/worker"), "pgid": srv.proc.pid,
                                                            "proto": proto}
        body = _body(servers[0].port)
        for proto in ("plain", "TLS"):
            proc, url = _nginx_serving(tmp, proto, body, nginx_workers, tls)
            nginxes.append(proc)
            cases[f"nginx {proto}"] = {"url": url, "pgid": proc.pid, "proto": proto, "floor": True}
        runs = _interleaved(cases, seconds, rounds, connections)
        load_after = os.getloadavg()
    finally:
        _stop(servers, nginxes, tmp)
    return report(cases, runs["runs"], dict(body_bytes=len(body), seconds=seconds, rounds=rounds,
                                            connections=connections, workers=nginx_workers, nginx_workers=nginx_workers,
                                            server_worker_counts=counts, worker_class="gevent", cpus=os.cpu_count(),
                                            nodes=0, load_average_before=runs["load_before"],
                                            load_average_after=load_after))


def _scratch(prefix: str) -> Any:
    """A scratch directory and a TLS certificate in it, readable by nginx's workers (which drop
    to an unprivileged user when nginx is started as root)."""
    from tests.helpers.certs import make_tls

    tmp = tempfile.mkdtemp(prefix=prefix)
    os.chmod(tmp, 0o755)
    tls = make_tls(os.path.join(tmp, "tls"))
    for path in (tls.cert, tls.key):
        os.chmod(path, 0o644)
    return tmp, tls


def _body(port: int) -> bytes:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/config/worker", headers={"Accept": ACCEPT})
    body = c.getresponse().read()
    c.close()
    return body


def _nginx_serving(tmp: str, proto: str, body: bytes, workers: int, tls: Any) -> Any:
    root = os.path.join(tmp, "nginx", proto)
    os.makedirs(root)
    with open(os.path.join(root, "worker.json"), "wb") as f:
        f.write(body)
    port = free_port()
    proc = start_nginx(root, port, workers, tls if proto == "TLS" else None)
    return proc, f"{'https' if proto == 'TLS' else 'http'}://127.0.0.1:{port}/config/worker"


def _trivial_app(tmp: str, body: bytes, workers: int) -> Any:
    """gunicorn with node-config-server's gevent worker serving benchmarks/trivial_wsgi.py: the
    HTTP stack's own cost per request, without the server's work."""
    path = os.path.join(tmp, "trivial-body")
    with open(path, "wb") as f:
        f.write(body)
    port = free_port()
    env = dict(os.environ, TRIVIAL_WSGI_BODY=path, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", str(workers), "-k",
                             "agent.server.http.gevent_worker.Worker", "-b", f"127.0.0.1:{port}", "--keep-alive", "30",
                             "benchmarks.trivial_wsgi:app"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    if _answers(port, False, within=30):
        return proc, f"http://127.0.0.1:{port}/config/worker"
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("gunicorn with the trivial app did not start")


def _interleaved(cases: Dict[str, Dict[str, Any]], seconds: float, rounds: int, connections: int) -> Dict[str, Any]:
    runs: Dict[str, List[Dict[str, float]]] = {name: [] for name in cases}
    for case in cases.values():  # warm-up: caches, TLS session set-up, page cache
        wrk(case["url"], 1, connections)
    load_before = os.getloadavg()
    for rnd in range(rounds):
        print(f"  storm round {rnd + 1}/{rounds}", file=sys.stderr, flush=True)
        for name, case in cases.items():
            runs[name].append(measure(case, seconds, connections))
            if os.environ.get("STORM_DEBUG"):
                print(f"    {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    return {"runs": runs, "load_before": load_before}


def _stop(servers: List[ServerProcess], nginxes: List[subprocess.Popen], tmp: str) -> None:
    for srv in servers:
        srv.stop()
    for proc in nginxes:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    shutil.rmtree(tmp, ignore_errors=True)


def report(cases: Dict[str, Dict[str, Any]], runs: Dict[str, List[Dict[str, float]]],
           setup: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"benchmark": "server_storm", "setup": setup, "cases": {}}
    for name, case in cases.items():
        rs = runs[name]
        entry: Dict[str, Any] = {k: summary([r[k] for r in rs]) for k in ("rps", "p50_s", "p99_s", "cpu_per_request_s")}
        entry["errors"] = sum(r["errors"] for r in rs)
        if not case.get("floor"):
            floor = runs[f"nginx {case['proto']}"]
            entry["rps_ratio_to_nginx"] = summary([r["rps"] / f["rps"] for r, f in zip(rs, floor)])
            entry["p99_ratio_to_nginx"] = summary([r["p99_s"] / f["p99_s"] for r, f in zip(rs, floor)])
            entry["cpu_ratio_to_nginx"] = summary([r["cpu_per_request_s"] / max(1e-9, f["cpu_per_request_s"])
                                                   for r, f in zip(rs, floor)])
        if case.get("reports"):
            base = runs[name.replace(" + 10 reports/s", "")]
            entry["rps_ratio_to_no_reports"] = summary([r["rps"] / b["rps"] for r, b in zip(rs, base)])
            entry["reports_sent"] = sum(r["reports_sent"] for r in rs)
            entry["report_p50_s"] = summary([r["report_p50_s"] for r in rs])
        out["cases"][name] = entry
    return out


def _ratio(s: Dict[str, float]) -> str:
    return f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})"


def rows_from(doc: Dict[str, Any]) -> list:
    """Rows for make bench: the median is the p50 latency; every ratio in the note."""
    from benchmarks.common import Row

    rows = []
    for name, e in doc["cases"].items():
        proto = "TLS" if " TLS" in name else "plain"
        note = (f"{e['rps']['median']:.0f} req/s ({e['rps']['min']:.0f}-{e['rps']['max']:.0f}), "
                f"p99 {e['p99_s']['median'] * 1e3:.0f} ms, CPU/request {e['cpu_per_request_s']['median'] * 1e3:.2f} ms")
        if "rps_ratio_to_nginx" in e:
            note += (f"; vs nginx: req/s {_ratio(e['rps_ratio_to_nginx'])}, p99 {_ratio(e['p99_ratio_to_nginx'])}, "
                     f"CPU/request {_ratio(e['cpu_ratio_to_nginx'])}")
        if "rps_ratio_to_no_reports" in e:
            note += f"; req/s vs no reports {_ratio(e['rps_ratio_to_no_reports'])}, {e['reports_sent']} reports"
        if e["errors"]:
            note += f"; {e['errors']} errors"
        rows.append(Row(f"config storm ({proto})", name, e["p50_s"]["median"], floor=f"nginx {proto}",
                        is_floor=name.startswith("nginx"), note="p50 latency; " + note))
    s = doc["setup"]
    if "server_worker_counts" in s:
        shape = f"server {'/'.join(map(str, s['server_worker_counts']))} gevent workers, nginx {s['nginx_workers']}"
    elif s.get("worker_class", "gevent") == "gevent":
        shape = f"{s['workers']} gevent workers (server and nginx)"
    else:
        shape = f"{s['workers']} gthread workers x {s['threads']} threads"
    rows[0].note += (f"; set-up: {s['body_bytes']} B body, {s['connections']} connections (wrk), {s['seconds']} s x "
                     f"{s['rounds']} interleaved rounds, {shape}, {s['cpus']} CPUs")
    if "load_average_before" in s:
        rows[0].note += (f"; load average (1 min) {s['load_average_before'][0]:.1f} before, "
                         f"{s['load_average_after'][0]:.1f} after")
    return rows


def run(quick: bool = False) -> list:
    doc = run_storm(2 if quick else 5, 1 if quick else 3, 200, 1 << 20, 2000 if quick else 10000, None, None)
    from benchmarks.common import save_json

    save_json("storm.json", doc)
    return rows_from(doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one short round, 2,000 nodes")
    ap.add_argument("--seconds", type=float, help="length of each wrk run (default 5)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 3)")
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--size", type=int, default=1 << 20, help="approximate rendered config size in bytes")
    ap.add_argument("--nodes", type=int, help="nodes in the populated database (default 10,000)")
    ap.add_argument("--workers", type=int, help="server and nginx workers (default: the server's default)")
    ap.add_argument("--threads", type=int, help="server threads per worker with --worker-class gthread")
    ap.add_argument("--worker-class", default="gevent", choices=("gevent", "gthread"),
                    help="the server's worker (default: gevent, the server's default)")
    ap.add_argument("--sweep-workers", metavar="N,N,...",
                    help="instead: the server (empty database) with each of these worker counts against nginx "
                         "with --workers (default: the server's default), interleaved")
    ap.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    args = ap.parse_args()
    if args.sweep_workers:
        return _sweep_main(args)
    doc = run_storm(args.seconds or (2 if args.quick else 5), args.rounds or (1 if args.quick else 3),
                    args.connections, args.size, args.nodes or (2000 if args.quick else 10000), args.workers,
                    args.threads, args.worker_class)
    from benchmarks.common import print_result

    return print_result(doc, rows_from(doc), args.json)


def _sweep_main(args: Any) -> int:
    from benchmarks.common import print_result, save_json

    counts = [int(n) for n in args.sweep_workers.split(",")]
    doc = run_worker_sweep(args.seconds or 5, args.rounds or 5, args.connections, args.size, counts, args.workers)
    save_json("storm_workers.json", doc)
    return print_result(doc, rows_from(doc), args.json)


if __name__ == "__main__":
    sys.exit(main())
