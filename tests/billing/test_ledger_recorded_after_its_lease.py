"""A lease period recorded after metering had closed every hour of its lease (seed C1; issue 20):
a payment settled only after the whole lease it bought was metered (a worker dead for a whole
lease, a cloud whose answers were lost until the renewed lease had run out). No hour of its
lease is open to spread it over (`lease_ledger.hour_open`), and a metered hour is never
restated: its share is charged whole in the first open hour, as a correction line of the
pool's team (idle capacity, component `correction`), so what was debited is still charged
back to the cent, once, in the chargeback and in both FOCUS exports.

The cloud is the simulated one; the database, the controller, metering and the ledger are the
real ones; the clock is virtual."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from functools import partial

import pytest
from django.db import connection

from billing import chargeback
from billing import services as billing_services
from billing.hours import HOUR, ceil_hour, floor_hour
from billing.models import CostRecord, LeasePeriod, MeterRun
from billing.selectors import CostQuery
from pools.controllers import lifecycle
from pools.models import GpuNodePool, PoolOrder
from pools.models.cloud import SimPayment
from pools.providers import simulated
from pools.services import pools as services
from tests.billing.billing_helpers import focus_export
from tests.billing.test_ledger_recorded_late import LEASE_END, NOTICE, RENEWED_END, AnswersLate
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, live_nodes, reconcile, run_until
from tests.race import concurrently

QUERY = CostQuery(start=date(2026, 12, 1), end=date(2027, 2, 28))
HOLE = T0 + 10 * 24 * HOUR  # an hour of the lease metered only after the period is recorded


def _meter(first, last) -> None:
    """Meter the complete hours [first, last), as the hourly task does."""
    hour = first
    while hour < last:
        billing_services.meter_hour(hour=hour)
        hour += HOUR


def _charged(pool) -> Decimal:
    return sum(CostRecord.objects.filter(pool=pool).values_list("amount", flat=True), Decimal(0))


def _total(rows, column: str, **where) -> Decimal:
    return sum((Decimal(r[column]) for r in rows if all(r[k] == v for k, v in where.items())), Decimal(0))


def _capacity_settled_after_its_lease(actors):
    """An order debited as its pool's delete began, its answer lost, and no pass for the whole
    lease while metering closed every hour of it but `HOLE` (below the newest metered hour:
    `hour_open` does not see it); the pass that settles it (two hours after the lease's end)
    puts the capacity on the ledger, released unused. Returns (pool, order, the settling pass's
    first open hour)."""
    pool = approved_pool(actors, make_document("late", nodeCount={"min": 2, "max": 2}))
    order = pool.orders.get()
    simulated.failure_inject(step=simulated.PAY_LOST, token_prefix=str(order.pk))
    assert lifecycle.reconcile_all(now=T0)[0].error.startswith("TimeoutError")
    services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), now=T0 + TICK)
    settled = ceil_hour(LEASE_END) + 2 * HOUR
    _meter(floor_hour(T0), HOLE)  # the worker is gone a whole lease; metering goes on, but for
    _meter(HOLE + HOUR, settled)  # an hour a killed catch-up left, metered later

    reconcile(pool, settled + TICK)

    pool.refresh_from_db()
    assert pool.deleted_at is not None and PoolOrder.objects.get(pk=order.pk).status == "Paid"
    return pool, order, settled


@pytest.mark.django_db
def test_unused_capacity_settled_after_its_whole_lease_was_metered_is_charged_back_in_full(actors):
    pool, order, settled = _capacity_settled_after_its_lease(actors)
    debited = SimPayment.objects.get(order_id=order.pk).amount
    assert debited == order.amount == sum(LeasePeriod.objects.filter(order=order).values_list("amount", flat=True))
    assert _charged(pool) == 0

    _meter(settled, settled + 2 * HOUR)
    assert not billing_services.meter_hour(hour=settled).metered  # a rerun charges nothing more
    assert billing_services.meter_hour(hour=HOLE).metered  # nor does the hole's catch-up: the share is charged whole

    assert _charged(pool) == debited
    # One correction line in the first open hour, the pool's team's idle capacity with the
    # nodes' labels (what chargeback splits by), nothing in the hours metered before.
    (line,) = CostRecord.objects.filter(pool=pool)
    assert (line.hour, line.component, line.cost_kind, line.team_id, line.amount) == (settled, "correction", "idle", pool.team_id, debited)
    assert line.labels["team"] == "algorithm" and line.gpu_class
    groups = chargeback.chargeback(user=actors["finance"], query=QUERY)
    assert [(dict(g.key)["charged_team"], dict(g.key)["team"], g.kind, g.amount) for g in groups if g.amount] == [("algorithm", "algorithm", "idle", debited)]
    # Both FOCUS exports: the lease bought and amortised in that hour, the usage row the
    # commitment's unused part, described as the correction it is.
    for form in ("daily", "hourly", "detail"):
        rows = focus_export(actors["finance"], QUERY, form)
        assert _total(rows, "BilledCost") == _total(rows, "EffectiveCost") == debited, form
        purchases = [r for r in rows if r["ChargeCategory"] == "Purchase"]
        assert _total(purchases, "BilledCost") == debited and len(purchases) == order.node_count, form
        assert {r["ChargePeriodStart"] for r in purchases} == {f"{settled:%Y-%m-%dT%H:%M:%SZ}"}, form
        usage = [r for r in rows if r["ChargeCategory"] == "Usage"]
        assert usage and {r["ChargePeriodStart"][:10] for r in usage} == {f"{settled:%Y-%m-%d}"}, form
        assert all("recorded after metering had closed every one of" in r["ChargeDescription"] for r in usage), form
        assert {(r["BilledCost"], r["CommitmentDiscountStatus"], r["SubAccountName"], r["ChargeClass"]) for r in usage} == {("0.00", "Unused", "algorithm", "")}, form
    detail = [r for r in focus_export(actors["finance"], QUERY, "detail") if r["ChargeCategory"] == "Usage"]
    assert {r["ChargePeriodStart"] for r in detail} == {f"{settled:%Y-%m-%dT%H:%M:%SZ}"}
    assert {r["CommitmentDiscountId"] for r in detail} == {r["ResourceId"] for r in purchases}


@pytest.mark.django_db
def test_a_renewal_settled_after_the_whole_renewed_lease_is_charged_back_in_full(actors):
    """The renewal is debited three days before the lease ends, and the cloud's answers time out
    until three hours after the *renewed* lease's end: the node runs on all month, on no
    period, while metering closes those hours. The renewal's debit is charged whole in the
    first open hour to the pool's team, once."""
    pool = approved_pool(actors, make_document("renewed", autoRenew=True, nodeCount={"min": 1, "max": 1}))
    run_until(pool, T0)
    notice_at = LEASE_END - NOTICE + timedelta(minutes=1)
    reconcile(pool, notice_at)
    renewal = PoolOrder.objects.get(pool=pool, kind="renew")
    answers_from = RENEWED_END + 3 * HOUR
    cloud = AnswersLate(answers_from=answers_from)
    for moment in (notice_at + timedelta(minutes=1), LEASE_END + timedelta(minutes=1), RENEWED_END + 2 * HOUR):
        with pytest.raises(TimeoutError):
            lifecycle.pool_reconcile(pool_id=pool.pk, now=moment, cloud=cloud)
    assert PoolOrder.objects.get(pk=renewal.pk).status == "Paying" and len(live_nodes(pool)) == 1
    _meter(LEASE_END, answers_from)

    lifecycle.pool_reconcile(pool_id=pool.pk, now=answers_from + TICK, cloud=cloud)

    assert PoolOrder.objects.get(pk=renewal.pk).status == "Paid"
    _meter(answers_from, answers_from + 2 * HOUR)
    charged = CostRecord.objects.filter(pool=pool, hour__gte=LEASE_END)
    assert sum(charged.values_list("amount", flat=True)) == renewal.amount == SimPayment.objects.get(order_id=renewal.pk).amount
    (line,) = charged.filter(component="correction")
    assert (line.hour, line.cost_kind, line.team_id, line.amount) == (answers_from, "idle", pool.team_id, renewal.amount)
    [period] = LeasePeriod.objects.filter(order=renewal)
    assert (period.lease_start, period.lease_end, period.amount) == (LEASE_END, RENEWED_END, renewal.amount)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent claims need PostgreSQL (SQLite serialises writers)")
def test_two_workers_metering_the_correction_hour_charge_it_once(actors):
    pool, order, settled = _capacity_settled_after_its_lease(actors)
    results = concurrently(*[partial(billing_services.meter_hour, hour=settled)] * 2)
    assert sorted(r.metered for r in results) == [False, True]
    assert MeterRun.objects.filter(hour=settled).count() == 1
    assert _charged(pool) == order.amount
