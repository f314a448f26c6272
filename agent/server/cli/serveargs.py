"""``serve``'s command line checked before anything starts: every problem is a ValueError naming
the flag (exit 2; a ``--listen`` address another process holds: exit 69, ``ListenError``). Kept
apart from main.py, which parses and dispatches."""

import argparse
import os
from typing import Optional, Tuple

from agent.server.cli.storecmds import check_serve_args
from agent.server.cluster.backends import serve_nodes_dir

TLS_PORT = 22623
PLAIN_PORT = 22624
BACKENDS = ("dir", "kubernetes")


def parse_listen(text: str) -> Tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, e.g. 0.0.0.0:{TLS_PORT}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


EXIT_ADDRESS_IN_USE = 69  # EX_UNAVAILABLE: the address serve must take is another process's


class ListenError(ValueError):
    """The ``--listen`` address cannot be taken; ``exit_code``: 69 in use, 2 not this process's."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def check_listen(host: str, port: int, default: bool = False) -> None:
    """Bind ``host:port`` as gunicorn will (SO_REUSEADDR: a closed connection's TIME_WAIT is no
    obstacle) and let it go: a second ``serve`` on a busy port is told so before it logs that it
    serves, instead of gunicorn's five retries and exit 1. (The port can still be taken between
    this and gunicorn's bind; gunicorn then fails as it always did.)"""
    import errno
    import socket

    where = (f"[{host}]:{port}" if ":" in host else f"{host}:{port}") + (" (the default)" if default else "")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"--listen {where}: the address is in use: another process listens there (another "
                              f"node-config-server? ss -ltnp 'sport = :{port}' names it)\nwhat to do: stop that "
                              f"process, or serve on a free port with --listen HOST:PORT", EXIT_ADDRESS_IN_USE) from None
        raise ListenError(f"--listen {where}: cannot listen there: {exc.strerror or exc}\nwhat to do: give an "
                          f"address of this machine and a port above 1023 (below it needs root or "
                          f"CAP_NET_BIND_SERVICE)", 2) from None


def check_state_dir(path: str) -> Optional[str]:
    if not os.path.isdir(path):
        return f"--state {path}: not a directory (it holds machineconfigpools/, machineconfigs/, ...)"
    return None


def read_token(flag: str, path: Optional[str]) -> Optional[str]:
    """The token in ``path`` (None without one); ValueError names the flag and the problem."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise ValueError(f"{flag} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{flag} {path}: not text (UTF-8)") from None
    if not token:
        raise ValueError(f"{flag} {path}: the file is empty")
    return token


def checked_serve_args(args: argparse.Namespace, store) -> Tuple[str, str, str, int]:
    """(bootstrap token, admin token, host, port) of a usable command line; ValueError(what is
    wrong) otherwise (exit 2)."""
    problem = check_serve_args(args, store) or (check_state_dir(args.state) if args.state else None)
    if problem:
        raise ValueError(problem)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    for f in (args.tls_cert, args.tls_key):
        if f and not os.path.isfile(f):
            raise ValueError(f"{f}: no such file")
    token = read_token("--token-file", args.token_file)
    admin_token = read_token("--admin-token-file", args.admin_token_file)
    if token and admin_token and token == admin_token:
        raise ValueError("--admin-token-file holds the same token as --token-file: the admin token must differ "
                         "from the bootstrap token every node carries")
    host, port = parse_listen(args.listen or (f"0.0.0.0:{TLS_PORT}" if args.tls_cert else f"127.0.0.1:{PLAIN_PORT}"))
    if args.lease_ttl <= 0:
        raise ValueError("--lease-ttl must be positive")
    admission(args)  # the approval flags are checked here (exit 2), used in _run_gunicorn
    if args.settle_seconds < 0:
        raise ValueError("--settle-seconds must be 0 or more")
    if args.worker_class == "gevent":
        try:
            import gevent  # noqa: F401
        except ImportError:
            raise ValueError("--worker-class gevent (the default) needs the gevent package (pip install gevent; "
                             "RPM: python3-gevent): install it, or pass --worker-class gthread, which has no "
                             "per-connection timeouts (docs/security.md, \"Timeouts\")")
    check_listen(host, port, default=not args.listen)  # before the data directory: a busy port makes nothing
    args.nodes_dir = serve_nodes_dir(args.data_dir, args.state, store.shared)  # checked last: made if missing
    return token, admin_token, host, port


def add_approval_args(p: argparse.ArgumentParser) -> None:
    """serve's approval and registration-bound flags (docs/security.md "Identity")."""
    p.add_argument("--auto-approve", metavar="REGEX", default=None,
                   help="approve a newly registered name at once when the whole name matches REGEX (Python "
                        "syntax), e.g. 'worker-[0-9]+', or '.*' for every name; by default a new name counts for "
                        "nothing until the admin runs `approve node` (docs/security.md \"Identity\")")
    p.add_argument("--max-pending", type=int, default=None, metavar="N",
                   help="at most N registrations wait for approval, counted in the store (every replica); more "
                        "answer 429 (default: 100)")
    p.add_argument("--max-unvetted", type=int, default=None, metavar="N",
                   help="at most N registered names no admin approved (pending or approved by --auto-approve), "
                        "counted in the store (every replica); more answer 429 (default: 5000)")
    p.add_argument("--max-pending-per-address", type=int, default=None, metavar="N",
                   help="at most N of the pending registrations from one client address (X-Forwarded-For only from "
                        "--forwarded-allow-ips), so a flood from one place cannot fill --max-pending (default: 20)")
    p.add_argument("--kubelet-client-ca", metavar="FILE", default=None,
                   help="the CA bundle (PEM) that signs the kubelets' client certificates: a node presenting one for "
                        "its own name (CN system:node:NAME, O system:nodes) on the TLS listener proves its name; with "
                        "--backend kubernetes the API server's published one (kube-system/"
                        "extension-apiserver-authentication) by default")
    p.add_argument("--forwarded-allow-ips", metavar="IPS", default="127.0.0.1",
                   help="comma-separated proxies whose X-Forwarded-For names a registration's address (gunicorn's "
                        "forwarded_allow_ips; '*' trusts every peer; default: 127.0.0.1)")
    p.add_argument("--register-rate", type=float, default=None, metavar="PER_SECOND",
                   help="registrations a second per server process, a token bucket (default: 20)")
    p.add_argument("--register-burst", type=int, default=None, metavar="N",
                   help="registrations at once before --register-rate applies (default: 200)")


def admission(args: argparse.Namespace):
    """serve's approval rules (identity.Admission); ValueError names a bad flag."""
    import re

    from agent.server.rollout import identity

    pattern = None
    if args.auto_approve is not None:
        try:
            pattern = re.compile(args.auto_approve)
        except re.error as exc:
            raise ValueError(f"--auto-approve {args.auto_approve!r}: not a regular expression ({exc})") from None
    max_pending = identity.DEFAULT_MAX_PENDING if args.max_pending is None else args.max_pending
    rate = identity.DEFAULT_REGISTER_RATE if args.register_rate is None else args.register_rate
    burst = identity.DEFAULT_REGISTER_BURST if args.register_burst is None else args.register_burst
    max_unvetted = identity.DEFAULT_MAX_UNVETTED if args.max_unvetted is None else args.max_unvetted
    per_address = getattr(args, "max_pending_per_address", None)
    per_address = identity.DEFAULT_MAX_PER_ADDRESS if per_address is None else per_address
    if max_pending < 0:
        raise ValueError("--max-pending must be 0 or more")
    if per_address < 0:
        raise ValueError("--max-pending-per-address must be 0 or more")
    if max_unvetted < 0:
        raise ValueError("--max-unvetted must be 0 or more")
    if not rate > 0:
        raise ValueError("--register-rate must be more than 0")
    if burst < 1:
        raise ValueError("--register-burst must be at least 1")
    return identity.Admission(pattern, max_pending, rate, burst, max_unvetted, per_address)


def approval_line(admission, token: str, admin_token: str, real_nodes: bool = False) -> str:
    """The one line serve logs at start about how new names are approved (docs/security.md)."""
    if not token and not admin_token:
        return "approval: none (no token: an open server approves every name as it registers)"
    if admission.auto_approve is not None and real_nodes:
        return (f"approval: --auto-approve {admission.auto_approve.pattern!r} cannot bind a name to a Node with "
                f"--backend kubernetes: a name it approves is kept and shown as pending, never written to a Node, "
                f"until its kubelet's client certificate proves it or the admin approves it")
    if admission.auto_approve is not None:
        return (f"approval: --auto-approve {admission.auto_approve.pattern!r} approves every newly registered name "
                f"it matches whole at once "
                f"(it counts in its pool: rollout proof, maxUnavailable, drain leases; never the master pool "
                f"without the admin); at most {admission.max_unvetted} names no admin approved (--max-unvetted)")
    how = ("node-config-server approve node NAME (the admin token)" if admin_token else
           "nobody can approve through the API without --admin-token-file; restart with it or with --auto-approve")
    return (f"approval: a newly registered name counts for nothing until approved ({how}); at most "
            f"{admission.max_pending} pending (--max-pending), {admission.max_unvetted} never approved by the "
            f"admin (--max-unvetted)")


def kubelet_client_ca(args: argparse.Namespace, store) -> Tuple[Optional[str], str]:
    """(the client CA's PEM, where it came from) when a kubelet certificate can prove a node's
    name on this server, else (None, why not: the note serve logs and, with --backend kubernetes,
    /healthz carries). ValueError (exit 2) for a --kubelet-client-ca file that is no CA bundle."""
    from agent.server.store.kube.clientca import check_bundle, read_client_ca

    pem, source = None, ""
    if args.kubelet_client_ca:
        try:
            with open(args.kubelet_client_ca, encoding="ascii") as fh:
                pem = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--kubelet-client-ca {args.kubelet_client_ca}: {exc}") from None
        problem = check_bundle(pem)
        if problem:
            raise ValueError(f"--kubelet-client-ca {args.kubelet_client_ca}: {problem}")
        source = args.kubelet_client_ca
    elif store.is_kubernetes:
        from agent.server.store.kube.client import open_client

        client = open_client(store.kubeconfig, apiserver_url=store.apiserver_url)
        try:
            pem, why = read_client_ca(client)
        finally:
            client.close()
        if pem is None:
            return None, why
        source = "the API server's kube-system/extension-apiserver-authentication"
    else:
        return None, "no --kubelet-client-ca"
    if not args.tls_cert:
        return None, f"a client CA ({source}) but no TLS (--tls-cert): client certificates need it"
    if args.worker_class != "gevent":
        return None, (f"--worker-class {args.worker_class} hands the app no client certificate: only the gevent "
                      f"worker (the default) does the TLS handshake itself and can say what one proves")
    return pem, source


# The MCO drain controller's cadence (draincadence.Cadence, drain_controller.go's DefaultConfig()).
DRAIN_FLAGS = (("--drain-attempt-timeout", "attempt_timeout", "one drain attempt's time; a round still evicting "
                "after it counts as a failed attempt (the MCO's DrainHelperTimeout)"),
               ("--drain-retry", "retry", "wait after a failed attempt (DrainRequeueDelay)"),
               ("--drain-slow-retry", "slow_retry", "wait after a failed attempt once the drain has gone on for "
                "--drain-slow-after (DrainRequeueFailingDelay)"),
               ("--drain-slow-after", "slow_after", "drain time after which retries slow down "
                "(DrainRequeueFailingThreshold)"),
               ("--drain-fail-after", "fail_after", "drain time after which each attempt emits a DrainFailed Event "
                "on the Node and mcc_drain_err{node} is 1 (DrainTimeoutDuration)"),
               ("--drain-defer-after", "defer_after", "ours: drain time held by a PodDisruptionBudget after which "
                "the node is uncordoned, keeps its config and gives its slot to the next node; it is tried again "
                "once the others are done (0: never, as upstream)"))


def add_drain_args(p: argparse.ArgumentParser) -> None:
    """--drain-*: with --backend kubernetes, how a node's drain is paced (docs/drain.md)."""
    from agent.server.rollout.draincadence import Cadence

    default = Cadence()
    for flag, attr, what in DRAIN_FLAGS:
        origin = "ours" if attr == "defer_after" else "the MCO's"
        p.add_argument(flag, type=float, default=None, metavar="SECONDS",
                       help=f"with --backend kubernetes: {what} (default: {getattr(default, attr):g}, {origin})")


def drain_cadence(args: argparse.Namespace):
    """The drain cadence of serve's command line; ValueError names a bad flag."""
    from agent.server.rollout.draincadence import Cadence

    given = {attr: getattr(args, flag[2:].replace("-", "_"), None) for flag, attr, _ in DRAIN_FLAGS}
    cadence = Cadence(**{k: v for k, v in given.items() if v is not None})
    problem = cadence.check()
    if problem:
        raise ValueError(f"{problem} (docs/drain.md, \"Cadence\")")
    return cadence


def plain_http_warning(token: str, tls_cert: Optional[str]) -> str:
    """What serve logs at start and /healthz says when it has a bootstrap token but no TLS: the
    nodes will not send it (node-agent sends a token or credential over https only: a token over
    http is everyone's on the path), so none registers and the first boots end degraded ("node
    w0 is not registered"). "" otherwise."""
    if not token or tls_cert:
        return ""
    return ("--token-file on plain http: node-agent sends its token and credential over https only, so no node "
            "can register here and every report is refused (the first boots end degraded, \"node NAME is not "
            "registered\"): serve with --tls-cert FILE --tls-key FILE and point the nodes at https:// "
            "(docs/security.md, \"Tokens only over https\")")


def say_identity(app, args: argparse.Namespace, store, token: str, admin_token: str,
                  client_ca: Tuple[Optional[str], str]) -> None:
    """The lines serve logs at start on how a name comes to count (docs/security.md "Identity"):
    the approval rule, whether a kubelet certificate can prove a name (and if not, why: with
    --backend kubernetes identity is then by admin approval only, which /healthz says too), and
    a server that can approve nobody."""
    import logging

    say = logging.getLogger(__name__)
    rule = app.auth.admission.auto_approve  # approving names unseen is the operator's explicit choice: say it loud
    say.log(logging.WARNING if rule is not None else logging.INFO, "%s (docs/security.md \"Identity\")",
            approval_line(app.auth.admission, token, admin_token, store.is_kubernetes))
    pem, source = client_ca
    app.auth.kubelet_proof = pem is not None
    if pem is not None:
        say.info("node identity: a node presenting its kubelet's client certificate (CN system:node:NAME, O "
                 "system:nodes) verified against %s proves its name at once (approvedBy kubelet)", source)
    elif store.is_kubernetes and (token or admin_token):
        app.kubelet_note = source
        say.warning("node identity by admin approval only: %s; no kubelet certificate can prove a node's name "
                    "(/healthz says so too)", source)
    elif args.kubelet_client_ca:
        say.warning("--kubelet-client-ca: no kubelet certificate can prove a node's name here: %s", source)
    if args.worker_class != "gevent":
        say.warning("--worker-class %s: no kubelet client certificate can prove a node's name here (only the "
                    "gevent worker, the default, verifies one and hands the app what it proves)", args.worker_class)
    nobody = app.auth.nobody_approved(store.is_kubernetes)
    if nobody:
        say.warning("%s", nobody)
