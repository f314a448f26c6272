"""``make kube-demo``: node-config-server on a real, local Kubernetes control plane, narrated.

1. etcd, kube-apiserver, kube-controller-manager and kube-scheduler 1.20.2 (``make kube-bin``) on loopback, with
   OpenShift's CRDs: the tests' control plane (tests/helpers/kube_cluster.py), started here.
2. deploy/rbac.yaml and the example pools, MachineConfigs and MachineConfiguration applied as an
   admin applies them.
3. ``node-config-server serve --backend kubernetes`` as a user bound to deploy/rbac.yaml's roles
   only (least privilege), TLS and tokens; it reads the cluster's client CA from
   kube-system/extension-apiserver-authentication, so a node's kubelet certificate proves its name.
4. infra-0 and infra-1 first-boot into the custom pool infra, worker-0 into worker (pending: the
   bootstrap token alone proves no name); the demo then plays each one's kubelet: it registers its
   Node, keeps it Ready for as long as the demo runs (its heartbeats: the Node's status and its
   Lease in kube-node-lease, every 10 s: examples/kubelets.py) and writes its client certificate
   where node-agent looks, and ``node-agent update --once`` presents it (proven: the report counts,
   infra's label lands on the Node). Each first boot asked for a reboot (kernel arguments): the
   scratch root gets a new boot id (as node-agent sees a reboot; docs/operations.md) and the pass
   reports Done.
5. An admin edits infra's MachineConfig with kubectl: a new rendered config, which the server rolls
   out one node at a time (maxUnavailable 1): ``get nodes`` shows which node updates and which
   waits and why (the server's own view, docs/rollout.md), each node's ``update --once`` takes it
   in its turn.
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
# The node lifecycle controller's --node-monitor-grace-period (seconds; 40, its default): a Node
# with no heartbeat for that long is NotReady. The played kubelets beat four times in it, as a
# kubelet renews its Lease at a quarter of its duration. Tests shorten it to see it hold.
GRACE = float(os.environ.get("NODE_AGENT_KUBE_DEMO_GRACE") or 40)
NODES = {"infra-0": "infra", "infra-1": "infra", "worker-0": "worker"}
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
    grace = [] if GRACE == 40 else [f"--node-monitor-grace-period={GRACE:g}s", "--node-monitor-period=1s"]
    kc = KubeCluster(os.path.join(RUN, "cluster"), bin_dir, controller_manager_args=grace)
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


def first_boots(srv, tls) -> dict:
    from tests.helpers.noderoot import make_node_root

    infra = srv.session().get(srv.url("/config/infra"),
                              headers={"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"})
    infra.raise_for_status()
    image = infra.headers.get("X-Served-Image", "")
    roots = {}
    for name, pool in NODES.items():
        roots[name] = make_node_root(os.path.join(RUN, name), srv.base_url, pool, ca_pem=tls.ca_pem(), token=TOKEN,
                                     node_name=name, booted_image=image if pool == "infra" else "")
        show(_agent("firstboot", "--root", roots[name]))
    print("  each one's config needs a reboot (its kernel arguments), which a scratch root "
          "never gets by itself: they are Working (reboot pending). All three are pending until their kubelets' "
          "certificates prove their names")
    return roots


def play_kubelets(kc, srv, roots, procs: "demoprocs.Recorded") -> None:
    """What each node's kubelet does once its first boot has ended: its CSR approved, it keeps its
    client certificate (CN system:node:<name>, O system:nodes, from the cluster's CA) and key in
    /var/lib/kubelet/pki/kubelet-client-current.pem, registers its Node and keeps it Ready with its
    heartbeats. A scratch root has no kubelet, so the demo does all three; node-agent presents the
    certificate (report.kubeletCertFile), which proves the node's name to the server: only then is
    its report about the Node (docs/security.md "Identity")."""
    from examples.kubelets import Heartbeats
    from tests.helpers.certs import write_combined
    from tests.helpers.noderoot import reboot

    register_nodes(kc)
    beats = Heartbeats(kc, {name: kc.kubelet_cert(name) for name in roots}, interval=GRACE / 4).start()
    procs.cleanup.append(beats.stop)
    print(f"  the demo plays their kubelets' heartbeats for as long as it runs: every {GRACE / 4:g} s each Node's "
          f"status (Ready) and its Lease in kube-node-lease, with the node's own certificate, so the Nodes stay "
          f"Ready (without them the node lifecycle controller marks a Node NotReady after {GRACE:g} s)")
    for name, root in roots.items():
        cert, key = kc.kubelet_cert(name)
        with open(cert, "rb") as c, open(key, "rb") as k:
            pem = write_combined(os.path.join(root, "var/lib/kubelet/pki/kubelet-client-current.pem"), c.read(), k.read())
        print(f"  {name}'s kubelet: its client certificate for system:node:{name} from the control plane's CA, in "
              f"{_shown(pem)} (the demo plays the kubelet: a scratch root has none)")
        if os.path.exists(os.path.join(root, "var/lib/node-agent/reboot-pending.json")):  # its first boot's reboot
            boot = reboot(root)
            print(f"  {name} \"reboots\": its scratch root's boot id is now {boot} (a scratch root completes a reboot "
                  f"so: docs/operations.md); its next pass reports Done on its config")
        show(_agent("update", "--once", "--root", root, "--node-name", name))
        reg = srv.session().get(srv.url(f"/api/v1/nodes/{name}/registration")).json()
        print(f"  the server: node {name} {reg.get('state')}, approvedBy {reg.get('approvedBy', '-')} (its kubelet's "
              f"certificate proved the name: its report is about Node {name} now)")


def register_nodes(kc) -> None:
    """The Node each kubelet registers, Ready (only the worker role, as an upstream kubelet may set
    no role; the server labels the infra nodes into pool infra). Pools count Nodes, never names that
    only report (docs/kubernetes.md, "The Node is the truth")."""
    for name in NODES:
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                       "node-role.kubernetes.io/worker": ""}}}
        print(f"$ kubectl apply -f -   # Node {name}, as its kubelet registers it")
        kc.kubectl("apply", "-f", "-", input=json.dumps(node))


def roll_out(kc, srv, roots, client: str) -> None:
    """The change, rolled out by the server one node at a time: who updates and who waits, and why,
    as the server sees it (status.rollout, get nodes' ROLLOUT), then each node in its turn."""
    from tests.helpers.kube_cluster import EXAMPLES

    before = _target(srv, "infra")
    with open(os.path.join(EXAMPLES, "machineconfigs", "50-infra.yaml")) as f:
        text = f.read().replace("pool%20ntp.infra.example.com%20iburst", "pool%20ntp2.infra.example.com%20iburst")
    print("$ kubectl apply -f -   # 50-infra with another NTP server")
    kc.kubectl("apply", "-f", "-", input=text)
    after = _until(lambda: _target(srv, "infra") != before and _target(srv, "infra"), "a new target for pool infra")
    print(f"  pool infra's target: {before} -> {after}")
    rollout = _until(lambda: (lambda r: r.get("updating") and r)(_pool(srv, "infra")["status"]["rollout"]),
                     "the server targeting a node of pool infra")
    first, waiting = rollout["updating"][0], rollout.get("waiting") or []
    print(f"  the server targets {first} (infra's maxUnavailable is 1); "
          f"{', '.join(waiting) or 'nobody'} waits: {rollout.get('waitReason') or '-'}")
    ncs = os.path.join(BIN, "node-config-server")
    show([ncs, "get", "nodes", "--config", client])
    for name in waiting:  # not its turn: it says so and changes nothing
        _turn(name, roots[name])
    _turn(first, roots[first])
    for name in waiting:  # the first is done: the next one's turn
        _until(lambda name=name: name in (_pool(srv, "infra")["status"]["rollout"].get("updating") or []),
               f"the server targeting {name} once {first} is done")
        print(f"  {first} is Done on {after}: the server targets {name}")
        show([ncs, "get", "nodes", "--config", client])
        _turn(name, roots[name])
    _until(lambda: _mcp_updated(kc, "infra", after, 2), f"kubectl get mcp infra showing {after}, 2 of 2 updated")


def _turn(name: str, root: str) -> None:
    """A node's ``update --once``, with what its log says of its turn (the server's X-Rollout)."""
    proc = show(_agent("update", "--once", "--root", root, "--node-name", name))
    for line in proc.stderr.splitlines():
        for said in ("waiting for its turn", "targeted by the server"):
            if said in line:
                print(f"  {name}'s log: {line[line.rindex(said):]}")


def _pool(srv, pool: str) -> dict:
    return srv.session().get(srv.url(f"/api/v1/pools/{pool}")).json()


def _target(srv, pool: str) -> str:
    return srv.session().get(srv.url(f"/api/v1/pools/{pool}")).json()["spec"]["configuration"]["name"]


def _mcp_updated(kc, pool: str, config: str, count: int) -> bool:
    st = json.loads(kc.kubectl("get", "mcp", pool, "-o", "json").stdout).get("status") or {}
    return (st.get("configuration") or {}).get("name") == config and st.get("updatedMachineCount") == count


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


def client_config(srv, tls) -> str:
    """A client config for the demo's server (its URL, CA and token), under RUN."""
    client = os.path.join(RUN, "client.yaml")
    token = _secret_file("token", TOKEN)
    with open(client, "w") as f:
        f.write(f"server: {srv.base_url}\ncertificateAuthority: {tls.ca_cert}\ntokenFile: {token}\n")
    return client


def look_again(kc, client: str) -> list:
    """The commands that show the pools and nodes again, as printed."""
    ncs = _shown(os.path.join(BIN, "node-config-server"))
    return [["kubectl", f"--kubeconfig={kc.admin_kubeconfig}", "get", "mcp"],
            [ncs, "get", "pools", "--config", _shown(client)],
            ["kubectl", f"--kubeconfig={kc.admin_kubeconfig}", "get", "nodes"],
            [ncs, "get", "nodes", "--config", _shown(client)],
            [ncs, "get", "pools", "--watch", "--config", _shown(client)],
            [ncs, "describe", "pool", "infra", "--config", _shown(client)]]


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
        title("4. infra-0 and infra-1 first-boot into the custom pool infra, worker-0 into worker")
        roots = first_boots(srv, tls)
        title("4b. their kubelets (played: a scratch root has none) register the Nodes, keep them Ready, get their "
              "certificates")
        play_kubelets(kc, srv, roots, procs)
        client = client_config(srv, tls)
        title("5. an admin changes infra's MachineConfig with kubectl; the server rolls it out a node at a time")
        roll_out(kc, srv, roots, client)
        title("6. the same pools, as kubectl and as node-config-server see them")
        commands = look_again(kc, client)
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
