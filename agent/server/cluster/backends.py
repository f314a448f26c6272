"""Where a server keeps node state and reads its state objects: the embedded default (SQLite in
the state directory, one process group) or etcd (several replicas behind one address).

``--store`` selects it: ``sqlite`` (default) or ``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]``
(``etcd+https://`` with ``--etcd-ca``/``--etcd-cert``/``--etcd-key`` for TLS and client
certificates). With etcd, state objects come from ``--state DIR`` when given (every replica
reads its own copy of the same files), else from etcd itself (published with
``node-config-server load-state``).
"""

import os
import socket
from dataclasses import dataclass
from typing import Any, Optional, Tuple

DEFAULT_CACHE_DIR = "/var/lib/node-config-server/etcd-state"


@dataclass(frozen=True)
class StoreConfig:
    url: str = "sqlite"
    ca: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    cache_dir: str = DEFAULT_CACHE_DIR
    replica: str = ""  # this replica's name in views (default: host name and listen port)

    @property
    def is_etcd(self) -> bool:
        return self.url.startswith(("etcd://", "etcd+https://"))

    def check(self) -> Optional[str]:
        """A usage problem, or None."""
        if self.url != "sqlite" and not self.is_etcd:
            return f"--store {self.url}: expected sqlite or etcd://HOST:PORT[,HOST:PORT...]"
        if self.is_etcd:
            from agent.server.store.etcd_client import parse_store_url

            try:
                parse_store_url(self.url)
            except ValueError as exc:
                return f"--store {exc}"
        for flag, path in (("--etcd-ca", self.ca), ("--etcd-cert", self.cert), ("--etcd-key", self.key)):
            if path and not os.path.isfile(path):
                return f"{flag} {path}: no such file"
        if bool(self.cert) != bool(self.key):
            return "--etcd-cert and --etcd-key go together"
        return None

    def replica_name(self, listen: str = "") -> str:
        return self.replica or f"{socket.gethostname()}{':' + listen.rsplit(':', 1)[-1] if listen else ''}"


def etcd_client(cfg: StoreConfig) -> Tuple[Any, str]:
    from agent.server.store.etcd_client import EtcdClient, parse_store_url

    url = parse_store_url(cfg.url)
    return EtcdClient(url.endpoints, ca=cfg.ca, cert=cfg.cert, key=cfg.key), url.prefix


def open_backends(cfg: StoreConfig, state_dir: Optional[str], reload_interval: float,
                  settle: Optional[float] = None) -> Tuple[Any, Any]:
    """(node store, state source) for a Cluster; (None, None) means the SQLite default."""
    if not cfg.is_etcd:
        return None, None
    from agent.server.store.nodestore_etcd import EtcdNodeStore

    client, prefix = etcd_client(cfg)
    store = EtcdNodeStore(client, prefix)
    if state_dir:
        from agent.server.store.watcher import StateWatcher

        return store, StateWatcher(state_dir, reload_interval, settle)
    from agent.server.store.etcd_state import EtcdStateSource

    return store, EtcdStateSource(client, prefix, cfg.cache_dir)
