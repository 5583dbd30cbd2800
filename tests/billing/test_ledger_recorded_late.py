"""A lease period recorded after metering closed hours of its lease (seed C1; issue 20): metering
takes each complete hour once (`MeterRun`) and never again, so an hour metered before the
ledger knew of a debit is never charged for it. A payment settled hours late (a worker died
after the cloud debited it, or the cloud's answers timed out for hours) records its period
late: the capacity a pool's delete left unfilled (`lifecycle._unused_capacity_record`), a
renewal. Its share must still be charged exactly once: over the lease, the hours' charges add
up to what was debited, to the cent, and the FOCUS export's purchase rows equal it.

The cloud is the simulated one; the database, the controller, metering and the ledger are the
real ones."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest

from billing import focus_selectors, metering
from billing import services as billing_services
from billing.hours import HOUR, ceil_hour
from billing.models import CostRecord, LeasePeriod
from billing.selectors import CostQuery
from pools.controllers import lifecycle
from pools.models import GpuNodePool, Node, PoolOrder
from pools.models.cloud import SimPayment
from pools.providers import simulated
from pools.providers.simulated import SimulatedCloud
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, live_nodes, reconcile, run_until

NOTICE = timedelta(days=3)  # EBCLOUD_LEASE_NOTICE_SECONDS default
LEASE_END = T0.replace(year=2027, month=1)  # monthly lease paid at T0
RENEWED_END = T0.replace(year=2027, month=2)


def _meter(first, last) -> None:
    """Meter the complete hours [first, last), as the hourly task does."""
    hour = first
    while hour < last:
        billing_services.meter_hour(hour=hour)
        hour += HOUR


def _charged(pool, first, last, *, metered_until) -> Decimal:
    """The pool's charges for the hours [first, last): its cost records where metered (hours
    before `metered_until`), else what metering's node collection prices the hour at."""
    total = sum(CostRecord.objects.filter(pool=pool, hour__gte=first, hour__lt=min(last, metered_until)).values_list("amount", flat=True), Decimal(0))
    hour = max(first, metered_until)
    while hour < last:
        total += sum((r.amount for r in metering.node_usage_collect(hour=hour).records if r.pool_id == pool.pk), Decimal(0))
        hour += HOUR
    return total


@pytest.mark.django_db
def test_unused_capacity_recorded_hours_after_its_payment_is_charged_in_full(actors):
    """The cloud debits an order as the pool's delete begins, and its answer is lost; no pass
    runs for five hours, while metering closes them. The settle then puts the capacity on the
    ledger, released unused: its whole debit is charged from the first hour still open, once."""
    pool = approved_pool(actors, make_document("late", nodeCount={"min": 2, "max": 2}))
    order = pool.orders.get()
    simulated.failure_inject(step=simulated.PAY_LOST, token_prefix=str(order.pk))
    assert lifecycle.reconcile_all(now=T0)[0].error.startswith("TimeoutError")
    services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), now=T0 + TICK)
    _meter(T0, T0 + 5 * HOUR)  # the worker is gone; metering goes on

    reconcile(pool, T0 + 5 * HOUR + TICK)

    pool.refresh_from_db()
    assert pool.deleted_at is not None and PoolOrder.objects.get(pk=order.pk).status == "Paid"
    debited = SimPayment.objects.get(order_id=order.pk).amount
    periods = LeasePeriod.objects.filter(order=order)
    assert sum(p.amount for p in periods) == debited == order.amount
    _meter(T0 + 5 * HOUR, T0 + 7 * HOUR)
    assert _charged(pool, T0, ceil_hour(LEASE_END), metered_until=T0 + 7 * HOUR) == debited
    # The hours metered before the record are closed: the periods are spread from the first open one.
    assert {(p.lease_start, p.held_from, p.lease_end) for p in periods} == {(T0 + 5 * HOUR, T0 + 5 * HOUR, LEASE_END)}
    # The FOCUS export's purchases are the debit, and no usage row of a closed hour names the holders.
    query = CostQuery(start=date(2026, 12, 1), end=date(2027, 1, 1), pool=f"late#{pool.pk}")
    rows = list(focus_selectors.focus_rows_for_user(user=actors["finance"], query=query))
    assert sum(r["BilledCost"] for r in rows if r["ChargeCategory"] == "Purchase") == debited
    assert min(r["ChargePeriodStart"] for r in rows if r["ChargeCategory"] == "Usage") == T0 + 5 * HOUR
    assert Node.objects.filter(pool=pool, phase="Terminated").count() == 2


class AnswersLate(SimulatedCloud):
    """The simulated cloud, whose answers to payments time out until `answers_from`: the debit
    is made at the first request, and the controller learns of it only then."""

    def __init__(self, answers_from):
        super().__init__()
        self.answers_from = answers_from

    def pay(self, **kwargs):
        payment = super().pay(**kwargs)
        if kwargs["now"] < self.answers_from:
            raise TimeoutError(f"the payment of order #{kwargs['order_id']} was sent, but no answer came back in time")
        return payment


@pytest.mark.django_db
def test_a_renewal_settled_after_the_lease_it_renews_ended_is_charged_in_full(actors):
    """The renewal is debited three days before the lease ends, and the cloud's answers time
    out until three hours after its end: the node runs on (a pass settles the payment before
    it looks at leases, and a pass without an answer goes no further), and metering closes
    those hours, when no period held them. The renewal's debit is charged from the first
    open hour: all of it, once."""
    pool = approved_pool(actors, make_document("renewed", autoRenew=True, nodeCount={"min": 1, "max": 1}))
    run_until(pool, T0)
    notice_at = LEASE_END - NOTICE + timedelta(minutes=1)
    reconcile(pool, notice_at)
    renewal = PoolOrder.objects.get(pool=pool, kind="renew")
    cloud = AnswersLate(answers_from=LEASE_END + 3 * HOUR)
    for moment in (notice_at + timedelta(minutes=1), LEASE_END + timedelta(minutes=1), LEASE_END + 2 * HOUR):
        with pytest.raises(TimeoutError):
            lifecycle.pool_reconcile(pool_id=pool.pk, now=moment, cloud=cloud)
    assert PoolOrder.objects.get(pk=renewal.pk).status == "Paying" and len(live_nodes(pool)) == 1
    _meter(LEASE_END, LEASE_END + 3 * HOUR)

    lifecycle.pool_reconcile(pool_id=pool.pk, now=LEASE_END + 3 * HOUR + TICK, cloud=cloud)

    [node] = live_nodes(pool)
    assert PoolOrder.objects.get(pk=renewal.pk).status == "Paid" and node.lease_end == RENEWED_END
    _meter(LEASE_END + 3 * HOUR, LEASE_END + 5 * HOUR)
    assert _charged(pool, LEASE_END, ceil_hour(RENEWED_END), metered_until=LEASE_END + 5 * HOUR) == renewal.amount
    [period] = LeasePeriod.objects.filter(order=renewal)
    assert (period.amount, period.lease_start, period.lease_end) == (renewal.amount, LEASE_END + 3 * HOUR, RENEWED_END)
