"""``node-config-server delete node NAME`` and ``approve node NAME``: on a running server (admin token).

Removes the node's report, its share of the pool counters and proofs, its drain lease and its
credential (DELETE /api/v1/nodes/<node>; docs/security.md "Identity"): for a machine that is
gone, or one reinstalled under the same name, which then registers again at first boot.

Exit codes: 0 deleted; 1 no such node (nothing to delete); 2 bad command line; 65 invalid client
config file; 69 server unreachable; 77 the server wants the admin token (pass --token-file FILE
holding the admin token).
"""

import argparse
import sys
import urllib.parse
from typing import Dict

from agent.server.cli.client import EXIT_NOT_FOUND, EXIT_USAGE, Client, ClientError

EXIT_OK = 0


def add_parsers(sub, make, add_client_options) -> None:
    p = make(sub, "delete", help="forget a node on a running server (admin token): report, lease, credential",
             description="\n\n".join(__doc__.split("\n\n")[1:3]),
             formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("node",))
    p.add_argument("name")
    add_client_options(p)
    add_approve_parser(sub, make, add_client_options)


APPROVE_DOC = """Approve a registered node (POST /api/v1/nodes/<node>/approve; docs/security.md "Identity").

On a server with an admin token a newly registered name counts for nothing (no proof for the
rollout gate, no share of its pool's size or maxUnavailable, no drain lease) until approved.
--label NAME=VALUE (repeatable) records the labels you vouch for: they, not the ones the node
reports, decide its pool. --pending lists the names waiting (NAME is then not given).

Exit codes: 0 approved (or listed); 1 no such registration; 2 bad command line; 69 server
unreachable; 77 the server wants the admin token."""


def add_approve_parser(sub, make, add_client_options) -> None:
    p = make(sub, "approve", help="approve a registered node on a running server (admin token)",
             description=APPROVE_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("node",))
    p.add_argument("name", nargs="?", help="the node to approve")
    p.add_argument("--label", action="append", default=None, metavar="NAME=VALUE",
                   help="a label the admin vouches for (repeatable); they replace the reported labels")
    p.add_argument("--pending", action="store_true", help="list the registrations waiting for approval: when and from "
                   "which address each registered, and whether a Node of that name exists and is managed")
    add_client_options(p)


def _labels(items) -> Dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ClientError(f"--label {item!r}: expected NAME=VALUE (VALUE may be empty)", EXIT_USAGE)
        out[name] = value
    return out


def _request(client: Client, method: str, path: str, body=None):
    """Client.request with a JSON body (the session's own request, the same answers and exits)."""
    if body is None:
        return client.request(method, path)
    session = client.session()
    original = session.request

    def with_body(m, url, **kwargs):
        return original(m, url, json=body, **kwargs)

    session.request = with_body  # type: ignore[method-assign]
    try:
        return client.request(method, path)
    finally:
        session.request = original  # type: ignore[method-assign]


PENDING_COLUMNS = ("NAME", "REGISTERED", "ADDRESS", "NODE")


def pending_row(item: dict) -> tuple:
    """One waiting registration, as an admin decides on it (issue 45): when and from where it
    registered, and (--backend kubernetes) whether a Node of that name exists and who manages it."""
    node = item.get("nodeObject")
    if node is None:
        seen = "-"
    elif not node.get("exists"):
        seen = "no Node"
    else:
        seen = "Node exists" + (f"; MANAGED: {node['managed']}" if node.get("managed") else "")
    return (item["node"], item.get("registered", "-"), item.get("address") or "-", seen)


def cmd_approve(args: argparse.Namespace) -> int:
    client = Client.from_args(args)
    if args.pending:
        if args.name:
            raise ClientError("approve node --pending lists the waiting names: give no NAME", EXIT_USAGE)
        after, out, rows = "", {}, []
        while True:  # page through them, in name order
            query = urllib.parse.urlencode({"approval": "pending", "limit": 1000, "continue": after})
            out = client.request("GET", f"/api/v1/nodes?{query}")
            rows += [pending_row(item) for item in out.get("items", [])]
            after = out.get("continue") or ""
            if not after:
                break
        if rows:
            widths = [max(len(r[i]) for r in [PENDING_COLUMNS] + rows) for i in range(len(PENDING_COLUMNS) - 1)]
            for row in [PENDING_COLUMNS] + rows:
                print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
        print(f"{out.get('pending', 0)} registration(s) wait for approval", file=sys.stderr)
        return EXIT_OK
    if not args.name:
        raise ClientError("approve node NAME: the node's name is required (or --pending)", EXIT_USAGE)
    body = {"labels": _labels(args.label)} if args.label is not None else None
    out = _request(client, "POST", f"/api/v1/nodes/{urllib.parse.quote(args.name, safe='')}/approve", body)
    where = f"; it counts in pool {out['pool']}" if out.get("pool") else "; it has not reported yet"
    if out.get("degradedReason"):
        where += f" (degraded: {out['degradedReason']})"
    print(f"node {args.name} approved{where}")
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    client = Client.from_args(args)
    out = client.request("DELETE", f"/api/v1/nodes/{urllib.parse.quote(args.name, safe='')}")
    if not out.get("deleted"):
        print(f"node {args.name}: nothing to delete (no report, drain lease or credential)", file=sys.stderr)
        return EXIT_NOT_FOUND
    where = f" from pool {out['pool']}" if out.get("pool") else ""
    lease = "; its drain lease was released" if out.get("leaseReleased") else ""
    print(f"node {args.name} deleted{where}{lease}; it registers again at its next first boot")
    return EXIT_OK
