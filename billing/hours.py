"""Hours as metering counts them: UTC hours, the last complete one, and the part of an hour a
node or pod was alive in (a fraction, to the millionth)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

HOUR = timedelta(hours=1)
QUANTITY = Decimal("0.000001")
# The whole hour as a fraction of itself: one object, so memo keys holding it hash it once.
WHOLE_HOUR = Decimal(1)


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def ceil_hour(moment: datetime) -> datetime:
    """The first hour boundary at or after the moment."""
    floor = floor_hour(moment)
    return floor if floor == moment.astimezone(UTC) else floor + HOUR


def last_complete_hour(now: datetime) -> datetime:
    return floor_hour(now) - HOUR


def hour_overlap(start: datetime | None, stop: datetime, hour: datetime) -> Decimal:
    """The part of [hour, hour + 1h) inside [start, stop), as a fraction of an hour."""
    if start is None:
        return Decimal(0)
    seconds = (min(stop, hour + HOUR) - max(start, hour)).total_seconds()
    if seconds <= 0:
        return Decimal(0)
    return (Decimal(str(seconds)) / 3600).quantize(QUANTITY, ROUND_HALF_UP)


# Metering runs this long after the top of each hour: the agents' last samples of the hour
# just ended (sent every minute, buffered through short outages) are in by then.
METER_RUN_OFFSET = timedelta(minutes=2)


def next_meter_run(now: datetime) -> datetime:
    """The first metering run after `now`: the next top of the hour plus `METER_RUN_OFFSET`
    (the hourly schedule then keeps that minute: django-q2 adds whole hours to it)."""
    run = floor_hour(now) + METER_RUN_OFFSET
    return run if run > now else run + HOUR
