"""One real node-config-server (gunicorn, TLS) on loopback, with agents against it."""
