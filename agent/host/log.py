"""Logging for node-agent: journald's native protocol when it is there, stderr otherwise.

Under systemd every record goes to journald as one datagram of fields, so an operator can
filter on the stage of the run (``journalctl NODE_AGENT_STAGE=fetch``), its run id, pool or
config, and ``journalctl -p warning`` works from real syslog priorities. Without journald (a
container, a terminal, a test) records go to stderr as ``level: message`` (the level word in
colour on a terminal, unless ``NO_COLOR`` is set), or with an sd-daemon ``<N>`` prefix when
stderr is systemd's journal stream (``$JOURNAL_STREAM`` names it, as sd_journal_stream_fd(3)
says; systemd's stream reader turns the prefix into the priority). A pipe to another program
gets the plain form.

Every record of a run carries the structured fields of ``RUN_FIELDS`` that are known (an
unknown one is left out, not sent empty), from a process-wide run context (``set_context`` / ``log_context``) plus any
``extra={"NODE_AGENT_...": value}`` of the record itself. The context is process-wide on
purpose: one process is one run, and worker threads must log with the run's fields too.

Logging must never stop the agent: when the journal socket goes away or refuses a record, that
record is written to stderr instead.

Large records: a record too big for one datagram (EMSGSIZE/ENOBUFS) is written to a sealed
memfd (an unlinked temporary file where memfd is unavailable) whose descriptor is passed over
the socket with SCM_RIGHTS, exactly as sd_journal_send() does; journald reads it from there.
Nothing is truncated.
"""

import array
import contextlib
import errno
import logging
import os
import re
import socket
import struct
import sys
import tempfile
import threading
import traceback
import uuid
from typing import Dict, Iterator, List, Optional, Tuple

JOURNAL_SOCKET = "/run/systemd/journal/socket"
SOCKET_ENV = "NODE_AGENT_JOURNAL_SOCKET"  # overrides JOURNAL_SOCKET (tests, containers)
IDENTIFIER = "node-agent"
SEND_TIMEOUT = 2.0  # seconds
FIELD_PREFIX = "NODE_AGENT_"
RUN_FIELDS = (
    "NODE_AGENT_STAGE",
    "NODE_AGENT_POOL",
    "NODE_AGENT_CONFIG",
    "NODE_AGENT_ATTEMPT",
    "NODE_AGENT_RUN",
    "NODE_AGENT_COMMAND",
)

PROGRESS = "node_agent_progress"  # extra={PROGRESS: True}: a stage started/ended (ProgressHandler)

_FIELD_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")  # journald's rule for user field names

_context: Dict[str, str] = {}
_context_lock = threading.Lock()


# ---------------------------------------------------------------------------- run context

def _field_name(key: str) -> str:
    name = key if key.startswith(FIELD_PREFIX) else FIELD_PREFIX + key
    return re.sub(r"[^A-Z0-9_]", "_", name.upper())[:64]


def _value(value: object) -> str:
    return "" if value is None else str(value)


def set_context(**fields: object) -> None:
    """Set run fields for every later record: ``set_context(pool="worker", attempt=2)``.

    Keys may be given with or without the ``NODE_AGENT_`` prefix, in any case; ``None`` clears
    a field.
    """
    with _context_lock:
        for key, value in fields.items():
            name = _field_name(key)
            if value is None:
                _context.pop(name, None)
            else:
                _context[name] = _value(value)


def get_context() -> Dict[str, str]:
    """A copy of the current run fields (only those that are set)."""
    with _context_lock:
        return dict(_context)


def clear_context() -> None:
    with _context_lock:
        _context.clear()


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Set run fields for the records logged inside the block, restoring the old values after."""
    names = {_field_name(k): v for k, v in fields.items()}
    with _context_lock:
        saved = {name: _context.get(name) for name in names}
    set_context(**names)
    try:
        yield
    finally:
        set_context(**saved)


def _record_fields(record: logging.LogRecord) -> Dict[str, str]:
    """Run fields for one record: the context, then extra; fields with no value are left out."""
    fields = get_context()
    for key, value in record.__dict__.items():
        if key.startswith(FIELD_PREFIX):
            fields[_field_name(key)] = _value(value)
    return {name: value for name, value in fields.items() if value != ""}


# ---------------------------------------------------------------------------- priorities

def syslog_priority(levelno: int) -> int:
    """Python level -> syslog priority (journald's PRIORITY=): crit, err, warning, info, debug."""
    for level, prio in ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6)):
        if levelno >= level:
            return prio
    return 7


def _message(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info:
        text += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
    elif record.exc_text:
        text += "\n" + record.exc_text
    if record.stack_info:
        text += "\n" + record.stack_info
    return text


# ---------------------------------------------------------------------------- native protocol

def encode_field(name: str, value: str) -> bytes:
    """One field of journald's native protocol.

    ``NAME=value\\n`` when the value has no newline; otherwise the binary form
    ``NAME\\n<little-endian 64-bit length><bytes>\\n``.
    """
    data = value.encode("utf-8", "replace")
    key = name.encode("ascii")
    if b"\n" in data:
        return key + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
    return key + b"=" + data + b"\n"


def encode_entry(fields: List[Tuple[str, str]]) -> bytes:
    return b"".join(encode_field(name, value) for name, value in fields)


def journal_fields(record: logging.LogRecord, identifier: str = IDENTIFIER) -> List[Tuple[str, str]]:
    """The fields of one journal entry for ``record``, in order."""
    out = [
        ("MESSAGE", _message(record)),
        ("PRIORITY", str(syslog_priority(record.levelno))),
        ("SYSLOG_IDENTIFIER", identifier),
        ("CODE_FILE", record.pathname or ""),
        ("CODE_LINE", str(record.lineno)),
        ("CODE_FUNC", record.funcName or ""),
        ("LOGGER", record.name),
    ]
    if record.threadName and record.threadName != "MainThread":
        out.append(("THREAD_NAME", record.threadName))
    for name, value in _record_fields(record).items():
        if _FIELD_NAME.match(name):
            out.append((name, value))
    return out


def _memfd_with(data: bytes) -> int:
    """A sealed memfd (or an unlinked temporary file) holding ``data``; the caller closes it."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        try:
            fd = memfd_create("journal-data", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                _write_all(fd, data)
                _seal(fd)
                return fd
            except OSError:
                os.close(fd)
                raise
    tmp = tempfile.TemporaryFile(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        fd = os.dup(tmp.fileno())
    finally:
        tmp.close()
    try:
        _write_all(fd, data)
    except OSError:
        os.close(fd)
        raise
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _seal(fd: int) -> None:
    import fcntl

    seals = 0
    for name in ("F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE", "F_SEAL_SEAL"):
        seals |= getattr(fcntl, name, 0)
    add_seals = getattr(fcntl, "F_ADD_SEALS", None)
    if add_seals is not None and seals:
        fcntl.fcntl(fd, add_seals, seals)


class JournalHandler(logging.Handler):
    """Sends each record to journald over its native protocol socket (AF_UNIX, SOCK_DGRAM)."""

    def __init__(self, socket_path: str = JOURNAL_SOCKET, identifier: str = IDENTIFIER,
                 fallback: Optional[logging.Handler] = None):
        super().__init__()
        self.socket_path = socket_path
        self.identifier = identifier
        self.fallback = fallback if fallback is not None else StderrHandler()
        self._sock: Optional[socket.socket] = None

    def _socket(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            # A stuck journald must not hang the agent: after this the record goes to stderr.
            self._sock.settimeout(SEND_TIMEOUT)
        return self._sock

    def send(self, data: bytes) -> None:
        sock = self._socket()
        try:
            sock.sendto(data, self.socket_path)
            return
        except OSError as exc:
            if exc.errno not in (errno.EMSGSIZE, errno.ENOBUFS):
                raise
        fd = _memfd_with(data)
        try:
            sock.sendmsg([], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))],
                          0, self.socket_path)
        finally:
            os.close(fd)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.send(encode_entry(journal_fields(record, self.identifier)))
        except Exception:  # journald gone, full or refusing: the record must still be seen
            self.fallback.handle(record)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        super().close()


# ---------------------------------------------------------------------------- stderr

_LEVEL_WORDS = {2: "critical", 3: "error", 4: "warning", 6: "info", 7: "debug"}
_COLOURS = {"critical": "1;31", "error": "1;31", "warning": "1;33"}  # bold red, bold yellow


def stderr_is_journal(stream=None) -> bool:
    """Whether ``stream`` (stderr) is the journal stream systemd connected ($JOURNAL_STREAM=dev:ino)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep:
        return False
    try:
        st = os.fstat((stream if stream is not None else sys.stderr).fileno())
        return (st.st_dev, st.st_ino) == (int(dev), int(ino))
    except (AttributeError, ValueError, OSError):
        return False


class StderrHandler(logging.Handler):
    """``level: message`` lines; ``<N>message`` (sd-daemon prefix on every line) into the journal.

    ``tty`` and ``journal`` override what is detected from the stream (tests).
    """

    def __init__(self, stream=None, tty: Optional[bool] = None, journal: Optional[bool] = None):
        super().__init__()
        self._stream = stream
        self._tty = tty
        self._journal = journal

    @property
    def stream(self):
        return self._stream if self._stream is not None else sys.stderr

    def _is_tty(self) -> bool:
        if self._tty is not None:
            return self._tty
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    def _is_journal(self) -> bool:
        if self._journal is not None:
            return self._journal
        return stderr_is_journal(self.stream)

    def format_text(self, level: str, text: str) -> str:
        """``text`` at ``level`` (a word of _LEVEL_WORDS) as this stream wants it."""
        prio = next((p for p, word in _LEVEL_WORDS.items() if word == level), 6)
        if self._is_journal():
            # systemd parses the prefix per line, so a traceback keeps its priority throughout.
            return "".join(f"<{prio}>{line}\n" for line in text.split("\n"))
        word = f"{level}:"
        if level in _COLOURS and self._is_tty() and not os.environ.get("NO_COLOR"):
            word = f"\033[{_COLOURS[level]}m{word}\033[0m"
        return f"{word} {text}\n"

    def format_record(self, record: logging.LogRecord) -> str:
        return self.format_text(_LEVEL_WORDS[syslog_priority(record.levelno)], _message(record))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = self.stream
            stream.write(self.format_record(record))
            stream.flush()
        except Exception:  # a closed stderr must not end the run either
            pass


class ProgressHandler(StderrHandler):
    """Progress records on a terminal while the log goes to the journal (a person running
    ``firstboot`` by hand saw nothing until the end); the final error is the command line's."""

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(getattr(record, PROGRESS, False) or hasattr(record, FIELD_PREFIX + "DELAY"))


def wants_progress(stream=None) -> bool:
    """Whether ``stream`` (stderr) is a terminal that is not the journal."""
    try:
        return bool((stream or sys.stderr).isatty()) and not stderr_is_journal(stream)
    except (AttributeError, ValueError):
        return False


# ---------------------------------------------------------------------------- set-up

def journal_socket_path(socket_path: Optional[str] = None) -> str:
    return socket_path or os.environ.get(SOCKET_ENV) or JOURNAL_SOCKET


def _is_socket(path: str) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def stderr_sees_the_log() -> bool:
    """Whether what node-agent logs already shows on stderr (or stderr is the journal itself).

    When it does not (a person runs ``node-agent firstboot`` in a terminal on a systemd host: the
    log goes to the journal), the final error must still be printed there, once.
    """
    for handler in logging.getLogger().handlers:
        if getattr(handler, "_node_agent", False):
            return isinstance(handler, StderrHandler) or stderr_is_journal()
    return False


def new_run_id() -> str:
    return uuid.uuid4().hex


def setup_logging(command: str, verbose: bool = False, socket_path: Optional[str] = None,
                  stream=None, run_id: Optional[str] = None) -> logging.Handler:
    """Install node-agent's handler on the root logger and start a run context (and, when the
    log goes to the journal and stderr is a terminal, a ProgressHandler for progress lines).

    ``command`` is the subcommand (``firstboot``, ``update``...). Sets NODE_AGENT_COMMAND and a
    fresh NODE_AGENT_RUN (or ``run_id``). Calling it again replaces the handler it installed
    before. Returns the installed handler.
    """
    path = journal_socket_path(socket_path)
    fallback = StderrHandler(stream)
    handler: logging.Handler = JournalHandler(path, fallback=fallback) if _is_socket(path) else fallback
    handler._node_agent = True  # type: ignore[attr-defined]

    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_node_agent", False) or getattr(old, "_node_agent_progress", False):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    if isinstance(handler, JournalHandler) and wants_progress(stream):
        progress = ProgressHandler(stream)
        progress._node_agent_progress = True  # type: ignore[attr-defined]
        root.addHandler(progress)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)

    clear_context()
    set_context(NODE_AGENT_COMMAND=command, NODE_AGENT_RUN=run_id or new_run_id())
    return handler
