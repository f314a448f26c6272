"""``node-agent validate FILE``: check any document node-agent reads, by its kind.

The kind comes from ``kind:`` or the document's shape (``--kind`` names it); each kind is checked
with the rules its consumer applies (``agent.core.documents``): Ignition and pointer configs,
MachineConfig, MachineConfigPool, MachineConfiguration, MachineOSConfig, MachineOSBuild,
agent.yaml and the boot image skew rules. One line per problem, each starting with its JSON path;
exit 0 when valid (warnings may be printed), 1 when invalid, unreadable or of an unknown kind.
"""

import json
import logging
import sys
from typing import List

from agent.core.documents import check_document, kind_named, known_kinds
from agent.errors import ConfigError, Problem

EXIT_VALID = 0
EXIT_INVALID = 1


def run(args) -> int:
    path = args.file
    as_json = bool(getattr(args, "json", False))
    source = "<stdin>" if path == "-" else path
    kind = getattr(args, "kind", None)
    if kind is not None and kind_named(kind) is None:
        msg = f"unknown kind {kind!r}: known kinds are {known_kinds()}"
        return _report(False, [Problem("$", msg, rule="kind", source=source)], as_json, raw=msg)
    try:
        data = sys.stdin.buffer.read() if path == "-" else _read(path)
        valid, checked_as, problems = _check(data, source, kind_named(kind) if kind else None)
    except ConfigError as exc:
        return _report(False, [Problem("$", str(exc), rule="syntax", source=source)], as_json, raw=str(exc))
    except OSError as exc:
        msg = f"{source}: cannot read: {exc.strerror or exc}"
        return _report(False, [Problem("$", msg, rule="unreadable", source=source)], as_json, raw=msg)
    return _report(valid, problems, as_json, kind=checked_as)


def _check(data: bytes, source: str, kind):
    """check_document, its findings printed once: the settings parser also logs unknown keys."""
    logger = logging.getLogger("agent.core.settings")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return check_document(data, source, kind)
    finally:
        logger.setLevel(level)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _report(valid: bool, problems: List[Problem], as_json: bool, raw: str = "", kind: str = "") -> int:
    """Problems go to stdout, one per line, path first; a summary goes to stderr.

    A file that cannot be read or parsed is one finding, ``raw`` (it names the file, with the
    line and column), printed once like any other; stderr has the summary, as for any invalid file.
    """
    if as_json:
        print(json.dumps({"valid": valid, "problems": [p.to_dict() for p in problems]}, indent=2, default=str))
    else:
        for p in problems:
            print(raw or str(p))
        errors = sum(1 for p in problems if p.is_error)
        warnings = len(problems) - errors
        verdict = "valid" if valid else "invalid"
        what = f" (checked as {kind})" if kind else ""
        print(f"{verdict}: {errors} error(s), {warnings} warning(s){what}", file=sys.stderr)
    return EXIT_VALID if valid else EXIT_INVALID
