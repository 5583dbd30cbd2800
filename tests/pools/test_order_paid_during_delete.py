"""A capacity order whose pool is deleted while it is being paid (seed C1, D2; design §3): the
cloud debits a month of capacity the team ordered, and the delete never withdraws a Paying
order, so the order ends Paid while a Deleting pool makes no node for it. The debit must still
be on the lease ledger and charged back to the pool's team, as the unused capacity of that
lease (a pool's released nodes keep their leases billed the same way), and be listed among the
FOCUS export's purchases: what was debited equals what is charged back. The simulated cloud
offers no refund (`CloudProvider` has none), so the money stays spent.

The delete is driven through the real service from inside the cloud's `pay()`: a cloud that
answers only once the lead's delete has gone through (the provider is the one part a test may
replace; the database, the controller and the ledger are the real ones)."""

from __future__ import annotations

import threading
from datetime import date
from decimal import Decimal

import pytest
from django import db
from django.db import connection

from billing import focus_selectors, metering
from billing import services as billing_services
from billing.hours import HOUR, ceil_hour, floor_hour
from billing.lease_costs import period_hour_cost
from billing.models import CostRecord, LeasePeriod
from billing.selectors import CostQuery
from pools.controllers import lifecycle
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.cloud import SimMachine, SimPayment
from pools.providers import get_cluster_backend
from pools.providers.simulated import SimulatedCloud
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, reconcile

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has one writer)")


class DeletedWhilePaying(SimulatedCloud):
    """The simulated cloud, where the pool's lead deletes the pool while the cloud handles its
    `call`-th payment request: the first (the debit) lands between the controller's claim and its
    settle; the second (`_node_create` reading the payment again) between the settle and the
    node the order would get."""

    def __init__(self, *, lead, pool_id: int, call: int = 1):
        super().__init__()
        self.lead, self.pool_id, self.call, self.calls = lead, pool_id, call, 0

    def pay(self, **kwargs):
        payment = super().pay(**kwargs)
        self.calls += 1
        if self.calls == self.call:
            services.pool_delete(user=self.lead, pool=GpuNodePool.objects.get(pk=self.pool_id), now=kwargs["now"])
        return payment


def _debited(pool) -> Decimal:
    return sum(SimPayment.objects.filter(order_id__in=pool.orders.values("pk")).values_list("amount", flat=True), Decimal(0))


def _charged_over_the_leases(pool) -> Decimal:
    """Every hour of the pool's leases, priced by metering's node collection (what chargeback
    splits into used and idle), summed."""
    ends = [n.lease_end for n in Node.objects.filter(pool=pool) if n.lease_end] or [T0 + 40 * 24 * HOUR]
    total, hour = Decimal(0), floor_hour(T0)
    while hour < ceil_hour(max(ends)):
        total += sum((r.amount for r in metering.node_usage_collect(hour=hour).records if r.pool_id == pool.pk), Decimal(0))
        hour += HOUR
    return total


def _deleted_during_payment(actors, *, call: int, nodes: int = 2) -> tuple[GpuNodePool, PoolOrder]:
    pool = approved_pool(actors, make_document("gone", nodeCount={"min": nodes, "max": nodes}))
    lifecycle.pool_reconcile(pool_id=pool.pk, now=T0, cloud=DeletedWhilePaying(lead=actors["lead"], pool_id=pool.pk, call=call))
    order = pool.orders.get()
    assert order.status == "Paid" and _debited(pool) == order.amount > 0
    assert GpuNodePool.objects.get(pk=pool.pk).phase == "Deleting", "the paid order's capacity is recorded before the pool goes"
    reconcile(pool, T0 + TICK)
    pool.refresh_from_db()
    assert pool.deleted_at is not None
    return pool, order


@pytest.mark.django_db
@pytest.mark.parametrize("call", [1, 2], ids=["between-claim-and-settle", "between-settle-and-node"])
def test_an_order_paid_while_its_pool_is_deleted_is_charged_back_as_unused_capacity(actors, call):
    pool, order = _deleted_during_payment(actors, call=call)
    debited = _debited(pool)

    # What was debited is what is charged back, hour by hour over the lease.
    assert _charged_over_the_leases(pool) == debited

    # On the ledger: the order's slots, each its share, for the lease the debit bought.
    periods = list(LeasePeriod.objects.filter(order=order).order_by("slot"))
    assert [p.slot for p in periods] == [0, 1] and sum(p.amount for p in periods) == debited
    assert {(p.lease_start, p.lease_end) for p in periods} == {(T0, T0.replace(year=2027, month=1))}
    # No machine was ordered and nothing runs: the capacity was released unused.
    assert not SimMachine.objects.exists()
    assert not Node.objects.filter(pool=pool).exclude(phase="Terminated").exists()
    holders = Node.objects.filter(pool=pool, order=order)
    assert {(n.phase, n.release_reason, n.provider_id, n.ready_at) for n in holders} == {("Terminated", "PoolDeleted", "", None)}

    # The chargeback charges it to the pool's team, as idle capacity.
    for hour in (floor_hour(T0), floor_hour(T0) + HOUR):
        billing_services.meter_hour(hour=hour)
    costs = CostRecord.objects.filter(pool=pool)
    assert {(c.team_id, c.cost_kind, c.billing_kind) for c in costs} == {(pool.team_id, "idle", "monthly")}
    spread = [period_hour_cost(p.amount, p.lease_start, p.lease_end, h) for p in periods for h in (floor_hour(T0), floor_hour(T0) + HOUR)]
    assert sum(c.amount for c in costs) == sum(spread)

    # The FOCUS export lists the purchase: its purchase rows add up to the debit.
    query = CostQuery(start=date(2026, 12, 1), end=date(2027, 1, 1), pool=f"gone#{pool.pk}")
    rows = list(focus_selectors.focus_rows_for_user(user=actors["finance"], query=query))
    assert sum(r["BilledCost"] for r in rows if r["ChargeCategory"] == "Purchase") == debited
    assert {r["CommitmentDiscountStatus"] for r in rows if r["ChargeCategory"] == "Usage"} == {"Unused"}

    # The pool's history says what happened.
    [said] = PoolEvent.objects.filter(pool=pool, reason="CapacityReleasedUnused")
    assert said.message.startswith(f"Order #{order.pk} was paid ({order.amount} {order.currency}) as the pool's delete began")
    assert "team algorithm" in said.message


@pytest.mark.django_db
def test_a_second_pass_or_worker_does_not_add_the_unused_capacity_again(actors):
    pool, order = _deleted_during_payment(actors, call=1, nodes=1)
    before = list(LeasePeriod.objects.filter(order=order).values_list("pk", "amount"))
    # Another pass over the Deleting pool, as a worker that read it before it was finalised.
    GpuNodePool.objects.filter(pk=pool.pk).update(deleted_at=None, phase="Deleting")
    reconcile(pool, T0 + 2 * TICK)
    reconcile(pool, T0 + 3 * TICK)
    assert list(LeasePeriod.objects.filter(order=order).values_list("pk", "amount")) == before
    assert Node.objects.filter(pool=pool).count() == 1
    assert PoolEvent.objects.filter(pool=pool, reason="CapacityReleasedUnused").count() == 1


@pytest.mark.django_db
def test_paying_an_order_is_an_event_of_its_own_written_with_the_claim(actors):
    pool = approved_pool(actors, make_document("paying", nodeCount={"min": 1, "max": 1}))
    order = pool.orders.get()
    seen = {}

    class Watching(SimulatedCloud):
        def pay(self, **kwargs):  # the claim is committed before the cloud is first asked
            if not seen:
                seen["status"] = PoolOrder.objects.get(pk=order.pk).status
                seen["events"] = list(PoolEvent.objects.filter(pool=pool, reason="OrderPaying").values_list("message", flat=True))
            return super().pay(**kwargs)

    lifecycle.pool_reconcile(pool_id=pool.pk, now=T0, cloud=Watching())
    assert seen["status"] == "Paying"
    assert seen["events"] == [f"Order #{order.pk} is being paid: {order.amount} {order.currency}"]
    events = list(PoolEvent.objects.filter(pool=pool, node=None).order_by("id").values_list("reason", flat=True))
    assert events[events.index("OrderPaying") :][:3] == ["OrderPaying", "QuotaValidated", "OrderPaid"]


class Together(SimulatedCloud):
    """The simulated cloud, where `n` workers' payment requests answer together: each worker has
    read the payment (outside any lock) before any of them records it."""

    def __init__(self, barrier: threading.Barrier):
        super().__init__()
        self.barrier = barrier

    def pay(self, **kwargs):
        payment = super().pay(**kwargs)
        self.barrier.wait(timeout=20)
        return payment


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_two_workers_on_the_deleting_pool_at_once_record_its_unused_capacity_once(actors):
    """Even without the pool's claim (two workers whose claims overlapped), the slots are counted
    again under the pool's row lock: one holder per slot, one event, the debit once on the ledger."""
    pool = approved_pool(actors, make_document("twice", nodeCount={"min": 2, "max": 2}))
    lifecycle.pool_reconcile(pool_id=pool.pk, now=T0, cloud=DeletedWhilePaying(lead=actors["lead"], pool_id=pool.pk))
    order = pool.orders.get()
    assert (order.status, GpuNodePool.objects.get(pk=pool.pk).phase) == ("Paid", "Deleting")
    barrier, errors = threading.Barrier(2), []

    def worker():
        try:
            lifecycle._reconcile(pool.pk, T0 + TICK, Together(barrier), get_cluster_backend())
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            db.connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert sorted(LeasePeriod.objects.filter(order=order).values_list("slot", flat=True)) == [0, 1]
    assert sum(LeasePeriod.objects.filter(order=order).values_list("amount", flat=True)) == order.amount == _debited(pool)
    assert Node.objects.filter(pool=pool).count() == 2
    assert PoolEvent.objects.filter(pool=pool, reason="CapacityReleasedUnused").count() == 1
    assert GpuNodePool.objects.get(pk=pool.pk).deleted_at is not None
