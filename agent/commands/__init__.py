"""One module per ``node-agent`` subcommand, each with ``run(args) -> int``."""
