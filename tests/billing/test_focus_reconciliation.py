"""Both FOCUS exports reconcile with the debits (issue 20, C1): over a subscription pool's whole
lease, what its purchase rows bill is what the account was debited, and so is what its usage
rows' EffectiveCost amortises, to the cent, in the default export from the cost records (daily
and hourly) as in the node-level one (`detail`). The pools are ordered at an odd second, so
every lease starts mid-hour; one node is replaced after a repair, one pool grows mid-month and
is deleted before its leases end, and a preemptible pool's node is reclaimed and replaced (its
lease is a commitment too: the default export once billed its usage as Dynamic, without its
purchase, less than the node-level export billed on the same data)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from billing import services
from billing.focus import FocusAccount, Lease, purchase_rows
from billing.hours import HOUR, ceil_hour, floor_hour
from billing.lease_costs import add_months, lease_month_spans, split_amount
from billing.metering import ledger_pool_name
from billing.models import CostRecord, LeasePeriod
from billing.selectors import CostQuery
from monitoring.models import GpuErrorEvent
from pools.controllers import repair
from pools.models import Node
from pools.models.cloud import SimPayment
from pools.providers import simulated
from pools.services import pools as pool_services
from tests.billing.billing_helpers import focus_export
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool, live_nodes, reconcile, run_until

BOUGHT = datetime(2026, 12, 10, 13, 27, 41, tzinfo=UTC)  # an order approved at an odd second
EXPORTS = ("daily", "hourly", "detail")


def total(rows, column: str, **where) -> Decimal:
    return sum((Decimal(r[column]) for r in rows if all(r[k] == v for k, v in where.items())), Decimal(0))


def meter_every_lease_hour(pool) -> None:
    """Meter every hour from the first lease's to the last one's end (a few hours of margin)."""
    periods = LeasePeriod.objects.filter(node__pool=pool)
    hour = floor_hour(min(p.lease_start for p in periods))
    end = max(ceil_hour(p.lease_end) for p in periods) + 2 * HOUR
    while hour < end:
        services.meter_hour(hour=hour)
        hour += HOUR


def debited(pool) -> Decimal:
    return sum(SimPayment.objects.filter(order_id__in=pool.orders.values("pk")).values_list("amount", flat=True), Decimal(0))


def repaired_pool(actors):
    """min = max = 2, auto-repair; an Xid 79 on the first node: a new node takes its slot over."""
    pool = approved_pool(actors, make_document("recon-pool", nodeCount={"min": 2, "max": 2}, autoRepair=True), now=BOUGHT)
    run_until(pool, BOUGHT)
    at = datetime(2026, 12, 20, 7, 41, tzinfo=UTC)
    GpuErrorEvent.objects.create(node=live_nodes(pool)[0], report_seq=1, position=0, gpu_index=0, xid=79, at=at, kind="fatal", action="replace")  # fmt: skip
    repair.pool_repair(pool_id=pool.pk, now=at)
    run_until(pool, at + timedelta(seconds=10), limit=timedelta(hours=3))
    assert Node.objects.filter(pool=pool, release_reason="Repair").count() == 1
    return pool


def grown_then_deleted_pool(actors):
    """min 2, grown to 3 on the 15th (a second order, mid-hour too), deleted on the 28th while
    every lease runs on: no repair, the nodes' remaining prepaid hours stay theirs, idle."""
    pool = approved_pool(actors, make_document("recon-pool", nodeCount={"min": 2, "max": 4}), now=BOUGHT)
    run_until(pool, BOUGHT)
    grow = datetime(2026, 12, 15, 10, 5, 3, tzinfo=UTC)
    pool_services.pool_update(user=actors["lead"], pool=pool, document=make_document("recon-pool", nodeCount={"min": 3, "max": 4}), now=grow)  # fmt: skip
    pool_services.order_approve(user=actors["admin"], order=pool.orders.get(status="Pending"), now=grow)
    run_until(pool, grow, limit=timedelta(hours=3))
    assert len(live_nodes(pool)) == 3
    gone = datetime(2026, 12, 28, 19, 3, tzinfo=UTC)
    pool_services.pool_delete(user=actors["lead"], pool=pool, now=gone)
    for tick in range(200):
        reconcile(pool, gone + tick * timedelta(seconds=15))
    assert set(Node.objects.filter(pool=pool).values_list("phase", flat=True)) == {"Terminated"}
    return pool


def reclaimed_preemptible_pool(actors):
    """A preemptible pool, min = max = 2 (12,000.00 a node-month: the 20,000.00 list price less
    40%); the cloud reclaims the first node on the 20th and a replacement takes its slot over."""
    pool = approved_pool(actors, make_document("recon-pool", preemptible=True, nodeCount={"min": 2, "max": 2}), now=BOUGHT)
    run_until(pool, BOUGHT)
    at = datetime(2026, 12, 20, 7, 41, tzinfo=UTC)
    simulated.reclaim_inject(provider_id=live_nodes(pool)[0].provider_id, now=at)
    run_until(pool, at + timedelta(seconds=10), limit=timedelta(hours=3))
    assert Node.objects.filter(pool=pool, release_reason="Reclaimed").count() == 1
    assert set(Node.objects.filter(pool=pool).values_list("billing", flat=True)) == {"preemptible"}
    return pool


DEBITED = {repaired_pool: 40000, grown_then_deleted_pool: 60000, reclaimed_preemptible_pool: 24000}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "scenario", [repaired_pool, grown_then_deleted_pool, reclaimed_preemptible_pool], ids=["repaired", "grown-deleted", "preemptible-reclaimed"]
)
def test_every_focus_export_bills_and_amortises_exactly_what_was_debited(actors, scenario):
    pool = scenario(actors)
    meter_every_lease_hour(pool)
    paid = debited(pool)
    assert paid == DEBITED[scenario]
    assert sum(CostRecord.objects.filter(pool=pool).values_list("amount", flat=True)) == paid
    periods = list(LeasePeriod.objects.filter(node__pool=pool).select_related("order", "node"))
    # The slot shares each order was split into, and what each holder held of them.
    shares = {(p.order_id, p.slot): split_amount(p.order.amount, p.order.node_count, p.slot) for p in periods}
    query = CostQuery(start=date(2026, 12, 1), end=date(2027, 1, 31))
    for form in EXPORTS:
        rows = focus_export(actors["finance"], query, form)
        purchases = [r for r in rows if r["ChargeCategory"] == "Purchase"]
        assert total(rows, "BilledCost") == total(rows, "EffectiveCost") == paid, form
        assert total(purchases, "BilledCost") == paid, form
        # One purchase a lease month per holder of a slot: a lease bought at 13:27:41 is not a
        # month and a one-hour remainder.
        assert len(purchases) == len(periods), form
        per_slot: dict[tuple, Decimal] = defaultdict(Decimal)
        for row in purchases:
            order, slot = row["ResourceId"].split("/")[1:3]
            per_slot[int(order.removeprefix("order-")), int(slot.removeprefix("slot-"))] += Decimal(row["BilledCost"])
            start, end = (datetime.fromisoformat(row[c]) for c in ("ChargePeriodStart", "ChargePeriodEnd"))
            assert end - start > 2 * 24 * HOUR, (form, row["ResourceId"], start, end)
        assert per_slot == shares, form
    daily = focus_export(actors["finance"], query, "daily")
    # One commitment, named as the ledger names the pool (a deleted pool `recon-pool#<id>`).
    pool.refresh_from_db()
    assert {r["CommitmentDiscountId"] for r in daily if r["CommitmentDiscountId"]} == {f"monthly-leases/{ledger_pool_name(pool)}"}
    # A range that holds no lease start has no purchase; its usage still amortises the leases.
    january = focus_export(actors["finance"], CostQuery(start=date(2027, 1, 1), end=date(2027, 1, 31)), "daily")
    assert not [r for r in january if r["ChargeCategory"] == "Purchase"]
    assert total(january, "BilledCost") == 0 < total(january, "EffectiveCost")
    if scenario is repaired_pool:
        assert_the_slot_handed_over_shares_its_purchase(pool, actors["finance"], query)
    if scenario is reclaimed_preemptible_pool:
        assert_preemptible_usage_draws_down_its_leases(pool, actors["finance"], query)


def assert_the_slot_handed_over_shares_its_purchase(pool, finance, query):
    """The repaired node bought its slot's lease up to the hour its successor took it over, the
    successor from there to the lease's end: between them, the slot's share once."""
    (vacated,) = LeasePeriod.objects.filter(node__pool=pool, held_to__isnull=False)
    successor = LeasePeriod.objects.get(node__pool=pool, order=vacated.order, slot=vacated.slot, held_to__isnull=True)
    for form in EXPORTS:
        held = {
            r["ResourceId"].rsplit("/", 1)[1]: (r["ChargePeriodStart"], r["ChargePeriodEnd"], Decimal(r["BilledCost"]))
            for r in focus_export(finance, query, form)
            if r["ChargeCategory"] == "Purchase" and f"/slot-{vacated.slot}/" in r["ResourceId"]
        }
        assert held[vacated.node.name][:2] == ("2026-12-10T13:00:00Z", "2026-12-20T08:00:00Z")
        assert held[successor.node.name][:2] == ("2026-12-20T08:00:00Z", "2027-01-10T14:00:00Z")
        assert held[vacated.node.name][2] + held[successor.node.name][2] == vacated.amount


def assert_preemptible_usage_draws_down_its_leases(pool, finance, query):
    """A leased preemptible node's usage is Committed and billed 0 in every form, as a monthly
    node's (its purchase bills the money), and a range without a purchase bills nothing: the
    default export and the node-level one say the same money, range by range."""
    december = {form: focus_export(finance, query, form) for form in EXPORTS}
    for form, rows in december.items():
        usage = [r for r in rows if r["ChargeCategory"] == "Usage" and r["ServiceCategory"] == "Compute"]
        assert usage and {(r["PricingCategory"], r["BilledCost"]) for r in usage} == {("Committed", "0.00")}, form
        assert {r["CommitmentDiscountStatus"] for r in usage} == {"Unused"}, form  # no pod ran: all idle
        # Bought at 12,000.00 a node-month, the 20,000.00 list price less the preemptible 40%: the
        # two slots list 40,000.00 (the reclaimed node and its successor each their months of it).
        purchases = [r for r in rows if r["ChargeCategory"] == "Purchase"]
        assert {Decimal(p["ListUnitPrice"]) for p in purchases} == {Decimal(20000)}, form
        assert {round(Decimal(p["ContractedUnitPrice"])) for p in purchases} == {12000}, form  # a part month: its cent share
        assert abs(total(purchases, "ListCost") - 40000) <= Decimal("0.01") and total(purchases, "ContractedCost") == 24000, form
        assert {p["ChargeFrequency"] for p in purchases} == {"Recurring"}, form  # a monthly term
    # Half the lease (the range ends before it does): each form bills the purchases, the same.
    half = CostQuery(start=date(2026, 12, 1), end=date(2026, 12, 31))
    billed = {form: total(focus_export(finance, half, form), "BilledCost") for form in EXPORTS}
    assert billed == dict.fromkeys(EXPORTS, Decimal(24000)), billed


# --------------------------------------------------------------------------- lease months


def test_a_lease_bought_mid_hour_is_a_purchase_a_month_from_the_hour_it_was_bought_in():
    bought = datetime(2026, 12, 10, 13, 27, 41, tzinfo=UTC)
    start, end = floor_hour(bought), ceil_hour(add_months(bought, 3))
    spans = list(lease_month_spans(start, end, bought))
    assert [(a.isoformat()[:13], b.isoformat()[:13]) for a, b, _ in spans] == [
        ("2026-12-10T13", "2027-01-10T14"), ("2027-01-10T14", "2027-02-10T14"), ("2027-02-10T14", "2027-03-10T14"),
    ]  # fmt: skip
    assert [months for _, _, months in spans] == [1, 1, 1]
    # A successor holding the lease from the 20th holds part of the first month, pro rata.
    taken = datetime(2026, 12, 20, 8, tzinfo=UTC)
    first = next(iter(lease_month_spans(taken, end, bought)))
    assert first[:2] == (taken, datetime(2027, 1, 10, 14, tzinfo=UTC)) and first[2] == Fraction(510, 745)
    # A lease without a moment it was bought keeps calendar months from its start.
    assert [m for _, _, m in lease_month_spans(start, add_months(start, 1) + HOUR)] == [1, Fraction(1, 744)]


def test_the_purchases_of_a_lease_bought_mid_hour_add_up_to_its_payment():
    bought = datetime(2026, 12, 10, 13, 27, 41, tzinfo=UTC)
    lease = Lease("c", "n-0", "p", "t", floor_hour(bought), ceil_hour(add_months(bought, 3)), Decimal("20000.00"), 8,
                  payment=Decimal("57000.01"), bought=bought)  # fmt: skip
    rows = purchase_rows(lease, FocusAccount(billing_account_id="a", billing_account_name="A"))
    # One purchase for the term, billed when paid (FinOps review B; it was a row per month).
    assert len(rows) == 1 and rows[0]["BilledCost"] == Decimal("57000.01")
    assert rows[0]["PricingQuantity"] == 3
