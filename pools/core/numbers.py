"""Whole numbers written as text, read as Kubernetes and this API read them: ASCII digits only.

Python's `int()` and a regular expression's `\\d` also take other scripts' digits (`int("٣")`
is 3) and `int()` takes underscores (`int("1_0")` is 10): `/api/v1/orders/1_0/` found order 10,
a scale request's `"٣"` was 3 nodes and a window of `٣٠s` thirty seconds. Kubernetes (Go's
strconv) and every client of this API mean `[0-9]` by a digit, so text is a number here only
when it fully matches that. Pure: no Django.
"""

from __future__ import annotations

import re

UNSIGNED = re.compile(r"[0-9]+")
SIGNED = re.compile(r"[+-]?[0-9]+")


def is_whole_number(value: object, *, signed: bool = False) -> bool:
    """Whether `value` is a string of ASCII digits (after an optional sign when `signed`)."""
    return isinstance(value, str) and (SIGNED if signed else UNSIGNED).fullmatch(value) is not None


def parse_whole_number(value: object, *, signed: bool = False) -> int:
    """The int a string of ASCII digits spells; ValueError for anything else (`"٣"`, `"1_0"`,
    `" 3"`, `"3.0"`, `""`, a string too long for `int()`)."""
    if not is_whole_number(value, signed=signed):
        raise ValueError(f"{value!r} is not a whole number written in the digits 0-9")
    return int(value)  # type: ignore[arg-type]  # a str, checked above
