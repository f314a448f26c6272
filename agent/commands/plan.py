"""``node-agent plan``: what applying ``--to`` on a node at ``--from`` would change and do.

``--json`` prints ``{"actions": [...], "drain": bool, "reboot": bool, "changes": {...}}`` (and
``drainSkipped``, why, when ``--control-plane-topology SingleReplica`` drops a drain); each
action has ``type`` and, for Reload/Restart, ``unit``, plus ``causes`` (why). ``Special``
(registries.conf) appears as itself, with ``reload: crio.service`` and whether it drains
(also reflected in the top-level ``drain``). ``--show-policy`` prints the merged policy.
"""

import sys
from typing import Any

from agent.commands import dump
from agent.errors import ConfigError, InputMissing, UsageError


def _read(path: str, what: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        reason = "no such file" if isinstance(exc, FileNotFoundError) else f"cannot read it: {exc.strerror or exc}"
        raise InputMissing(f"{what} {path}: {reason}")


def _policy(args: Any):
    from agent.core.disruption import effective_policy, load_policy_text

    path = getattr(args, "policy", None)
    if not path:
        return effective_policy()
    return effective_policy(load_policy_text(_read(path, "--policy"), source=path))


def _overrides(args: Any) -> tuple:
    from agent.core.reconcilable import storage_overrides_text

    path = getattr(args, "policy", None)
    return storage_overrides_text(_read(path, "--policy")) if path else ()


def _config(path: str, what: str):
    from agent.core.loadconfig import load_node_config

    data = _read(path, what)
    try:
        return load_node_config(data, path)
    except ConfigError as exc:
        if not exc.source:
            exc.source = path
        raise


def _dump_yaml(doc: Any) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def run(args: Any) -> int:
    policy = _policy(args)
    if getattr(args, "show_policy", False):
        doc = policy.to_dict()
        sys.stdout.write(dump(doc, "json") if _output(args) == "json" else _dump_yaml(doc))
        return 0

    if not args.from_file or not args.to_file:
        raise UsageError("plan needs --from FILE and --to FILE (or --show-policy)")
    old = _config(args.from_file, "--from")
    new = _config(args.to_file, "--to")

    from agent.core.disruption import for_topology, plan_disruption
    from agent.core.reconcilable import check

    # What first boot and update refuse (a FIPS flip, day-2 storage), plan refuses too: exit 65.
    # The node's kernel is not here to ask, so --from's fips stands for it (update does the same
    # where /proc says nothing).
    # The --policy MachineConfiguration's irreconcilableValidationOverrides.storage lets storage through.
    kept = check(old, new, None, firstboot=bool(args.firstboot), overrides=_overrides(args))
    for section in kept:
        sys.stderr.write(f"note: storage.{section} changed: allowed by irreconcilableValidationOverrides.storage; "
                         "a running node keeps what it was installed with and reports the difference\n")
    plan = plan_disruption(old, new, policy, firstboot=bool(args.firstboot))
    plan = for_topology(plan, getattr(args, "control_plane_topology", None))
    if _output(args) in ("json", "yaml"):
        sys.stdout.write(dump(plan.to_dict(), _output(args)))
    else:
        print(plan.explain())
    return 0


def _output(args: Any) -> str:
    return getattr(args, "output", None) or ("json" if getattr(args, "json", False) else "text")
