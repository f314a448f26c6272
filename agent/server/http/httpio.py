"""HTTP plumbing of node-config-server's WSGI app: JSON errors and responses, request bodies,
names in paths. No framework: a dozen routes do not need one.

Every error is JSON: ``{"error": {"code": <HTTP status>, "message": "...", "field": "..."?}}``.
"""

import json
import re
from http import HTTPStatus
from typing import Any, Dict, List, Optional, Tuple

from agent.server.store.statedir import DNS1123_LABEL, DNS1123_SUBDOMAIN

MAX_BODY = 1 << 20
MAX_JSON_DEPTH = 32  # a report nests 3 levels; deeper is hostile (and recursion is bounded)


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


def json_body(environ: Dict[str, Any]) -> Any:
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
