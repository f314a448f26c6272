"""The control plane's route to the guest's kubelet, so that `kubectl logs` (and exec, port-forward)
on the host work as on a cluster: the API server dials the Node's InternalIP at the kubelet's
port (Node.status.daemonEndpoints.kubeletEndpoint.Port), as the kubelet reported them itself.

The guest's address is QEMU's user network's (10.0.2.15, by its DHCP), which nothing on the host
routes to: slirp is a NAT in QEMU's process, reached from the host only through a ``hostfwd``.
So the host is given that address on its loopback (``ip addr add ADDRESS/32 dev lo``, its local
route's source 127.0.0.1: see ``open``) and QEMU forwards ADDRESS:PORT on the host to the
guest's PORT. The Node's address is the one the kubelet
found on its own interface, its port the kubelet's own: nothing in the guest is changed for it.

Why not another way: the kubelet refuses a loopback ``--node-ip`` (validateNodeIP,
pkg/kubelet/kubelet_node_status.go: "nodeIP can't be loopback address") and one that is on none of
its interfaces ("not found in the host's network interfaces"), so the Node cannot name the
host's 127.0.0.1 forward; its Hostname address (vm-node-0) the host does not resolve, and the API
server's --kubelet-preferred-address-types puts InternalIP first (tests/helpers/kube_cluster.py).

The address and its route are removed again by ``stop``. A host that has the address itself (one
behind QEMU's or VirtualBox's own NAT) gets no route: the result says so and `kubectl logs` fails
there. Needs root (CAP_NET_ADMIN), which the VM test has.
"""

import socket
import subprocess
from typing import Any, Dict, Optional, Tuple

from tests.vm.guest import Guest

IP = "ip"  # iproute2


def kubelet_endpoint(node: Dict[str, Any]) -> Tuple[str, int]:
    """(InternalIP, kubelet port) as the Node says them: where the API server dials the kubelet."""
    status = node.get("status") or {}
    ips = [a["address"] for a in status.get("addresses") or [] if a.get("type") == "InternalIP"]
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    if not ips or not port:
        raise AssertionError(f"Node {node['metadata']['name']} names no InternalIP or kubelet port: "
                             f"addresses {status.get('addresses')}, daemonEndpoints {status.get('daemonEndpoints')}")
    return ips[0], int(port)


def is_local(address: str) -> bool:
    """True if a socket can bind ``address`` on this host (it is one of its addresses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
            return True
        except OSError:
            return False


class KubeletRoute:
    def __init__(self) -> None:
        self.added: Optional[str] = None
        self.address, self.port = "", 0

    def open(self, guest: Guest, node: Dict[str, Any]) -> Dict[str, Any]:
        """The host's ADDRESS:PORT forwarded to the guest's kubelet, ADDRESS given to the host's
        loopback first; returns what was done (for the result; "problem" when nothing could be)."""
        self.address, self.port = kubelet_endpoint(node)
        if is_local(self.address):  # a host behind QEMU's or VirtualBox's NAT: 10.0.2.15 is its own
            return {"address": self.address, "port": self.port,
                    "problem": f"the host has the Node's address {self.address} itself: a connection from it would "
                               "reach the guest from the guest's own address (dropped); no route made"}
        self._ip("addr", "add", f"{self.address}/32", "dev", "lo")
        self.added = self.address
        # From the host's loopback: QEMU's user network shows the guest a connection from 127.0.0.1
        # as one from 10.0.2.2 (the host), any other source as is, and from ADDRESS (the kernel's
        # choice for a local destination) the guest would see its own address, which Linux drops as
        # a martian: the host's connections to ADDRESS never opened.
        self._ip("route", "replace", "table", "local", "local", self.address, "dev", "lo", "proto", "kernel",
                 "scope", "host", "src", "127.0.0.1")
        answer = guest.hmp(f"hostfwd_add net0 tcp:{self.address}:{self.port}-:{self.port}")
        if answer.strip():  # the monitor answers nothing on success
            raise AssertionError(f"hostfwd_add {self.address}:{self.port} -> the guest's {self.port}: {answer.strip()}")
        return {"address": self.address, "port": self.port}

    @staticmethod
    def _ip(*args: str) -> None:
        proc = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise AssertionError(f"ip {' '.join(args)} (the host's route to the guest's kubelet, for kubectl logs; "
                                 f"needs root): {proc.stderr.strip()}")

    def stop(self) -> None:
        """The address off the host's loopback again, and its local route (with another source than
        the address, deleting the address leaves it), if this added them."""
        if self.added:
            for args in (["route", "del", "table", "local", "local", self.added, "dev", "lo"],
                         ["addr", "del", f"{self.added}/32", "dev", "lo"]):
                subprocess.run([IP, *args], capture_output=True, timeout=30)
            self.added = None
