"""``node-agent firstboot``: see agent/node/firstboot.py."""


def run(args) -> int:
    from agent.node import firstboot

    opts = firstboot.Options(root=args.root, pointer=args.pointer, settings=args.settings,
                             node_name=args.node_name, dry_run=args.dry_run)
    return firstboot.run(opts, **_live_host(opts.root))


def _live_host(root: str) -> dict:
    """systemd, logind and rpm-ostree for the running system; none for another root."""
    import os

    if os.path.abspath(root) != "/":
        return {}
    from agent.host.logind import Logind
    from agent.host.rpmostree import RpmOstree
    from agent.host.systemd import Systemd

    return {"systemd": Systemd(), "logind": Logind(), "rpmostree": RpmOstree()}
