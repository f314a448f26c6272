"""``make kube-demo``: node-config-server on a real, local Kubernetes control plane, narrated.

1. etcd, kube-apiserver, kube-controller-manager and kube-scheduler 1.20.2 (``make kube-bin``) on loopback, with
   OpenShift's CRDs: the tests' control plane (tests/helpers/kube_cluster.py), started here.
2. deploy/rbac.yaml and the example pools, MachineConfigs and MachineConfiguration applied as an
   admin applies them.
3. ``node-config-server serve --backend kubernetes`` as a user bound to deploy/rbac.yaml's roles
   only (least privilege), TLS and tokens; it reads the cluster's client CA from
   kube-system/extension-apiserver-authentication, so a node's kubelet certificate proves its name.
4. infra-0 first-boots into the custom pool infra, worker-0 into worker (pending: the bootstrap
   token alone proves no name); the demo then plays each one's kubelet: it registers its Node and
   writes its client certificate where node-agent looks, and ``node-agent update --once`` presents
   it (proven: the report counts, infra's label lands on the Node).
5. An admin edits infra's MachineConfig with kubectl: a new rendered config, which infra-0 takes
   with ``node-agent update --once``.
6. ``kubectl get mcp`` and ``node-config-server get pools`` one above the other, and the commands
   that look at them again (the kubeconfig's path included).

Then it waits: everything it started keeps running until Ctrl-C here or ``make kube-demo-stop``
(``--stop``) elsewhere; either ends every process it started (examples/demoprocs.py). Everything
it writes is under ./kube-demo-run, ignored by git ($NODE_AGENT_KUBE_DEMO_DIR elsewhere), made
again at each run; the server's log and token file are in the system's temporary directory.
"""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from examples import demoprocs  # noqa: E402

RUN = os.environ.get("NODE_AGENT_KUBE_DEMO_DIR") or os.path.join(REPO, "kube-demo-run")
BIN = os.path.dirname(sys.executable)
TOKEN, ADMIN_TOKEN = "demo-token", "demo-admin-token"
SERVER_USER = "node-config-server-demo"


def title(text: str) -> None:
    bold = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    print(f"\n\033[1m== {text}\033[0m" if bold else f"\n== {text}", flush=True)


def show(cmd, check_codes=(0,), env=None) -> subprocess.CompletedProcess:
    print("$ " + " ".join(_shown(c) for c in cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    if proc.stdout.strip():
        print(textwrap.indent(proc.stdout.rstrip(), "  "))
    if proc.returncode not in check_codes:
        print(textwrap.indent(proc.stderr.rstrip(), "  | "))
        raise SystemExit(f"kube-demo: unexpected exit {proc.returncode} from {' '.join(cmd)}")
    return proc


def _shown(path: str) -> str:
    path = str(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def _secret_file(name: str, text: str) -> str:
    path = os.path.join(RUN, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return path


def start_control_plane(procs: "demoprocs.Recorded"):
    from tests.helpers.kube_cluster import ETCD, KUBECTL, KubeCluster, find_kube_bin

    bin_dir = find_kube_bin()
    if not bin_dir:
        raise SystemExit("kube-demo: kube-apiserver and kube-controller-manager are not built; run `make kube-bin` "
                         "first (about 5 minutes once, then cached)")
    for tool, how in ((ETCD, "the Debian package etcd-server (make sysdeps installs it, as root)"),
                      (KUBECTL, "kubectl, the version the Kubernetes tests use (tests/helpers/kube_cluster.py)")):
        if not os.access(tool, os.X_OK):
            raise SystemExit(f"kube-demo: {tool} is not there; install {how}")
    kc = KubeCluster(os.path.join(RUN, "cluster"), bin_dir)
    procs.cleanup.append(kc.stop)
    kc.start()
    for name, proc in kc.procs.items():
        procs.add(name, proc.pid)
    print(f"  API server {kc.url}, up in {kc.start_seconds:.0f} s; CRDs of deploy/crds/ established")
    return kc


def start_server(kc, procs: "demoprocs.Recorded"):
    from tests.helpers.certs import make_tls
    from tests.helpers.server_proc import ServerProcess

    kc.apply_examples()
    kc.bind_server_user(SERVER_USER)
    kubeconfig = kc.kubeconfig_for(SERVER_USER)
    print(f"  applied deploy/rbac.yaml and examples/state; the server runs as user {SERVER_USER}, bound to the "
          f"node-config-server ClusterRole and Role only")
    tls = make_tls(os.path.join(RUN, "tls"))
    admin = _secret_file("admin-token", ADMIN_TOKEN)
    srv = ServerProcess(None, tls=tls, token=TOKEN, workers=1, threads=4, data_dir=os.path.join(RUN, "data"),
                        auto_approve=None, extra_args=["--backend", "kubernetes", "--kubeconfig", kubeconfig,
                                                       "--admin-token-file", admin])
    procs.cleanup.append(srv.stop)
    srv.start(timeout=60)
    procs.add("node-config-server", srv.proc.pid)
    print(f"  node-config-server on {srv.base_url}")
    return srv, tls


def first_boots(srv, tls) -> str:
    from tests.helpers.noderoot import make_node_root

    infra = srv.session().get(srv.url("/config/infra"),
                              headers={"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"})
    infra.raise_for_status()
    image = infra.headers.get("X-Served-Image", "")
    infra0 = make_node_root(os.path.join(RUN, "infra-0"), srv.base_url, "infra", ca_pem=tls.ca_pem(), token=TOKEN,
                            node_name="infra-0", booted_image=image)
    show(_agent("firstboot", "--root", infra0))
    worker0 = make_node_root(os.path.join(RUN, "worker-0"), srv.base_url, "worker", ca_pem=tls.ca_pem(),
                             token=TOKEN, node_name="worker-0")
    show(_agent("firstboot", "--root", worker0))
    print("  infra-0 runs its boot image's OS already: Done at once. worker-0's config needs a reboot, which a "
          "scratch root never gets: it stays Working (reboot pending), and pool worker Updating. Both are pending "
          "until their kubelets' certificates prove their names")
    return {"infra-0": infra0, "worker-0": worker0}


def play_kubelets(kc, srv, roots) -> None:
    """What each node's kubelet does once its first boot has ended: its CSR approved, it keeps its
    client certificate (CN system:node:<name>, O system:nodes, from the cluster's CA) and key in
    /var/lib/kubelet/pki/kubelet-client-current.pem, and registers its Node. A scratch root has no
    kubelet, so the demo does both; node-agent presents the certificate (report.kubeletCertFile),
    which proves the node's name to the server: only then is its report about the Node
    (docs/security.md "Identity")."""
    from tests.helpers.certs import write_combined

    register_nodes(kc)
    for name, root in roots.items():
        cert, key = kc.kubelet_cert(name)
        with open(cert, "rb") as c, open(key, "rb") as k:
            pem = write_combined(os.path.join(root, "var/lib/kubelet/pki/kubelet-client-current.pem"), c.read(), k.read())
        print(f"  {name}'s kubelet: its client certificate for system:node:{name} from the control plane's CA, in "
              f"{_shown(pem)} (the demo plays the kubelet: a scratch root has none)")
        show(_agent("update", "--once", "--root", root, "--node-name", name))
        reg = srv.session().get(srv.url(f"/api/v1/nodes/{name}/registration")).json()
        print(f"  the server: node {name} {reg.get('state')}, approvedBy {reg.get('approvedBy', '-')} (its kubelet's "
              f"certificate proved the name: its report is about Node {name} now)")


def register_nodes(kc) -> None:
    """The Node each kubelet registers, Ready (only the worker role, as an upstream kubelet may set
    no role; the server labels infra-0 into pool infra). Pools count Nodes, never names that only
    report (docs/kubernetes.md, "The Node is the truth")."""
    for name in ("infra-0", "worker-0"):
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                       "node-role.kubernetes.io/worker": ""}}}
        print(f"$ kubectl apply -f -   # Node {name}, as its kubelet registers it")
        kc.kubectl("apply", "-f", "-", input=json.dumps(node))
        ready = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                            "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}}
        r = kc.session().patch(f"{kc.url}/api/v1/nodes/{name}/status", json=ready, timeout=10,
                               headers={"Content-Type": "application/merge-patch+json"})
        r.raise_for_status()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def roll_out(kc, srv, infra0: str) -> None:
    from tests.helpers.kube_cluster import EXAMPLES

    before = _target(srv, "infra")
    with open(os.path.join(EXAMPLES, "machineconfigs", "50-infra.yaml")) as f:
        text = f.read().replace("pool%20ntp.infra.example.com%20iburst", "pool%20ntp2.infra.example.com%20iburst")
    print("$ kubectl apply -f -   # 50-infra with another NTP server")
    kc.kubectl("apply", "-f", "-", input=text)
    after = _until(lambda: _target(srv, "infra") != before and _target(srv, "infra"), "a new target for pool infra")
    print(f"  pool infra's target: {before} -> {after}")
    show(_agent("update", "--once", "--root", infra0, "--node-name", "infra-0"))
    _until(lambda: _mcp_updated(kc, "infra", after), f"kubectl get mcp infra showing {after}, 1 of 1 updated")


def _target(srv, pool: str) -> str:
    return srv.session().get(srv.url(f"/api/v1/pools/{pool}")).json()["spec"]["configuration"]["name"]


def _mcp_updated(kc, pool: str, config: str) -> bool:
    st = json.loads(kc.kubectl("get", "mcp", pool, "-o", "json").stdout).get("status") or {}
    return (st.get("configuration") or {}).get("name") == config and st.get("updatedMachineCount") == 1


def _until(check, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"kube-demo: {what}: not within {timeout:.0f} s")
        time.sleep(0.25)


def _agent(*args: str):
    return [os.path.join(BIN, "node-agent"), *args]


def look_again(kc, srv, tls) -> list:
    """The commands that show the pools again, as printed (a client config under RUN)."""
    client = os.path.join(RUN, "client.yaml")
    token = _secret_file("token", TOKEN)
    with open(client, "w") as f:
        f.write(f"server: {srv.base_url}\ncertificateAuthority: {tls.ca_cert}\ntokenFile: {token}\n")
    ncs = _shown(os.path.join(BIN, "node-config-server"))
    return [["kubectl", f"--kubeconfig={kc.admin_kubeconfig}", "get", "mcp"],
            [ncs, "get", "pools", "--config", _shown(client)],
            [ncs, "get", "pools", "--watch", "--config", _shown(client)],
            [ncs, "describe", "node", "infra-0", "--config", _shown(client)]]


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--stop":
        return demoprocs.stop(RUN)
    demoprocs.refuse_if_running(RUN)
    started = time.monotonic()
    shutil.rmtree(RUN, ignore_errors=True)
    os.makedirs(RUN)
    with demoprocs.Recorded(RUN) as procs:
        title("1. a Kubernetes control plane on loopback (make kube-bin's etcd, kube-apiserver, controller manager)")
        kc = start_control_plane(procs)
        title("2-3. deploy/rbac.yaml, the example objects, node-config-server serve --backend kubernetes")
        srv, tls = start_server(kc, procs)
        title("4. infra-0 first-boots into the custom pool infra, worker-0 into worker")
        roots = first_boots(srv, tls)
        title("4b. their kubelets (played: a scratch root has none) register the Nodes and get their certificates")
        play_kubelets(kc, srv, roots)
        infra0 = roots["infra-0"]
        title("5. an admin changes infra's MachineConfig with kubectl; infra-0 takes the new config")
        roll_out(kc, srv, infra0)
        title("6. the same pools, as kubectl and as node-config-server see them")
        commands = look_again(kc, srv, tls)
        for cmd in commands[:2]:
            show(cmd)
        print(f"\nkube demo ready in {time.monotonic() - started:.0f} s; everything is under {_shown(RUN)}/")
        title("to look again (in another terminal, while this one runs)")
        for cmd in commands:
            print("    " + shlex.join(cmd))
        print(f"\n  Ctrl-C here, or `make kube-demo-stop` elsewhere, stops all {len(procs.entries)} processes "
              f"it started.", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # make kube-demo-stop: the cleanup below runs
        while True:
            signal.pause()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nkube-demo: stopped", file=sys.stderr)
        sys.exit(130)
