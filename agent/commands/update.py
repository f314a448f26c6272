"""``node-agent update``: see agent/node/update.py."""

from agent.commands.firstboot import _live_host


def run(args) -> int:
    from agent.node import update

    return update.run(args, **_live_host(args.root))
