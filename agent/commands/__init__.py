"""One module per ``node-agent`` subcommand, each with ``run(args) -> int``."""


def hint_for_error(exc, exit_code: int) -> str:
    """What to do about the error that ends a command (agent.node.status.hint_for_error), for the
    command line, which imports the commands, not the pipelines."""
    from agent.node.status import hint_for_error as hint

    return hint(exc, exit_code)


def dump(doc, fmt: str) -> str:
    """``doc`` as ``-o json`` or ``-o yaml`` prints it (the same two formats node-config-server's
    ``-o`` takes)."""
    import json

    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    return json.dumps(doc, indent=2, default=str) + "\n"
