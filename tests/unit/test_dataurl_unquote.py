"""agent.ignition.dataurl.unquote_valid: the C-speed percent-decoding gives the same bytes as
urllib's unquote_to_bytes for every text data_url_error accepts (benchmarks/bench_plan.py and
bench_apply.py measure its speed; nothing here is timed)."""

import string
from urllib.parse import quote, unquote_to_bytes

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agent.ignition.dataurl import data_url_error, decode_data_url, unquote_valid

# the characters that matter: escapes, backslashes (the decoder's own escape), hex digits,
# quotes, non-ASCII text
_ALPHABET = st.sampled_from(list("%\\xX'\"" + string.hexdigits + "ab =\né€\U0001f600"))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_ALPHABET, st.sampled_from(["%41", "%5C", "%5c", "%25", "%00", "%FF", "%e9", "\\x41"])),
                max_size=40))
def test_unquote_valid_matches_unquote_to_bytes(parts):
    text = "".join(parts)
    assume(data_url_error("data:," + text) is None)  # a broken escape: refused before decoding
    assert unquote_valid(text) == unquote_to_bytes(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_round_trip_of_quoted_bytes(data):
    assert decode_data_url("data:," + quote(data, safe="")) == data
    assert decode_data_url("data:," + quote(data, safe="\\%"[:1])) == data  # raw backslashes kept


def test_text_without_escapes_is_its_utf8():
    assert unquote_valid("plain \\ text é") == "plain \\ text é".encode()
    assert unquote_valid("a%5C%5Cb\\%41") == b"a\\\\b\\A"


# --- the plan's shortcut: diff._contents_differ against the exact comparison ------------------

_SOURCES = st.one_of(
    st.binary(max_size=12).map(lambda d: "data:," + quote(d, safe="")),
    st.binary(max_size=12).map(lambda d: "data:;base64," + __import__("base64").b64encode(d).decode()),
    st.binary(max_size=12).map(lambda d: "data:;base64," + __import__("base64").urlsafe_b64encode(d).decode()),
    st.sampled_from(["data:,A", "data:,%41", "data:;base64,QQ==", "data:;base64,QR==", "data:;base64,QQ",
                     "data:;base64, Q Q = =", "data:text/plain;base64,QQ==", "data:base64,QQ==", "data:,%4",
                     "data:,\x01", "data:;base64,%51Q==", "data:;base64,-_8=", "data:;base64,+/8=",
                     "https://example.com/a", "data:nocomma"]),
)
_CONTENTS = st.one_of(st.none(), st.builds(lambda s, c: {"source": s, **({"compression": c} if c else {})},
                                           _SOURCES, st.sampled_from([None, "", "gzip"])))


@settings(max_examples=600, deadline=None)
@given(_CONTENTS, _CONTENTS)
def test_contents_differ_is_the_exact_comparison(ca, cb):
    from agent.core.diff import _contents_differ, _contents_key

    assert _contents_differ(ca, cb) == (_contents_key(ca)[0] != _contents_key(cb)[0])
