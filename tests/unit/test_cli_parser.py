"""agent/cli.py builds only the invoked command's options (start-up): the command line must read
exactly as with every command's options built (same help, same errors, same parsed values)."""

import contextlib
import io

import pytest

from agent import cli


def _outcome(parser, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result = vars(parser.parse_args(argv))
        except SystemExit as exc:
            result = ("exit", exc.code)
    return result, out.getvalue(), err.getvalue()


ARGVS = [[], ["--version"], ["--help"], ["bogus"], ["--root", "x", "firstboot"], ["validate"],
         ["update", "--interval", "0"], ["plan", "--from", "a", "--to", "b", "--json"],
         ["status", "--root", "/r", "--json"], ["skew", "--aleph", "a"], ["firstboot", "--dry-run"],
         ["update", "--once", "--node-name", "Bad_Name"], ["plan", "--bogus"], ["validate", "-", "--json"]]
ARGVS += [[name, "--help"] for name in cli._COMMANDS]


@pytest.mark.parametrize("argv", ARGVS, ids=lambda a: " ".join(a) or "(none)")
def test_lean_parser_reads_the_command_line_as_the_full_one(argv, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert cli._only(argv) in (None, "", *cli._COMMANDS)
    assert _outcome(cli.build_parser(only=cli._only(argv)), argv) == _outcome(cli.build_parser(), argv)


def test_the_formatter_width_follows_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "50")
    narrow = cli.build_parser().format_help()
    monkeypatch.setenv("COLUMNS", "200")
    assert max(map(len, narrow.splitlines())) <= 50 < max(map(len, cli.build_parser().format_help().splitlines()))


def test_version_loads_no_more_than_argparse():
    """Start-up without timing: ``--version`` prints its line and exits 0 having imported no
    subcommand, no logging, and neither of argparse's lazy imports it used to pay for
    (shutil for the terminal width, textwrap to format the version line)."""
    import subprocess
    import sys

    script = ("import sys\nfrom agent.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit as e:\n"
              "    code = e.code\nprint(code, sorted(m for m in ('shutil', 'textwrap', 'logging', 'agent.errors', "
              "'agent.commands.firstboot', 'json') if m in sys.modules), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout == f"node-agent {cli.__version__}\n"
    assert out.stderr.strip() == "0 []"


@pytest.mark.parametrize("argv", [["status"], ["plan"], ["validate", "x.ign"]])
def test_an_unknown_option_shows_the_commands_own_usage(argv, capsys):
    command = argv[0]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv + ["--bogus"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith(f"usage: node-agent {command} ") and f"node-agent {command}: error: unrecognized " \
        "arguments: --bogus" in err, err


@pytest.mark.parametrize("argv", [["validate", "-", "-o", "yaml"], ["skew", "--aleph", "a", "--rules", "r", "-o",
                                                                    "json"], ["status", "-o", "yaml"]])
def test_o_json_and_yaml_are_taken_as_node_config_server_takes_them(argv):
    args = cli.build_parser().parse_args(argv)
    assert (getattr(args, "output", None) or args.format) == argv[-1]
