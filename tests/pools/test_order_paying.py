"""Paying a pool order crash-safely: the controller claims an order (Approved -> Paying) under
the order writers' locks, asks the cloud with no lock held, then settles it (Paid, or back to
Approved on a refusal). The cloud's debit stands whatever happens to the worker after it (the
simulated cloud's `pay_lost`: debited, the answer never comes back), so a delete or a lowered
`nodeCount.min` must never withdraw or reduce a Paying order, and the next pass settles it
with the same order id: Paid, one debit. The threaded tests need PostgreSQL."""

from __future__ import annotations

import threading
import time
from decimal import Decimal

import pytest
from django import db
from django.db import connection

from billing.models import Account, LeasePeriod
from pools.controllers import lifecycle
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.cloud import SimMachine, SimPayment
from pools.providers import simulated
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, reconcile

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent requests need PostgreSQL (SQLite has one writer)")


def _balance() -> Decimal:
    return Account.objects.get(name="default").balance


def _reasons(pool) -> list[str]:
    return list(PoolEvent.objects.filter(pool=pool).order_by("id").values_list("reason", flat=True))


def _answer_lost(pool) -> PoolOrder:
    """A pass whose payment the cloud debits and whose answer never comes back (a timeout, or
    the worker dying right after): the order is left Paying, the debit stands."""
    order = pool.orders.get()
    simulated.failure_inject(step=simulated.PAY_LOST, token_prefix=str(order.pk))
    [result] = lifecycle.reconcile_all(now=T0)
    assert result.error.startswith("TimeoutError"), result
    order.refresh_from_db()
    assert order.status == "Paying" and SimPayment.objects.filter(order_id=order.pk).count() == 1
    return order


@pytest.mark.django_db
@pytest.mark.parametrize("then", ["nothing", "delete", "lower-min"])
def test_a_payment_debited_but_unanswered_is_settled_paid_by_the_next_pass_with_one_debit(actors, then):
    pool = approved_pool(actors, make_document("lost", nodeCount={"min": 1, "max": 1}))
    balance = _balance()
    order = _answer_lost(pool)
    if then == "delete":
        services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), now=T0)
        assert GpuNodePool.objects.get(pk=pool.pk).phase == "Deleting"  # not gone while its payment is unsettled
    elif then == "lower-min":
        services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), min_nodes=0, now=T0)
    order.refresh_from_db()
    assert (order.status, order.node_count) == ("Paying", 1), "a Paying order is neither withdrawn nor reduced"

    reconcile(pool, T0 + TICK)

    order.refresh_from_db()
    assert order.status == "Paid"
    assert SimPayment.objects.filter(order_id=order.pk).count() == 1
    assert balance - _balance() == order.amount
    assert _reasons(pool).count("OrderPaid") == 1 and "OrderWithdrawn" not in _reasons(pool) and "OrderReduced" not in _reasons(pool)
    pool.refresh_from_db()
    if then == "delete":  # settled, then the delete goes on: no machine is ordered, but the debit is on the ledger
        assert pool.deleted_at is not None and not SimMachine.objects.exists()
        assert not Node.objects.filter(pool=pool).exclude(phase="Terminated").exists()
        assert sum(LeasePeriod.objects.filter(order=order).values_list("amount", flat=True)) == order.amount
        assert "CapacityReleasedUnused" in _reasons(pool)
    else:
        assert Node.objects.filter(pool=pool, order=order).count() == 1


@pytest.mark.django_db
def test_a_payment_refused_after_the_delete_withdraws_the_order_and_debits_nothing(actors):
    pool = approved_pool(actors, make_document("broke", nodeCount={"min": 1, "max": 1}))
    order = pool.orders.get()
    PoolOrder.objects.filter(pk=order.pk).update(status="Paying")  # a worker died after its claim, before asking the cloud
    services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), now=T0)
    simulated.failure_inject(step="pay", token_prefix=str(order.pk), message="card expired")
    reconcile(pool, T0 + TICK)
    order.refresh_from_db()
    assert (order.status, order.reason) == ("Withdrawn", "the pool was deleted")
    assert not SimPayment.objects.exists()
    assert _reasons(pool)[-3:] == ["PaymentDeclined", "OrderWithdrawn", "PoolDeleted"]


@pytest.mark.django_db
def test_a_payment_refused_after_the_minimum_was_lowered_withdraws_the_order(actors):
    """A minimum lowered while the order was Paying left it alone; once the cloud refuses it,
    it is trimmed as the minimum says, not paid by the next pass for a node nobody asks for."""
    pool = approved_pool(actors, make_document("trim", nodeCount={"min": 1, "max": 1}))
    order = pool.orders.get()
    PoolOrder.objects.filter(pk=order.pk).update(status="Paying")  # a worker died after its claim, before asking the cloud
    services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), min_nodes=0, now=T0)
    simulated.failure_inject(step="pay", token_prefix=str(order.pk), message="card expired")
    reconcile(pool, T0 + TICK)
    reconcile(pool, T0 + 2 * TICK)
    order.refresh_from_db()
    assert (order.status, order.reason) == ("Withdrawn", "nodeCount.min lowered to 0")
    assert not SimPayment.objects.exists() and not Node.objects.filter(pool=pool).exists()
    reasons = _reasons(pool)
    assert reasons.index("OrderWithdrawn") == reasons.index("PaymentDeclined") + 1


def _while_the_cloud_answers(pool, write) -> None:
    """Reconcile `pool` in a thread while the cloud takes 3 s to answer its payment; once the
    order is being paid (or 1 s on), `write` runs here and must finish before the answer: the
    order is still Paying then. The controller's pass is joined before returning."""
    order = pool.orders.get()
    errors: list = []

    def run():
        try:
            reconcile(pool, T0)
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            db.connection.close()

    simulated.latency_inject(step=simulated.PAY, seconds=3.0)
    worker = threading.Thread(target=run)
    try:
        worker.start()
        started = time.monotonic()
        while PoolOrder.objects.get(pk=order.pk).status != "Paying" and time.monotonic() < started + 1:
            time.sleep(0.05)
        write()
        assert PoolOrder.objects.get(pk=order.pk).status == "Paying", "the write waited for the cloud's answer"
    finally:
        worker.join(timeout=30)
        simulated.latency_inject(step=simulated.PAY, seconds=0)
    assert not errors, errors


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_delete_during_a_slow_payment_neither_waits_for_the_cloud_nor_withdraws_the_debited_order(actors):
    """The cloud debits at once and answers 3 s later. The delete lands meanwhile: it does not
    wait for the cloud (no lock is held across the call), leaves the Paying order alone, and no
    node is made for the order once the payment is settled, in the same pass, on the Deleting pool.
    The next pass puts the debit on the lease ledger, as capacity released unused, once."""
    pool = approved_pool(actors, make_document("slowpay", nodeCount={"min": 1, "max": 1}))
    balance = _balance()
    _while_the_cloud_answers(pool, lambda: services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), now=T0))
    order = pool.orders.get()
    assert order.status == "Paid" and balance - _balance() == order.amount
    assert not Node.objects.filter(pool=pool).exists(), "a node was made for a pool being deleted"
    assert "OrderWithdrawn" not in _reasons(pool)
    reconcile(pool, T0 + TICK)
    reconcile(pool, T0 + 2 * TICK)
    assert GpuNodePool.objects.get(pk=pool.pk).deleted_at is not None
    assert SimPayment.objects.filter(order_id=order.pk).count() == 1 and not SimMachine.objects.exists()
    assert list(Node.objects.filter(pool=pool).values_list("phase", "release_reason")) == [("Terminated", "PoolDeleted")]
    assert list(LeasePeriod.objects.filter(order=order).values_list("amount", flat=True)) == [order.amount]


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_slow_payment_holds_no_lock_that_another_pools_order_writes_wait_for(actors):
    """While the cloud takes its time over one pool's payment, a resize of another pool of the
    same region and model (it takes the same quota rows) goes through."""
    paying = approved_pool(actors, make_document("slow-a", nodeCount={"min": 1, "max": 2}))
    other = approved_pool(actors, make_document("slow-b", nodeCount={"min": 1, "max": 2}))
    _while_the_cloud_answers(paying, lambda: services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=other.pk), min_nodes=2, now=T0))
    assert paying.orders.get().status == "Paid" and other.orders.filter(kind="grow").count() == 1
