"""A thin Kubernetes API client over requests: what node-config-server needs and nothing more.

Why not the official ``kubernetes`` package: RHEL 9 and EPEL 9 do not ship it (the RPM could not
depend on it), importing it costs about a second of start-up (thousands of generated model
classes, for every gunicorn worker), and its typed models do not know OpenShift's custom
resources anyway: they would be plain dicts through its dynamic client. What we use is small and
stable: GET/LIST (paged), WATCH (one JSON event per line), POST, PATCH (merge, JSON), DELETE, on
JSON paths, with TLS client certificates or a bearer token. requests is already a dependency.

Credentials: a kubeconfig (``--kubeconfig FILE``, its current context) or, with none, the
in-cluster service account (``/var/run/secrets/kubernetes.io/serviceaccount``: token and CA) at
``--apiserver-url`` when given (a hostNetwork pod, as the MCS's DaemonSet, cannot count on the
kubernetes Service's ClusterIP), else at ``KUBERNETES_SERVICE_HOST``/``_PORT``. ``insecure-skip-tls-verify`` is refused:
there is never a connection without a verified server.
"""

import base64
import json
import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Optional, Tuple
from urllib.parse import urlsplit

import requests
import yaml

from agent.server.store.errors import StoreSetupError, StoreUnavailable

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MAX_KUBECONFIG_BYTES = 1 << 20
MAX_EVENT_BYTES = 8 << 20  # one watch event: an object is at most ~1.5 MiB in etcd
PAGE = 500
# Only the objects' metadata (labels, annotations): a Node's status (images, conditions) is most
# of its size and the server reads none of it (meta.k8s.io/v1, served since Kubernetes 1.15).
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


class KubeConfigError(ValueError):
    """A kubeconfig or in-cluster configuration that cannot be used (names the file and field)."""


class KubeUnavailable(StoreUnavailable):
    """The API server could not be reached or answered 5xx/429: retry later."""


class KubeError(Exception):
    """The API server refused a request (4xx): ``status`` and its ``reason`` (NotFound, Conflict...)."""

    def __init__(self, status: int, reason: str, message: str, what: str):
        super().__init__(f"{what}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def get_if_exists(client: Any, path: str) -> Optional[Dict[str, Any]]:
    """``client.get(path)``, or None when the object does not exist (404); other errors raise."""
    try:
        return client.get(path)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


class KubeRefused(KubeError, StoreUnavailable):
    """401 or 403: a KubeError (``status``) and a StoreUnavailable too (503 with Retry-After, nothing
    written), because a kube-apiserver that is starting answers 403 to everything until its RBAC
    cache is filled (before /readyz is ok): it passes. One that lasts is a missing grant, which
    the message says (apply deploy/rbac.yaml)."""


class NamespaceMissing(KubeError, StoreSetupError):
    """404 for the namespace itself (creating an object in a namespace that does not exist): the
    message says what to apply. ``serve`` stops on it with one line (agent/server/cli/main.py)."""


def _missing_namespace(status: Dict[str, Any]) -> str:
    """The namespace a 404 Status names as missing ("namespaces \"x\" not found"), else ""."""
    details = status.get("details") or {}
    return str(details.get("name") or "") if details.get("kind") == "namespaces" else ""


@dataclass(frozen=True)
class Resource:
    """One kind of object on the API: ``group`` "" is the core API (``/api/v1``)."""

    group: str
    version: str
    plural: str
    namespaced: bool = False

    def path(self, name: str = "", namespace: str = "", sub: str = "") -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        out = f"{base}/{self.plural}"
        if name:
            out += f"/{name}"
        if sub:
            out += f"/{sub}"
        return out


MCO = "machineconfiguration.openshift.io"
MACHINE_CONFIGS = Resource(MCO, "v1", "machineconfigs")
MACHINE_CONFIG_POOLS = Resource(MCO, "v1", "machineconfigpools")
MACHINE_OS_CONFIGS = Resource(MCO, "v1", "machineosconfigs")
MACHINE_OS_BUILDS = Resource(MCO, "v1", "machineosbuilds")
MACHINE_CONFIG_NODES = Resource(MCO, "v1", "machineconfignodes")
MACHINE_CONFIGURATIONS = Resource("operator.openshift.io", "v1", "machineconfigurations")
NODES = Resource("", "v1", "nodes")
LEASES = Resource("coordination.k8s.io", "v1", "leases", namespaced=True)
EVENTS = Resource("", "v1", "events", namespaced=True)
SECRETS = Resource("", "v1", "secrets", namespaced=True)
CONFIGMAPS = Resource("", "v1", "configmaps", namespaced=True)


@dataclass
class Credentials:
    server: str
    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    token: Optional[str] = None
    token_file: Optional[str] = None
    source: str = ""  # where these came from, for messages
    scratch: Optional[str] = None  # a private directory holding *-data fields written out


def load_kubeconfig(path: str, context: Optional[str] = None) -> Credentials:
    """The credentials of ``context`` (default: current-context) in the kubeconfig at ``path``."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_KUBECONFIG_BYTES + 1)
    except OSError as exc:
        raise KubeConfigError(f"{path}: cannot read the kubeconfig: {exc.strerror}") from None
    if len(data) > MAX_KUBECONFIG_BYTES:
        raise KubeConfigError(f"{path}: larger than {MAX_KUBECONFIG_BYTES} bytes; not a kubeconfig")
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise KubeConfigError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise KubeConfigError(f"{path}: not a kubeconfig (expected a map with clusters, users, contexts)")
    name = context or doc.get("current-context")
    ctx = _named(doc, "contexts", "context", name, path)
    cluster = _named(doc, "clusters", "cluster", ctx.get("cluster"), path)
    user = _named(doc, "users", "user", ctx.get("user"), path) if ctx.get("user") else {}
    return _credentials(cluster, user, path, os.path.dirname(os.path.abspath(path)))


def _named(doc: Dict[str, Any], section: str, key: str, name: Any, path: str) -> Dict[str, Any]:
    entries = doc.get(section) or []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get(key), dict):
            return entry[key]
    raise KubeConfigError(f"{path}: $.{section}: no {key} named {name!r}")


def _credentials(cluster: Dict[str, Any], user: Dict[str, Any], path: str, base: str) -> Credentials:
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise KubeConfigError(f"{path}: $.clusters[].cluster.server: expected an https:// URL, got {server!r}")
    if cluster.get("insecure-skip-tls-verify"):
        raise KubeConfigError(f"{path}: $.clusters[].cluster.insecure-skip-tls-verify: refused; node-config-server "
                              f"always verifies the API server: give certificate-authority(-data)")
    creds = Credentials(server=server.rstrip("/"), source=path)
    creds.ca_file = _file_or_data(creds, cluster, "certificate-authority", base)
    creds.cert_file = _file_or_data(creds, user, "client-certificate", base)
    creds.key_file = _file_or_data(creds, user, "client-key", base)
    creds.token = user.get("token") if isinstance(user.get("token"), str) else None
    creds.token_file = _abs(user.get("tokenFile"), base)
    if bool(creds.cert_file) != bool(creds.key_file):
        raise KubeConfigError(f"{path}: $.users[].user: client-certificate and client-key go together")
    return creds


def _abs(value: Any, base: str) -> Optional[str]:
    return os.path.join(base, value) if isinstance(value, str) and value else None


def _file_or_data(creds: Credentials, section: Dict[str, Any], field: str, base: str) -> Optional[str]:
    data = section.get(f"{field}-data")
    if isinstance(data, str) and data:
        if creds.scratch is None:
            creds.scratch = tempfile.mkdtemp(prefix="ncs-kube-")  # 0700: a client key may land here
        target = os.path.join(creds.scratch, field)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            decoded = base64.b64decode(data, validate=True)
        except ValueError:
            raise KubeConfigError(f"{creds.source}: {field}-data: not base64") from None
        with os.fdopen(fd, "wb") as f:
            f.write(decoded)
        return target
    return _abs(section.get(field), base)


def check_apiserver_url(url: str) -> str:
    """``serve --apiserver-url``: ``https://HOST[:PORT]``, returned without a trailing slash; any
    other text raises KubeConfigError naming what is wrong. Never http: the service account's
    token goes in every request, and its ca.crt verifies the server."""
    where = f"--apiserver-url {url[:200]!r}"
    if len(url) > 2048:
        raise KubeConfigError(f"{where}: longer than 2048 characters; give https://HOST:PORT")
    if not url.isascii() or any(c.isspace() or not c.isprintable() for c in url):
        raise KubeConfigError(f"{where}: spaces, control or non-ASCII characters; give https://HOST:PORT")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise KubeConfigError(f"{where}: not a URL ({exc}); give https://HOST:PORT") from None
    if parts.scheme != "https":
        raise KubeConfigError(f"{where}: not https; the API server is reached over TLS only (verified with the "
                              f"service account's ca.crt): give https://HOST:PORT")
    if not parts.hostname or port == 0:
        raise KubeConfigError(f"{where}: no host (or port 0); give https://HOST:PORT")
    if parts.username is not None or parts.password is not None:
        raise KubeConfigError(f"{where}: user information in the URL; the service account's token authenticates")
    if parts.path not in ("", "/") or parts.query or parts.fragment or url.endswith(("?", "#")):
        raise KubeConfigError(f"{where}: a path, query or fragment; give https://HOST:PORT only")
    return f"https://{parts.netloc}"


def in_cluster(sa_dir: str = SERVICE_ACCOUNT_DIR, env: Optional[Dict[str, str]] = None,
               server: Optional[str] = None) -> Credentials:
    """The pod's service account, as client-go's rest.InClusterConfig reads it; at ``server``
    (serve --apiserver-url, checked) when given, else at the kubernetes Service's address."""
    if server is not None:
        return Credentials(server=check_apiserver_url(server), ca_file=os.path.join(sa_dir, "ca.crt"),
                           token_file=os.path.join(sa_dir, "token"), source=f"in-cluster ({sa_dir})")
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeConfigError("no --kubeconfig given and not in a pod (KUBERNETES_SERVICE_HOST/PORT unset): "
                              "pass --kubeconfig FILE, or --apiserver-url in a pod")
    host = f"[{host}]" if ":" in host else host
    return Credentials(server=f"https://{host}:{port}", ca_file=os.path.join(sa_dir, "ca.crt"),
                       token_file=os.path.join(sa_dir, "token"), source=f"in-cluster ({sa_dir})")


class KubeClient:
    """Requests to one API server; thread-safe (one pooled session)."""

    def __init__(self, creds: Credentials, timeout: float = 10.0):
        self.creds = creds
        self.server = creds.server
        self.timeout = timeout
        self._session = requests.Session()
        # The environment read once (6-8 % of a worker's CPU at every request: docs/performance.md); no
        # .netrc replaces the token; the kubeconfig's CA, else the env's bundle as requests takes it.
        self._session.proxies = dict(requests.utils.get_environ_proxies(self.server))
        self._session.trust_env = False
        self._verify = creds.ca_file or os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
        if creds.cert_file:
            self._session.cert = (creds.cert_file, creds.key_file)
        self._session.headers["Accept"] = "application/json"
        self._session.headers["User-Agent"] = "node-config-server"
        self._token_lock = threading.Lock()
        self._token: Tuple[float, str] = (0.0, "")

    def _auth(self) -> Dict[str, str]:
        token = self.creds.token or self._file_token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _file_token(self) -> str:
        """A projected service-account token rotates: re-read the file when it changes."""
        if not self.creds.token_file:
            return ""
        try:
            mtime = os.stat(self.creds.token_file).st_mtime
        except OSError:
            return self._token[1]
        with self._token_lock:
            if mtime != self._token[0]:
                with open(self.creds.token_file, encoding="utf-8") as f:
                    self._token = (mtime, f.read(64 << 10).strip())
            return self._token[1]

    def request(self, method: str, path: str, body: Any = None, params: Optional[Dict[str, Any]] = None,
                content_type: str = "application/json", timeout: Optional[float] = None,
                accept: Optional[str] = None) -> Dict[str, Any]:
        what = f"{method} {path}"
        headers = dict(self._auth())
        if accept:
            headers["Accept"] = accept
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        try:
            resp = self._session.request(method, self.server + path, data=data, params=params, headers=headers,
                                         timeout=timeout or self.timeout, verify=self._verify)
        except requests.RequestException as exc:
            raise KubeUnavailable(f"{what}: API server {self.server} unreachable: {_why(exc)}") from None
        return _answer(resp, what)

    def get(self, path: str, params: Optional[Dict[str, Any]] = None, accept: Optional[str] = None) -> Dict[str, Any]:
        return self.request("GET", path, params=params, accept=accept)

    def list(self, path: str, params: Optional[Dict[str, Any]] = None,
             metadata_only: bool = False, transform: Optional[Callable[[Dict[str, Any]], Any]] = None
             ) -> Tuple[list, str]:
        """Every item (paged, ``PAGE`` at a time) and the list's resourceVersion; with
        ``metadata_only``, each item's metadata alone (PartialObjectMetadata); with ``transform``,
        what it makes of each item, page by page, so that only one page of whole objects is held
        at a time (5,000 whole Nodes at once left the worker 30 KiB a Node bigger)."""
        items: list = []
        query = dict(params or {}, limit=PAGE)
        accept = METADATA_LIST if metadata_only else None
        while True:
            page = self.get(path, query, accept)
            got = page.get("items") or []
            items.extend(map(transform, got) if transform is not None else got)
            del got
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion", ""))
            query["continue"] = meta["continue"]

    def create(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def json_patch(self, path: str, ops: list) -> Dict[str, Any]:
        return self.request("PATCH", path, ops, content_type="application/json-patch+json")

    def replace(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        return self.request("PUT", path, body)

    def delete(self, path: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        return self.request("DELETE", path, body)

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 300,
              params: Optional[Dict[str, Any]] = None, metadata_only: bool = False,
              opened: Optional[Callable[[Any], None]] = None) -> Iterator[Dict[str, Any]]:
        """Events after ``resource_version`` until the server ends the watch (``timeout_seconds``)
        or the connection drops. An ``ERROR`` event (410 Gone: too old) is yielded as is.
        ``opened(response)``: the streaming response, for a caller that must end it from another thread."""
        params = dict(params or {}, watch="1", resourceVersion=resource_version, allowWatchBookmarks="true",
                      timeoutSeconds=str(timeout_seconds))
        what = f"WATCH {path}"
        try:
            headers = dict(self._auth(), **({"Accept": METADATA} if metadata_only else {}))
            resp = self._session.get(self.server + path, params=params, headers=headers, stream=True,
                                     timeout=(self.timeout, timeout_seconds + 30), verify=self._verify)
        except requests.RequestException as exc:
            raise KubeUnavailable(f"{what}: API server {self.server} unreachable: {_why(exc)}") from None
        with resp:
            if resp.status_code != 200:
                _answer(resp, what)
            if opened is not None:
                opened(resp)
            try:
                for line in resp.iter_lines(chunk_size=64 << 10):
                    if len(line) > MAX_EVENT_BYTES:
                        raise KubeUnavailable(f"{what}: an event larger than {MAX_EVENT_BYTES} bytes")
                    if line:
                        yield json.loads(line)
            except requests.RequestException as exc:
                raise KubeUnavailable(f"{what}: the watch broke: {_why(exc)}") from None

    def close(self) -> None:
        self._session.close()
        if self.creds.scratch:
            shutil.rmtree(self.creds.scratch, ignore_errors=True)


def _why(exc: Exception) -> str:
    """The exception's kind and its innermost words, short (requests nests them deeply)."""
    text = str(exc).rsplit(": ", 1)[-1].strip("()'\" ")[:200]
    return f"{type(exc).__name__} ({text})" if text else type(exc).__name__


def _answer(resp: requests.Response, what: str) -> Dict[str, Any]:
    if resp.status_code < 300:
        try:
            return resp.json() if resp.content else {}
        except ValueError:
            raise KubeUnavailable(f"{what}: the API server answered {resp.status_code} with no JSON") from None
    try:
        status = resp.json()
    except ValueError:
        status = {}
    reason = str(status.get("reason") or resp.reason or "")
    message = str(status.get("message") or "")[:500]
    if resp.status_code >= 500 or resp.status_code == 429 and not _is_eviction(what):
        raise KubeUnavailable(f"{what}: {resp.status_code} {reason}: {message}")
    namespace = _missing_namespace(status) if resp.status_code == 404 else ""
    if namespace:
        raise NamespaceMissing(404, reason, f"namespace {namespace} does not exist; node-config-server keeps its node "
                                            f"state there: create it with its account and role (kubectl apply -f "
                                            f"deploy/rbac.yaml) or name another with --namespace", what)
    if resp.status_code in (401, 403):
        raise KubeRefused(resp.status_code, reason, f"{message} (while the API server starts this passes; if it "
                                                    f"lasts, apply deploy/rbac.yaml to the server's account)", what)
    raise KubeError(resp.status_code, reason, message, what)


def _is_eviction(what: str) -> bool:
    return what.endswith("/eviction")  # a PDB's 429 is an answer, not an outage


def open_client(kubeconfig: Optional[str], context: Optional[str] = None,
                apiserver_url: Optional[str] = None) -> KubeClient:
    """The client ``serve --backend kubernetes`` uses: the kubeconfig given, else in-cluster (at
    ``apiserver_url``, serve --apiserver-url, when given)."""
    creds = load_kubeconfig(kubeconfig, context) if kubeconfig else in_cluster(server=apiserver_url)
    log.info("Kubernetes API %s as %s", creds.server, creds.source)
    return KubeClient(creds)
