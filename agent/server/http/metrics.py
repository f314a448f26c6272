"""``/metrics`` with prometheus-client, correct across gunicorn worker processes.

Request counts are a prometheus-client Counter. Under gunicorn, ``serve`` gives every worker one
multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``): each worker's counts live in its own
mmap'ed file there, and a scrape landing on any worker sums them all (MultiProcessCollector), so
counters never go back when a worker dies or is replaced. That is prometheus-client's documented
multiprocess mode; it replaces the JSON files this module used to write and merge by hand.

Gauges (served config, targets, nodes by state, counts) are not kept per process: they are
computed from the shared state at scrape time by a collector, so there is nothing to mark dead
when a worker exits.

The directory is made by ``serve`` under the temporary directory with the server's pid in its
name (``node-config-server-metrics-<pid>-*``) and removed on exit; one left by a server that
was SIGKILLed is removed by the next ``serve`` (``remove_stale_dirs``).
"""

import os
import re
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional

from agent.server.rollout import rolloutstatus

DIR_PREFIX = "node-config-server-metrics-"
ENV = "PROMETHEUS_MULTIPROC_DIR"
_DIR_NAME = re.compile(r"^" + re.escape(DIR_PREFIX) + r"(\d+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def remove_stale_dirs(top: Optional[str] = None) -> List[str]:
    """Remove metrics directories whose server process is gone; return what was removed."""
    top = top or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(top)
    except OSError:
        return removed
    for name in names:
        m = _DIR_NAME.match(name)
        if m and not _alive(int(m.group(1))):
            path = os.path.join(top, name)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def make_dir() -> str:
    """A fresh multiprocess directory for this server (stale ones of dead servers removed first)."""
    remove_stale_dirs()
    return tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")


# Seconds: a first boot in a test takes seconds, an RHCOS one with its pivot reboot 5-30 minutes.
FIRST_BOOT_BUCKETS = (5, 10, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 7200)
METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"))


class RequestCounter:
    """``inc(pool, code, method)``; ``directory`` set = multiprocess mode (gunicorn workers)."""

    def __init__(self, directory: Optional[str]):
        self.directory = directory
        if directory:
            # prometheus-client picks its value store when it is first imported, from this
            # variable; set it first, and re-pick if it was imported before (tests, benchmarks).
            os.environ[ENV] = directory
            from prometheus_client import values

            if not getattr(values.ValueClass, "__name__", "") == "MmapedValue":
                values.ValueClass = values.get_value_class()
        import prometheus_client
        from prometheus_client import Counter

        # No "<name>_created" series (prometheus-client 0.17+): a restart-time gauge per label set
        # that multiprocess mode cannot give anyway, so single- and multi-process output agree.
        getattr(prometheus_client, "disable_created_metrics", lambda: None)()
        self._children: dict = {}
        self.counter = Counter("node_config_server_requests", "HTTP requests by pool (\"\" when none), code and "
                               "method.", ["pool", "code", "method"], registry=None)
        from prometheus_client import Histogram

        # A shared store (etcd): how long its calls take and how many fail, per API path.
        self.store_seconds = Histogram("node_config_server_store_request_seconds",
                                       "Calls to the shared store (etcd) by API path.", ["operation"], registry=None,
                                       buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.store_errors = Counter("node_config_server_store_errors", "Failed calls to the shared store (etcd) "
                                    "by API path.", ["operation"], registry=None)
        # First boots this process saw end (the report that ended one came to it: sum over replicas).
        self.first_boots = Counter("node_config_server_firstboots_ended", "First boots ended by a report this "
                                   "server received, by pool, the stage they ended at and outcome (done, failed).",
                                   ["pool", "stage", "outcome"], registry=None)
        self.first_boot_seconds = Histogram("node_config_server_firstboot_duration_seconds",
                                            "How long first boots took, from their beginning to their Done report "
                                            "(the reboot included).", ["pool"], registry=None,
                                            buckets=FIRST_BOOT_BUCKETS)

        from prometheus_client import Gauge

        # Fetches held open now (long polls of nodes waiting for their turn), by pool; summed over
        # the live worker processes (gunicorn_app's child_exit drops a dead one's).
        self.held = Gauge("node_config_server_held_fetches", "Fetches held open now (nodes waiting for their "
                          "turn on a long poll), by pool.", ["pool"], registry=None, multiprocess_mode="livesum")

    def inc(self, pool: str, code: int, method: str) -> None:
        if method not in METHODS:
            method = "other"  # a client picks the method: one series per made-up word would be unbounded
        key = (pool, code, method)
        child = self._children.get(key)
        if child is None:  # labels() validates and looks up its labels under a lock: once per series
            child = self._children[key] = self.counter.labels(pool, str(code), method)
        child.inc()

    def observe_first_boot(self, pool: str, record: Dict[str, Any]) -> None:
        """A report ended a first boot (service.Cluster.first_boot_listeners)."""
        from agent.server.rollout import firstboots

        outcome = str(record.get("outcome") or "").lower()
        self.first_boots.labels(pool, str(record.get("stage") or ""), outcome).inc()
        seconds = firstboots.duration(record)
        if record.get("outcome") == firstboots.DONE and seconds is not None:
            self.first_boot_seconds.labels(pool).observe(seconds)

    def observe_store(self, operation: str, seconds: float, ok: bool) -> None:
        self.store_seconds.labels(operation).observe(seconds)
        if not ok:
            self.store_errors.labels(operation).inc()

    def registry(self):
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        if self.directory:
            from prometheus_client import multiprocess

            multiprocess.MultiProcessCollector(registry, path=self.directory)
        else:
            for metric in (self.counter, self.store_seconds, self.store_errors, self.first_boots,
                           self.first_boot_seconds, self.held):
                registry.register(metric)
        return registry


class StateCollector:
    """Gauges from the pool views, computed at scrape time."""

    def __init__(self, views: Dict[str, Dict[str, Any]], state_problems: int, stale: bool):
        self.views, self.state_problems, self.stale = views, state_problems, stale

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        views = sorted(self.views.items())

        def family(name: str, help_text: str, labels: List[str], rows: Callable[[], Iterator]) -> Any:
            g = GaugeMetricFamily(name, help_text, labels=labels)
            for values, number in rows():
                g.add_metric(values, number)
            return g

        yield family("node_config_server_served_config_info",
                     "The rendered config and OS image a new node of the pool gets.", ["pool", "config", "image"],
                     lambda: ((([n, v["status"]["served"]["config"], v["status"]["served"]["image"]]), 1)
                              for n, v in views))
        yield family("node_config_server_pool_target_info", "The pool's target and current rendered configs.",
                     ["pool", "target", "current"],
                     lambda: (([n, v["spec"]["configuration"]["name"], v["status"]["configuration"]["name"]], 1)
                              for n, v in views))
        yield family("node_config_server_nodes", "Nodes by pool and reported state.", ["pool", "state"],
                     lambda: (([n, state], count) for n, v in views for state, count in _by_state(v)))
        for metric, key, help_text in (
                ("node_config_server_pool_machines", "machineCount", "Nodes in the pool."),
                ("node_config_server_pool_updated_machines", "updatedMachineCount", "Nodes on the pool's target."),
                ("node_config_server_pool_degraded_machines", "degradedMachineCount", "Degraded nodes."),
                ("node_config_server_pool_skew_refused_machines", "skewRefusedMachineCount",
                 "Nodes refused by boot image skew rules.")):
            yield family(metric, help_text, ["pool"],
                         lambda key=key: (([n], v["status"].get(key, 0)) for n, v in views))
        for metric, help_text, value in POOL_FLAGS:
            yield family(metric, help_text, ["pool"], lambda value=value: (([n], value(v)) for n, v in views))
        # ours: the pool's gates (docs/rollout.md), one series per gate the pool has
        gates = [(n, gate, held, closed) for n, v in views
                 for gate, (held, closed) in sorted(rolloutstatus.gate_states(v["status"].get("rollout")).items())]
        yield family("node_config_server_pool_gate_holding", "1 while the pool's gate (maintenance-window, "
                     "alert-gate, blocking-pods) holds its new targeting; one series per gate the pool has.",
                     ["pool", "gate"], lambda: (([n, gate], int(held)) for n, gate, held, _ in gates))
        yield family("node_config_server_pool_gate_failed_closed", "1 while the pool's gate holds because it "
                     "cannot decide (an invalid annotation, Prometheus not answering, pods not listed).",
                     ["pool", "gate"], lambda: (([n, gate], int(closed)) for n, gate, _, closed in gates))
        yield family("node_config_server_pool_blocked_machines", "Nodes not targeted because pods matching the "
                     "pool's blocking-pod selector run on them.", ["pool"],
                     lambda: (([n], ((v["status"].get("rollout") or {}).get("blockingPods") or {}).get("waiting", 0))
                              for n, v in views))
        # The MCO's own name, help and label (pkg/controller/common/metrics.go, MCCDrainErr), so that
        # its alert MCCDrainError (mcc_drain_err > 0) fires on ours: 1 per node whose drain has gone
        # on past --drain-fail-after; no series once the drain is over (upstream DeleteLabelValues).
        yield family("mcc_drain_err", "logs failed drain", ["node"],
                     lambda: (([node], 1) for _, v in views
                              for node, d in sorted(((v["status"].get("drain") or {}).get("nodes") or {}).items())
                              if d.get("failing")))
        # First boots not done, from the store (every replica shows the same): by pool, the stage
        # they last reported and outcome; the stalled ones by pool (0 when none), for the alerts.
        yield family("node_config_server_firstboots", "First boots not done, by pool, the stage they last reported "
                     "and outcome (running, failed, stalled).", ["pool", "stage", "outcome"],
                     lambda: (([n, stage, outcome.lower()], count) for n, v in views
                              for outcome, stages in sorted((v["status"].get("firstBoots") or {}).get("stages", {})
                                                            .items())
                              for stage, count in sorted(stages.items())))
        yield family("node_config_server_firstboots_stalled", "First boots with no report within their deadline "
                     "(FirstBootStalled), by pool.", ["pool"],
                     lambda: (([n], (v["status"].get("firstBoots") or {}).get("stalled", 0)) for n, v in views))
        yield GaugeMetricFamily("node_config_server_state_problems",
                                "Problems found in the state directory's newest files.", value=self.state_problems)
        yield GaugeMetricFamily("node_config_server_state_stale",
                                "1 when the last good state serves because newer files are invalid.",
                                value=1 if self.stale else 0)


def _condition(view: Dict[str, Any], kind: str) -> int:
    """1 when the pool's condition ``kind`` is True (agent/server/rollout/progress.py ``conditions``)."""
    return int(any(c.get("type") == kind and c.get("status") == "True"
                   for c in view["status"].get("conditions") or []))


# One gauge per pool, 1 or 0, for the alerts of deploy/prometheusrule.yaml (docs/alerts.md): what
# the pool's spec, rollout record and conditions say, as `describe pool` shows them. The pool's
# Degraded is NodeDegraded (node_config_server_pool_degraded_machines > 0) or RenderDegraded.
POOL_FLAGS = (
    ("node_config_server_pool_paused", "1 when the pool is paused (spec.paused): no node is targeted.",
     lambda v: int(bool(v["spec"].get("paused")))),
    ("node_config_server_pool_rollout_halted", "1 when the pool's rollout halted itself: nodes failed on the "
     "target (status.rollout.halted).", lambda v: int(bool((v["status"].get("rollout") or {}).get("halted")))),
    ("node_config_server_pool_held", "1 when a rendering is held back from the pool's target (condition "
     "RenderHeld: rolled back, or awaiting the admin's acknowledgement).", lambda v: _condition(v, "RenderHeld")),
    ("node_config_server_pool_render_degraded", "1 when the pool cannot be rendered (RenderDegraded): its "
     "target stays on its last good rendering, if any.", lambda v: _condition(v, "RenderDegraded")),
)


def _by_state(view: Dict[str, Any]) -> List:
    # the store's counters (status.nodeStates), not a walk over the listed nodes
    return sorted(dict(view["status"]["nodeStates"]).items())


def exposition(counter: RequestCounter, views: Dict[str, Dict[str, Any]], state_problems: int,
               stale: bool) -> str:
    """The Prometheus text format (version 0.0.4) of every metric."""
    from prometheus_client import generate_latest

    registry = counter.registry()
    registry.register(StateCollector(views, state_problems, stale))
    return generate_latest(registry).decode("utf-8")
