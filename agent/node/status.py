"""The record of a run (``status.json``): what ``node-agent status`` shows.

A RunRecorder times each stage of ``firstboot``/``update`` and rewrites the record atomically
(temp file, fsync, rename, fsync of the directory) after every change, so a crash or power
loss leaves the last known state: the stage that was running when it happened.

The latest run of any command is ``<state_dir>/status.json``; the latest run of each command is
also kept as ``<state_dir>/status-<command>.json`` so the first boot's record survives the
day-2 loop's runs. Schema (version 1) in docs/operations.md.
"""

import contextlib
import datetime
import json
import logging
import os
import time
from typing import Any, Callable, Dict, Iterator, Optional

from agent.errors import HostError
from agent.host import log
from agent.host.root import Root

logger = logging.getLogger(__name__)

SCHEMA = 1
STATE_DIR = "/var/lib/node-agent"
STATUS_FILE = "status.json"
RESULTS = ("running", "done", "failed", "degraded")
FINAL_RESULTS = ("done", "failed", "degraded")
STAGE_RESULTS = ("running", "ok", "failed", "skipped")

_UNSET: Any = object()
_PROGRESS = {log.PROGRESS: True}  # a progress line on a terminal (agent/host/log.py)
_claimed = set()  # run ids already used by a RunRecorder in this process


def utc_now() -> str:
    """RFC 3339 UTC timestamp with milliseconds, as Kubernetes writes them (``...Z``)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def status_path(state_dir: str = STATE_DIR, command: Optional[str] = None) -> str:
    """Config path (inside the root) of the status file, of the latest run or of ``command``'s."""
    name = STATUS_FILE if command is None else f"status-{command}.json"
    return state_dir.rstrip("/") + "/" + name


def write_json_atomic(root: Root, config_path: str, data: dict) -> None:
    """Write ``data`` as JSON so that readers see the old or the new file, never a mix."""
    from agent.host.files import atomic_write

    target = root.path(config_path)
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    atomic_write(target, (json.dumps(data, indent=2) + "\n").encode("utf-8"), mode=0o644)


class Stage:
    """Handle yielded by ``RunRecorder.stage``: mark the stage skipped or add a detail."""

    def __init__(self, record: Dict[str, Any]):
        self.record = record
        self._skipped = False

    def skip(self, detail: Optional[str] = None) -> None:
        self._skipped = True
        if detail is not None:
            self.record["detail"] = detail

    def note(self, detail: str) -> None:
        self.record["detail"] = detail


class _RetryWatcher(logging.Handler):
    """While a stage runs: each fetch retry the fetcher logs (a record with NODE_AGENT_ATTEMPT and
    NODE_AGENT_DELAY) goes into the stage's record as ``attempt`` (failed so far), ``nextRetryAt``
    and ``lastError``, so that ``node-agent status`` shows a retrying fetch as it goes."""

    def __init__(self, recorder: "RunRecorder", record: Dict[str, Any]):
        super().__init__(logging.DEBUG)
        self.recorder, self.record = recorder, record

    def emit(self, record: logging.LogRecord) -> None:
        attempt, delay = getattr(record, "NODE_AGENT_ATTEMPT", None), getattr(record, "NODE_AGENT_DELAY", None)
        if attempt is None or delay is None:
            return
        try:
            at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=float(delay))
            text = record.getMessage()
            error = text.partition(" failed: ")[2].rpartition("; retrying in ")[0] or text
            self.record.update(attempt=int(attempt), lastError=error,
                               nextRetryAt=at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z")
            self.recorder.persist()
        except (TypeError, ValueError) as exc:  # a delay or attempt that is no number: the fetch goes on
            # (persist() handles a disk that cannot take the record itself)
            logger.debug("the run record did not take the retry of %s: %s", record.getMessage()[:200], exc)


def hint_for_error(exc: Optional[BaseException], exit_code: int) -> str:
    """What to do about ``exc``: its own ``hint`` when it carries one, for a fetch that could not
    reach its server the server the pointer config names (host:port), else the exit code's."""
    from urllib.parse import urlsplit

    from agent.errors import EXIT_UNREACHABLE, FetchError, hint_for

    own = getattr(exc, "hint", None)
    if own:
        return str(own)
    url = getattr(exc, "url", None) if isinstance(exc, FetchError) else None
    if exit_code == EXIT_UNREACHABLE and url:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.hostname:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            return (f"check that {host}:{port} (from the pointer config's URL) resolves and is reachable, that "
                    "node-config-server runs there and that the pointer config's CA is its CA; "
                    "'journalctl NODE_AGENT_STAGE=fetch' shows each attempt")
    return hint_for(exit_code)


class RunRecorder:
    """Records one run of ``command`` into ``status.json`` under ``state_dir`` in ``root``.

    Usage::

        rec = RunRecorder(root, "firstboot")
        with rec.stage("fetch") as st:
            ...                     # an exception marks the stage failed and propagates
        rec.set(pool="worker", config="rendered-worker-1", reboot_pending=True)
        rec.finish("done", 0)

    Persisting is best effort for the run itself: when the state directory cannot be written
    (read-only tree, full disk) the run goes on and one warning says why.
    """

    def __init__(self, root: Root, command: str, state_dir: str = STATE_DIR,
                 run_id: Optional[str] = None, monotonic: Callable[[], float] = time.monotonic,
                 now: Callable[[], str] = utc_now, persist: bool = True):
        self.root = root
        self._persist = persist  # False for dry runs: they leave nothing on disk
        self.command = command
        self.state_dir = state_dir
        self._monotonic = monotonic
        self._now = now
        self._started = monotonic()
        self._warned = False
        if run_id is None:
            # The first record of a process takes the run id setup_logging() put on the log
            # context, so every journal entry of the run carries the status record's id; later
            # records (each pass of the day-2 loop) are runs of their own.
            current = log.get_context().get("NODE_AGENT_RUN")
            run_id = current if current and current not in _claimed else log.new_run_id()
        _claimed.add(run_id)
        log.set_context(NODE_AGENT_RUN=run_id, NODE_AGENT_COMMAND=command)
        self.data: Dict[str, Any] = {
            "schema": SCHEMA,
            "command": command,
            "runId": run_id,
            "startedAt": now(),
            "finishedAt": None,
            "result": "running",
            "exitCode": None,
            "stages": [],
            "pool": None,
            "config": None,
            "rebootPending": False,
            "error": None,
            "seconds": None,
            "pid": os.getpid(),
        }
        self.persist()

    @property
    def run_id(self) -> str:
        return self.data["runId"]

    @property
    def elapsed(self) -> float:
        """Seconds since the run started (the monotonic clock: what the server may subtract from
        its own to know when the run began, whatever the node's wall clock says)."""
        return self._monotonic() - self._started

    def persist(self) -> None:
        if not self._persist:
            return
        try:
            write_json_atomic(self.root, status_path(self.state_dir), self.data)
            write_json_atomic(self.root, status_path(self.state_dir, self.command), self.data)
        except (OSError, HostError) as exc:
            if not self._warned:
                self._warned = True
                logger.warning("cannot record the run status in %s: %s (the run goes on; "
                               "'node-agent status' will not show it)", self.state_dir, exc)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[Stage]:
        record: Dict[str, Any] = {"name": name, "startedAt": self._now(), "seconds": None,
                                  "result": "running", "detail": None}
        self.data["stages"].append(record)
        handle = Stage(record)
        start = self._monotonic()
        watcher = _RetryWatcher(self, record)
        agent_logger = logging.getLogger("agent")
        with log.log_context(NODE_AGENT_STAGE=name):
            self.persist()
            logger.info("stage %s started", name, extra=_PROGRESS)
            agent_logger.addHandler(watcher)
            try:
                yield handle
            except BaseException as exc:
                agent_logger.removeHandler(watcher)
                record["seconds"] = round(self._monotonic() - start, 3)
                record["result"] = "failed"
                if record["detail"] is None:
                    record["detail"] = str(exc) or type(exc).__name__
                self.persist()
                # The why goes out once, with what to do, when the run finishes (finish()).
                logger.info("stage %s failed after %.3fs", name, record["seconds"], extra=_PROGRESS)
                raise
            agent_logger.removeHandler(watcher)
            record["seconds"] = round(self._monotonic() - start, 3)
            record["result"] = "skipped" if handle._skipped else "ok"
            self.persist()
            suffix = f": {record['detail']}" if record["detail"] else ""
            logger.info("stage %s %s in %.3fs%s", name, record["result"], record["seconds"], suffix,
                        extra=_PROGRESS)

    def set(self, pool: Any = _UNSET, config: Any = _UNSET, reboot_pending: Any = _UNSET) -> None:
        """Record what the run learned; pool and config also go on every later log entry."""
        if pool is not _UNSET:
            self.data["pool"] = pool
            log.set_context(NODE_AGENT_POOL=pool)
        if config is not _UNSET:
            self.data["config"] = config
            log.set_context(NODE_AGENT_CONFIG=config)
        if reboot_pending is not _UNSET:
            self.data["rebootPending"] = bool(reboot_pending)
        self.persist()

    def finish(self, result: str, exit_code: int, error: Optional[str] = None,
               exc: Optional[BaseException] = None) -> None:
        """Record the end of the run and log it: the one entry that says why it failed, and what to do.

        ``exc``, the exception that ends the run, is marked ``reported`` so that the command line
        does not print it a second time.
        """
        if result not in FINAL_RESULTS:
            raise ValueError(f"finish(result={result!r}): must be one of {', '.join(FINAL_RESULTS)}")
        self.data.update(result=result, exitCode=int(exit_code), error=error,
                         finishedAt=self._now(), seconds=round(self._monotonic() - self._started, 3))
        self.persist()
        level = logging.INFO if result == "done" else logging.WARNING if result == "degraded" else logging.ERROR
        hint = hint_for_error(exc, exit_code) if result == "failed" else ""
        logger.log(level, "%s %s (exit %d) in %.3fs%s%s", self.command, result, exit_code,
                   self.data["seconds"], f": {error}" if error else "", f"\nwhat to do: {hint}" if hint else "")
        if exc is not None:
            try:
                exc.reported = True  # type: ignore[attr-defined]
            except AttributeError:
                pass


def read_status(root: Root, state_dir: str = STATE_DIR, command: Optional[str] = None) -> Optional[dict]:
    """The last run's record (of ``command``, when given), or None when there is none.

    Raises HostError, naming the file, when it exists but is not a status record.
    """
    config_path = status_path(state_dir, command)
    try:
        raw = root.read_bytes(config_path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HostError(f"cannot read {config_path}: {exc.strerror or exc}")
    where = root.path(config_path)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HostError(f"{where} is not valid JSON ({exc}); the next run rewrites it")
    if not isinstance(data, dict):
        raise HostError(f"{where}: $ must be an object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise HostError(f"{where}: $.schema is {data.get('schema')!r}, this node-agent reads schema {SCHEMA}")
    if data.get("result") not in RESULTS:
        raise HostError(f"{where}: $.result is {data.get('result')!r}, expected one of {', '.join(RESULTS)}")
    if not isinstance(data.get("stages", []), list):
        raise HostError(f"{where}: $.stages must be a list")
    return data
