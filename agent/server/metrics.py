"""Prometheus text format, correct across gunicorn worker processes.

Each worker counts requests in memory and writes its totals to ``<dir>/<pid>.json`` (at most
once a second, and before answering ``/metrics``); ``/metrics`` sums every file, so a scrape
landing on any worker sees the whole server. Files of dead workers stay: counters never go
back. Gauges (served config, nodes by state) are read from the shared state at scrape time.
"""

import json
import os
import threading
import time
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

FLUSH_EVERY = 0.5


def _esc(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in kv.items()) + "}"


class RequestCounter:
    def __init__(self, directory: Optional[str]):
        self.directory = directory
        self._lock = threading.Lock()
        self._counts: Dict[Tuple[str, str, str], int] = defaultdict(int)
        self._flushed = 0.0
        self._dirty = False
        self._thread: Optional[threading.Thread] = None

    def inc(self, pool: str, code: int, method: str) -> None:
        with self._lock:
            self._counts[(pool, str(code), method)] += 1
            self._dirty = True
            start = self._thread is None and self.directory is not None
            if start:
                self._thread = threading.Thread(target=self._flusher, name="metrics-flush", daemon=True)
        if start:
            self._thread.start()

    def _flusher(self) -> None:
        # Off the request path: a scrape on another worker sees our counts within FLUSH_EVERY.
        while True:
            time.sleep(FLUSH_EVERY)
            try:
                self.flush()
            except OSError:
                pass

    def flush(self) -> None:
        if not self.directory:
            return
        with self._lock:
            if not self._dirty:
                return
            data = [[p, c, m, n] for (p, c, m), n in self._counts.items()]
            self._dirty = False
            self._flushed = time.monotonic()
        path = os.path.join(self.directory, f"{os.getpid()}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)

    def totals(self) -> Dict[Tuple[str, str, str], int]:
        if not self.directory:
            with self._lock:
                return dict(self._counts)
        self.flush()
        out: Dict[Tuple[str, str, str], int] = defaultdict(int)
        mine = f"{os.getpid()}.json"
        for name in os.listdir(self.directory):
            if not name.endswith(".json") or name == mine:
                continue
            try:
                with open(os.path.join(self.directory, name)) as f:
                    for p, c, m, n in json.load(f):
                        out[(p, c, m)] += int(n)
            except (OSError, ValueError):
                continue
        with self._lock:  # our own numbers live, not as of the last flush
            for k, n in self._counts.items():
                out[k] += n
        return out


def exposition(counter: RequestCounter, views: Dict[str, Dict[str, Any]], state_problems: int,
               stale: bool) -> str:
    lines: List[str] = []
    lines += ["# HELP node_config_server_requests_total HTTP requests by pool (\"\" when none), code and method.",
              "# TYPE node_config_server_requests_total counter"]
    for (pool, code, method), n in sorted(counter.totals().items()):
        lines.append(f"node_config_server_requests_total{_labels(pool=pool, code=code, method=method)} {n}")
    lines += ["# HELP node_config_server_served_config_info The rendered config and OS image a new node of the pool gets.",
              "# TYPE node_config_server_served_config_info gauge"]
    for name, v in sorted(views.items()):
        served = v["status"]["served"]
        lines.append("node_config_server_served_config_info"
                     f"{_labels(pool=name, config=served['config'], image=served['image'])} 1")
    lines += ["# HELP node_config_server_pool_target_info The pool's target and current rendered configs.",
              "# TYPE node_config_server_pool_target_info gauge"]
    for name, v in sorted(views.items()):
        lines.append("node_config_server_pool_target_info"
                     f"{_labels(pool=name, target=v['spec']['configuration']['name'], current=v['status']['configuration']['name'])} 1")
    lines += ["# HELP node_config_server_nodes Nodes by pool and reported state.",
              "# TYPE node_config_server_nodes gauge"]
    for name, v in sorted(views.items()):
        by_state: Dict[str, int] = dict(v["status"]["nodeStates"])  # counters, not a walk over nodes
        for state, n in sorted(by_state.items()):
            lines.append(f"node_config_server_nodes{_labels(pool=name, state=state)} {n}")
    for metric, key, help_ in (
            ("node_config_server_pool_machines", "machineCount", "Nodes in the pool."),
            ("node_config_server_pool_updated_machines", "updatedMachineCount", "Nodes on the pool's target."),
            ("node_config_server_pool_degraded_machines", "degradedMachineCount", "Degraded nodes."),
            ("node_config_server_pool_skew_refused_machines", "skewRefusedMachineCount",
             "Nodes refused by boot image skew rules.")):
        lines += [f"# HELP {metric} {help_}", f"# TYPE {metric} gauge"]
        for name, v in sorted(views.items()):
            lines.append(f"{metric}{_labels(pool=name)} {v['status'].get(key, 0)}")
    lines += ["# HELP node_config_server_state_problems Problems found in the state directory's newest files.",
              "# TYPE node_config_server_state_problems gauge",
              f"node_config_server_state_problems {state_problems}",
              "# HELP node_config_server_state_stale 1 when the last good state serves because newer files are invalid.",
              "# TYPE node_config_server_state_stale gauge",
              f"node_config_server_state_stale {1 if stale else 0}"]
    return "\n".join(lines) + "\n"
