"""``node-agent skew --aleph FILE --rules FILE [--json]``.

Exit 0 when the decision is ok or warn, 1 when it is refuse. ``--aleph`` is a plain file path
on this machine (not inside a root); a missing or corrupt aleph file means the booted version is
unknown, which is a warn. A rules file that is not there or cannot be read exits 66 (EX_NOINPUT);
one that is invalid is an error on stderr, every problem prefixed with its JSON path, and exit 65
(nothing on stdout either way).

``--json`` prints ``{"decision", "reason", "code", "booted": {...}, "mode", "required",
"target", "allowMajorUpgrade", "needed"}``; otherwise one line ``<decision>: <reason>``.
"""

import sys

from agent.commands import dump
from agent.core.skew import REFUSE, booted_from_aleph, decide, load_rules_text, parse_rules
from agent.errors import ConfigError, InputMissing, Problem


def _read_aleph(path: str):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return booted_from_aleph(None, path, missing=f"{path} does not exist")
    except OSError as exc:
        return booted_from_aleph(None, path, missing=f"{path} could not be read ({exc.strerror or exc})")
    return booted_from_aleph(data, path)


def _read_rules(path: str):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        reason = "no such file" if isinstance(exc, FileNotFoundError) else f"cannot read it: {exc.strerror or exc}"
        raise InputMissing(f"--rules {path}: {reason}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("cannot use the skew rules file", [Problem("$", "not UTF-8 text", source=path)])
    return parse_rules(load_rules_text(text, source=path), source=path)


def run(args) -> int:
    rules = _read_rules(args.rules)
    outcome = decide(_read_aleph(args.aleph), rules)
    fmt = getattr(args, "output", None) or ("json" if getattr(args, "json", False) else "text")
    if fmt in ("json", "yaml"):
        sys.stdout.write(dump(outcome.to_dict(), fmt))
    else:
        print(f"{outcome.decision}: {outcome.reason}")
    return 1 if outcome.decision == REFUSE else 0
