"""HTTP plumbing of node-config-server's WSGI app: JSON errors and responses, request bodies,
names in paths. No framework: a dozen routes do not need one.

Every error is JSON: ``{"error": {"code": <HTTP status>, "message": "...", "field": "..."?}}``.
"""

import json
import logging
import re
import time
import urllib.parse
from http import HTTPStatus
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from agent.server.store.stateformat import DNS1123_LABEL, DNS1123_SUBDOMAIN

MAX_BODY = 1 << 20  # any request body but a report (docs/security.md, "Limits")
MAX_REPORT = 64 << 10  # a node's report: the largest one the report rules accept is about 29 KiB
MAX_JSON_DEPTH = 32  # a report nests 3 levels; deeper is hostile (and recursion is bounded)

log = logging.getLogger(__name__)


_PHRASES = {int(status): status.phrase for status in HTTPStatus}


def reason_phrase(code: int) -> str:
    """The standard reason phrase (RFC 9110) from the standard library, "" for an unknown code.
    A dict, not ``HTTPStatus(code)``: an Enum lookup per response was 4% of a cached fetch."""
    return _PHRASES.get(code, "")


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
        self.after: Optional[Callable[[], None]] = None  # run once the answer went out (AnsweredBody)


class AnsweredBody(list):
    """A WSGI body that runs ``after`` once the server is done sending it: PEP 3333 servers call
    ``close()`` then (gunicorn after its last write; also when the client went away). Work that
    the answer does not depend on waits there instead of holding the answer back."""

    def __init__(self, chunks: Iterable[bytes], after: Callable[[], None]):
        super().__init__(chunks)
        self._after: Optional[Callable[[], None]] = after

    def close(self) -> None:
        after, self._after = self._after, None
        if after is None:
            return
        try:
            after()
        except Exception:  # the answer went out: a bug here must not be reported as the request's
            log.exception("work after an answer failed")


def json_response(code: int, obj: Any, headers: Optional[List[Tuple[str, str]]] = None, pool: str = "") -> Response:
    return Response(code, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode(), headers=headers, pool=pool)


def error_body(code: int, message: str, field: str = "") -> Dict[str, Any]:
    err: Dict[str, Any] = {"code": code, "message": message}
    if field:
        err["field"] = field
    return {"error": err}



def allow(method: str, allowed: Tuple[str, ...]) -> None:
    if method not in allowed:
        raise HTTPError(405, f"method {method} not allowed here; allowed: {', '.join(allowed)}",
                        [("Allow", ", ".join(allowed))])


def pool_name(name: str) -> str:
    if not DNS1123_LABEL.match(name):
        raise HTTPError(400, f"invalid pool name {name!r}: a pool name is a DNS-1123 label (lower case letters, "
                             f"digits and '-', at most 63 characters)", field="pool")
    return name


def node_name(name: str) -> str:
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        raise HTTPError(400, f"invalid node name {name!r}: a node name is a DNS-1123 subdomain", field="node")
    return name


NODE_HEADER = "HTTP_X_NODE_NAME"


def asking_node(environ: Dict[str, Any]) -> Optional[str]:
    """The node a config fetch names with ``?node=<name>`` or ``X-Node-Name`` (a member of the
    pool gets the pool's target: only with that node's credential, identity.Auth.member_name);
    None for fetches naming nobody (a real first boot: what a new node may have)."""
    qs = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    node = (qs.get("node") or [""])[0] or environ.get(NODE_HEADER, "")
    return node_name(node) if node else None


def client_address(environ: Dict[str, Any], trusted: Tuple[str, ...] = ("127.0.0.1",)) -> str:
    """Where a request came from: the peer's address, or, when the peer is a proxy in
    ``trusted`` (serve --forwarded-allow-ips, the list gunicorn trusts with forwarding headers;
    "*" trusts every peer), the last address it appended to ``X-Forwarded-For``. A client that
    is not such a proxy cannot choose the address it is counted under."""
    peer = str(environ.get("REMOTE_ADDR") or "")
    forwarded = str(environ.get("HTTP_X_FORWARDED_FOR") or "")
    if forwarded and ("*" in trusted or peer in trusted):
        last = forwarded.split(",")[-1].strip()
        if last:
            return last[:64]
    return peer


_REPORT_PATH = re.compile(r"^/api/v1/nodes/[^/]+/report/?$")


def body_limit(environ: Dict[str, Any]) -> Tuple[int, str]:
    """The most bytes this request's body may have, and what the body is (for the 413): a
    node's report MAX_REPORT, any other body MAX_BODY (docs/security.md, "Limits")."""
    if _REPORT_PATH.match(environ.get("PATH_INFO", "") or ""):
        return MAX_REPORT, "a report"
    return MAX_BODY, "a request body"


def _too_large(what: str, limit: int, length: Optional[int]) -> HTTPError:
    size = f"{length} bytes" if length is not None else f"more than {limit} bytes"
    return HTTPError(413, f"{what} may have at most {limit} bytes ({limit // 1024} KiB); this one has {size}",
                     field="$")


def read_body(environ: Dict[str, Any]) -> bytes:
    """The request body, whole, under its size limit (body_limit: 413 past it, nothing more is
    read) and the worker's body deadline (408). With ``Content-Length`` the size is known
    before reading; a chunked body (``Transfer-Encoding: chunked``, no length: gunicorn decodes
    the chunks) is read up to one byte past the limit."""
    limit, what = body_limit(environ)
    declared = environ.get("CONTENT_LENGTH")
    if declared not in (None, ""):
        try:
            length = int(declared)
        except ValueError:
            raise HTTPError(400, "invalid Content-Length")
        if length < 0:
            raise HTTPError(400, "invalid Content-Length")
        if length > limit:
            _discard(environ["wsgi.input"], length, environ.get("gunicorn.socket"))
            raise _too_large(what, limit, length)
        want = length
    else:  # chunked, or no body at all (gunicorn then reads nothing)
        want = limit + 1
    try:
        raw = environ["wsgi.input"].read(want) if want else b""
    except TimeoutError as exc:  # the gevent worker's body deadline (the connection then closes)
        raise HTTPError(408, f"{exc}; send the whole body at once")
    except Exception as exc:
        # A malformed chunk (gunicorn.http.errors, which are IOErrors in gunicorn 21.2): the request
        # itself is wrong. Any other OSError (reset, broken pipe, TLS EOF, gunicorn's NoMoreData): the
        # connection broke, the request is incomplete, not invalid: a 400 here told a node its report
        # was refused for its content, and the node never sent that report again (a VM run:
        # "BrokenPipeError: [Errno 32] Broken pipe"). 408 is sent again (RFC 9110 15.5.9).
        malformed = type(exc).__module__.startswith("gunicorn.http") and type(exc).__name__ != "NoMoreData"
        if malformed:
            raise HTTPError(400, f"the request body could not be read: {type(exc).__name__}: {exc}", field="$")
        if not isinstance(exc, OSError):
            raise
        raise HTTPError(408, f"the connection broke while the request body was read ({type(exc).__name__}: "
                             f"{exc}); send the request again", field="$")
    if declared not in (None, "") and len(raw) < want:
        # gunicorn returns what came before the peer's end of stream without an error. The request
        # is incomplete, not invalid: a 400 ("not valid JSON") would tell the node its report was
        # refused for its content, never to be sent again; 408 is retried (RFC 9110 15.5.9).
        raise HTTPError(408, f"the request body ended after {len(raw)} of its {want} bytes (Content-Length): "
                             "the connection was cut; send the request again", field="$")
    if len(raw) > limit:
        _discard(environ["wsgi.input"], MAX_DISCARD, environ.get("gunicorn.socket"))
        raise _too_large(what, limit, None)
    return raw


MAX_DISCARD = 8 << 20  # the most of an over-limit body read (and dropped) so that its client sees the 413
DISCARD_SECONDS = 5.0  # and for at most this long


def _discard(stream: Any, length: int, stream_socket: Any = None) -> None:
    """Read and drop up to ``length`` bytes of an over-limit body (at most MAX_DISCARD, for at
    most DISCARD_SECONDS), as nginx's lingering close does: a server that answers 413 and closes
    while the client still sends makes the client's kernel see a reset (TLS: an EOF) before it
    reads the answer; the client never learns the body was refused and sends it again. What is
    left after the bounds is not waited for (the connection then closes: gevent_worker's
    _should_close)."""
    close = getattr(stream_socket, "close_after_response", None)
    if close is not None:  # the gevent worker: "Connection: close" on the 413, as docs/security.md says
        close()
    cap = getattr(stream_socket, "cap_body_wait", None)
    if cap is not None:  # a read that waits is bounded too, not only the time between reads
        cap(DISCARD_SECONDS)
    left = min(length, MAX_DISCARD)
    deadline = time.monotonic() + DISCARD_SECONDS
    try:
        while left > 0 and time.monotonic() < deadline:
            chunk = stream.read(min(left, 64 << 10))
            if not chunk:
                return
            left -= len(chunk)
    except Exception as exc:  # the client gave up or sent garbage: the 413 is still the answer
        if not isinstance(exc, OSError) and not type(exc).__module__.startswith("gunicorn.http"):
            raise


def finish_body(environ: Dict[str, Any]) -> None:
    """After an answer given before the request's body was read (a 401 or 403 before
    authentication let it through, a 404, 405 or 415): read and drop what is left of it, as for a
    413 (``_discard``'s bounds: at most MAX_DISCARD bytes, DISCARD_SECONDS), so that a client
    still sending sees the answer instead of a reset or a TLS EOF, and close the connection after
    the answer (a lingering close, as nginx's: an unwanted body is not a reason to keep it). A body
    the route had read whole keeps the connection."""
    stream = environ.get("wsgi.input")
    declared = environ.get("CONTENT_LENGTH")
    chunked = "chunked" in str(environ.get("HTTP_TRANSFER_ENCODING") or "").lower()
    if stream is None or (declared in (None, "", "0") and not chunked):
        return
    limit, _ = body_limit(environ)
    try:
        length = int(declared) if declared not in (None, "") else None
    except ValueError:
        return
    if length is not None and length > limit:
        _discard(stream, length, environ.get("gunicorn.socket"))
        return
    try:
        rest = stream.read((length if length is not None else limit) + 1)
    except Exception as exc:  # a stalled or malformed body: the connection closes after the answer
        if not isinstance(exc, OSError) and not type(exc).__module__.startswith("gunicorn.http"):
            raise
        return
    if length is None and len(rest) > limit:
        _discard(stream, MAX_DISCARD, environ.get("gunicorn.socket"))
    elif rest:  # the body was left unread: "Connection: close" on the answer (the gevent worker)
        close = getattr(environ.get("gunicorn.socket"), "close_after_response", None)
        if close is not None:
            close()


def json_body(environ: Dict[str, Any]) -> Any:
    ctype = environ.get("CONTENT_TYPE", "") or ""
    if ctype and not re.match(r"^application/(json|[a-z.+-]*\+json)\b", ctype):
        raise HTTPError(415, f"the body must be JSON (Content-Type: application/json), got {ctype}")
    raw = read_body(environ)
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
    if _has_lone_surrogate(doc):
        raise HTTPError(400, "the body has a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair): "
                             "not Unicode text; send the character itself or its pair", field="$")
    return doc


def _has_lone_surrogate(doc: Any) -> bool:
    """Whether a string of ``doc`` (keys too) holds a lone surrogate (json.loads lets "\\ud800"
    through; it cannot be written as UTF-8, so a store would fail on it later)."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


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


def hold_seconds(environ: Dict[str, Any], max_hold: float) -> float:
    """The seconds a member asked its fetch to be held (``?wait=``), at most ``max_hold`` (0: this
    server does not hold: the gthread worker, where a held request would hold a thread)."""
    qs = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    try:
        wait = float((qs.get("wait") or ["0"])[0])
    except ValueError:
        raise HTTPError(400, "wait: a number of seconds", field="wait")
    if not wait >= 0:
        raise HTTPError(400, "wait: a number of seconds, 0 or more", field="wait")
    return min(wait, max_hold)


def unchanged(environ: Dict[str, Any], etag: str) -> bool:
    inm = environ.get("HTTP_IF_NONE_MATCH", "")
    return bool(inm) and (inm.strip() == "*" or etag in [t.strip() for t in inm.split(",")])


def header_text(text: str, limit: int = 1000) -> str:
    """``text`` as a header value: one line of printable ASCII, at most ``limit`` characters."""
    clean = "".join(c if 32 <= ord(c) < 127 else "?" for c in " ".join(text.split()))
    return clean[:limit]
