"""A pool's maintenance window (ours; pure): when the server may newly target a node of the pool.

The MachineConfigPool annotation ``node-config-server.openshift.io/maintenance-window`` holds a
JSON object with the fields of rancher/system-upgrade-controller's ``spec.window`` (a Plan's
``TimeWindowSpec``; kured's ``--reboot-days``, ``--start-time``, ``--end-time``, ``--time-zone``)::

    {"days": ["saturday", "sunday"], "startTime": "22:00", "endTime": "04:00", "timeZone": "Europe/Berlin"}

- ``days``: the days a window *starts* on: ``monday`` .. ``sunday`` (or ``mon`` .. ``sun``, ``mo``
  .. ``su``, ``0`` (Sunday) .. ``6``, as system-upgrade-controller's ``Day``), a list or one
  comma-separated string; at least one;
- ``startTime``, ``endTime``: ``HH:MM`` (24-hour) local times; the window is ``[start, end)``. An
  end at or before the start crosses midnight: ``22:00`` to ``04:00`` on Saturday is Saturday
  22:00 to Sunday 04:00 (an end equal to the start: 24 hours);
- ``timeZone``: an IANA name (``Europe/Berlin``, ``America/New_York``); default ``UTC``. The times
  are wall-clock times there; one the clocks skip (a daylight-saving gap) is read with the offset
  before the change, as Python's ``fold=0`` reads it (02:30 in a gap from 02:00 to 03:00 is 03:30),
  and a window that this leaves empty on that one day does not open that day.

Outside the window the pool's step holds (agent/server/cluster/rolloutctl.py): nobody is newly
targeted, a node already targeted finishes. An annotation that does not parse holds the pool too
(fail closed: a typo never lets a rollout run at any hour), and the pool says what is wrong.
``parse`` terminates on any input (the text is bounded before it is read).
"""

import datetime
import json
import re
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterator, Mapping, Optional, Tuple

from agent.core.rolloutpolicy import PREFIX, pool_annotations

ANNOTATION = PREFIX + "maintenance-window"
MAX_TEXT = 1000  # characters: a window is a few dozen
FIELDS = ("days", "startTime", "endTime", "timeZone")
DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")  # date.weekday()
_DAYS = {**{n: i for i, n in enumerate(DAY_NAMES)}, **{n[:3]: i for i, n in enumerate(DAY_NAMES)},
         **{n[:2]: i for i, n in enumerate(DAY_NAMES)}, **{str((i + 1) % 7): i for i in range(7)}}
_TIME = re.compile(r"([01]?[0-9]|2[0-3]):([0-5][0-9])")
_ZONE = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
EXAMPLE = '{"days": ["saturday", "sunday"], "startTime": "22:00", "endTime": "04:00", "timeZone": "Europe/Berlin"}'


class WindowInvalid(ValueError):
    """The annotation does not parse; the message names the annotation, the field and what to give."""


@dataclass(frozen=True)
class Window:
    days: FrozenSet[int]  # date.weekday(): Monday 0 .. Sunday 6, the days a window starts on
    start: int  # minutes after local midnight
    end: int
    zone: str  # IANA name

    def describe(self) -> str:
        """``saturday, sunday 22:00-04:00 Europe/Berlin``."""
        days = ", ".join(DAY_NAMES[d] for d in sorted(self.days))
        return f"{days} {_hhmm(self.start)}-{_hhmm(self.end)} {self.zone}"


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _bad(field: str, what: str) -> WindowInvalid:
    where = f"field {field}: " if field else ""
    return WindowInvalid(f"annotation {ANNOTATION}: {where}{what}; e.g. {EXAMPLE} (docs/rollout.md, "
                         f"\"Maintenance windows\")")


def _zone(name: str) -> Any:
    """The ZoneInfo of ``name``; WindowInvalid when it is no IANA name this server knows."""
    from zoneinfo import ZoneInfo

    if not _ZONE.fullmatch(name) or len(name) > 64:
        raise _bad("timeZone", f"{name[:80]!r} is not an IANA time zone name: give one such as Europe/Berlin or UTC")
    try:
        return ZoneInfo(name)
    except Exception as exc:  # noqa: BLE001 - not found, a directory, not a TZif file: all "unknown"
        raise _bad("timeZone", f"{name!r} is not a time zone this server knows ({type(exc).__name__}): give an IANA "
                               f"name such as Europe/Berlin (the server reads the system's tz database, tzdata)")


def _days(value: Any) -> FrozenSet[int]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise _bad("days", f"{str(value)[:80]!r} is not a list of days: give at least one of monday .. sunday")
    out = set()
    for item in items:
        key = item.strip().lower() if isinstance(item, str) else None
        if key not in _DAYS:
            raise _bad("days", f"{str(item)[:40]!r} is not a day: give monday .. sunday (or mon .. sun)")
        out.add(_DAYS[key])
    return frozenset(out)


def _minutes(field: str, value: Any) -> int:
    m = _TIME.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise _bad(field, f"{str(value)[:40]!r} is not a time: give HH:MM, 00:00 to 23:59")
    return int(m.group(1)) * 60 + int(m.group(2))


def parse(value: Any) -> Window:
    """The window of an annotation value: JSON text (an annotation's) or a mapping (a state
    directory's YAML may give one). WindowInvalid saying what is wrong."""
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise _bad("", f"the value is {len(value)} characters long: a window is a JSON object of a few dozen")
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise _bad("", "the value is not JSON: give a JSON object with days, startTime, endTime and timeZone")
    if not isinstance(value, Mapping):
        raise _bad("", "the value is not a JSON object: give one with days, startTime, endTime and timeZone")
    unknown = sorted(str(k)[:40] for k in value if k not in FIELDS)
    if unknown:
        raise _bad(unknown[0], f"unknown: give only {', '.join(FIELDS)}")
    for field in FIELDS[:3]:
        if field not in value:
            raise _bad(field, "missing: days, startTime and endTime are required (timeZone defaults to UTC)")
    zone = value.get("timeZone", "UTC")
    if not isinstance(zone, str):
        raise _bad("timeZone", f"{str(zone)[:40]!r} is not a time zone name: give one such as Europe/Berlin")
    window = Window(_days(value["days"]), _minutes("startTime", value["startTime"]),
                    _minutes("endTime", value["endTime"]), zone.strip())
    _zone(window.zone)
    return window


def window_of(pool: Mapping[str, Any]) -> Tuple[Optional[Window], str]:
    """(the pool's window or None, why its annotation is invalid or "")."""
    ann = pool_annotations(pool)
    if ann.get(ANNOTATION) is None:
        return None, ""
    try:
        return parse(ann[ANNOTATION]), ""
    except WindowInvalid as exc:
        return None, str(exc)


def _intervals(window: Window, now: float, first: int, last: int) -> Iterator[Tuple[float, float]]:
    """The windows starting on the local days ``first`` .. ``last`` days from ``now``'s, as epoch
    (start, end): wall-clock times in the zone (a time in a gap or a fold: zoneinfo's fold 0)."""
    zone = _zone(window.zone)
    today = datetime.datetime.fromtimestamp(now, zone).date()
    length = (window.end - window.start) % (24 * 60) or 24 * 60
    for offset in range(first, last + 1):
        day = today + datetime.timedelta(days=offset)
        if day.weekday() not in window.days:
            continue
        begin = datetime.datetime(day.year, day.month, day.day, window.start // 60, window.start % 60, tzinfo=zone)
        end_day = day + datetime.timedelta(days=(window.start + length) // (24 * 60))
        end_min = (window.start + length) % (24 * 60)
        end = datetime.datetime(end_day.year, end_day.month, end_day.day, end_min // 60, end_min % 60, tzinfo=zone)
        if end.timestamp() > begin.timestamp():  # not emptied by a daylight-saving gap
            yield begin.timestamp(), end.timestamp()


def open_until(window: Window, now: float) -> Optional[float]:
    """When the window open at ``now`` closes (epoch seconds; windows that follow each other
    without a gap, 24 hours each day, are one); None when it is closed."""
    until = None
    for start, end in sorted(_intervals(window, now, -1, 8)):
        if start <= (now if until is None else until) and end > (now if until is None else until):
            until = end
    return until


def is_open(window: Window, now: float) -> bool:
    """Whether ``now`` (epoch seconds) is inside the window."""
    return open_until(window, now) is not None


def next_open(window: Window, now: float) -> float:
    """When the window next opens (epoch seconds): ``now`` while it is open."""
    if is_open(window, now):
        return now
    return min(start for start, _ in _intervals(window, now, -1, 8) if start > now)  # a day of the week comes


def when(window: Window, at: float) -> str:
    """``2026-12-05 22:00 CET (2026-12-05T21:00:00Z)``: the local time and UTC."""
    local = datetime.datetime.fromtimestamp(at, _zone(window.zone))
    utc = datetime.datetime.fromtimestamp(at, datetime.timezone.utc)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({utc:%Y-%m-%dT%H:%M:%SZ})"


def state(pool: Mapping[str, Any], now: float) -> Tuple[str, Optional[Dict[str, Any]]]:
    """(the hold: why nobody is newly targeted now, "" when nothing holds; the record for the
    pool's ``status.rollout.window``, None without the annotation)."""
    window, invalid = window_of(pool)
    if invalid:
        return (f"the pool's maintenance window is invalid, so nothing is newly targeted until it is fixed: {invalid}",
                {"invalid": invalid})
    if window is None:
        return "", None
    utc = datetime.timezone.utc
    until = open_until(window, now)
    if until is not None:
        return "", {"schedule": window.describe(), "open": True,
                    "closesAt": f"{datetime.datetime.fromtimestamp(until, utc):%Y-%m-%dT%H:%M:%SZ}"}
    opens = next_open(window, now)
    return (f"outside the pool's maintenance window ({window.describe()}): nothing is newly targeted until it opens "
            f"at {when(window, opens)}"), \
        {"schedule": window.describe(), "open": False,
         "opensAt": f"{datetime.datetime.fromtimestamp(opens, utc):%Y-%m-%dT%H:%M:%SZ}"}
