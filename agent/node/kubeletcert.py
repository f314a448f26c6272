"""The kubelet's client certificate, as node-agent presents it to the config server (issue 45;
docs/security.md "Identity").

On OpenShift a node's identity is its kubelet's client certificate: ``CN=system:node:<name>``,
``O=system:nodes``, issued once the cluster approved the kubelet's CSR (cluster-machine-approver
checks the Machine). A bootstrapped kubelet keeps certificate and key in one PEM,
``/var/lib/kubelet/pki/kubelet-client-current.pem`` (a symlink the kubelet's certificate manager
moves to each rotated file: k8s.io/client-go/util/certificate, ``kubelet-client-<time>.pem``).
node-agent presents it (``report.kubeletCertFile``) on every request to the config server once
the file exists, holds a certificate and its key, and is within its validity; the server, which
verifies it against the cluster's client CA, then knows the request comes from that node.

First boot ends before the kubelet starts, so a new node registers with the bootstrap token and
waits (pending); the day-2 loop looks for the certificate every few seconds until it appears and
then sends its last report with it (report.Reporter.flush), which upgrades the node's identity
within seconds of the kubelet's CSR being approved.
"""

import hashlib
import logging
import os
import ssl
import time
from dataclasses import dataclass
from typing import Optional, Tuple

from agent.host.root import Root

log = logging.getLogger(__name__)

POLL = 2.0  # seconds between looks for the certificate while the node waits for one


@dataclass(frozen=True)
class Usable:
    path: str  # the file as the host sees it (under --root)
    fingerprint: str  # SHA-256 of its bytes: a rotated certificate is another one


class KubeletCert:
    """``report.kubeletCertFile`` under ``root``: whether it may be presented now. Looking is a
    stat while the file is unchanged (by inode, size and mtime), a read and parse when it changed."""

    def __init__(self, root: Root, path: str, clock=time.time):
        self.root = root
        self.path = path
        self.clock = clock
        self._seen: Optional[Tuple[int, int, int]] = None
        self._parsed: Optional[Tuple[str, float, float, str]] = None  # (fingerprint, not before, not after, problem)
        self._said = ""

    def current(self) -> Optional[Usable]:
        """The certificate to present now, or None: no such file (the kubelet has none yet), not a
        certificate with its key (said once per problem), or outside its validity."""
        host = self.root.path(self.path)
        try:
            st = os.stat(host)
        except OSError:
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._seen:
            self._seen, self._parsed = key, _parse(host)
        fingerprint, not_before, not_after, problem = self._parsed  # type: ignore[misc]
        now = self.clock()
        if not problem and not not_before <= now <= not_after:
            problem = "it is outside its validity (the kubelet rotates it; the next one is presented)"
        if problem:
            if problem != self._said:
                log.warning("not presenting the kubelet's client certificate %s to the config server: %s", host, problem)
                self._said = problem
            return None
        self._said = ""
        return Usable(host, fingerprint)


def _parse(host_path: str) -> Tuple[str, float, float, str]:
    """(fingerprint, notBefore, notAfter, problem) of a certificate-and-key PEM."""
    try:
        with open(host_path, "rb") as f:
            data = f.read(1 << 20)
    except OSError as exc:
        return "", 0.0, 0.0, f"cannot read it ({exc.strerror})"
    fingerprint = hashlib.sha256(data).hexdigest()
    if b"-----BEGIN CERTIFICATE-----" not in data or b"PRIVATE KEY-----" not in data:
        return fingerprint, 0.0, 0.0, "it does not hold a PEM certificate and its private key"
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(host_path)
    except (ssl.SSLError, OSError, ValueError) as exc:
        return fingerprint, 0.0, 0.0, f"its certificate and key do not load together ({exc})"
    not_before, not_after = _validity(host_path)
    return fingerprint, not_before, not_after, ""


def _validity(host_path: str) -> Tuple[float, float]:
    """(notBefore, notAfter) in Unix time, through CPython's certificate decoder (the one
    ``getpeercert`` uses); where it is missing, the handshake is left to judge (always valid here)."""
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return 0.0, float("inf")
    try:
        info = decode(host_path)
        return (float(ssl.cert_time_to_seconds(info["notBefore"])),
                float(ssl.cert_time_to_seconds(info["notAfter"])))
    except (ssl.SSLError, OSError, KeyError, ValueError):
        return 0.0, float("inf")
