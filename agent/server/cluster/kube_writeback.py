"""Reports written back to their Nodes and MachineConfigNodes several at a time (kube_sync's node
loop). Each node's write-back is two or three requests in a row (the Node's patch, the MCN's spec
and status); one node at a time, 1,000 reports were written back at 22 nodes/s while the API server
took 250 patches/s (docs/performance.md, "Fleet scale: server cost against the number of nodes").
"""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Tuple

from agent.server.store.kube.client import KubeError, KubeUnavailable

log = logging.getLogger(__name__)

WRITERS = 8  # nodes written back at once


def write_back(todo: List[Tuple[str, Dict[str, Any], str]], write: Callable[[str, Dict[str, Any], str], None],
               failed: Dict[str, Tuple[Dict[str, Any], str]]) -> Tuple[int, str]:
    """``write(node, report, pool)`` for each of ``todo``, ``WRITERS`` at a time. What could not be
    written goes into ``failed`` (the next round writes it); once the API server is away, so does
    the rest. Returns (nodes written, why the API server was away or "")."""
    away: List[str] = []
    done = [0]
    lock = threading.Lock()

    def one(item: Tuple[str, Dict[str, Any], str]) -> None:
        node, reported, pool = item
        if away:
            with lock:
                failed[node] = (reported, pool)
            return
        try:
            write(node, reported, pool)
            with lock:
                done[0] += 1
        except KubeUnavailable as exc:
            with lock:
                away.append(str(exc))
                failed[node] = (reported, pool)
        except KubeError as exc:
            log.warning("Node %s: %s (retrying)", node, exc)
            with lock:
                failed[node] = (reported, pool)

    if len(todo) <= 1:
        for item in todo:
            one(item)
    else:
        with ThreadPoolExecutor(min(WRITERS, len(todo)), thread_name_prefix="kube-write-back") as workers:
            list(workers.map(one, todo))
    return done[0], (away[0] if away else "")
