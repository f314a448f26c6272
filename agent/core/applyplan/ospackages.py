"""The MCD's kernel and extension package sets and the rpm-ostree argument lists that switch them
(pure; agent.host.rpmostree runs them): ``switchKernel`` (pkg/daemon/update.go:2005) and
``generateExtensionsArgs`` (update.go:1814)."""

from typing import List, Sequence

# The MCD's package sets (update.go switchKernel; getSupportedExtensions).
DEFAULT_KERNEL = ("kernel", "kernel-core", "kernel-modules", "kernel-modules-core", "kernel-modules-extra")
KERNEL_PACKAGES = {
    "realtime": ("kernel-rt-core", "kernel-rt-modules", "kernel-rt-modules-extra", "kernel-rt-kvm"),
    "64k-pages": ("kernel-64k-core", "kernel-64k-modules", "kernel-64k-modules-core", "kernel-64k-modules-extra"),
}
EXTENSION_PACKAGES = {
    "wasm": ("crun-wasm",),
    "ipsec": ("NetworkManager-libreswan", "libreswan"),
    "usbguard": ("usbguard",),
    "kerberos": ("krb5-workstation", "libkadm5"),
    "kernel-devel": ("kernel-devel", "kernel-headers"),
    "sandboxed-containers": ("kata-containers",),
    "sysstat": ("sysstat",),
}


def canonical_kernel_type(kernel_type: str) -> str:
    return kernel_type if kernel_type in KERNEL_PACKAGES else "default"


def kernel_switch_commands(old: str, new: str) -> List[List[str]]:
    """rpm-ostree argument lists that switch the kernel from ``old`` to ``new`` (MCD switchKernel):
    to default: ``override reset <default kernel> --uninstall <old kernel's packages>``; from
    default: ``override remove <default kernel> --install <new kernel's packages>``; between
    realtime and 64k-pages: back to default, then to the new one."""
    old, new = canonical_kernel_type(old), canonical_kernel_type(new)
    if old == new:
        return []
    out = []
    if old != "default":
        out.append(["override", "reset", *DEFAULT_KERNEL] + [a for p in KERNEL_PACKAGES[old] for a in ("--uninstall", p)])
    if new != "default":
        out.append(["override", "remove", *DEFAULT_KERNEL] + [a for p in KERNEL_PACKAGES[new] for a in ("--install", p)])
    return out


def extensions_command(added: Sequence[str], removed: Sequence[str]) -> List[str]:
    """``update --install P ... --uninstall Q ...`` for extensions added and removed (MCD
    generateExtensionsArgs on RHEL-based nodes: each extension's packages); [] when none."""
    args = [a for ext in added for p in EXTENSION_PACKAGES.get(ext, (ext,)) for a in ("--install", p)]
    args += [a for ext in removed for p in EXTENSION_PACKAGES.get(ext, (ext,)) for a in ("--uninstall", p)]
    return ["update", *args] if args else []


def unknown_extensions(extensions: Sequence[str]) -> List[str]:
    return [e for e in extensions if e not in EXTENSION_PACKAGES]
