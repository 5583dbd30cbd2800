"""The paid capacity a pool's delete leaves unfilled is found in a constant number of queries
(seed C1, D2; design §5): the delete (`services.pools._order_unfilled`) and the controller's
Deleting pass (`lifecycle._unused_capacity_record`) read every Paid capacity order of the pool
with its unopened ledger slots in one query (`lease_ledger.capacity_orders_unopened`), not two
queries per order, so a pool with a long order history costs its delete no more than a new one.
The unopened count is the one the ledger always used: a slot no node holds on the ledger, none
for an order paid before the ledger (nodes without periods)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import lease_ledger
from pools.controllers import lifecycle
from pools.controllers.context import ReconcilePass
from pools.core.spec import parse_document
from pools.models import GpuNodePool, Node, PoolOrder
from pools.providers import get_cluster_backend
from pools.providers.simulated import SimulatedCloud
from pools.selectors.pools import catalog_current
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool

LEASE_END = T0.replace(year=2027, month=1)


def _order_add(pool: GpuNodePool, template: PoolOrder, *, kind: str = "grow", status: str = "Paid", nodes: int = 1, minutes: int = 0) -> PoolOrder:
    """A further order of the pool, like its create order (kind, status and size as given)."""
    return PoolOrder.objects.create(
        pool=pool, kind=kind, status=status, node_count=nodes, gpus=template.gpus, lease_type=template.lease_type,
        lease_months=template.lease_months, unit_monthly_price=template.unit_monthly_price, discount=template.discount,
        amount=template.amount, currency=template.currency, created_at=T0 + timedelta(minutes=minutes),
    )  # fmt: skip


def _holders_add(order: PoolOrder, count: int, *, ledger: bool = True) -> None:
    """`count` nodes of the order; each opens the order's next slot on the ledger (the real
    `holder_add`), or none (`ledger=False`: an order paid before the ledger existed)."""
    pool = order.pool
    for name in lifecycle.node_names_next(pool, count):
        node = Node.objects.create(
            pool=pool, name=name, phase=Node.Phase.READY, zone=pool.zone, gpu_count=pool.node_type.gpu_count,
            order=order, lease_start=T0, lease_end=LEASE_END, created_at=T0,
        )  # fmt: skip
        if ledger:
            lease_ledger.holder_add(node, order, vacated=None, now=T0)


def _deleting_pool(actors, name: str, orders: int) -> GpuNodePool:
    """A Deleting pool with `orders` Paid capacity orders (its create order and grows), every
    slot of each held by a node on the ledger."""
    pool = approved_pool(actors, make_document(name, nodeCount={"min": 1, "max": 10}))
    create = pool.orders.get()
    PoolOrder.objects.filter(pk=create.pk).update(status=PoolOrder.Status.PAID)
    _holders_add(create, create.node_count)
    for i in range(1, orders):
        _holders_add(_order_add(pool, create, minutes=i), 1)
    GpuNodePool.objects.filter(pk=pool.pk).update(phase=GpuNodePool.Phase.DELETING)
    return GpuNodePool.objects.select_related("team", "gpu_model", "node_type", "zone").get(pk=pool.pk)


def _queries(call) -> int:
    with CaptureQueriesContext(connection) as ctx:
        call()
    return len(ctx.captured_queries)


@pytest.mark.django_db
def test_the_unfilled_orders_of_a_deleting_pool_are_read_in_the_same_queries_for_1_or_5_orders(actors):
    small, large = _deleting_pool(actors, "one-order", 1), _deleting_pool(actors, "five-orders", 5)
    assert large.orders.filter(status="Paid").count() == 5
    nodes, events = Node.objects.count(), large.events.count()

    def record(pool):
        p = ReconcilePass(pool=pool, spec=parse_document(pool.document, catalog_current()), now=T0, cloud=SimulatedCloud(), cluster=get_cluster_backend())
        return lambda: lifecycle._unused_capacity_record(p)

    assert services._order_unfilled(small) is None and services._order_unfilled(large) is None
    assert _queries(lambda: services._order_unfilled(small)) == _queries(lambda: services._order_unfilled(large)) == 1
    assert _queries(record(small)) == _queries(record(large)) == 1
    # Every slot was filled: nothing is recorded as released unused.
    assert (Node.objects.count(), large.events.count()) == (nodes, events)


@pytest.mark.django_db
def test_the_unopened_slots_are_counted_as_the_ledger_counts_them(actors):
    pool = approved_pool(actors, make_document("mixed", nodeCount={"min": 1, "max": 10}))
    create = pool.orders.get()
    PoolOrder.objects.filter(pk=create.pk).update(status=PoolOrder.Status.PAID)
    _holders_add(create, create.node_count)  # filled
    half = _order_add(pool, create, nodes=3, minutes=1)
    _holders_add(half, 1)  # 2 of 3 slots unopened
    legacy = _order_add(pool, create, nodes=2, minutes=2)
    _holders_add(legacy, 1, ledger=False)  # paid before the ledger: billed from its lease columns
    unfilled = _order_add(pool, create, nodes=2, minutes=3)  # paid as the delete began: no node yet
    _order_add(pool, create, status="Approved", nodes=4, minutes=4)  # not paid
    _order_add(pool, create, kind="renew", nodes=4, minutes=5)  # a renewal holds no new slot

    rows = list(lease_ledger.capacity_orders_unopened(pool).values_list("pk", "slots_unopened"))
    assert rows == [(create.pk, 0), (half.pk, 2), (legacy.pk, 0), (unfilled.pk, 2)]
    assert [lease_ledger.slots_unopened(o) for o in (create, half, legacy, unfilled)] == [0, 2, 0, 2]
    assert services._order_unfilled(pool) == half.pk, "the oldest unfilled order is named"
