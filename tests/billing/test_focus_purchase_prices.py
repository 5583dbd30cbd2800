"""A lease's FOCUS purchase row states the lease's monthly prices (FinOps review; the finance
guide): ContractedUnitPrice is what a node-month costs on it (its order's price less the term's
discount), ListUnitPrice the undiscounted price, and PricingQuantity the months its payment
bought at the contracted price. A node replaced an hour into a quarterly lease of 2,280.00 a
month once showed 0.001342 months at 2,361.65 (its cent-rounded share of the slot over its
calendar months), and a monthly A100 node's part of its slot 20,003.25 instead of 20,000.00."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest

from billing import services
from billing.focus import FocusAccount, Lease, purchase_rows
from billing.hours import HOUR, ceil_hour, floor_hour
from billing.lease_costs import add_months
from billing.models import LeasePeriod
from billing.selectors import CostQuery
from monitoring.models import GpuErrorEvent
from pools.controllers import repair
from pools.models import Node
from tests.billing.billing_helpers import focus_export
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool, live_nodes, run_until

BOUGHT = datetime(2026, 12, 10, 13, 27, 41, tzinfo=UTC)  # an order approved at an odd second
REPAIRED = BOUGHT + timedelta(hours=1)  # an Xid 79 an hour into the lease: a new node takes over
CENT = Decimal("0.01")
ACCOUNT = FocusAccount("acct-1", "EBCloud demo")


def repaired_after_an_hour(actors, lease_type: str, nodes: int):
    pool = approved_pool(actors, make_document("price-pool", leaseType=lease_type, nodeCount={"min": nodes, "max": nodes}, autoRepair=True), now=BOUGHT)  # fmt: skip
    run_until(pool, BOUGHT)
    GpuErrorEvent.objects.create(node=live_nodes(pool)[0], report_seq=1, position=0, gpu_index=0, xid=79, at=REPAIRED, kind="fatal", action="replace")  # fmt: skip
    repair.pool_repair(pool_id=pool.pk, now=REPAIRED)
    run_until(pool, REPAIRED + timedelta(seconds=10), limit=timedelta(hours=3))
    assert Node.objects.filter(pool=pool, release_reason="Repair").count() == 1
    hour = floor_hour(BOUGHT)
    while hour < REPAIRED + 4 * HOUR:  # the hours the vacated node held and a few of its successor's
        services.meter_hour(hour=hour)
        hour += HOUR
    return pool


def purchases(actors, form):
    rows = focus_export(actors["finance"], CostQuery(start=date(2026, 12, 1), end=date(2026, 12, 31)), form)
    return {r["ResourceId"].rsplit("/", 1)[1]: r for r in rows if r["ChargeCategory"] == "Purchase"}


def assert_priced_at(row, contracted: Decimal, listed: Decimal) -> None:
    """The lease's monthly prices, its quantity the months paid at the contracted one, and unit
    price × quantity = cost (FOCUS 1.2) to the cent: a 6-place quantity missed it by one on a
    node replaced early in a monthly lease (20,000 × 0.002685 = 53.70 for 53.69; QA sweep)."""
    assert (Decimal(row["ContractedUnitPrice"]), Decimal(row["ListUnitPrice"])) == (contracted, listed)
    quantity, billed = Decimal(row["PricingQuantity"]), Decimal(row["BilledCost"])
    assert quantity == (billed / contracted).quantize(Decimal("1e-10"), ROUND_HALF_UP)
    assert Decimal(row["ContractedCost"]) == billed
    assert (contracted * quantity).quantize(CENT, ROUND_HALF_UP) == billed
    assert Decimal(row["ListCost"]) == (billed * listed / contracted).quantize(CENT, ROUND_HALF_UP)
    assert abs(listed * quantity - Decimal(row["ListCost"])) <= CENT


@pytest.mark.django_db
def test_a_node_replaced_an_hour_into_a_quarterly_lease_buys_its_part_at_the_lease_price(actors):
    """19,000.00 a node-month (20,000.00 less the quarterly 5%): the vacated node's two hours
    and its successor's rest of the term each state it, and between them bill the slot's debit."""
    repaired_after_an_hour(actors, "quarterly", 1)
    (vacated,) = LeasePeriod.objects.filter(node__pool__name="price-pool", held_to__isnull=False)
    for form in ("detail", "daily"):
        rows = purchases(actors, form)
        assert len(rows) == 2, form
        for row in rows.values():
            assert_priced_at(row, Decimal("19000"), Decimal("20000"))
            assert row["ChargeFrequency"] == "One-Time"
        part = rows[vacated.node.name]
        assert Decimal(part["BilledCost"]) == Decimal("52.75")  # its two hours' share, as paid
        assert Decimal(part["PricingQuantity"]) == Decimal("0.0027763158")  # not 0.002685 at 19,649.375
        assert sum(Decimal(r["BilledCost"]) for r in rows.values()) == vacated.amount == Decimal("57000.00")


@pytest.mark.django_db
def test_a_monthly_lease_states_20000_a_month_whole_or_in_part(actors):
    """The untouched node's whole month is 1 month at 20,000.00; the repaired node's hour and its
    successor's rest of the month are parts at exactly 20,000.00 too (their cent-rounded shares
    over their calendar months once priced a part at 19,999.525)."""
    repaired_after_an_hour(actors, "monthly", 2)
    (vacated,) = LeasePeriod.objects.filter(node__pool__name="price-pool", held_to__isnull=False)
    for form in ("detail", "hourly"):
        rows = purchases(actors, form)
        assert len(rows) == 3, form
        for row in rows.values():
            assert_priced_at(row, Decimal("20000"), Decimal("20000"))
            assert row["ContractedUnitPrice"] == row["ListUnitPrice"] == "20000", form
            assert row["ChargeFrequency"] == "Recurring"
        whole = [r for name, r in rows.items() if name != vacated.node.name and Decimal(r["PricingQuantity"]) == 1]
        assert len(whole) == 1 and whole[0]["BilledCost"] == "20000.00", form


def test_a_purchase_without_a_known_contracted_price_keeps_its_months():
    """A lease that does not say its contracted price (made by hand, as the pure tests do) is
    priced as before: what it paid over its calendar months. With it, a part lease of 2,280.00 a
    month held for an hour states 2,280.00 and the months its 3.17 bought."""
    start = floor_hour(BOUGHT)  # its first month is 745 hours: from 13:00 to 14:00 a month on
    hour = Lease("c", "n-0", "p", "t", start, start + HOUR, Decimal("2280.00"), 1, payment=Decimal("3.17"),
                 list_monthly_price=Decimal("2400.00"), term_months=3, bought=BOUGHT)  # fmt: skip
    (before,) = purchase_rows(hour, ACCOUNT)
    assert before["PricingQuantity"] == Decimal("0.0013422819") and before["ContractedUnitPrice"] == Decimal("2361.65")
    (row,) = purchase_rows(Lease(**{**hour.__dict__, "contracted_monthly_price": Decimal("2280.00")}), ACCOUNT)
    assert (row["ContractedUnitPrice"], row["ListUnitPrice"]) == (Decimal(2280), Decimal(2400))
    assert row["PricingQuantity"] == Decimal("0.0013903509")  # 3.17 / 2,280.00
    assert (row["BilledCost"], row["ContractedCost"], row["ListCost"]) == (Decimal("3.17"), Decimal("3.17"), Decimal("3.34"))
    month = {"end": ceil_hour(add_months(BOUGHT, 1)), "payment": Decimal("2280.00"), "contracted_monthly_price": Decimal("2280.00")}
    (whole,) = purchase_rows(Lease(**{**hour.__dict__, **month}), ACCOUNT)
    assert (whole["PricingQuantity"], whole["ContractedUnitPrice"], whole["ListCost"]) == (1, Decimal(2280), Decimal("2400.00"))
