"""A real Kubernetes control plane on loopback for the tests: etcd, kube-apiserver (Node and RBAC
authorization, the NodeRestriction admission plugin), kube-controller-manager and kube-scheduler
1.20.2, with OpenShift's CRDs (deploy/crds/) installed.

The binaries come from ``make kube-bin`` (tools/kube/build-kube-bin.sh, cached outside the tree);
etcd is Debian's etcd-server, kubectl is /usr/bin/kubectl. Everything listens on 127.0.0.1 on free
ports and speaks TLS with certificates made here by one throw-away CA (etcd's clients, the API
server's clients and serving certificates); the API server has no insecure port, and neither
have the controller manager and the scheduler. The API server's certificate also names 10.0.2.2,
the host's loopback as a QEMU guest sees it (the VM test's real kubelet, tests/vm); the API
server reaches a kubelet (`kubectl logs`) at the Node's InternalIP with its own client
certificate, bound to system:kubelet-api-admin. No kubelet
runs on the host: the scheduler places a pod only on a Node whose status offers room
(allocatable pods, cpu, memory), which a Node object a test creates has not, so the tests under
tests/kube that make fleets of Node objects still bind their pods and write their status
themselves; the VM test's Node and pods are its guest kubelet's.

    with KubeCluster(tmp_dir) as kc:
        kc.kubectl("get", "mcp")                             # as admin (system:masters)
        cfg = kc.kubeconfig_for("alice", ["some-group"])     # another user, for RBAC tests

``kube_cluster`` is the session fixture, in tests/conftest.py: one control plane per pytest worker
(a module that imported it had a fixture of its own, started again and kept to the session's end:
six alive at once, issue 54). It skips, naming ``make kube-bin``, when the binaries are not built
(a failure under ``make test``). ``kube_cluster_reset`` (tests/conftest.py) gives a module that
control plane as a new one looks (``KubeCluster.reset``): the modules whose server reads every pool
and Node share the worker's instead of starting one each (issue 54).
"""

import datetime
import glob
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.helpers import kube_reset
from tests.helpers.etcd_cluster import ETCD, _free_ports
from tests.helpers.wait import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_SCRIPT = os.path.join(REPO, "tools", "kube", "build-kube-bin.sh")
CRDS = os.path.join(REPO, "deploy", "crds")
EXAMPLES = os.path.join(REPO, "examples", "state")
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
SERVICE_CIDR = "10.0.0.0/24"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
GUEST_HOST_IP = "10.0.2.2"  # the host's loopback as QEMU's user network shows it to a guest
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"  # kubeadm's name for the API server's user at kubelets
# No kubelet runs on the host: the node lifecycle controller would mark every Node a test makes
# NotReady (Unknown) after its grace periods (40 s, a minute); a test's Node is not ready only when
# the test says so. The tests' shared control plane runs with these (tests/conftest.py).
NO_NODE_LIFECYCLE = ("--node-monitor-grace-period=1h", "--node-startup-grace-period=1h")
# What KubeCluster.reset keeps: the namespaces a new cluster has, and the server's own two, which
# deploy/rbac.yaml makes with its Roles (their objects go, the Roles and bindings stay).
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SERVER_NAMESPACES = ("node-config-server", "node-config-server-credentials")
# Every kind a test or a server makes outside a namespace reset deletes, but RBAC's (kept: each
# module binds its server's user again, and a binding is the same whoever made it first).
CLUSTER_KINDS = ("nodes", "machineconfignodes", "machineconfigpools", "machineconfigs", "machineconfigurations",
                 "machineosconfigs", "machineosbuilds", "pinnedimagesets", "certificatesigningrequests")


def find_kube_bin() -> Optional[str]:
    """The directory holding the binaries: $NODE_AGENT_KUBE_BIN, else the build script's cache
    (``build-kube-bin.sh --find`` looks, never builds); None when there is none."""
    d = os.environ.get("NODE_AGENT_KUBE_BIN")
    if not d:
        out = subprocess.run(["bash", BUILD_SCRIPT, "--find"], capture_output=True, text=True, timeout=60)
        lines = out.stdout.strip().splitlines()
        d = lines[-1] if out.returncode == 0 and lines else ""
    if d and all(os.access(os.path.join(d, b), os.X_OK) for b in BINARIES):
        return d
    return None


def unique(prefix: str) -> str:
    """A name of the test's own in the session's shared cluster."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kubelet_ready_status() -> Dict[str, Dict[str, list]]:
    """The Node status patch (merge) a kubelet posts as its heartbeat: Ready, stamped now. A
    test that makes a Node with no kubelet posts it to make the Node Ready, and every few seconds
    on a control plane whose node lifecycle controller keeps its grace period (40 s; the shared
    one's waits an hour, NO_NODE_LIFECYCLE)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "the test's kubelet", "lastHeartbeatTime": stamp,
                                       "lastTransitionTime": stamp}]}}


class _CA:
    """One CA signing every certificate of the cluster (serving and client), EC P-256."""

    def __init__(self, directory: str):
        self.dir = directory
        self.now = datetime.datetime.now(datetime.timezone.utc)
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node-agent test kube CA")])
        self.cert = (self._builder(name, self.key.public_key(), days=7).issuer_name(name)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(
                         digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         encipher_only=False, decipher_only=False), critical=True)
                     # As every real cluster CA (kubeadm's, OpenShift's signers): RFC 5280 wants it,
                     # and Go's x509 (the controller manager's CSR signer) copies it into the
                     # kubelets' certificates as their Authority Key Identifier. Python 3.13's
                     # default TLS context (the server image's) verifies strictly and refuses a
                     # chain without them ("Missing Subject/Authority Key Identifier").
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                     .sign(self.key, hashes.SHA256()))
        self.path = self._write("ca.pem", self.cert.public_bytes(serialization.Encoding.PEM))
        # The controller manager's signer of approved kubelet CSRs (KubeCluster(tls_bootstrap=True)).
        self.key_path = self._write("ca-key.pem", self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)

    def _builder(self, subject: x509.Name, public_key, days: int) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).public_key(public_key)
                .serial_number(x509.random_serial_number())
                .not_valid_before(self.now - datetime.timedelta(minutes=5))
                .not_valid_after(self.now + datetime.timedelta(days=days)))

    def _write(self, name: str, data: bytes, mode: int = 0o644) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        return path

    def issue(self, name: str, cn: str, orgs: Sequence[str] = (), hosts: Sequence[str] = (),
              client: bool = True, server: bool = False) -> Tuple[str, str]:
        """A certificate for ``cn`` (the user) in ``orgs`` (its groups), serving ``hosts`` when
        ``server``; returns (cert path, key path)."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
                            + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        usages = ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else []) + \
                 ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
        b = (self._builder(subject, key.public_key(), days=2).issuer_name(self.cert.subject)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False))
        if hosts:
            sans: List[x509.GeneralName] = []
            for h in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    sans.append(x509.DNSName(h))
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        return (self._write(f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM)),
                self._write(f"{name}-key.pem", key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption()), 0o600))


class KubeCluster:
    def __init__(self, base_dir: str, bin_dir: Optional[str] = None, crds: Optional[str] = CRDS,
                 controller_manager_args: Sequence[str] = (), tls_bootstrap: bool = False):
        """``tls_bootstrap``: a kubelet may join as a real one does (bootstrap_token()): the API
        server takes bootstrap tokens, the controller manager signs approved kubelet CSRs with the
        cluster's CA (the API server's client CA) and approves those a bootstrap token's holder
        may ask for, as kubeadm binds them (the stand-in for OpenShift's cluster-machine-approver)."""
        self.base_dir = base_dir
        self.controller_manager_args = list(controller_manager_args)
        self.tls_bootstrap = tls_bootstrap
        self.bin_dir = bin_dir or find_kube_bin()
        if not self.bin_dir:
            raise FileNotFoundError(f"{'/'.join(BINARIES)} not built: run make kube-bin")
        self.crds = crds
        os.makedirs(base_dir, exist_ok=True)
        self.etcd_port, self.etcd_peer_port, self.port, self.cm_port, self.sched_port = _free_ports(5)
        self.url = f"https://127.0.0.1:{self.port}"
        self.procs: Dict[str, subprocess.Popen] = {}
        self._minted = 0
        self.start_seconds = 0.0  # how long start() took (etcd to CRDs established)
        self.crd_names: List[str] = []  # the CRDs start() installed: reset() keeps them

    def _path(self, name: str) -> str:
        return os.path.join(self.base_dir, name)

    # --- certificates and kubeconfigs
    def _make_pki(self) -> None:
        self.ca = _CA(self.base_dir)
        self.ca_path = self.ca.path
        lo = ("127.0.0.1", "localhost")
        self.etcd_serving = self.ca.issue("etcd", "etcd", hosts=lo, server=True)  # peer TLS: both usages
        self.etcd_client = self.ca.issue("apiserver-etcd-client", "kube-apiserver-etcd-client")
        self.serving = self.ca.issue("apiserver", "kube-apiserver", client=False, server=True, hosts=(
            *lo, GUEST_HOST_IP, "10.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc"))
        self.cm_serving = self.ca.issue("controller-manager-serving", "kube-controller-manager",
                                        hosts=lo, client=False, server=True)
        self.sched_serving = self.ca.issue("scheduler-serving", "kube-scheduler", hosts=lo, client=False, server=True)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = self.ca._write("sa-key.pem", sa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)
        self.sa_pub = self.ca._write("sa.pem", sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        self.admin_cert = self.ca.issue("admin", "admin", orgs=["system:masters"])
        # The API server's client certificate towards kubelets (logs, exec): its user is bound to
        # system:kubelet-api-admin in start(), as the kubelet's webhook authorization asks.
        self.kubelet_client = self.ca.issue("apiserver-kubelet-client", KUBELET_CLIENT_USER)
        self.admin_kubeconfig = self._kubeconfig("admin", *self.admin_cert)
        self.cm_kubeconfig = self._kubeconfig(
            "controller-manager", *self.ca.issue("controller-manager", "system:kube-controller-manager"))
        # The user the bootstrap RBAC policy binds to system:kube-scheduler and system:volume-scheduler.
        self.sched_kubeconfig = self._kubeconfig("scheduler", *self.ca.issue("scheduler", "system:kube-scheduler"))

    def _kubeconfig(self, name: str, cert: str, key: str) -> str:
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": name,
               "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": self.ca_path}}],
               "users": [{"name": name, "user": {"client-certificate": cert, "client-key": key}}],
               "contexts": [{"name": name, "context": {"cluster": "test", "user": name}}]}
        path = self._path(f"{name}.kubeconfig")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)  # JSON is YAML: kubectl and client libraries read it
        return path

    def kubelet_cert(self, node: str) -> Tuple[str, str]:
        """Node ``node``'s kubelet client certificate from this cluster's CA (CN system:node:<node>,
        O system:nodes), as its approved CSR gives it: (cert path, key path), made once per node.
        The API server's client CA is this CA, which it publishes in
        kube-system/extension-apiserver-authentication: node-config-server verifies it there."""
        name = f"kubelet-{node}"
        cert, key = self._path(f"{name}.pem"), self._path(f"{name}-key.pem")
        if not os.path.exists(key):
            cert, key = self.ca.issue(name, f"system:node:{node}", orgs=["system:nodes"])
        return cert, key

    def bootstrap_token(self) -> str:
        """A bootstrap token (``<id>.<secret>``, kube-system/bootstrap-token-<id>) that lets a kubelet
        ask for its client certificate, and the bindings that let it (system:node-bootstrapper)
        and have its CSR approved at once (certificatesigningrequests:nodeclient: the controller
        manager's csrapproving controller), as kubeadm makes them. Needs ``tls_bootstrap``."""
        import secrets
        import string

        alphabet = string.ascii_lowercase + string.digits
        token_id = "".join(secrets.choice(alphabet) for _ in range(6))
        secret = "".join(secrets.choice(alphabet) for _ in range(16))
        self.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
            "stringData": {"token-id": token_id, "token-secret": secret, "usage-bootstrap-authentication": "true"}}))
        for name, role in (("kubelet-bootstrap", "system:node-bootstrapper"),
                           ("node-autoapprove-bootstrap",
                            "system:certificates.k8s.io:certificatesigningrequests:nodeclient")):
            self.kubectl("create", "clusterrolebinding", name, f"--clusterrole={role}", "--group=system:bootstrappers",
                         check=False)  # made once per cluster
        return f"{token_id}.{secret}"

    def kubeconfig_for(self, user: str, groups: Sequence[str] = ()) -> str:
        """A kubeconfig authenticating as ``user`` in ``groups`` (x509 client certificate: the CN
        and O of a certificate this cluster's CA signs). It has no rights until a test binds some."""
        self._minted += 1
        name = f"user{self._minted}"
        return self._kubeconfig(name, *self.ca.issue(name, user, orgs=groups))

    # --- processes
    def _spawn(self, name: str, cmd: List[str]) -> None:
        with open(self._path(f"{name}.log"), "ab") as log:
            self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)

    def _etcd_cmd(self) -> List[str]:
        client, peer = f"https://127.0.0.1:{self.etcd_port}", f"https://127.0.0.1:{self.etcd_peer_port}"
        cert, key = self.etcd_serving
        return [ETCD, "--name", "kube", "--data-dir", self._path("etcd-data"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"kube={peer}", "--initial-cluster-state", "new",
                "--cert-file", cert, "--key-file", key, "--client-cert-auth", "--trusted-ca-file", self.ca_path,
                "--peer-cert-file", cert, "--peer-key-file", key, "--peer-client-cert-auth",
                "--peer-trusted-ca-file", self.ca_path,
                "--logger", "zap", "--log-outputs", "stderr"]

    def _apiserver_cmd(self) -> List[str]:
        cert, key = self.serving
        etcd_cert, etcd_key = self.etcd_client
        return [os.path.join(self.bin_dir, "kube-apiserver"),
                f"--etcd-servers=https://127.0.0.1:{self.etcd_port}", f"--etcd-cafile={self.ca_path}",
                f"--etcd-certfile={etcd_cert}", f"--etcd-keyfile={etcd_key}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
                "--insecure-port=0",  # 1.20 would otherwise also serve plain HTTP on 127.0.0.1:8080
                f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", f"--client-ca-file={self.ca_path}",
                "--authorization-mode=Node,RBAC", f"--service-cluster-ip-range={SERVICE_CIDR}",
                # every real cluster has it (1.20 does not enable it by default): a kubelet may
                # change only its own Node and its pods, and never its node-role labels
                "--enable-admission-plugins=NodeRestriction",
                f"--service-account-key-file={self.sa_pub}", f"--service-account-signing-key-file={self.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                # 127.0.0.1 is no valid endpoint for the kubernetes Service; nothing here needs it
                "--endpoint-reconciler-type=none", f"--cert-dir={self._path('apiserver-certs')}",
                # Towards a kubelet (`kubectl logs`, exec): kubeadm's defaults. The Node's InternalIP
                # first (1.20's default puts Hostname first: a node's name the host may not resolve);
                # its own client certificate (without one a kubelet with anonymous auth off says 401).
                "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
                f"--kubelet-client-certificate={self.kubelet_client[0]}",
                f"--kubelet-client-key={self.kubelet_client[1]}",
                *(["--enable-bootstrap-token-auth"] if self.tls_bootstrap else [])]

    def _controller_manager_cmd(self) -> List[str]:
        cert, key = self.cm_serving
        cfg = self.cm_kubeconfig
        return [os.path.join(self.bin_dir, "kube-controller-manager"),
                f"--kubeconfig={cfg}", f"--authentication-kubeconfig={cfg}", f"--authorization-kubeconfig={cfg}",
                "--bind-address=127.0.0.1", f"--secure-port={self.cm_port}",
                "--port=0",  # no insecure port (1.20's default is 10252)
                f"--tls-cert-file={cert}", f"--tls-private-key-file={key}",
                "--controllers=*", "--use-service-account-credentials", "--leader-elect=false",
                f"--service-account-private-key-file={self.sa_key}", f"--root-ca-file={self.ca_path}",
                f"--cert-dir={self._path('controller-manager-certs')}", *self.controller_manager_args,
                *([f"--cluster-signing-cert-file={self.ca_path}", f"--cluster-signing-key-file={self.ca.key_path}"]
                  if self.tls_bootstrap else [])]

    def _scheduler_cmd(self) -> List[str]:
        cert, key = self.sched_serving
        cfg = self.sched_kubeconfig
        return [os.path.join(self.bin_dir, "kube-scheduler"),
                f"--kubeconfig={cfg}", f"--authentication-kubeconfig={cfg}", f"--authorization-kubeconfig={cfg}",
                "--bind-address=127.0.0.1", f"--secure-port={self.sched_port}",
                "--port=0",  # no insecure port (1.20's default is 10251)
                f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", "--leader-elect=false"]

    def _check_running(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}): {self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            with open(self._path(f"{name}.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def _wait(self, what: str, check, timeout: float) -> None:
        """wait_for (the one polling loop) with what a cluster being started adds: a process that
        exits fails the wait at once with its log's tail, and a server not listening yet (refused,
        timed out) is "not yet"."""
        def ready():
            self._check_running()
            try:
                return check()
            except (requests.ConnectionError, requests.Timeout):
                return False

        wait_for(ready, f"{what} (the processes' logs are in {self.base_dir})", timeout, interval=0.2)

    def _healthy(self, base: str, path: str) -> bool:
        r = requests.get(base + path, verify=self.ca_path, cert=self.admin_cert, timeout=5)
        return r.status_code == 200 and r.text.strip() == "ok"

    def start(self) -> "KubeCluster":
        t0 = time.monotonic()
        try:
            self._make_pki()
            self._spawn("etcd", self._etcd_cmd())
            self._spawn("kube-apiserver", self._apiserver_cmd())
            self._wait("kube-apiserver /readyz", lambda: self._healthy(self.url, "/readyz"), 90)
            # What a kubelet's webhook authorization lets the API server do there (nodes/log,
            # nodes/proxy...): the bootstrap policy's role for it, as the kubelet authentication and
            # authorization docs ask (kubeadm 1.20 puts this user in system:masters instead).
            self.kubectl("create", "clusterrolebinding", KUBELET_CLIENT_USER, "--clusterrole=system:kubelet-api-admin",
                         f"--user={KUBELET_CLIENT_USER}")
            self._spawn("kube-controller-manager", self._controller_manager_cmd())
            self._wait("kube-controller-manager /healthz",
                       lambda: self._healthy(f"https://127.0.0.1:{self.cm_port}", "/healthz"), 60)
            self._spawn("kube-scheduler", self._scheduler_cmd())
            self._wait("kube-scheduler /healthz",
                       lambda: self._healthy(f"https://127.0.0.1:{self.sched_port}", "/healthz"), 60)
            if self.crds:
                self.crd_names = self.install_crds(self.crds)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def install_crds(self, directory: str, timeout: float = 60) -> List[str]:
        """kubectl apply --validate=false the *.yaml of ``directory`` (1.20's CRD schema lacks
        x-kubernetes-validations: the API server drops those rules) and wait until every CRD is
        Established; returns their names."""
        files = sorted(glob.glob(os.path.join(directory, "*.yaml")))
        out = self.kubectl("apply", "--validate=false", "-o", "name", *[a for f in files for a in ("-f", f)])
        names = [line.split("/", 1)[1] for line in out.stdout.split() if "/" in line]
        self._wait("CRDs Established", lambda: all(self._established(n) for n in names), timeout)
        return names

    def _established(self, name: str) -> bool:
        r = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conds = (r.json().get("status") or {}).get("conditions") or [] if r.status_code == 200 else []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conds)

    def create_namespace(self, name: str, timeout: float = 60) -> str:
        """A new namespace, once pods can be created in it: the controller manager has made its
        default ServiceAccount and that account's token (1.20's ServiceAccount admission refuses
        a pod that mounts the token until then: "No API token found for service account").
        One of that name still terminating (an earlier module's, deleted by reset()) is waited out."""
        def not_terminating() -> bool:
            r = self.get(f"/api/v1/namespaces/{name}")
            return r.status_code == 404 or not r.json()["metadata"].get("deletionTimestamp")
        self._wait(f"namespace {name} of an earlier module gone", not_terminating, timeout)
        with self.session() as s:
            r = s.post(f"{self.url}/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                               "metadata": {"name": name}}, timeout=30)
        if r.status_code != 201:
            raise RuntimeError(f"creating namespace {name}: HTTP {r.status_code}: {r.text[:300]}")

        def ready() -> bool:
            r = self.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
            return r.status_code == 200 and bool(r.json().get("secrets"))
        self._wait(f"namespace {name}'s default ServiceAccount and its token", ready, timeout)
        return name

    def apply_examples(self) -> None:
        """examples/state's pools, MachineConfigs and MachineConfiguration, as an admin applies them."""
        for sub in ("machineconfigpools", "machineconfigs", "machineconfiguration.yaml"):
            self.kubectl("apply", "-f", os.path.join(EXAMPLES, sub))

    def ready_for_server(self, user: str, *objects: dict) -> "KubeCluster":
        """What a module's server finds, as an admin sets it up: examples/state's objects and
        ``objects`` applied, ``user`` bound as deploy/rbac.yaml's server."""
        self.apply_examples()
        if objects:
            self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                               "items": list(objects)}))
        self.bind_server_user(user)
        return self

    def bind_server_user(self, user: str, namespace_role: bool = True) -> None:
        """deploy/rbac.yaml applied and ``user`` bound to its ClusterRole and (``namespace_role``)
        its namespaced Roles for node state and for node credentials (a namespace of their own):
        the server's least privilege, never an admin. Applied, not created: on the worker's shared
        control plane an earlier module may have bound the same user (reset() keeps RBAC's objects)."""
        def binding(kind, role_kind, role, namespace=None):
            meta = {"name": user, **({"namespace": namespace} if namespace else {})}
            return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
        bindings = [binding("ClusterRoleBinding", "ClusterRole", "node-config-server")]
        if namespace_role:
            bindings += [binding("RoleBinding", "Role", ns, ns) for ns in SERVER_NAMESPACES]
        # The cluster's client CA, which kubelet certificates are verified against (deploy/rbac.yaml's
        # RoleBinding in kube-system to the standard extension-apiserver-authentication-reader Role).
        bindings.append(binding("RoleBinding", "Role", "extension-apiserver-authentication-reader", "kube-system"))
        self.kubectl("apply", "-f", os.path.join(REPO, "deploy", "rbac.yaml"), "-f", "-",
                     input=json.dumps({"apiVersion": "v1", "kind": "List", "items": bindings}))

    def reset(self) -> None:
        """Remove what earlier tests made, so that a module finds this control plane as a new one,
        but for RBAC's objects and the CRDs start() installed: every workload and pod (forced: no
        kubelet would ever confirm a graceful delete), every Event, the objects in the server's
        namespaces (SERVER_NAMESPACES; the namespaces and their Roles stay), the Nodes' leases,
        every object of CLUSTER_KINDS, every CRD a test added, and every namespace a new cluster
        has not (not waited for: create_namespace waits for one of the same name to go)."""
        with self.session() as s:  # one connection, not ten kubectl processes (tests/helpers/kube_reset.py)
            kube_reset.reset(s, self.url, CLUSTER_KINDS, keep_crds=self.crd_names,
                             system_namespaces=SYSTEM_NAMESPACES, server_namespaces=SERVER_NAMESPACES)

    def kubectl(self, *args: str, kubeconfig: Optional[str] = None, check: bool = True,
                input: Optional[str] = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run kubectl against this cluster (as admin unless ``kubeconfig``)."""
        cmd = [KUBECTL, f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args]
        out = subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=timeout)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()}")
        return out

    def session(self, cert: Optional[Tuple[str, str]] = None) -> requests.Session:
        """A requests session to the API server (CA verified), as admin unless ``cert``."""
        s = requests.Session()
        s.trust_env = False  # else REQUESTS_CA_BUNDLE (or a proxy) from the environment wins
        s.verify = self.ca_path
        s.cert = cert or self.admin_cert
        return s

    def get(self, path: str, **kw) -> requests.Response:
        return requests.get(self.url + path, verify=self.ca_path, cert=self.admin_cert, timeout=10, **kw)

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM each component's process group (scheduler first, etcd last), SIGKILL
        what is still there after ``timeout``; every process is reaped."""
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, None)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            try:  # the group's other members, if a component left any
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> "KubeCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
