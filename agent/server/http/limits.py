"""The per-connection deadlines a server is started with (its own module: gunicorn_app reads them
without importing gevent, so ``--worker-class gthread`` runs where gevent is not installed)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-connection deadlines of the gevent worker, in seconds (docs/security.md, "Timeouts")."""

    handshake: float = 10.0  # TLS handshake, from the accept
    header: float = 10.0  # request line + headers, from their first byte
    body: float = 30.0  # request body, from the end of the headers
    write: float = 60.0  # each 256 KiB of a response
    idle: float = 30.0  # a kept-alive connection waiting for its next request
