"""The one polling helper of the tests: wait for something the system does on its own time.

A test that waits says what for (``what``), so a failure names the condition that never came
instead of a bare timeout; the value ``check`` returned is handed back, so a test asserts on
what it waited for, not on a second read that may differ.
"""

import time
from typing import Any, Optional

import pytest
import requests

ANSWER_TIMEOUT = 10.0  # one request's bound while a server starts


def wait_for(check, what: str, timeout: float = 60.0, interval: float = 0.1):
    """Call ``check()`` until it returns something true and return that; fail the test after
    ``timeout`` seconds, naming ``what`` and the last value seen. An exception in ``check``
    is not swallowed: it fails the test at once, as a wrong answer should."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f}s (last value: {value!r})")
        time.sleep(interval)


def healthz_answer(url: str, verify: Any = True) -> Optional[requests.Response]:
    """``GET url`` as a server that is starting gets it: None while nothing listens yet or while
    what listens does not answer (gunicorn binds its socket before its workers have imported the
    server; on a loaded machine that took longer than a 2 s read timeout, and the test failed), so
    that ``wait_for`` bounds the whole start, not one request."""
    try:
        return requests.get(url, verify=verify, timeout=ANSWER_TIMEOUT)
    except (requests.ConnectionError, requests.Timeout):
        return None


def healthz_ok(url: str, verify: Any = True) -> bool:
    """Whether a starting server answered ``GET url`` with 200 (healthz_answer)."""
    answer = healthz_answer(url, verify)
    return answer is not None and answer.status_code == 200
