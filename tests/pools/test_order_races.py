"""Orders written by several requests at once: two identical resizes order the growth once, and
a delete that meets an admin's decision (or the controller's payment) neither deadlocks nor
leaves money and orders disagreeing. Every writer of a pool's orders locks the pool's row
first. The threaded tests need PostgreSQL (SQLite has one writer); the first runs anywhere."""

from __future__ import annotations

import threading
import time

import pytest
from django import db
from django.db import connection, transaction

from pools.core.errors import ConflictError
from pools.models import GpuNodePool, PoolEvent, PoolOrder
from pools.models.cloud import SimPayment
from pools.providers.simulated import SimulatedCloud
from pools.selectors.pools import ordered_baseline
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, reconcile

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent requests need PostgreSQL (SQLite has one writer)")


def _threads(*named):
    """Run (name, fn) pairs in threads of those names, each with its own connection; the
    exceptions raised, by name."""
    errors = {}

    def run(name, fn):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - the test reads what each thread met
            errors[name] = exc
        finally:
            db.connection.close()

    threads = [threading.Thread(target=run, args=pair, name=pair[0]) for pair in named]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


@pytest.mark.django_db
def test_a_resize_landing_while_another_is_quoted_orders_the_growth_once(actors, monkeypatch):
    pool = approved_pool(actors, make_document("grow", nodeCount={"min": 2, "max": 8}))
    real_quote, nested = services._quote, []

    def quote_while_the_other_request_lands(*args, **kwargs):
        if not nested:  # the same resize from the CLI commits while the web's is being priced
            nested.append(True)
            services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), min_nodes=4, now=T0)
        return real_quote(*args, **kwargs)

    monkeypatch.setattr(services, "_quote", quote_while_the_other_request_lands)
    services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), min_nodes=4, now=T0)
    assert list(pool.orders.filter(kind="grow").values_list("node_count", flat=True)) == [2]
    assert ordered_baseline(pool=pool) == 4 == GpuNodePool.objects.get(pk=pool.pk).min_nodes


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_two_identical_resizes_at_once_order_the_growth_once(actors):
    pool = approved_pool(actors, make_document("grow", nodeCount={"min": 2, "max": 8}))
    for target in (4, 5, 6):
        barrier = threading.Barrier(2)

        def resize(target=target, barrier=barrier):
            fresh = GpuNodePool.objects.get(pk=pool.pk)
            barrier.wait()
            services.pool_resize(user=actors["lead"], pool=fresh, min_nodes=target)

        assert _threads(("web", resize), ("cli", resize)) == {}
        assert ordered_baseline(pool=pool) == target == GpuNodePool.objects.get(pk=pool.pk).min_nodes
    assert list(pool.orders.filter(kind="grow").order_by("pk").values_list("node_count", flat=True)) == [2, 1, 1]


def _slow_after(monkeypatch, thread_name, *, seconds=1.0):
    """Make the decision in thread `thread_name` linger right after it claimed the order (a busy
    database, a GC pause): the window in which a delete used to deadlock with it."""
    real_audit = services.audit_record

    def audit_then_linger(**kwargs):
        entry = real_audit(**kwargs)
        if threading.current_thread().name == thread_name and kwargs["action"].startswith("order."):
            time.sleep(seconds)
        return entry

    monkeypatch.setattr(services, "audit_record", audit_then_linger)


@postgresql_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_delete_during_a_decision_waits_for_it_instead_of_deadlocking(actors, monkeypatch, decision):
    pool = services.pool_create(user=actors["lead"], document=make_document("dl", nodeCount={"min": 1, "max": 2}), now=T0)
    order = pool.orders.get()
    _slow_after(monkeypatch, "decider")

    def decide():
        fresh = PoolOrder.objects.get(pk=order.pk)
        if decision == "approve":
            services.order_approve(user=actors["admin"], order=fresh)
        else:
            services.order_reject(user=actors["admin"], order=fresh, reason="not this month")

    def delete():
        time.sleep(0.3)  # while the decider lingers
        services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk))

    assert _threads(("decider", decide), ("deleter", delete)) == {}
    order.refresh_from_db()
    assert GpuNodePool.objects.get(pk=pool.pk).deleted_at is not None
    if decision == "approve":  # approved first, then withdrawn by the delete: nothing is left to pay
        assert (order.status, order.reason) == ("Withdrawn", "the pool was deleted")
        assert PoolEvent.objects.filter(pool=pool, reason="OrderWithdrawn").count() == 1
    else:
        assert (order.status, order.reason) == ("Rejected", "not this month")


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_decision_after_a_delete_is_a_conflict(actors, monkeypatch):
    pool = services.pool_create(user=actors["lead"], document=make_document("dl2", nodeCount={"min": 1, "max": 2}), now=T0)
    order = pool.orders.get()
    real_delete_audit = services.audit_record

    def delete_then_linger(**kwargs):
        entry = real_delete_audit(**kwargs)
        if kwargs["action"] == "pool.delete":
            time.sleep(1.0)
        return entry

    monkeypatch.setattr(services, "audit_record", delete_then_linger)

    def approve():
        time.sleep(0.3)  # the delete holds the pool's row now
        services.order_approve(user=actors["admin"], order=PoolOrder.objects.get(pk=order.pk))

    errors = _threads(("deleter", lambda: services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk))), ("approver", approve))
    assert list(errors) == ["approver"] and isinstance(errors["approver"], ConflictError)
    assert "is Withdrawn, not Pending" in str(errors["approver"])
    assert PoolOrder.objects.get(pk=order.pk).status == "Withdrawn"


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_delete_during_a_payment_never_withdraws_an_order_the_cloud_debited(actors, monkeypatch):
    pool = approved_pool(actors, make_document("pay", nodeCount={"min": 1, "max": 1}))
    order = pool.orders.get()
    real_pay = SimulatedCloud.pay

    def pay_slowly(self, **kwargs):
        payment = real_pay(self, **kwargs)
        time.sleep(1.0)  # debited; the order is not marked Paid yet
        return payment

    monkeypatch.setattr(SimulatedCloud, "pay", pay_slowly)

    def delete():
        time.sleep(0.3)
        services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk))

    assert _threads(("controller", lambda: reconcile(pool, T0)), ("deleter", delete)) == {}
    order.refresh_from_db()
    assert order.status == "Paid" and SimPayment.objects.filter(order_id=order.pk).exists()
    assert not PoolEvent.objects.filter(pool=pool, reason="OrderWithdrawn").exists()


@postgresql_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("writer", ["resize", "approve", "payment"])
def test_writers_of_orders_take_the_quota_rows_before_the_pool_as_a_scale_up_does(actors, writer):
    """A scale-up locks the quota rows, then writes the pool's row (its nodes and history): a
    writer of orders that held the pool's row and then waited for the quota deadlocked with it."""
    pool = services.pool_create(user=actors["lead"], document=make_document("lo", nodeCount={"min": 1, "max": 4}), now=T0)
    if writer != "approve":
        services.order_approve(user=actors["admin"], order=pool.orders.get(), now=T0)

    def scale_up():
        with transaction.atomic():
            services.quota_limits_lock(region="cn-east-2", gpu_model_id=pool.gpu_model_id, team_id=pool.team_id)
            time.sleep(0.6)  # the other writer starts meanwhile
            GpuNodePool.objects.filter(pk=pool.pk).update(scaling_history={})

    def write():
        time.sleep(0.2)
        if writer == "resize":
            services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), min_nodes=2)
        elif writer == "approve":
            services.order_approve(user=actors["admin"], order=PoolOrder.objects.get(pool=pool))
        else:
            reconcile(pool, T0)

    assert _threads(("autoscaler", scale_up), ("writer", write)) == {}
    expected = {"resize": ("Approved", 2), "approve": ("Approved", 1), "payment": ("Paid", 1)}[writer]
    assert list(pool.orders.order_by("pk").values_list("status", flat=True))[0] == expected[0]
    assert ordered_baseline(pool=pool) == expected[1]
