"""Boot image version parsing and ordering (agent.core.versions)."""

import datetime
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.versions import (
    OSVersion,
    VersionError,
    parse_ocp_version,
    parse_rhcos_minimum,
    parse_version,
)
from agent.errors import ConfigError

# raw, scheme, rhel, ocp (exact), buildDate, buildTime, serial, fedora, stream
PARSE = [
    ("415.92.202311241643-0", "rhcos-legacy", "9.2", "4.15", "2023-11-24", "16:43", 0, None, None),
    ("48.84.202109241901-0", "rhcos-legacy", "8.4", "4.8", "2021-09-24", "19:01", 0, None, None),
    ("410.84.202205191234-0", "rhcos-legacy", "8.4", "4.10", "2022-05-19", "12:34", 0, None, None),
    ("412.86.202301311551-0", "rhcos-legacy", "8.6", "4.12", "2023-01-31", "15:51", 0, None, None),
    ("413.92.202305021736-0", "rhcos-legacy", "9.2", "4.13", "2023-05-02", "17:36", 0, None, None),
    ("416.94.202405291527-0", "rhcos-legacy", "9.4", "4.16", "2024-05-29", "15:27", 0, None, None),
    ("418.94.202501221327-0", "rhcos-legacy", "9.4", "4.18", "2025-01-22", "13:27", 0, None, None),
    ("46.82.202011260640-0", "rhcos-legacy", "8.2", "4.6", "2020-11-26", "06:40", 0, None, None),
    ("43.81.202001142154.0", "rhcos-legacy", "8.1", "4.3", "2020-01-14", "21:54", 0, None, None),
    ("42.80.20191002.0", "rhcos-legacy", "8.0", "4.2", "2019-10-02", None, 0, None, None),
    ("414.92.202402130420-3", "rhcos-legacy", "9.2", "4.14", "2024-02-13", "04:20", 3, None, None),
    ("416.810.202405291527-0", "rhcos-legacy", "8.10", "4.16", "2024-05-29", "15:27", 0, None, None),
    ("9.6.20250121-0", "rhcos", "9.6", None, "2025-01-21", None, 0, None, None),
    ("9.6.20250523-1", "rhcos", "9.6", None, "2025-05-23", None, 1, None, None),
    ("10.0.20250601-0", "rhcos", "10.0", None, "2025-06-01", None, 0, None, None),
    ("9.8.20260101-12", "rhcos", "9.8", None, "2026-01-01", None, 12, None, None),
    ("10.10.20300101-0", "rhcos", "10.10", None, "2030-01-01", None, 0, None, None),
    ("39.20240101.3.0", "fcos", None, None, "2024-01-01", None, 0, 39, 3),
    ("40.20240416.2.1", "fcos", None, None, "2024-04-16", None, 1, 40, 2),
    ("41.20241109.20.0", "fcos", None, None, "2024-11-09", None, 0, 41, 20),
    ("100.20990101.3.0", "fcos", None, None, "2099-01-01", None, 0, 100, 3),
]


@pytest.mark.parametrize("raw,scheme,rhel,ocp,date,time,serial,fedora,stream", PARSE,
                         ids=[row[0] for row in PARSE])
def test_parse(raw, scheme, rhel, ocp, date, time, serial, fedora, stream):
    v = parse_version(raw)
    d = v.to_dict()
    assert d["raw"] == raw
    assert d["scheme"] == scheme
    assert d["rhel"] == rhel
    assert d["ocp"] == ocp
    assert d["buildDate"] == date
    assert d["buildTime"] == time
    assert d["serial"] == serial
    assert d["fedora"] == fedora
    assert d["stream"] == stream
    if rhel:
        assert (d["rhelMajor"], d["rhelMinor"]) == tuple(int(x) for x in rhel.split("."))
    else:
        assert d["rhelMajor"] is None and d["rhelMinor"] is None
    # RHEL-based RHCOS only bounds OpenShift from below.
    assert d["ocpAtLeast"] == {"rhcos-legacy": ocp, "rhcos": "4.19", "fcos": None}[scheme]
    assert v.family == ("fcos" if scheme == "fcos" else "rhcos")


GARBAGE = [
    "",
    "latest",
    "4.15",
    "415.92",
    "415.92.202311241643",  # no serial
    "415.92.202311241643-",
    "415.92.2023112416-0",  # 10-digit stamp
    "415.92.202313241643-0",  # month 13
    "415.92.202302301200-0",  # 30 February
    "415.92.202311242561-0",  # 25:61
    "415.72.202311241643-0",  # RHEL 7 never carried RHCOS 4
    "515.92.202311241643-0",  # legacy is OpenShift 4 only
    "410.8.20190520.0",  # the 4.1 form, ambiguous with 4.10
    "8.6.20250121-0",  # RHEL-scheme started with RHEL 9
    "09.6.20250121-0",
    "9.06.20250121-0",
    "9.6.2025012-0",
    "9.6.20250121",
    "9.6.20250121-x",
    "9.6.20250121.0",  # RHEL-scheme uses '-'
    "v9.6.20250121-0",
    " 9.6.20250121-0",
    "9.6.20250121-0\n",
    "39.20240101.3",
    "39.2024010.3.0",
    "39.20240101.dev.0",
    "9.6.20250121-0; rm -rf /",
    "415.92.202311241643-0-extra",
]


@pytest.mark.parametrize("raw", GARBAGE, ids=[repr(g) for g in GARBAGE])
def test_garbage_is_an_error_naming_the_string(raw):
    with pytest.raises(VersionError) as info:
        parse_version(raw)
    assert repr(raw) in str(info.value)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("raw", [None, 415, 9.6, ["9.6.20250121-0"]], ids=["none", "int", "float", "list"])
def test_non_string_is_an_error(raw):
    with pytest.raises(VersionError, match="not a string"):
        parse_version(raw)


# (older, newer): strictly ordered pairs
ORDER = [
    ("48.84.202109241901-0", "410.84.202205191234-0", "ocp-minor-numeric-not-text"),
    ("49.84.202110081407-0", "410.84.202110081407-0", "4.9-before-4.10"),
    ("415.92.202311241643-0", "416.94.202405291527-0", "ocp-minor"),
    ("415.92.202311241643-0", "415.92.202311241644-0", "build-minute"),
    ("415.92.202311241643-0", "415.92.202311241643-1", "serial"),
    ("415.92.202311241643-9", "415.92.202311241643-10", "serial-numeric"),
    ("418.94.202501221327-0", "9.6.20250121-0", "legacy-before-rhel-scheme-despite-date"),
    ("42.80.20191002.0", "43.81.202001142154.0", "early-forms"),
    ("9.6.20250121-0", "9.6.20250121-1", "rhel-serial"),
    ("9.6.20250121-0", "9.6.20250122-0", "rhel-date"),
    ("9.6.20260101-0", "9.8.20250101-0", "rhel-minor-before-date"),
    ("9.10.20250101-0", "10.0.20250101-0", "rhel-major"),
    ("9.9.20250101-0", "9.10.20250101-0", "rhel-minor-numeric"),
    ("39.20240101.3.0", "40.20230101.3.0", "fedora-major"),
    ("39.20240101.3.0", "39.20240102.3.0", "fcos-date"),
    ("39.20240101.3.0", "39.20240101.3.1", "fcos-serial"),
    ("41.20990101.3.0", "48.84.202109241901-0", "fcos-sorts-before-rhcos"),
]


@pytest.mark.parametrize("older,newer", [(a, b) for a, b, _ in ORDER], ids=[i for _, _, i in ORDER])
def test_order(older, newer):
    a, b = parse_version(older), parse_version(newer)
    assert a < b and a <= b and b > a and b >= a
    assert a != b and not (a == b)
    assert not (b < a) and not (a > b)


def test_equal_across_spellings_of_the_serial():
    a, b = parse_version("43.81.202001142154.0"), parse_version("43.81.202001142154-0")
    assert a == b and hash(a) == hash(b) and not (a < b) and a <= b


def test_order_is_total_and_consistent():
    versions = [parse_version(row[0]) for row in PARSE]
    for a, b in itertools.product(versions, repeat=2):
        assert sum([a < b, a == b, a > b]) == 1, (a.raw, b.raw)
    chains = [(a, b, c) for a, b, c in itertools.product(versions[::3], repeat=3) if a < b and b < c]
    assert len(chains) > 10  # the transitivity check below is not vacuous
    for a, _b, c in chains:
        assert a < c
    assert sorted(versions) == sorted(reversed(versions))


def test_compare_with_other_types_is_not_implemented():
    v = parse_version("9.6.20250121-0")
    assert v != "9.6.20250121-0"
    with pytest.raises(TypeError):
        v < "9.6.20250121-0"  # noqa: B015


def test_describe():
    assert parse_version("415.92.202311241643-0").describe() == \
        "RHCOS 415.92.202311241643-0 (OpenShift 4.15, RHEL 9.2)"
    assert "OpenShift 4.19 or later" in parse_version("9.6.20250121-0").describe()
    assert parse_version("39.20240101.3.0").describe() == "Fedora CoreOS 39.20240101.3.0 (Fedora 39)"
    assert isinstance(parse_version("9.6.20250121-0"), OSVersion)
    assert parse_version("9.6.20250121-0").build_date == datetime.date(2025, 1, 21)


RHCOS_MIN = [
    ("9.2", (9, 2), None),
    ("9.10", (9, 10), None),
    ("10.0", (10, 0), None),
    ("8.6", (8, 6), None),
    ("9.2.20240101-0", (9, 2), "2024-01-01"),
    ("415.92.202311241643-0", (9, 2), "2023-11-24"),
]


@pytest.mark.parametrize("raw,rhel,date", RHCOS_MIN, ids=[r[0] for r in RHCOS_MIN])
def test_rhcos_minimum(raw, rhel, date):
    m = parse_rhcos_minimum(raw)
    assert m.rhel == rhel and m.raw == raw
    assert (m.full.build_date.isoformat() if m.full else None) == date


@pytest.mark.parametrize("raw,fragment", [
    ("4.15", "give it as ocpVersion"),
    ("9", "neither"),
    ("9.2.x", "neither"),
    ("39.20240101.3.0", "neither"),  # FCOS is not an RHCOS minimum
    ("09.2", "leading zero"),
    (9.2, "not a string"),
], ids=["ocp-given-as-rhcos", "major-only", "garbage", "fcos", "leading-zero", "float"])
def test_rhcos_minimum_errors(raw, fragment):
    with pytest.raises(VersionError, match=fragment):
        parse_rhcos_minimum(raw)


@pytest.mark.parametrize("raw,key,patch", [
    ("4.13.0", (4, 13), 0), ("4.13", (4, 13), None), ("4.19.7", (4, 19), 7), ("5.0.0", (5, 0), 0),
], ids=["4.13.0", "4.13", "4.19.7", "5.0.0"])
def test_ocp_version(raw, key, patch):
    v = parse_ocp_version(raw)
    assert v.minor_key == key and v.patch == patch


@pytest.mark.parametrize("raw,fragment", [
    ("3.11.0", "OpenShift 4 and later"), ("9.2", "looks like a RHEL version"), ("4", "not 'X.Y'"),
    ("4.13.0-rc.1", "not 'X.Y'"), ("v4.13.0", "not 'X.Y'"), ("4.013", "leading zero"), (4.13, "not a string"),
], ids=["ocp3", "rhel", "major-only", "prerelease", "v-prefix", "leading-zero", "float"])
def test_ocp_version_errors(raw, fragment):
    with pytest.raises(VersionError, match=fragment):
        parse_ocp_version(raw)


# ---------------------------------------------------------------------------------------------
# round trip and order over generated versions (bounded)

_stamps = st.datetimes(min_value=datetime.datetime(2019, 1, 1), max_value=datetime.datetime(2099, 12, 31))
_legacy = st.tuples(st.integers(1, 18), st.integers(8, 9), st.integers(0, 10), _stamps, st.integers(0, 30)).map(
    lambda t: f"4{t[0]}.{t[1]}{t[2]}.{t[3]:%Y%m%d%H%M}-{t[4]}")
_rhel = st.tuples(st.integers(9, 12), st.integers(0, 10), _stamps, st.integers(0, 30)).map(
    lambda t: f"{t[0]}.{t[1]}.{t[2]:%Y%m%d}-{t[3]}")
_fcos = st.tuples(st.integers(30, 60), _stamps, st.integers(1, 20), st.integers(0, 9)).map(
    lambda t: f"{t[0]}.{t[1]:%Y%m%d}.{t[2]}.{t[3]}")
_any = st.one_of(_legacy, _rhel, _fcos)


@settings(max_examples=150, deadline=None)
@given(_any)
def test_generated_versions_round_trip(raw):
    v = parse_version(raw)
    d = v.to_dict()
    assert d["raw"] == raw and d["scheme"] in ("rhcos-legacy", "rhcos", "fcos")
    assert parse_version(raw) == v


@settings(max_examples=150, deadline=None)
@given(_any, _any)
def test_generated_order_is_antisymmetric(a, b):
    va, vb = parse_version(a), parse_version(b)
    assert (va < vb) == (vb > va)
    assert (va == vb) == (a == b)  # every generated spelling is canonical
    if va.scheme == vb.scheme == "rhcos":
        assert (va < vb) == ((va.rhel_major, va.rhel_minor, va.build_date, va.serial)
                             < (vb.rhel_major, vb.rhel_minor, vb.build_date, vb.serial))
