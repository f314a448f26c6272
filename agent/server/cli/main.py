"""``node-config-server`` command line: serve, render, status, get, describe.

Imports stay lazy so ``node-config-server --version`` is fast. ``get``, ``describe`` and
``status`` (without ``--state``) ask a running server: agent/server/cli/viewcmds.py.
"""

import argparse
import dataclasses
import json
import os
import sys
from typing import List, Optional, Tuple

from agent import __version__
from agent.server.cli.serveargs import (
    BACKENDS,
    PLAIN_PORT,
    TLS_PORT,
    add_approval_args,
    add_drain_args,
    admission,
    check_state_dir,
    checked_serve_args,
    drain_cadence,
    kubelet_client_ca,
    plain_http_warning,
    say_identity,
)
from agent.server.cli.storecmds import (
    add_load_state_parser,
    add_store_args,
    cmd_load_state,
    store_config,
)
from agent.server.cli.viewcmds import add_client_options, add_parsers
from agent.server.cluster.alertsource import Starting, check_url
from agent.server.cluster.backends import DEFAULT_DATA_DIR, NODES_DB, status_nodes_db

EXIT_OK = 0
EXIT_NOT_COMPLETE = 1
EXIT_USAGE = 2
EXIT_INVALID = 65


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="node-config-server",
        description="Cluster side of node-agent: renders pool configs from MachineConfigs, serves them at "
                    "/config/<pool>, gates what new nodes get, tracks node reports and update progress.",
        allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"node-config-server {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = _sub(sub, "serve", help="serve configs and the API (gunicorn)")
    p.add_argument("--state", metavar="DIR", help="state directory (MCO-shaped YAML); optional with "
                                                   "--store etcd://... (then state objects come from etcd)")
    p.add_argument("--data-dir", metavar="DIR", help=f"node state (nodes.db), made if missing; may be the --state "
                                                      f"directory (default: {DEFAULT_DATA_DIR}; unused with etcd)")
    p.add_argument("--listen", default=None, metavar="HOST:PORT",
                   help=f"default 0.0.0.0:{TLS_PORT} with TLS; without TLS 127.0.0.1:{PLAIN_PORT} (plain HTTP "
                        f"stays on loopback unless asked)")
    p.add_argument("--tls-cert", metavar="FILE", help="PEM certificate (chain) for TLS")
    p.add_argument("--tls-key", metavar="FILE", help="PEM private key for TLS")
    p.add_argument("--token-file", metavar="FILE",
                   help="the bootstrap token: registers new nodes (each then gets its own credential), fetches "
                        "configs with secrets, reads the API")
    p.add_argument("--admin-token-file", metavar="FILE",
                   help="the admin token: deletes nodes, registers a node again, releases any drain lease")
    add_approval_args(p)
    p.add_argument("--serve-secrets-anonymously", action="store_true",
                   help="serve configs that carry secrets (pull secret, kubeconfig) without a credential, as the "
                        "MCS does (then only the network protects them)")
    p.add_argument("--backend", choices=BACKENDS, default="dir",
                   help="where objects come from: dir (the default), the state directory (--state), or etcd "
                        "with --store etcd://...; kubernetes: MachineConfigs, pools and the MachineConfiguration "
                        "from the Kubernetes API, with pool status, rendered configs and Node annotations written "
                        "back (docs/kubernetes.md)")
    p.add_argument("--kubeconfig", metavar="FILE", default=None,
                   help="with --backend kubernetes or --store kubernetes: the kubeconfig to use (its current "
                        "context); without it, the pod's service account (in-cluster)")
    p.add_argument("--apiserver-url", metavar="URL", default=None,
                   help="without --kubeconfig: the API server the pod's service account talks to, https://HOST:PORT "
                        "(the MCS's flag name; a hostNetwork pod cannot count on the kubernetes Service's "
                        "ClusterIP); default: KUBERNETES_SERVICE_HOST/PORT")
    p.add_argument("--namespace", metavar="NS", default=None,
                   help="with --store kubernetes: the namespace of the node state's ConfigMaps and Leases "
                        "(default: the pod's own namespace, else node-config-server)")
    p.add_argument("--credentials-namespace", metavar="NS", default=None,
                   help="with --store kubernetes: the namespace of the node credentials' Secrets, kept apart from "
                        "the server's own TLS and token Secrets (default: NAMESPACE-credentials; deploy/rbac.yaml)")
    p.add_argument("--workers", type=int, default=None, help="gunicorn worker processes (default: one per CPU, 2..8)")
    p.add_argument("--worker-class", choices=("gevent", "gthread"), default="gevent",
                   help="gevent (default): one greenlet per connection, with the timeouts below; gthread: "
                        "gunicorn's threads (--threads per worker), without them (docs/security.md)")
    p.add_argument("--threads", type=int, default=32, help="threads per worker with --worker-class gthread "
                                                           "(default: 32)")
    _timeout_args(p)
    add_drain_args(p)
    p.add_argument("--prometheus-url", default=None, metavar="URL",
                   help="a Prometheus whose firing alerts hold the pools with an alert gate (the pool annotation "
                        "node-config-server.openshift.io/alert-gate: docs/rollout.md, \"Alert gates\")")
    p.add_argument("--lease-ttl", type=float, default=600.0, metavar="SECONDS",
                   help="drain lease lifetime unless renewed (default: 600)")
    p.add_argument("--firstboot-deadline", type=_deadline, default=None, metavar="DURATION",
                   help="a first boot with no report for this long (and not done) is shown FirstBootStalled: "
                        "seconds or a duration such as 30m (default: 30m; a pool's annotation "
                        "node-agent.io/firstboot-deadline overrides it; docs/operations.md)")
    p.add_argument("--settle-seconds", type=float, default=10.0, metavar="SECONDS",
                   help="a change of the state directory is read only once no file has changed for this long, "
                        "so a file rewritten in place (with pauses) is never read half-written (default: 10)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument("--access-log", default=None, metavar="FILE", help="gunicorn access log ('-' for stderr)")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="with etcd state objects: where this replica keeps its copy of them "
                        "(default /var/lib/node-config-server/etcd-state)")
    add_store_args(p)
    add_load_state_parser(sub)

    _render_and_status_parsers(sub)
    add_parsers(sub, _sub)
    from agent.server.cli import admincmds

    admincmds.add_parsers(sub, _sub, add_client_options)
    from agent.server.cli import rollbackcmd

    rollbackcmd.add_parser(sub, _sub, add_client_options)
    parser.command_parsers = sub.choices  # type: ignore[attr-defined]  # a bad option shows its command's usage
    return parser


def _render_and_status_parsers(sub) -> None:
    """``render`` and ``status``: what a state directory renders to, and the cluster's progress."""
    p = _sub(sub, "render", help="render every pool and print its rendered config name")
    p.add_argument("--state", required=True, metavar="DIR")
    p.add_argument("--json", action="store_true", help="print {pool: {name, sources}} as JSON")
    p.add_argument("-o", "--output", choices=("json", "yaml"), default=None, metavar="FORMAT",
                   help="json or yaml: {pool: {name, sources}} (--json is -o json)")

    p = _sub(sub, "status", help="pools and cluster update progress (exit 0 complete; 1 not complete: updating, "
                                 "a pool degraded or a state problem, each named)",
             description="Asks a running server; with --state DIR, reads a state directory instead "
                         "(never creating nodes.db in it).")
    p.add_argument("--state", metavar="DIR", help="read this state directory instead of asking a server")
    p.add_argument("--data-dir", metavar="DIR", help=f"with --state: the server's data directory, whose nodes.db "
                                                      f"is read, never made (default: {DEFAULT_DATA_DIR})")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-o", "--output", choices=("json", "yaml"), default=None, metavar="FORMAT",
                   help="json or yaml: the progress and the pools (as node-agent's -o)")
    add_client_options(p)


def _timeout_args(p: argparse.ArgumentParser) -> None:
    """The gevent worker's per-connection deadlines (agent/server/http/gevent_worker.py)."""
    for flag, default, what in (
            ("--tls-handshake-timeout", 10.0, "a TLS handshake must be done within this after the accept"),
            ("--header-timeout", 10.0, "a request line and headers must be in within this after their first byte"),
            ("--body-timeout", 30.0, "a request body must be in within this after the headers (else 408)"),
            ("--write-timeout", 60.0, "a client must take each 256 KiB of a response within this"),
            ("--idle-timeout", 30.0, "a kept-alive connection is closed after this without a request")):
        p.add_argument(flag, type=_seconds, default=default, metavar="SECONDS", help=f"{what} (default: {default:g})")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds, more than 0 and at most 3600")
    return value


def _deadline(text: str) -> float:
    from agent.server.rollout import firstboots  # the parse the pool annotation's check uses too

    try:
        return firstboots.parse_deadline(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _sub(sub, name: str, **kwargs) -> argparse.ArgumentParser:
    # No abbreviations: `--stat` must not quietly mean `--state`.
    return sub.add_parser(name, allow_abbrev=False, **kwargs)


def _err(msg: str) -> None:
    print(f"node-config-server: {msg}", file=sys.stderr)


def _print_problems(problems) -> None:
    for p in problems:
        _err(f"state: {p}")


def cmd_serve(args: argparse.Namespace) -> int:
    store = store_config(args)
    try:
        token, admin_token, host, port = checked_serve_args(args, store)
        store = dataclasses.replace(store, drain=drain_cadence(args), prometheus_url=check_url(args.prometheus_url))
    except ValueError as exc:
        _err(str(exc))
        return getattr(exc, "exit_code", EXIT_USAGE)  # serveargs.ListenError: 69 for an address in use
    from agent.server.store.errors import StoreSetupError

    try:
        said = _first_render(args, store)
        client_ca = kubelet_client_ca(args, store)
    except StoreSetupError as exc:  # one line that says what to do, not an internal error
        _err(f"serve: {getattr(exc, 'message', None) or exc}")
        return EXIT_USAGE
    except ValueError as exc:
        _err(str(exc))
        return EXIT_USAGE
    return _run_gunicorn(args, store, token, admin_token, host, port, client_ca, said)


def _first_render(args: argparse.Namespace, store) -> str:
    """Render, migrate the database and report state problems once, before any worker starts;
    the state's signature, which the workers then do not say again (saidonce.py)."""
    import logging

    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from agent.server.cluster.backends import open_backends
    from agent.server.cluster.service import Cluster

    node_store, source = open_backends(store, args.state, 1.0, args.settle_seconds)
    db_path = os.path.join(args.nodes_dir, NODES_DB) if args.nodes_dir else None
    cluster = Cluster(args.state, db_path=db_path, lease_ttl=args.lease_ttl, store=node_store, watcher=source,
                      alert_source=Starting() if store.prometheus_url else None)  # no thread before the fork
    st = cluster.watcher.current()
    if not getattr(cluster.watcher, "logs_problems", False):  # a state directory's watcher has logged them
        _print_problems(st.problems)
    cluster.store.close()
    for closable in (source, getattr(node_store, "client", None)):
        if closable is not None:
            closable.close()
    return st.signature


def _run_gunicorn(args: argparse.Namespace, store, token: str, admin_token: str, host: str, port: int,
                  client_ca: Tuple[Optional[str], str] = (None, ""), said: str = "") -> int:
    import logging
    import shutil

    from agent.server.http.app import MAX_HOLD, App
    from agent.server.http.gunicorn_app import ServerApplication, options
    from agent.server.http.limits import Limits
    from agent.server.http.metrics import make_dir

    metrics_dir = make_dir()  # prometheus-client's multiprocess directory, shared by the workers
    if said:
        from agent.server.http.saidonce import said_once

        said_once(metrics_dir)(said)  # _first_render said what the state has: no worker says it again
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    import dataclasses

    store = dataclasses.replace(store, replica=store.replica_name(f"{host}:{port}"))
    app = App(args.state, token=token, lease_ttl=args.lease_ttl, metrics_dir=metrics_dir, store=store,
              admin_token=admin_token, anonymous_secrets=args.serve_secrets_anonymously, settle=args.settle_seconds,
              data_dir=args.nodes_dir, firstboot_deadline=args.firstboot_deadline)
    app.auth.admission = admission(args)
    # Long polls hold a greenlet each under gevent; under gthread they would hold a thread: none there.
    app.max_hold = MAX_HOLD if args.worker_class == "gevent" else 0.0
    app.forwarded_allow = tuple(a.strip() for a in args.forwarded_allow_ips.split(",") if a.strip())
    say_identity(app, args, store, token, admin_token, client_ca)
    app.plain_http_note = plain_http_warning(token, args.tls_cert)
    if app.plain_http_note:
        logging.getLogger(__name__).warning("%s", app.plain_http_note)
    if not token and not admin_token:
        logging.getLogger(__name__).warning(
            "no --token-file or --admin-token-file: anyone who can reach the server may register nodes, report "
            "for nodes that never registered and read the API; configs with secrets are withheld%s",
            " (no: --serve-secrets-anonymously)" if args.serve_secrets_anonymously else "")
    limits = Limits(handshake=args.tls_handshake_timeout, header=args.header_timeout, body=args.body_timeout,
                    write=args.write_timeout, idle=args.idle_timeout)
    opts = options(bind, args.tls_cert, args.tls_key, args.workers, args.threads, args.log_level, args.access_log,
                   worker_class=args.worker_class, limits=limits, client_ca=client_ca[0],
                   forwarded_allow_ips=args.forwarded_allow_ips)
    logging.getLogger(__name__).info("node-config-server %s on %s://%s (state %s)", __version__,
                                     "https" if args.tls_cert else "http", bind, args.state)
    try:
        ServerApplication(app, opts).run()
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    problem = check_state_dir(args.state)
    if problem:
        _err(problem)
        return EXIT_USAGE
    from agent.server.rollout.render import render_pool
    from agent.server.store.stateformat import load_state

    st = load_state(args.state)
    _print_problems(st.problems + [p for found in st.warnings.values() for p in found])  # warnings: exit 0
    out = {name: render_pool(pool, st.machine_configs) for name, pool in sorted(st.pools.items())}
    if args.json or args.output:
        from agent.server.cli.views import dump

        doc = {n: {"name": r.name, "sources": list(r.sources)} for n, r in out.items()}
        sys.stdout.write(dump(doc, args.output) if args.output else json.dumps(doc, indent=1) + "\n")
    else:
        for name, r in out.items():
            print(f"{name}\t{r.name}")
    return EXIT_INVALID if st.problems else EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    if not args.state and not args.data_dir:
        from agent.server.cli.viewcmds import cmd_status_remote

        return cmd_status_remote(args)
    problem, db = status_nodes_db(args.state, args.data_dir)
    problem = problem or check_state_dir(args.state)
    if problem:
        _err(problem)
        return EXIT_USAGE
    import tempfile

    from agent.server.cluster.service import Cluster

    with tempfile.TemporaryDirectory(prefix="node-config-server-status-") as scratch:
        # No nodes.db: judge from the objects alone, in a scratch database (status writes nothing).
        cluster = Cluster(args.state, db_path=db or os.path.join(scratch, NODES_DB))
        try:
            return _print_status(args, cluster)
        finally:
            cluster.db.close()


def _print_status(args: argparse.Namespace, cluster) -> int:
    import time

    from agent.server.cli.viewcmds import render_status

    progress = cluster.cluster()
    views = cluster.pool_views()  # metadata.creationTimestamp: the object's, else the store's first record
    if args.output:
        from agent.server.cli.views import dump

        sys.stdout.write(dump(dict(progress, items=list(views.values())), args.output))
    elif args.json:
        out = dict(progress)
        out["items"] = list(views.values())
        print(json.dumps(out, indent=1, sort_keys=True))
    else:
        sys.stdout.write(render_status(progress, list(views.values()), time.time()))
    return EXIT_OK if progress["complete"] else EXIT_NOT_COMPLETE


def _parse(parser: argparse.ArgumentParser, argv: Optional[List[str]]) -> argparse.Namespace:
    """``parse_args``, but an option the command does not know gets the command's own usage
    (``node-config-server get: error: unrecognized arguments: --bogus``), not the top-level one."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = getattr(parser, "command_parsers", {}).get(args.command)
        (command or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from agent.server.cli.admincmds import cmd_approve, cmd_delete
    from agent.server.cli.client import ClientError
    from agent.server.cli.rollbackcmd import cmd_ack, cmd_rollback
    from agent.server.cli.viewcmds import cmd_describe, cmd_get
    from agent.server.store.sqlite.db import DatabaseUnusable

    handler = {"serve": cmd_serve, "render": cmd_render, "status": cmd_status, "get": cmd_get,
               "describe": cmd_describe, "load-state": cmd_load_state, "delete": cmd_delete,
               "approve": cmd_approve, "rollback": cmd_rollback, "ack": cmd_ack}[args.command]
    try:
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, with the status a shell gives SIGPIPE.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 128 + 13
    except (ClientError, DatabaseUnusable) as exc:
        _err(f"{args.command}: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("NODE_AGENT_DEBUG"):
            raise
        _err(f"{args.command}: internal error: {type(exc).__name__}: {exc} (set NODE_AGENT_DEBUG=1 for a traceback)")
        return 70


if __name__ == "__main__":
    sys.exit(main())
