"""A renewal paid after the node it renews left (seed C1, D2; design §3): money must reconcile,
what the cloud debited for a pool equals what its lease ledger charges back.

An autoRenew renewal is ordered for a node days before its lease ends and is normally paid on
the next pass. It can be settled later: the cloud refuses it for want of funds (retried every
pass), or a worker dies after the cloud debited it (it stays Paying; the next pass settles it).
Meanwhile its node may leave: drained as surplus, reclaimed and replaced. The renewal is then
`Paid` all the same, and its debit must still reach the ledger:

- a node that left for good holds its renewed lease as idle capacity, charged to the pool's
  team like a released node's lease (`CapacityReleasedUnused`), as an order paid as the pool's
  delete began is (tests/pools/test_order_paid_during_delete.py);
- a node replaced in its slot hands its renewal to its replacement, which runs on the renewed
  lease: the team pays once for the slot's renewal, not a second renewal for the replacement.

The cloud is the simulated one (its `pay_lost` failure: debited, the answer never comes back);
the database, the controller and the ledger are the real ones."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection

from billing import metering
from billing.hours import HOUR, ceil_hour, floor_hour
from billing.models import Account, LeasePeriod
from pools.controllers import lifecycle
from pools.models import Node, PoolEvent, PoolOrder
from pools.models.cloud import SimPayment
from pools.providers import get_cloud_provider, get_cluster_backend, simulated
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, live_nodes, reconcile, run_until
from tests.race import concurrently

NOTICE = timedelta(days=3)  # EBCLOUD_LEASE_NOTICE_SECONDS default
LEASE_END = T0.replace(year=2027, month=1)  # monthly lease paid at T0
RENEWED_END = T0.replace(year=2027, month=2)
NOTICE_AT = LEASE_END - NOTICE + timedelta(minutes=1)

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has one writer)")


def _debited(pool) -> Decimal:
    return sum(SimPayment.objects.filter(order_id__in=pool.orders.values("pk")).values_list("amount", flat=True), Decimal(0))


def _on_the_ledger(pool) -> Decimal:
    """The debits the pool's ledger holds: each share of each order once (a replacement's
    period is the rest of the vacated node's, the same share)."""
    shares = {(o, slot, start): amount for o, slot, start, amount in LeasePeriod.objects.filter(node__pool=pool).values_list("order_id", "slot", "lease_start", "amount")}
    return sum(shares.values(), Decimal(0))


def _charged(pool, first, last) -> Decimal:
    """The pool's node-hours in [first, last), priced by metering's node collection."""
    total, hour = Decimal(0), first
    while hour < last:
        total += sum((r.amount for r in metering.node_usage_collect(hour=hour).records if r.pool_id == pool.pk), Decimal(0))
        hour += HOUR
    return total


def _passes(pool, start, *, until) -> None:
    """A pass every 15 s of virtual time from `start` to `until`."""
    now = start
    while now <= until:
        reconcile(pool, now)
        now += TICK


def _scaled_in_as_its_renewal_is_ordered(actors):
    """A pool of two monthly nodes whose leases' notice orders one renewal of both, refused for
    want of funds; the pool is resized to one meanwhile. Both nodes are renewed, so the surplus
    drain takes one of them all the same (it has no pods: released at once); a pool shrunk
    before its renewal is ordered renews only the node it keeps (test_scale_in_at_lease_notice.py).
    Funds back, the next pass's payment is debited and its answer lost (the worker died): the
    renewal is left Paying, one of its nodes Terminated."""
    pool = approved_pool(actors, make_document("renewing", autoRenew=True, nodeCount={"min": 2, "max": 2}))
    run_until(pool, T0)
    reconcile(pool, NOTICE_AT)
    renewal = PoolOrder.objects.get(pool=pool, kind="renew")
    assert renewal.node_count == 2
    balance = Account.objects.get(name="default").balance
    Account.objects.filter(name="default").update(balance=0)
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1, max_nodes=1, now=NOTICE_AT + timedelta(seconds=30))
    reconcile(pool, NOTICE_AT + timedelta(seconds=30))  # the payment is refused; the surplus node is drained
    gone = Node.objects.get(pool=pool, release_reason="ScaledIn")
    assert (gone.phase, gone.renewal_order_id) == ("Terminated", renewal.pk)
    assert PoolOrder.objects.get(pk=renewal.pk).status == "Approved"
    Account.objects.filter(name="default").update(balance=balance)
    simulated.failure_inject(step=simulated.PAY_LOST, token_prefix=str(renewal.pk))
    with pytest.raises(TimeoutError):
        reconcile(pool, NOTICE_AT + timedelta(minutes=1))
    renewal.refresh_from_db()
    assert renewal.status == "Paying" and SimPayment.objects.filter(order_id=renewal.pk).exists()
    return pool, renewal, gone


@pytest.mark.django_db
def test_a_renewal_settled_after_its_node_was_released_is_charged_back_as_unused_capacity(actors):
    pool, renewal, gone = _scaled_in_as_its_renewal_is_ordered(actors)

    reconcile(pool, NOTICE_AT + timedelta(minutes=2))  # the next pass settles it: Paid

    renewal.refresh_from_db()
    assert renewal.status == "Paid"
    debited = _debited(pool)
    assert _on_the_ledger(pool) == debited, "the renewal's debit reached no ledger row"
    [period] = LeasePeriod.objects.filter(order=renewal, node=gone)
    assert (period.amount, period.lease_start, period.lease_end) == (renewal.amount / 2, LEASE_END, RENEWED_END)
    gone.refresh_from_db()
    assert (gone.phase, gone.lease_end, gone.renewal_order_id) == ("Terminated", RENEWED_END, None)
    # Metering charges the renewed lease, hour by hour, to the pool's team: every debit is charged back.
    assert _charged(pool, floor_hour(T0), ceil_hour(RENEWED_END)) == debited
    [said] = PoolEvent.objects.filter(pool=pool, node=gone, reason="CapacityReleasedUnused")
    assert said.message == (
        f"Order #{renewal.pk} renewed the lease of node {gone.name} after the node was released (ScaledIn); the capacity it bought "
        "until 2027-02-01 08:00 UTC is released unused and stays charged to team algorithm as idle capacity (the cloud refunds nothing)"
    )
    # The node that stays runs on its renewed lease past the old lease's end.
    [kept] = live_nodes(pool)
    reconcile(pool, LEASE_END)
    assert live_nodes(pool) == [kept] and kept.lease_end == RENEWED_END


@pytest.mark.django_db
def test_a_renewal_paid_after_its_node_was_replaced_renews_the_replacement_once(actors):
    """A preemptible node's renewal waits for funds; the node is reclaimed and replaced meanwhile.
    The replacement runs on the lease its slot was renewed for: it takes the renewal over (no
    second renewal is ordered for it), and the renewal's debit is on the ledger, on it."""
    pool = approved_pool(actors, make_document("spot", preemptible=True, autoRenew=True, nodeCount={"min": 1, "max": 1}))
    run_until(pool, T0)
    [node] = live_nodes(pool)
    reconcile(pool, NOTICE_AT)
    renewal = PoolOrder.objects.get(pool=pool, kind="renew")
    balance = Account.objects.get(name="default").balance
    Account.objects.filter(name="default").update(balance=0)
    reclaim_at = simulated.reclaim_inject(provider_id=node.provider_id, now=NOTICE_AT + timedelta(minutes=1))
    _passes(pool, NOTICE_AT + timedelta(minutes=1), until=reclaim_at + timedelta(minutes=20))  # refused for funds; reclaimed; replaced
    node.refresh_from_db()
    [replacement] = live_nodes(pool)
    assert replacement.phase == "Ready"
    assert (node.phase, node.release_reason, node.successor_id) == ("Terminated", "Reclaimed", replacement.pk)
    assert PoolOrder.objects.get(pk=renewal.pk).status == "Approved"

    Account.objects.filter(name="default").update(balance=balance)
    _passes(pool, reclaim_at + timedelta(minutes=21), until=reclaim_at + timedelta(minutes=22))

    assert list(PoolOrder.objects.filter(pool=pool, kind="renew").values_list("pk", "status")) == [(renewal.pk, "Paid")], "one renewal for the slot"
    replacement.refresh_from_db()
    assert replacement.lease_end == RENEWED_END
    assert list(LeasePeriod.objects.filter(order=renewal).values_list("node_id", "amount")) == [(replacement.pk, renewal.amount)]
    assert _on_the_ledger(pool) == _debited(pool) == pool.orders.get(kind="create").amount + renewal.amount
    reconcile(pool, LEASE_END + HOUR)
    assert live_nodes(pool) == [Node.objects.get(pk=replacement.pk)], "the replacement runs on its renewed lease"


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_two_workers_settling_the_renewal_of_a_released_node_put_it_on_the_ledger_once(actors):
    """Two workers whose claims overlapped settle the Paying renewal at once: the order goes
    Paid under the pool's lock once, so its period and its event are written once."""
    pool, renewal, gone = _scaled_in_as_its_renewal_is_ordered(actors)
    moment = NOTICE_AT + timedelta(minutes=2)

    def worker():
        return lifecycle._reconcile(pool.pk, moment, get_cloud_provider(), get_cluster_backend())

    concurrently(worker, worker)

    assert PoolOrder.objects.get(pk=renewal.pk).status == "Paid"
    assert list(LeasePeriod.objects.filter(order=renewal, node=gone).values_list("amount", flat=True)) == [renewal.amount / 2]
    assert _on_the_ledger(pool) == _debited(pool)
    assert PoolEvent.objects.filter(pool=pool, reason="CapacityReleasedUnused").count() == 1
    assert PoolEvent.objects.filter(pool=pool, reason="OrderPaid", message__startswith=f"Order #{renewal.pk} ").count() == 1
