"""``node-config-server rollback pool NAME``: target the last config every member of the pool was
Done on, on a running server (admin token; POST /api/v1/pools/<pool>/rollback; docs/rollout.md).

It says what it will do first (the config rolled back from and to, the nodes the server will
retarget, in turn, maxUnavailable at a time), then does it; --dry-run only says. The rendering
rolled back from stays held (the pool's RenderHeld condition) until the MachineConfigs change, or
until --undo lifts the hold.

Exit codes: 0 done (or, with --dry-run, possible); 1 nothing to roll back (or to undo); 2 bad
command line; 69 server unreachable; 77 the server wants the admin token."""

import argparse
import urllib.parse

from agent.server.cli.client import Client

EXIT_OK = 0


def add_parser(sub, make, add_client_options) -> None:
    p = make(sub, "rollback", help="target the last config every node of a pool was Done on (admin token)",
             description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("pool",))
    p.add_argument("name", help="the pool")
    p.add_argument("--dry-run", action="store_true", help="say what it would do, change nothing")
    p.add_argument("--undo", action="store_true", help="lift a rollback's hold: the newest rendering is the target again")
    add_client_options(p)
    p = make(sub, "ack", help="acknowledge a pool's rendering held for review (require-ack; admin token)",
             description=ACK_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("pool",))
    p.add_argument("name", help="the pool")
    p.add_argument("--rendered", default="", metavar="NAME",
                   help="acknowledge only if this rendered config is the one held (what describe pool showed)")
    add_client_options(p)


ACK_DOC = """``node-config-server ack pool NAME``: the pool's new rendering that waits for the admin (the pool
annotation node-config-server.openshift.io/require-ack: it has validator warnings, removes a file
or needs a reboot; describe pool says which) becomes the pool's target; its nodes then take it in
turn. POST /api/v1/pools/<pool>/ack (admin token; docs/rollout.md "Held for review").

Exit codes: 0 acknowledged; 1 nothing waits (or another rendering than --rendered); 2 bad command
line; 69 server unreachable; 77 the server wants the admin token."""


def cmd_ack(args: argparse.Namespace) -> int:
    client = Client.from_args(args)
    path = f"/api/v1/pools/{urllib.parse.quote(args.name, safe='')}/ack"
    done = _post(client, path, {"config": args.rendered} if args.rendered else {})
    print(done.get("summary") or "done")
    return EXIT_OK


def _post(client: Client, path: str, body: dict):
    from agent.server.cli.admincmds import _request

    return _request(client, "POST", path, body)


def plan_text(out: dict, dry_run: bool = False) -> str:
    """What the rollback does, said first: ``would roll back pool worker from A to B; ...`` (a dry
    run), ``will roll back ...`` (then it does)."""
    nodes = out.get("nodes") or []
    shown = ", ".join(nodes[:20]) + (f" and {len(nodes) - 20} more" if len(nodes) > 20 else "")
    who = f"{len(nodes)} node(s) to retarget, in turn: {shown}" if nodes else "no node to retarget"
    what = f"undo the rollback of pool {out['pool']}" if out.get("undo") else f"roll back pool {out['pool']}"
    return f"{'would' if dry_run else 'will'} {what} from {out['from']} to {out['to']}; {who}"


def cmd_rollback(args: argparse.Namespace) -> int:
    client = Client.from_args(args)
    path = f"/api/v1/pools/{urllib.parse.quote(args.name, safe='')}/rollback"
    plan = _post(client, path, {"dryRun": True, "undo": args.undo})
    print(plan_text(plan, args.dry_run), flush=True)
    if args.dry_run:
        return EXIT_OK
    done = _post(client, path, {"undo": args.undo})
    print(done.get("summary") or "done")
    return EXIT_OK
