"""FOCUS purchase rows of multi-month leases (FinOps review, defect B): a quarterly lease paid at
once is one Purchase row for its whole term, billed in the month it was paid, whose unit prices
× PricingQuantity equal its costs (FOCUS 1.2 ListCost and ContractedCost rules). Its ListCost is
at the undiscounted list price (20,000.00 a node-month), not what was paid (19,000.00 a month
after the quarterly term's 5%: that is its ContractedCost), and, paid once up front for the
whole term, it is a One-Time charge; a monthly lease's purchase stays Recurring."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from billing import services
from billing.hours import HOUR, floor_hour
from billing.selectors import CostQuery
from pools.models import PoolOrder
from pools.models.cloud import SimPayment
from tests.billing.billing_helpers import focus_export
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool, run_until

BOUGHT = datetime(2026, 12, 15, 10, 0, tzinfo=UTC)


def meter_through(last):
    hour = floor_hour(BOUGHT)
    while hour <= last:
        services.meter_hour(hour=hour)
        hour += HOUR


def debited(pool) -> Decimal:
    orders = PoolOrder.objects.filter(pool=pool).values("pk")
    return sum(SimPayment.objects.filter(order_id__in=orders).values_list("amount", flat=True), Decimal(0))


@pytest.mark.parametrize("form", ["daily", "detail"])
def test_quarterly_lease_is_one_purchase_billed_when_paid(actors, form):
    pool = approved_pool(actors, make_document("qpool", leaseType="quarterly", nodeCount={"min": 1, "max": 1}), now=BOUGHT)
    run_until(pool, BOUGHT)
    meter_through(datetime(2026, 12, 15, 12, tzinfo=UTC))
    paid = debited(pool)
    assert paid == Decimal("57000.00")
    rows = focus_export(actors["finance"], CostQuery(start=date(2026, 12, 1), end=date(2026, 12, 31)), form)
    purchases = [r for r in rows if r["ChargeCategory"] == "Purchase"]
    assert len(purchases) == 1
    (p,) = purchases
    assert Decimal(p["BilledCost"]) == Decimal(p["ContractedCost"]) == paid
    assert (Decimal(p["ListUnitPrice"]), Decimal(p["ListCost"])) == (Decimal(20000), Decimal("60000.00"))
    assert Decimal(p["ContractedUnitPrice"]) == Decimal(19000)
    assert p["ChargeFrequency"] == "One-Time"
    assert p["BillingPeriodStart"].startswith("2026-12-01")
    assert p["ChargePeriodStart"].startswith("2026-12-15") and p["ChargePeriodEnd"].startswith("2027-03-15")
    quantity = Decimal(p["PricingQuantity"])
    assert quantity == 3
    for unit, cost in (("ListUnitPrice", "ListCost"), ("ContractedUnitPrice", "ContractedCost")):
        assert (Decimal(p[unit]) * quantity).quantize(Decimal("0.01")) == Decimal(p[cost])
    assert sum(Decimal(r["BilledCost"]) for r in rows) == paid  # December bills the debit


@pytest.mark.parametrize("form", ["hourly", "detail"])
def test_a_monthly_lease_is_a_recurring_purchase_listed_at_its_price(actors, form):
    """No discount on the monthly term: ListCost = ContractedCost = BilledCost; renewed month by
    month, its purchase is Recurring."""
    pool = approved_pool(actors, make_document("mpool", nodeCount={"min": 1, "max": 1}), now=BOUGHT)
    run_until(pool, BOUGHT)
    meter_through(datetime(2026, 12, 15, 11, tzinfo=UTC))
    rows = focus_export(actors["finance"], CostQuery(start=date(2026, 12, 1), end=date(2026, 12, 31)), form)
    (p,) = [r for r in rows if r["ChargeCategory"] == "Purchase"]
    assert Decimal(p["BilledCost"]) == Decimal(p["ListCost"]) == Decimal(p["ContractedCost"]) == debited(pool) == Decimal(20000)
    assert Decimal(p["ListUnitPrice"]) == Decimal(p["ContractedUnitPrice"]) == Decimal(20000)
    assert p["ChargeFrequency"] == "Recurring"
