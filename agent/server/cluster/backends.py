"""Where a server keeps node state and reads its state objects: the embedded default (SQLite in
the data directory, one process group) or etcd (several replicas behind one address).

Node state (``nodes.db``: reports, credentials, proofs, history) lives in ``--data-dir``
(default /var/lib/node-config-server), never in the state directory as such: that one holds
the MCO-shaped YAML an admin edits (or a checkout's examples/state). An admin may give the same
directory to both (the shipped unit does: /var/lib/node-config-server). A ``nodes.db`` that a
version before ``--data-dir`` left in the state directory is used where it is, with a warning
saying how to move it (``nodes_db_dir``): it holds the nodes' credentials, so starting afresh
beside it would lock every node out.

``--store`` selects it: ``sqlite`` (default) or ``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]``
(``etcd+https://`` with ``--etcd-ca``/``--etcd-cert``/``--etcd-key`` for TLS and client
certificates). With etcd, state objects come from ``--state DIR`` when given (every replica
reads its own copy of the same files), else from etcd itself (published with
``node-config-server load-state``). ``kubernetes`` keeps node state in the Kubernetes API
(``kube.nodestore.KubeNodeStore``: MachineConfigNodes, ConfigMaps, Secrets and Leases in
``--namespace``), found by ``--kubeconfig`` or in-cluster; it is the default with ``--backend
kubernetes``, so that replicas are stateless, and may also go with the directory backend.
"""

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any, Optional, Tuple

DEFAULT_DATA_DIR = "/var/lib/node-config-server"
DEFAULT_CACHE_DIR = DEFAULT_DATA_DIR + "/etcd-state"
NODES_DB = "nodes.db"
KUBE_STORE = "kubernetes"
DEFAULT_NAMESPACE = "node-config-server"
CREDENTIALS_SUFFIX = "-credentials"  # the node credentials' namespace: "<namespace>-credentials" by default
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class StoreConfig:
    url: str = "sqlite"  # sqlite, etcd://..., or kubernetes (node state in the API)
    ca: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    cache_dir: str = DEFAULT_CACHE_DIR
    replica: str = ""  # this replica's name in views (default: host name and listen port)
    backend: str = "dir"  # dir (state directory or etcd) or kubernetes (objects from the API)
    kubeconfig: Optional[str] = None  # with kubernetes: None = in-cluster
    apiserver_url: Optional[str] = None  # in-cluster at this URL (serve --apiserver-url); None: the Service's
    namespace: Optional[str] = None  # the kubernetes store's (None: the pod's, else DEFAULT_NAMESPACE)
    credentials_namespace: Optional[str] = None  # the node credentials' Secrets (None: "<namespace>-credentials")
    drain: Any = None  # with --backend kubernetes: draincadence.Cadence (None: the MCO's; serve --drain-*)
    prometheus_url: str = ""  # serve --prometheus-url: the pools' alert gates (alertsource.py); "": none

    @property
    def is_kubernetes(self) -> bool:
        return self.backend == "kubernetes"

    @property
    def is_kube_store(self) -> bool:
        return self.url == KUBE_STORE

    @property
    def shared(self) -> bool:
        """Node state outside this host (etcd or the API): no nodes.db, no --data-dir."""
        return self.is_etcd or self.is_kube_store

    def kube_namespace(self, namespace_file: str = NAMESPACE_FILE) -> str:
        """--namespace, else the pod's own namespace (as client-go's in-cluster config reads it),
        else DEFAULT_NAMESPACE."""
        if self.namespace:
            return self.namespace
        try:
            with open(namespace_file, encoding="utf-8") as f:
                found = f.read(256).strip()
        except OSError:
            found = ""
        return found or DEFAULT_NAMESPACE

    def kube_credentials_namespace(self, namespace_file: str = NAMESPACE_FILE) -> str:
        """--credentials-namespace, else ``<namespace>-credentials``: node credentials' Secrets
        apart from the server's own TLS and token Secrets, so the Role that lets the server list
        and watch the ones cannot read the others (deploy/rbac.yaml; docs/security.md)."""
        if self.credentials_namespace:
            return self.credentials_namespace
        derived = self.kube_namespace(namespace_file) + CREDENTIALS_SUFFIX
        if not _dns_label(derived):
            raise ValueError(f"node credentials go to namespace {derived!r}, which is not a namespace name (at most "
                             f"63 characters): name one with --credentials-namespace")
        return derived

    @property
    def is_etcd(self) -> bool:
        return self.url.startswith(("etcd://", "etcd+https://"))

    def check(self) -> Optional[str]:
        """A usage problem, or None."""
        if self.url != "sqlite" and not self.is_etcd and not self.is_kube_store:
            return f"--store {self.url}: expected sqlite, kubernetes or etcd://HOST:PORT[,HOST:PORT...]"
        if self.is_etcd:
            from agent.server.store.etcd.client import parse_store_url

            try:
                parse_store_url(self.url)
            except ValueError as exc:
                return f"--store {exc}"
        for flag, path in (("--etcd-ca", self.ca), ("--etcd-cert", self.cert), ("--etcd-key", self.key)):
            if path and not os.path.isfile(path):
                return f"{flag} {path}: no such file"
        if bool(self.cert) != bool(self.key):
            return "--etcd-cert and --etcd-key go together"
        if self.kubeconfig and not self.is_kubernetes and not self.is_kube_store:
            return "--kubeconfig goes with --backend kubernetes or --store kubernetes"
        problem = self._apiserver_url_problem()
        if problem:
            return problem
        if self.namespace and not self.is_kube_store:
            return "--namespace goes with --store kubernetes (the default with --backend kubernetes)"
        if self.credentials_namespace and not self.is_kube_store:
            return "--credentials-namespace goes with --store kubernetes (the default with --backend kubernetes)"
        if self.credentials_namespace and not _dns_label(self.credentials_namespace):
            return (f"--credentials-namespace {self.credentials_namespace!r}: not a namespace name (lower-case "
                    f"letters, digits and '-', at most 63)")
        if self.namespace and not _dns_label(self.namespace):
            return (f"--namespace {self.namespace!r}: not a namespace name (lower-case letters, digits and '-', "
                    f"at most 63)")
        if self.namespace and not self.credentials_namespace and not _dns_label(self.namespace + CREDENTIALS_SUFFIX):
            return (f"--namespace {self.namespace!r}: node credentials would go to {self.namespace}"
                    f"{CREDENTIALS_SUFFIX}, longer than a namespace name may be (63): name it with "
                    f"--credentials-namespace")
        if self.kubeconfig and not os.path.isfile(self.kubeconfig):
            return f"--kubeconfig {self.kubeconfig}: no such file"
        return None

    def _apiserver_url_problem(self) -> Optional[str]:
        if self.apiserver_url is None:
            return None
        if not self.is_kubernetes and not self.is_kube_store:
            return "--apiserver-url goes with --backend kubernetes or --store kubernetes"
        if self.kubeconfig:
            return "--apiserver-url and --kubeconfig exclude each other: a kubeconfig names its own API server"
        from agent.server.store.kube.client import KubeConfigError, check_apiserver_url

        try:
            check_apiserver_url(self.apiserver_url)
        except KubeConfigError as exc:
            return str(exc)
        return None

    def replica_name(self, listen: str = "") -> str:
        return self.replica or f"{socket.gethostname()}{':' + listen.rsplit(':', 1)[-1] if listen else ''}"


def _dns_label(name: str) -> bool:
    import re

    return bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name))


def nodes_db_dir(data_dir: str, state_dir: Optional[str]) -> str:
    """The directory whose nodes.db a SQLite server uses: ``data_dir``, unless only ``state_dir``
    holds a nodes.db (kept there by a version before --data-dir): that one, with a warning."""
    legacy = os.path.join(state_dir, NODES_DB) if state_dir else ""
    if (not legacy or os.path.exists(os.path.join(data_dir, NODES_DB)) or not os.path.isfile(legacy)
            or os.path.realpath(state_dir or "") == os.path.realpath(data_dir)):
        return data_dir
    logging.getLogger(__name__).warning(
        "%s: node state kept in the state directory by an older version, and none in --data-dir %s: using it "
        "where it is. To move it: stop the server, `mv %s* %s/` (nodes.db with its -wal, -shm and -gen files), "
        "start it again; or pass --data-dir %s", legacy, data_dir, legacy, data_dir, state_dir)
    return state_dir or data_dir


def serve_nodes_dir(data_dir: Optional[str], state_dir: Optional[str], etcd: bool) -> Optional[str]:
    """serve's directory of nodes.db (None with etcd or the API store: ``etcd`` is
    StoreConfig.shared), made (0700) when missing; ValueError names a data directory it cannot use."""
    if etcd:
        return None
    data_dir = data_dir or DEFAULT_DATA_DIR
    where = nodes_db_dir(data_dir, state_dir)
    if where != data_dir:
        return where
    try:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--data-dir {data_dir}: cannot make it ({exc.strerror}); pass --data-dir DIR, a "
                         f"directory of its own for node state (nodes.db)") from None
    if not os.path.isdir(data_dir) or not os.access(data_dir, os.W_OK | os.X_OK):
        raise ValueError(f"--data-dir {data_dir}: not a directory this user may write (nodes.db is kept there)")
    return data_dir


def status_nodes_db(state_dir: Optional[str], data_dir: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """(a usage problem or None, the nodes.db ``status --state`` reads or None: there is none)."""
    if not state_dir:
        return "--data-dir goes with --state DIR (without them, status asks a running server)", None
    if data_dir and not os.path.isdir(data_dir):
        return f"--data-dir {data_dir}: not a directory", None
    db = os.path.join(nodes_db_dir(data_dir or DEFAULT_DATA_DIR, state_dir), NODES_DB)
    return None, db if os.path.exists(db) else None


def etcd_client(cfg: StoreConfig) -> Tuple[Any, str]:
    from agent.server.store.etcd.client import EtcdClient, parse_store_url

    url = parse_store_url(cfg.url)
    return EtcdClient(url.endpoints, ca=cfg.ca, cert=cfg.cert, key=cfg.key), url.prefix


def open_backends(cfg: StoreConfig, state_dir: Optional[str], reload_interval: float,
                  settle: Optional[float] = None, announce: Any = None) -> Tuple[Any, Any]:
    """(node store, state source) for a Cluster; (None, None) means the SQLite default. With the
    Kubernetes backend the state source is the API's (kube.state.KubeStateSource) and node state
    is in the store chosen by --store (the API by default, SQLite in --data-dir, or etcd).
    ``announce``: a state directory's StateWatcher's (whether this process says what it read)."""
    if cfg.is_kubernetes:
        from agent.server.store.kube.client import open_client
        from agent.server.store.kube.state import KubeStateSource

        store = _etcd_store(cfg) if cfg.is_etcd else _kube_store(cfg) if cfg.is_kube_store else None
        return store, KubeStateSource(open_client(cfg.kubeconfig, apiserver_url=cfg.apiserver_url))
    from agent.server.store.statedir.watcher import StateWatcher

    if not cfg.shared:
        return None, (StateWatcher(state_dir, reload_interval, settle, announce) if announce and state_dir else None)
    store = _kube_store(cfg) if cfg.is_kube_store else _etcd_store(cfg)
    if state_dir or cfg.is_kube_store:
        return store, StateWatcher(state_dir, reload_interval, settle, announce)
    from agent.server.store.etcd.state import EtcdStateSource

    return store, EtcdStateSource(store.client, store.prefix, cfg.cache_dir)


def _kube_store(cfg: StoreConfig) -> Any:
    """Node state in the API; its own client (the state source closes its client with it)."""
    from agent.server.store.kube.client import open_client
    from agent.server.store.kube.nodestore import KubeNodeStore

    return KubeNodeStore(open_client(cfg.kubeconfig, apiserver_url=cfg.apiserver_url), cfg.kube_namespace(),
                         credentials_namespace=cfg.kube_credentials_namespace())


def _etcd_store(cfg: StoreConfig) -> Any:
    from agent.server.store.etcd.nodestore import EtcdNodeStore

    client, prefix = etcd_client(cfg)
    return EtcdNodeStore(client, prefix)


def start_writers(cluster: Any, source: Any, drain: Any = None, namespace: str = DEFAULT_NAMESPACE) -> Any:
    """With the Kubernetes backend: start writing pool status, rendered configs and Node
    annotations back to the API (kube_sync.KubeSync), and drain through it (``drain``: the
    drain cadence, draincadence.Cadence; its Events in ``namespace``, the server's); None for the
    other backends."""
    from agent.server.store.kube.state import KubeStateSource

    if not isinstance(source, KubeStateSource):
        return None
    from agent.server.cluster.kube_drain import Drainer
    from agent.server.cluster.kube_nodes import NodeTruth
    from agent.server.cluster.kube_sync import KubeSync

    cluster.drainer = Drainer(source.client, cadence=drain, event_namespace=namespace)
    if hasattr(cluster.store, "makes_mcns"):  # the node store in the API: an MCN is a Node's, made by kube_mcn
        cluster.store.makes_mcns = False
    sync = KubeSync(cluster, source, source.client)
    cluster.drainer.node_cache = sync.node_cache  # the views read each drain's state from the Nodes
    cluster.drainer.on_node_written = sync.note_node  # this process writes the MCN of the drain it moved
    cluster.node_truth = NodeTruth(sync.node_cache, cluster.store)  # pools, counts, drain slots from the Nodes
    from agent.server.cluster.kube_firstboots import FirstBootEvents

    sync.first_boots = FirstBootEvents(cluster, sync, namespace).start()  # failed and stalled first boots' Events

    from agent.server.cluster.kube_undo import forgetting

    cluster.delete_listeners.append(forgetting(sync))  # the admin's delete takes back what a name wrote
    return sync.start()


def alert_source(config: StoreConfig) -> Any:
    """``serve --prometheus-url``'s alerts for the pools' alert gates (alertsource.py); None without it."""
    from agent.server.cluster.alertsource import PrometheusAlerts

    return PrometheusAlerts(config.prometheus_url) if config.prometheus_url else None
