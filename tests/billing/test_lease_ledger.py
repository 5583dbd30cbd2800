"""Issue 20 item 1: preemptible prices per lease term, quoted and debited at order time (D2:
preemptible pools are cheaper), and the chargeback of a subscription node over its lease adds
up to what was debited for it, to the cent (C1), through reclaims (D2) and renewals (D2)."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.core.exceptions import ValidationError as ModelValidationError
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from billing import focus_selectors, metering, services
from billing.hours import HOUR, ceil_hour, floor_hour
from billing.lease_costs import add_months, period_hour_cost, split_amount
from billing.models import LeasePeriod, LeaseTerm, NodePrice
from billing.pricing import Quote
from billing.selectors import CostQuery
from pools.core.errors import ValidationError
from pools.models import Node, PoolOrder
from pools.models.cloud import SimPayment
from pools.providers import simulated
from pools.providers.simulated import SimulatedCloud
from pools.services import pools as pool_services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool, live_nodes, reconcile, run_until

NOTICE = timedelta(days=3)  # EBCLOUD_LEASE_NOTICE_SECONDS default
CENT = Decimal("0.01")

# --------------------------------------------------------------------------- pure arithmetic

moments = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
)
cents = st.integers(min_value=1, max_value=10**9).map(lambda c: Decimal(c) * CENT)


@settings(max_examples=60, deadline=None)
@given(amount=cents, start=moments, months=st.sampled_from([1, 2, 3, 12]), cut=st.integers(0, 10**6))
def test_a_period_s_hours_add_up_to_its_debit_however_the_hours_are_shared(amount, start, months, cut):
    """C1: whatever the lease's start (any second) and length, its hours cost exactly the debit,
    and any hand-over hour splits it into two parts that add up to it."""
    end = add_months(start, months)
    first, last = floor_hour(start), ceil_hour(end)
    hours = [first + i * HOUR for i in range((last - first) // HOUR)]
    costs = [period_hour_cost(amount, start, end, h) for h in hours]
    assert sum(costs) == amount
    assert max(costs) - min(costs) <= CENT  # spread evenly, to the cent
    split = cut % len(hours)
    assert sum(costs[:split]) + sum(costs[split:]) == amount
    assert period_hour_cost(amount, start, end, first - HOUR) is None
    assert period_hour_cost(amount, start, end, last) is None


@settings(max_examples=200, deadline=None)
@given(amount=cents, parts=st.integers(1, 64))
def test_an_order_s_debit_splits_into_node_shares_that_add_up_to_it(amount, parts):
    shares = [split_amount(amount, parts, i) for i in range(parts)]
    assert sum(shares) == amount
    assert max(shares) - min(shares) <= CENT


@settings(max_examples=200, deadline=None)
@given(
    unit=cents,
    nodes=st.integers(1, 50),
    months=st.sampled_from([1, 3, 12]),
    discount=st.integers(0, 9999).map(lambda d: Decimal(d) / 10000),
)
def test_a_quote_is_nodes_times_the_node_price_to_the_cent(unit, nodes, months, discount):
    """Each node's share of the debit is then the same whole number of cents."""
    quote = Quote(unit_monthly_price=unit, nodes=nodes, months=months, discount=discount, currency="CNY")
    assert quote.amount == quote.node_monthly_price * nodes * months
    assert quote.node_monthly_price == (unit * (1 - discount)).quantize(CENT, ROUND_HALF_UP)  # half a cent rounds up, as on an invoice


# --------------------------------------------------------------------------- the price book


def test_the_demo_price_book_sells_preemptible_nodes_at_60_percent_of_the_guaranteed_price(catalog):
    """D2: a preemptible pool is cheaper, on every lease term (docs/guide-finance.md)."""
    cloud = SimulatedCloud()
    now = datetime(2026, 12, 1, tzinfo=UTC)
    for term in LeaseTerm.objects.all():
        guaranteed = cloud.quote(node_type="GPU_8_CARD", gpu_model="A100_80G", lease_type=term.lease_type, nodes=2, at=now)
        preemptible = cloud.quote(node_type="GPU_8_CARD", gpu_model="A100_80G", lease_type=term.lease_type, nodes=2, at=now, preemptible=True)
        assert preemptible.node_monthly_price == (guaranteed.node_monthly_price * Decimal("0.60")).quantize(CENT)
        assert preemptible.amount < guaranteed.amount


def test_a_term_without_a_preemptible_price_refuses_a_preemptible_quote(catalog):
    LeaseTerm.objects.filter(lease_type="yearly").update(preemptible_discount=None)
    with pytest.raises(ValidationError, match="no preemptible price for the yearly lease term") as error:
        SimulatedCloud().quote(node_type="GPU_8_CARD", gpu_model="A100_80G", lease_type="yearly", nodes=1, at=datetime(2026, 12, 1, tzinfo=UTC), preemptible=True)
    assert [e.field for e in error.value.errors] == ["spec.preemptible"]


def test_a_preemptible_discount_outside_0_to_1_is_refused_with_its_field(catalog):
    """The admin form validates the model: a discount of 150% would make a negative price."""
    term = LeaseTerm.objects.get(lease_type="monthly")
    for bad in (Decimal("1.5"), Decimal("-0.1")):
        term.preemptible_discount = bad
        with pytest.raises(ModelValidationError) as error:
            term.full_clean()
        assert list(error.value.message_dict) == ["preemptible_discount"]
    assert LeaseTerm.objects.get(pk=term.pk).preemptible_discount == Decimal("0.4")  # unchanged


def test_a_preemptible_pool_s_order_is_quoted_and_debited_at_the_preemptible_price(actors):
    """The issue's example: 20,000 a month guaranteed, so 12,000 preemptible, debited as such."""
    start = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    pool = approved_pool(actors, make_document("spot", preemptible=True, nodeCount={"min": 1, "max": 1}), now=start)
    order = pool.orders.get()
    list_price = NodePrice.objects.get(node_type__name="GPU_8_CARD", gpu_model__name="A100_80G").monthly_price
    assert (order.unit_monthly_price, order.discount, order.amount) == (list_price, Decimal("0.4"), list_price * Decimal("0.6"))
    page = Client()
    page.force_login(actors["admin"])
    row = page.get("/orders/?status=").content.decode()  # any status: this one is approved
    assert f"{order.amount} CNY / 1 mo" in row and f"{list_price} a node-month less 40%, preemptible price" in row
    run_until(pool, start)
    assert SimPayment.objects.get(order_id=order.pk).amount == order.amount
    node = live_nodes(pool)[0]
    assert node.billing == "preemptible"
    # Its chargeback is the lease's share of that debit, not the hourly on-demand rate.
    collected = metering.usage_collect(hour=floor_hour(start) + HOUR)
    [record] = [r for r in collected.records if r.kind == "node"]
    hours = (ceil_hour(node.lease_end) - floor_hour(node.lease_start)) // HOUR
    assert record.amount in {(order.amount / hours).quantize(CENT, rounding) for rounding in ("ROUND_FLOOR", "ROUND_CEILING")}


# --------------------------------------------------------------------------- the property


def _node_charges(pool, last_hour) -> dict[str, Decimal]:
    """Every hour of the pool's leases priced by metering's node collection: cost per node."""
    charges: dict[str, Decimal] = defaultdict(Decimal)
    hour = floor_hour(pool.orders.order_by("created_at").first().created_at)
    while hour <= last_hour:
        for record in metering.node_usage_collect(hour=hour).records:
            for name in record.nodes_billed:  # alike nodes, one record: each its equal share
                charges[name] += record.amount / len(record.nodes_billed)
        hour += HOUR
    return charges


def _scenario(rng: random.Random, actors) -> tuple:
    """A random pool run by the real controller: preemptible or not, 1-3 nodes, a monthly or
    quarterly lease starting at any second, reclaims at random moments, an autoRenew renewal."""
    start = datetime(2026, 12, 1, 8, tzinfo=UTC) + timedelta(seconds=rng.randrange(3600 * 24 * 27))
    preemptible = rng.random() < 0.7
    nodes = rng.randint(1, 3)
    lease_type = rng.choice(["monthly", "monthly", "quarterly"])
    renew = lease_type == "monthly" and rng.random() < 0.6
    document = make_document(
        f"pool-{rng.randrange(10**6)}", preemptible=preemptible, nodeCount={"min": nodes, "max": nodes},
        leaseType=lease_type, autoRenew=renew,
    )  # fmt: skip
    pool = approved_pool(actors, document, now=start)
    now = run_until(pool, start)
    lease_end = live_nodes(pool)[0].lease_end
    reclaims = sorted(now + timedelta(seconds=rng.randrange(int((lease_end - now).total_seconds()) - 4 * 3600)) for _ in range(rng.randint(0, 3) if preemptible else 0))
    if renew:
        reclaims.append(lease_end - NOTICE + timedelta(minutes=1))
        reclaims.sort()
    for moment in reclaims:
        if renew and moment == lease_end - NOTICE + timedelta(minutes=1):
            reconcile(pool, moment)  # autoRenew orders the renewal, the next pass pays it
            reconcile(pool, moment + timedelta(minutes=1))
            continue
        victim = rng.choice(live_nodes(pool))
        simulated.reclaim_inject(provider_id=victim.provider_id, now=moment)
        if rng.random() < 0.5:
            run_until(pool, moment, limit=timedelta(hours=3))  # replaced and Ready again
        else:
            reconcile(pool, moment)  # reclaimed; the replacement is ordered but not provisioned yet
            reconcile(pool, moment + timedelta(minutes=3))
    return pool, preemptible, renew, len(reclaims) - (1 if renew else 0)


@pytest.mark.parametrize("seed", range(5))
def test_the_chargeback_of_every_subscription_slot_sums_to_what_was_debited_for_it(actors, seed):
    """C1 + D2, over random pools, lease terms, reclaims and renewals: every hour of every lease
    metered by the real collection, each node slot's charges (over all its holders) equal its
    share of each order that paid it, to the cent; the pool's total equals the debits."""
    rng = random.Random(seed)
    pool, preemptible, renewed, reclaims = _scenario(rng, actors)
    periods = LeasePeriod.objects.filter(node__pool=pool).select_related("node", "order")
    last_hour = max(ceil_hour(p.lease_end) for p in periods) - HOUR
    charges = _node_charges(pool, last_hour + HOUR)

    debited = sum(SimPayment.objects.filter(order_id__in=pool.orders.values("pk")).values_list("amount", flat=True), Decimal(0))
    assert sum(charges.values()) == debited
    # Per slot: the charges of its holders (a node, its replacements) add up to the slot's
    # shares of the orders that paid it (the first order, then each renewal).
    slots = _slots(periods)
    charged: dict[int, Decimal] = defaultdict(Decimal)
    for name, amount in charges.items():
        charged[slots.of_node[name]] += amount
    shares: dict[int, Decimal] = defaultdict(Decimal)
    for (order_id, slot), root in slots.of_share.items():
        order = PoolOrder.objects.get(pk=order_id)
        shares[root] += split_amount(order.amount, order.node_count, slot)
    assert dict(charged) == dict(shares)
    assert len(shares) == pool.max_nodes
    if preemptible:
        assert set(Node.objects.filter(pool=pool).values_list("billing", flat=True)) == {"preemptible"}
    assert Node.objects.filter(pool=pool, release_reason="Reclaimed").count() == reclaims
    assert PoolOrder.objects.filter(pool=pool, kind="renew", status="Paid").exists() == renewed


class _Slots:
    """Node slots as the ledger's rows connect them: the rows of one (order, slot) share are
    one slot, and so are all the rows of one node."""

    def __init__(self):
        self.parent: dict = {}

    def root(self, key):
        while self.parent.setdefault(key, key) != key:
            key = self.parent[key]
        return key

    def join(self, a, b):
        self.parent[self.root(a)] = self.root(b)


def _slots(periods):
    forest = _Slots()
    for p in periods:
        forest.join(("node", p.node.name), ("share", p.order_id, p.slot))
    ids: dict = {}

    def number(key):
        return ids.setdefault(forest.root(key), len(ids))

    class Found:
        of_node = {p.node.name: number(("node", p.node.name)) for p in periods}
        of_share = {(p.order_id, p.slot): number(("share", p.order_id, p.slot)) for p in periods}

    return Found


# --------------------------------------------------------------------------- unused commitment


def test_a_reclaimed_preemptible_node_s_unused_prepaid_hours_are_unused_commitment_in_focus(actors):
    """The choice documented in docs/guide-finance.md: no credit; the reclaimed node's prepaid
    hours that no replacement takes over stay on it, idle, and FOCUS shows them as the unused
    part of its lease commitment; its purchase rows are its share of the debit."""
    start = datetime(2026, 12, 1, 8, 20, tzinfo=UTC)
    pool = approved_pool(actors, make_document("spot", preemptible=True, nodeCount={"min": 2, "max": 2}), now=start)
    run_until(pool, start)
    order = pool.orders.get()
    reclaimed, kept = live_nodes(pool)
    moment = datetime(2026, 12, 1, 10, 30, tzinfo=UTC)
    simulated.reclaim_inject(provider_id=reclaimed.provider_id, now=moment)
    pool_services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1, max_nodes=1, now=moment)  # no replacement
    run_until(pool, moment, limit=timedelta(minutes=10))
    reclaimed.refresh_from_db()
    assert (reclaimed.phase, reclaimed.release_reason) == ("Terminated", "Reclaimed")
    assert live_nodes(pool) == [Node.objects.get(pk=kept.pk)]

    hour = floor_hour(start)
    while hour < datetime(2026, 12, 1, 14, tzinfo=UTC):
        services.meter_hour(hour=hour)
        hour += HOUR
    query = CostQuery(start=date(2026, 12, 1), end=date(2027, 1, 1), pool="spot")  # the lease ends Jan 1
    rows = list(focus_selectors.focus_rows_for_user(user=actors["finance"], query=query))  # the node-level (detail) export
    share = order.amount / 2
    purchases = [r for r in rows if r["ChargeCategory"] == "Purchase" and r["ResourceId"].endswith(reclaimed.name)]
    assert sum(r["BilledCost"] for r in purchases) == share
    after = [
        r for r in rows
        if r["ChargeCategory"] == "Usage" and r["ResourceId"] == reclaimed.name and r["ChargePeriodStart"] >= ceil_hour(reclaimed.terminated_at)
    ]  # fmt: skip
    assert [r["ChargePeriodStart"].hour for r in after] == [11, 12, 13]
    spread = (floor_hour(reclaimed.lease_start), ceil_hour(reclaimed.lease_end))
    for row in after:
        assert (row["CommitmentDiscountStatus"], row["PricingCategory"], row["BilledCost"]) == ("Unused", "Committed", Decimal("0.00"))
        assert row["EffectiveCost"] == period_hour_cost(share, *spread, row["ChargePeriodStart"])
        assert row["CommitmentDiscountId"] == purchases[0]["CommitmentDiscountId"]
    # Nothing credited back: the account paid the order once.
    assert list(SimPayment.objects.values_list("amount", flat=True)) == [order.amount]
