"""Quota room beside each order of the queue (issue 21 item 11, seed T1): the same count as the
quota check, for a whole page of orders in a constant number of queries."""

from __future__ import annotations

import pytest

from pools.core.errors import QuotaExceeded
from pools.core.lifecycle import LEASE_EXPIRED
from pools.models import Node, PoolOrder, Quota
from pools.selectors.pools import orders_for_user, quota_usage
from pools.selectors.quotas import order_quotas
from pools.services import pools as pool_services
from tests.conftest import make_document

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(actors, teams):
    """cn-east-2 A100 (48 GPUs for all teams, 24 for algorithm): train-pool-a asks 16 GPUs and
    one of its nodes has retired (8 back), infer asks 8 and bursts 8 on demand; a rejected
    order holds nothing; an H100 pool in cn-north-1 is a scope of its own."""
    train = pool_services.pool_create(user=actors["lead"], document=make_document("train-pool-a"))
    infer = pool_services.pool_create(user=actors["other_lead"], document=make_document("infer", region="cn-east-2b", nodeCount={"min": 1, "max": 4}))
    dropped = pool_services.pool_create(user=actors["other_lead"], document=make_document("dropped", nodeCount={"min": 1, "max": 2}))
    north = pool_services.pool_create(user=actors["lead"], document=make_document("north", region="cn-north-1a", gpuModel="H100_80G", nodeCount={"min": 1, "max": 1}))
    pool_services.order_reject(user=actors["admin"], order=dropped.orders.get(), reason="not this month")
    Quota.objects.create(region="cn-east-2", gpu_model=train.gpu_model, team=teams["algorithm"], limit_gpus=24)
    Node.objects.create(pool=train, name="train-old", zone=train.zone, gpu_count=8, phase="Terminated", billing="monthly",
                        order=train.orders.get(), release_reason=LEASE_EXPIRED)  # fmt: skip
    Node.objects.create(pool=infer, name="infer-od", zone=infer.zone, gpu_count=8, phase="Ready", billing="on_demand")
    return {"train": train, "infer": infer, "dropped": dropped, "north": north}


def test_each_order_shows_the_room_left_overall_and_for_its_team(actors, queue):
    orders = list(orders_for_user(user=actors["admin"], status=""))
    rooms = order_quotas(orders=orders)
    train = rooms[queue["train"].orders.get().pk]
    # Held: 16 + 8 ordered, 8 bursting, 8 retired: 24 of 48; algorithm's own 16 - 8 = 8 of 24.
    assert (train.overall.limit, train.overall.in_use, train.overall.left) == (48, 24, 24)
    assert (train.team.limit, train.team.in_use, train.team.left) == (24, 8, 16)
    assert train.counted and (train.region, train.gpu_model) == ("cn-east-2", "A100_80G")
    infer = rooms[queue["infer"].orders.get().pk]
    assert infer.overall == train.overall and infer.team is None  # inference has no quota of its own
    assert not rooms[queue["dropped"].orders.get().pk].counted  # a rejected order holds nothing
    north = rooms[queue["north"].orders.get().pk]
    assert (north.region, north.gpu_model, north.overall.limit, north.overall.in_use) == ("cn-north-1", "H100_80G", 8, 8)


def test_the_room_is_the_quota_checks_own_count(actors, queue):
    orders = list(orders_for_user(user=actors["admin"], status=""))
    for order in orders:
        room = order_quotas(orders=orders)[order.pk]
        region, model_id = order.pool.zone.region, order.pool.gpu_model_id
        assert room.overall.in_use == quota_usage(region=region, gpu_model_id=model_id)
        if room.team is not None:
            assert room.team.in_use == quota_usage(region=region, gpu_model_id=model_id, team_id=order.pool.team_id)


def test_a_lowered_quota_shows_how_far_over_it_is_and_no_quota_is_none(actors, queue):
    Quota.objects.filter(region="cn-east-2", team__isnull=True, gpu_model=queue["train"].gpu_model).update(limit_gpus=20)
    Quota.objects.filter(region="cn-north-1", team__isnull=True).delete()
    orders = list(orders_for_user(user=actors["admin"], status=""))
    rooms = order_quotas(orders=orders)
    train = rooms[queue["train"].orders.get().pk]
    assert (train.overall.left, train.overall.over) == (0, 4)
    assert rooms[queue["north"].orders.get().pk].overall is None


def test_a_page_of_orders_takes_four_queries_however_many_orders(actors, queue, django_assert_num_queries):
    for i in range(5):
        pool_services.pool_create(user=actors["lead"], document=make_document(f"more-{i}", region="cn-north-1b", gpuModel="T4", nodeCount={"min": 1, "max": 1}))
    orders = list(orders_for_user(user=actors["admin"], status=""))
    assert len(orders) == 9 and all(o.status in (PoolOrder.Status.PENDING, PoolOrder.Status.REJECTED) for o in orders)
    with django_assert_num_queries(4):
        order_quotas(orders=orders)


def test_a_refused_request_tells_the_gpus_in_use_from_those_awaiting_approval(actors, queue):
    """The team's quota (24) holds train-pool-a's approved, unpaid 16 GPUs and train-pool-b's
    request of 8 awaiting approval: a further request is refused naming each, not "in use 24"."""
    train = queue["train"]
    pool_services.order_approve(user=actors["admin"], order=train.orders.get())  # decided: not awaiting any more
    Node.objects.filter(name="train-old").delete()
    second = pool_services.pool_create(user=actors["lead"], document=make_document("train-pool-b", nodeCount={"min": 1, "max": 2}))
    assert second.orders.get().status == PoolOrder.Status.PENDING
    with pytest.raises(QuotaExceeded) as refused:
        pool_services.pool_create(user=actors["lead"], document=make_document("train-pool-c", nodeCount={"min": 1, "max": 2}))
    assert "for team algorithm requested 8, in use 0, approved and unpaid 16, awaiting approval 8, limit 24" in str(refused.value)
