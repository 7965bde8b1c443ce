"""The text rule and its escaper (``corral.domain.text``), on their own."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.text import Kind, problem, visible


def _terminal_controls(text: str) -> list[str]:
    return [
        c
        for c in text
        if ord(c) < 0x20
        or 0x7F <= ord(c) <= 0x9F
        or 0xD800 <= ord(c) <= 0xDFFF
        or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
    ]


@given(st.text(alphabet=st.characters(codec=None)))
def test_visible_text_holds_no_control_character(text: str) -> None:
    assert _terminal_controls(visible(text)) == []


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Cf", "Zl", "Zp"))))
def test_printable_text_is_shown_unchanged(text: str) -> None:
    assert visible(text) == text


def test_escapes_are_the_familiar_spellings() -> None:
    assert visible("a\x1b[31mb\n\t\r\x00\x7f\x9b\u202e\ud800") == (
        "a\\x1b[31mb\\n\\t\\r\\x00\\x7f\\x9b\\u202e\\ud800"
    )
    assert visible("a\nb\tc\x1b", keep="\n\t") == "a\nb\tc\\x1b"
    assert visible("Grüße 日本語 🚀 \u200b") == "Grüße 日本語 🚀 \u200b"


@pytest.mark.parametrize(
    ("value", "line", "prose", "data"),
    [
        ("fine name", None, None, None),
        ("", "must not be empty", None, None),
        ("a\tb", "control characters (\\t", None, None),
        ("a\nb\r\n", "control characters (\\n", None, None),
        ("a\x1bb", "control characters (\\x1b", "other than tab and newline (\\x1b", None),
        ("a\x00b", "NUL", "NUL", "NUL"),
        ("a\ud800", "lone surrogates (\\ud800", "lone surrogates", "lone surrogates"),
        ("\u2066x", "bidirectional controls (\\u2066", None, None),
    ],
)
def test_each_kind_refuses_what_it_says(
    value: str, line: str | None, prose: str | None, data: str | None
) -> None:
    for kind, expected in ((Kind.LINE, line), (Kind.PROSE, prose), (Kind.DATA, data)):
        found = problem(value, kind)
        assert (found is None) == (expected is None), (kind, found)
        assert expected is None or expected in str(found), (kind, found)


def test_the_bound_is_named_and_counted_in_characters() -> None:
    assert problem("é" * 256, Kind.LINE, 256) is None
    assert problem("é" * 257, Kind.LINE, 256) == "must be at most 256 characters"
    assert problem("d" * 10_001, Kind.PROSE, 10_000) == "must be at most 10,000 characters"
