"""``node-agent`` command line.

Start-up must stay fast (``node-agent --version`` runs on every boot and in scripts), so this
module imports only argparse; each subcommand's module is imported when it runs.
"""

import argparse
import importlib
import os
import sys

from agent import __version__

DEFAULT_POINTER = "/etc/node-agent/pointer.ign"
DEFAULT_SETTINGS = "/etc/node-agent/agent.yaml"


def _add_node_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="/", metavar="DIR",
                   help="apply to the tree under DIR instead of / (default: /)")
    p.add_argument("--pointer", default=None, metavar="FILE",
                   help=f"pointer Ignition config, inside the root (default: {DEFAULT_POINTER})")
    p.add_argument("--settings", default=None, metavar="FILE",
                   help=f"agent settings, inside the root (default: {DEFAULT_SETTINGS})")
    p.add_argument("--node-name", default=None, metavar="NAME",
                   help="this node's name in reports (default: the host name)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="node-agent",
        description="First-boot and day-2 node agent: fetch, check, join a pool, apply, act.",
    )
    parser.add_argument("--version", action="version", version=f"node-agent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("firstboot", help="provision this node from its pointer config (runs once)")
    _add_node_options(p)
    p.add_argument("--dry-run", action="store_true", help="plan and print, change nothing")

    p = sub.add_parser("update", help="day-2 loop: poll the pool's config and apply updates")
    _add_node_options(p)
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--interval", type=float, default=None, metavar="SECONDS",
                   help="poll interval (default: from agent.yaml)")

    p = sub.add_parser("validate", help="validate an Ignition config or a MachineConfig")
    p.add_argument("file", metavar="FILE", help="Ignition JSON or MachineConfig YAML/JSON ('-' for stdin)")
    p.add_argument("--json", action="store_true", help="print findings as JSON")

    p = sub.add_parser("plan", help="what applying a config would change and do (reboot, drain, ...)")
    p.add_argument("--from", dest="from_file", metavar="FILE", help="the config the node is at")
    p.add_argument("--to", dest="to_file", metavar="FILE", help="the config to apply")
    p.add_argument("--policy", metavar="FILE", help="MachineConfiguration YAML with spec.nodeDisruptionPolicy")
    p.add_argument("--firstboot", action="store_true", help="plan as at first boot (nothing runs yet)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--show-policy", action="store_true", help="print the effective merged policy and exit")

    p = sub.add_parser("skew", help="check a boot image (aleph file) against skew rules",
                       description="Exit 0 ok/warn, 1 refuse, 65 rules file unreadable or not valid.")
    p.add_argument("--aleph", required=True, metavar="FILE", help="aleph version file (.coreos-aleph-version.json)")
    p.add_argument("--rules", required=True, metavar="FILE", help="skew rules (JSON or YAML)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("status", help="result and stage timings of the last run")
    p.add_argument("--root", default="/", metavar="DIR")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv=None) -> int:  # argv: a list of str, or None for sys.argv (no typing import: start-up)
    parser = build_parser()
    args = parser.parse_args(argv)  # --version and --help end here, before anything heavier loads
    from agent.errors import EXIT_INTERNAL, EXIT_USAGE, NodeAgentError

    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command in ("firstboot", "update"):
        from agent.log import setup_logging

        setup_logging(args.command)
    module = importlib.import_module(f"agent.commands.{args.command}")
    try:
        return int(module.run(args) or 0)
    except NodeAgentError as exc:
        print(f"node-agent {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # last resort: a clear line, not a traceback, unless asked for
        if os.environ.get("NODE_AGENT_DEBUG"):
            raise
        print(f"node-agent {args.command}: internal error: {type(exc).__name__}: {exc} "
              "(set NODE_AGENT_DEBUG=1 for a traceback; please report it)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
