"""How long a first boot that goes wrong takes to show where an admin looks (issue 47), on each
backend: SQLite (one server), etcd (two replicas on a three-member etcd) and Kubernetes (two
replicas of ``serve --backend kubernetes`` on kube-apiserver 1.20.2 with OpenShift's CRDs).

    .venv/bin/python benchmarks/bench_firstboot_visibility.py [--deadline S] [--backends sqlite,etcd,kube] [--json FILE]

The five first boots of tests/helpers/firstboot_faults.py run at once against each (a served file
whose source is unreachable, a skew refusal, an apply rolled back, a first boot killed after its
fetch, a reboot that never comes back). Each is timed from the node's exit (a failure's report
went out just before it; a stalled node's last report too) to the moment every replica's API
shows it (polled every 50 ms); with Kubernetes also to its Event on the MachineConfigNode, whose
name carries the nanosecond it was made (client-go's naming): there each node's root holds a
kubelet client certificate from the control plane's CA, which proves its name (a name not proven
yet gets its Events on the pool only, and no MachineConfigNode: docs/security.md "Identity").
Targets: a reported failure within one report round trip (it is there at the node's exit), a
stall within the deadline plus 30 s.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.helpers import firstboot_faults as faults  # noqa: E402
from tests.helpers.certs import make_tls  # noqa: E402
from tests.helpers.server_proc import ServerProcess  # noqa: E402
from tests.helpers.wait import wait_for  # noqa: E402

TOKEN = "bench-firstboot"


def _views(servers):
    return [lambda node, srv=srv: faults.node_view(srv.session(), srv.base_url, node) for srv in servers]


def _run(servers, top: str, deadline: float, prepare=None) -> Dict[str, Any]:
    one = servers[0]
    return faults.run_all(one.session(), one.base_url, one.tls.ca_pem(), TOKEN, top, "bench-", wait_for, deadline,
                          views=_views(servers), prepare=prepare)


def _kubelet_cert(kc):
    """Each run's kubelet client certificate in its root (report.kubeletCertFile's default): the
    node proves its name, so its first boot's Events go on its MachineConfigNode too."""
    from tests.helpers.certs import write_combined

    def prepare(run) -> None:
        cert, key = kc.kubelet_cert(run.node)
        with open(cert, "rb") as c, open(key, "rb") as k:
            write_combined(os.path.join(run.root, "var/lib/kubelet/pki/kubelet-client-current.pem"), c.read(),
                           k.read())
    return prepare


def sqlite(top: str, deadline: float) -> Dict[str, Any]:
    state = _state(top)
    with ServerProcess(state, tls=make_tls(os.path.join(top, "tls")), token=TOKEN,
                       extra_args=["--firstboot-deadline", f"{deadline:g}"]) as srv:
        return {"runs": _run([srv], top, deadline)}


def etcd(top: str, deadline: float) -> Dict[str, Any]:
    from tests.helpers.etcd_cluster import EtcdCluster

    state, tls = _state(top), make_tls(os.path.join(top, "tls"))
    with EtcdCluster(os.path.join(top, "etcd")) as cluster:
        args = ["--store", f"{cluster.url}/bench-firstboots/", "--firstboot-deadline", f"{deadline:g}"]
        with ServerProcess(state, tls=tls, token=TOKEN, workers=1, extra_args=args) as a, \
                ServerProcess(state, tls=tls, token=TOKEN, workers=1, extra_args=args) as b:
            return {"runs": _run([a, b], top, deadline)}


def kube(top: str, deadline: float) -> Dict[str, Any]:
    import yaml

    from tests.helpers.kube_cluster import KubeCluster

    with KubeCluster(os.path.join(top, "kube")) as kc:
        kc.apply_examples()
        kc.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(faults.SOURCE_OBJECTS))
        kc.bind_server_user("bench-fb")
        tls = make_tls(os.path.join(top, "tls"))
        args = ["--backend", "kubernetes", "--kubeconfig", kc.kubeconfig_for("bench-fb"),
                "--firstboot-deadline", f"{deadline:g}"]
        with ServerProcess(None, tls=tls, token=TOKEN, workers=1, extra_args=args) as a, \
                ServerProcess(None, tls=tls, token=TOKEN, workers=1, extra_args=args) as b:
            runs = _run([a, b], top, deadline, prepare=_kubelet_cert(kc))

            def made(node):  # when each node's MachineConfigNode Event was made (its name: UnixNano)
                items = kc.get("/api/v1/namespaces/node-config-server/events").json()["items"]
                mine = [e for e in items if e["involvedObject"]["name"] == node
                        and e["involvedObject"]["kind"] == "MachineConfigNode"]
                return mine and int(mine[0]["metadata"]["name"].rsplit(".", 1)[1], 16) / 1e9

            events = {name: wait_for(lambda r=r: made(r.node), f"{r.node}'s Event", deadline + 30) - r.went_wrong
                      for name, r in runs.items()}
            return {"runs": runs, "events": events}


def _state(top: str) -> str:
    state = os.path.join(top, "state")
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    faults.write_source_pool(state)
    return state


def table(results: Dict[str, Dict[str, Any]], deadline: float) -> List[str]:
    lines = [f"deadline {deadline:g} s; seconds from the node's exit to every replica's API showing it "
             "(Kubernetes: and to the Event on its MachineConfigNode)",
             f"{'scenario':20} {'exit':>4}  {'shown as':16} " + "  ".join(f"{b:>8}" for b in results) +
             ("  kube Event" if "kube" in results else "")]
    for sc in faults.SCENARIOS:
        first = next(iter(results.values()))["runs"][sc.name]
        cells = "  ".join(f"{r['runs'][sc.name].seconds:8.3f}" for r in results.values())
        event = f"  {results['kube']['events'][sc.name]:10.3f}" if "kube" in results else ""
        lines.append(f"{sc.name:20} {first.exit_code:>4}  {sc.outcome + ':' + sc.stage:16} {cells}{event}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deadline", type=float, default=8.0)
    p.add_argument("--backends", default="sqlite,etcd,kube")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    results = {}
    started = time.time()
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix=f"bench-fb-{backend}-") as top:
            results[backend] = {"sqlite": sqlite, "etcd": etcd, "kube": kube}[backend](top, args.deadline)
    print("\n".join(table(results, args.deadline)))
    print(f"({time.time() - started:.0f} s in all, load average {os.getloadavg()[0]:.1f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({b: {"seconds": {n: r.seconds for n, r in v["runs"].items()}, "events": v.get("events")}
                       for b, v in results.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
