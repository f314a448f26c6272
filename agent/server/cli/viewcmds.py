"""``node-config-server get|describe|status``: ask a running server, print what it says.

Exit codes: 0 shown (``status``: the cluster update is complete); 1 no such pool or node
(``status``: not complete); 2 bad command line or client config flag, or a name the server refuses
as malformed (HTTP 400: ``INFRA-0`` is no node name); 65 client config file invalid; 69 server
unreachable or not a node-config-server; 77 the server wants a token.
"""

import argparse
import sys
import time
from typing import Any, Dict, List, Optional

from agent.server.cli import objects, views
from agent.server.cli.client import Client, ClientError
from agent.server.cli.tables import terminal_width

EXIT_OK = 0
EXIT_NOT_COMPLETE = 1


def add_client_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("which server (flags beat the client config file)")
    g.add_argument("--server", metavar="URL", help="node-config-server URL (default: http://127.0.0.1:22624)")
    g.add_argument("--ca", metavar="FILE", help="PEM CA bundle the server's certificate chains to")
    g.add_argument("--token-file", metavar="FILE", help="bearer token to send")
    g.add_argument("--config", metavar="FILE",
                   help="client config YAML with server, certificateAuthority, tokenFile "
                        "(default: ~/.config/node-config-server/client.yaml when it exists)")


EXITS = ("Exit codes: 0 shown; 1 no such pool or node; 2 bad command line or client config flag, or a name that "
         "is no Kubernetes name (the server refuses it); 65 client config file invalid; 69 server unreachable or "
         "not a node-config-server; 77 the server wants a token.")
GET_DOC = ("List the pools (as oc get mcp) or the nodes of a running server. A table takes the terminal's "
           "width (COLUMNS, else the terminal's; to a pipe every value whole): when it does not fit, a few count "
           "columns are left out first (a line under the table names them), then config names are shortened, "
           "then long values cut (…); -o wide prints every column and value whole and adds more (pools: target, "
           "served config and image, paused, maxUnavailable; nodes: desired config, OS image, boot image), "
           "-o json|yaml Kubernetes-shaped objects (a pool as the API has it; a node as kind ManagedNode), "
           "-o name kind/name per line. "
           "--watch refreshes the table until Ctrl-C; without a terminal it prints the same columns, a row "
           "each time a pool or node changes (as kubectl get -w).")
DESCRIBE_DOC = ("One pool or node of a running server in detail: its conditions (status, reason, message, last "
                "transition), what new nodes get and why, its nodes, history and drain events; every value whole.")


def plain(text: str) -> str:
    """Help text without reStructuredText's literal markup (````name```` -> ``name``)."""
    return text.replace("``", "")


def add_parsers(sub, make) -> None:
    """``make(sub, name, **kw)`` builds a subparser (no abbreviations)."""
    p = make(sub, "get", help="list pools or nodes of a running server (as oc get mcp / oc get nodes)",
             description=f"{GET_DOC}\n\n{EXITS}", formatter_class=_Paragraphs)
    p.add_argument("kind", choices=("pools", "pool", "mcp", "nodes", "node"), help="what to list")
    p.add_argument("name", nargs="?", help="only this pool or node")
    p.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml", "name"), default="table",
                   help="table (default), wide (every column and more, whole values), json or yaml (Kubernetes-shaped "
                        "objects; a list as kubectl prints one: apiVersion v1, kind List, items), name (kind/name, "
                        "one a line)")
    p.add_argument("-w", "--watch", action="store_true",
                   help="refresh until interrupted (Ctrl-C): pools with a progress bar each, nodes as a table; "
                        "without a terminal, a line each time a pool or node changes")
    p.add_argument("--interval", type=_positive, default=2.0, metavar="SECONDS", help="--watch refresh (default: 2)")
    add_client_options(p)

    p = make(sub, "describe", help="one pool or node in detail: conditions, served config/image and why",
             description=f"{DESCRIBE_DOC}\n\n{EXITS}", formatter_class=_Paragraphs)
    p.add_argument("kind", choices=("pool", "mcp", "node"))
    p.add_argument("name")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml", "name"), default="text",
                   help="text (default), json or yaml (the object, as get -o prints it), name (kind/name)")
    add_client_options(p)


class _Paragraphs(argparse.HelpFormatter):
    """Wraps each paragraph of a description on its own (argparse's default joins them)."""

    def _fill_text(self, text, width, indent):
        fill = super()._fill_text
        return "\n\n".join(fill(para, width, indent) for para in plain(text).split("\n\n"))


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def _pools(client: Client, name: Optional[str]) -> List[Dict[str, Any]]:
    if name:
        return [client.get(f"/api/v1/pools/{_quote(name)}")]
    return client.get("/api/v1/pools").get("items", [])


def _nodes(client: Client, name: Optional[str]) -> List[Dict[str, Any]]:
    if name:
        node = client.get(f"/api/v1/nodes/{_quote(name)}")
        return [dict(node, name=node.get("name") or name)]
    items: List[Dict[str, Any]] = []
    token = ""
    while True:  # the list is paged (metadata.continue), as Kubernetes lists are
        page = client.get("/api/v1/nodes" + (f"?continue={_quote(token)}" if token else ""))
        items += page.get("items", [])
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def _quote(name: str) -> str:
    import urllib.parse

    return urllib.parse.quote(name, safe="")


def cmd_get(args: argparse.Namespace) -> int:
    client = Client.from_args(args)
    pools = args.kind in ("pools", "pool", "mcp")
    if args.watch:
        from agent.server.cli.watch import watch_nodes, watch_pools

        if pools:
            return watch_pools(lambda: _pools(client, args.name), args.interval)
        return watch_nodes(lambda: _nodes(client, args.name), args.interval)
    items = _pools(client, args.name) if pools else _nodes(client, args.name)
    if args.output in ("json", "yaml"):
        shaped = items if pools else [objects.node_object(n) for n in items]
        obj: Any = shaped[0] if args.name and shaped else objects.as_list(shaped)
        sys.stdout.write(objects.dump(obj, args.output))
        return EXIT_OK
    if args.output == "name":
        sys.stdout.write("".join(objects.kind_name(item, pools) + "\n" for item in items))
        return EXIT_OK
    if not items:
        print(f"No {'pools' if pools else 'nodes'} found.", file=sys.stderr)
        return EXIT_OK
    render = views.pools_table if pools else views.nodes_table
    sys.stdout.write(render(items, time.time(), wide=args.output == "wide", width=terminal_width()))
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    client = Client.from_args(args)
    now = time.time()
    if args.output == "name":  # as kubectl: the object's kind/name, once it is known to exist
        item = _pools(client, args.name)[0] if args.kind in ("pool", "mcp") else \
            dict(client.get(f"/api/v1/nodes/{_quote(args.name)}"), name=args.name)
        sys.stdout.write(objects.kind_name(item, args.kind in ("pool", "mcp")) + "\n")
        return EXIT_OK
    if args.kind in ("pool", "mcp"):
        pool = _pools(client, args.name)[0]
        if args.output != "text":
            sys.stdout.write(objects.dump(pool, args.output))
        else:
            sys.stdout.write(views.describe_pool(pool, now))
        return EXIT_OK
    node = client.get(f"/api/v1/nodes/{_quote(args.name)}")
    if args.output != "text":  # the node as get -o prints it (its pool: describe pool -o)
        sys.stdout.write(objects.dump(objects.node_object(node), args.output))
        return EXIT_OK
    pool = None
    if node.get("pool"):
        try:
            pool = _pools(client, node["pool"])[0]
        except ClientError as exc:
            if exc.exit_code != 1:
                raise
    sys.stdout.write(views.describe_node(node, pool, now))
    return EXIT_OK


def cmd_status_remote(args: argparse.Namespace) -> int:
    """Cluster update progress as a running server sees it (exit 0 complete, 1 not: updating, or
    a pool degraded or a state problem, each named)."""
    import json

    client = Client.from_args(args)
    progress = client.get("/api/v1/cluster")
    pools = _pools(client, None)
    if getattr(args, "output", None):
        sys.stdout.write(objects.dump(dict(progress, items=pools), args.output))
    elif args.json:
        out = dict(progress)
        out["items"] = pools
        print(json.dumps(out, indent=1, sort_keys=True))
    else:
        sys.stdout.write(render_status(progress, pools, time.time()))
    return EXIT_OK if progress.get("complete") else EXIT_NOT_COMPLETE


def render_status(progress: Dict[str, Any], pools: List[Dict[str, Any]], now: float) -> str:
    degraded = progress.get("degraded") or []
    head = "complete" if progress.get("complete") else "NOT complete" + (
        f", DEGRADED ({', '.join(degraded)}): what to fix is named below" if degraded else "")
    table = views.pools_table(pools, now, width=terminal_width(), degraded=False)  # the reasons: in the list below
    lines = [table.rstrip("\n"), "", "cluster update: " + head]
    for b in progress.get("blocking", []):
        lines.append(f"  {b['pool']}: {b.get('reason')}" if b.get("pool") else f"  {b.get('reason')}")
    said = " ".join(str(b.get("reason")) for b in progress.get("blocking", []))
    for w in progress.get("warnings", []):
        if w not in said:  # a state problem is among the reasons already (the API lists it in both)
            lines.append(f"  warning: {w}")
    lines += _store_lines(progress)
    return "\n".join(lines) + "\n"


def _store_lines(progress: Dict[str, Any]) -> List[str]:
    """The shared store and what each replica process serves (a replica disagreeing stands out)."""
    store, replicas = progress.get("store") or {}, progress.get("replicas") or []
    if not store:
        return []
    health = "healthy" if store.get("healthy") else f"UNAVAILABLE ({store.get('error', '')[:60]})"
    lines = ["", f"store: {store.get('kind', '?')}, {health}"]
    if store.get("kind") != "etcd":
        return lines
    served = [tuple(sorted((p, v.get("served", "")) for p, v in (r.get("pools") or {}).items())) for r in replicas]
    common = max(set(served), key=served.count) if served else ()
    lines.append(f"replicas: {len(replicas)} process(es)")
    for r, s in zip(replicas, served):
        note = "" if s == common else "  (serves other configs than the rest)"
        ok = "ok" if (r.get("store") or {}).get("healthy") else "store unavailable"
        lines.append(f"  {r.get('replica', '?')} pid {r.get('pid', '?')}: state {str(r.get('stateSignature', ''))[:16]}, "
                     f"{ok}{note}")
    return lines
