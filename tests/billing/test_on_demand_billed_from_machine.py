"""An on-demand node is billed from when the cloud delivered its machine (`Node.machine_at`),
not from when it was requested: cloud providers bill an on-demand instance from launch, and
docs/guide-finance.md bills an on-demand node "while its machine exists". A burst node the
cloud never sold (out of stock all along) costs nothing, even in an hour metered while it
still waited for its machine (a metered hour is never restated)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from billing import services
from billing.hours import HOUR, hour_overlap
from billing.models import CostRecord, UsageRecord
from pools.controllers import autoscaler
from pools.models import Node
from pools.models.cloud import SimFailure, SimMachine
from pools.providers import simulated
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool, reconcile, run_until

START = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
TEN = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def _burst(actors, name):
    """A pool of 1 to 2 nodes, its first Ready, the cloud out of stock, one burst node
    requested at 10:05."""
    pool = approved_pool(actors, make_document(name, nodeCount={"min": 1, "max": 2}), now=START)
    run_until(pool, START)
    simulated.failure_inject(step="order", times=None)
    [burst] = autoscaler._burst_nodes_create(pool, TEN + timedelta(minutes=5), 1)
    return pool, burst


def _reconcile(pool, start, end):
    now = start
    while now < end:
        reconcile(pool, now)
        now += timedelta(minutes=1)


def _on_demand(node):
    return list(UsageRecord.objects.filter(kind="node", billing_kind="on_demand", node_name=node.name).values_list("hour", "quantity"))


def test_burst_node_never_sold_costs_nothing(actors):
    pool, burst = _burst(actors, "bpool")
    _reconcile(pool, TEN + timedelta(minutes=5), TEN + timedelta(minutes=16))
    burst.refresh_from_db()
    assert (burst.phase, burst.provider_id, burst.machine_at) == (Node.Phase.ORDERING, "", None)
    assert not SimMachine.objects.filter(client_token=burst.name).exists()

    services.meter_hour(hour=TEN)  # while it still waits: never restated

    _reconcile(pool, TEN + timedelta(minutes=16), TEN + timedelta(minutes=30))
    burst.refresh_from_db()
    assert burst.phase == Node.Phase.TERMINATED  # given up: no machine came within 15 minutes
    services.meter_hour(hour=TEN + HOUR)
    assert _on_demand(burst) == []
    assert not CostRecord.objects.filter(billing_kind="on_demand").exists()


def test_burst_node_billed_from_when_its_machine_came(actors):
    pool, burst = _burst(actors, "cpool")
    _reconcile(pool, TEN + timedelta(minutes=5), TEN + timedelta(minutes=9))
    SimFailure.objects.all().delete()  # stock again
    _reconcile(pool, TEN + timedelta(minutes=9), TEN + timedelta(minutes=40))
    burst.refresh_from_db()
    assert burst.provider_id
    assert burst.created_at < burst.machine_at <= TEN + timedelta(minutes=20)

    services.meter_hour(hour=TEN)

    end = burst.terminated_at or TEN + HOUR
    [(hour, quantity)] = _on_demand(burst)
    assert hour == TEN
    assert quantity == hour_overlap(burst.machine_at, end, TEN) < hour_overlap(burst.created_at, end, TEN)
    assert sum(CostRecord.objects.filter(billing_kind="on_demand").values_list("amount", flat=True), Decimal(0)) > 0
