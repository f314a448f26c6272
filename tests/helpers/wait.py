"""The one polling helper of the tests: wait for something the system does on its own time.

A test that waits says what for (``what``), so a failure names the condition that never came
instead of a bare timeout; the value ``check`` returned is handed back, so a test asserts on
what it waited for, not on a second read that may differ.
"""

import time

import pytest


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
