"""A pool's maintenance window (agent/server/rollout/windows.py): its annotation's parsing, whether
an instant is inside it and when it next opens; all from given instants, never the wall clock."""

import datetime
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.server.rollout import windows
from agent.server.rollout.windows import (
    ANNOTATION,
    Window,
    WindowInvalid,
    is_open,
    next_open,
    open_until,
    parse,
)

UTC = datetime.timezone.utc


def at(text: str, zone: str = "UTC") -> float:
    """Epoch seconds of a local wall-clock time ``2026-12-05 22:30`` in ``zone``."""
    from zoneinfo import ZoneInfo

    return datetime.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def window(days, start, end, zone="UTC") -> Window:
    return parse(json.dumps({"days": days, "startTime": start, "endTime": end, "timeZone": zone}))


def pool_with(value) -> dict:
    return {"metadata": {"name": "worker", "annotations": {ANNOTATION: value}}}


# -- parsing ------------------------------------------------------------------------------------

def test_days_are_full_names_abbreviations_or_numbers_as_system_upgrade_controller_takes_them():
    assert window(["Monday", "tue", "we", "4", "0"], "01:00", "02:00").days == frozenset({0, 1, 2, 3, 6})
    assert window("saturday, sunday", "22:00", "04:00").days == frozenset({5, 6})  # one comma-separated string too


def test_the_time_zone_defaults_to_utc_and_a_mapping_value_is_read_as_the_json_object():
    got = parse({"days": ["mon"], "startTime": "9:05", "endTime": "17:00"})
    assert got == Window(frozenset({0}), 9 * 60 + 5, 17 * 60, "UTC")
    assert got.describe() == "monday 09:05-17:00 UTC"


@pytest.mark.parametrize("value,field,words", [
    ("not json", "", "is not JSON"),
    ("[1, 2]", "", "is not a JSON object"),
    ('{"days": ["mon"], "startTime": "01:00"}', "field endTime", "missing"),
    ('{"days": [], "startTime": "01:00", "endTime": "02:00"}', "field days", "give at least one of monday .. sunday"),
    ('{"days": ["funday"], "startTime": "01:00", "endTime": "02:00"}', "field days", "'funday' is not a day"),
    ('{"days": ["mon"], "startTime": "24:00", "endTime": "02:00"}', "field startTime", "give HH:MM"),
    ('{"days": ["mon"], "startTime": "01:00", "endTime": "2pm"}', "field endTime", "give HH:MM"),
    ('{"days": ["mon"], "startTime": "01:00", "endTime": "02:00", "timeZone": "Mars/Olympus"}', "field timeZone",
     "is not a time zone this server knows"),
    ('{"days": ["mon"], "startTime": "01:00", "endTime": "02:00", "timeZone": "../../etc/passwd"}', "field timeZone",
     "is not an IANA time zone name"),
    ('{"days": ["mon"], "startTime": "01:00", "endTime": "02:00", "zone": "UTC"}', "field zone", "unknown"),
    ("x" * (windows.MAX_TEXT + 1), "", "characters long"),
])
def test_an_invalid_annotation_names_the_annotation_the_field_and_what_to_give(value, field, words):
    with pytest.raises(WindowInvalid) as err:
        parse(value)
    text = str(err.value)
    assert text.startswith(f"annotation {ANNOTATION}: {field}"), text
    assert words in text and 'e.g. {"days": ["saturday", "sunday"]' in text, text


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                           st.sampled_from(list(windows.FIELDS) + ["x"]) | st.text(max_size=5), inner, max_size=5),
                       max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=300), JSONISH, JSONISH.map(json.dumps),
                 st.integers(1, 200_000).map(lambda n: "[" * n)))
def test_parse_ends_on_any_value_with_a_window_or_a_clear_error(value):
    try:
        got = parse(value)
    except WindowInvalid as exc:
        assert str(exc).startswith(f"annotation {ANNOTATION}: ")
    else:
        assert got.days and 0 <= got.start < 1440 and 0 <= got.end < 1440


def test_an_invalid_annotation_holds_the_pool_and_says_why_and_none_holds_nothing():
    hold, record = windows.state(pool_with('{"days": ["someday"], "startTime": "01:00", "endTime": "02:00"}'), at("2026-12-05 12:00"))
    assert hold.startswith("the pool's maintenance window is invalid, so nothing is newly targeted until it is "
                           f"fixed: annotation {ANNOTATION}: field days"), hold
    assert record == {"invalid": hold.split("fixed: ", 1)[1]}
    assert windows.state({"metadata": {"annotations": {}}}, 0.0) == ("", None)
    assert windows.state({}, 0.0) == ("", None)


# -- open or closed, and when it opens ------------------------------------------------------------

def test_a_window_is_open_from_its_start_up_to_but_not_at_its_end_on_its_days_only():
    w = window(["saturday"], "09:00", "17:00")  # 2026-12-05 is a Saturday
    assert not is_open(w, at("2026-12-05 08:59:59"))
    assert is_open(w, at("2026-12-05 09:00")) and is_open(w, at("2026-12-05 16:59:59"))
    assert not is_open(w, at("2026-12-05 17:00"))
    assert not is_open(w, at("2026-12-06 10:00"))  # Sunday


def test_a_window_ending_before_its_start_crosses_midnight_and_belongs_to_the_day_it_starts():
    w = window(["saturday"], "22:00", "04:00")
    assert is_open(w, at("2026-12-05 22:00")) and is_open(w, at("2026-12-06 03:59"))  # Sunday morning: Saturday's
    assert not is_open(w, at("2026-12-06 04:00")) and not is_open(w, at("2026-12-06 22:30"))  # no Sunday window
    assert not is_open(w, at("2026-12-05 03:00"))  # Saturday morning: Friday's, and Friday has none
    assert open_until(w, at("2026-12-05 23:00")) == at("2026-12-06 04:00")


def test_next_open_is_the_next_start_on_one_of_its_days_and_now_while_it_is_open():
    w = window(["monday", "thursday"], "02:00", "05:00")
    assert next_open(w, at("2026-12-05 12:00")) == at("2026-12-07 02:00")  # Saturday -> Monday
    assert next_open(w, at("2026-12-07 05:00")) == at("2026-12-10 02:00")  # Monday's just closed -> Thursday
    assert next_open(w, at("2026-12-10 03:00")) == at("2026-12-10 03:00")  # open


def test_the_window_is_read_in_its_time_zone():
    w = window(["saturday"], "22:00", "04:00", "Europe/Berlin")
    assert is_open(w, at("2026-12-05 21:30"))  # UTC: 22:30 in Berlin (CET, +01:00)
    assert not is_open(w, at("2026-12-05 20:30"))
    assert next_open(w, at("2026-12-05 12:00")) == at("2026-12-05 22:00", "Europe/Berlin")
    hold, record = windows.state(pool_with(json.dumps({"days": ["sat"], "startTime": "22:00", "endTime": "04:00",
                                                       "timeZone": "Europe/Berlin"})), at("2026-12-05 12:00"))
    assert hold == ("outside the pool's maintenance window (saturday 22:00-04:00 Europe/Berlin): nothing is newly "
                    "targeted until it opens at 2026-12-05 22:00 CET (2026-12-05T21:00:00Z)")
    assert record == {"schedule": "saturday 22:00-04:00 Europe/Berlin", "open": False,
                      "opensAt": "2026-12-05T21:00:00Z"}
    assert windows.state(pool_with(json.dumps({"days": ["sat"], "startTime": "22:00", "endTime": "04:00",
                                               "timeZone": "Europe/Berlin"})), at("2026-12-05 21:30")) == \
        ("", {"schedule": "saturday 22:00-04:00 Europe/Berlin", "open": True, "closesAt": "2026-12-06T03:00:00Z"})


def test_a_start_the_clocks_skip_is_read_with_the_offset_before_the_change():
    w = window(["sunday"], "02:30", "06:00", "Europe/Berlin")  # 2026-03-29: 02:00 CET -> 03:00 CEST
    assert next_open(w, at("2026-03-29 00:00", "Europe/Berlin")) == at("2026-03-29 03:30", "Europe/Berlin")


def test_windows_every_day_without_a_gap_are_one_open_stretch():
    w = window(["mon", "tue", "wed", "thu", "fri", "sat", "sun"], "08:00", "08:00")
    assert is_open(w, at("2026-12-05 07:59")) and open_until(w, at("2026-12-05 07:59")) >= at("2026-12-12 08:00")


def restated_is_open(w: Window, now: float) -> bool:
    """The rule in a zone without daylight saving, on the local wall clock."""
    local = datetime.datetime.fromtimestamp(now, UTC)
    minute = local.hour * 60 + local.minute
    length = (w.end - w.start) % 1440 or 1440
    today, yesterday = local.weekday(), (local.weekday() - 1) % 7
    return (today in w.days and w.start <= minute < w.start + length) or \
        (yesterday in w.days and minute < w.start + length - 1440)


TIMES = st.integers(0, 1439).map(lambda m: f"{m // 60:02d}:{m % 60:02d}")
INSTANTS = st.integers(int(at("2020-01-01 00:00")), int(at("2035-01-01 00:00")))


@settings(max_examples=300, deadline=None)
@given(st.sets(st.sampled_from(windows.DAY_NAMES), min_size=1), TIMES, TIMES, INSTANTS)
def test_is_open_is_the_wall_clock_rule_and_next_open_is_the_first_open_instant(days, start, end, now):
    w = window(sorted(days), start, end)
    assert is_open(w, now) == restated_is_open(w, now)
    opens = next_open(w, now)
    assert opens >= now and is_open(w, opens) and (opens == now) == is_open(w, now)
    if opens > now:  # closed until then: the minute before it opens is still closed
        assert not is_open(w, max(now, opens - 60))


@settings(max_examples=200, deadline=None)
@given(st.sets(st.sampled_from(windows.DAY_NAMES), min_size=1), TIMES, TIMES, INSTANTS,
       st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]))
def test_in_any_zone_next_open_is_open_and_never_before_now(days, start, end, now, zone):
    w = window(sorted(days), start, end, zone)
    opens = next_open(w, now)
    assert opens >= now and is_open(w, opens) and opens - now <= 8 * 86400


# -- what the views say -------------------------------------------------------------------------

def view(window_record, waiting=()):
    rollout = {"target": "rendered-worker-b", "counts": {"Done": 1, "Waiting": len(waiting)} if waiting else {"Done": 1},
               "window": window_record}
    if waiting:
        rollout["waiting"] = list(waiting)
    return {"metadata": {"name": "worker"}, "spec": {}, "status": {"rollout": rollout}}


def test_describe_pool_says_when_a_closed_window_opens_and_who_waits_and_until_when_an_open_one_is_open():
    from agent.server.cli import rolloutview

    closed = view({"schedule": "saturday 22:00-04:00 UTC", "open": False, "opensAt": "2026-12-05T22:00:00Z"},
                  ["w1", "w2"])
    assert rolloutview.window_line(closed["status"], at("2026-12-05 21:30")) == [
        "Maintenance window:  saturday 22:00-04:00 UTC: closed, opens at 2026-12-05T22:00:00Z (in 30 min); "
        "2 node(s) wait for it (w1, w2)"]
    assert rolloutview.window_lines([closed], at("2026-12-05 21:30")) == [
        "worker: OUTSIDE its maintenance window (saturday 22:00-04:00 UTC): closed, opens at 2026-12-05T22:00:00Z "
        "(in 30 min); 2 node(s) wait for it (w1, w2)"]
    assert "outside its maintenance window: no end estimate" in rolloutview.pool_rollout_lines(closed["status"])[0]
    opened = view({"schedule": "saturday 22:00-04:00 UTC", "open": True, "closesAt": "2026-12-06T04:00:00Z"})
    assert rolloutview.window_line(opened["status"], 0.0) == [
        "Maintenance window:  saturday 22:00-04:00 UTC: open until 2026-12-06T04:00:00Z"]
    assert rolloutview.window_lines([opened], 0.0) == []  # get pools marks only a pool that is held
    invalid = view({"invalid": "annotation x: field days: 'caturday' is not a day"})
    assert rolloutview.window_lines([invalid], 0.0) == [
        "worker: maintenance window INVALID, nothing is newly targeted until it is fixed: annotation x: field days: "
        "'caturday' is not a day"]
    assert rolloutview.window_line({"rollout": {}}, 0.0) == []  # no annotation: no line
