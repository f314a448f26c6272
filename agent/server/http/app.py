"""The WSGI application of node-config-server (no framework: a dozen routes do not need one).

Every error is JSON: ``{"error": {"code": <HTTP status>, "message": "...", "field": "..."?}}``.
Who may do what: agent/server/rollout/identity.py (the node routes: agent/server/http/noderoutes.py).
"""

import logging
import os
import threading
import time
import urllib.parse
from functools import partial
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from agent import __version__
from agent.core.rolloutpolicy import health_header
from agent.server.cluster import content
from agent.server.cluster.accept import UnsupportedVersion
from agent.server.cluster.backends import NODES_DB, StoreConfig, alert_source, open_backends, start_writers
from agent.server.cluster.nodes import rfc3339
from agent.server.cluster.replicaview import validator_warnings
from agent.server.cluster.service import Cluster, UnknownPool
from agent.server.http.fetchmemo import FetchMemo
from agent.server.http.httpio import (
    AnsweredBody,
    HTTPError,
    Response,
    allow,
    asking_node,
    error_body,
    finish_body,
    header_text,
    hold_seconds,
    json_response,
    node_name,
    pool_name,
    reason_phrase,
    unchanged,
)
from agent.server.http.metrics import RequestCounter, exposition
from agent.server.http.noderoutes import NodeRoutes
from agent.server.http.saidonce import said_once
from agent.server.rollout import drains
from agent.server.rollout.identity import NODE, Auth, Caller, Denied
from agent.server.rollout.renderstatus import failure_message
from agent.server.store.errors import ReportTooLarge, StoreUnavailable
from agent.server.store.stateformat import no_pools_warning

log = logging.getLogger(__name__)



class App(NodeRoutes):
    """``App(state_dir, token=..., admin_token=..., lease_ttl=..., metrics_dir=...)`` is a WSGI
    callable. ``token`` is the bootstrap token (``--token-file``), ``admin_token`` the admin's;
    ``anonymous_secrets`` serves configs with secrets to anyone (the MCS's behaviour).

    The Cluster (SQLite connections, caches) is built per process on first use, never before a
    fork; ``warm()`` builds it eagerly (gunicorn's post_worker_init calls it).
    """

    def __init__(self, state_dir: str, token: Optional[str] = None, lease_ttl: float = drains.DEFAULT_TTL,
                 metrics_dir: Optional[str] = None, reload_interval: float = 1.0,
                 store: Optional[StoreConfig] = None, admin_token: Optional[str] = None,
                 anonymous_secrets: bool = False, settle: Optional[float] = None, data_dir: Optional[str] = None,
                 firstboot_deadline: Optional[float] = None):
        self.state_dir = state_dir
        self.data_dir = data_dir  # where nodes.db is (serve --data-dir); None: the state directory (tests)
        self.store_config = store or StoreConfig()
        self.auth = Auth(token, admin_token, anonymous_secrets)
        self.forwarded_allow: Tuple[str, ...] = ("127.0.0.1",)  # serve --forwarded-allow-ips (httpio.client_address)
        self.lease_ttl = lease_ttl
        self.reload_interval = reload_interval
        self.settle = settle  # seconds a state directory change must rest before it is read
        self.firstboot_deadline = firstboot_deadline  # serve --firstboot-deadline (None: firstboots' default)
        self.counter = RequestCounter(metrics_dir)
        self.memo = FetchMemo()
        self.max_hold = 0.0  # seconds a member's unchanged fetch may be held (serve: MAX_HOLD with gevent)
        self.stopping = threading.Event()  # set as the worker stops: held fetches are answered at once
        self._cluster: Optional[Cluster] = None
        self.writer: Any = None
        self._lock = threading.Lock()

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            with self._lock:
                if self._cluster is None:
                    store, watcher = open_backends(self.store_config, self.state_dir, self.reload_interval,
                                                   self.settle, self.counter.directory and said_once(self.counter.directory))
                    db_path = os.path.join(self.data_dir, NODES_DB) if self.data_dir and store is None else None
                    cluster = Cluster(self.state_dir, db_path=db_path, lease_ttl=self.lease_ttl, store=store,
                                      watcher=watcher, reload_interval=self.reload_interval, settle=self.settle,
                                      alert_source=alert_source(self.store_config))  # the pools' alert gates
                    cluster.store.observe(self.counter.observe_store)
                    if self.counter.directory:  # serve's workers take turns at writes they would race for
                        cluster.store.share_worker_turns(self.counter.directory)
                    cluster.first_boot_listeners.append(self.counter.observe_first_boot)
                    if self.firstboot_deadline is not None:
                        cluster.firstboot_deadline = self.firstboot_deadline
                    cluster.start_heartbeat(self.store_config.replica_name())
                    # the Kubernetes backend's status writes (its drain Events in the server's namespace)
                    self.writer = start_writers(cluster, watcher, self.store_config.drain,
                                                self.store_config.kube_namespace())
                    # the Kubernetes backend's sync loop steps every pool once a second: the
                    # queue then steps only what reports and approvals changed
                    cluster.start_stepper(None if self.writer is not None else 1.0)
                    self._cluster = cluster
        return self._cluster

    def warm(self) -> None:
        self.cluster.prerender()

    def retire(self) -> None:
        """The worker is exiting: take its replica announcement away at once (the Kubernetes
        store's heartbeat Lease), so that /api/v1/cluster drops it now, not a TTL later; and stop
        stepping the pools (the other replicas step them)."""
        if self._cluster is not None:
            self._cluster.stop_heartbeat()
            self._cluster.stop_stepper()

    def close(self) -> None:
        """Stop every thread this app started and release its store (an in-process server's end)."""
        self.retire()
        if self.writer is not None:
            self.writer.stop()
        if self._cluster is not None:
            self._cluster.store.close()
            self._cluster.watcher.close()

    # -- WSGI ------------------------------------------------------------------------------

    def __call__(self, environ: Dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            resp = self.dispatch(environ, method)
        except HTTPError as exc:
            resp = json_response(exc.code, error_body(exc.code, exc.message, exc.field), exc.headers)
            if 400 <= exc.code < 500 and exc.code not in (408, 413):
                finish_body(environ)
        except Denied as exc:
            resp = json_response(exc.code, error_body(exc.code, exc.message, "Authorization"), exc.headers)
            finish_body(environ)  # refused before the body was read: the client sees the answer, not a reset
        except ReportTooLarge as exc:  # nothing was written; final for this report (the agent keeps it refused)
            resp = json_response(413, error_body(413, str(exc), "$"))
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
        chunks = [b""] if method == "HEAD" or resp.code == 304 else [resp.body]
        return chunks if resp.after is None else AnsweredBody(chunks, resp.after)

    def dispatch(self, environ: Dict[str, Any], method: str) -> Response:
        path = environ.get("PATH_INFO", "") or "/"
        parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
        # /healthz and /metrics stay open: probes (kubelet, load balancers) and Prometheus
        # scrape without credentials, and neither says anything a node could misuse (pool
        # names, counts, problems in the state directory; no config, no report).
        if parts == ["healthz"]:
            allow(method, ("GET", "HEAD"))
            return self.healthz()
        if parts == ["metrics"]:
            allow(method, ("GET", "HEAD"))
            st = self.cluster.state()
            text = exposition(self.counter, self.cluster.pool_views(pending=False, nodes=0), len(st.problems), st.stale)
            return Response(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
        if len(parts) == 2 and parts[0] == "config":
            allow(method, ("GET", "HEAD"))
            return self.config(environ, pool_name(parts[1]))
        if parts[:2] == ["api", "v1"]:
            resp = self.api(environ, method, parts[2:])
            if resp is not None:
                return resp
        raise HTTPError(404, f"no such resource: {path}; see /config/<pool>, /healthz, /metrics, /api/v1/pools, "
                             f"/api/v1/cluster, /api/v1/nodes, /api/v1/nodes/<node>[/register|report|drain]")

    def caller(self, environ: Dict[str, Any], prove: bool = True) -> Caller:
        """Who asks. A node acting with its own credential on a connection whose verified kubelet
        client certificate names it proves its name (approvedBy "kubelet": service.Approval.prove);
        a certificate naming another node is a 403 naming both (docs/security.md "Identity")."""
        caller = self.auth.identify(environ, self.cluster.store)
        if prove and caller.kind == NODE and caller.kubelet:
            caller.check_acting_for(caller.node)
            self.cluster.prove(caller.node)
        return caller

    def api(self, environ: Dict[str, Any], method: str, rest: List[str]) -> Optional[Response]:
        if len(rest) >= 2 and rest[0] == "nodes":
            return self.node_route(environ, method, node_name(rest[1]), rest[2:])
        if len(rest) == 3 and rest[0] == "pools" and rest[2] in ("rollback", "ack"):
            allow(method, ("POST",))
            return (self.rollback if rest[2] == "rollback" else self.ack)(environ, pool_name(rest[1]))
        if rest not in (["pools"], ["nodes"], ["cluster"]) and not (len(rest) == 2 and rest[0] == "pools"):
            return None
        allow(method, ("GET", "HEAD"))
        self.auth.require_reader(self.caller(environ))
        if rest == ["pools"]:
            views = self.cluster.pool_views()
            return json_response(200, {"apiVersion": "v1", "kind": "MachineConfigPoolList",
                                       "items": [views[k] for k in sorted(views)]})
        if rest == ["nodes"]:
            return self.nodes(environ)
        if rest == ["cluster"]:
            return json_response(200, self.cluster.cluster())
        name = pool_name(rest[1])
        views = self.cluster.pool_views(only=name)
        if name not in views:
            raise HTTPError(404, f"unknown pool {name!r}; known pools: {self._known()}")
        view = views[name]
        view["status"]["history"] = [dict(h, at=rfc3339(h.get("at"))) for h in self.cluster.store.history(name)]
        return json_response(200, view, pool=name)

    # -- handlers ----------------------------------------------------------------------------

    def rollback(self, environ: Dict[str, Any], pool: str) -> Response:
        """``POST /api/v1/pools/<pool>/rollback`` (admin): target the last config every member was
        Done on; ``{"dryRun": true}`` says what it would do, ``{"undo": true}`` lifts the hold."""
        from agent.server.cluster.rolloutctl import RolloutNotPossible
        from agent.server.http.httpio import json_body

        self.auth.require_admin(self.caller(environ), f"rolling back pool {pool}")
        body = json_body(environ) if (environ.get("CONTENT_LENGTH") or "").strip() not in ("", "0") else {}
        if not isinstance(body, dict) or set(body) - {"dryRun", "undo"} or \
                not all(isinstance(v, bool) for v in body.values()):
            raise HTTPError(400, "the body must be {\"dryRun\": true|false, \"undo\": true|false} or empty", field="$")
        try:
            out = self.cluster.rollback(pool, dry_run=body.get("dryRun", False), undo=body.get("undo", False))
        except RolloutNotPossible as exc:
            raise self._refused(exc)
        return json_response(200, out, pool=pool)

    def ack(self, environ: Dict[str, Any], pool: str) -> Response:
        """``POST /api/v1/pools/<pool>/ack`` (admin): the rendering held for the admin's
        acknowledgement (require-ack) becomes the target; ``{"config": NAME}``: only if it is that one."""
        from agent.server.cluster.renderreview import NothingToAcknowledge, acknowledge
        from agent.server.http.httpio import json_body

        self.auth.require_admin(self.caller(environ), f"acknowledging pool {pool}'s rendering")
        body = json_body(environ) if (environ.get("CONTENT_LENGTH") or "").strip() not in ("", "0") else {}
        if not isinstance(body, dict) or set(body) - {"config"} or not isinstance(body.get("config", ""), str):
            raise HTTPError(400, "the body must be {\"config\": \"rendered-...\"} or empty", field="$")
        try:
            return json_response(200, acknowledge(self.cluster, pool, body.get("config", "")), pool=pool)
        except NothingToAcknowledge as exc:
            raise self._refused(exc)

    def _refused(self, exc: Exception) -> HTTPError:
        """409 for a rollback or an acknowledgement that cannot be done; 404 for an unknown pool,
        naming the known ones, as get and describe do."""
        if "unknown pool" in str(exc):
            return HTTPError(404, f"{exc}; known pools: {self._known()}")
        return HTTPError(409, str(exc))

    def _known(self) -> str:
        return ", ".join(sorted(self.cluster.state().pools)) or "none"

    def healthz(self) -> Response:
        """200 while this replica can serve and record; 503 when its store raised an alarm
        (etcd NOSPACE or CORRUPT: every write, so every report, would be refused), naming it."""
        st = self.cluster.state()
        store = self.cluster.store_health()
        alarmed = bool(store.get("alarms"))
        body = {"status": "unhealthy" if alarmed else "ok", "version": __version__,
                "state": {"pools": sorted(st.pools), "machineConfigs": len(st.machine_configs),
                          "stale": st.stale, "problems": [p.to_dict() for p in st.problems],
                          "warnings": [dict(p.to_dict(), object=k) for k in sorted(st.warnings) for p in st.warnings[k]]},
                "store": store}
        where = f"state directory {self.cluster.state_dir}" if self.cluster.state_dir else "the state served"
        warnings = self.identity_warnings() + [w for w in (no_pools_warning(st, where),) if w]
        warnings += validator_warnings(st)  # admitted objects' validator warnings too
        if warnings:
            body["warnings"] = warnings
        if alarmed:
            body["reason"] = store["error"]
        if self.cluster.db is not None:
            body["schemaVersion"] = self.cluster.db.schema_version()
        return json_response(503 if alarmed else 200, body, [("Retry-After", "30")] if alarmed else None)

    def identity_warnings(self) -> List[str]:
        """What /healthz says about node identity: nobody can be approved (identity.Auth.nobody_approved),
        or names are approved by the admin only (no kubelet certificate can prove one here)."""
        real_nodes = self.cluster.node_truth is not None
        out = [w for w in (self.auth.nobody_approved(real_nodes),) if w]
        if self.auth.enabled and not self.auth.kubelet_proof and self.kubelet_note:
            out.append(f"node identity by admin approval only: {self.kubelet_note}")
        return out + ([self.plain_http_note] if self.plain_http_note else [])

    kubelet_note = ""  # serve: why no kubelet certificate can prove a name here ("" when one can, or not asked)
    plain_http_note = ""  # serve: a token on plain http, which node-agent never sends (serveargs.plain_http_warning)

    def config(self, environ: Dict[str, Any], pool: str) -> Response:
        caller = self.caller(environ)
        named = asking_node(environ)
        accept = environ.get("HTTP_ACCEPT")
        if named is None and caller.kind != NODE:  # a new node: kept answers (fetchmemo.py)
            key = (pool, accept, caller.kind)
            generation = self.cluster.fetch_generation()  # read before what it vouches for
            answer = self.memo.get(key, generation)
            if answer is None:
                answer = self._config_answer(caller, None, pool, accept)
                self.memo.put(key, generation, answer)
        else:
            # what a held answer is compared with, read before the answer is made: a change committed
            # between the two (the targeting of this node) would otherwise wait out the whole hold
            baseline = self._hold_baseline(pool, named) if self.max_hold and environ.get("HTTP_IF_NONE_MATCH") else None
            answer = self._config_answer(caller, named, pool, accept)
            hold = hold_seconds(environ, self.max_hold)
            member = any(name == "X-Rollout" for name, _ in answer[0].headers)  # not one waiting for approval
            if hold and member and baseline is not None and unchanged(environ, answer[1]):  # waits for its turn
                answer = self._held(caller, named, pool, accept, answer, hold, baseline)
        resp, etag = answer
        if unchanged(environ, etag):
            not_modified = Response(304, b"", headers=resp.headers, pool=pool)
            not_modified.after = resp.after
            return not_modified
        return resp

    def _held(self, caller: Caller, named: Optional[str], pool: str, accept: Optional[str],
              answer: Tuple[Response, str], hold: float, baseline: Tuple[Any, Any]) -> Tuple[Response, str]:
        """Long poll (``?wait=SECONDS`` with ``If-None-Match``): hold a member's unchanged answer
        until its desired config changes (the server targeted it) or ``hold`` seconds passed, so a
        node learns its turn as soon as a step of its pool is stored instead of at its next poll:
        the pools' bell wakes it (poolqueue.py), and it looks every HOLD_POLL seconds all the same
        (its own record may change too). What the answer depends on is looked at again only when
        the store changed (its generation, when it has one), and made again only when what decides
        its config changed too (serving.HoldInputs), both from ``baseline`` (``_hold_baseline``,
        read before ``answer`` was made); once more at the end if why it waits changed."""
        deadline = time.monotonic() + hold
        (seen, rung), made_from = baseline  # ``answer`` was made from ``made_from``
        with self.counter.held.labels(pool).track_inprogress():  # node_config_server_held_fetches
            while time.monotonic() < deadline and not self.stopping.is_set():
                rung = self.cluster.bell.wait(named, rung, min(HOLD_POLL, max(0.0, deadline - time.monotonic())))
                now_gen = self.cluster.store.generation()
                if now_gen is not None and now_gen == seen:
                    continue
                seen, inputs = now_gen, self.cluster.hold_inputs(pool, named)
                if inputs is not None and inputs.same_config(made_from):
                    continue
                made_from, fresh = inputs, self._config_answer(caller, named, pool, accept)
                if fresh[1] != answer[1]:
                    return fresh
                answer = fresh  # the same config: its rollout headers may have changed
        now = self.cluster.hold_inputs(pool, named)  # why it waits, as it is when the hold ends
        return answer if now is not None and now == made_from else self._config_answer(caller, named, pool, accept)

    def _hold_baseline(self, pool: str, named: Optional[str]) -> Tuple[Any, Any]:
        """((the store's generation, the pools' bell), then ``hold_inputs``): in that order, as
        for fetchmemo."""
        cluster = self.cluster
        return (cluster.store.generation(), cluster.bell.seen(named)), self.cluster.hold_inputs(pool, named)

    def _config_answer(self, caller: Caller, named: Optional[str], pool: str,
                       accept: Optional[str]) -> Tuple[Response, str]:
        """The 200 answer to a config fetch and its ETag; refusals and errors are raised."""
        cluster = self.cluster
        # Only an open server (no tokens) asks: it takes an unregistered name at its word.
        has_credential = named is not None and not self.auth.enabled and cluster.store.credential(named) is not None
        node = self.auth.member_name(caller, named, has_credential)
        try:  # one node-store round trip (service.Cluster.fetch)
            fetched = cluster.fetch(pool, accept, node)
        except UnknownPool:
            st = cluster.state()
            why = cluster.render_failure(st, pool) if pool in st.pools else []
            if why:  # a pool never rendered (renderstatus.py): waiting, with RenderDegraded's words
                raise HTTPError(503, f"the config of pool {pool} is withheld: {failure_message(pool, why)}",
                                [("Retry-After", "30")])
            raise HTTPError(404, f"unknown pool {pool!r}; known pools: {self._known()}")
        except UnsupportedVersion as exc:  # upstream api.go answers 400 (detectSpecVersionFromAcceptHeader)
            raise HTTPError(400, str(exc), field="Accept")
        except content.ConversionFailed as exc:  # upstream answers 500 when conversion fails
            raise HTTPError(500, f"the config of pool {pool} cannot be served at the Ignition spec asked for: {exc}")
        self._refuse_other_custom(node, fetched.node, pool)
        self.auth.may_get_secrets(caller, pool, fetched.secrets)
        body, etag, version, served = fetched.body, fetched.etag, fetched.version, fetched.served
        if cluster.is_empty_rendering(served.config):
            # An empty config would boot a node that can never join: better to keep it waiting.
            raise HTTPError(503, f"the config of pool {pool} is withheld: the pool selects no MachineConfigs "
                                 f"(check its spec.machineConfigSelector)", [("Retry-After", "30")])
        headers = [("ETag", etag), ("Cache-Control", "no-cache"), ("Vary", "Accept"), ("X-Served-Config", served.config),
                   ("X-Served-Image", served.image)] + health_header(cluster.state().pools.get(pool))
        if fetched.rollout[0]:  # a member: whether it updates now or waits for its turn, and why
            headers += [("X-Rollout", fetched.rollout[0]), ("X-Rollout-Reason", header_text(fetched.rollout[1]))]
            if self.max_hold:
                headers.append(("X-Rollout-Hold", f"{self.max_hold:g}"))
        resp = Response(200, body, f"{content.MEDIA_TYPE};version={version}", headers, pool=pool)
        if fetched.note is not None:  # what was served, noted once the node has it (approval.py)
            resp.after = partial(cluster.remember_served, fetched.note)
        return resp, etag

    @staticmethod
    def _refuse_other_custom(node: Optional[str], known: Any, pool: str) -> None:
        """A node already in a custom pool never gets another pool's (the worker) config."""
        if node is None or known is None or known.pool == pool:
            return
        from agent.server.rollout.progress import is_custom

        if is_custom(known.pool):
            raise HTTPError(409, f"node {node} belongs to custom pool {known.pool} ({known.why}); it must not "
                                 f"get the {pool} config: fetch /config/{known.pool}")


MAX_HOLD = 25.0  # seconds serve holds a member's unchanged fetch at most (node-agent asks for this long)
HOLD_POLL = 0.5  # seconds between looks at the store while a member's fetch is held and no bell rang
