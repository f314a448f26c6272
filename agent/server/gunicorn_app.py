"""Running the WSGI app under gunicorn, programmatically (no gunicorn config file needed).

Worker model: ``gthread`` (threads per worker; idle keep-alive connections wait in the
worker's poller, not in a thread), so a scale-up storm of hundreds of nodes fetching at once
is served from the per-worker cache of rendered bodies without re-rendering.
"""

import os
from typing import Any, Dict, Optional

from gunicorn.app.base import BaseApplication

from agent.server.app import App


def default_workers() -> int:
    return max(2, min(8, (os.cpu_count() or 1) * 2))


def default_threads() -> int:
    return 32


class ServerApplication(BaseApplication):
    def __init__(self, app: App, options: Dict[str, Any]):
        self.application = app
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if value is not None and key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self) -> App:
        return self.application


_SSL_CONTEXTS: Dict[int, Any] = {}


def _ssl_context(conf: Any, default_ssl_context_factory: Any) -> Any:
    """gunicorn's server hook, called for every TLS connection: build the context once per
    worker. gunicorn's default builds a new one per connection, loading the system CA store
    each time (tens of ms of CPU per connection: a storm of 200 new TLS connections then
    served almost nothing)."""
    ctx = _SSL_CONTEXTS.get(os.getpid())
    if ctx is None:
        ctx = _SSL_CONTEXTS[os.getpid()] = default_ssl_context_factory()
    return ctx


def _post_worker_init(worker: Any) -> None:
    # Open SQLite and render in the worker, after the fork (never share a connection across it).
    worker.wsgi.warm()


def options(bind: str, certfile: Optional[str], keyfile: Optional[str], workers: Optional[int],
            threads: int, log_level: str = "info", access_log: Optional[str] = None) -> Dict[str, Any]:
    return {
        "bind": [bind],
        "workers": workers or default_workers(),
        "worker_class": "gthread",
        "threads": threads,
        "worker_connections": 2000,
        "backlog": 2048,
        "keepalive": 30,
        "timeout": 60,
        "graceful_timeout": 10,
        "certfile": certfile,
        "keyfile": keyfile,
        "loglevel": log_level,
        "errorlog": "-",
        "accesslog": access_log,
        "post_worker_init": _post_worker_init,
        "ssl_context": _ssl_context,
        "proc_name": "node-config-server",
        "preload_app": False,
        "reuse_port": False,
        "forwarded_allow_ips": "127.0.0.1",
    }
