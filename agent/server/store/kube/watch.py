"""A watch cache of one kind of object (client-go's reflector, in small): list, then watch from
the list's resourceVersion; ``410 Gone`` (the version was compacted away) re-lists; a broken
connection resumes the watch from the last version seen, with a growing back-off.

The cache is what the server serves from while the API server is away: ``snapshot()`` keeps
answering with the last objects seen, and ``error`` says why it is not current.

A store that keeps an index of its own passes ``on_event`` (and ``keep_objects=False`` to hold
each object once): it is called in the watch thread with every change and every re-list, and
``NewestObjects`` merges those with the process's own writes.
"""

import contextlib
import logging
import random
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

from agent.server.store.changejournal import ChangeJournal
from agent.server.store.kube.client import KubeClient, KubeError, KubeRefused, KubeUnavailable, Resource

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.2
BACKOFF_MAX = 10.0
WATCH_SECONDS = 240  # the server ends a watch after this; a new one resumes from the last version


def abort_stream(response: Any) -> None:
    """Cut a streaming response another thread is reading: shut its socket down, which wakes a
    read blocked on it (closing the socket alone does not). The connection is urllib3's
    (``HTTPResponse._connection``, kept while a body streams, in urllib3 1.26 and 2)."""
    raw = getattr(response, "raw", None)
    sock = getattr(getattr(raw, "_connection", None), "sock", None)
    if isinstance(sock, socket.socket):  # the plain socket's shutdown: an SSLSocket's also drops its TLS state
        with contextlib.suppress(OSError):  # under the reader's feet
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class Gone(Exception):
    """The watch's resourceVersion is too old: re-list."""


class Reflector:
    """Objects of ``resource`` by name, kept current in a daemon thread until ``stop()``."""

    def __init__(self, client: KubeClient, resource: Resource, on_change: Optional[Callable[[], None]] = None,
                 label_selector: str = "", namespace: str = "", metadata_only: bool = False,
                 on_event: Optional[Callable[[str, Dict[str, Any]], None]] = None, keep_objects: bool = True,
                 transform: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None):
        self.client = client
        self.resource = resource
        self.path = resource.path(namespace=namespace)
        self.params = {"labelSelector": label_selector} if label_selector else {}
        self.on_change = on_change or (lambda: None)
        self.metadata_only = metadata_only  # cache PartialObjectMetadata: labels and annotations only
        # ``on_event(kind, obj)``: ADDED/MODIFIED/DELETED with the object, and RELIST with the
        # list itself ({"items", "metadata": {"resourceVersion"}}) before ``synced`` is set.
        self.on_event = on_event or (lambda kind, obj: None)
        self.keep_objects = keep_objects  # False: snapshot() stays empty (the on_event consumer keeps them)
        # ``transform(obj)``: what of each object the cache keeps (e.g. the fields some rules read);
        # an event that changes nothing kept but the resourceVersion is no change (no on_change).
        self.transform = transform
        self.changes = 0  # counts on_change calls: a cheap "did anything kept change" for memos
        self.journal = ChangeJournal()  # the name of each object kept that changed (``changed_since``)
        self.error = ""
        self.synced = threading.Event()
        self._objects: Dict[str, Dict[str, Any]] = {}
        self._version = ""
        self._lock = threading.Lock()
        self._stream: Any = None  # the watch's streaming response while it is open
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{resource.plural}", daemon=True)

    def start(self) -> "Reflector":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the watch thread at once: its open watch is cut, not left to the API server's
        timeout (a process that goes on, e.g. a retired replica or a test, would keep the
        connection and its thread for minutes, and an API server's graceful stop waits for it)."""
        self._stop.set()
        abort_stream(self._stream)

    def snapshot(self) -> Dict[str, Dict[str, Any]]:
        with self._lock:
            return dict(self._objects)

    def get(self, name: str) -> Optional[Dict[str, Any]]:
        """One object as kept (None: not there), without a copy of them all."""
        with self._lock:
            return self._objects.get(name)

    def changed_since(self, mark: Optional[int]) -> Tuple[int, Optional[Set[str]]]:
        """(the mark now, the names of the objects kept that changed after ``mark``; None: read
        them all, as after a re-list). Read the objects after: they are at least that new."""
        with self._lock:
            return self.journal.since(mark)

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
        if self._stop.is_set():
            return  # stopped: the connection closed under the watch is no news
        if why != self.error:
            log.warning("%s: %s (serving the last objects seen; retrying)", self.path, why)
        self.error = why

    def _relist(self) -> None:
        if self.transform is not None:  # each page made small as it arrives: one page of whole objects at a time
            items, version = self.client.list(self.path, self.params, metadata_only=self.metadata_only,
                                              transform=self._trim)
        else:
            items, version = self.client.list(self.path, self.params, metadata_only=self.metadata_only)
            items = [self._trim(obj) for obj in items]
        objects = {obj["metadata"]["name"]: obj for obj in items} if self.keep_objects else {}
        self.on_event("RELIST", {"items": items, "metadata": {"resourceVersion": version}})
        with self._lock:
            changed = objects != self._objects or not self.keep_objects
            if changed:
                self.journal.reset()
            self._objects = objects
            self._version = version
        self.error = ""
        self.synced.set()
        if changed:
            self._changed()

    def _changed(self) -> None:
        self.changes += 1
        self.on_change()

    def _trim(self, obj: Dict[str, Any]) -> Dict[str, Any]:
        """A metadata-only cache keeps no managedFields either (most of what is left: who wrote
        which field when; the server never reads it)."""
        if self.transform is not None:
            return self.transform(obj)
        if self.metadata_only and "managedFields" in (obj.get("metadata") or {}):
            obj = dict(obj, metadata={k: v for k, v in obj["metadata"].items() if k != "managedFields"})
        return obj

    def _watch_once(self) -> None:
        params = dict(self.params)
        for event in self.client.watch(self.path, self._version, WATCH_SECONDS, params,
                                       metadata_only=self.metadata_only, opened=self._opened):
            if self._stop.is_set():
                return
            self._apply(event)
        self.error = ""

    def _opened(self, response: Any) -> None:
        self._stream = response
        if self._stop.is_set():  # stopped while it was being opened
            abort_stream(response)

    def _apply(self, event: Dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise KubeUnavailable(f"WATCH {self.path}: {obj.get('code')} {obj.get('message', '')}")
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion", ""))
        kept = self._trim(obj) if kind in ("ADDED", "MODIFIED", "DELETED") else obj
        same = False
        with self._lock:
            if kind in ("ADDED", "MODIFIED") and self.keep_objects:
                before = self._objects.get(meta["name"])
                same = self.transform is not None and before is not None and _bare(before) == _bare(kept)
                self._objects[meta["name"]] = kept
                if not same:
                    self.journal.note(meta["name"])
            elif kind == "DELETED" and self.keep_objects:
                self._objects.pop(meta.get("name", ""), None)
                self.journal.note(meta.get("name", ""))
            if version:
                self._version = version
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.on_event(str(kind), kept)
        self.error = ""
        if kind != "BOOKMARK" and not same:
            self._changed()


def _bare(obj: Dict[str, Any]) -> Dict[str, Any]:
    """An object without its resourceVersion (which moves with every write, kept fields or not)."""
    meta = obj.get("metadata") or {}
    return dict(obj, metadata={k: v for k, v in meta.items() if k != "resourceVersion"})


def wait_all_synced(reflectors: Any, timeout: float) -> bool:
    """True when every reflector listed once within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    return all(r.wait_synced(max(0.0, deadline - time.monotonic())) for r in reflectors)


def resource_version(obj: Optional[Dict[str, Any]]) -> int:
    """An object's resourceVersion as a number, 0 when it has none. The API calls it opaque, but
    an API server on etcd 3 hands out etcd's revision and compares it as a number itself
    (k8s.io/apiserver/pkg/storage/etcd3/api_object_versioner.go, ParseResourceVersion)."""
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


Change = Tuple[Optional[Dict[str, Any]], Optional[Dict[str, Any]]]  # (before, after); None: absent


class NewestObjects:
    """Objects by name, each the newest version seen through the watch or written by this process.

    Why: a replica answers from its own write at once (read-your-writes), and a watch event older
    than that write, still on its way, must not undo it; nor may an event from before this
    process deleted an object bring it back. Not locked: the owner holds its own lock around
    each call and the index it derives from the changes returned.
    """

    def __init__(self) -> None:
        self.objects: Dict[str, Dict[str, Any]] = {}
        self._gone: Dict[str, int] = {}  # name -> version this process deleted, until the watch passes it

    def _newest(self, name: str) -> int:
        obj = self.objects.get(name)
        return resource_version(obj) if obj is not None else self._gone.get(name, 0)

    def put(self, obj: Dict[str, Any], deleted: bool = False) -> Optional[Change]:
        """Take ``obj`` (``deleted``: its removal) unless this version is not newer than the one
        here; returns (before, after), or None when nothing changed."""
        meta = obj["metadata"]
        name, version = meta["name"], resource_version(obj)
        if version and version <= self._newest(name):
            return None
        if "managedFields" in meta:  # who wrote which field when: most of a small object, never read
            obj = dict(obj, metadata={k: v for k, v in meta.items() if k != "managedFields"})
        before = self.objects.get(name)
        if deleted:
            self.objects.pop(name, None)
            self._gone[name] = version
            return (before, None) if before is not None else None
        self._gone.pop(name, None)
        self.objects[name] = obj
        return before, obj

    def event(self, kind: str, obj: Dict[str, Any]) -> Optional[Change]:
        """A watch event: the watch is ordered, so deletions it has passed need no guard any more."""
        version = resource_version(obj)
        if self._gone and version:
            self._gone = {n: v for n, v in self._gone.items() if v > version}
        return self.put(obj, deleted=kind == "DELETED")

    def resync(self, listed: List[Dict[str, Any]], list_version: str) -> None:
        """A re-list: what it holds, except this process's writes made after the list was read."""
        at = resource_version({"metadata": {"resourceVersion": list_version}})
        fresh = {obj["metadata"]["name"]: obj for obj in listed}
        merged = {n: o for n, o in self.objects.items() if n not in fresh and at and resource_version(o) > at}
        for name, obj in fresh.items():
            mine = self._newest(name)
            if not (at and mine > resource_version(obj)):
                merged[name] = obj
            elif name in self.objects:
                merged[name] = self.objects[name]
        self.objects = merged
        self._gone = {n: v for n, v in self._gone.items() if at and v > at and n not in merged}


class Follower:
    """Objects of one kind in one namespace, selected by label, followed by a Reflector into the
    owner's own index (``_event``); without ``watch`` (one-shot tools) ``reflector`` is None and
    the owner reads the API each time."""

    reflector: Optional[Reflector] = None

    def _follow(self, client: KubeClient, resource: Resource, namespace: str, selector: str, watch: bool) -> None:
        if watch:
            self.reflector = Reflector(client, resource, label_selector=selector, namespace=namespace,
                                       on_event=self._event, keep_objects=False).start()

    def _event(self, kind: str, obj: Dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self.reflector is not None:
            self.reflector.stop()

    def wait_synced(self, timeout: float) -> bool:
        """True once the first list is in memory (at once without a watch)."""
        return self.reflector is None or self.reflector.wait_synced(timeout)


class KubeForbidden(KubeRefused):
    """403: the server's account lacks a permission (RBAC); the message names it and the fix."""


@contextlib.contextmanager
def permission(verb: str, resource: Resource, namespace: str) -> Iterator[None]:
    """Turns a 403 into a message naming the verb, the resource and deploy/rbac.yaml."""
    try:
        yield
    except KubeError as exc:
        if exc.status != 403 or isinstance(exc, KubeForbidden):
            raise
        where = f"{resource.plural}.{resource.group or 'core'} in namespace {namespace}"
        raise KubeForbidden(403, exc.reason, f"node-config-server may not {verb} {where} ({exc.message}); "
                            f"apply deploy/rbac.yaml and bind its Role to the server's account",
                            f"{verb} {where}") from None
