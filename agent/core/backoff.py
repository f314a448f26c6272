"""Retry timing shared by everything that talks to the config server (pure, no sleeping here).

Ignition's schedule: first wait 200 ms, doubled after each failure, capped at 5 s, no attempt
limit. We add jitter (so a rack of nodes booting together does not hit the server in lock-step)
and a server's ``Retry-After``, which wins over the schedule but is capped so a misconfigured
server cannot park a node for hours.
"""

import datetime
import email.utils
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Tuple

# With a budget (fetch.totalTimeout), a wait that would end too near or past the deadline is cut
# so that one last attempt starts this long before it (at most the attempt timeout and a tenth of
# the budget), bounded by the time left: the budget is spent to its end, never overrun.
LAST_ATTEMPT_WINDOW = 1.0
MIN_ATTEMPT = 0.05  # seconds: with less left, no attempt can succeed; give up


@dataclass
class Backoff:
    initial: float = 0.2
    maximum: float = 5.0
    jitter: float = 0.1  # +/- this fraction of each delay; 0 gives Ignition's exact schedule
    max_retry_after: float = 60.0
    rng: random.Random = field(default_factory=random.Random)

    def base_delay(self, failures: int) -> float:
        """The un-jittered wait after ``failures`` consecutive failures (1 = after the first)."""
        if failures < 1:
            return 0.0
        # Stop doubling once past the cap: 2**n for large n would overflow a float eventually.
        delay = self.initial
        for _ in range(failures - 1):
            delay *= 2
            if delay >= self.maximum:
                break
        return min(delay, self.maximum)

    def delay(self, failures: int, retry_after: Optional[float] = None) -> float:
        """The wait before the next attempt; ``retry_after`` (seconds, from the server) wins."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after))
        base = self.base_delay(failures)
        if self.jitter <= 0:
            return base
        return base * self.rng.uniform(1 - self.jitter, 1 + self.jitter)


def fit_to_deadline(delay: float, left: float, budget: float, attempt_timeout: float) -> Tuple[float, bool]:
    """The wait before the next attempt with ``left`` seconds of the ``budget`` to go, and whether
    that attempt is the last: a ``delay`` ending within the last-attempt window (or past the
    deadline) is cut to the window's start."""
    window = min(LAST_ATTEMPT_WINDOW, attempt_timeout, budget / 10)
    if delay > left - window:
        return max(0.0, left - window), True
    return delay, False


def parse_retry_after(value: Optional[str], now: Callable[[], float] = time.time) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent/bad."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # "-0000" parses naive; HTTP dates are always GMT
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - now())
