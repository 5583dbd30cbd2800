"""Kubernetes resource quantities (`4`, `500m`, `64Gi`, `1e3`, `.5`), read as kube-apiserver
reads them (k8s.io/apimachinery/pkg/api/resource `ParseQuantity`), so that a pod document the
API server takes is one the product takes too, with the same amounts. Pure: no Django.

The grammar: an optional sign, a decimal number (`1`, `1.`, `.5`, `1.5`), then one suffix: none,
a decimal SI one (`n u m k M G T P E`), a binary SI one (`Ki Mi Gi Ti Pi Ei`) or a decimal
exponent (`e3`, `E-2`, `e+1`). Only ASCII digits count; no spaces. A YAML or JSON number is
read from its text, as the API server reads a number in JSON.
"""

from __future__ import annotations

import math
import re
from decimal import Context, Decimal
from typing import Any

_QUANTITY = re.compile(r"([+-]?)([0-9]*\.?[0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?\Z")
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_EXPONENT = 40  # beyond any resource a node has; keeps Decimal arithmetic small
_MAX_TEXT = 100
_EXACT = Context(prec=_MAX_TEXT + 2 * _MAX_EXPONENT)  # no rounding: 0.0015 and 0.0011 stay apart

MIB = 2**20


def parse_quantity(value: Any) -> Decimal:
    """The exact amount of a quantity; ValueError (in words a user can act on) if it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("must be a quantity such as 4, 500m or 64Gi")
    text = repr(value) if isinstance(value, float) else str(value)
    match = _QUANTITY.match(text) if len(text) <= _MAX_TEXT else None
    if not match or not match.group(2).strip("."):
        raise ValueError(f"{text[:40]!r} is not a quantity: use a number with an optional suffix such as 500m, 64Gi or 1e3")
    sign, number, suffix = match.group(1), Decimal(match.group(2)), match.group(3) or ""
    if suffix in _BINARY_SI:
        amount = _EXACT.multiply(number, 2 ** _BINARY_SI[suffix])
    else:
        exponent = _DECIMAL_SI[suffix] if suffix in _DECIMAL_SI else int(suffix[1:8])
        if abs(exponent) > _MAX_EXPONENT or len(suffix) > 8:
            raise ValueError(f"{text[:40]!r} is out of range")
        amount = number.scaleb(exponent, _EXACT)
    return -amount if sign == "-" else amount


def non_negative(value: Any) -> Decimal:
    """A resource amount as the API server keeps it: at least 0, and rounded up to thousandths
    (the Pod defaulting rounds every resource quantity up to milli, so 0.0015 and 0.0011 CPU are
    both 2m, and a request equal to its limit after that is no overcommit)."""
    amount = parse_quantity(value)
    if amount < 0:
        raise ValueError("must be greater than or equal to 0")
    return Decimal(milli(amount)).scaleb(-3)


def milli(amount: Decimal) -> int:
    """Thousandths, rounded up, as Kubernetes' MilliValue rounds (CPU: 100u is 1m)."""
    return math.ceil(amount.scaleb(3, _EXACT))


def mib(amount: Decimal) -> int:
    """Whole MiB, rounded up (the product counts memory in MiB)."""
    return math.ceil(_EXACT.divide(amount, MIB))
