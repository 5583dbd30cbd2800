"""Splitting money into whole units exactly, and who gets the leftover cents (C4):
deterministic per hour, even over a month.

Why this module exists: a largest-remainder split (:func:`split_units`)
leaves a few units over that equal shares tie for. Giving them to the first share by position
bills one workload every spare cent; a hash of the hour and the position spreads them, but
only at random, so equal workloads drift apart like a random walk (72 cents between three
equal workloads over December 2026). Rotating them by the hour's index within the tied shares
hands them out in turn, so over consecutive hours of one shape equal shares differ by a unit
at most, while each hour still depends on nothing but its own inputs and index: re-metering
an hour, on any worker, in any order, gives the same split.

Pure: standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from itertools import groupby


def hour_seed(hour: datetime) -> int:
    """An hour's tie-breaking seed (:func:`leftover_positions`): hours since year 1, by its
    fields, so consecutive hours have consecutive seeds and the rotation walks through."""
    return hour.toordinal() * 24 + hour.hour


def leftover_positions(remainders: Sequence[int], left: int, seed: int | None = None) -> list[int]:
    """The ``left`` positions that get a leftover unit: largest remainders first. Equal
    remainders go in position order without a ``seed``; with one (the hour's index), the tied
    group that gets only ``m`` of its ``k`` members' units starts at ``seed·m mod k``: hour
    after hour the units go round the group in consecutive blocks, so over any run of hours of
    one shape each member gets as many as the others, or one more (callers give positions in
    a stable order, by name, so a position is the same workload from hour to hour)."""
    order = sorted(range(len(remainders)), key=lambda i: (-remainders[i], i))
    if seed is None:
        return order[:left]
    chosen: list[int] = []
    for _, tied in groupby(order, key=lambda i: remainders[i]):
        group, m = list(tied), left - len(chosen)
        if m <= 0:
            break
        start = seed * m % len(group)
        chosen += (group[start:] + group[:start])[:m]
    return chosen


def split_units(total_units: int, weights: Sequence[Fraction | Decimal | int], seed: int | None = None) -> list[int]:
    """Largest-remainder split of an integer total in proportion to weights.

    Parts sum to ``total_units`` exactly; a zero weight gets zero. Ties go to the earlier
    weight, or with a ``seed`` (allocation's is the hour's) in turn, rotated by it
    (:func:`billing.cents.leftover_positions`): deterministic, and even over consecutive hours.
    """
    # Exact in integers (issue 9: a fee split over a pool's thousands of pods must be cheap):
    # weights over a common denominator, then total·w // W is the floor of the ideal share and
    # total·w % W its remainder, which orders the leftover units like the Fractions would.
    ratios = [w.as_integer_ratio() if isinstance(w, (Decimal, Fraction, int)) else Fraction(w).as_integer_ratio() for w in weights]
    if total_units < 0 or any(n < 0 for n, _ in ratios):
        raise ValueError("total and weights must be non-negative")
    if total_units == 0:
        return [0] * len(ratios)
    denominator = math.lcm(*(d for _, d in ratios)) if ratios else 1
    scaled = [n * (denominator // d) for n, d in ratios]
    whole = sum(scaled)
    if whole == 0:
        raise ValueError("cannot split a non-zero total over zero weights")
    parts, remainders = [], []
    for w in scaled:
        part, remainder = divmod(total_units * w, whole)
        parts.append(part)
        remainders.append(remainder)
    left = total_units - sum(parts)
    if left:
        for i in leftover_positions(remainders, left, seed):
            parts[i] += 1
    return parts
