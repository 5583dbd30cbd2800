"""The periods of every FOCUS row over a month's end and a leap February, in every form of the
export (daily, hourly, node-level `detail`): a lease bought on 31 January at 23:59 and renewed
on 29 February at 23:59, so its purchases and usage straddle both month ends.

What FOCUS 1.2 requires of these columns (specification/columns/chargeperiodstart.md,
chargeperiodend.md, billingperiodstart.md, glossary.md):

- "ChargePeriodStart MUST be the *inclusive start bound* of the effective period of the
  *charge*" and "ChargePeriodEnd MUST be the *exclusive end bound* of the effective period of
  the *charge*"; the charge period "for continuous usage should match the time granularity of
  the dataset" and "for a non-usage charge with time boundaries should match the duration of
  eligibility";
- the billing period is "the time window that an organization receives an invoice for,
  inclusive of the start date and exclusive of the end date".

So a usage row (an hour or a day) lies within its billing period, and a purchase row starts in
the billing period it is billed in; FOCUS does not bound a purchase's charge period by that
billing period (its own example of a one-time commitment purchase,
specification/data/commitment_discount_scenarios/commitment_discount_purchase_scenario_1.csv,
bills a year's term in January). What this pins for purchases is what holds either way: the
purchases of each lease tile the hours it was held, no gap and no overlap, and bill exactly
what was debited.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from billing import services
from billing.hours import HOUR, ceil_hour, floor_hour
from billing.lease_costs import add_months
from billing.models import LeasePeriod
from billing.selectors import CostQuery
from pools.models import PoolOrder
from tests.billing.billing_helpers import focus_export
from tests.pools.lifecycle_helpers import approved_pool, live_nodes, reconcile, run_until

pytestmark = pytest.mark.django_db

BOUGHT = datetime(2028, 1, 31, 23, 59, tzinfo=UTC)  # the last minute of a month, leap year
NOTICE = timedelta(days=3)
EXPORTS = ("daily", "hourly", "detail")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def month_end_pool(actors, document):
    """The train pool bought at BOUGHT, auto-renewed once (29 Feb 23:59 to 29 Mar 23:59); every
    hour around the month ends metered."""
    document["spec"]["autoRenew"] = True
    pool = approved_pool(actors, document, now=BOUGHT)
    run_until(pool, BOUGHT)
    end = live_nodes(pool)[0].lease_end
    assert end == datetime(2028, 2, 29, 23, 59, tzinfo=UTC)
    for moment in (end - NOTICE + timedelta(minutes=1), end - NOTICE + timedelta(minutes=2), end + timedelta(minutes=1)):
        reconcile(pool, moment)
    assert LeasePeriod.objects.filter(node__pool=pool).count() == 4  # 2 nodes, 2 lease months
    for first in (datetime(2028, 1, 31, 22, tzinfo=UTC), datetime(2028, 2, 29, 21, tzinfo=UTC)):
        for hour in range(5):
            services.meter_hour(hour=first + hour * HOUR)
    return pool


def test_every_row_starts_in_its_billing_period_and_usage_ends_in_it(actors, train_document):
    pool = month_end_pool(actors, train_document)
    debited = sum(PoolOrder.objects.filter(pool=pool, status="Paid").values_list("amount", flat=True))
    held = {
        (floor_hour(p.lease_start), p.node.name): (floor_hour(p.lease_start), ceil_hour(p.lease_end))
        for p in LeasePeriod.objects.filter(node__pool=pool).select_related("node")
    }
    query = CostQuery(start=date(2028, 1, 1), end=date(2028, 3, 31))
    for form in EXPORTS:
        rows = focus_export(actors["finance"], query, form)
        assert {r["ChargeCategory"] for r in rows} == {"Purchase", "Usage"}, form
        for r in rows:
            billing_start, billing_end = at(r["BillingPeriodStart"]), at(r["BillingPeriodEnd"])
            start, end = at(r["ChargePeriodStart"]), at(r["ChargePeriodEnd"])
            # A billing period is a calendar month: 29 days for a leap February.
            assert billing_start.day == 1 and billing_end == add_months(billing_start, 1), (form, r)
            assert billing_start <= start < billing_end and start < end, (form, r)
            if r["ChargeCategory"] == "Usage":
                assert end <= billing_end, (form, r)
        february = [r for r in rows if r["BillingPeriodStart"] == "2028-02-01T00:00:00Z"]
        assert {r["BillingPeriodEnd"] for r in february} == {"2028-03-01T00:00:00Z"}, form
        assert "2028-02-29T23:00:00Z" in {r["ChargePeriodStart"] for r in february}, form
        # The purchases of each lease a node held tile its hours and bill what was debited.
        purchases = [r for r in rows if r["ChargeCategory"] == "Purchase"]
        assert sum(Decimal(r["BilledCost"]) for r in purchases) == debited, form
        spans: dict[tuple, list] = defaultdict(list)
        for r in purchases:
            lease_hour = datetime.strptime(r["ResourceId"].split("/")[-2], "%Y%m%dT%H").replace(tzinfo=UTC)
            spans[lease_hour, r["ResourceId"].split("/")[-1]].append((at(r["ChargePeriodStart"]), at(r["ChargePeriodEnd"])))
        assert spans.keys() == held.keys(), form
        for key, parts in spans.items():
            parts.sort()
            assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False)), (form, key, parts)
            assert (parts[0][0], parts[-1][1]) == held[key], (form, key, parts)
