"""agent.host.log against a real AF_UNIX datagram socket standing in for journald."""

import array
import io
import logging
import os
import socket
import struct
from typing import Dict, List, Tuple

import pytest

from agent.host import log


def parse_native(data: bytes) -> List[Tuple[str, str]]:
    """Parse journald's native protocol: ``KEY=value\\n`` and ``KEY\\n<le64><data>\\n``."""
    fields = []
    pos = 0
    while pos < len(data):
        nl = data.index(b"\n", pos)
        line = data[pos:nl]
        if b"=" in line:
            key, _, value = line.partition(b"=")
            fields.append((key.decode("ascii"), value.decode("utf-8")))
            pos = nl + 1
        else:
            (size,) = struct.unpack("<Q", data[nl + 1:nl + 9])
            value = data[nl + 9:nl + 9 + size]
            assert data[nl + 9 + size:nl + 10 + size] == b"\n", "binary field not newline-terminated"
            fields.append((line.decode("ascii"), value.decode("utf-8")))
            pos = nl + 10 + size
    return fields


class FakeJournal:
    def __init__(self, path: str):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(5)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.raw: List[bytes] = []
        self.passed_fd = False

    def recv(self) -> Dict[str, str]:
        fds = array.array("i")
        data, ancdata, _flags, _addr = self.sock.recvmsg(1 << 20, socket.CMSG_SPACE(fds.itemsize))
        for level, kind, cdata in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(cdata[:len(cdata) - len(cdata) % fds.itemsize])
        if fds:
            assert data == b"", "a datagram passing an fd carries no payload"
            self.passed_fd = True
            fd = fds[0]
            try:
                os.lseek(fd, 0, os.SEEK_SET)
                chunks = []
                while True:
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        break
                    chunks.append(chunk)
                data = b"".join(chunks)
            finally:
                os.close(fd)
        self.raw.append(data)
        fields = parse_native(data)
        names = [k for k, _ in fields]
        assert len(names) == len(set(names)), f"duplicate fields in {names}"
        return dict(fields)

    def close(self):
        self.sock.close()


@pytest.fixture
def journal(tmp_path):
    j = FakeJournal(str(tmp_path / "socket"))
    yield j
    j.close()


@pytest.fixture
def logging_reset():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield
    for h in list(root.handlers):
        if getattr(h, "_node_agent", False):
            root.removeHandler(h)
            h.close()
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    log.clear_context()


def test_records_reach_the_journal_with_priority_code_and_run_fields(journal, logging_reset):
    handler = log.setup_logging("firstboot", socket_path=journal.path)
    assert isinstance(handler, log.JournalHandler)
    run_id = log.get_context()["NODE_AGENT_RUN"]
    logger = logging.getLogger("agent.test")

    logger.error("fetch failed: %s", "boom")
    entry = journal.recv()
    assert entry["MESSAGE"] == "fetch failed: boom"
    assert entry["PRIORITY"] == "3"
    assert entry["SYSLOG_IDENTIFIER"] == "node-agent"
    assert entry["CODE_FILE"] == __file__
    assert entry["CODE_FUNC"] == "test_records_reach_the_journal_with_priority_code_and_run_fields"
    assert int(entry["CODE_LINE"]) > 0
    assert entry["NODE_AGENT_COMMAND"] == "firstboot"
    assert entry["NODE_AGENT_RUN"] == run_id and len(run_id) == 32
    # a run field not known yet is left out, not sent empty (journalctl -o verbose stays readable)
    for name in ("NODE_AGENT_STAGE", "NODE_AGENT_POOL", "NODE_AGENT_CONFIG", "NODE_AGENT_ATTEMPT"):
        assert name not in entry
    assert not [k for k, v in entry.items() if k.startswith("NODE_AGENT_") and v == ""]

    logger.warning("w")
    logger.info("i")
    assert journal.recv()["PRIORITY"] == "4"
    assert journal.recv()["PRIORITY"] == "6"


def test_debug_only_when_verbose(journal, logging_reset):
    log.setup_logging("update", verbose=False, socket_path=journal.path)
    logger = logging.getLogger("agent.test")
    logger.debug("hidden")
    logger.info("shown")
    assert journal.recv()["MESSAGE"] == "shown"

    log.setup_logging("update", verbose=True, socket_path=journal.path)
    logger.debug("now shown")
    entry = journal.recv()
    assert (entry["MESSAGE"], entry["PRIORITY"]) == ("now shown", "7")


def test_context_and_extra_fields(journal, logging_reset):
    log.setup_logging("firstboot", socket_path=journal.path)
    log.set_context(pool="infra", NODE_AGENT_CONFIG="rendered-infra-1")
    logger = logging.getLogger("agent.test")
    with log.log_context(NODE_AGENT_STAGE="fetch"):
        logger.info("attempt", extra={"NODE_AGENT_ATTEMPT": 3, "not_ours": "x"})
        with log.log_context(stage="apply"):
            logger.info("inner")
        logger.info("back")
    logger.info("after")

    first, inner, back, after = (journal.recv() for _ in range(4))
    assert first["NODE_AGENT_STAGE"] == "fetch"
    assert first["NODE_AGENT_ATTEMPT"] == "3"
    assert first["NODE_AGENT_POOL"] == "infra"
    assert first["NODE_AGENT_CONFIG"] == "rendered-infra-1"
    assert "NOT_OURS" not in first and "not_ours" not in first
    assert inner["NODE_AGENT_STAGE"] == "apply"
    assert back["NODE_AGENT_STAGE"] == "fetch"
    assert "NODE_AGENT_ATTEMPT" not in back  # extra is per record only
    assert "NODE_AGENT_STAGE" not in after
    assert after["NODE_AGENT_POOL"] == "infra"


def test_multiline_values_use_the_binary_form(journal, logging_reset):
    log.setup_logging("firstboot", socket_path=journal.path)
    try:
        raise ValueError("bad value")
    except ValueError:
        logging.getLogger("agent.test").exception("apply failed")
    entry = journal.recv()
    raw = journal.raw[-1]
    assert raw.startswith(b"MESSAGE\n"), "a message with newlines must use the length-prefixed form"
    assert entry["MESSAGE"].startswith("apply failed\nTraceback (most recent call last):")
    assert entry["MESSAGE"].rstrip().endswith("ValueError: bad value")
    assert entry["PRIORITY"] == "3"


def test_encode_field_forms():
    assert log.encode_field("A", "x=y") == b"A=x=y\n"
    assert log.encode_field("A", "a\nb") == b"A\n" + struct.pack("<Q", 3) + b"a\nb\n"
    assert parse_native(log.encode_field("A", "é\n")) == [("A", "é\n")]


def test_oversized_record_is_passed_as_a_file_descriptor(journal, logging_reset):
    log.setup_logging("firstboot", socket_path=journal.path)
    big = "x" * (1 << 20)  # far above any AF_UNIX datagram limit
    logging.getLogger("agent.test").warning("%s", big)
    entry = journal.recv()
    assert journal.passed_fd
    assert entry["MESSAGE"] == big
    assert entry["PRIORITY"] == "4"


def test_journal_gone_falls_back_to_stderr(journal, logging_reset):
    stream = io.StringIO()
    log.setup_logging("firstboot", socket_path=journal.path, stream=stream)
    journal.close()
    os.unlink(journal.path)
    logging.getLogger("agent.test").error("still visible")
    assert stream.getvalue() == "error: still visible\n"


def test_no_socket_and_a_pipe_means_plain_level_words(tmp_path, logging_reset):
    stream = io.StringIO()
    handler = log.setup_logging("update", socket_path=str(tmp_path / "absent"), stream=stream)
    assert isinstance(handler, log.StderrHandler)
    logger = logging.getLogger("agent.test")
    logger.warning("careful")
    logger.info("two\nlines")
    assert stream.getvalue() == "warning: careful\ninfo: two\nlines\n"


def test_stderr_that_is_the_journal_stream_gets_sd_daemon_prefixes(tmp_path, logging_reset, monkeypatch):
    # systemd sets JOURNAL_STREAM=<dev>:<inode> of the stream it connected (sd_journal_stream_fd(3))
    with open(tmp_path / "stream", "w+") as stream:
        st = os.fstat(stream.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        handler = log.StderrHandler(stream)
        assert log.stderr_is_journal(stream)
        stream.write(handler.format_text("warning", "careful\ntwo lines"))
        stream.seek(0)
        assert stream.read() == "<4>careful\n<4>two lines\n"
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")  # another stream
        assert not log.stderr_is_journal(stream)


def test_socket_path_from_environment(journal, logging_reset, monkeypatch):
    monkeypatch.setenv(log.SOCKET_ENV, journal.path)
    assert isinstance(log.setup_logging("update"), log.JournalHandler)
    logging.getLogger("agent.test").info("via env")
    assert journal.recv()["MESSAGE"] == "via env"


def test_a_regular_file_at_the_socket_path_is_not_used(tmp_path, logging_reset):
    path = tmp_path / "socket"
    path.write_text("")
    assert isinstance(log.setup_logging("update", socket_path=str(path), stream=io.StringIO()),
                      log.StderrHandler)


def test_terminal_gets_coloured_level_words_unless_no_color(logging_reset, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert log.StderrHandler(io.StringIO(), tty=True).format_text("error", "x") == "\033[1;31merror:\033[0m x\n"
    assert log.StderrHandler(io.StringIO(), tty=False).format_text("error", "x") == "error: x\n"
    monkeypatch.setenv("NO_COLOR", "1")
    stream = io.StringIO()
    handler = log.StderrHandler(stream, tty=True)
    logger = logging.getLogger("agent.test.tty")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error("no server")
        logger.warning("skew")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    assert stream.getvalue() == "error: no server\nwarning: skew\n"


def test_setup_replaces_its_own_handler_only(journal, logging_reset):
    other = logging.NullHandler()
    logging.getLogger().addHandler(other)
    log.setup_logging("a", socket_path=journal.path)
    log.setup_logging("b", socket_path=journal.path)
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_node_agent", False)]
    assert len(ours) == 1
    assert other in logging.getLogger().handlers
    logging.getLogger().removeHandler(other)
    logging.getLogger("agent.test").info("once")
    assert journal.recv()["NODE_AGENT_COMMAND"] == "b"


@pytest.mark.parametrize("level,prio", [(logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4),
                                         (logging.INFO, 6), (logging.DEBUG, 7), (5, 7)])
def test_syslog_priorities(level, prio):
    assert log.syslog_priority(level) == prio


# -- issue 31: progress on a terminal while the log goes to the journal ----------------------------------

def _progress_records():
    import tempfile

    from agent.host.root import Root
    from agent.node.status import RunRecorder  # logs "stage ... started/ok" as progress records

    fetch = logging.getLogger("agent.resource.fetch")
    with tempfile.TemporaryDirectory() as top:
        rec = RunRecorder(Root(top), "firstboot")
        with rec.stage("fetch"):
            fetch.warning("attempt 1 to fetch x failed: refused; retrying in 0.20s",
                          extra={"NODE_AGENT_ATTEMPT": 1, "NODE_AGENT_DELAY": 0.2})
            logging.getLogger("agent.test").info("a detail that stays in the journal")
        rec.finish("done", 0)


def test_a_terminal_gets_one_progress_line_per_stage_event_and_retry(journal, logging_reset):
    import pty

    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w")
    try:
        log.setup_logging("firstboot", socket_path=journal.path, stream=stream)
        assert any(isinstance(h, log.ProgressHandler) for h in logging.getLogger().handlers)
        _progress_records()
        stream.flush()
        out = b""
        while True:
            ready = __import__("select").select([master], [], [], 0.2)[0]
            if not ready:
                break
            out += os.read(master, 65536)
    finally:
        for h in list(logging.getLogger().handlers):
            if getattr(h, "_node_agent_progress", False):
                logging.getLogger().removeHandler(h)
        stream.close()
        os.close(master)
    lines = [x for x in out.decode().replace("\r", "").splitlines() if x]
    assert len(lines) == 3, lines
    assert lines[0].endswith("stage fetch started") and "attempt 1 to fetch x failed" in lines[1]
    assert "stage fetch ok in" in lines[2]
    assert "a detail" not in out.decode() and "firstboot done" not in out.decode()
    # the journal still gets everything, what the terminal leaves out too
    messages = [journal.recv()["MESSAGE"] for _ in range(5)]
    assert messages[:3] == ["stage fetch started", "attempt 1 to fetch x failed: refused; retrying in 0.20s",
                            "a detail that stays in the journal"], messages
    assert messages[3].startswith("stage fetch ok in ") and messages[4].startswith("firstboot done (exit 0)")


def test_no_progress_lines_when_stderr_is_not_a_terminal(journal, logging_reset, tmp_path):
    with open(tmp_path / "err", "w") as stream:
        log.setup_logging("firstboot", socket_path=journal.path, stream=stream)
        assert not any(isinstance(h, log.ProgressHandler) for h in logging.getLogger().handlers)
        _progress_records()
    assert (tmp_path / "err").read_text() == ""


def test_progress_handler_with_a_monkeypatched_isatty(journal, logging_reset, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(stream, "isatty", lambda: True, raising=False)
    log.setup_logging("update", socket_path=journal.path, stream=stream)
    try:
        _progress_records()
    finally:
        for h in list(logging.getLogger().handlers):
            if getattr(h, "_node_agent_progress", False):
                logging.getLogger().removeHandler(h)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].endswith("stage fetch started") and "attempt 1 to fetch x failed" in lines[1]
    assert "stage fetch ok in" in lines[2]
