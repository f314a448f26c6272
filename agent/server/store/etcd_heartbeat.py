"""A replica process announces what it serves (``EtcdNodeStore`` replicas view)."""

import json
import logging
import os
import threading
import time
from typing import Any, Callable, Dict

log = logging.getLogger(__name__)


class Heartbeat:
    """A replica process announces what it serves under ``replicas/<name>/<pid>`` (an etcd lease
    of ``ttl`` seconds, renewed every ``ttl / 3``): /api/v1/cluster lists every replica's view,
    and a replica that died drops out by itself."""

    def __init__(self, store: Any, name: str, describe: Callable[[], Dict[str, Any]], ttl: int = 15):
        self.store, self.name, self.describe, self.ttl = store, name, describe, ttl
        self._lease = 0
        self._thread = threading.Thread(target=self._loop, name="replica-heartbeat", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        client = self.store.client
        if not self._lease or client.keepalive(self._lease) <= 0:
            self._lease = client.grant(self.ttl)
        info = dict(self.describe(), replica=self.name, pid=os.getpid(), at=time.time())
        client.put(self.store._k("replicas", self.name, str(os.getpid())), json.dumps(info, sort_keys=True),
                   lease=self._lease)

    def _loop(self) -> None:
        while not self.store._stop.wait(0 if not self._lease else self.ttl / 3):
            try:
                self.beat()
            except Exception as exc:  # the store is away: the next beat tries again
                log.debug("replica heartbeat failed: %s", exc)
                self._lease = 0
                self.store._stop.wait(1)
