"""The month's spend forecast, one rule for every place that shows one: the budget bars, the
pool list and the order queue must tell the same number for the same pool (seed T6).

Pure: plain amounts and moments in, a Decimal (or None) out.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

CENT = Decimal("0.01")
# Less data than this is too little to extrapolate a month from: a pool bought yesterday would
# be forecast from its first, unrepresentative hours.
FORECAST_MIN_DATA = timedelta(days=3)
HOUR = timedelta(hours=1)


def month_forecast(*, spent: Decimal, first: datetime, last: datetime, end: datetime) -> Decimal | None:
    """A linear run rate to the end of the month: the spend of the hours from `first` to
    `last` (both hour starts, `last` included) carried on to `end`. None before three days of
    data. `last` is the last hour metered, not the last that cost something: hours metered
    since at no cost (a pool scaled to zero) lower the rate."""
    elapsed = min(last + HOUR, end) - first
    if elapsed < FORECAST_MIN_DATA:
        return None
    rate = Decimal(spent) / Decimal(elapsed / HOUR)
    return (rate * Decimal((end - first) / HOUR)).quantize(CENT)
