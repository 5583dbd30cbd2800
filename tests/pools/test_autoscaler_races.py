"""Two workers autoscale two pools of one team at once: one Pending pod buys one node, as in one
pass (CA expands one node group per pod). The decision and the purchase of a team's pools are
serialised by the team's row, so the second worker sees the first one's Ordering node as
upcoming. The pools are in two regions: their quota rows, which a scale-up locks too, do not
serialise them. PostgreSQL only (SQLite has one writer)."""

from __future__ import annotations

import threading
from functools import partial

import pytest
from django.db import connection

from pools.controllers import autoscaler
from pools.controllers.autoscaler import pool_autoscale
from pools.models import Node
from tests.pools.autoscaler_helpers import memory_used
from tests.pools.pod_helpers import T0, submit
from tests.pools.test_autoscaler_ca_rules import fill, train_pool
from tests.race import concurrently

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has one writer)")


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_two_workers_autoscaling_two_pools_of_a_team_buy_one_node_for_one_pod(actors, monkeypatch):
    pools = train_pool(actors, name="pool-a", nodes=1), train_pool(actors, name="pool-b", nodes=1, region="cn-north-1a")
    fill(actors)
    submit(actors["member"], "queued-0", gpus=8)
    for pool in pools:
        memory_used(pool, 95)
    barrier, real_lock = threading.Barrier(2, timeout=30), autoscaler.quota_limits_lock

    def meet_then_lock(**kwargs):
        barrier.wait()  # both workers decided from what they read; neither has bought yet
        return real_lock(**kwargs)

    monkeypatch.setattr(autoscaler, "quota_limits_lock", meet_then_lock)
    outcomes = concurrently(*[partial(pool_autoscale, pool_id=pool.pk, now=T0) for pool in pools])  # raises what either met
    results = {pool.name: outcome for pool, outcome in zip(pools, outcomes, strict=True)}
    assert sorted(r.reason for r in results.values()) == ["PodsFitUpcomingOrFreeCapacity", "ScaledUp"], results
    assert Node.objects.filter(billing=Node.Billing.ON_DEMAND).count() == 1
