"""Scratch node roots: a tree that looks enough like a freshly booted RHCOS node for first boot.

Used by the end-to-end tests, the scale-up scenario and ``make demo``.
"""

import base64
import json
import os
from typing import Dict, Optional


def _write(path: str, data: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(data)
    os.chmod(path, mode)


def pointer_config(server_url: str, pool: str, ca_pem: Optional[bytes] = None, token: Optional[str] = None) -> Dict:
    """The pointer config a node boots with: ``merge`` of ``<server>/config/<pool>``, with the
    bootstrap token in ``httpHeaders`` when given (configs with secrets need a credential)."""
    source: Dict = {"source": f"{server_url}/config/{pool}"}
    if token:
        source["httpHeaders"] = [{"name": "Authorization", "value": f"Bearer {token}"}]
    ignition: Dict = {"version": "3.4.0", "config": {"merge": [source]}}
    if ca_pem:
        ignition["security"] = {"tls": {"certificateAuthorities": [
            {"source": "data:text/plain;charset=utf-8;base64," + base64.b64encode(ca_pem).decode()}]}}
    return {"ignition": ignition}


def make_node_root(top: str, server_url: str, pool: str, *, ca_pem: Optional[bytes] = None,
                   aleph_version: str = "9.6.20250121-0", booted_image: str = "",
                   token: Optional[str] = None, node_name: Optional[str] = None,
                   fetch_budget: float = 20.0, cmdline: str = "") -> str:
    """Create a scratch node root under ``top`` and return it."""
    os.makedirs(top, exist_ok=True)
    _write(os.path.join(top, "etc/node-agent/pointer.ign"), json.dumps(pointer_config(server_url, pool, ca_pem, token)))
    settings = ["stateDir: /var/lib/node-agent", "fetch:", f"  totalTimeout: {fetch_budget}"]
    if node_name:
        settings.insert(0, f"nodeName: {node_name}")
    if token:
        _write(os.path.join(top, "etc/node-agent/token"), token + "\n", mode=0o600)
        settings += ["report:", "  tokenFile: /etc/node-agent/token"]
    _write(os.path.join(top, "etc/node-agent/agent.yaml"), "\n".join(settings) + "\n")
    # The boot image: newer builds write `version` and the image they were built from.
    aleph = {"version": aleph_version, "ref": "", "ostree-commit": "0" * 64}
    if booted_image:
        aleph["container-image"] = {"image": booted_image, "imgid": "sha256:" + "0" * 64}
    _write(os.path.join(top, "sysroot/.aleph-version.json"), json.dumps(aleph))
    link = os.path.join(top, "sysroot/.coreos-aleph-version.json")
    if not os.path.lexists(link):
        os.symlink(".aleph-version.json", link)
    _write(os.path.join(top, "etc/passwd"),
           "root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000:CoreOS Admin:/var/home/core:/bin/bash\n")
    _write(os.path.join(top, "etc/group"), "root:x:0:\nwheel:x:10:core\ncore:x:1000:\n")
    _write(os.path.join(top, "etc/shadow"), "root:*:19000::::::\ncore:*:19000::::::\n", mode=0o000)
    _write(os.path.join(top, "etc/kubernetes/kubelet-env"), "KUBELET_LOG_LEVEL=2\n")
    if cmdline:
        _write(os.path.join(top, "proc/cmdline"), cmdline + "\n")
    os.makedirs(os.path.join(top, "var/home/core"), exist_ok=True)
    if not os.path.exists(os.path.join(top, BOOT_ID)):
        reboot(top)
    return top


BOOT_ID = "proc/sys/kernel/random/boot_id"


def reboot(top: str) -> str:
    """A reboot of a scratch root, as node-agent sees one: a new boot id (the kernel's, under
    ``--root``). A reboot a first boot or an update asked for then ends on the next ``update``,
    which reports Done (docs/operations.md, "A scratch root")."""
    import uuid

    boot = str(uuid.uuid4())
    _write(os.path.join(top, BOOT_ID), boot + "\n")
    return boot


def not_layered(state: str) -> None:
    """Leave the example state's layered OS image out (its MachineOSConfig and builds): a change to
    infra's MachineConfigs then rolls out without waiting for an image build of the new rendered
    config (the node controller's canLayeredPoolContinue), for tests about something else."""
    import shutil

    for sub in ("machineosconfigs", "machineosbuilds"):
        shutil.rmtree(os.path.join(state, sub), ignore_errors=True)


def boot_staged(top: str, state_dir: str = "var/lib/node-agent") -> str:
    """A reboot into the OS image an update staged: a new boot id, and the image the offline apply
    recorded in ``pending-os.json`` (``osImageURL``, what rpm-ostree would have staged) is then the
    one the root runs (node-agent reads the booted image of another root from its aleph file)."""
    pending_path = os.path.join(top, state_dir, "pending-os.json")
    image = ""
    if os.path.exists(pending_path):
        with open(pending_path, encoding="utf-8") as f:
            image = str((json.load(f) or {}).get("osImageURL") or "")
    if image:
        aleph_path = os.path.join(top, "sysroot/.aleph-version.json")
        with open(aleph_path, encoding="utf-8") as f:
            aleph = json.load(f)
        aleph["container-image"] = {"image": image, "imgid": "sha256:" + "0" * 64}
        _write(aleph_path, json.dumps(aleph))
    return reboot(top)
