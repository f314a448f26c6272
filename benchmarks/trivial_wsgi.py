"""The least a WSGI app can do for a config fetch: answer every request with the same bytes
(read once from ``TRIVIAL_WSGI_BODY``). The config storm serves it with gunicorn and
node-config-server's own gevent worker, to show what the HTTP stack costs before any of the
server's work (routing, gating, the node store, metrics)."""

import os

with open(os.environ["TRIVIAL_WSGI_BODY"], "rb") as _f:
    BODY = _f.read()
HEADERS = [("Content-Type", "application/vnd.coreos.ignition+json;version=3.4.0"), ("Content-Length", str(len(BODY)))]


def app(environ, start_response):
    start_response("200 OK", list(HEADERS))
    return [BODY]
