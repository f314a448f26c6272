"""A certificate authority given inline (a ``data:`` URL) must hold a PEM certificate.

Ignition only finds out at fetch time (it parses the CA when it builds the TLS client:
coreos/ignition internal/resource/url.go, ``getCAs``/``AppendCertsFromPEM``), so a pointer
config whose CA is a placeholder validates and then fails first boot. We check it offline.
"""

from typing import Optional

from agent.errors import ConfigError
from agent.ignition.dataurl import decode_data_url, decompress

PEM_BEGIN = b"-----BEGIN CERTIFICATE-----"
DOCS = "docs/install.md, section 'Configure' (pointer config)"


def inline_ca_problem(source: str, compression: Optional[str]) -> Optional[str]:
    """What is wrong with an inline CA, or None (also None for a CA fetched from a URL)."""
    if not isinstance(source, str) or source[:5].lower() != "data:":
        return None
    try:
        data = decompress(decode_data_url(source), compression)
    except ConfigError:
        return None  # the data URL itself is invalid: the resource rules say so already
    if PEM_BEGIN not in data:
        return (f"the data URL does not hold a PEM certificate ({PEM_BEGIN.decode()} ...): it looks like a "
                f"placeholder; put the base64 of the server's CA PEM there (base64 -w0 ca.crt); see {DOCS}")
    return None
