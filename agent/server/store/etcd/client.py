"""A small client for etcd's v3 API through its gRPC gateway (JSON over HTTP), on requests.

Why not a library: ``etcd3gw`` (OpenStack, the maintained gateway client) needs Python >= 3.10
from 2.7 on, and its older releases pull futurist and pbr, which neither RHEL 9 nor EPEL 9
carries; ``etcd3`` (gRPC) has had no release since 2020 and pins protobuf 3. The gateway API is
stable since etcd 3.4 (``/v3/kv/range``, ``/v3/kv/txn``, ``/v3/lease/*``, ``/v3/watch``), so
the few calls the server needs are a thin layer over ``requests``, which the agent already
depends on, with what neither library gives: fail-over across several endpoints, one deadline
per call, and errors that say which endpoints were tried.

Keys and values are ``bytes`` or ``str`` here and base64 on the wire, as the gateway wants.
"""

import base64
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

import requests

from agent.server.store.errors import StoreUnavailable

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0
WATCH_IDLE = 10.0


class EtcdError(Exception):
    """etcd answered, but refused the request (a bug or a misconfiguration, not an outage)."""


class EtcdUnavailable(EtcdError, StoreUnavailable):
    """No endpoint answered in time: the store is away; callers answer 503 and retry later."""


class EtcdNoSpace(EtcdUnavailable):
    """etcd answered, but refuses every write: its database reached ``--quota-backend-bytes``
    (the NOSPACE alarm). Writes stay refused until an operator compacts, defragments and
    disarms the alarm (docs/security.md, "Limits"); callers answer 503 as for an outage."""


NOSPACE_MESSAGE = "database space exceeded"  # etcd's ErrNoSpace, as the gateway says it (HTTP 429)


@dataclass(frozen=True)
class KV:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int = 0


@dataclass(frozen=True)
class Event:
    type: str  # PUT or DELETE
    kv: KV


@dataclass(frozen=True)
class StoreURL:
    endpoints: Tuple[str, ...]  # base URLs, e.g. http://127.0.0.1:2379
    prefix: str


def parse_store_url(url: str) -> StoreURL:
    """``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`` (plain) or ``etcd+https://...`` (TLS)."""
    scheme, _, rest = url.partition("://")
    if scheme not in ("etcd", "etcd+https") or not rest:
        raise ValueError(f"{url!r}: an etcd store is etcd://HOST:PORT[,HOST:PORT...] "
                         "(or etcd+https:// for TLS)")
    hosts, _, prefix = rest.partition("/")
    proto = "https" if scheme == "etcd+https" else "http"
    endpoints = []
    for hostport in hosts.split(","):
        parts = urlsplit(f"//{hostport}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None:
            raise ValueError(f"{url!r}: {hostport!r} is not HOST:PORT")
        endpoints.append(f"{proto}://{hostport}")
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/node-agent/"
    return StoreURL(tuple(endpoints), prefix)


def b64(data: Any) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key starting with ``prefix`` (etcd's range_end for a prefix)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def _as_bytes(key: Any) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


def _kv(raw: Dict[str, Any]) -> KV:
    return KV(base64.b64decode(raw.get("key", "")), base64.b64decode(raw.get("value", "")),
              int(raw.get("create_revision", 0)), int(raw.get("mod_revision", 0)), int(raw.get("lease", 0)))


# -- building blocks of a transaction ------------------------------------------------------------

def cmp_absent(key: Any) -> Dict[str, Any]:
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def cmp_mod(key: Any, mod_revision: int) -> Dict[str, Any]:
    """True when ``key`` was last written at ``mod_revision`` (a compare-and-swap guard)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(mod_revision)}


def cmp_value(key: Any, value: Any) -> Dict[str, Any]:
    return {"key": b64(key), "target": "VALUE", "result": "EQUAL", "value": b64(value)}


def cmp_unchanged_since(prefix: Any, revision: int) -> Dict[str, Any]:
    """True when no key under ``prefix`` was created or modified after ``revision``."""
    p = _as_bytes(prefix)
    return {"key": b64(p), "range_end": b64(prefix_end(p)), "target": "MOD", "result": "LESS",
            "mod_revision": str(revision + 1)}


def op_put(key: Any, value: Any, lease: int = 0) -> Dict[str, Any]:
    req: Dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        req["lease"] = str(lease)
    return {"request_put": req}


def op_delete(key: Any, prefix: bool = False) -> Dict[str, Any]:
    req = {"key": b64(key)}
    if prefix:
        req["range_end"] = b64(prefix_end(_as_bytes(key)))
    return {"request_delete_range": req}


class EtcdClient:
    """Calls go to the endpoint that answered last; on a transport error or a 5xx the next one
    is tried, until every endpoint failed or the call's deadline passed."""

    def __init__(self, endpoints: Sequence[str], ca: Optional[str] = None, cert: Optional[str] = None,
                 key: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT):
        if not endpoints:
            raise ValueError("no etcd endpoint given")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self._preferred = 0
        self._session = requests.Session()
        self._session.trust_env = False  # a proxy between the server and its store is never wanted
        if ca:
            self._session.verify = ca
        if cert:
            self._session.cert = (cert, key) if key else cert
        self._lock = threading.Lock()
        self.last_ok = 0.0  # when an endpoint last answered (a call or a watch stream)
        # The alarms etcd reported last ([{"alarm": "NOSPACE", "member": "<id>"}]): set by alarms(),
        # and at once by a write refused for lack of space (before anyone asked for the list).
        self.alarms_seen: List[Dict[str, str]] = []
        self.alarms_checked = 0.0  # when alarms() last had an answer (0: never)
        # observer(api_path, seconds, ok) after every attempt: /metrics' store latency and errors
        self.observer: Callable[[str, float, bool], None] = lambda _p, _s, _ok: None

    # -- transport --------------------------------------------------------------------------

    def _order(self) -> List[int]:
        n = len(self.endpoints)
        return [(self._preferred + i) % n for i in range(n)]

    def call(self, path: str, body: Dict[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        deadline = time.monotonic() + (timeout or self.timeout)
        errors = []
        for i in self._order():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            url = self.endpoints[i] + path
            started = time.monotonic()
            try:
                resp = self._session.post(url, data=json.dumps(body), timeout=min(left, self.timeout))
            except requests.RequestException as exc:
                self.observer(path, time.monotonic() - started, False)
                errors.append(f"{self.endpoints[i]}: {type(exc).__name__}")
                continue
            self.observer(path, time.monotonic() - started, resp.status_code == 200)
            if resp.status_code >= 500 or resp.status_code == 429:
                said = _message(resp)
                if NOSPACE_MESSAGE in said:  # every member says the same: asking another is no use
                    self.last_ok = time.time()
                    self._nospace()
                    raise EtcdNoSpace(f"etcd refuses writes: {said} (alarm NOSPACE: the database reached its "
                                      f"quota; {self.endpoints[i]})")
                errors.append(f"{self.endpoints[i]}: HTTP {resp.status_code} {said}")
                continue
            if resp.status_code != 200:
                raise EtcdError(f"{url}: HTTP {resp.status_code}: {_message(resp)}")
            self._preferred = i
            self.last_ok = time.time()
            return resp.json()
        raise EtcdUnavailable("etcd did not answer: " + ("; ".join(errors) or "deadline passed"))

    def close(self) -> None:
        self._session.close()

    # -- key/value --------------------------------------------------------------------------

    def range(self, key: Any, prefix: bool = False, keys_only: bool = False,
              revision: int = 0) -> Tuple[List[KV], int]:
        body: Dict[str, Any] = {"key": b64(key)}
        if prefix:
            body["range_end"] = b64(prefix_end(_as_bytes(key)))
        if keys_only:
            body["keys_only"] = True
        if revision:
            body["revision"] = str(revision)
        out = self.call("/v3/kv/range", body)
        return [_kv(r) for r in out.get("kvs", [])], int(out["header"]["revision"])

    def get(self, key: Any) -> Optional[KV]:
        kvs, _ = self.range(key)
        return kvs[0] if kvs else None

    def put(self, key: Any, value: Any, lease: int = 0) -> int:
        body = op_put(key, value, lease)["request_put"]
        return int(self.call("/v3/kv/put", body)["header"]["revision"])

    def delete(self, key: Any, prefix: bool = False) -> int:
        body = op_delete(key, prefix)["request_delete_range"]
        return int(self.call("/v3/kv/deleterange", body).get("deleted", 0))

    def txn(self, compare: List[Dict[str, Any]], success: List[Dict[str, Any]],
            failure: Optional[List[Dict[str, Any]]] = None) -> Tuple[bool, int]:
        out = self.call("/v3/kv/txn", {"compare": compare, "success": success, "failure": failure or []})
        return bool(out.get("succeeded")), int(out["header"]["revision"])

    # -- leases -----------------------------------------------------------------------------

    def grant(self, ttl: int) -> int:
        return int(self.call("/v3/lease/grant", {"TTL": str(int(ttl))})["ID"])

    def revoke(self, lease: int) -> None:
        try:
            self.call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:  # already expired: nothing to revoke
            if "not found" not in str(exc):
                raise

    def keepalive(self, lease: int) -> int:
        out = self.call("/v3/lease/keepalive", {"ID": str(lease)})
        return int((out.get("result") or {}).get("TTL", 0))

    # -- maintenance --------------------------------------------------------------------------

    def compact(self, revision: int) -> bool:
        """Compact etcd's history up to ``revision`` (older revisions can no longer be read or
        watched from; their space is reused). False when it was already compacted that far."""
        try:
            self.call("/v3/kv/compaction", {"revision": str(int(revision))})
        except EtcdError as exc:
            if "compacted" in str(exc):
                return False
            raise
        return True

    def alarms(self) -> List[Dict[str, str]]:
        """The alarms raised in the cluster (``NOSPACE``, ``CORRUPT``), each with the member
        that raised it; remembered in ``alarms_seen``."""
        out = self.call("/v3/maintenance/alarm", {"action": "GET", "memberID": "0", "alarm": "NONE"})
        raised = [{"alarm": str(a.get("alarm", "NONE")), "member": format(int(a.get("memberID", 0)), "x")}
                  for a in out.get("alarms") or []]
        raised = [a for a in raised if a["alarm"] not in ("NONE", "0")]
        self.alarms_seen, self.alarms_checked = raised, time.time()
        return raised

    def _nospace(self) -> None:
        if not any(a["alarm"] == "NOSPACE" for a in self.alarms_seen):
            self.alarms_seen = self.alarms_seen + [{"alarm": "NOSPACE", "member": "?"}]

    # -- cluster ----------------------------------------------------------------------------

    def endpoint_status(self) -> List[Dict[str, Any]]:
        """Each endpoint's own answer (or error), for /api/v1/cluster and status."""
        out = []
        for url in self.endpoints:
            started = time.monotonic()
            try:
                resp = self._session.post(url + "/v3/maintenance/status", data="{}", timeout=self.timeout)
                resp.raise_for_status()
                body = resp.json()
                out.append({"endpoint": url, "healthy": True, "version": body.get("version"),
                            "leader": body.get("leader") == body.get("header", {}).get("member_id"),
                            "latencySeconds": round(time.monotonic() - started, 4)})
            except (requests.RequestException, ValueError) as exc:
                out.append({"endpoint": url, "healthy": False, "error": type(exc).__name__})
        return out

    # -- watch ------------------------------------------------------------------------------

    def watch(self, prefix: Any, start_revision: int, on_events: Callable[[List[Event], int], None],
              stop: threading.Event, retry_wait: float = 1.0) -> threading.Thread:
        """Call ``on_events(events, revision)`` for every change under ``prefix`` after
        ``start_revision``, in a daemon thread, reconnecting (to any endpoint) until ``stop``."""
        thread = threading.Thread(target=self._watch_loop, name="etcd-watch", daemon=True,
                                  args=(_as_bytes(prefix), start_revision, on_events, stop, retry_wait))
        thread.start()
        return thread

    def _watch_loop(self, prefix: bytes, revision: int, on_events: Callable[[List[Event], int], None],
                    stop: threading.Event, retry_wait: float) -> None:
        seen = [revision]  # the newest revision delivered: a reconnect resumes after it
        while not stop.is_set():
            for i in self._order():
                if stop.is_set():
                    return
                try:
                    self._watch_stream(self.endpoints[i], prefix, seen, on_events, stop)
                except Exception as exc:  # any end of the stream: the watch must outlive it
                    log.debug("etcd watch of %r on %s ended after revision %d: %s: %s", prefix, self.endpoints[i],
                              seen[0], type(exc).__name__, exc)
            stop.wait(retry_wait)

    def _watch_stream(self, endpoint: str, prefix: bytes, seen: List[int],
                      on_events: Callable[[List[Event], int], None], stop: threading.Event) -> None:
        body = {"create_request": {"key": b64(prefix), "range_end": b64(prefix_end(prefix)),
                                   "start_revision": str(seen[0] + 1), "progress_notify": True}}
        # etcd sends nothing on a quiet watch, and a stream opened to a member that was just
        # restarting can hang: a stream silent for WATCH_IDLE seconds is reopened from the last
        # revision seen (nothing is missed; a quiet cluster costs one request per WATCH_IDLE).
        with self._session.post(endpoint + "/v3/watch", data=json.dumps(body), stream=True,
                                timeout=(self.timeout, WATCH_IDLE)) as resp:
            resp.raise_for_status()
            self.last_ok = time.time()
            for line in resp.iter_lines():
                if stop.is_set():
                    return
                if not line:
                    continue
                self.last_ok = time.time()
                result = json.loads(line).get("result") or {}
                header_rev = int((result.get("header") or {}).get("revision", seen[0]))
                events = [Event(e.get("type", "PUT"), _kv(e.get("kv") or {})) for e in result.get("events", [])]
                if events:
                    revision = max(ev.kv.mod_revision for ev in events)
                    on_events(events, revision)
                    seen[0] = max(seen[0], revision)
                elif result.get("compact_revision"):
                    on_events([], header_rev)  # compacted: the caller re-reads everything
                    seen[0] = header_rev
                    return


def _message(resp: requests.Response) -> str:
    try:
        body = resp.json()
        return str(body.get("error") or body.get("message") or body)[:200]
    except ValueError:
        return resp.text[:200]
