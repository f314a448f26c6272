"""``node-agent`` command line.

Start-up must stay fast (``node-agent --version`` runs on every boot and in scripts), so this
module imports only argparse; each subcommand's module is imported when it runs.
"""

import argparse
import os
import sys

from agent import __version__

DEFAULT_SETTINGS = "/etc/node-agent/agent.yaml"
DEFAULT_POINTER = "/etc/node-agent/pointer.ign"  # the same as agent.core.paths (not imported: start-up)


def node_name_arg(text: str) -> str:
    """The same rule as agent.yaml's nodeName (agent/core/names.py)."""
    from agent.core.names import NODE_NAME_RULE, is_node_name

    if not is_node_name(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not {NODE_NAME_RULE}, as agent.yaml's nodeName")
    return text


def interval_arg(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, with the terminal width found as ``shutil.get_terminal_size``
    finds it (COLUMNS, else stdout's terminal, else 80) but without importing shutil, which
    argparse does for every parser and argument it creates and which imports bz2, lzma, zlib
    and fnmatch: a tenth of ``node-agent --version``."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        if width is None:
            width = _columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


def _columns() -> int:
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


def _sub(sub, name: str, **kwargs) -> argparse.ArgumentParser:
    # No abbreviations: `--stat` must not quietly mean `--state`, now or after an option is added.
    return sub.add_parser(name, allow_abbrev=False, formatter_class=_Formatter, **kwargs)


def _add_node_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="/", metavar="DIR",
                   help="apply to the tree under DIR instead of / (default: /)")
    p.add_argument("--pointer", default=None, metavar="FILE",
                   help=f"pointer Ignition config, inside the root (default: {DEFAULT_POINTER})")
    p.add_argument("--settings", default=None, metavar="FILE",
                   help=f"agent settings, inside the root (default: {DEFAULT_SETTINGS})")
    p.add_argument("--node-name", default=None, metavar="NAME", type=node_name_arg,
                   help="this node's name in reports (default: nodeName of agent.yaml, else the host name)")


def _firstboot_options(p: argparse.ArgumentParser) -> None:
    _add_node_options(p)
    p.add_argument("--dry-run", action="store_true", help="plan and print, change nothing")


def _update_options(p: argparse.ArgumentParser) -> None:
    _add_node_options(p)
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--interval", type=interval_arg, default=None, metavar="SECONDS",
                   help="poll interval, > 0 (default: update.interval of agent.yaml, 60)")
    p.add_argument("--force", action="store_true",
                   help="skip the on-disk validation once and re-apply the config (as the force file "
                        "/run/node-agent-force, the MCD's /run/machine-config-daemon-force)")


def _output_option(p: argparse.ArgumentParser) -> None:
    """``-o json|yaml``, spelled as node-config-server's ``-o`` (and kubectl's); ``--json`` stays."""
    p.add_argument("-o", "--output", choices=("json", "yaml"), default=None, metavar="FORMAT",
                   help="json or yaml instead of text (node-config-server takes the same -o)")
    p.add_argument("--json", dest="output", action="store_const", const="json", help="the same as -o json")


def _validate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="any document node-agent or node-config-server reads, JSON or YAML "
                                                 "('-' for stdin); its kind is recognised (docs/operations.md)")
    p.add_argument("--kind", metavar="KIND", help="the document's kind when its shape does not tell "
                                                  "(docs/operations.md, \"Validating documents\")")
    _output_option(p)


def _plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_file", metavar="FILE", help="the config the node is at")
    p.add_argument("--to", dest="to_file", metavar="FILE", help="the config to apply")
    p.add_argument("--policy", metavar="FILE", help="MachineConfiguration YAML with spec.nodeDisruptionPolicy")
    p.add_argument("--firstboot", action="store_true", help="plan as at first boot (nothing runs yet)")
    p.add_argument("--control-plane-topology", metavar="MODE", default=None,
                   choices=("HighlyAvailable", "HighlyAvailableArbiter", "DualReplica", "SingleReplica", "External"),
                   help="the cluster's Infrastructure status.controlPlaneTopology: SingleReplica (a single-node "
                        "cluster) never drains, as the MCD (default: a cluster that drains)")
    _output_option(p)
    p.add_argument("--show-policy", action="store_true", help="print the effective merged policy and exit")


def _skew_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--aleph", required=True, metavar="FILE", help="aleph version file (.coreos-aleph-version.json)")
    p.add_argument("--rules", required=True, metavar="FILE", help="skew rules (JSON or YAML)")
    _output_option(p)


def _status_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="/", metavar="DIR")
    p.add_argument("-o", "--output", "--format", dest="format", choices=("json", "yaml", "tabular", "wide"),
                   default=None, metavar="FORMAT", help="json, yaml, tabular (the default) or wide (tabular with "
                                                        "--long); --format as cloud-init status, -o as "
                                                        "node-config-server")
    p.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    p.add_argument("-l", "--long", action="store_true",
                   help="also each stage's start time, its fetch attempts and the record's file")
    p.add_argument("--wait", action="store_true",
                   help="block until the first boot has ended, then answer (as cloud-init status --wait)")


# name -> (add_parser arguments, its options), in the order --help lists them
_COMMANDS = {
    "firstboot": ({"help": "provision this node from its pointer config (runs once)"}, _firstboot_options),
    "update": ({"help": "day-2 loop: poll the pool's config and apply updates"}, _update_options),
    "validate": ({"help": "validate a document by its kind (Ignition, MachineConfig, pools, policy, agent.yaml, ...)"},
                 _validate_options),
    "plan": ({"help": "what applying a config would change and do (reboot, drain, ...)"}, _plan_options),
    "skew": ({"help": "check a boot image (aleph file) against skew rules",
              "description": "Exit 0 ok/warn, 1 refuse, 65 rules file unreadable or not valid."}, _skew_options),
    "status": ({"help": "result and stage timings of the last run",
                "description": "Exit 0 done (or running), 1 failed, interrupted or never run, 2 degraded "
                               "(cloud-init status: 0, 1, 2; never run is 0 there)."},
               _status_options),
}


def build_parser(only=None) -> argparse.ArgumentParser:
    """The whole command line; ``only``: a command name whose options alone are added (the
    others' parsers exist, for ``--help`` and the choices, but stay empty: the command line
    names at most one command, so the rest is start-up time spent for nothing), or "" for
    none (``--version``, ``--help``, no command)."""
    parser = argparse.ArgumentParser(
        prog="node-agent",
        description="First-boot and day-2 node agent: fetch, check, join a pool, apply, act.",
        allow_abbrev=False,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParsers(only))
    for name, (kwargs, add_options) in _COMMANDS.items():
        p = _sub(sub, name, **kwargs)
        if only is None or only == name:
            add_options(p)
    parser.command_parsers = sub.choices  # type: ignore[attr-defined]  # a bad option shows its command's usage
    return parser


def _parse(parser: argparse.ArgumentParser, argv):
    """``parser.parse_args(argv)``, but an option the command does not know is reported with the
    command's own usage (``node-agent status: error: unrecognized arguments: --bogus``), not the
    top-level one, which lists commands and none of their options."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = getattr(parser, "command_parsers", {}).get(args.command)
        (command if isinstance(command, argparse.ArgumentParser) else parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    return args


def _check_root(args) -> None:
    """A ``--root`` that is not a directory is a typo far more often than a node that never ran:
    said as such (exit 66, EX_NOINPUT) before the command reads anything under it."""
    root = getattr(args, "root", None)
    if root and not os.path.isdir(root):
        from agent.errors import InputMissing

        what = "is not a directory" if os.path.exists(root) else "no such directory"
        raise InputMissing(f"--root {root}: {what}")


class _CommandParsers:
    """``add_subparsers``' parser_class: a real parser for the command this command line runs,
    an empty stand-in for the others. --help lists every command from the ``help`` texts,
    which argparse keeps apart from the parsers, and a command line names at most one command:
    each other ArgumentParser built would cost start-up (a tenth of ``--version``) for nothing."""

    def __init__(self, only):
        self.only = only

    def __call__(self, **kwargs):
        name = kwargs["prog"].rsplit(" ", 1)[-1]  # add_parser sets prog to "node-agent <name>"
        if self.only is None or self.only == name:
            return argparse.ArgumentParser(**kwargs)
        return _NotRun()


class _NotRun:
    """A command's parser that this command line never reaches (see _CommandParsers)."""


class _Version(argparse.Action):
    """``--version``: print and exit. argparse's own "version" action formats the line as help
    text, which imports textwrap: another tenth of ``--version``."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(f"node-agent {__version__}\n")
        sys.stdout.flush()
        parser.exit()


def _only(argv):
    """What ``build_parser(only=...)`` may leave out for this command line: the command when the
    first word that is not an option names one, "" when every word is an option, else None
    (build everything, so that any error reads as it always has)."""
    words = [a for a in argv if not a.startswith("-")]
    if not words:
        return ""
    return words[0] if words[0] in _COMMANDS else None


def _fatal(command: str, code: int, message: str, logged: bool, reported: bool, exc=None) -> None:
    """Say once, in one format, why a command ended with ``code`` and what to do.

    ``logged``: the command logs (firstboot, update); ``reported``: its run record already
    logged the error. The log is the one place, unless it goes to a journal this stderr is not
    (a person running the command by hand): then stderr gets it too.
    """
    from agent.host.log import StderrHandler, stderr_sees_the_log

    # agent.commands as main() imports each command (by name): its hint for this error
    hint = __import__("agent.commands", fromlist=["hint_for_error"]).hint_for_error(exc, code)
    tail = f"\nwhat to do: {hint}" if hint else ""
    if logged and not reported:
        import logging

        logging.getLogger("agent").error("%s failed (exit %d): %s%s", command, code, message, tail)
    if logged and stderr_sees_the_log():
        return
    # argparse's own format for errors: "node-agent <command>: error: ..."
    word = StderrHandler().format_text("error", "").rstrip(" \n")
    sys.stderr.write(f"node-agent {command}: {word} {message}{tail}\n")
    sys.stderr.flush()


def _quiet_broken_pipe() -> int:
    """stdout's reader went away (``| head -1``): stop quietly, as a program killed by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
    except (OSError, ValueError):
        pass
    return 128 + 13  # what a shell reports for SIGPIPE


def main(argv=None) -> int:  # argv: a list of str, or None for sys.argv (no typing import: start-up)
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=_only(argv))
    args = _parse(parser, argv)  # --version and --help end here, before anything heavier loads
    from agent.errors import EXIT_INTERNAL, EXIT_USAGE, NodeAgentError

    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    logged = args.command in ("firstboot", "update")
    if logged:
        from agent.host.log import setup_logging

        setup_logging(args.command)
    module = __import__(f"agent.commands.{args.command}", fromlist=["run"])  # importlib: start-up
    try:
        _check_root(args)
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except NodeAgentError as exc:
        _fatal(args.command, exc.exit_code, str(exc), logged, getattr(exc, "reported", False), exc)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # last resort: a clear line, not a traceback, unless asked for
        if os.environ.get("NODE_AGENT_DEBUG"):
            raise
        _fatal(args.command, EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {exc}", logged,
               getattr(exc, "reported", False))
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
