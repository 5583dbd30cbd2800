"""A pool shrunk just before its leases' notice keeps the node it renews (design §3, D2, issue 3 §6).

A pool of two monthly nodes (one order, one lease end) is resized 2 -> 1 minutes before the
notice. The notice pass orders the renewals `nodeCount.min` asks for, then drains the surplus.
Both choices used to go by node name: the node renewed was the one drained, the other reached
its lease end unrenewed and was released, and the pool that asked for one node had none while
the team paid a renewal for a drained node. Like Cluster Autoscaler or Karpenter shrinking a
node group, the pool lets go of the node that is cheapest to lose (its lease ends soonest and is
not renewed) and renews only a node it keeps (`rules.drain_order`, `rules.renewals_chosen`).

The real reconcile passes run at injected moments; the cloud is the simulated one."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing.models import LeasePeriod
from pools.models import Node, PoolEvent, PoolOrder
from pools.models.cloud import SimPayment
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, live_nodes, reconcile, run_until

NOTICE = timedelta(days=3)  # EBCLOUD_LEASE_NOTICE_SECONDS default
LEASE_END = T0.replace(year=2027, month=1)  # monthly lease paid at T0
RENEWED_END = T0.replace(year=2027, month=2)
NOTICE_AT = LEASE_END - NOTICE + timedelta(minutes=1)


def _debited(pool) -> Decimal:
    return sum(SimPayment.objects.filter(order_id__in=pool.orders.values("pk")).values_list("amount", flat=True), Decimal(0))


@pytest.mark.django_db
def test_a_pool_resized_2_to_1_at_lease_notice_keeps_the_node_it_renewed(actors):
    pool = approved_pool(actors, make_document("renewing", autoRenew=True, nodeCount={"min": 2, "max": 2}))
    run_until(pool, T0)
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1, max_nodes=1, now=NOTICE_AT)

    reconcile(pool, NOTICE_AT)  # the notice pass: one renewal, one surplus node drained
    renewal = PoolOrder.objects.get(pool=pool, kind="renew")
    [kept] = live_nodes(pool)
    [drained] = Node.objects.filter(pool=pool, release_reason="ScaledIn")
    assert renewal.node_count == 1
    assert kept.renewal_order_id == renewal.pk, "the renewal is for the node the pool keeps"
    assert drained.renewal_order_id is None and drained.phase == "Terminated"
    said = PoolEvent.objects.get(pool=pool, node=drained, reason="LeaseExpiring").message
    assert said == f"Lease of node {drained.name} ends at 2027-01-01 08:00 UTC and is not renewed (nodeCount.max is 1: it is surplus): it will be drained, then released"

    reconcile(pool, NOTICE_AT + timedelta(minutes=1))  # the renewal is paid
    reconcile(pool, LEASE_END - timedelta(minutes=1))
    run_until(pool, LEASE_END)  # the old lease's end passes: nothing expires
    run_until(pool, LEASE_END + timedelta(minutes=30))

    assert live_nodes(pool) == [Node.objects.get(pk=kept.pk)], "the pool asked for 1 node: it has the renewed one"
    kept.refresh_from_db()
    assert (kept.phase, kept.lease_end, kept.release_reason) == ("Ready", RENEWED_END, "")
    renewal.refresh_from_db()
    assert renewal.status == "Paid"
    # No money went to a drained node: the renewal's one period is the kept node's.
    assert list(LeasePeriod.objects.filter(order=renewal).values_list("node_id", "lease_start", "lease_end", "amount")) == [
        (kept.pk, LEASE_END, RENEWED_END, renewal.amount)
    ]
    drained.refresh_from_db()
    assert drained.lease_end == LEASE_END
    assert not PoolEvent.objects.filter(pool=pool, reason="CapacityReleasedUnused").exists()
    assert _debited(pool) == pool.orders.get(kind="create").amount + renewal.amount
    assert not PoolEvent.objects.filter(pool=pool, reason="LeaseExpired").exists()
