"""Orders against what the pool and the quotas allow now: a lowered `nodeCount.min` trims the
orders not paid yet, an approval refuses an order past the baseline, a deleted pool withdraws
its approved orders, and the payment re-check counts the same scopes as the approval (region
and team) over what is decided, not other teams' requests."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing.models import Account
from pools.core.errors import ConflictError
from pools.models import GpuNodePool, PoolEvent, PoolOrder, Quota
from pools.models.cloud import SimPayment
from pools.selectors.diagnose import pool_diagnose
from pools.selectors.pools import ordered_baseline
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, live_nodes, reconcile, run_until

pytestmark = pytest.mark.django_db


def _run(pool, start, *, passes=60):
    now = start
    for _ in range(passes):
        reconcile(pool, now)
        now += timedelta(seconds=15)
    return now


def _balance():
    return Account.objects.get(name="default").balance


def _messages(pool, reason):
    return list(PoolEvent.objects.filter(pool=pool, reason=reason).order_by("id").values_list("message", flat=True))


# ---------------------------------------------------------------------------------------------
# A lowered nodeCount.min


def test_lowering_min_below_a_pending_order_reduces_it_and_only_the_wanted_node_is_paid(actors):
    pool = services.pool_create(user=actors["lead"], document=make_document("shrunk", nodeCount={"min": 2, "max": 2}), now=T0)
    order = pool.orders.get()
    per_node = order.amount / 2
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1, max_nodes=1, now=T0)
    order.refresh_from_db()
    assert (order.status, order.node_count, order.gpus, order.amount) == ("Pending", 1, 8, per_node)
    assert _messages(pool, "OrderReduced") == [f"Order #{order.pk} reduced from 2 to 1 node(s), {per_node * 2} → {per_node} CNY: nodeCount.min lowered to 1"]
    balance = _balance()
    services.order_approve(user=actors["admin"], order=order, now=T0)
    _run(pool, T0)
    assert balance - _balance() == order.amount == SimPayment.objects.get(order_id=order.pk).amount == per_node
    assert len(live_nodes(pool)) == 1


def test_lowering_min_withdraws_whole_orders_newest_first_and_reduces_the_next(actors):
    pool = approved_pool(actors, make_document("steps", nodeCount={"min": 1, "max": 8}))
    _run(pool, T0, passes=40)
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=3, now=T0)  # grow by 2
    services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), min_nodes=4, now=T0)  # grow by 1
    older, newer = pool.orders.filter(kind="grow").order_by("pk")
    services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), min_nodes=2, now=T0)
    older.refresh_from_db()
    newer.refresh_from_db()
    assert (newer.status, newer.reason) == ("Withdrawn", "nodeCount.min lowered to 2")
    assert (older.status, older.node_count) == ("Pending", 1)
    assert ordered_baseline(pool=pool) == 2
    assert _messages(pool, "OrderWithdrawn") == [f"Order #{newer.pk} (1 node(s), {newer.amount} CNY) withdrawn: nodeCount.min lowered to 2"]


def test_lowering_min_reduces_an_approved_order_not_paid_yet(actors):
    pool = approved_pool(actors, make_document("approved", nodeCount={"min": 2, "max": 2}))
    order = pool.orders.get()
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1, max_nodes=1, now=T0)
    order.refresh_from_db()
    assert (order.status, order.node_count) == ("Approved", 1)
    balance = _balance()
    _run(pool, T0)
    assert balance - _balance() == order.amount and len(live_nodes(pool)) == 1


def test_lowering_min_to_nothing_withdraws_an_approved_order_and_nothing_is_paid(actors):
    pool = approved_pool(actors, make_document("zero", nodeCount={"min": 1, "max": 1}))
    order = pool.orders.get()
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=0, now=T0)
    order.refresh_from_db()
    assert (order.status, order.reason) == ("Withdrawn", "nodeCount.min lowered to 0")
    _run(pool, T0, passes=5)
    assert not SimPayment.objects.exists() and live_nodes(pool) == []


def test_a_paid_order_is_left_alone_when_min_is_lowered(actors):
    pool = approved_pool(actors, make_document("paid", nodeCount={"min": 2, "max": 2}))
    _run(pool, T0, passes=40)
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1, now=T0)
    assert pool.orders.get().status == "Paid" and not PoolEvent.objects.filter(reason__in=["OrderReduced", "OrderWithdrawn"]).exists()


def test_lowering_min_back_answers_with_the_status_after_the_withdrawal_and_no_failed_scale_up(actors):
    """The lead asks for a third node, then changes their mind: the grow order is withdrawn in
    that request, so the status it answers with (the CLI's `scale` line, the API's, the page's)
    no longer says it awaits approval, and the self-check sees no failed scale-up (T1, T5)."""
    pool = approved_pool(actors, make_document("undo", nodeCount={"min": 2, "max": 8}))
    ready = run_until(pool, T0)
    services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), min_nodes=3, now=ready)
    reconcile(pool, ready)
    grow = pool.orders.get(kind="grow")
    assert GpuNodePool.objects.get(pk=pool.pk).pending_reason == f"OrderPending: order #{grow.pk} awaits approval by a platform admin"
    resized = services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), min_nodes=2, now=ready + TICK)
    stored = GpuNodePool.objects.get(pk=pool.pk)
    assert pool.orders.get(pk=grow.pk).status == "Withdrawn"
    assert (resized.phase, resized.pending_reason) == (stored.phase, stored.pending_reason) == ("Ready", "")
    assert [c["status"] for c in stored.conditions if c["type"] == "Ready"] == ["True"]
    scale_up = next(c for c in pool_diagnose(pool=stored, now=ready + TICK).checks if c.id == "scale-up")
    assert (scale_up.status, scale_up.found.startswith("No quota")) == ("ok", True)
    assert reconcile(pool, ready + 2 * TICK).phase == "Ready"  # the next pass agrees, and says Ready once
    ready_events = PoolEvent.objects.filter(pool=pool, reason="PoolReady").values_list("message", "count")
    assert list(ready_events) == [("All 2 node(s) of undo are Ready", 2)]  # the first Ready, then after the withdrawal

def test_approving_an_order_past_the_pools_baseline_is_a_conflict_that_changes_nothing(actors, api):
    pool = approved_pool(actors, make_document("past", nodeCount={"min": 2, "max": 4}))
    # An order from before the baseline was trimmed (or from a race): two more nodes on a pool
    # whose min is 2 and whose 2 are approved already.
    first = pool.orders.get()
    extra = PoolOrder.objects.create(
        pool=pool, kind="grow", node_count=2, gpus=16, lease_type=first.lease_type, lease_months=first.lease_months,
        unit_monthly_price=first.unit_monthly_price, discount=first.discount, amount=first.amount, currency=first.currency,
    )  # fmt: skip
    events = PoolEvent.objects.count()
    with pytest.raises(ConflictError, match=f"order #{extra.pk} asks for 2 monthly node\\(s\\), but pool past wants 0 more: nodeCount.min is 2 and 2 are already approved or bought"):
        services.order_approve(user=actors["admin"], order=extra, now=T0)
    response = api("admin").post(f"/api/v1/orders/{extra.pk}/approve/")
    assert response.status_code == 409 and "reject this order" in response.json()["errors"][0]["message"]
    extra.refresh_from_db()
    assert extra.status == "Pending" and PoolEvent.objects.count() == events


# ---------------------------------------------------------------------------------------------
# Deleting


def test_deleting_a_pool_withdraws_its_approved_order_before_payment(actors):
    pool = approved_pool(actors, make_document("gone", nodeCount={"min": 1, "max": 1}))
    order = pool.orders.get()
    services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), now=T0)
    order.refresh_from_db()
    assert (order.status, order.reason) == ("Withdrawn", "the pool was deleted")
    assert _messages(pool, "OrderWithdrawn") == [f"Order #{order.pk} withdrawn before payment: the pool is being deleted"]
    _run(pool, T0, passes=5)
    assert not SimPayment.objects.exists() and not PoolOrder.objects.filter(status="Approved").exists()


# ---------------------------------------------------------------------------------------------
# The payment re-check


def test_a_team_quota_lowered_after_approval_stops_payment(actors, teams):
    pool = services.pool_create(user=actors["lead"], document=make_document("tq", nodeCount={"min": 2, "max": 2}), now=T0)
    team_quota = Quota.objects.create(region="cn-east-2", gpu_model=pool.gpu_model, team=teams["algorithm"], limit_gpus=16)
    services.order_approve(user=actors["admin"], order=pool.orders.get(), now=T0)
    Quota.objects.filter(pk=team_quota.pk).update(limit_gpus=8)
    result = reconcile(pool, T0)
    assert result.pending_reason == "QuotaExceeded: cn-east-2 A100_80G for team algorithm requested 16, in use 0, limit 8"
    assert not SimPayment.objects.exists() and pool.orders.get().status == "Approved"
    Quota.objects.filter(pk=team_quota.pk).update(limit_gpus=16)
    reconcile(pool, T0 + timedelta(seconds=15))
    assert pool.orders.get().status == "Paid"
    assert _messages(pool, "QuotaValidated")[-1] == (
        f"Quota allows order #{pool.orders.get().pk}: cn-east-2 A100_80G 16 of 48 GPU(s); "
        "cn-east-2 A100_80G for team algorithm 16 of 16 GPU(s) in use or approved with it"
    )


def test_another_teams_pending_request_does_not_hold_back_an_approved_order(actors):
    a = approved_pool(actors, make_document("a", nodeCount={"min": 2, "max": 2}))
    services.pool_create(user=actors["other_lead"], document=make_document("b", region="cn-east-2b", nodeCount={"min": 2, "max": 2}), now=T0)
    Quota.objects.filter(region="cn-east-2", gpu_model=a.gpu_model, team__isnull=True).update(limit_gpus=24)  # 16 fits, 32 not
    reconcile(a, T0)
    assert a.orders.get().status == "Paid"


def test_an_approved_order_of_another_team_counts_and_the_reason_says_so(actors):
    b = approved_pool(actors, make_document("b", region="cn-east-2b", nodeCount={"min": 2, "max": 2}))
    a = services.pool_create(user=actors["other_lead"], document=make_document("a", nodeCount={"min": 2, "max": 2}), now=T0)
    services.order_approve(user=actors["admin"], order=a.orders.get(), now=T0)
    Quota.objects.filter(region="cn-east-2", gpu_model=a.gpu_model, team__isnull=True).update(limit_gpus=24)
    assert reconcile(b, T0).pending_reason == "QuotaExceeded: cn-east-2 A100_80G requested 16, in use 0, approved and unpaid 16, limit 24"
    assert b.orders.get().status == "Approved"


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_orders_their_pool_withdrew_the_withdrawn_status_and_back(actors):
    """An earlier release marked a withdrawal only by its reason, with status Rejected (it was
    Pending) or Failed (Approved): `ebcloud order list` said Rejected of an order nobody rejected
    (found by a QA sweep). 0030 gives those the Withdrawn status; a real rejection stays. 0031
    does it again for the rows the earlier release wrote while both ran (a rolling upgrade)."""
    pool = services.pool_create(user=actors["lead"], document=make_document("old", nodeCount={"min": 3, "max": 4}), now=T0)
    made = {
        "pending": ("Rejected", "Withdrawn: nodeCount.min lowered to 2", None),
        "approved": ("Failed", "Withdrawn: the pool was deleted", actors["admin"]),
        "rejected": ("Rejected", "no A100 this month", actors["admin"]),
        "renewal": ("Failed", "Withdrawn: the pool was deleted", None),  # approved when made: no decider
    }
    made_back = {key: (status, reason) for key, (status, reason, _) in made.items()}
    base, ids = pool.orders.get(), {}
    for key, (status, reason, decider) in made.items():
        order = PoolOrder.objects.get(pk=base.pk)
        order.pk, order.status, order.reason, order.decided_by = None, status, reason, decider
        order.kind = PoolOrder.Kind.RENEW if key == "renewal" else order.kind
        order.save()
        ids[key] = order.pk
    executor = MigrationExecutor(connection)
    # The orders as those migrations knew them: today's model reads columns added since (paid_at).
    old = executor.loader.project_state(("pools", "0031_node_cluster_fault_since")).apps.get_model("pools", "PoolOrder")
    try:
        executor.migrate([("pools", "0029_node_cluster_fault")])
        executor = MigrationExecutor(connection)
        executor.migrate([("pools", "0030_order_withdrawn")])
        assert {k: (o.status, o.reason) for k, pk in ids.items() for o in [old.objects.get(pk=pk)]} == {
            "pending": ("Withdrawn", "nodeCount.min lowered to 2"), "approved": ("Withdrawn", "the pool was deleted"), "rejected": ("Rejected", "no A100 this month"),
            "renewal": ("Withdrawn", "the pool was deleted"),
        }  # fmt: skip
        late = old.objects.get(pk=base.pk)  # the earlier release, still running beside the new one, marks one more
        late.pk, late.status, late.reason = None, "Rejected", "Withdrawn: nodeCount.min lowered to 1"
        late.save()
        executor = MigrationExecutor(connection)
        executor.migrate([("pools", "0031_node_cluster_fault_since")])
        assert old.objects.filter(pk=late.pk, status="Withdrawn", reason="nodeCount.min lowered to 1").exists()
        made_back["late"], ids["late"] = ("Rejected", "Withdrawn: nodeCount.min lowered to 1"), late.pk
        executor = MigrationExecutor(connection)
        executor.migrate([("pools", "0029_node_cluster_fault")])
        assert {k: (o.status, o.reason) for k, pk in ids.items() for o in [old.objects.get(pk=pk)]} == made_back
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
