"""One module per ``node-agent`` subcommand, each with ``run(args) -> int``."""


def hint_for_error(exc, exit_code: int) -> str:
    """What to do about the error that ends a command (agent.node.status.hint_for_error), for the
    command line, which imports the commands, not the pipelines."""
    from agent.node.status import hint_for_error as hint

    return hint(exc, exit_code)
