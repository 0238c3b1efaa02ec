"""The kernel's checks of decoded JSON text: lone surrogates found, named, or escaped."""

from __future__ import annotations

import pytest
from roost.kernel import InvalidText, check_text, escape_lone_surrogates


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("plain ascii", "plain ascii"),
        ("naïve — 日本 🦜", "naïve — 日本 🦜"),  # valid text is left alone
        ("a\ud800b", "a\\ud800b"),
        ("\udfff", "\\udfff"),
        ("🦜\udc00", "🦜\\udc00"),
    ],
)
def test_escape_lone_surrogates_makes_any_text_utf8(text, escaped):
    out = escape_lone_surrogates(text)
    assert out == escaped
    out.encode("utf-8")  # never raises


def test_check_text_names_where_the_lone_surrogate_is():
    value = {"a": ["ok", {"b": "x\ud800"}]}
    with pytest.raises(InvalidText) as info:
        check_text(value, "params")
    assert info.value.field == "params.a[1].b"
    with pytest.raises(InvalidText, match="a key"):
        check_text({"\ud800": 1}, "")
    check_text({"a": ["naïve", {"b": "🦜"}]}, "params")  # valid text passes
