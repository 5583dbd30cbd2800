"""Money and lease arithmetic of one node-hour: amounts rounded half-up to the cent, months added
to a moment, a lease's hours and months, and what one hour of a monthly (the lease spread over
its hours, exactly), on-demand or preemptible node costs. Pure: standard library only (and
`billing.hours`, which is)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from billing.hours import ceil_hour, floor_hour
from pools.core.leases import add_months

CENT = Decimal("0.01")
_HOUR = timedelta(hours=1)

def quantize_money(amount: Decimal | Fraction, quantum: Decimal = CENT) -> Decimal:
    """Round half-up to the quantum (exact for Fractions too: no float ever)."""
    units = round_half_up(Fraction(amount) / Fraction(quantum))
    return from_units(units, quantum)


def lease_hours(start: datetime, end: datetime) -> int:
    """Whole hours of a lease; leases start and end on hour boundaries."""
    span = end - start
    if span <= timedelta(0) or span % _HOUR:
        raise ValueError("a lease must span a positive whole number of hours")
    return span // _HOUR


def lease_months(start: datetime, end: datetime) -> Fraction:
    """Calendar months from start to end; a trailing part-month counts pro rata.

    Exact (a Fraction) so that a lease of 1 month and 10 days is not rounded before it is
    priced.
    """
    lease_hours(start, end)
    whole = 0
    while add_months(start, whole + 1) <= end:
        whole += 1
    anchor = add_months(start, whole)
    if anchor == end:
        return Fraction(whole)
    month_span = add_months(start, whole + 1) - anchor
    second = timedelta(seconds=1)
    return whole + Fraction((end - anchor) // second, month_span // second)


def lease_month_spans(
    start: datetime, end: datetime, bought: datetime | None = None
) -> Iterator[tuple[datetime, datetime, Fraction]]:
    """The purchase periods of a lease over [start, end) with their months: calendar months from
    `start` (a trailing part-month pro rata); or, for a lease bought at the moment `bought` and
    spread over the hours from the one it was bought in (a ledger period: `period_hour_cost`),
    months from `bought`, each ending at the hour boundary its last moment falls in, its months
    pro rata to that month's hours. Why: a lease bought at 13:27 counts whole months from then
    (its purchase's PricingQuantity), not a month and a one-hour remainder. `start` may come after `bought` (a successor holds the
    rest of a lease): its first period is then the part of that month it holds."""
    if bought is None:
        month_start, boundary = start, lambda k: add_months(start, k)
    else:
        month_start, boundary = floor_hour(bought), lambda k: ceil_hour(add_months(bought, k))
    k, first = 1, start
    while first < end:
        month_end = boundary(k)
        stop = min(month_end, end)
        if stop > first:
            if bought is None:
                months = lease_months(first, stop)
            else:
                months = Fraction((stop - first) // _HOUR, (month_end - month_start) // _HOUR)
            yield first, stop, months
            first = stop
        month_start, k = month_end, k + 1


def lease_payment(
    monthly_price: Decimal, start: datetime, end: datetime, quantum: Decimal = CENT
) -> Decimal:
    """What the whole lease costs: monthly price × lease months, to the quantum."""
    return quantize_money(Fraction(monthly_price) * lease_months(start, end), quantum)


def monthly_hourly_rate(monthly_price: Decimal, start: datetime, end: datetime) -> Decimal:
    """The amortised rate M × months / hours, unrounded-ish (12 places), for display."""
    rate = Fraction(monthly_price) * lease_months(start, end) / lease_hours(start, end)
    return quantize_money(rate, Decimal("1e-12"))


def monthly_hour_cost(
    monthly_price: Decimal,
    lease_start: datetime,
    lease_end: datetime,
    hour: datetime,
    quantum: Decimal = CENT,
) -> Decimal:
    """The cost of one hour of a monthly node: its lease payment amortised over lease hours.

    Each hour gets ``round(P·(i+1)/n) − round(P·i/n)`` quanta (cumulative rounding), so every
    hour is within one quantum of the exact rate and the hours of the whole lease add up to
    the lease payment exactly: FOCUS's "Σ EffectiveCost = Σ purchase BilledCost" then holds.
    """
    payment = lease_payment(monthly_price, lease_start, lease_end, quantum)
    return spread_hour_cost(payment, lease_start, lease_end, hour, quantum)


def spread_hour_cost(
    payment: Decimal, start: datetime, end: datetime, hour: datetime, quantum: Decimal = CENT
) -> Decimal:
    """One hour's share of a payment spread over the hours of [start, end) (hour-aligned).

    Cumulative rounding: hour i gets ``round(P·(i+1)/n) − round(P·i/n)`` quanta, so the n
    hours add up to P exactly whatever P and n are (a debit is then charged back to the cent).
    """
    offset = hour - start
    if offset % _HOUR or not timedelta(0) <= offset < end - start:
        raise ValueError(f"hour {hour.isoformat()} is not an hour of this lease")
    return spread_sum(payment, start, end, hour, hour + _HOUR, quantum)


def spread_sum(
    payment: Decimal, start: datetime, end: datetime, first: datetime, stop: datetime, quantum: Decimal = CENT
) -> Decimal:
    """What the hours [first, stop) of the spread over [start, end) add up to (hour-aligned,
    within it): ``round(P·j/n) − round(P·i/n)``, the sum of `spread_hour_cost` over them."""
    n = lease_hours(start, end)
    i, j = (first - start) // _HOUR, (stop - start) // _HOUR
    units = to_units(payment, quantum)
    return from_units(round_half_up(Fraction(units * j, n)) - round_half_up(Fraction(units * i, n)), quantum)


def period_hour_cost(
    amount: Decimal, lease_start: datetime, lease_end: datetime, hour: datetime, quantum: Decimal = CENT
) -> Decimal | None:
    """One hour's share of a lease period's debit, spread over the hours from the one the lease
    starts in to the one it ends in (a part-hour at either end is a whole hour of the spread);
    None outside them. The period's hours add up to `amount` exactly."""
    start, end = floor_hour(lease_start), ceil_hour(lease_end)
    if not start <= hour < end:
        return None
    return spread_hour_cost(amount, start, end, hour, quantum)


def split_amount(amount: Decimal, parts: int, index: int, quantum: Decimal = CENT) -> Decimal:
    """Share `index` (0-based) of `amount` split into `parts` shares that differ by at most one
    quantum and add up to it exactly: the first ``amount mod parts`` shares get the extra one.
    An order of n nodes debits one amount; each node's lease is charged back its share."""
    if parts < 1 or not 0 <= index < parts:
        raise ValueError("a share index must be within 0..parts-1")
    whole, rest = divmod(to_units(amount, quantum), parts)
    return from_units(whole + (1 if index < rest else 0), quantum)


def on_demand_hour_cost(
    hourly_price: Decimal, hours: Decimal | int = 1, quantum: Decimal = CENT
) -> Decimal:
    """An on-demand node's cost: hourly price × hours (a part-hour is billed pro rata)."""
    return quantize_money(Fraction(hourly_price) * Fraction(Decimal(hours)), quantum)


def preemptible_hour_cost(
    hourly_price: Decimal,
    discount: Decimal,
    hours: Decimal | int = 1,
    quantum: Decimal = CENT,
) -> Decimal:
    """A preemptible node's cost: on-demand price less the preemption discount (0..1)."""
    if not Decimal(0) <= discount <= Decimal(1):
        raise ValueError("discount must be within 0..1")
    price = Fraction(hourly_price) * (1 - Fraction(discount))
    return quantize_money(price * Fraction(Decimal(hours)), quantum)


def to_units(amount: Decimal, quantum: Decimal) -> int:
    units, rest = units_exact(amount, quantum)
    if rest:
        raise ValueError(f"{amount} is not a multiple of {quantum}")
    return units


def from_units(units: int, quantum: Decimal) -> Decimal:
    return (Decimal(units) * quantum).quantize(quantum)


def round_half_up(value: Fraction) -> int:
    """Round half away from zero (Decimal's ROUND_HALF_UP), exactly."""
    sign = -1 if value < 0 else 1
    return sign * math.floor(abs(value) + Fraction(1, 2))


def units_exact(amount: Decimal, quantum: Decimal) -> tuple[int, int]:
    """amount / quantum as (whole units, remainder), exactly, in integers: the same test as
    `Fraction(amount) / Fraction(quantum)` without building Fractions (issue 9: it runs for
    every node and fee of an hour)."""
    n, d = amount.as_integer_ratio()
    qn, qd = quantum.as_integer_ratio()
    return divmod(n * qd, d * qn)
