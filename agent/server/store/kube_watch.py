"""A watch cache of one kind of object (client-go's reflector, in small): list, then watch from
the list's resourceVersion; ``410 Gone`` (the version was compacted away) re-lists; a broken
connection resumes the watch from the last version seen, with a growing back-off.

The cache is what the server serves from while the API server is away: ``snapshot()`` keeps
answering with the last objects seen, and ``error`` says why it is not current.
"""

import logging
import random
import threading
import time
from typing import Any, Callable, Dict, Optional

from agent.server.store.kube_client import KubeClient, KubeError, KubeUnavailable, Resource

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.2
BACKOFF_MAX = 10.0
WATCH_SECONDS = 240  # the server ends a watch after this; a new one resumes from the last version


class Gone(Exception):
    """The watch's resourceVersion is too old: re-list."""


class Reflector:
    """Objects of ``resource`` by name, kept current in a daemon thread until ``stop()``."""

    def __init__(self, client: KubeClient, resource: Resource, on_change: Optional[Callable[[], None]] = None,
                 label_selector: str = "", namespace: str = "", metadata_only: bool = False):
        self.client = client
        self.resource = resource
        self.path = resource.path(namespace=namespace)
        self.params = {"labelSelector": label_selector} if label_selector else {}
        self.on_change = on_change or (lambda: None)
        self.metadata_only = metadata_only  # cache PartialObjectMetadata: labels and annotations only
        self.error = ""
        self.synced = threading.Event()
        self._objects: Dict[str, Dict[str, Any]] = {}
        self._version = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{resource.plural}", daemon=True)

    def start(self) -> "Reflector":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> Dict[str, Dict[str, Any]]:
        with self._lock:
            return dict(self._objects)

    @property
    def version(self) -> str:
        return self._version

    def wait_synced(self, timeout: float) -> bool:
        return self.synced.wait(timeout)

    def _run(self) -> None:
        delay = BACKOFF_FIRST
        listed = False
        while not self._stop.is_set():
            try:
                if not listed:
                    self._relist()
                    listed = True
                self._watch_once()
                delay = BACKOFF_FIRST
            except Gone:
                listed = False
                continue
            except (KubeUnavailable, KubeError) as exc:
                self._failed(str(exc))
                if isinstance(exc, KubeError) and exc.status in (401, 403, 404):
                    listed = False  # permissions or the CRD changed: start over once it is back
            except Exception as exc:  # a watch thread must outlive any one bad answer
                log.exception("watch of %s", self.path)
                self._failed(f"{type(exc).__name__}: {exc}")
            else:
                continue
            self._stop.wait(delay * (0.5 + random.random()))
            delay = min(delay * 2, BACKOFF_MAX)

    def _failed(self, why: str) -> None:
        if why != self.error:
            log.warning("%s: %s (serving the last objects seen; retrying)", self.path, why)
        self.error = why

    def _relist(self) -> None:
        items, version = self.client.list(self.path, self.params, metadata_only=self.metadata_only)
        objects = {obj["metadata"]["name"]: self._trim(obj) for obj in items}
        with self._lock:
            changed = objects != self._objects
            self._objects = objects
            self._version = version
        self.error = ""
        self.synced.set()
        if changed:
            self.on_change()

    def _trim(self, obj: Dict[str, Any]) -> Dict[str, Any]:
        """A metadata-only cache keeps no managedFields either (most of what is left: who wrote
        which field when; the server never reads it)."""
        if self.metadata_only and "managedFields" in (obj.get("metadata") or {}):
            obj = dict(obj, metadata={k: v for k, v in obj["metadata"].items() if k != "managedFields"})
        return obj

    def _watch_once(self) -> None:
        params = dict(self.params)
        for event in self.client.watch(self.path, self._version, WATCH_SECONDS, params,
                                       metadata_only=self.metadata_only):
            if self._stop.is_set():
                return
            self._apply(event)
        self.error = ""

    def _apply(self, event: Dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise KubeUnavailable(f"WATCH {self.path}: {obj.get('code')} {obj.get('message', '')}")
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion", ""))
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._objects[meta["name"]] = self._trim(obj)
            elif kind == "DELETED":
                self._objects.pop(meta.get("name", ""), None)
            if version:
                self._version = version
        self.error = ""
        if kind != "BOOKMARK":
            self.on_change()


def wait_all_synced(reflectors: Any, timeout: float) -> bool:
    """True when every reflector listed once within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    return all(r.wait_synced(max(0.0, deadline - time.monotonic())) for r in reflectors)
