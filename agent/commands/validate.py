"""``node-agent validate FILE``: check any document node-agent reads, by its kind.

The kind comes from ``kind:`` or the document's shape (``--kind`` names it); each kind is checked
with the rules its consumer applies (``agent.core.documents``): Ignition and pointer configs,
MachineConfig, MachineConfigPool, MachineConfiguration, MachineOSConfig, MachineOSBuild,
agent.yaml and the boot image skew rules. One line per problem, each starting with its JSON path;
exit 0 when valid (warnings may be printed), 1 when invalid, not parseable or of an unknown kind,
66 when the file is not there or cannot be read (a typo in its name is not an invalid document).
"""

import logging
import sys
from typing import List

from agent.commands import dump
from agent.core.documents import check_document, kind_named, known_kinds
from agent.errors import ConfigError, InputMissing, Problem

EXIT_VALID = 0
EXIT_INVALID = 1


def run(args) -> int:
    path = args.file
    fmt = getattr(args, "output", None) or ("json" if getattr(args, "json", False) else "")
    source = "<stdin>" if path == "-" else path
    kind = getattr(args, "kind", None)
    if kind is not None and kind_named(kind) is None:
        msg = f"unknown kind {kind!r}: known kinds are {known_kinds()}"
        return _report(False, [Problem("$", msg, rule="kind", source=source)], fmt, raw=msg)
    try:
        data = sys.stdin.buffer.read() if path == "-" else _read(path)
        valid, checked_as, problems = _check(data, source, kind_named(kind) if kind else None)
    except ConfigError as exc:
        return _report(False, [Problem("$", str(exc), rule="syntax", source=source)], fmt, raw=str(exc))
    except OSError as exc:
        reason = "no such file" if isinstance(exc, FileNotFoundError) else f"cannot read it: {exc.strerror or exc}"
        raise InputMissing(f"{source}: {reason}")
    return _report(valid, problems, fmt, kind=checked_as)


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


def _report(valid: bool, problems: List[Problem], fmt: str, raw: str = "", kind: str = "") -> int:
    """Problems go to stdout, one per line, path first; a summary goes to stderr.

    A file that cannot be read or parsed is one finding, ``raw`` (it names the file, with the
    line and column), printed once like any other; stderr has the summary, as for any invalid file.
    """
    if fmt:  # -o json or -o yaml
        sys.stdout.write(dump({"valid": valid, "problems": [p.to_dict() for p in problems]}, fmt))
    else:
        for p in problems:
            print(raw or str(p))
        errors = sum(1 for p in problems if p.is_error)
        warnings = len(problems) - errors
        verdict = "valid" if valid else "invalid"
        what = f" (checked as {kind})" if kind else ""
        print(f"{verdict}: {errors} error(s), {warnings} warning(s){what}", file=sys.stderr)
    return EXIT_VALID if valid else EXIT_INVALID
