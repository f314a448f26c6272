"""Scale-up storm: many nodes fetch a large rendered config at once.

1,000 fetches of ``/config/worker`` (a ~1 MB rendered config), 200 in flight at once, against
node-config-server (gunicorn, gthread) and against nginx serving the same bytes as a static
file, on the same machine. Prints requests/s and p50/p99 latency for both and the ratio;
``--json`` prints the same as JSON for ``make bench``.

Honest limits: the client runs on the same machine (processes x threads of http.client with
keep-alive), so both servers share the CPUs with it; plain HTTP on loopback for both (TLS cost
is the same OpenSSL for both and would hide the server's own cost).
"""

import argparse
import base64
import http.client
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.helpers.server_proc import ServerProcess, free_port  # noqa: E402

NGINX = "/usr/sbin/nginx"
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


def start_nginx(root: str, port: int, workers: int) -> subprocess.Popen:
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
  keepalive_requests 100000;
  client_body_temp_path {root}/tmp; proxy_temp_path {root}/tmp; fastcgi_temp_path {root}/tmp;
  uwsgi_temp_path {root}/tmp; scgi_temp_path {root}/tmp;
  server {{
    listen 127.0.0.1:{port};
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
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/config/worker")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the master and its workers: our own session only
    proc.wait()
    log = open(os.path.join(root, "error.log")).read() if os.path.exists(os.path.join(root, "error.log")) else ""
    raise RuntimeError("nginx did not start: " + proc.stderr.read().decode(errors="replace") + log)


def _client_proc(port: int, n_threads: int, counter, total: int, start_at: float, out) -> None:
    lat: List[float] = []
    errors = [0]
    lock = threading.Lock()

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine: List[float] = []
        while True:
            with counter.get_lock():
                if counter.value >= total:
                    break
                counter.value += 1
            t0 = time.perf_counter()
            try:
                conn.request("GET", "/config/worker", headers={"Accept": ACCEPT})
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200 or len(body) < 1000:
                    raise RuntimeError(f"HTTP {resp.status}")
            except Exception:
                errors[0] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                continue
            mine.append(time.perf_counter() - t0)
        conn.close()
        with lock:
            lat.extend(mine)

    while time.time() < start_at:
        time.sleep(0.001)
    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((lat, errors[0], time.time()))


def storm(port: int, total: int, concurrency: int, procs: int) -> Dict[str, float]:
    counter = multiprocessing.Value("i", 0)
    out: multiprocessing.Queue = multiprocessing.Queue()
    start_at = time.time() + 0.5
    per = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    ps = [multiprocessing.Process(target=_client_proc, args=(port, n, counter, total, start_at, out)) for n in per]
    for p in ps:
        p.start()
    results = [out.get() for _ in ps]
    for p in ps:
        p.join()
    lat = sorted(x for r in results for x in r[0])
    errors = sum(r[1] for r in results)
    wall = max(r[2] for r in results) - start_at
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [0.0] * 99
    return {"requests": len(lat), "errors": errors, "seconds": round(wall, 3),
            "rps": round(len(lat) / wall, 1), "p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--size", type=int, default=1 << 20, help="approximate rendered config size in bytes")
    ap.add_argument("--client-procs", type=int, default=4)
    ap.add_argument("--workers", type=int, default=None, help="server workers and nginx workers (default 2 x CPUs)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(NGINX):
        print(f"{NGINX} not found: install nginx-light (make bench does)", file=sys.stderr)
        return 2
    from agent.server.gunicorn_app import default_workers

    workers = args.workers or default_workers()
    tmp = tempfile.mkdtemp(prefix="server-storm-")
    nginx = None
    try:
        state = os.path.join(tmp, "state")
        make_state(state, args.size)
        with ServerProcess(state, workers=workers, threads=64) as srv:
            c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
            c.request("GET", "/config/worker", headers={"Accept": ACCEPT})
            body = c.getresponse().read()
            c.close()
            server = storm(srv.port, args.requests, args.concurrency, args.client_procs)
        web = os.path.join(tmp, "nginx")
        os.makedirs(web)
        os.chmod(tmp, 0o755)  # nginx workers drop to an unprivileged user when started as root
        with open(os.path.join(web, "worker.json"), "wb") as f:
            f.write(body)
        port = free_port()
        nginx = start_nginx(web, port, workers)
        static = storm(port, args.requests, args.concurrency, args.client_procs)
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"benchmark": "server_storm", "body_bytes": len(body), "requests": args.requests,
              "concurrency": args.concurrency, "workers": workers, "cpus": os.cpu_count(),
              "node_config_server": server, "nginx": static,
              "rps_ratio_server_to_nginx": round(server["rps"] / static["rps"], 3) if static["rps"] else None}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"storm: {args.requests} fetches, {args.concurrency} at once, body {len(body)} bytes, "
              f"{workers} server workers, {os.cpu_count()} CPUs (client on the same machine)")
        print(f"{'server':<20}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}")
        for name, r in (("node-config-server", server), ("nginx (static)", static)):
            print(f"{name:<20}{r['rps']:>10}{r['p50_ms']:>10}{r['p99_ms']:>10}{r['errors']:>8}")
        print(f"ratio (server / nginx req/s): {result['rps_ratio_server_to_nginx']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
