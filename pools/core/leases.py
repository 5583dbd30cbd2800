"""A monthly lease's calendar (seed D2): when it ends, when it is renewed to, what it needs now.

Pure: no Django. Calendar months clamp the day (Jan 31 + 1 month = Feb 29 in a leap year); a
renewal counts from the lease's start, so the lease keeps its day of the month."""

from __future__ import annotations

import calendar
from datetime import datetime, timedelta


def add_months(moment: datetime, months: int) -> datetime:
    """Calendar months, clamping the day (Jan 31 + 1 month = Feb 28/29)."""
    month_index = moment.month - 1 + months
    year, month = moment.year + month_index // 12, month_index % 12 + 1
    day = min(moment.day, calendar.monthrange(year, month)[1])
    return moment.replace(year=year, month=month, day=day)


def lease_extended(*, lease_start: datetime | None, lease_end: datetime, months: int) -> datetime:
    """The end of a lease `lease_start`..`lease_end` renewed for `months` more: counted from the
    lease's start, whose day of the month it keeps (a lease paid on 31 January ends on 29
    February, then 31 March: from the clamped 29 February it would end on the 29th for good,
    the same price for fewer days). Without a start, from the end."""
    if lease_start is None:
        return add_months(lease_end, months)
    held = (lease_end.year - lease_start.year) * 12 + lease_end.month - lease_start.month
    return add_months(lease_start, held + months)


NONE, NOTIFY, EXPIRE = "none", "notify", "expire"


def lease_action(*, lease_end: datetime | None, now: datetime, notice: timedelta, notified: bool) -> str:
    """What a monthly node's lease needs now: nothing, a `LeaseExpiring` notice, or expiry."""
    if lease_end is None:
        return NONE
    if now >= lease_end:
        return EXPIRE
    if not notified and now >= lease_end - notice:
        return NOTIFY
    return NONE


def renewals_allowed(*, min_nodes: int, staying: int, renewing: int) -> int:
    """How many expiring monthly nodes autoRenew may renew: only up to `nodeCount.min`."""
    return max(0, min_nodes - staying - renewing)
