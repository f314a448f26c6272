"""The command-line side of the shared store: ``serve --store ...`` options and ``load-state``."""

import argparse
import sys
from typing import Optional

from agent.server.cluster.backends import DEFAULT_CACHE_DIR, KUBE_STORE, StoreConfig


def add_store_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("shared store (several replicas)")
    g.add_argument("--store", default=None, metavar="URL",
                   help="sqlite (the default: nodes.db in --data-dir, one server), etcd://HOST:PORT[,HOST:PORT...]"
                        "[/PREFIX] (etcd+https:// for TLS) or kubernetes (the default with --backend kubernetes: "
                        "MachineConfigNodes, ConfigMaps, Secrets and Leases in --namespace): node reports, proofs "
                        "and drain leases shared by every replica")
    g.add_argument("--etcd-ca", metavar="FILE", help="CA bundle that signed the etcd members' certificates")
    g.add_argument("--etcd-cert", metavar="FILE", help="client certificate for etcd")
    g.add_argument("--etcd-key", metavar="FILE", help="client key for etcd")


def add_load_state_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("load-state", allow_abbrev=False,
                       help="validate a state directory and publish it to the etcd store in one switch "
                            "(a set with any problem is refused whole)")
    p.add_argument("directory", metavar="DIR", help="MCO-shaped YAML (machineconfigpools/, machineconfigs/, ...)")
    add_store_args(p)


def store_config(args: argparse.Namespace) -> StoreConfig:
    backend = getattr(args, "backend", "dir")
    # With the API as the source, node state goes there too unless asked otherwise: replicas
    # then keep nothing of their own (issue 29).
    url = args.store or (KUBE_STORE if backend == "kubernetes" else "sqlite")
    return StoreConfig(url=url, ca=args.etcd_ca, cert=args.etcd_cert, key=args.etcd_key,
                       cache_dir=getattr(args, "cache_dir", None) or DEFAULT_CACHE_DIR,
                       backend=backend, kubeconfig=getattr(args, "kubeconfig", None),
                       apiserver_url=getattr(args, "apiserver_url", None),
                       namespace=getattr(args, "namespace", None),
                       credentials_namespace=getattr(args, "credentials_namespace", None))


def check_serve_args(args: argparse.Namespace, cfg: StoreConfig) -> Optional[str]:
    problem = cfg.check()
    if problem:
        return problem
    if cfg.is_kubernetes:
        if args.state:
            return ("--state and --backend kubernetes exclude each other: with the Kubernetes backend, objects come "
                    "from the API (kubectl apply them)")
    elif not cfg.is_etcd and not args.state:
        return "--state DIR is required (with --store etcd://..., state objects may come from etcd instead)"
    return None


def cmd_load_state(args: argparse.Namespace) -> int:
    from agent.server.store.etcd.client import EtcdUnavailable
    from agent.server.store.etcd.state import StateRefused, publish

    cfg = store_config(args)
    if not cfg.is_etcd:
        print("node-config-server: load-state: --store etcd://HOST:PORT[,...] is required (SQLite servers read "
              "--state DIR directly)", file=sys.stderr)
        return 2
    problem = cfg.check()
    if problem:
        print(f"node-config-server: {problem}", file=sys.stderr)
        return 2
    from agent.server.cluster.backends import etcd_client

    client, prefix = etcd_client(cfg)
    try:
        gen, changed = publish(client, prefix, args.directory)
    except StateRefused as exc:
        for p in exc.problems:
            print(f"node-config-server: state: {p}", file=sys.stderr)
        print(f"node-config-server: load-state: {len(exc.problems)} problem(s) in {args.directory}; nothing was "
              f"published, the replicas keep serving the current state", file=sys.stderr)
        return 65
    except (OSError, ValueError) as exc:
        print(f"node-config-server: load-state: {exc}", file=sys.stderr)
        return 65 if isinstance(exc, ValueError) else 66
    except EtcdUnavailable as exc:
        print(f"node-config-server: load-state: {exc}; nothing was published", file=sys.stderr)
        return 69
    finally:
        client.close()
    print(f"state generation {gen} {'published' if changed else 'already current'} at {cfg.url}")
    return 0
