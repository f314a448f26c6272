"""A throw-away CA and server certificates for TLS tests (real X.509, made with cryptography)."""

import datetime
import ipaddress
import os
from dataclasses import dataclass
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class TLSFiles:
    ca_cert: str  # PEM path of the CA that signed cert
    cert: str  # PEM path of the server certificate
    key: str  # PEM path of the server key

    def ca_pem(self) -> bytes:
        with open(self.ca_cert, "rb") as f:
            return f.read()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def make_tls(directory: str, hosts: Sequence[str] = ("localhost", "127.0.0.1"), ca_name: str = "test CA") -> TLSFiles:
    """Create a CA and a server certificate for ``hosts`` (DNS names or IPs) under ``directory``."""
    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name)).issuer_name(_name(ca_name))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0])).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TLSFiles(os.path.join(directory, "ca.pem"), os.path.join(directory, "server.pem"),
                     os.path.join(directory, "server-key.pem"))
    _write(files.ca_cert, ca.public_bytes(serialization.Encoding.PEM))
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM))
    _write(files.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
    os.chmod(files.key, 0o600)
    return files


class ClientCA:
    """A throw-away client CA signing certificates as a cluster's does for its kubelets (the CN
    is the user, each O a group): ``issue("system:node:n1", ["system:nodes"])`` is node n1's
    kubelet certificate. ``combined`` writes certificate and key into one PEM, as a bootstrapped
    kubelet keeps /var/lib/kubelet/pki/kubelet-client-current.pem."""

    def __init__(self, directory: str, name: str = "test cluster client CA"):
        os.makedirs(directory, exist_ok=True)
        self.dir = directory
        self.now = datetime.datetime.now(datetime.timezone.utc)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self.now - datetime.timedelta(minutes=5))
            .not_valid_after(self.now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.ca_cert = os.path.join(directory, "client-ca.pem")
        _write(self.ca_cert, self.cert.public_bytes(serialization.Encoding.PEM))
        self._n = 0

    def issue(self, cn: str, orgs: Sequence[str] = (), combined: str = "", expired: bool = False,
              server_only: bool = False) -> str:
        """A client certificate for ``cn`` in ``orgs``; returns the combined PEM's path (``combined``,
        else one of the CA directory's own). ``expired``: valid until an hour ago;
        ``server_only``: its extended key usage is serverAuth alone (no client may present it)."""
        self._n += 1
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
                            + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        until = self.now - datetime.timedelta(hours=1) if expired else self.now + datetime.timedelta(days=1)
        usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if server_only else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(self.now - datetime.timedelta(hours=2)).not_valid_after(until)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                .sign(self.key, hashes.SHA256()))
        path = combined or os.path.join(self.dir, f"client-{self._n}.pem")
        write_combined(path, cert.public_bytes(serialization.Encoding.PEM), key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return path

    def kubelet(self, node: str, combined: str = "", **kw) -> str:
        return self.issue(f"system:node:{node}", ["system:nodes"], combined, **kw)


def write_combined(path: str, cert_pem: bytes, key_pem: bytes) -> str:
    """Certificate and key in one PEM file (0600), as the kubelet's certificate manager writes them."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(cert_pem + key_pem)
    return path
