"""``node-config-server delete node NAME``: forget a node on a running server (admin token).

Removes the node's report, its share of the pool counters and proofs, its drain lease and its
credential (``DELETE /api/v1/nodes/<node>``; docs/security.md "Identity"): for a machine that is
gone, or one reinstalled under the same name, which then registers again at first boot.

Exit codes: 0 deleted; 1 no such node (nothing to delete); 2 bad command line; 65 invalid client
config file; 69 server unreachable; 77 the server wants the admin token (--token-file FILE
holding the server's --admin-token-file).
"""

import argparse
import sys
import urllib.parse

from agent.server.cli.client import EXIT_NOT_FOUND, Client

EXIT_OK = 0


def add_parsers(sub, make, add_client_options) -> None:
    p = make(sub, "delete", help="forget a node on a running server (admin token): report, lease, credential",
             description=__doc__.split("\n\n")[1])
    p.add_argument("kind", choices=("node",))
    p.add_argument("name")
    add_client_options(p)


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
