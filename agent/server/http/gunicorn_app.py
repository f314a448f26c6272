"""Running the WSGI app under gunicorn, programmatically (no gunicorn config file needed).

Worker model (``--worker-class``): ``gevent`` by default (agent/server/http/gevent_worker.py: one
greenlet per connection, with handshake/header/idle/body/write deadlines), so a slow or
handshaking client costs no thread and a storm of hundreds of nodes fetching at once is served
from the per-worker cache of rendered bodies; ``gthread`` (gunicorn's threads per worker, the
earlier default) stays available, without those deadlines.
"""

import os
from typing import Any, Callable, Dict, Optional

from gunicorn.app.base import BaseApplication
from gunicorn.config import Config

from agent.server.http import metrics
from agent.server.http.app import App
from agent.server.http.limits import Limits


def default_workers() -> int:
    """One event-loop worker per CPU, 2..8. Two per CPU cost more CPU per request for nothing in
    the config storm (docs/performance.md, "Config storm", its worker count run); two at least, so a worker stalled in
    a blocking call (an SQLite write waiting for the lock) never stops the whole server."""
    return max(2, min(8, os.cpu_count() or 1))


def default_threads() -> int:
    return 32


WORKER_CLASSES = ("gevent", "gthread")


class _Config(Config):
    @property
    def worker_class_str(self) -> str:
        # gunicorn < 22 (EPEL 9 ships 21.2) reads worker_class as a string here (``.endswith``);
        # ours is a class carrying the deadlines, so the arbiter's start-up log line failed.
        uri = self.settings["worker_class"].get()
        return uri if isinstance(uri, str) else f"{uri.__module__}.{uri.__qualname__}"


class ServerApplication(BaseApplication):
    def __init__(self, app: App, options: Dict[str, Any]):
        self.application = app
        self.options = options
        super().__init__()

    def load_default_config(self) -> None:
        self.cfg = _Config(self.usage, prog=self.prog)

    def load_config(self) -> None:
        for key, value in self.options.items():
            if value is not None and key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self) -> App:
        return self.application


_SSL_CONTEXTS: Dict[int, Any] = {}


def ssl_context_hook(client_ca: Optional[str] = None) -> Any:
    """gunicorn's ``ssl_context`` server hook, called for every TLS connection: the context is
    built once per worker (gunicorn's default builds a new one per connection, loading the
    system CA store each time: tens of ms of CPU per connection, so a storm of 200 new TLS
    connections then served almost nothing).

    ``client_ca`` (PEM: the cluster's client CA, serve --kubelet-client-ca or the API server's
    published one): the context asks every client for a certificate and verifies one it gets
    against these CAs alone (``CERT_OPTIONAL``: a client without one still connects; one whose
    certificate does not verify fails the handshake). gunicorn's factory trusts no other CA here:
    ``create_default_context(Purpose.CLIENT_AUTH)`` loads no system store for client
    certificates (its verify mode is CERT_NONE when it would), and we load only ``client_ca``."""

    def hook(conf: Any, default_ssl_context_factory: Any) -> Any:
        ctx = _SSL_CONTEXTS.get(os.getpid())
        if ctx is None:
            ctx = default_ssl_context_factory()
            if client_ca:
                import ssl

                ctx.load_verify_locations(cadata=client_ca)
                ctx.verify_mode = ssl.CERT_OPTIONAL
            _SSL_CONTEXTS[os.getpid()] = ctx
        return ctx

    return hook


def _post_worker_init(worker: Any) -> None:
    # Open SQLite and render in the worker, after the fork (never share a connection across it).
    worker.wsgi.warm()


def _worker_exit(server: Any, worker: Any) -> None:
    # Called in the worker process as it exits (gunicorn's worker_exit hook).
    try:
        worker.wsgi.retire()
    except Exception as exc:  # the API away: the announcement expires by itself
        server.log.warning("worker %s: retiring its replica announcement: %s", worker.pid, exc)


def child_exit_hook() -> Callable[[Any, Any], None]:
    """gunicorn's child_exit hook, made in the master before it forks: once a worker exited, its
    live gauges (held fetches) leave the sum. gunicorn runs the hook inside its SIGCHLD handler,
    which a second worker's exit interrupts; an import there would be found half done by the nested
    call ("partially initialized module"), so the hook imports nothing when it runs."""
    if not os.environ.get(metrics.ENV):
        return _no_child_exit
    from prometheus_client.multiprocess import mark_process_dead

    def hook(server: Any, worker: Any) -> None:
        mark_process_dead(worker.pid)

    return hook


def _no_child_exit(server: Any, worker: Any) -> None:
    return None


# gunicorn's own line, then the answer's ETag: which config (or which version of a view) a
# node was answered, and so whether a 200 sent it what it already had.
ACCESS_LOG_FORMAT = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %({etag}o)s'


def options(bind: str, certfile: Optional[str], keyfile: Optional[str], workers: Optional[int],
            threads: int, log_level: str = "info", access_log: Optional[str] = None,
            worker_class: str = "gevent", limits: Any = None, client_ca: Optional[str] = None,
            forwarded_allow_ips: str = "127.0.0.1") -> Dict[str, Any]:
    """gunicorn settings. ``limits``: the gevent worker's deadlines (gevent_worker.Limits);
    its ``idle`` is also gunicorn's ``keepalive``. ``client_ca``: the cluster's client CA
    (PEM), asked of clients on the TLS listener (ssl_context_hook); only the gevent worker hands
    the app what a certificate proves."""
    if worker_class == "gevent":
        from agent.server.http.gevent_worker import worker_class as gevent_class

        limits = limits or Limits()
        klass: Any = gevent_class(limits)
        keepalive = max(1, int(limits.idle))  # gunicorn wants whole seconds; TimedSocket enforces idle
    elif worker_class == "gthread":
        klass, keepalive = "gthread", 30
    else:
        raise ValueError(f"unknown worker class {worker_class!r}; one of {', '.join(WORKER_CLASSES)}")
    return {
        "bind": [bind],
        "workers": workers or default_workers(),
        "worker_class": klass,
        "threads": threads,
        "worker_connections": 2000,
        "backlog": 2048,
        "keepalive": keepalive,
        "timeout": 60,
        "graceful_timeout": 10,
        "certfile": certfile,
        "keyfile": keyfile,
        "loglevel": log_level,
        "errorlog": "-",
        "accesslog": access_log,
        "access_log_format": ACCESS_LOG_FORMAT,
        "post_worker_init": _post_worker_init,
        "worker_exit": _worker_exit,
        "child_exit": child_exit_hook(),
        "ssl_context": ssl_context_hook(client_ca if worker_class == "gevent" else None),
        "proc_name": "node-config-server",
        "preload_app": False,
        "reuse_port": False,
        "forwarded_allow_ips": forwarded_allow_ips,
        # gunicorn >= 25.1 opens a management socket by default ($XDG_RUNTIME_DIR/gunicorn.ctl,
        # else $HOME/.gunicorn/gunicorn.ctl: change the worker count, reload, stop). We offer
        # no such interface (systemctl does that), and every server of one user would share
        # the path. Older gunicorn has no such setting; load_config skips unknown ones.
        "control_socket_disable": True,
    }
