"""Asking a running node-config-server (``get``, ``describe``, ``status``): where and how.

Where: ``--server URL`` (or ``server:`` of the client config, or ``$NODE_CONFIG_SERVER_URL``),
default ``http://127.0.0.1:22624`` (what ``serve`` listens on without TLS). Trust: ``--ca FILE``
(or ``certificateAuthority:``), else the system's CAs; never unverified. Token: ``--token-file
FILE`` (or ``tokenFile:``), sent as ``Authorization: Bearer``. The client config is YAML at
``--config FILE``, ``$NODE_CONFIG_SERVER_CONFIG`` or ``~/.config/node-config-server/client.yaml``
(only when it exists), with the keys ``server``, ``certificateAuthority``, ``tokenFile``; a
flag beats the file.
"""

import os
from typing import Any, Dict, Optional

DEFAULT_SERVER = "http://127.0.0.1:22624"
DEFAULT_CONFIG = "~/.config/node-config-server/client.yaml"
KEYS = ("server", "certificateAuthority", "tokenFile")

EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_INVALID = 65
EXIT_UNREACHABLE = 69
EXIT_NOPERM = 77  # EX_NOPERM: the server wants a (different) token


class ClientError(Exception):
    def __init__(self, message: str, exit_code: int):
        self.exit_code = exit_code
        super().__init__(message)


def load_client_config(path: Optional[str]) -> Dict[str, Any]:
    """The client config file's keys; {} when none is named and the default does not exist."""
    explicit = path or os.environ.get("NODE_CONFIG_SERVER_CONFIG")
    path = explicit or os.path.expanduser(DEFAULT_CONFIG)
    if not explicit and not os.path.exists(path):
        return {}
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as exc:
        raise ClientError(f"--config {path}: {exc.strerror or exc}", EXIT_USAGE)
    except yaml.YAMLError as exc:
        raise ClientError(f"--config {path}: not valid YAML: {exc}", EXIT_INVALID)
    if not isinstance(data, dict):
        raise ClientError(f"--config {path}: $ must be a map with {', '.join(KEYS)}", EXIT_INVALID)
    for key, value in data.items():
        if key not in KEYS:
            raise ClientError(f"--config {path}: $.{key}: unknown key; known: {', '.join(KEYS)}", EXIT_INVALID)
        if not isinstance(value, str) or not value:
            raise ClientError(f"--config {path}: $.{key}: must be a non-empty string", EXIT_INVALID)
    return data


class Client:
    def __init__(self, server: str, ca: Optional[str] = None, token: Optional[str] = None, timeout: float = 10.0):
        self.server = server.rstrip("/")
        self.ca = ca
        self.token = token
        self.timeout = timeout
        self._session = None

    @classmethod
    def from_args(cls, args: Any) -> "Client":
        conf = load_client_config(getattr(args, "config", None))
        server = getattr(args, "server", None) or conf.get("server") or os.environ.get("NODE_CONFIG_SERVER_URL") \
            or DEFAULT_SERVER
        if not server.startswith(("http://", "https://")):
            raise ClientError(f"--server {server!r}: expected an http:// or https:// URL", EXIT_USAGE)
        ca = getattr(args, "ca", None) or conf.get("certificateAuthority")
        if ca and not os.path.isfile(ca):
            raise ClientError(f"--ca {ca}: no such file", EXIT_USAGE)
        token_file = getattr(args, "token_file", None) or conf.get("tokenFile")
        token = None
        if token_file:
            try:
                with open(token_file, encoding="utf-8") as f:
                    token = f.read().strip()
            except OSError as exc:
                raise ClientError(f"--token-file {token_file}: {exc.strerror or exc}", EXIT_USAGE)
        return cls(server, ca, token)

    def session(self):
        if self._session is None:
            import requests

            s = requests.Session()
            s.trust_env = False  # the URL given is the server meant; no proxy from the environment
            s.verify = self.ca or True
            if self.token:
                s.headers["Authorization"] = f"Bearer {self.token}"
            self._session = s
        return self._session

    def get(self, path: str) -> Any:
        """GET ``path`` as JSON; a ClientError says what went wrong and exits as it should."""
        return self.request("GET", path)

    def request(self, method: str, path: str) -> Any:
        """``method`` on ``path``, the answer as JSON; a ClientError says what went wrong."""
        import requests

        url = self.server + path
        try:
            resp = self.session().request(method, url, timeout=self.timeout, allow_redirects=False)
        except requests.exceptions.SSLError as exc:
            raise ClientError(f"TLS with {self.server} failed ({exc}); pass the server's CA with --ca FILE",
                              EXIT_UNREACHABLE)
        except requests.RequestException as exc:
            https = "https://" + self.server[len("http://"):]
            if self.server.startswith("http://") and _speaks_tls(self.server, self.timeout):
                raise ClientError(f"{self.server} answers TLS, not plain HTTP: use --server {https} (with --ca FILE "
                                  f"for its CA), or server: {https} in the client config", EXIT_UNREACHABLE)
            raise ClientError(f"cannot reach node-config-server at {self.server} ({_why(exc)}); is it running? "
                              f"(--server URL, or server: in the client config)", EXIT_UNREACHABLE)
        if resp.status_code == 200:
            try:
                return resp.json()
            except ValueError:
                raise ClientError(f"{url} did not answer JSON: is {self.server} a node-config-server?",
                                  EXIT_UNREACHABLE)
        message = _error_message(resp)
        if resp.status_code == 404:
            raise ClientError(message, EXIT_NOT_FOUND)
        if resp.status_code in (401, 403):
            raise ClientError(for_client(message), EXIT_NOPERM)
        if resp.status_code == 409:  # the server understood and refused in the state it is in (nothing to do)
            raise ClientError(message, EXIT_NOT_FOUND)
        if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
            # What the command line asked is malformed (a name that is no Kubernetes name): a usage
            # error, said once with its fix; never "unreachable", which sends one looking at the network.
            raise ClientError(f"{message}\nwhat to do: {_fix(resp, message)}", EXIT_USAGE)
        raise ClientError(f"{url}: HTTP {resp.status_code}: {message}", EXIT_UNREACHABLE)


SERVER_FLAGS = (" (--admin-token-file)", " (--token-file)")  # the server's own flags, in its answers


def for_client(message: str) -> str:
    """A 401/403 answer in the client's words: the server names the flags it was started with
    (``--admin-token-file``); a client passes any token with its own ``--token-file``."""
    admin = "needs the admin token" in message
    for flag in SERVER_FLAGS:
        message = message.replace(flag, "")
    if "start it with --admin-token-file" in message:  # the server itself has no admin token
        return message
    what = "FILE holding the admin token" if admin else "FILE"
    return f"{message} (pass --token-file {what}, or tokenFile: in the client config)"


def _speaks_tls(server: str, timeout: float) -> bool:
    """Whether ``server`` (an http:// URL that failed) completes a TLS handshake: the serve port
    with --tls-cert resets a plain-HTTP request, which must not read as "is it running?". Only a
    probe: nothing is sent after the handshake and no certificate is trusted for anything."""
    import socket
    import ssl
    import urllib.parse

    url = urllib.parse.urlsplit(server)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((url.hostname, url.port or 80), timeout=min(timeout, 5.0)) as sock:
            with context.wrap_socket(sock, server_hostname=url.hostname):
                return True
    except (OSError, ValueError):
        return False


def _why(exc: Exception) -> str:
    """The OS's words (``[Errno 111] Connection refused``) out of urllib3's long chain, when there."""
    import re

    found = re.findall(r"\[Errno -?\d+\] [^'\")]+", str(exc))
    return found[-1] if found else type(exc).__name__


def _fix(resp, message: str) -> str:
    """What to do about a request the server refused as malformed, by the field it names."""
    import re

    try:
        field = str((resp.json().get("error") or {}).get("field") or "")
    except (ValueError, AttributeError):
        field = ""
    if field in ("node", "pool"):
        named = re.search(r"invalid \w+ name '([^']*)'", message)
        lower = named.group(1).lower() if named else ""
        guess = f"did you mean {lower}? " if named and lower != named.group(1) else ""
        chars = "letters, digits, '-' and '.'" if field == "node" else "letters, digits and '-'"
        return f"{guess}{field} names are lower case ({chars}): node-config-server get {field}s lists them"
    return "check the command's names and options (node-config-server COMMAND --help)"


def _error_message(resp) -> str:
    try:
        err = resp.json().get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    except (ValueError, AttributeError):
        pass
    return (resp.text or "").strip()[:200] or f"HTTP {resp.status_code}"
