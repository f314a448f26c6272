"""The WSGI application of node-config-server (no framework: a dozen routes do not need one).

Every error is JSON: ``{"error": {"code": <HTTP status>, "message": "...", "field": "..."?}}``.
"""

import hmac
import json
import logging
import re
import threading
import urllib.parse
from http import HTTPStatus
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from agent import __version__
from agent.server import content, drains
from agent.server.accept import UnsupportedVersion
from agent.server.backends import StoreConfig, open_backends
from agent.server.metrics import RequestCounter, exposition
from agent.server.nodes import DEFAULT_LIMIT, MAX_LIMIT, node_item, node_list, rfc3339, targets
from agent.server.nodestore import StoreUnavailable
from agent.server.service import Cluster, ReportInvalid, UnknownPool, validate_report
from agent.server.store import DNS1123_LABEL, DNS1123_SUBDOMAIN

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20
MAX_JSON_DEPTH = 32  # a report nests 3 levels; deeper is hostile (and recursion is bounded)


def reason_phrase(code: int) -> str:
    """The standard reason phrase (RFC 9110) from the standard library, "" for an unknown code."""
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return ""

NODE_HEADER = "HTTP_X_NODE_NAME"


class HTTPError(Exception):
    def __init__(self, code: int, message: str, headers: Optional[List[Tuple[str, str]]] = None,
                 field: str = ""):
        self.code = code
        self.message = message
        self.headers = headers or []
        self.field = field
        super().__init__(message)


class Response:
    def __init__(self, code: int, body: bytes, ctype: str = "application/json",
                 headers: Optional[List[Tuple[str, str]]] = None, pool: str = ""):
        self.code = code
        self.body = body
        self.ctype = ctype
        self.headers = headers or []
        self.pool = pool


def json_response(code: int, obj: Any, headers: Optional[List[Tuple[str, str]]] = None, pool: str = "") -> Response:
    return Response(code, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode(), headers=headers, pool=pool)


def error_body(code: int, message: str, field: str = "") -> Dict[str, Any]:
    err: Dict[str, Any] = {"code": code, "message": message}
    if field:
        err["field"] = field
    return {"error": err}


class App:
    """``App(state_dir, token=..., lease_ttl=..., metrics_dir=...)`` is a WSGI callable.

    The Cluster (SQLite connections, caches) is built per process on first use, never before a
    fork; ``warm()`` builds it eagerly (gunicorn's post_worker_init calls it).
    """

    def __init__(self, state_dir: str, token: Optional[str] = None, lease_ttl: float = drains.DEFAULT_TTL,
                 metrics_dir: Optional[str] = None, reload_interval: float = 1.0,
                 store: Optional[StoreConfig] = None):
        self.state_dir = state_dir
        self.store_config = store or StoreConfig()
        self.token = token
        self.lease_ttl = lease_ttl
        self.reload_interval = reload_interval
        self.counter = RequestCounter(metrics_dir)
        self._cluster: Optional[Cluster] = None
        self._lock = threading.Lock()

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            with self._lock:
                if self._cluster is None:
                    store, watcher = open_backends(self.store_config, self.state_dir, self.reload_interval)
                    cluster = Cluster(self.state_dir, lease_ttl=self.lease_ttl, store=store,
                                      watcher=watcher, reload_interval=self.reload_interval)
                    if getattr(store, "client", None) is not None:
                        store.client.observer = self.counter.observe_store
                    cluster.start_heartbeat(self.store_config.replica_name())
                    self._cluster = cluster
        return self._cluster

    def warm(self) -> None:
        self.cluster.prerender()

    # -- WSGI ------------------------------------------------------------------------------

    def __call__(self, environ: Dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            resp = self.dispatch(environ, method)
        except HTTPError as exc:
            resp = json_response(exc.code, error_body(exc.code, exc.message, exc.field), exc.headers)
        except StoreUnavailable as exc:  # nothing was written: the node retries (Retry-After)
            log.warning("%s %s: store unavailable: %s", method, environ.get("PATH_INFO"), exc)
            resp = json_response(503, error_body(503, f"the shared store is unavailable, nothing was recorded; "
                                                      f"retry later ({exc})"), [("Retry-After", "5")])
        except Exception:  # a bug: log it with the traceback, answer JSON, keep serving
            log.exception("internal error on %s %s", method, environ.get("PATH_INFO"))
            resp = json_response(500, error_body(500, "internal error; see the server log"))
        self.counter.inc(resp.pool, resp.code, method)
        headers = [("Content-Type", resp.ctype), ("Content-Length", str(len(resp.body)))] + resp.headers
        start_response(f"{resp.code} {reason_phrase(resp.code)}".rstrip(), headers)
        if method == "HEAD" or resp.code == 304:
            return [b""]
        return [resp.body]

    def dispatch(self, environ: Dict[str, Any], method: str) -> Response:
        path = environ.get("PATH_INFO", "") or "/"
        parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
        if parts == ["healthz"]:
            _allow(method, ("GET", "HEAD"))
            return self.healthz()
        if parts == ["metrics"]:
            _allow(method, ("GET", "HEAD"))
            st = self.cluster.state()
            text = exposition(self.counter, self.cluster.pool_views(pending=False, nodes=0), len(st.problems), st.stale)
            return Response(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
        if len(parts) == 2 and parts[0] == "config":
            _allow(method, ("GET", "HEAD"))
            return self.config(environ, _pool_name(parts[1]))
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
            if rest == ["pools"]:
                _allow(method, ("GET", "HEAD"))
                views = self.cluster.pool_views()
                for name, view in views.items():
                    self._created(name, view)
                return json_response(200, {"apiVersion": "v1", "kind": "MachineConfigPoolList",
                                           "items": [views[k] for k in sorted(views)]})
            if rest == ["nodes"]:
                _allow(method, ("GET", "HEAD"))
                return self.nodes(environ)
            if len(rest) == 2 and rest[0] == "pools":
                _allow(method, ("GET", "HEAD"))
                name = _pool_name(rest[1])
                views = self.cluster.pool_views(only=name)
                if name not in views:
                    raise HTTPError(404, f"unknown pool {name!r}; known pools: {self._known()}")
                view = views[name]
                view["status"]["history"] = self.cluster.store.history(name)
                self._created(name, view, view["status"]["history"])
                return json_response(200, view, pool=name)
            if rest == ["cluster"]:
                _allow(method, ("GET", "HEAD"))
                return json_response(200, self.cluster.cluster())
            if len(rest) >= 2 and rest[0] == "nodes":
                node = _node_name(rest[1])
                if len(rest) == 2:
                    _allow(method, ("GET", "HEAD"))
                    return self.node(node)
                if len(rest) == 3 and rest[2] == "report":
                    _allow(method, ("POST",))
                    self._auth(environ)
                    return self.report(node, _json_body(environ))
                if len(rest) == 3 and rest[2] == "drain":
                    _allow(method, ("POST", "DELETE"))
                    self._auth(environ)
                    if method == "DELETE":
                        pool = drains.release(self.cluster.store, node)
                        return json_response(200, {"node": node, "released": pool is not None, "pool": pool or "",
                                                   "actions": ["uncordon"] if pool else []})
                    return self.drain(node, _json_body(environ))
        raise HTTPError(404, f"no such resource: {path}; see /config/<pool>, /healthz, /metrics, /api/v1/pools, "
                             f"/api/v1/cluster, /api/v1/nodes, /api/v1/nodes/<node>/report|drain")

    # -- handlers ----------------------------------------------------------------------------

    def _known(self) -> str:
        return ", ".join(sorted(self.cluster.state().pools)) or "none"

    def _auth(self, environ: Dict[str, Any]) -> None:
        if not self.token:
            return
        header = environ.get("HTTP_AUTHORIZATION", "")
        given = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            raise HTTPError(401, "a valid bearer token is required (Authorization: Bearer <token>)",
                            [("WWW-Authenticate", 'Bearer realm="node-config-server"')])

    def _created(self, name: str, view: Dict[str, Any], history: Optional[List[Dict[str, Any]]] = None) -> None:
        """metadata.creationTimestamp (oc's AGE): the YAML's, else when this server first saw the pool."""
        meta = view.setdefault("metadata", {})
        if meta.get("creationTimestamp"):
            return
        history = self.cluster.store.history(name) if history is None else history
        if history:
            meta["creationTimestamp"] = rfc3339(history[0]["at"])

    def healthz(self) -> Response:
        st = self.cluster.state()
        body = {"status": "ok", "version": __version__,
                "state": {"pools": sorted(st.pools), "machineConfigs": len(st.machine_configs),
                          "stale": st.stale, "problems": [p.to_dict() for p in st.problems]},
                "store": self.cluster.store_health()}
        if self.cluster.db is not None:
            body["schemaVersion"] = self.cluster.db.schema_version()
        return json_response(200, body)

    def config(self, environ: Dict[str, Any], pool: str) -> Response:
        cluster = self.cluster
        node = self._asking_node(environ)
        try:  # one node-store round trip (service.Cluster.fetch)
            fetched = cluster.fetch(pool, environ.get("HTTP_ACCEPT"), node)
        except UnknownPool:
            raise HTTPError(404, f"unknown pool {pool!r}; known pools: {self._known()}")
        except UnsupportedVersion as exc:  # upstream api.go answers 400 (detectSpecVersionFromAcceptHeader)
            raise HTTPError(400, str(exc), field="Accept")
        except content.ConversionFailed as exc:  # upstream answers 500 when conversion fails
            raise HTTPError(500, f"the config of pool {pool} cannot be served at the Ignition spec asked for: {exc}")
        self._refuse_other_custom(node, fetched.node, pool)
        body, etag, version, served = fetched.body, fetched.etag, fetched.version, fetched.served
        if cluster.is_empty_rendering(served.config):
            # An empty config would boot a node that can never join: better to keep it waiting.
            raise HTTPError(503, f"the config of pool {pool} is withheld: the pool selects no MachineConfigs "
                                 f"(check its spec.machineConfigSelector)", [("Retry-After", "30")])
        headers = [("ETag", etag), ("Cache-Control", "no-cache"), ("Vary", "Accept"),
                   ("X-Served-Config", served.config), ("X-Served-Image", served.image)]
        inm = environ.get("HTTP_IF_NONE_MATCH", "")
        if inm and (inm.strip() == "*" or etag in [t.strip() for t in inm.split(",")]):
            return Response(304, b"", headers=headers, pool=pool)
        return Response(200, body, f"{content.MEDIA_TYPE};version={version}", headers, pool=pool)

    @staticmethod
    def _asking_node(environ: Dict[str, Any]) -> Optional[str]:
        """The node naming itself with ``?node=<name>`` or ``X-Node-Name`` (then, as a member of
        the pool, it gets the pool's target); None for anonymous fetches (a real first boot:
        they get what a new node may have)."""
        qs = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        node = (qs.get("node") or [""])[0] or environ.get(NODE_HEADER, "")
        return _node_name(node) if node else None

    @staticmethod
    def _refuse_other_custom(node: Optional[str], known: Any, pool: str) -> None:
        """A node already in a custom pool never gets another pool's (the worker) config."""
        if node is None or known is None or known.pool == pool:
            return
        from agent.server.progress import is_custom

        if is_custom(known.pool):
            raise HTTPError(409, f"node {node} belongs to custom pool {known.pool} ({known.why}); it must not "
                                 f"get the {pool} config: fetch /config/{known.pool}")

    def node(self, node: str) -> Response:
        rec = self.cluster.store.node(node)
        if rec is None:
            raise HTTPError(404, f"node {node!r} has not reported")
        item = node_item(rec, targets(self.cluster.pool_views(only=rec.pool, pending=False, nodes=0)))
        return json_response(200, {"node": node, "name": node, "report": rec.report, "pool": rec.pool,
                                   "membership": rec.why, "degradedReason": rec.degraded,
                                   "updated": item["updated"], "reportedAt": item["reportedAt"],
                                   "drainEvents": self.cluster.store.drain_events(node)})

    def nodes(self, environ: Dict[str, Any]) -> Response:
        qs = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        try:
            limit = int((qs.get("limit") or [str(DEFAULT_LIMIT)])[0])
        except ValueError:
            limit = 0
        if not 0 < limit <= MAX_LIMIT:
            raise HTTPError(400, f"limit must be a number from 1 to {MAX_LIMIT}", field="limit")
        after = (qs.get("continue") or [""])[0]
        records = self.cluster.store.nodes(after=after, limit=limit)
        return json_response(200, node_list(records, targets(self.cluster.pool_views(pending=False, nodes=0)), limit))

    def report(self, node: str, body: Any) -> Response:
        try:
            report = validate_report(body)
        except ReportInvalid as exc:
            raise HTTPError(400, f"invalid report: {exc}", field=exc.field)
        out = self.cluster.record_report(node, report)
        return json_response(200, out, pool=out["pool"])

    def drain(self, node: str, body: Any) -> Response:
        if not isinstance(body, dict):
            raise HTTPError(400, "the body must be a JSON object {\"pool\": ..., \"config\": ...}", field="$")
        pool = body.get("pool")
        if not isinstance(pool, str) or not pool:
            raise HTTPError(400, "pool: required", field="$.pool")
        config = body.get("config", "")
        if not isinstance(config, str):
            raise HTTPError(400, "config: must be a string", field="$.config")
        cluster = self.cluster
        if pool not in cluster.state().pools:
            raise HTTPError(404, f"unknown pool {pool!r}; known pools: {self._known()}", field="$.pool")
        member = cluster.node_pool(node)
        if member is not None and member.pool != pool:
            raise HTTPError(409, f"node {node} belongs to pool {member.pool} ({member.why}), not {pool}",
                            field="$.pool")
        answer = drains.request_drain(cluster.store, node, pool, config, cluster.drain_limit(pool), cluster.lease_ttl)
        if answer.granted:
            return json_response(200, answer.to_dict(), pool=pool)
        return json_response(429, answer.to_dict(), [("Retry-After", str(answer.retry_after))], pool=pool)


def _allow(method: str, allowed: Tuple[str, ...]) -> None:
    if method not in allowed:
        raise HTTPError(405, f"method {method} not allowed here; allowed: {', '.join(allowed)}",
                        [("Allow", ", ".join(allowed))])


def _pool_name(name: str) -> str:
    if not DNS1123_LABEL.match(name):
        raise HTTPError(400, f"invalid pool name {name!r}: a pool name is a DNS-1123 label (lower case letters, "
                             f"digits and '-', at most 63 characters)", field="pool")
    return name


def _node_name(name: str) -> str:
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        raise HTTPError(400, f"invalid node name {name!r}: a node name is a DNS-1123 subdomain", field="node")
    return name


def _json_body(environ: Dict[str, Any]) -> Any:
    ctype = environ.get("CONTENT_TYPE", "") or ""
    if ctype and not re.match(r"^application/(json|[a-z.+-]*\+json)\b", ctype):
        raise HTTPError(415, f"the body must be JSON (Content-Type: application/json), got {ctype}")
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise HTTPError(400, "invalid Content-Length")
    if length < 0:
        raise HTTPError(400, "invalid Content-Length")
    if length > MAX_BODY:
        raise HTTPError(413, f"body too large (at most {MAX_BODY} bytes)")
    try:
        raw = environ["wsgi.input"].read(length) if length else b""
    except TimeoutError as exc:  # the gevent worker's body deadline (the connection then closes)
        raise HTTPError(408, f"{exc}; send the whole body at once")
    if not raw:
        raise HTTPError(400, "a JSON body is required", field="$")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, f"the body is not valid JSON: {exc}", field="$")
    except RecursionError:
        doc = None
        too_deep = True
    else:
        too_deep = _too_deep(doc)
    if too_deep:
        raise HTTPError(400, f"the body nests deeper than {MAX_JSON_DEPTH} levels", field="$")
    return doc


def _too_deep(doc: Any) -> bool:
    """Whether ``doc`` nests deeper than MAX_JSON_DEPTH (checked without recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False
