"""OS-level operations of a config (pure): kernel arguments, OS image, kernel type, extensions.

What differs is found against the booted OS when it is known (image, kernel arguments), else
against the previous config; without a previous config the node runs what the boot image ships,
the default kernel and no extensions, as the MCD's first boot starts from an empty MachineConfig.
Each operation maps to the rpm-ostree command lines the MCD runs (``os_commands``); a live host
runs them, an offline root records them in ``pending-os.json``.
"""

from typing import List, Optional, Tuple

from agent.core.applyplan.op import Op
from agent.core.applyplan.ospackages import canonical_kernel_type, extensions_command, kernel_switch_commands
from agent.core.nodeconfig import NodeConfig


def kernel_args(target: NodeConfig, previous: Optional[NodeConfig], booted: Optional[Tuple[str, Tuple[str, ...]]]
                ) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(append, delete) of kernel arguments: MachineConfig kernelArguments + Ignition kernelArguments."""
    ign = target.ignition.get("kernelArguments") or {}
    want = list(target.kernel_arguments) + [a for a in ign.get("shouldExist") or [] if a not in target.kernel_arguments]
    unwanted = list(ign.get("shouldNotExist") or [])
    if previous is not None:
        unwanted += [a for a in previous.kernel_arguments if a not in want and a not in unwanted]
    if booted is not None:
        have = set(booted[1])
        return (tuple(a for a in want if a not in have), tuple(a for a in unwanted if a in have))
    if previous is not None:
        prev_ign = previous.ignition.get("kernelArguments") or {}
        prev_want = set(previous.kernel_arguments) | set(prev_ign.get("shouldExist") or [])
        want = [a for a in want if a not in prev_want]
    return tuple(want), tuple(unwanted)


def os_operations(target: NodeConfig, previous: Optional[NodeConfig],
                  booted: Optional[Tuple[str, Tuple[str, ...]]]) -> List[Op]:
    """Kernel-argument and rebase operations the target needs. With the booted OS known (image,
    kernel arguments) they are what differs from it; without, what differs from ``previous``."""
    out = []
    append, delete = kernel_args(target, previous, booted)
    if append or delete:
        out.append(Op("kargs", args=(append, delete), where="$.kernelArguments"))
    if target.os_image_url:
        booted_image = booted[0] if booted else None
        prev_image = previous.os_image_url if previous is not None else None
        if booted_image != target.os_image_url and (booted is not None or prev_image != target.os_image_url):
            out.append(Op("rebase", target=target.os_image_url, where="$.osImageURL"))
    # Without a previous config the node runs what the boot image ships: the default kernel and
    # no extensions (the MCD's first boot starts from an empty MachineConfig too).
    old_type = canonical_kernel_type(previous.kernel_type if previous is not None else "")
    new_type = canonical_kernel_type(target.kernel_type)
    if old_type != new_type:
        out.append(Op("kernel-type", args=((old_type,), (new_type,)), where="$.kernelType"))
    old_ext = list(previous.extensions) if previous is not None else []
    added = tuple(e for e in dict.fromkeys(target.extensions) if e not in old_ext)
    removed = tuple(e for e in dict.fromkeys(old_ext) if e not in target.extensions)
    if added or removed:
        out.append(Op("extensions", args=(added, removed), where="$.extensions"))
    return out


def os_commands(op: Op) -> List[List[str]]:
    """The rpm-ostree argument lists an OS operation runs (the same on a live host and in the
    pending record of an offline root)."""
    if op.kind == "kargs":
        append, delete = op.args
        args = ["kargs"] + [f"--append={a}" for a in append] + [f"--delete-if-present={d}" for d in delete]
        return [args] if len(args) > 1 else []
    if op.kind == "rebase":
        return [["rebase", "--experimental", f"ostree-unverified-registry:{op.target}"]]
    if op.kind == "kernel-type":
        return kernel_switch_commands(op.args[0][0], op.args[1][0])
    if op.kind == "extensions":
        return [extensions_command(*op.args)]
    return []
