"""fetch.totalTimeout is a hard deadline: a body that never ends is cut off at the budget."""

import socket
import threading

import pytest

from agent.core.settings import FetchSettings, Settings
from agent.errors import FetchError
from agent.resource.fetch import Fetcher


class EndlessBody:
    """A loopback server that sends headers promising 1 GB, then one byte every 50 ms, forever."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.sock.close()
        self.thread.join(10)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/config/worker"

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn):
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
                while not self.stop.wait(0.05):
                    conn.sendall(b"x")
            except OSError:
                return


def test_a_never_ending_body_ends_at_the_total_timeout():
    settings = Settings(node_name="n1", fetch=FetchSettings(total_timeout=1.5, attempt_timeout=1.0))
    result = {}

    def run():
        try:
            Fetcher(settings, jitter=0.0).fetch(srv.url)
        except FetchError as exc:
            result["error"] = exc

    with EndlessBody() as srv:
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(60)  # a hang bound, not a speed assertion: the budget is 1.5 s
        assert not t.is_alive(), "the fetch outlived its budget"
    err = result.get("error")
    assert err is not None and "did not finish within the fetch budget" in str(err), err
    assert err.final is False


@pytest.mark.parametrize("total", [0.0])
def test_no_budget_means_no_watchdog(total):
    from agent.resource.transport import Watchdog as _Watchdog

    with _Watchdog(object(), None) as w:
        pass
    assert not w.fired
