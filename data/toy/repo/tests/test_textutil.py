import pytest

from stockroom.textutil import normalize_whitespace, slugify, truncate, wrap


def test_slugify_simple_words():
    assert slugify("Hello World") == "hello-world"


def test_slugify_removes_accents():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_slugify_custom_separator():
    assert slugify("Hex bolt M6", separator="_") == "hex_bolt_m6"


def test_normalize_whitespace():
    assert normalize_whitespace("  a \t b\n\nc  ") == "a b c"


def test_truncate_short_text_is_unchanged():
    assert truncate("bolt", 10) == "bolt"
    assert truncate("0123456789", 10) == "0123456789"


def test_truncate_long_text():
    assert truncate("Stainless steel washer", 12) == "Stainless..."
    assert truncate("Stainless steel washer", 12, placeholder="~") == "Stainless s~"


def test_truncate_width_smaller_than_placeholder():
    with pytest.raises(ValueError):
        truncate("anything", 2)


def test_wrap():
    text = "the quick brown fox jumps over the lazy dog"
    assert wrap(text, 10) == ["the quick", "brown fox", "jumps over", "the lazy", "dog"]


def test_wrap_splits_long_words():
    assert wrap("a abcdefghij b", 4) == ["a", "abcd", "efgh", "ij b"]
