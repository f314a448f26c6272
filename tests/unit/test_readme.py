"""README.md keeps working (issue 49): every ``make`` target it names is a Makefile target, every
``node-agent`` and ``node-config-server`` command it names parses with ``--help`` and knows each
option the README gives it, every document it links is there, and it stays a start: what the
project is, the three commands and what you will see in its first 40 lines, about 200 lines in
all. Exit codes it sums up are in docs/commands.md's tables.
(tests/server/test_readme_commands.py runs the commands themselves in a clean clone.)"""

import io
import os
import re
from contextlib import redirect_stdout
from typing import Dict, List, Set, Tuple

import pytest

from tests.helpers import paths

REPO = paths.REPO
PROGRAMS = ("node-agent", "node-config-server")


def readme() -> str:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        return f.read()


def make_targets() -> Set[str]:
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as f:
        text = f.read()
    return set(re.findall(r"^([A-Za-z0-9_.-]+):(?!=)", text, re.M))


def named_make_targets(text: str) -> Set[str]:
    return set(re.findall(r"(?<![\w-])make ([a-z][\w-]*)", text))


def subcommands(program: str) -> Set[str]:
    return set(_parser(program)._subparsers._group_actions[0].choices)  # type: ignore[union-attr]


def _parser(program: str):
    if program == "node-agent":
        from agent.cli import build_parser
    else:
        from agent.server.cli.main import build_parser
    return build_parser()


def named_commands(text: str, program_of_rows: str = "") -> Dict[Tuple[str, str], Set[str]]:
    """(program, subcommand) -> the options given to it, from every `...` span: one that starts
    with a program's name (its subcommand may be unknown: the test then fails), or, in a line that
    named the program before (``program_of_rows``: every line), one of its subcommands; a span
    that is an option (`--once`) belongs to the line's last command."""
    found: Dict[Tuple[str, str], Set[str]] = {}
    known = {p: subcommands(p) for p in PROGRAMS}
    for line in text.splitlines():
        program, current = program_of_rows or None, None
        for span in re.findall(r"`([^`]+)`", line):
            words = span.replace("\\|", "|").split()
            if not words:
                continue
            if words[0].startswith("-") and current is not None:
                found[current].update(_flags(words))
                continue
            if words[0] in PROGRAMS and len(words) > 1:
                program, words = words[0], words[1:]
            elif program is None or words[0] not in known[program]:
                continue
            current = (program, words[0])
            found.setdefault(current, set()).update(_flags(words[1:]))
    return found


def _flags(words: List[str]) -> Set[str]:
    return {w.strip("[]").split("=")[0] for w in words if re.match(r"^\[?--?[a-z]", w)}


def commands_md() -> Dict[Tuple[str, str], Set[str]]:
    """The commands of docs/commands.md's tables, by its sections (## node-agent, ## node-config-server)."""
    with open(os.path.join(REPO, "docs", "commands.md"), encoding="utf-8") as f:
        text = f.read()
    found: Dict[Tuple[str, str], Set[str]] = {}
    for program in PROGRAMS:
        section = text.split(f"\n## {program}\n", 1)[1].split("\n## ", 1)[0]
        rows = "\n".join(line.split(" | ")[0] for line in section.splitlines() if line.startswith("| `"))
        for key, flags in named_commands(rows, program).items():
            found.setdefault(key, set()).update(flags)
    return found


def help_text(program: str, command: str) -> str:
    from agent.cli import main as node_agent
    from agent.server.cli.main import main as node_config_server

    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as exited:
        (node_agent if program == "node-agent" else node_config_server)([command, "--help"])
    assert exited.value.code == 0, (program, command)
    return out.getvalue()


def test_every_make_target_the_readme_names_is_a_makefile_target():
    named = named_make_targets(readme())
    assert {"demo", "kube-demo", "test"} <= named
    assert named <= make_targets(), named - make_targets()


@pytest.mark.parametrize("where", ["README.md", "docs/commands.md"])
def test_every_command_named_parses_with_help_and_knows_the_options_it_is_given(where):
    commands = named_commands(readme()) if where == "README.md" else commands_md()
    assert {c for p, c in commands if p == "node-agent"} >= {"firstboot", "update", "status", "validate", "plan",
                                                             "skew"}
    assert {c for p, c in commands if p == "node-config-server"} >= {"serve", "get", "describe", "status", "render",
                                                                     "approve", "delete", "rollback"}
    for (program, command), flags in sorted(commands.items()):
        assert command in subcommands(program), (where, program, command)
        text = help_text(program, command)
        missing = [f for f in sorted(flags) if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]
        assert not missing, (where, program, command, missing)


def test_every_document_the_readme_and_contributing_link_is_there():
    for name in ("README.md", "CONTRIBUTING.md"):
        with open(os.path.join(REPO, name), encoding="utf-8") as f:
            links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", f.read())
        assert links, name
        missing = [link for link in links if not os.path.exists(os.path.join(REPO, link))]
        assert not missing, (name, missing)


def test_the_readme_is_a_start_what_it_is_and_the_three_commands_in_40_lines_about_200_in_all():
    lines = readme().splitlines()
    assert len(lines) <= 200, len(lines)
    start = "\n".join(lines[:40])
    for command in ("make demo", "make kube-demo", "make test"):
        assert re.search(rf"^{command}\s+#", start, re.M), command  # in the block of the three commands
        assert f"**`{command}`**" in start, command  # and what you will see
    assert "node-config-server" in lines[3] or "node-config-server" in " ".join(lines[:6])


def exit_codes_named(text: str) -> List[int]:
    summary = text.split("Exit codes are a contract:", 1)[1].split("Each command's own table", 1)[0]
    return [int(n) for n in re.findall(r"(?<![\w.-])(\d{1,3})(?= )", summary)]


def test_every_exit_code_the_readme_sums_up_is_in_docs_commands_tables():
    with open(os.path.join(REPO, "docs", "commands.md"), encoding="utf-8") as f:
        tables = f.read()
    codes = exit_codes_named(readme())
    assert {0, 1, 2, 65, 66, 69, 70, 75, 77, 78, 79, 141} <= set(codes), codes
    for code in codes:
        assert re.search(rf"(\| {code} \||[ (]{code}[ ,;)])", tables), code
