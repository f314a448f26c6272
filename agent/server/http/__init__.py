"""The HTTP layer: the WSGI app and its routes, gunicorn and our gevent worker with per-phase
deadlines, body files, the fetch memo, metrics."""
