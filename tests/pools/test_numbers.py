"""Whole numbers in text are ASCII digits (pools/core/numbers.py): `int()` alone took `"١"` for 1
and `"1_0"` for 10, which found order 10 at /api/v1/orders/1_0/ (the endpoints:
tests/test_bad_input.py)."""

from __future__ import annotations

import pytest

from pools.core.numbers import is_whole_number, parse_whole_number


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("10", 10), ("007", 7), ("9" * 30, int("9" * 30))])
def test_ascii_digits_are_whole_numbers(text, value):
    assert parse_whole_number(text) == value and is_whole_number(text)


@pytest.mark.parametrize("text", ["١", "٣٠", "1_0", "１", "²", " 3", "3 ", "3\n", "3.0", "", "+3", "-3", "0x1f", "9" * 5000])
def test_anything_else_is_not(text):
    with pytest.raises(ValueError):
        parse_whole_number(text)


def test_a_sign_only_where_asked_and_only_strings():
    assert parse_whole_number("-3", signed=True) == -3 and parse_whole_number("+3", signed=True) == 3
    for value in (3, 3.0, None, b"3", ["3"]):
        assert not is_whole_number(value)
    with pytest.raises(ValueError):
        parse_whole_number("-١", signed=True)
