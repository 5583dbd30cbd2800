"""Pool and order services: orders with quotes, quota at request and at approval, decisions (seed O2, T1)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied

from pools.core.errors import ConflictError, QuotaExceeded, ValidationError
from pools.models import AuditEntry, PoolOrder, Quota, Team
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, run_until
from tests.pools.pool_helpers import db_state


def test_creating_the_articles_pool_orders_its_baseline_with_a_quote(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document)
    assert pool.team.slug == "algorithm"
    assert pool.phase == "Pending"
    order = pool.orders.get()
    assert (order.kind, order.status, order.node_count, order.gpus) == ("create", "Pending", 2, 16)
    # 20,000 per 8-card A100 node per month (C2), 2 nodes, monthly lease without discount.
    assert order.amount == Decimal("40000.00") and order.currency == "CNY" and order.lease_months == 1
    assert "OrderPending" in pool.pending_reason and f"#{order.pk}" in pool.pending_reason
    reasons = list(pool.events.order_by("id").values_list("reason", flat=True))
    assert reasons == ["PoolCreated", "QuotaValidated", "OrderRequested"]
    # How much of the quota the order leaves used, not its own size read as headroom (QA sweep).
    assert pool.events.get(reason="QuotaValidated").message == "Quota allows this order's 16 A100_80G GPU(s): cn-east-2 A100_80G 16 of 48 GPU(s) in use or requested with it"


def test_a_yearly_lease_is_quoted_for_twelve_months_with_its_discount(actors, train_document):
    train_document["spec"]["leaseType"] = "yearly"
    order = services.pool_create(user=actors["lead"], document=train_document).orders.get()
    assert order.discount == Decimal("0.1500")
    assert order.amount == Decimal("40000") * Decimal("0.85") * 12


def test_a_pool_without_baseline_needs_no_order(actors):
    pool = services.pool_create(user=actors["lead"], document=make_document("burst-only", nodeCount={"min": 0, "max": 4}))
    assert pool.orders.count() == 0 and pool.phase == "Ready"


def test_quota_refusal_names_region_model_requested_in_use_and_limit(actors):
    """T1: QuotaExceeded: cn-east-2 A100_80G requested 16, in use 0, awaiting approval 40, limit 48
    (the first pool's order awaits approval: it holds the quota, but is not in use)."""
    services.pool_create(user=actors["lead"], document=make_document("big", nodeCount={"min": 5, "max": 6}))
    before = db_state()
    with pytest.raises(QuotaExceeded) as caught:
        services.pool_create(user=actors["other_lead"], document=make_document("more", nodeCount={"min": 2, "max": 6}))
    assert str(caught.value) == "spec.nodeCount.min: QuotaExceeded: cn-east-2 A100_80G requested 16, in use 0, awaiting approval 40, limit 48"
    assert db_state() == before


def test_quota_counts_the_whole_region_not_only_the_zone(actors):
    services.pool_create(user=actors["lead"], document=make_document("east-a", nodeCount={"min": 5, "max": 6}))
    with pytest.raises(QuotaExceeded, match="in use 0, awaiting approval 40"):
        services.pool_create(user=actors["lead"], document=make_document("east-b", region="cn-east-2b", nodeCount={"min": 2, "max": 6}))
    services.pool_create(user=actors["lead"], document=make_document("north", region="cn-north-1a", nodeCount={"min": 2, "max": 6}))


def test_a_team_quota_limits_that_team_alone(actors, teams):
    Quota.objects.create(region="cn-east-2", gpu_model_id=Quota.objects.first().gpu_model_id, team=teams["algorithm"], limit_gpus=16)
    services.pool_create(user=actors["lead"], document=make_document("first", nodeCount={"min": 1, "max": 2}))
    with pytest.raises(QuotaExceeded, match="cn-east-2 A100_80G for team algorithm requested 16, in use 0, awaiting approval 8, limit 16"):
        services.pool_create(user=actors["lead"], document=make_document("second", nodeCount={"min": 2, "max": 2}))
    services.pool_create(user=actors["other_lead"], document=make_document("theirs", nodeCount={"min": 2, "max": 2}))


def test_a_rejected_order_frees_its_quota(actors):
    pool = services.pool_create(user=actors["lead"], document=make_document("big", nodeCount={"min": 5, "max": 6}))
    services.order_reject(user=actors["admin"], order=pool.orders.get(), reason="budget freeze")
    services.pool_create(user=actors["other_lead"], document=make_document("more", nodeCount={"min": 5, "max": 6}))


def test_quota_is_checked_again_at_approval(actors):
    pool = services.pool_create(user=actors["lead"], document=train_document_with(min_nodes=4))
    Quota.objects.filter(region="cn-east-2", team__isnull=True, gpu_model__name="A100_80G").update(limit_gpus=16)
    order = pool.orders.get()
    with pytest.raises(QuotaExceeded, match="requested 32, in use 0, limit 16"):
        services.order_approve(user=actors["admin"], order=order)
    order.refresh_from_db()
    assert order.status == "Pending"


def train_document_with(*, min_nodes: int) -> dict:
    return make_document("train-pool-a", nodeCount={"min": min_nodes, "max": 6})


def test_approving_moves_the_pool_on_and_is_an_event_and_an_audit_entry(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document)
    order = services.order_approve(user=actors["admin"], order=pool.orders.get())
    assert order.status == "Approved" and order.decided_by == actors["admin"] and order.decided_at
    pool.refresh_from_db()
    assert pool.phase == "Provisioning"
    assert pool.events.filter(reason="OrderApproved").exists()
    entry = AuditEntry.objects.get(action="order.approved")
    assert entry.actor == actors["admin"] and entry.before == {"status": "Pending"}


def test_approving_twice_or_approving_a_rejected_order_is_a_conflict(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document)
    order = pool.orders.get()
    services.order_approve(user=actors["admin"], order=order)
    with pytest.raises(ConflictError, match="already decided"):
        services.order_approve(user=actors["admin"], order=order)
    other = services.pool_create(user=actors["other_lead"], document=make_document("other", region="cn-north-1a"))
    rejected = services.order_reject(user=actors["admin"], order=other.orders.get(), reason="no")
    with pytest.raises(ConflictError):
        services.order_approve(user=actors["admin"], order=rejected)


def test_a_stale_copy_of_an_order_cannot_be_decided_twice(actors, train_document):
    """Two admins deciding at once: the conditional UPDATE lets one win."""
    pool = services.pool_create(user=actors["lead"], document=train_document)
    copy_one, copy_two = PoolOrder.objects.get(pool=pool), PoolOrder.objects.get(pool=pool)
    services.order_approve(user=actors["admin"], order=copy_one)
    with pytest.raises(ConflictError):
        services.order_reject(user=actors["admin"], order=copy_two, reason="late")
    assert PoolOrder.objects.get(pool=pool).status == "Approved"


def test_rejecting_needs_a_reason_and_tells_the_lead(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document)
    order = pool.orders.get()
    with pytest.raises(ValidationError) as caught:
        services.order_reject(user=actors["admin"], order=order, reason="  ")
    assert caught.value.errors[0].field == "reason"
    services.order_reject(user=actors["admin"], order=order, reason="over budget this quarter")
    pool.refresh_from_db()
    assert pool.pending_reason == "OrderRejected: over budget this quarter"
    assert pool.events.get(reason="OrderRejected").type == "Warning"


@pytest.mark.parametrize("role", ["lead", "member", "finance", "other_lead"])
def test_only_admins_decide_orders(actors, train_document, role):
    order = services.pool_create(user=actors["lead"], document=train_document).orders.get()
    with pytest.raises(PermissionDenied):
        services.order_approve(user=actors[role], order=order)
    with pytest.raises(PermissionDenied):
        services.order_reject(user=actors[role], order=order, reason="x")


def test_raising_min_orders_the_difference_and_lowering_orders_nothing(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document)
    services.order_approve(user=actors["admin"], order=pool.orders.get())
    pool = services.pool_resize(user=actors["lead"], pool=pool, min_nodes=4, max_nodes=6)
    grow = pool.orders.get(kind="grow")
    assert (grow.node_count, grow.gpus, grow.status) == (2, 16, "Pending")
    assert pool.generation == 2
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1)
    assert pool.orders.count() == 2


def test_saving_again_after_a_rejection_requests_the_baseline_again(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document)
    services.order_reject(user=actors["admin"], order=pool.orders.get(), reason="wait a week")
    services.pool_update(user=actors["lead"], pool=pool, document=train_document)
    assert pool.orders.filter(status="Pending", node_count=2).count() == 1


def test_immutable_fields_cannot_change(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document)
    changed = make_document("train-pool-a", gpuModel="H100_80G", region="cn-east-2b")
    before = db_state()
    with pytest.raises(ValidationError) as caught:
        services.pool_update(user=actors["lead"], pool=pool, document=changed)
    assert {e.field for e in caught.value.errors} == {"spec.gpuModel", "spec.region"}
    assert db_state() == before


def test_the_team_comes_from_the_creators_memberships(actors, teams, train_document):
    with pytest.raises(ValidationError, match="cannot create pools for team 'inference'"):
        services.pool_create(user=actors["lead"], document=train_document, team_slug="inference")
    with pytest.raises(PermissionDenied):
        services.pool_create(user=actors["member"], document=train_document)
    with pytest.raises(PermissionDenied):
        services.pool_create(user=actors["finance"], document=train_document)
    third = Team.objects.create(name="Research", slug="research")
    actors["lead"].memberships.create(team=third, role="lead")
    lead = type(actors["lead"]).objects.get(pk=actors["lead"].pk)
    with pytest.raises(ValidationError, match="several teams"):
        services.pool_create(user=lead, document=train_document)
    assert services.pool_create(user=lead, document=train_document, team_slug="research").team == third


def test_a_second_pool_with_a_live_name_is_a_conflict_but_a_deleted_name_is_free(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document)
    with pytest.raises(ConflictError):
        services.pool_create(user=actors["other_lead"], document=make_document("train-pool-a", region="cn-north-1a"))
    deleted = services.pool_delete(user=actors["lead"], pool=pool)
    assert deleted.deleted_at is not None
    assert deleted.orders.get().status == "Withdrawn"
    services.pool_create(user=actors["lead"], document=train_document)


def test_members_cannot_change_their_teams_pools(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document)
    with pytest.raises(PermissionDenied):
        services.pool_resize(user=actors["member"], pool=pool, max_nodes=3)
    with pytest.raises(PermissionDenied):
        services.pool_delete(user=actors["member"], pool=pool)


def test_an_update_that_files_or_withdraws_an_order_answers_with_the_status_that_names_it(actors):
    """`ebcloud node-pool scale --min`, `apply` and PUT print the pool's status from the answer:
    it said Ready with no reason although the update had just filed an order to approve, and
    after a rejection named the rejected order instead of the new one (found by a QA sweep)."""
    pool = approved_pool(actors, make_document("grown", nodeCount={"min": 1, "max": 4}))
    run_until(pool, T0)
    pool.refresh_from_db()
    assert pool.phase == "Ready"
    grown = services.pool_update(user=actors["lead"], pool=pool, document={**pool.document, "spec": {**pool.document["spec"], "nodeCount": {"min": 2, "max": 4}}})
    filed = grown.orders.get(status="Pending")
    assert grown.phase == "Scaling" and f"order #{filed.pk} awaits approval" in grown.pending_reason
    services.order_reject(user=actors["admin"], order=filed, reason="no A100 this month")
    grown.refresh_from_db()
    again = services.pool_update(user=actors["lead"], pool=grown, document={**grown.document, "spec": {**grown.document["spec"], "nodeCount": {"min": 2, "max": 5}}})
    refiled = again.orders.get(status="Pending")
    assert f"order #{refiled.pk} awaits approval" in again.pending_reason and f"#{filed.pk}" not in again.pending_reason
    both = services.pool_update(user=actors["lead"], pool=again, document={**again.document, "spec": {**again.document["spec"], "nodeCount": {"min": 3, "max": 5}}})
    filed = both.orders.filter(status="Pending").order_by("pk").values_list("pk", flat=True)
    assert f"OrderPending: orders #{filed[0]}, #{filed[1]} await approval" in both.pending_reason  # the order just filed too (QA sweep)
    shrunk = services.pool_update(user=actors["lead"], pool=both, document={**both.document, "spec": {**both.document["spec"], "nodeCount": {"min": 1, "max": 5}}})
    assert (shrunk.phase, shrunk.pending_reason) == ("Ready", "")


def test_lowering_min_after_a_rejection_answers_with_the_status_it_leaves(actors):
    """After a rejected order, `scale --min 0` answered "Pending, OrderRejected" (ordered and the
    new min were both 0, so the status was not written anew) until the next pass: found by a
    hostile-input probe."""
    pool = services.pool_create(user=actors["lead"], document=make_document("refused", nodeCount={"min": 1, "max": 3}))
    services.order_reject(user=actors["admin"], order=pool.orders.get(), reason="no budget")
    pool.refresh_from_db()
    assert pool.pending_reason.startswith("OrderRejected")
    lowered = services.pool_update(user=actors["lead"], pool=pool, document={**pool.document, "spec": {**pool.document["spec"], "nodeCount": {"min": 0, "max": 3}}})
    assert (lowered.phase, lowered.pending_reason) == ("Ready", "")
