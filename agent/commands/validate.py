"""``node-agent validate FILE``: check an Ignition config or a MachineConfig.

One line per problem, each starting with its JSON path; exit 0 when valid (warnings may be
printed), 1 when invalid or unreadable.
"""

import json
import sys
from typing import List

from agent.core.loadconfig import check_node_config
from agent.errors import ConfigError, Problem

EXIT_VALID = 0
EXIT_INVALID = 1


def run(args) -> int:
    path = args.file
    as_json = bool(getattr(args, "json", False))
    source = "<stdin>" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else _read(path)
        nc, problems = check_node_config(data, source)
    except ConfigError as exc:
        return _report(False, [Problem("$", str(exc), rule="syntax", source=source)], as_json, raw=str(exc))
    except OSError as exc:
        msg = f"{source}: cannot read: {exc.strerror or exc}"
        return _report(False, [Problem("$", msg, rule="unreadable", source=source)], as_json, raw=msg)
    return _report(nc is not None, problems, as_json)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _report(valid: bool, problems: List[Problem], as_json: bool, raw: str = "") -> int:
    """Problems go to stdout, one per line, path first; a summary goes to stderr."""
    if as_json:
        print(json.dumps({"valid": valid, "problems": [p.to_dict() for p in problems]}, indent=2, default=str))
    elif raw:
        print(raw)
        if not sys.stdout.isatty():
            print(raw, file=sys.stderr)
    else:
        for p in problems:
            print(str(p))
        errors = sum(1 for p in problems if p.is_error)
        warnings = len(problems) - errors
        verdict = "valid" if valid else "invalid"
        print(f"{verdict}: {errors} error(s), {warnings} warning(s)", file=sys.stderr)
    return EXIT_VALID if valid else EXIT_INVALID
