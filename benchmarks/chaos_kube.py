"""Nothing a replica acknowledged is lost while replicas, kube-apiserver and etcd are SIGKILLed
under report load (issue 39's campaign, re-run for issue 53; on its own, not in ``make bench``).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/chaos_kube.py [--seconds 60] [--nodes 20]
        [--kill-every 3] [--kill replica apiserver etcd] [--json FILE]

Set-up: a real control plane (tests/helpers/kube_cluster.py: etcd, kube-apiserver 1.20.2,
OpenShift's CRDs; kube-controller-manager stopped, as in bench_kube.py: nothing heartbeats these
Nodes), ``--nodes`` Node objects in the worker pool, and three ``serve --backend kubernetes``
replicas (node state in the API, one gunicorn worker each, bound to deploy/rbac.yaml's grants).
Each node is a thread that reports as node-agent does: one report at a time, each carrying its
own number (``reason: "chaos report N"``); an answer other than 200 (a 503 while the API is
away, a connection cut by a kill) sends the same report again to the next replica, and only a
200 counts as acknowledged. Every ``--kill-every`` seconds one process of ``--kill`` is SIGKILLed
in turn and started again: a replica on its own port, kube-apiserver, or etcd (its data kept).

At the end, with every process back, each node's record is read from the API itself (the
report annotation of its MachineConfigNode, not a replica's memory): a node is **lost** when the
number held is lower than the last one a replica acknowledged. The row's figures: reports
acknowledged, a second, refused or cut and sent again, kills, and lost (must be 0).
"""

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import Row  # noqa: E402

ADMIN_TOKEN = "chaos-kube-admin"
TOKEN = "chaos-kube"
USER = "node-config-server-chaos"
MCN = "/apis/machineconfiguration.openshift.io/v1/machineconfignodes/"
REPORT = "node-agent.openshift.io/report"
KINDS = ("replica", "apiserver", "etcd")


class Node(threading.Thread):
    """One node's reports, one at a time, to the replicas in turn."""

    def __init__(self, name: str, credential: str, replicas: List[Any], target: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.name, self.credential, self.replicas, self.target, self.stop = name, credential, replicas, target, stop
        self.acked = 0  # the number of the last report a replica answered 200
        self.resent = 0
        self._turn = hash(name) % len(replicas)

    def run(self) -> None:
        sessions = [r.session(token=False) for r in self.replicas]
        seq = 1
        while not self.stop.is_set():
            self._turn = (self._turn + 1) % len(self.replicas)
            body = {"pool": "worker", "state": "Done", "currentConfig": self.target, "desiredConfig": self.target,
                    "reason": f"chaos report {seq}"}
            try:
                r = sessions[self._turn].post(self.replicas[self._turn].url(f"/api/v1/nodes/{self.name}/report"),
                                              json=body, headers={"Authorization": f"Bearer {self.credential}"},
                                              timeout=30)
                ok = r.status_code == 200
            except Exception:  # noqa: BLE001 - a connection a kill cut: sent again, as node-agent does
                ok = False
            if ok:
                self.acked, seq = seq, seq + 1
            else:
                self.resent += 1
                self.stop.wait(0.2)


class Chaos:
    def __init__(self, top: str, n: int):
        from tests.helpers.kube_cluster import KubeCluster
        from tests.helpers.server_proc import ServerProcess

        self.kc = KubeCluster(os.path.join(top, "kube")).start()
        cm = self.kc.procs.pop("kube-controller-manager")
        os.killpg(cm.pid, signal.SIGTERM)
        cm.wait(15)
        self.kc.apply_examples()
        self.kc.bind_server_user(USER)
        from benchmarks.bench_kube import create_nodes

        self.names = [f"chaos-{i:03d}" for i in range(n)]
        create_nodes(self.kc, self.names)
        admin_file = os.path.join(top, "admin-token")
        with open(admin_file, "w") as f:
            f.write(ADMIN_TOKEN + "\n")
        self.replicas = [ServerProcess(None, token=TOKEN, workers=1, auto_approve=None, extra_args=[
            "--backend", "kubernetes", "--kubeconfig", self.kc.kubeconfig_for(USER), "--admin-token-file", admin_file])
            for _ in range(3)]
        for r in self.replicas:
            r.start(timeout=120)
        admin = self.replicas[0].session(token=False)
        admin.headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"
        self.creds = {}
        for name in self.names:  # registered by the admin: approved, so each report counts on its Node
            r = admin.post(self.replicas[0].url(f"/api/v1/nodes/{name}/register"), timeout=60)
            if r.status_code not in (200, 201):
                raise RuntimeError(f"register {name}: {r.status_code} {r.text[:200]}")
            self.creds[name] = r.json()["credential"]
        self.target = self.replicas[0].session().get(self.replicas[0].url("/api/v1/pools/worker"), timeout=10).json()[
            "spec"]["configuration"]["name"]
        from tests.helpers.wait import wait_for

        # Every Node has its MachineConfigNode first (the servers' sweep makes them), as in a
        # cluster: a report before it is kept in the registration, and the record read at the end is the MCN's.
        wait_for(lambda: all(self.kc.get(MCN + name).status_code == 200 for name in self.names),
                 "every Node's MachineConfigNode", 120)

    def kill(self, kind: str, turn: int) -> None:
        """SIGKILL one process of ``kind`` and start it again (a replica on its own port)."""
        if kind == "replica":
            r = self.replicas[turn % len(self.replicas)]
            os.killpg(r.proc.pid, signal.SIGKILL)
            r.proc.wait(15)
            r.start(timeout=120)
            return
        name = "kube-apiserver" if kind == "apiserver" else "etcd"
        proc = self.kc.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(15)
        self.kc._spawn(name, self.kc._apiserver_cmd() if kind == "apiserver" else self.kc._etcd_cmd())
        self.kc._wait("kube-apiserver /readyz", lambda: self.kc._healthy(self.kc.url, "/readyz"), 120)

    def held(self, name: str) -> int:
        """The number of the report the API holds for ``name`` (0: none)."""
        mcn = self.kc.get(MCN + name)
        if mcn.status_code != 200:
            return 0
        text = (mcn.json()["metadata"].get("annotations") or {}).get(REPORT)
        reason = str((json.loads(text).get("report") or {}).get("reason") or "") if text else ""
        return int(reason.rsplit(" ", 1)[-1]) if reason.startswith("chaos report ") else 0

    def close(self) -> None:
        for r in self.replicas:
            r.stop()
        self.kc.stop()


def run_chaos(seconds: float, n: int, every: float, kinds: List[str]) -> Dict[str, Any]:
    top = tempfile.mkdtemp(prefix="chaos-kube-")
    chaos = Chaos(top, n)
    stop = threading.Event()
    nodes = [Node(name, chaos.creds[name], chaos.replicas, chaos.target, stop) for name in chaos.names]
    kills: Dict[str, int] = dict.fromkeys(kinds, 0)
    try:
        start = time.monotonic()
        for node in nodes:
            node.start()
        turn = 0
        while time.monotonic() - start < seconds:
            time.sleep(every)
            kind = kinds[turn % len(kinds)]
            chaos.kill(kind, turn // len(kinds))
            kills[kind] += 1
            turn += 1
        stop.set()
        for node in nodes:
            node.join(60)
        took = time.monotonic() - start
        lost = {node.name: (node.acked, chaos.held(node.name)) for node in nodes if chaos.held(node.name) < node.acked}
        acked = sum(node.acked for node in nodes)
        return {"seconds": round(took, 1), "nodes": n, "replicas": 3, "kill_every_s": every, "kills": kills,
                "acknowledged": acked, "per_second": round(acked / took, 1),
                "sent_again": sum(node.resent for node in nodes), "lost": len(lost), "lost_nodes": lost}
    finally:
        stop.set()
        chaos.close()


def rows_from(doc: Dict[str, Any]) -> List[Row]:
    kills = ", ".join(f"{k} {v}" for k, v in doc["kills"].items())
    return [Row("chaos (kube)", f"reports acknowledged, {doc['nodes']} nodes, 3 replicas, a kill every "
                f"{doc['kill_every_s']:g} s", None,
                note=f"{doc['acknowledged']} acknowledged in {doc['seconds']} s ({doc['per_second']}/s), "
                     f"{doc['sent_again']} sent again, kills: {kills}; **lost: {doc['lost']}**")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--kill-every", type=float, default=3.0)
    ap.add_argument("--kill", nargs="+", choices=KINDS, default=["replica"])
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    doc = run_chaos(args.seconds, args.nodes, args.kill_every, args.kill)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(json.dumps({k: v for k, v in doc.items() if k != "lost_nodes"}))
    for name, (acked, held) in sorted(doc["lost_nodes"].items()):
        print(f"LOST {name}: acknowledged report {acked}, the API holds {held}")
    return 1 if doc["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
